//! `gapura explain udp://RELAY SOURCE DATAGRAM`: runs a relay's checks on
//! one datagram, on fresh tables, and names the step that would drop it,
//! or where it would be relayed. The datagram is hex (spaces allowed) or
//! `@FILE` (its bytes). The same `Relay::inbound` as the shards decides it,
//! with the relay's envelope keys read from their files (never created
//! here); nothing is sent.

use gapura_gate::udp::UdpDrop;
use gapura_udp::{Inbound, Relay};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;

/// The steps, in the order of docs/udp.md, with what passing each means.
const STEPS: [(&str, &str); 8] = [
    ("size", "within max_datagram_bytes"),
    (
        "global budget",
        "within the relay's global budget (on empty tables)",
    ),
    (
        "prefix budget",
        "within its source prefix's budget (on empty tables)",
    ),
    (
        "operation budget",
        "within its class's budget (on empty tables)",
    ),
    ("session", "a new session: the table has room"),
    ("session rate", "a new session's bucket is full"),
    ("envelope", "no envelope on this relay"),
    ("relay", "relayed"),
];

/// The steps of a relay with `auth`: the envelope before the budgets it
/// does not pay when invalid.
const AUTH_STEPS: [(&str, &str); 9] = [
    ("size", "within max_datagram_bytes"),
    (
        "prefix budget",
        "within its source prefix's budget (on empty tables)",
    ),
    ("envelope", "version, key, timestamp, tag and nonce pass"),
    ("key budget", "within its key's budget (on empty tables)"),
    (
        "global budget",
        "within the relay's global budget (on empty tables)",
    ),
    (
        "operation budget",
        "within its class's budget (on empty tables)",
    ),
    ("session", "a new session: the table has room"),
    ("session rate", "a new session's bucket is full"),
    ("relay", "relayed"),
];

fn datagram(arg: &str) -> Result<Vec<u8>, String> {
    if let Some(path) = arg.strip_prefix('@') {
        return std::fs::read(path).map_err(|e| format!("cannot read {path}: {e}"));
    }
    let digits: Vec<u8> = arg.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    if !digits.len().is_multiple_of(2) {
        return Err("the datagram's hex has an odd number of digits".into());
    }
    digits
        .chunks(2)
        .map(|p| {
            std::str::from_utf8(p)
                .ok()
                .and_then(|s| u8::from_str_radix(s, 16).ok())
                .ok_or_else(|| format!("{:?} is not a hex byte", String::from_utf8_lossy(p)))
        })
        .collect()
}

