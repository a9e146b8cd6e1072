//! The whole report: every id in order, exit codes, odd hosts, the real
//! host.

use super::*;
use crate::{FsHost, RealProbe, CHECK_IDS};

fn ids(r: &Report) -> Vec<&'static str> {
    r.findings.iter().map(|f| f.id).collect()
}

#[test]
fn the_recorded_machine_gives_every_check_and_warns() {
    let r = check(&recorded(), &FakeProbe::default(), Some(&default_profile()));
    assert_eq!(ids(&r), CHECK_IDS);
    let warned: Vec<&str> = r
        .findings
        .iter()
        .filter(|f| f.level >= Level::Warn)
        .map(|f| f.id)
        .collect();
    assert_eq!(warned, ["limits.nofile", "net.syn_backlog"]);
    assert_eq!(r.exit_code(), 3);
}

#[test]
fn an_empty_host_is_all_cannot_tell_and_never_panics() {
    let r = check(&MapHost::new(), &FakeProbe::default(), None);
    assert_eq!(ids(&r), CHECK_IDS);
    assert!(r.findings.iter().all(|f| f.level <= Level::Info), "{r:#?}");
    assert_eq!(r.exit_code(), 0);
}

#[test]
fn garbage_in_every_file_never_panics_nor_warns() {
    let junk = "\u{0}\u{7f}[[[ -12345678901234567890 0-99999999 ,,,\n\n";
    let mut host = MapHost::new();
    for path in [
        "/proc/sys/kernel/io_uring_disabled",
        "/proc/sys/kernel/io_uring_group",
        "/proc/sys/kernel/osrelease",
        "/proc/sys/net/core/somaxconn",
        "/proc/sys/net/ipv4/tcp_max_syn_backlog",
        "/proc/sys/net/ipv4/tcp_syncookies",
        "/proc/sys/net/ipv4/tcp_available_ulp",
        "/proc/modules",
        "/proc/cmdline",
        "/proc/self/status",
        "/proc/interrupts",
        "/proc/irq/38/smp_affinity_list",
        "/sys/devices/system/cpu/online",
        "/sys/devices/system/cpu/isolated",
        "/sys/devices/system/cpu/nohz_full",
        "/sys/devices/system/cpu/cpu0/topology/thread_siblings_list",
        "/sys/devices/system/node/node0/cpulist",
        "/sys/devices/system/node/nodeX/cpulist",
        "/sys/devices/system/clocksource/clocksource0/current_clocksource",
        "/sys/kernel/mm/transparent_hugepage/enabled",
        "/sys/class/net/eth0/device/numa_node",
        "/sys/class/net/eth0/queues/rx-0/rps_cpus",
        "/sys/class/net/eth0/queues/tx-0/xps_cpus",
        "/sys/class/net/eth0/queues/junk/rps_cpus",
    ] {
        host = host.file(path, junk);
    }
    let host = host.symlink("/sys/class/net/eth0/device", "");
    let r = check(&host, &FakeProbe::default(), None);
    assert_eq!(ids(&r), CHECK_IDS);
    assert!(r.findings.iter().all(|f| f.level <= Level::Info), "{r:#?}");
}

#[test]
fn the_real_host_gives_every_check() {
    let profile = default_profile();
    let r = crate::report(&FsHost::new(), &RealProbe, Some(&profile), &|| Ok(()));
    assert_eq!(ids(&r), CHECK_IDS);
    assert!(r.findings.iter().all(|f| !f.found.is_empty()), "{r:#?}");
}

#[test]
fn run_writes_text_or_json_and_returns_the_exit_code() {
    let profile = default_profile();
    let mut out = Vec::new();
    let code = crate::run(
        Some(&profile),
        &|| Ok(()),
        &crate::Options { json: true },
        &mut out,
    );
    assert!([0, 1, 3].contains(&code));
    let v: serde_json::Value = serde_json::from_slice(&out).expect("valid JSON");
    assert_eq!(v["exit_code"], code);
    let listed: Vec<&str> = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["id"].as_str().unwrap())
        .collect();
    assert_eq!(listed, CHECK_IDS);
    let mut text = Vec::new();
    let code = crate::run(None, &|| Ok(()), &crate::Options::default(), &mut text);
    let text = String::from_utf8(text).unwrap();
    assert!(text.ends_with(&format!("(exit {code})\n")), "{text}");
    assert!(
        text.contains(&format!("{} checks:", CHECK_IDS.len())),
        "{text}"
    );
}
