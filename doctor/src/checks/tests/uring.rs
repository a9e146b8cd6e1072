//! io_uring.disabled, io_uring.ring, io_uring.flags, limits.memlock.

use super::*;

const DISABLED: &str = "/proc/sys/kernel/io_uring_disabled";
const GROUP: &str = "/proc/sys/kernel/io_uring_group";

#[test]
fn enabled_io_uring_on_the_recorded_machine_is_ok() {
    let r = check(&recorded(), &FakeProbe::default(), Some(&default_profile()));
    expect(
        &finding(&r, "io_uring.disabled"),
        Level::Ok,
        &["kernel.io_uring_disabled = 0"],
    );
    expect(
        &finding(&r, "io_uring.ring"),
        Level::Ok,
        &["4096-entry ring with COOP_TASKRUN and TASKRUN_FLAG"],
    );
    expect(
        &finding(&r, "io_uring.flags"),
        Level::Info,
        &["SINGLE_ISSUER: available (Linux 6.0+); DEFER_TASKRUN: available (Linux 6.1+)."],
    );
}

#[test]
fn disabled_everywhere_warns_under_auto_fails_under_io_uring_and_informs_under_epoll() {
    let host = recorded().file(DISABLED, "2\n");
    let p = FakeProbe::default();
    let auto = finding(
        &check(&host, &p, Some(&default_profile())),
        "io_uring.disabled",
    );
    expect(&auto, Level::Warn, &["kernel.io_uring_disabled = 2"]);
    assert!(auto.why.contains("falls back to epoll"), "{auto:#?}");
    expect_fix(
        &auto,
        &["sysctl -w kernel.io_uring_disabled=0", "/etc/sysctl.d/"],
    );
    let uring = server(
        r#"listen = ["127.0.0.1:8080"]
driver = "io_uring""#,
    );
    let f = finding(&check(&host, &p, Some(&uring)), "io_uring.disabled");
    expect(&f, Level::Fail, &["= 2"]);
    assert!(f.why.contains("driver = \"io_uring\""), "{f:#?}");
    let epoll = server(
        r#"listen = ["127.0.0.1:8080"]
driver = "epoll""#,
    );
    let f = finding(&check(&host, &p, Some(&epoll)), "io_uring.disabled");
    expect(&f, Level::Info, &["= 2"]);
    let none = finding(&check(&host, &p, None), "io_uring.disabled");
    expect(&none, Level::Warn, &["= 2"]);
}

#[test]
fn disabled_for_all_but_a_group_names_the_group() {
    let p = FakeProbe::default();
    let prof = default_profile();
    let host = recorded().file(DISABLED, "1\n").file(GROUP, "1000\n");
    let f = finding(&check(&host, &p, Some(&prof)), "io_uring.disabled");
    expect(&f, Level::Warn, &["only members of group 1000"]);
    expect_fix(&f, &["group 1000 (SupplementaryGroups="]);
    let member = host.file("/proc/self/status", &status("0-1", "27 1000"));
    let f = finding(&check(&member, &p, Some(&prof)), "io_uring.disabled");
    expect(&f, Level::Info, &["This process is in that group"]);
    let nobody = recorded().file(DISABLED, "1\n");
    let f = finding(&check(&nobody, &p, Some(&prof)), "io_uring.disabled");
    expect(
        &f,
        Level::Warn,
        &["kernel.io_uring_group = -1: only processes with CAP_SYS_ADMIN"],
    );
}

#[test]
fn a_missing_or_garbled_switch_cannot_tell() {
    let p = FakeProbe::default();
    let f = finding(
        &check(&recorded().without(DISABLED), &p, None),
        "io_uring.disabled",
    );
    expect(&f, Level::Info, &["missing", "before 6.6"]);
    let f = finding(
        &check(&recorded().file(DISABLED, "x7"), &p, None),
        "io_uring.disabled",
    );
    expect(&f, Level::Info, &["\"x7\"", "cannot tell"]);
}

