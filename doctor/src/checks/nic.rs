//! NUMA nodes and the network cards: which node each card sits on, its
//! queue interrupts and where they run, RPS and XPS.

use super::Ctx;
use crate::finding::{Finding, Level};
use crate::host::Host;
use crate::parse;

/// Queue interrupts listed per card, at most.
const MAX_IRQ_LINES: usize = 32;

/// NUMA nodes with their CPUs, by node number.
fn nodes(host: &dyn Host) -> Vec<(u32, Vec<u32>)> {
    let mut nodes: Vec<(u32, Vec<u32>)> = host
        .list("/sys/devices/system/node")
        .iter()
        .filter_map(|n| {
            let id: u32 = n.strip_prefix("node")?.parse().ok()?;
            let cpus = host
                .read(&format!("/sys/devices/system/node/{n}/cpulist"))
                .and_then(|t| parse::cpu_list(&t))?;
            Some((id, cpus))
        })
        .collect();
    nodes.sort_by_key(|(id, _)| *id);
    nodes
}

/// A network card: an interface other than lo backed by a device.
struct Nic {
    name: String,
    /// The device's name (the link's last part: "virtio2", "0000:3b:00.0").
    device: String,
    /// Its NUMA node, when the kernel knows it.
    node: Option<u32>,
}

fn nics(host: &dyn Host) -> Vec<Nic> {
    host.list("/sys/class/net")
        .into_iter()
        .filter(|n| n != "lo")
        .filter_map(|name| {
            let link = host.link(&format!("/sys/class/net/{name}/device"))?;
            let device = link.rsplit('/').next().unwrap_or("").to_string();
            let node = host
                .read(&format!("/sys/class/net/{name}/device/numa_node"))
                .and_then(|t| parse::int(&t))
                .and_then(|n| u32::try_from(n).ok());
            Some(Nic { name, device, node })
        })
        .collect()
}

/// One queue interrupt of a card.
struct Irq {
    number: u32,
    name: String,
    affinity: Option<Vec<u32>>,
}

/// Whether an interrupt's name token belongs to the card.
fn names_card(token: &str, nic: &Nic) -> bool {
    let starts = |prefix: &str| {
        !prefix.is_empty()
            && token.strip_prefix(prefix).is_some_and(|rest| {
                rest.is_empty() || rest.starts_with(|c: char| !c.is_ascii_alphanumeric())
            })
    };
    if token.ends_with("-config") {
        return false;
    }
    starts(&nic.name)
        || starts(&nic.device)
        || (nic.device.contains(':') && token.contains(&nic.device))
}

/// The card's interrupts from /proc/interrupts.
fn irqs_of(host: &dyn Host, interrupts: &str, nic: &Nic) -> Vec<Irq> {
    interrupts
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let number: u32 = words.next()?.strip_suffix(':')?.parse().ok()?;
            let name = words.rev().find(|w| names_card(w, nic))?.to_string();
            let affinity = host
                .read(&format!("/proc/irq/{number}/smp_affinity_list"))
                .and_then(|t| parse::cpu_list(&t));
            Some(Irq {
                number,
                name,
                affinity,
            })
        })
        .collect()
}

/// The shard cores on the card's node (all of them when its node is not
/// known or holds none).
fn cores_near(cx: &Ctx, nic: &Nic, nodes: &[(u32, Vec<u32>)]) -> Vec<u32> {
    let all = &cx.cpus.shard_cores;
    let near: Vec<u32> = nic
        .node
        .and_then(|n| nodes.iter().find(|(id, _)| *id == n))
        .map(|(_, cpus)| all.iter().copied().filter(|c| cpus.contains(c)).collect())
        .unwrap_or_default();
    if near.is_empty() {
        all.clone()
    } else {
        near
    }
}

