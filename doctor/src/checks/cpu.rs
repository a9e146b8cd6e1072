//! CPUs: how many, which this process may use, isolation, which core each
//! shard takes, and SMT siblings.

use super::Ctx;
use crate::finding::{Finding, Level};
use crate::parse;
use std::collections::BTreeMap;

/// `cpu.online`: online CPUs and the ones this process may run on.
pub fn online(cx: &Ctx) -> Finding {
    const ID: &str = "cpu.online";
    let Some(online) = &cx.cpus.online else {
        return Finding::new(
            ID,
            Level::Info,
            "Cannot read /sys/devices/system/cpu/online: cannot tell how many CPUs are online.",
        );
    };
    let on = format!(
        "{} CPUs online ({})",
        online.len(),
        parse::format_cpus(online)
    );
    let Some(allowed) = &cx.cpus.allowed else {
        return Finding::new(
            ID,
            Level::Info,
            format!("{on}; cannot read Cpus_allowed_list in /proc/self/status."),
        );
    };
    let found = format!(
        "{on}; this process may run on {} ({}).",
        allowed.len(),
        parse::format_cpus(allowed)
    );
    if allowed.iter().all(|c| online.contains(c)) && allowed.len() == online.len() {
        return Finding::new(ID, Level::Ok, found);
    }
    Finding::new(ID, Level::Info, found).why(
        "The process is restricted (taskset, a cgroup cpuset, systemd CPUAffinity=): \
         shards = \"auto\" takes one shard per allowed CPU only.",
    )
}

/// The CPUs named by a sysfs file or, failing that, a command-line key.
fn isolated_set(cx: &Ctx, file: &str, key: &str) -> Option<Vec<u32>> {
    let from_file = cx.host.read(file).and_then(|t| parse::cpu_list(&t));
    let from_cmdline = cx.host.read("/proc/cmdline").map(|c| {
        parse::cmdline_value(&c, key)
            .map(|v| {
                // isolcpus=domain,managed_irq,2-3: skip the flags.
                let list: Vec<&str> = v
                    .split(',')
                    .filter(|p| p.starts_with(|c: char| c.is_ascii_digit()))
                    .collect();
                parse::cpu_list(&list.join(",")).unwrap_or_default()
            })
            .unwrap_or_default()
    });
    match (from_file, from_cmdline) {
        (Some(a), Some(b)) => {
            let mut all = a;
            all.extend(b);
            all.sort_unstable();
            all.dedup();
            Some(all)
        }
        (a, b) => a.or(b),
    }
}

/// `cpu.isolation`: isolcpus and nohz_full against the shards' cores.
pub fn isolation(cx: &Ctx) -> Finding {
    const ID: &str = "cpu.isolation";
    let isolated = isolated_set(cx, "/sys/devices/system/cpu/isolated", "isolcpus");
    let nohz = isolated_set(cx, "/sys/devices/system/cpu/nohz_full", "nohz_full");
    if isolated.is_none() && nohz.is_none() {
        return Finding::new(
            ID,
            Level::Info,
            "Cannot read /sys/devices/system/cpu/isolated, nohz_full or /proc/cmdline: \
             cannot tell.",
        );
    }
    let isolated = isolated.unwrap_or_default();
    let nohz = nohz.unwrap_or_default();
    let found = format!(
        "Isolated CPUs (isolcpus): {}; nohz_full CPUs: {}.",
        parse::format_cpus(&isolated),
        parse::format_cpus(&nohz)
    );
    if isolated.is_empty() && nohz.is_empty() {
        return Finding::new(ID, Level::Ok, found);
    }
    let shard_cores = &cx.cpus.shard_cores;
    let on: Vec<u32> = isolated
        .iter()
        .chain(&nohz)
        .copied()
        .filter(|c| shard_cores.contains(c))
        .collect();
    let (extra, fix) = if on.is_empty() {
        (
            " No shard runs on them: the scheduler keeps every process off isolated CPUs \
             unless it is started there.",
            format!(
                "To give them to Gapura start it with `taskset -c {}` (CPUAffinity= in its \
                 systemd unit) and set shards to match.",
                parse::format_cpus(&isolated)
            ),
        )
    } else {
        (
            " Shards run on isolated CPUs: the scheduler leaves them to Gapura, as intended \
             when isolation was set up for it.",
            String::new(),
        )
    };
    Finding::new(ID, Level::Info, format!("{found}{extra}"))
        .why(
            "Isolated CPUs run only what is pinned to them: good for shards, but shards \
             there must be placed on purpose.",
        )
        .fix(fix)
}