#[test]
fn a_ring_that_cannot_be_created_follows_the_driver() {
    let p = FakeProbe {
        ring: Some("Operation not permitted (os error 1)".into()),
        ..FakeProbe::default()
    };
    let r = check(&recorded(), &p, Some(&default_profile()));
    let f = finding(&r, "io_uring.ring");
    expect(
        &f,
        Level::Warn,
        &["Cannot create a 4096-entry ring", "os error 1"],
    );
    expect_fix(&f, &["Linux 5.19", "seccomp"]);
    expect(
        &finding(&r, "io_uring.flags"),
        Level::Info,
        &["SINGLE_ISSUER: not available (Operation not permitted (os error 1))"],
    );
    assert_eq!(r.exit_code(), 3);
    let uring = server(
        r#"listen = ["127.0.0.1:8080"]
driver = "io_uring""#,
    );
    let r = check(&recorded(), &p, Some(&uring));
    expect(&finding(&r, "io_uring.ring"), Level::Fail, &["os error 1"]);
    assert_eq!(r.exit_code(), 1);
}

#[test]
fn newer_flags_are_reported_one_by_one() {
    let p = FakeProbe {
        defer_taskrun: Some("Invalid argument (os error 22)".into()),
        ..FakeProbe::default()
    };
    let f = finding(&check(&recorded(), &p, None), "io_uring.flags");
    expect(
        &f,
        Level::Info,
        &[
            "SINGLE_ISSUER: available",
            "DEFER_TASKRUN: not available (Invalid argument (os error 22))",
        ],
    );
    assert!(
        f.why
            .contains("a shard's own ring (ring = \"on\") asks for SINGLE_ISSUER"),
        "{f:#?}"
    );
}

fn memlock(soft: Option<u64>) -> FakeProbe {
    FakeProbe {
        memlock: Some(Rlimit { soft, hard: soft }),
        ..FakeProbe::default()
    }
}

#[test]
fn memlock_does_not_matter_from_5_12() {
    let f = finding(
        &check(
            &recorded(),
            &memlock(Some(64 << 10)),
            Some(&default_profile()),
        ),
        "limits.memlock",
    );
    expect(
        &f,
        Level::Ok,
        &[
            "RLIMIT_MEMLOCK soft 64 KiB, hard 64 KiB",
            "Kernel 6.18 charges io_uring rings to the memory cgroup",
            "2 shards × 404 KiB per 4096-entry ring = 808 KiB",
        ],
    );
}

#[test]
fn memlock_below_the_rings_on_an_old_kernel_warns_with_the_numbers() {
    let old = recorded().file("/proc/sys/kernel/osrelease", "5.10.0-21-amd64\n");
    let f = finding(
        &check(&old, &memlock(Some(64 << 10)), Some(&default_profile())),
        "limits.memlock",
    );
    expect(
        &f,
        Level::Warn,
        &["Kernel 5.10 charges io_uring rings to it: 2 shards × 404 KiB per 4096-entry ring = 808 KiB"],
    );
    expect_fix(
        &f,
        &[
            "LimitMEMLOCK=827392",
            "soft memlock 808",
            "/etc/security/limits.conf",
        ],
    );
    let f = finding(
        &check(&old, &memlock(None), Some(&default_profile())),
        "limits.memlock",
    );
    expect(&f, Level::Ok, &["soft unlimited, hard unlimited"]);
    let f = finding(
        &check(&old, &memlock(Some(1 << 20)), Some(&default_profile())),
        "limits.memlock",
    );
    expect(&f, Level::Ok, &["soft 1 MiB"]);
}

#[test]
fn memlock_without_a_kernel_version_compares_anyway() {
    let host = recorded().file("/proc/sys/kernel/osrelease", "???");
    let f = finding(&check(&host, &memlock(Some(4096)), None), "limits.memlock");
    expect(&f, Level::Warn, &["Kernel version unknown", "808 KiB"]);
    let p = FakeProbe {
        memlock: None,
        ..FakeProbe::default()
    };
    let f = finding(&check(&recorded(), &p, None), "limits.memlock");
    expect(&f, Level::Info, &["Cannot read RLIMIT_MEMLOCK"]);
}
