//! limits.nofile, net.somaxconn, net.syn_backlog, net.steering, tls.ktls,
//! ports.free.

use super::*;

const BIG: &str = r#"[server]
shards = 4
listen = ["127.0.0.1:8080", "[::1]:8080"]
admin = "127.0.0.1:9090"
max_connections_per_shard = 1000

[[udp]]
name = "game"
listen = ["127.0.0.1:7000", "[::1]:7000"]
servers = ["127.0.0.1:7001"]
"#;

fn nofile(soft: u64, hard: u64) -> FakeProbe {
    FakeProbe {
        nofile: Some(Rlimit {
            soft: Some(soft),
            hard: Some(hard),
        }),
        ..FakeProbe::default()
    }
}

#[test]
fn nofile_is_sized_from_shards_connections_and_listeners() {
    let prof = compiled(BIG, 2);
    let sum = "4 shards × 1000 connections (server.max_connections_per_shard) × 2 (each \
               proxied connection holds an upstream socket) + 17 listening sockets + 1024 \
               spare = 9041";
    let f = finding(
        &check(&recorded(), &nofile(20_000, 20_000), Some(&prof)),
        "limits.nofile",
    );
    expect(&f, Level::Ok, &["soft 20000, hard 20000", sum]);
    let f = finding(
        &check(&recorded(), &nofile(1024, 4096), Some(&prof)),
        "limits.nofile",
    );
    expect(&f, Level::Warn, &["soft 1024, hard 4096", sum]);
    assert!(
        f.why.contains("EMFILE") && f.why.contains("raise both"),
        "{f:#?}"
    );
    expect_fix(
        &f,
        &[
            "LimitNOFILE=9041",
            "<user> soft nofile 9041",
            "/etc/security/limits.conf",
            "ulimit -n 9041",
        ],
    );
    let f = finding(
        &check(&recorded(), &nofile(1024, 65_536), Some(&prof)),
        "limits.nofile",
    );
    assert!(!f.why.contains("raise both"), "{f:#?}");
}

#[test]
fn nofile_on_the_recorded_machine_is_short_for_the_built_in_profile() {
    let f = finding(
        &check(&recorded(), &FakeProbe::default(), Some(&default_profile())),
        "limits.nofile",
    );
    // 2 × 16384 × 2 + 2 listeners + 1 admin + 1024.
    expect(&f, Level::Warn, &["soft 20000, hard 20000", "= 66563"]);
}

#[test]
fn nofile_without_a_profile_or_a_limit_says_so() {
    let f = finding(
        &check(&recorded(), &FakeProbe::default(), None),
        "limits.nofile",
    );
    expect(
        &f,
        Level::Info,
        &["soft 20000, hard 20000", "No profile given"],
    );
    let p = FakeProbe {
        nofile: Some(Rlimit {
            soft: None,
            hard: None,
        }),
        ..FakeProbe::default()
    };
    let f = finding(
        &check(&recorded(), &p, Some(&default_profile())),
        "limits.nofile",
    );
    expect(&f, Level::Ok, &["soft unlimited, hard unlimited"]);
    let p = FakeProbe {
        nofile: None,
        ..FakeProbe::default()
    };
    let f = finding(&check(&recorded(), &p, None), "limits.nofile");
    expect(&f, Level::Info, &["Cannot read RLIMIT_NOFILE"]);
}

#[test]
fn backlog_sysctls_against_4096() {
    let r = check(&recorded(), &FakeProbe::default(), None);
    expect(
        &finding(&r, "net.somaxconn"),
        Level::Ok,
        &["net.core.somaxconn = 4096; Gapura listens with a backlog of 4096."],
    );
    let f = finding(&r, "net.syn_backlog");
    expect(
        &f,
        Level::Warn,
        &[
            "net.ipv4.tcp_max_syn_backlog = 2048",
            "net.ipv4.tcp_syncookies = 1.",
        ],
    );
    assert!(f.why.contains("At most 2048 half-open"), "{f:#?}");
    expect_fix(
        &f,
        &[
            "sysctl -w net.ipv4.tcp_max_syn_backlog=4096",
            "`net.ipv4.tcp_max_syn_backlog = 4096`",
        ],
    );
    let low = recorded().file("/proc/sys/net/core/somaxconn", "128\n");
    let f = finding(&check(&low, &FakeProbe::default(), None), "net.somaxconn");
    expect(&f, Level::Warn, &["net.core.somaxconn = 128"]);
    assert!(f.why.contains("caps every listen backlog at 128"), "{f:#?}");
    expect_fix(
        &f,
        &[
            "sysctl -w net.core.somaxconn=4096",
            "/etc/sysctl.d/90-gapura.conf",
        ],
    );
    let gone = recorded().without("/proc/sys/net/core/somaxconn");
    let f = finding(&check(&gone, &FakeProbe::default(), None), "net.somaxconn");
    expect(
        &f,
        Level::Info,
        &["Cannot read /proc/sys/net/core/somaxconn"],
    );
    assert_eq!(crate::LISTEN_BACKLOG, 4096);
}