/// `numa.nodes`: NUMA nodes, where the shards and the cards are.
pub fn numa(cx: &Ctx) -> Finding {
    const ID: &str = "numa.nodes";
    let nodes = nodes(cx.host);
    if nodes.is_empty() {
        return Finding::new(
            ID,
            Level::Info,
            "Cannot read /sys/devices/system/node: cannot tell the NUMA layout.",
        );
    }
    let shard_nodes: Vec<String> = nodes
        .iter()
        .map(|(id, cpus)| {
            let shards = cx
                .cpus
                .shard_cores
                .iter()
                .filter(|c| cpus.contains(c))
                .count();
            format!(
                "node{id}: cpus {}, {shards} shards",
                parse::format_cpus(cpus)
            )
        })
        .collect();
    let cards = nics(cx.host);
    let card_nodes: Vec<String> = cards
        .iter()
        .map(|n| match n.node {
            Some(node) => format!("{} on node{node}", n.name),
            None => format!("{} on no known node", n.name),
        })
        .collect();
    let found = format!(
        "NUMA nodes: {} ({}); cards: {}.",
        nodes.len(),
        shard_nodes.join("; "),
        if card_nodes.is_empty() {
            "none".to_string()
        } else {
            card_nodes.join(", ")
        }
    );
    if nodes.len() == 1 {
        return Finding::new(ID, Level::Ok, found);
    }
    let home: Vec<u32> = cards.iter().filter_map(|n| n.node).collect();
    let far: Vec<u32> = nodes
        .iter()
        .filter(|(id, _)| !home.contains(id))
        .flat_map(|(_, cpus)| cpus.iter().copied())
        .filter(|c| cx.cpus.shard_cores.contains(c))
        .collect();
    if home.is_empty() || far.is_empty() {
        return Finding::new(ID, Level::Info, found)
            .why("Packets are cheapest to handle on the node the card is attached to.");
    }
    let near: Vec<u32> = nodes
        .iter()
        .filter(|(id, _)| home.contains(id))
        .flat_map(|(_, cpus)| cpus.iter().copied())
        .collect();
    Finding::new(ID, Level::Warn, found)
        .why(format!(
            "Shards on cpus {} are on another node than the cards: every packet and \
             connection they handle crosses the interconnect.",
            parse::format_cpus(&far)
        ))
        .fix(format!(
            "Keep Gapura on the cards' node: `numactl --cpunodebind={node} --membind={node} \
             gapura run ...` or `taskset -c {cpus}` (CPUAffinity= in its systemd unit), with \
             shards = \"auto\".",
            node = home[0],
            cpus = parse::format_cpus(&near)
        ))
}

/// `nic.irqs`: each card's queue interrupts and where they run, with a
/// suggested mapping of one queue per shard core.
pub fn irqs(cx: &Ctx) -> Finding {
    const ID: &str = "nic.irqs";
    let cards = nics(cx.host);
    if cards.is_empty() {
        return Finding::new(
            ID,
            Level::Info,
            "No network card besides lo: nothing to map.",
        );
    }
    let Some(interrupts) = cx.host.read("/proc/interrupts") else {
        return Finding::new(
            ID,
            Level::Info,
            "Cannot read /proc/interrupts: cannot tell.",
        );
    };
    let nodes = nodes(cx.host);
    let mut found = Vec::new();
    let mut fix = Vec::new();
    let mut mapped = true;
    let mut any = false;
    for nic in &cards {
        let irqs = irqs_of(cx.host, &interrupts, nic);
        if irqs.is_empty() {
            found.push(format!(
                "{}: no queue interrupts named in /proc/interrupts",
                nic.name
            ));
            continue;
        }
        any = true;
        let cores = cores_near(cx, nic, &nodes);
        found.push(format!("{}: {} queue interrupts", nic.name, irqs.len()));
        for (i, irq) in irqs.iter().enumerate() {
            let target = cores[i % cores.len()];
            let now = irq
                .affinity
                .as_deref()
                .map_or("unknown".into(), parse::format_cpus);
            if i < MAX_IRQ_LINES {
                found.push(format!("  irq {} {} → cpus {now}", irq.number, irq.name));
            }
            if irq.affinity.as_deref() != Some(&[target]) {
                mapped = false;
            }
            fix.push(format!(
                "echo {target} > /proc/irq/{}/smp_affinity_list",
                irq.number
            ));
        }
        if irqs.len() > MAX_IRQ_LINES {
            found.push(format!("  … {} more", irqs.len() - MAX_IRQ_LINES));
        }
    }
    if !any {
        return Finding::new(ID, Level::Info, found.join("\n")).why(
            "No card's interrupts carry its name (a virtual card, or a driver that names \
             them otherwise): cannot suggest a mapping.",
        );
    }
    if mapped {
        return Finding::new(
            ID,
            Level::Ok,
            format!(
                "{}\nEach queue interrupt already runs on one shard core.",
                found.join("\n")
            ),
        );
    }
    Finding::new(ID, Level::Info, found.join("\n"))
        .why(
            "A queue's interrupt runs the first part of its packets' processing: one queue \
             per shard core, on the card's NUMA node, keeps that work next to the shard \
             that serves the connection.",
        )
        .fix(format!(
            "Suggested mapping (one queue per shard core, as root; stop irqbalance or ban \
             these interrupts first, or it moves them back):\n{}",
            fix.join("\n")
        ))
}