pub fn run(a: &crate::cli::ExplainArgs, relay: &str) -> ExitCode {
    let (Ok(source), Some(raw)) = (a.url.parse::<SocketAddr>(), a.datagram.as_deref()) else {
        eprintln!("gapura explain: udp://RELAY needs SOURCE (IP:PORT) and DATAGRAM (hex or @FILE)");
        return ExitCode::from(2);
    };
    let bytes = match datagram(raw) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("gapura explain: {e}");
            return ExitCode::from(2);
        }
    };
    let name = a.profile.as_deref().unwrap_or("<embedded default>");
    let mut compiled = match crate::profile::load(a.profile.as_deref().map(std::path::Path::new)) {
        Ok(c) => c,
        Err(errors) => {
            for e in errors {
                eprintln!("{name}:{e}");
            }
            return ExitCode::FAILURE;
        }
    };
    if let Err(e) = crate::udp::load_keys(&mut compiled.snapshot, false) {
        eprintln!("gapura explain: {e}: the envelope has no key, every envelope is unknown_key");
    }
    let Some(policy) = compiled.snapshot.udp.iter().find(|p| p.name == relay) else {
        eprintln!("gapura explain: {name} has no [[udp]] relay named {relay:?}");
        return ExitCode::from(2);
    };
    let mut seed = [0u8; 16];
    if let Err(e) = crate::random::fill(&mut seed) {
        eprintln!("gapura explain: no randomness: {e}");
        return ExitCode::FAILURE;
    }
    let mut r = Relay::new(Arc::clone(policy), seed, Default::default());
    let unix_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let decided = r.inbound(source, &bytes, 0, unix_ms);
    let class_of = |c: u8| {
        policy
            .classes
            .get(usize::from(c))
            .map_or("other", |k| k.name.as_str())
            .to_string()
    };
    let (dropped_at, class, outcome) = match decided {
        Inbound::Drop { reason, class } => (
            Some(reason),
            class_of(class),
            format!("dropped silently ({}): no reply", reason.label()),
        ),
        Inbound::Forward {
            server,
            payload,
            class,
            ..
        } => (
            None,
            class_of(class),
            format!(
                "relayed to {} ({} bytes{}) on a new session",
                policy.servers[server].addr,
                payload.1 - payload.0,
                if payload.1 - payload.0 < bytes.len() {
                    ", the envelope stripped"
                } else {
                    ""
                }
            ),
        ),
    };
    let lines = step_lines(policy, dropped_at);
    if a.json {
        let steps: Vec<serde_json::Value> = lines
            .iter()
            .map(|(n, s)| serde_json::json!({ "step": n, "says": s }))
            .collect();
        let out = serde_json::json!({
            "datagram": { "relay": relay, "source": source.to_string(), "bytes": bytes.len(), "class": class },
            "steps": steps,
            "answer": {
                "kind": if dropped_at.is_some() { "drop" } else { "relay" },
                "reason": dropped_at.map(UdpDrop::label),
                "says": outcome,
            },
        });
        println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
    } else {
        println!(
            "udp://{relay}: {} bytes from {source}, class {class}",
            bytes.len()
        );
        for (n, s) in &lines {
            println!("  {n:<17} {s}");
        }
        println!("  {:<17} {outcome}", "answer");
    }
    ExitCode::SUCCESS
}

/// What each step, in the relay's order, made of the datagram, down to
/// the one that dropped it.
fn step_lines(
    policy: &gapura_gate::udp::UdpPolicy,
    dropped_at: Option<UdpDrop>,
) -> Vec<(&'static str, String)> {
    let mut lines = Vec::new();
    let steps: &[(&str, &str)] = if policy.envelope.is_some() {
        &AUTH_STEPS
    } else {
        &STEPS
    };
    for &(step, passed) in steps {
        match dropped_at {
            Some(reason) if reason.step() == step => {
                lines.push((step, format!("drops it: {}", why(reason))));
                break;
            }
            _ if step == "relay" => {}
            _ if step == "key budget"
                && policy
                    .envelope
                    .as_ref()
                    .is_some_and(|e| e.key_budget.is_none()) =>
            {
                lines.push((step, "no key budget".into()))
            }
            _ if step == "session rate" && policy.session.rate.is_none() => {
                lines.push((step, "no session bucket (rate = 0)".into()))
            }
            _ => lines.push((step, passed.into())),
        }
    }
    lines
}

fn why(reason: UdpDrop) -> &'static str {
    match reason {
        UdpDrop::Oversized => "longer than max_datagram_bytes",
        UdpDrop::GlobalBudget => "the global budget is spent",
        UdpDrop::PrefixBudget => "the source prefix's budget is spent",
        UdpDrop::TrackedKeys => "the prefix table is at its ceiling",
        UdpDrop::OperationBudget => "the class's budget is spent",
        UdpDrop::SessionCapacity => "the session table is at its ceiling",
        UdpDrop::SessionRate => "the session's bucket is empty",
        UdpDrop::Malformed => "not an envelope (too short, or not version 1)",
        UdpDrop::UnknownKey => "the key id names no key of the relay",
        UdpDrop::Stale => "the timestamp is further than max_age_ms from now",
        UdpDrop::BadTag => "the tag does not verify",
        UdpDrop::Replayed => "the nonce was seen",
        UdpDrop::KeyBudget => "the key's budget is spent",
        UdpDrop::Amplification => "over the amplification bound",
        UdpDrop::Unrelayed => "no server to relay to",
    }
}
