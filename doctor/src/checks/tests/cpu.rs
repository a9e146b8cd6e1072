//! cpu.online, cpu.isolation, cpu.shards, cpu.smt.

use super::*;

/// A host with `n` online CPUs where CPU i and i + n/2 are SMT siblings
/// (how Linux numbers a hyperthreaded machine), all allowed.
fn smt_host(n: u32) -> MapHost {
    let half = n / 2;
    let mut h = recorded()
        .file("/sys/devices/system/cpu/online", &format!("0-{}\n", n - 1))
        .file("/proc/self/status", &status(&format!("0-{}", n - 1), ""));
    for c in 0..n {
        let core = c % half;
        h = h.file(
            &format!("/sys/devices/system/cpu/cpu{c}/topology/thread_siblings_list"),
            &format!("{core},{}\n", core + half),
        );
    }
    h
}

#[test]
fn the_recorded_machine_runs_two_shards_on_two_cores() {
    let r = check(&recorded(), &FakeProbe::default(), Some(&default_profile()));
    expect(
        &finding(&r, "cpu.online"),
        Level::Ok,
        &["2 CPUs online (0-1); this process may run on 2 (0-1)."],
    );
    expect(
        &finding(&r, "cpu.isolation"),
        Level::Ok,
        &["Isolated CPUs (isolcpus): none; nohz_full CPUs: none."],
    );
    expect(
        &finding(&r, "cpu.shards"),
        Level::Ok,
        &["2 shards (the profile's shards = \"auto\") on 2 cores; shard→cpu: 0→0, 1→1."],
    );
    expect(
        &finding(&r, "cpu.smt"),
        Level::Ok,
        &["The shards' 2 cores are on 2 physical cores: no two shards share one."],
    );
}

#[test]
fn a_restricted_process_is_information() {
    let host = recorded()
        .file("/sys/devices/system/cpu/online", "0-7\n")
        .file("/proc/self/status", &status("2-3", ""));
    let r = check(&host, &FakeProbe::default(), None);
    let f = finding(&r, "cpu.online");
    expect(
        &f,
        Level::Info,
        &["8 CPUs online (0-7); this process may run on 2 (2-3)."],
    );
    assert!(f.why.contains("taskset"), "{f:#?}");
    expect(
        &finding(&r, "cpu.shards"),
        Level::Ok,
        &["2 shards (no profile given: assuming shards = \"auto\") on 2 cores; shard→cpu: 0→2, 1→3."],
    );
}

#[test]
fn more_shards_than_cores_wrap_around_and_warn() {
    let prof = server("listen = [\"127.0.0.1:8080\"]\nshards = 5");
    let f = finding(
        &check(&recorded(), &FakeProbe::default(), Some(&prof)),
        "cpu.shards",
    );
    expect(
        &f,
        Level::Warn,
        &["5 shards (the profile's shards = 5) on 2 cores; shard→cpu: 0→0, 1→1, 2→0, 3→1, 4→0."],
    );
    expect_fix(&f, &["`shards = 2`"]);
}

#[test]
fn isolated_cpus_away_from_the_shards_suggest_taskset() {
    let host = recorded()
        .file("/sys/devices/system/cpu/online", "0-3\n")
        .file("/sys/devices/system/cpu/isolated", "2-3\n")
        .file("/sys/devices/system/cpu/nohz_full", "2-3\n")
        .file(
            "/proc/cmdline",
            "quiet isolcpus=managed_irq,domain,2-3 nohz_full=2-3\n",
        )
        .file("/proc/self/status", &status("0-1", ""));
    let f = finding(&check(&host, &FakeProbe::default(), None), "cpu.isolation");
    expect(
        &f,
        Level::Info,
        &[
            "Isolated CPUs (isolcpus): 2-3; nohz_full CPUs: 2-3.",
            "No shard runs on them",
        ],
    );
    expect_fix(&f, &["taskset -c 2-3"]);
    // Started on them: the shards use them.
    let on = host.file("/proc/self/status", &status("2-3", ""));
    let f = finding(&check(&on, &FakeProbe::default(), None), "cpu.isolation");
    expect(&f, Level::Info, &["Shards run on isolated CPUs"]);
    // Only the command line says so (no sysfs files).
    let cmdline = recorded()
        .without("/sys/devices/system/cpu/isolated")
        .file("/proc/cmdline", "isolcpus=1\n");
    let f = finding(
        &check(&cmdline, &FakeProbe::default(), None),
        "cpu.isolation",
    );
    expect(
        &f,
        Level::Info,
        &[
            "Isolated CPUs (isolcpus): 1;",
            "Shards run on isolated CPUs",
        ],
    );
}

#[test]
fn shards_on_smt_siblings_warn_and_suggest_one_per_physical_core() {
    let host = smt_host(8);
    let f = finding(&check(&host, &FakeProbe::default(), None), "cpu.smt");
    expect(
        &f,
        Level::Warn,
        &["The shards' 8 cores are on 4 physical cores; SMT siblings running two shards: 0,4; 1,5; 2,6; 3,7."],
    );
    expect_fix(
        &f,
        &[
            "`shards = 4`",
            "`taskset -c 0-3`",
            "CPUAffinity=0-3",
            "nosmt",
        ],
    );
    // Two shards on the first two cores: different physical cores.
    let two = server("listen = [\"127.0.0.1:8080\"]\nshards = 2");
    let f = finding(&check(&host, &FakeProbe::default(), Some(&two)), "cpu.smt");
    expect(
        &f,
        Level::Ok,
        &["The shards' 2 cores are on 2 physical cores"],
    );
    // Started on 0 and 4 only: one physical core.
    let pair = host.file("/proc/self/status", &status("0,4", ""));
    let f = finding(&check(&pair, &FakeProbe::default(), None), "cpu.smt");
    expect(&f, Level::Warn, &["SMT siblings running two shards: 0,4."]);
    expect_fix(&f, &["`shards = 1`", "`taskset -c 0`"]);
}

#[test]
fn missing_cpu_files_cannot_tell() {
    let host = MapHost::new();
    let r = check(&host, &FakeProbe::default(), None);
    expect(
        &finding(&r, "cpu.online"),
        Level::Info,
        &["Cannot read /sys/devices/system/cpu/online"],
    );
    expect(&finding(&r, "cpu.isolation"), Level::Info, &["cannot tell"]);
    // With nothing known, one shard on CPU 0 is assumed.
    expect(&finding(&r, "cpu.shards"), Level::Ok, &["1 shards", "0→0"]);
    expect(
        &finding(&r, "cpu.smt"),
        Level::Info,
        &["Cannot read thread_siblings_list"],
    );
    let half = recorded().without("/proc/self/status");
    expect(
        &finding(&check(&half, &FakeProbe::default(), None), "cpu.online"),
        Level::Info,
        &["2 CPUs online (0-1); cannot read Cpus_allowed_list"],
    );
}