/// A CPU set as a hex mask for rps_cpus ("3", "1,00000000").
fn hex_mask(cpus: &[u32]) -> String {
    let words = cpus.iter().max().map_or(1, |m| *m as usize / 32 + 1);
    let mut w = vec![0u32; words];
    for &c in cpus {
        w[c as usize / 32] |= 1 << (c % 32);
    }
    let mut parts: Vec<String> = Vec::new();
    for (i, word) in w.iter().rev().enumerate() {
        parts.push(if i == 0 {
            format!("{word:x}")
        } else {
            format!("{word:08x}")
        });
    }
    parts.join(",")
}

/// One direction of a card's queues: how many, and the CPUs their steering
/// masks name (`None`: no mask file could be read).
#[derive(Default)]
struct Queues {
    count: usize,
    cpus: Option<Vec<u32>>,
}

impl Queues {
    fn show(&self, what: &str) -> String {
        if self.count == 0 {
            return format!("no {what} queues listed");
        }
        let mask = match &self.cpus {
            None => "unreadable".to_string(),
            Some(c) if c.is_empty() => "off".to_string(),
            Some(c) => format!("cpus {}", parse::format_cpus(c)),
        };
        let s = if self.count == 1 { "" } else { "s" };
        format!(
            "{} {what} queue{s} ({} {mask})",
            self.count,
            what_mask(what)
        )
    }
}

fn what_mask(what: &str) -> &'static str {
    if what == "rx" {
        "RPS"
    } else {
        "XPS"
    }
}

/// One card's receive and transmit queues.
fn queues(cx: &Ctx, nic: &Nic) -> (Queues, Queues) {
    let dir = format!("/sys/class/net/{}/queues", nic.name);
    let (mut rx, mut tx) = (Queues::default(), Queues::default());
    for q in cx.host.list(&dir) {
        let (file, side) = if q.starts_with("rx-") {
            ("rps_cpus", &mut rx)
        } else if q.starts_with("tx-") {
            ("xps_cpus", &mut tx)
        } else {
            continue;
        };
        side.count += 1;
        let mask = cx
            .host
            .read(&format!("{dir}/{q}/{file}"))
            .and_then(|t| parse::hex_mask(&t));
        if let Some(mask) = mask {
            let cpus = side.cpus.get_or_insert_with(Vec::new);
            cpus.extend(mask);
            cpus.sort_unstable();
            cpus.dedup();
        }
    }
    (rx, tx)
}

/// `nic.rps_xps`: receive and transmit packet steering per card.
pub fn rps_xps(cx: &Ctx) -> Finding {
    const ID: &str = "nic.rps_xps";
    let cards = nics(cx.host);
    if cards.is_empty() {
        return Finding::new(
            ID,
            Level::Info,
            "No network card besides lo: nothing to look at.",
        );
    }
    let shards = cx.cpus.shards();
    let nodes = nodes(cx.host);
    let mut found = Vec::new();
    let mut fix = Vec::new();
    for nic in &cards {
        let (rx, tx) = queues(cx, nic);
        found.push(format!(
            "{}: {}, {}",
            nic.name,
            rx.show("rx"),
            tx.show("tx")
        ));
        let rps_off = rx.cpus.as_ref().is_none_or(Vec::is_empty);
        if rx.count > 0 && rx.count < shards && rps_off {
            let mask = hex_mask(&cores_near(cx, nic, &nodes));
            for q in 0..rx.count {
                fix.push(format!(
                    "echo {mask} > /sys/class/net/{}/queues/rx-{q}/rps_cpus",
                    nic.name
                ));
            }
        }
    }
    let found = format!("{}; {shards} shards.", found.join("; "));
    if fix.is_empty() {
        return Finding::new(ID, Level::Ok, found);
    }
    Finding::new(ID, Level::Info, found)
        .why(
            "A card with fewer receive queues than shards does its receive work on few \
             cores; RPS spreads it over the shard cores (it costs an inter-processor \
             interrupt per batch).",
        )
        .fix(format!(
            "To spread receive work over the shard cores (as root):\n{}",
            fix.join("\n")
        ))
}

#[cfg(test)]
mod tests {
    #[test]
    fn hex_masks_are_written_in_32_bit_words() {
        assert_eq!(super::hex_mask(&[0, 1]), "3");
        assert_eq!(super::hex_mask(&[32]), "1,00000000");
        assert_eq!(super::hex_mask(&[]), "0");
    }
}
