//! numa.nodes, nic.irqs, nic.rps_xps.

use super::*;

/// A 2-socket machine: node0 has CPUs 0-3 and eth0 (4 queues, IRQs 50-53
/// spread over every CPU), node1 has CPUs 4-7; eth1 has no known node and
/// no interrupts of its own (eth10's and a card outside /sys/class/net's
/// interrupts must not be taken for eth0's or eth1's).
fn two_socket() -> MapHost {
    let mut h = recorded()
        .file("/sys/devices/system/cpu/online", "0-7\n")
        .file("/proc/self/status", &status("0-7", ""))
        .file("/sys/devices/system/node/node0/cpulist", "0-3\n")
        .file("/sys/devices/system/node/node1/cpulist", "4-7\n")
        .file(
            "/proc/interrupts",
            include_str!("../../../tests/fixtures/interrupts-2socket"),
        )
        .symlink("/sys/class/net/eth0/device", "../../../0000:3b:00.0")
        .file("/sys/class/net/eth0/device/numa_node", "0\n")
        .symlink("/sys/class/net/eth1/device", "../../../0000:af:00.1")
        .file("/sys/class/net/eth1/device/numa_node", "-1\n");
    for c in 0..8 {
        h = h.file(
            &format!("/sys/devices/system/cpu/cpu{c}/topology/thread_siblings_list"),
            &format!("{c}\n"),
        );
    }
    for q in 0..4 {
        h = h
            .file(
                &format!("/sys/class/net/eth0/queues/rx-{q}/rps_cpus"),
                "00\n",
            )
            .file(
                &format!("/sys/class/net/eth0/queues/tx-{q}/xps_cpus"),
                &format!("{:x}\n", 1 << q),
            );
    }
    for irq in [50, 51, 52, 53, 60, 70, 71] {
        h = h.file(&format!("/proc/irq/{irq}/smp_affinity_list"), "0-7\n");
    }
    h
}

#[test]
fn the_recorded_machine_has_one_node_and_a_virtio_card() {
    let r = check(&recorded(), &FakeProbe::default(), Some(&default_profile()));
    expect(
        &finding(&r, "numa.nodes"),
        Level::Ok,
        &["NUMA nodes: 1 (node0: cpus 0-1, 2 shards); cards: eth0 on no known node."],
    );
    let f = finding(&r, "nic.irqs");
    expect(
        &f,
        Level::Info,
        &[
            "eth0: 2 queue interrupts",
            "irq 38 virtio2-input.0 → cpus 0-1",
            "irq 39 virtio2-output.0 → cpus 0-1",
        ],
    );
    assert!(
        !f.found.contains("virtio2-config") && !f.found.contains("ifb"),
        "{f:#?}"
    );
    expect_fix(
        &f,
        &[
            "echo 0 > /proc/irq/38/smp_affinity_list\necho 1 > /proc/irq/39/smp_affinity_list",
            "irqbalance",
        ],
    );
    let f = finding(&r, "nic.rps_xps");
    expect(
        &f,
        Level::Info,
        &["eth0: 1 rx queue (RPS off), 1 tx queue (XPS unreadable); 2 shards."],
    );
    expect_fix(&f, &["echo 3 > /sys/class/net/eth0/queues/rx-0/rps_cpus"]);
}

#[test]
fn shards_across_sockets_from_the_card_warn() {
    let r = check(&two_socket(), &FakeProbe::default(), None);
    let f = finding(&r, "numa.nodes");
    expect(
        &f,
        Level::Warn,
        &["NUMA nodes: 2 (node0: cpus 0-3, 4 shards; node1: cpus 4-7, 4 shards); cards: eth0 on node0, eth1 on no known node."],
    );
    assert!(f.why.contains("Shards on cpus 4-7"), "{f:#?}");
    expect_fix(
        &f,
        &["numactl --cpunodebind=0 --membind=0", "taskset -c 0-3"],
    );
    // Started on node 0 only: nothing crosses.
    let near = two_socket().file("/proc/self/status", &status("0-3", ""));
    let f = finding(&check(&near, &FakeProbe::default(), None), "numa.nodes");
    expect(
        &f,
        Level::Info,
        &["node0: cpus 0-3, 4 shards; node1: cpus 4-7, 0 shards"],
    );
}

