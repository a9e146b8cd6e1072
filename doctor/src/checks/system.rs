//! The clock source and transparent huge pages.

use super::Ctx;
use crate::finding::{Finding, Level};
use crate::parse;

/// `time.clocksource`: what every timestamp costs.
pub fn clocksource(cx: &Ctx) -> Finding {
    const ID: &str = "time.clocksource";
    const DIR: &str = "/sys/devices/system/clocksource/clocksource0";
    let Some(text) = cx.host.read(&format!("{DIR}/current_clocksource")) else {
        return Finding::new(
            ID,
            Level::Info,
            format!("Cannot read {DIR}/current_clocksource: cannot tell."),
        );
    };
    let Some(current) = parse::first_line(&text) else {
        return Finding::new(
            ID,
            Level::Info,
            "current_clocksource is empty: cannot tell.",
        );
    };
    let available = cx
        .host
        .read(&format!("{DIR}/available_clocksource"))
        .and_then(|t| parse::first_line(&t).map(str::to_string));
    let avail = available
        .as_deref()
        .map_or(String::new(), |a| format!(" (available: {a})"));
    let found = format!("Clock source {current}{avail}.");
    match current {
        "tsc" | "kvm-clock" | "arch_sys_counter" => Finding::new(
            ID,
            Level::Ok,
            format!("{found} Reading the time is a few nanoseconds, without a system call."),
        ),
        "hpet" | "acpi_pm" => {
            let tsc = available
                .as_deref()
                .is_some_and(|a| a.split_whitespace().any(|w| w == "tsc"));
            let fix = if tsc {
                format!(
                    "echo tsc > {DIR}/current_clocksource (as root), and `clocksource=tsc` \
                     on the kernel command line to keep it."
                )
            } else {
                "The kernel found the TSC unusable (see `dmesg | grep -i clocksource`); \
                 `tsc=reliable` on the kernel command line overrides that when the TSC is \
                 known to be stable."
                    .to_string()
            };
            Finding::new(ID, Level::Warn, found)
                .why(format!(
                    "Gapura reads the clock for every timeout and log line: with {current} \
                     each read is a slow hardware access (a microsecond or more) instead of \
                     a few nanoseconds."
                ))
                .fix(fix)
        }
        _ => Finding::new(ID, Level::Info, found).why(
            "Not a clock source doctor knows the cost of; tsc (or kvm-clock in a virtual \
             machine) is the fast one.",
        ),
    }
}

/// `mem.thp`: transparent huge pages.
pub fn thp(cx: &Ctx) -> Finding {
    const ID: &str = "mem.thp";
    const PATH: &str = "/sys/kernel/mm/transparent_hugepage/enabled";
    let Some(text) = cx.host.read(PATH) else {
        return Finding::new(ID, Level::Info, format!("Cannot read {PATH}: cannot tell."));
    };
    let Some(mode) = parse::bracketed(&text) else {
        return Finding::new(
            ID,
            Level::Info,
            format!(
                "{PATH} has no bracketed choice ({:?}): cannot tell.",
                text.trim()
            ),
        );
    };
    let found = format!("Transparent huge pages: {mode}.");
    if mode != "always" {
        return Finding::new(ID, Level::Ok, found);
    }
    Finding::new(ID, Level::Warn, found)
        .why(
            "With `always` the kernel may stall an allocation to compact memory into huge \
             pages and khugepaged rewrites memory in the background: latency spikes on a \
             proxy with many small buffers.",
        )
        .fix(format!(
            "echo madvise > {PATH} (as root), and `transparent_hugepage=madvise` on the \
             kernel command line to keep it."
        ))
}