fn steering(profile: Option<&Compiled>, attach: Result<(), String>) -> Finding {
    let r = crate::report(&recorded(), &FakeProbe::default(), profile, &|| {
        attach.clone()
    });
    finding(&r, "net.steering")
}

#[test]
fn steering_that_cannot_attach_fails_only_where_the_runtime_needs_it() {
    let err = || Err("Operation not permitted (os error 1)".to_string());
    let f = steering(Some(&default_profile()), Ok(()));
    expect(
        &f,
        Level::Ok,
        &["attaches", "steering = \"source\" on 2 shards"],
    );
    let f = steering(Some(&default_profile()), err());
    expect(
        &f,
        Level::Fail,
        &["cannot be attached: Operation not permitted (os error 1)"],
    );
    expect_fix(&f, &["`steering = \"kernel\"` in [server]"]);
    let kernel = server("listen = [\"127.0.0.1:8080\"]\nsteering = \"kernel\"");
    expect(
        &steering(Some(&kernel), err()),
        Level::Info,
        &["steering = \"kernel\""],
    );
    let one = server("listen = [\"127.0.0.1:8080\"]\nshards = 1\nsteering = \"prefix\"");
    expect(
        &steering(Some(&one), err()),
        Level::Info,
        &["steering = \"prefix\" on 1 shard"],
    );
    expect(&steering(None, err()), Level::Warn, &["No profile given."]);
}

#[test]
fn kernel_tls_is_information_either_way() {
    let p = FakeProbe::default();
    let f = finding(&check(&recorded(), &p, None), "tls.ktls");
    expect(
        &f,
        Level::Info,
        &["not available now (tcp_available_ulp: mptcp; no tls module loaded)"],
    );
    assert!(
        f.why.contains("rustls") && f.why.contains("does not use kernel TLS"),
        "{f:#?}"
    );
    let ulp = recorded().file("/proc/sys/net/ipv4/tcp_available_ulp", "mptcp tls\n");
    let f = finding(&check(&ulp, &p, None), "tls.ktls");
    expect(
        &f,
        Level::Info,
        &["available (tcp_available_ulp lists tls)"],
    );
    let module = recorded().file("/proc/modules", "tls 151552 0 - Live 0x0000000000000000\n");
    let f = finding(&check(&module, &p, None), "tls.ktls");
    expect(&f, Level::Info, &["available (the tls module is loaded)"]);
    let none = recorded().without("/proc/sys/net/ipv4/tcp_available_ulp");
    let f = finding(&check(&none, &p, None), "tls.ktls");
    expect(&f, Level::Info, &["cannot tell"]);
}

#[test]
fn ports_in_use_fail_and_say_a_running_gapura_is_expected_to() {
    let prof = compiled(BIG, 2);
    let ok = finding(
        &check(&recorded(), &FakeProbe::default(), Some(&prof)),
        "ports.free",
    );
    expect(
        &ok,
        Level::Ok,
        &[
            "127.0.0.1:8080 (tcp listen): free",
            "[::1]:8080 (tcp listen): free",
            "127.0.0.1:9090 (tcp admin): free",
            "127.0.0.1:7000 (udp udp relay): free",
            "[::1]:7000 (udp udp relay): free",
        ],
    );
    let p = FakeProbe {
        refused: vec![
            (
                "127.0.0.1:8080".parse().unwrap(),
                Proto::Tcp,
                io::ErrorKind::AddrInUse,
            ),
            (
                "[::1]:7000".parse().unwrap(),
                Proto::Udp,
                io::ErrorKind::AddrNotAvailable,
            ),
        ],
        ..FakeProbe::default()
    };
    let f = finding(&check(&recorded(), &p, Some(&prof)), "ports.free");
    expect(
        &f,
        Level::Fail,
        &[
            "127.0.0.1:8080 (tcp listen): in use",
            "[::1]:7000 (udp udp relay): the address is not on this host",
            "127.0.0.1:9090 (tcp admin): free",
        ],
    );
    assert!(
        f.why
            .contains("A Gapura already running on these addresses"),
        "{f:#?}"
    );
    expect_fix(&f, &["ss -ltnp 'sport = :PORT'"]);
}

#[test]
fn privileged_and_ephemeral_ports() {
    let prof = server("listen = [\"0.0.0.0:443\", \"127.0.0.1:0\"]\nadmin = \"off\"");
    let p = FakeProbe {
        refused: vec![(
            "0.0.0.0:443".parse().unwrap(),
            Proto::Tcp,
            io::ErrorKind::PermissionDenied,
        )],
        ..FakeProbe::default()
    };
    let f = finding(&check(&recorded(), &p, Some(&prof)), "ports.free");
    expect(
        &f,
        Level::Warn,
        &[
            "0.0.0.0:443 (tcp listen): this user may not bind it",
            "127.0.0.1:0 (tcp listen): port 0, chosen at start",
        ],
    );
    expect_fix(&f, &["AmbientCapabilities=CAP_NET_BIND_SERVICE"]);
    let f = finding(&check(&recorded(), &p, None), "ports.free");
    expect(&f, Level::Info, &["No profile given"]);
}