/// "shard→cpu" pairs, the first 16.
fn mapping(cores: &[u32]) -> String {
    let mut parts: Vec<String> = cores
        .iter()
        .take(16)
        .enumerate()
        .map(|(s, c)| format!("{s}→{c}"))
        .collect();
    if cores.len() > 16 {
        parts.push(format!("… ({} more)", cores.len() - 16));
    }
    parts.join(", ")
}

/// `cpu.shards`: which core each shard takes.
pub fn shards(cx: &Ctx) -> Finding {
    const ID: &str = "cpu.shards";
    let cores = &cx.cpus.shard_cores;
    let mut distinct = cores.clone();
    distinct.sort_unstable();
    distinct.dedup();
    let found = format!(
        "{} shards ({}) on {} cores; shard→cpu: {}.",
        cores.len(),
        cx.cpus.shards_from,
        distinct.len(),
        mapping(cores)
    );
    if distinct.len() == cores.len() {
        return Finding::new(ID, Level::Ok, found);
    }
    Finding::new(ID, Level::Warn, found)
        .why(
            "More shards than allowed CPUs: shards on one core take turns, adding latency \
             and gaining nothing.",
        )
        .fix(format!(
            "Set `shards = {}` (or \"auto\") in [server], or allow the process more CPUs.",
            distinct.len()
        ))
}

/// `cpu.smt`: shards on SMT siblings of one physical core.
pub fn smt(cx: &Ctx) -> Finding {
    const ID: &str = "cpu.smt";
    let siblings = |cpu: u32| {
        cx.host
            .read(&format!(
                "/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list"
            ))
            .and_then(|t| parse::cpu_list(&t))
            .filter(|s| !s.is_empty())
    };
    let mut distinct = cx.cpus.shard_cores.clone();
    distinct.sort_unstable();
    distinct.dedup();
    // Physical core (its lowest sibling) → the shard cores on it.
    let mut physical: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    let mut unknown = 0;
    for &cpu in &distinct {
        match siblings(cpu) {
            Some(s) => physical.entry(s[0]).or_default().push(cpu),
            None => unknown += 1,
        }
    }
    if physical.is_empty() {
        return Finding::new(
            ID,
            Level::Info,
            "Cannot read thread_siblings_list for the shards' CPUs: cannot tell.",
        );
    }
    let shared: Vec<String> = physical
        .values()
        .filter(|cpus| cpus.len() > 1)
        .map(|cpus| parse::format_cpus(cpus))
        .collect();
    let unread = if unknown > 0 {
        format!(" ({unknown} CPUs without topology)")
    } else {
        String::new()
    };
    if shared.is_empty() {
        return Finding::new(
            ID,
            Level::Ok,
            format!(
                "The shards' {} cores are on {} physical cores: no two shards share one{unread}.",
                distinct.len(),
                physical.len()
            ),
        );
    }
    let pool = cx.cpus.allowed.clone().unwrap_or_else(|| distinct.clone());
    let mut seen = Vec::new();
    let one_each: Vec<u32> = pool
        .into_iter()
        .filter(|&c| {
            let key = siblings(c).map_or(c, |s| s[0]);
            let fresh = !seen.contains(&key);
            seen.push(key);
            fresh
        })
        .collect();
    Finding::new(
        ID,
        Level::Warn,
        format!(
            "The shards' {} cores are on {} physical cores; SMT siblings running two shards: \
             {}{unread}.",
            distinct.len(),
            physical.len(),
            shared.join("; ")
        ),
    )
    .why(
        "Two shards on SMT siblings share one core's execution units and caches: each \
         runs slower and tail latency grows.",
    )
    .fix(format!(
        "Run one shard per physical core: `shards = {}` in [server] and start Gapura with \
         `taskset -c {}` (CPUAffinity={} in its systemd unit), or turn SMT off with `nosmt` \
         on the kernel command line.",
        one_each.len(),
        parse::format_cpus(&one_each),
        parse::format_cpus(&one_each).replace(',', " ")
    ))
}
