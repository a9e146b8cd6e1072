//! time.clocksource, mem.thp.

use super::*;

const CLOCK: &str = "/sys/devices/system/clocksource/clocksource0/current_clocksource";
const AVAILABLE: &str = "/sys/devices/system/clocksource/clocksource0/available_clocksource";
const THP: &str = "/sys/kernel/mm/transparent_hugepage/enabled";

fn clock(host: &MapHost) -> Finding {
    finding(
        &check(host, &FakeProbe::default(), None),
        "time.clocksource",
    )
}

#[test]
fn fast_clocks_are_ok() {
    expect(&clock(&recorded()), Level::Ok, &["Clock source tsc."]);
    let kvm = recorded()
        .file(CLOCK, "kvm-clock\n")
        .file(AVAILABLE, "kvm-clock tsc acpi_pm \n");
    expect(
        &clock(&kvm),
        Level::Ok,
        &["Clock source kvm-clock (available: kvm-clock tsc acpi_pm)."],
    );
}

#[test]
fn slow_clocks_warn_and_say_how_to_switch() {
    let hpet = recorded()
        .file(CLOCK, "hpet\n")
        .file(AVAILABLE, "tsc hpet acpi_pm\n");
    let f = clock(&hpet);
    expect(
        &f,
        Level::Warn,
        &["Clock source hpet (available: tsc hpet acpi_pm)."],
    );
    assert!(f.why.contains("with hpet each read"), "{f:#?}");
    expect_fix(
        &f,
        &[
            "echo tsc > /sys/devices/system/clocksource/clocksource0/current_clocksource",
            "clocksource=tsc",
        ],
    );
    let pm = recorded()
        .file(CLOCK, "acpi_pm\n")
        .file(AVAILABLE, "hpet acpi_pm\n");
    let f = clock(&pm);
    expect(&f, Level::Warn, &["Clock source acpi_pm"]);
    expect_fix(&f, &["tsc=reliable"]);
}

#[test]
fn unknown_or_missing_clocks_are_information() {
    expect(
        &clock(&recorded().file(CLOCK, "xen\n")),
        Level::Info,
        &["Clock source xen."],
    );
    expect(
        &clock(&recorded().without(CLOCK)),
        Level::Info,
        &["cannot tell"],
    );
    expect(
        &clock(&recorded().file(CLOCK, "\n")),
        Level::Info,
        &["empty"],
    );
}

fn thp(text: &str) -> Finding {
    let host = recorded().file(THP, text);
    finding(&check(&host, &FakeProbe::default(), None), "mem.thp")
}

#[test]
fn transparent_huge_pages_always_warns() {
    let f = thp("[always] madvise never\n");
    expect(&f, Level::Warn, &["Transparent huge pages: always."]);
    expect_fix(
        &f,
        &[
            "echo madvise > /sys/kernel/mm/transparent_hugepage/enabled",
            "transparent_hugepage=madvise",
        ],
    );
    expect(&thp("always [madvise] never\n"), Level::Ok, &["madvise"]);
    expect(&thp("always madvise [never]\n"), Level::Ok, &["never"]);
    expect(&thp("garbage"), Level::Info, &["no bracketed choice"]);
    let gone = recorded().without(THP);
    let f = finding(&check(&gone, &FakeProbe::default(), None), "mem.thp");
    expect(&f, Level::Info, &["cannot tell"]);
}