#[test]
fn queue_interrupts_map_one_per_shard_core_on_the_cards_node() {
    let r = check(&two_socket(), &FakeProbe::default(), None);
    let f = finding(&r, "nic.irqs");
    expect(
        &f,
        Level::Info,
        &[
            "eth0: 4 queue interrupts\n  irq 50 eth0-TxRx-0 → cpus 0-7\n  irq 51 eth0-TxRx-1 → cpus 0-7",
            "irq 53 eth0-TxRx-3 → cpus 0-7",
            "eth1: no queue interrupts named in /proc/interrupts",
        ],
    );
    assert!(
        !f.found.contains("eth10") && !f.found.contains("mlx5"),
        "{f:#?}"
    );
    expect_fix(
        &f,
        &[
            "echo 0 > /proc/irq/50/smp_affinity_list\necho 1 > /proc/irq/51/smp_affinity_list\n\
             echo 2 > /proc/irq/52/smp_affinity_list\necho 3 > /proc/irq/53/smp_affinity_list",
        ],
    );
    let mut mapped = two_socket();
    for (irq, cpu) in [(50, 0), (51, 1), (52, 2), (53, 3)] {
        mapped = mapped.file(
            &format!("/proc/irq/{irq}/smp_affinity_list"),
            &format!("{cpu}\n"),
        );
    }
    let f = finding(&check(&mapped, &FakeProbe::default(), None), "nic.irqs");
    expect(
        &f,
        Level::Ok,
        &["Each queue interrupt already runs on one shard core."],
    );
}

#[test]
fn fewer_rx_queues_than_shards_suggest_rps_on_the_near_cores() {
    let f = finding(
        &check(&two_socket(), &FakeProbe::default(), None),
        "nic.rps_xps",
    );
    expect(
        &f,
        Level::Info,
        &["eth0: 4 rx queues (RPS off), 4 tx queues (XPS cpus 0-3); eth1: no rx queues listed, no tx queues listed; 8 shards."],
    );
    expect_fix(
        &f,
        &[
            "echo f > /sys/class/net/eth0/queues/rx-0/rps_cpus",
            "queues/rx-3/rps_cpus",
        ],
    );
    let four = server("listen = [\"127.0.0.1:8080\"]\nshards = 4");
    let f = finding(
        &check(&two_socket(), &FakeProbe::default(), Some(&four)),
        "nic.rps_xps",
    );
    expect(&f, Level::Ok, &["4 shards."]);
    let rps = recorded().file("/sys/class/net/eth0/queues/rx-0/rps_cpus", "3\n");
    let f = finding(&check(&rps, &FakeProbe::default(), None), "nic.rps_xps");
    expect(&f, Level::Ok, &["eth0: 1 rx queue (RPS cpus 0-1)"]);
}

#[test]
fn no_cards_or_no_interrupts_cannot_tell() {
    let host = MapHost::new().file("/sys/class/net/lo/mtu", "65536");
    let r = check(&host, &FakeProbe::default(), None);
    expect(
        &finding(&r, "numa.nodes"),
        Level::Info,
        &["cannot tell the NUMA layout"],
    );
    expect(
        &finding(&r, "nic.irqs"),
        Level::Info,
        &["No network card besides lo"],
    );
    expect(
        &finding(&r, "nic.rps_xps"),
        Level::Info,
        &["No network card besides lo"],
    );
    let silent = recorded().without("/proc/interrupts");
    let f = finding(&check(&silent, &FakeProbe::default(), None), "nic.irqs");
    expect(&f, Level::Info, &["Cannot read /proc/interrupts"]);
    let unnamed = recorded().file("/proc/interrupts", "  5: 1 2 IO-APIC 5-edge ACPI\n");
    let f = finding(&check(&unnamed, &FakeProbe::default(), None), "nic.irqs");
    expect(&f, Level::Info, &["eth0: no queue interrupts named"]);
}
