//! `[[udp]]`: UDP relays, checked and compiled into the gate's
//! [`UdpPolicy`], their budgets divided for one of `shards` shards where
//! their scope says so (the prefix budget is exact: datagrams are steered
//! by source like connections). `scope = "fleet"` on `global` or `prefix`
//! (with a `[fleet]`) shares the budget across nodes: each shard holds it
//! whole against the fleet's count, and its local share alone
//! (docs/fleet.md).
//!
//! The servers are written and resolved as an upstream group's (and share
//! its `upstream.server.*` codes); the budgets' fields are `[quota]`'s
//! (`requests`, `optional`, `scope`, and their `quota.*` codes). Key files
//! are only named here: the runtime reads (or creates) them.

use crate::env::Resolver;
use crate::error::{key_path, Errors};
use crate::names::BlockKind;
use crate::quota::{ceiling, fleet_scope, scope, Fields};
use crate::schema::{RawUdp, RawUdpBudget, RawUdpSession};
use crate::upstream::{check_balance, check_servers};
use crate::values::{as_u64, int_in};
use gapura_gate::quota::{Budget, Ceiling, RatePolicy, Scope};
use gapura_gate::udp::{
    EnvelopePolicy, OperationField, SessionPolicy, UdpBudgetPolicy, UdpClass, UdpFleetBudgets,
    UdpPolicy, MAX_CLASSES, MAX_DATAGRAM_BYTES, MAX_ENVELOPE_KEYS, MAX_OPERATION_BYTES,
    REPLAY_WINDOW_BOUNDS,
};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use toml::Spanned;

const UDP: BlockKind = BlockKind {
    key: "udp",
    noun: "UDP relay",
    codes: [
        "udp.name.required",
        "udp.name.invalid",
        "udp.name.duplicate",
    ],
    required: "a UDP relay needs a name, such as name = \"game\"",
};

const CLASS: BlockKind = BlockKind {
    key: "classes",
    noun: "class",
    codes: [
        "udp.class.name.required",
        "udp.class.name.invalid",
        "udp.class.name.duplicate",
    ],
    required: "a class needs a name, such as name = \"join\"",
};

/// Defaults: a datagram that fits an Ethernet frame, a second's window,
/// 100 datagrams/s per session with a burst of 200, half a minute idle.
pub const DEFAULT_MAX_DATAGRAM_BYTES: u32 = 1_472;
pub const DEFAULT_WINDOW_MS: u64 = 1_000;
pub const DEFAULT_SESSION_RATE: u64 = 100;
pub const DEFAULT_SESSION_BURST: u32 = 200;
pub const DEFAULT_IDLE_TIMEOUT_MS: u64 = 30_000;
/// Per shard: 16 Ki sessions (256 reserved), 64 Ki tracked prefixes (1 Ki
/// reserved).
pub const DEFAULT_MAX_SESSIONS: u32 = 16_384;
pub const DEFAULT_SESSION_RESERVE: u32 = 256;
pub const DEFAULT_TRACKED_KEYS: u32 = 65_536;
pub const DEFAULT_TRACKED_RESERVE: u32 = 1_024;
/// Per window: 10,000 datagrams per source prefix, 1,000,000 in all.
pub const DEFAULT_PREFIX_REQUESTS: u32 = 10_000;
pub const DEFAULT_GLOBAL_REQUESTS: u32 = 1_000_000;
/// The largest table a relay may ask for, per shard.
const MAX_SESSIONS: i64 = 1 << 20;

/// Checks every relay for one of `shards` shards; `fleet`: the nodes
/// `[fleet]` expects, when it is written (`scope = "fleet"` needs it).
pub(crate) fn check_udp(
    raw: &[Spanned<RawUdp>],
    (shards, fleet): (u32, Option<u32>),
    resolver: &dyn Resolver,
    e: &mut Errors<'_>,
) -> Vec<Arc<UdpPolicy>> {
    let mut out = Vec::new();
    let mut first: HashMap<String, usize> = HashMap::new();
    let mut bound: HashMap<SocketAddr, String> = HashMap::new();
    for (i, r) in raw.iter().enumerate() {
        let base = format!("udp[{i}]");
        let name = UDP.check(
            &r.get_ref().name,
            &base,
            r.span(),
            |n| first.get(n).copied(),
            e,
        );
        if let Some(n) = name {
            first.insert(n.get_ref().clone(), i);
        }
        let relay_name = name.map_or(String::new(), |n| n.get_ref().clone());
        let u = r.get_ref();
        let listen = check_listen(u, &base, r.span(), &mut bound, e);
        let servers = check_servers(&u.servers, &relay_name, &base, r.span(), resolver, e);
        let policy = UdpPolicy {
            name: relay_name.clone(),
            listen,
            servers,
            balance: check_balance(&u.balance, &base, e),
            max_datagram_bytes: int_in(
                e,
                &u.max_datagram_bytes,
                &format!("{base}.max_datagram_bytes"),
                "udp.max_datagram_bytes.range",
                (1, i64::from(MAX_DATAGRAM_BYTES)),
            )
            .map_or(DEFAULT_MAX_DATAGRAM_BYTES, |n| n as u32),
            budgets: check_budgets(u, (&base, &relay_name), (shards, fleet), e),
            operation: check_operation(u, &base, e),
            classes: Vec::new(),
            session: check_session(u, &base, e),
            envelope: check_envelope(u, &base, e),
        };
        let classes = check_classes(u, &base, policy.operation, shards, e);
        out.push(Arc::new(UdpPolicy { classes, ..policy }));
    }
    out
}

fn check_listen(
    u: &RawUdp,
    base: &str,
    span: std::ops::Range<usize>,
    bound: &mut HashMap<SocketAddr, String>,
    e: &mut Errors<'_>,
) -> Vec<SocketAddr> {
    let path = format!("{base}.listen");
    let list = match &u.listen {
        Some(l) if !l.get_ref().is_empty() => l,
        other => {
            e.push(
                "udp.listen.empty",
                path,
                other.as_ref().map_or(span, |l| l.span()),
                "a UDP relay needs at least one address, such as listen = [\"0.0.0.0:7000\"]",
            );
            return Vec::new();
        }
    };
    let mut out = Vec::new();
    for (j, item) in list.get_ref().iter().enumerate() {
        let item_path = format!("{path}[{j}]");
        let Ok(addr) = item.get_ref().parse::<SocketAddr>() else {
            e.push(
                "udp.listen.invalid",
                item_path,
                item.span(),
                format!(
                    "{:?} is not IPv4:PORT or [IPv6]:PORT, such as \"0.0.0.0:7000\"",
                    item.get_ref()
                ),
            );
            continue;
        };
        if addr.port() != 0 {
            if let Some(first) = bound.get(&addr) {
                e.push(
                    "udp.listen.duplicate",
                    item_path,
                    item.span(),
                    format!("{addr} is already a UDP address, at {first}"),
                );
                continue;
            }
            bound.insert(addr, item_path);
        }
        out.push(addr);
    }
    out
}

fn check_budgets(
    u: &RawUdp,
    (base, relay): (&str, &str),
    (shards, fleet): (u32, Option<u32>),
    e: &mut Errors<'_>,
) -> UdpBudgetPolicy {
    let window_ms = int_in(
        e,
        &u.window_ms,
        &format!("{base}.window_ms"),
        "quota.window_ms.range",
        (100, 3_600_000),
    )
    .map_or(DEFAULT_WINDOW_MS, as_u64);
    let budget = |raw: &Option<RawUdpBudget>, key: &str, default: u32, e: &mut Errors<'_>| {
        let Some(b) = raw else {
            return Budget::flat(default).ok();
        };
        Fields::new(&format!("{base}.{key}"), &b.requests, &b.optional).budget(e)
    };
    let (global_scope, global_nodes) = match &u.global {
        Some(g) => {
            let path = key_path(&format!("{base}.global"), "scope");
            fleet_scope(e, &g.scope, &path, fleet, true)
        }
        None => (Scope::Split, None),
    };
    let global = budget(&u.global, "global", DEFAULT_GLOBAL_REQUESTS, e);
    let prefix = budget(&u.prefix, "prefix", DEFAULT_PREFIX_REQUESTS, e);
    let prefix_nodes = prefix_scope(u, base, fleet, e);
    let tracked = ceiling(
        e,
        (&format!("{base}.tracked_keys"), &u.tracked_keys),
        (&format!("{base}.tracked_reserve"), &u.tracked_reserve),
        Ceiling::new(DEFAULT_TRACKED_KEYS, DEFAULT_TRACKED_RESERVE).expect("in range"),
    );
    // A fleet-scoped budget is held whole by each shard against the
    // fleet's count; alone, the global budget's share is the node's share
    // split among its shards (its one key is seen by all of them), a
    // prefix's the node's share (a prefix is steered to one shard).
    let fleet_budgets = UdpFleetBudgets::new(
        relay,
        window_ms,
        global
            .zip(global_nodes)
            .map(|(b, n)| b.for_shards(Scope::Split, n.saturating_mul(shards))),
        prefix
            .zip(prefix_nodes)
            .map(|(b, n)| b.for_shards(Scope::Split, n)),
    );
    UdpBudgetPolicy {
        window_ms,
        global: match global_nodes {
            Some(_) => global,
            None => global.map(|b| b.for_shards(global_scope, shards)),
        },
        prefix,
        tracked,
        fleet: fleet_budgets,
    }
}

/// `prefix.scope`: none (exact on a node: a prefix's datagrams reach one
/// shard), or `"fleet"` with a `[fleet]`, then the nodes it expects.
fn prefix_scope(u: &RawUdp, base: &str, fleet: Option<u32>, e: &mut Errors<'_>) -> Option<u32> {
    let s = u.prefix.as_ref()?.scope.as_ref()?;
    let path = format!("{base}.prefix.scope");
    if s.get_ref() != "fleet" {
        e.push(
            "udp.prefix.scope.unexpected",
            path,
            s.span(),
            "a source prefix's datagrams all reach one shard: its budget is exact on a node and \
             takes no scope but \"fleet\" (shared by every node)",
        );
        return None;
    }
    if fleet.is_none() {
        e.push(
            "quota.scope.fleet",
            path,
            s.span(),
            "scope = \"fleet\" shares the budget through the engine [fleet] names: add a \
             [fleet] section, or leave the prefix's budget to this node",
        );
    }
    fleet
}

fn check_operation(u: &RawUdp, base: &str, e: &mut Errors<'_>) -> Option<OperationField> {
    let op = u.operation.as_ref()?;
    let path = format!("{base}.operation");
    let offset = int_in(
        e,
        &op.get_ref().offset,
        &format!("{path}.offset"),
        "udp.operation.offset.range",
        (0, i64::from(MAX_DATAGRAM_BYTES) - 1),
    )
    .unwrap_or(0);
    let len = int_in(
        e,
        &op.get_ref().bytes,
        &format!("{path}.bytes"),
        "udp.operation.bytes.range",
        (1, i64::from(MAX_OPERATION_BYTES)),
    )
    .unwrap_or(1);
    Some(OperationField {
        offset: offset as u16,
        len: len as u8,
    })
}

fn check_classes(
    u: &RawUdp,
    base: &str,
    field: Option<OperationField>,
    shards: u32,
    e: &mut Errors<'_>,
) -> Vec<UdpClass> {
    let mut out = vec![UdpClass::other()];
    let Some(list) = &u.classes else {
        return out;
    };
    let path = format!("{base}.classes");
    let Some(field) = field else {
        e.push(
            "udp.classes.operation",
            path,
            list.span(),
            "classes are told apart by the operation field: set operation = { offset = 0, \
             bytes = 1 } too",
        );
        return out;
    };
    if list.get_ref().len() > MAX_CLASSES {
        e.push(
            "udp.classes.tooMany",
            path.clone(),
            list.span(),
            format!("at most {MAX_CLASSES} classes"),
        );
    }
    let max_value = if field.len >= 4 {
        i64::from(u32::MAX)
    } else {
        (1i64 << (8 * u32::from(field.len))) - 1
    };
    let mut first: HashMap<String, usize> = HashMap::new();
    let mut owner: HashMap<i64, usize> = HashMap::new();
    for (j, c) in list.get_ref().iter().enumerate().take(MAX_CLASSES) {
        let cpath = format!("{path}[{j}]");
        let raw = c.get_ref();
        let name = CLASS.check(&raw.name, &cpath, c.span(), |n| first.get(n).copied(), e);
        if let Some(n) = name {
            first.insert(n.get_ref().clone(), j);
        }
        let mut values = Vec::new();
        match &raw.values {
            Some(vs) if !vs.get_ref().is_empty() => {
                for (k, v) in vs.get_ref().iter().enumerate() {
                    let vpath = format!("{cpath}.values[{k}]");
                    let n = *v.get_ref();
                    if !(0..=max_value).contains(&n) {
                        e.push(
                            "udp.class.values.range",
                            vpath,
                            v.span(),
                            format!(
                                "must fit the operation field's {} byte(s): 0 to {max_value}, got {n}",
                                field.len
                            ),
                        );
                    } else if let Some(other) = owner.get(&n) {
                        e.push(
                            "udp.class.values.duplicate",
                            vpath,
                            v.span(),
                            format!("{n} is already a value of {path}[{other}]"),
                        );
                    } else {
                        owner.insert(n, j);
                        values.push(n as u32);
                    }
                }
            }
            other => e.push(
                "udp.class.values.empty",
                format!("{cpath}.values"),
                other.as_ref().map_or(c.span(), |v| v.span()),
                "a class needs the operation values it takes, such as values = [1, 2]",
            ),
        }
        let s = scope(e, &raw.scope, &format!("{cpath}.scope"));
        let budget = Fields::new(&cpath, &raw.requests, &raw.optional)
            .budget(e)
            .map(|b| b.for_shards(s, shards));
        out.push(UdpClass {
            name: name.map_or(String::new(), |n| n.get_ref().clone()),
            values,
            budget,
            critical: raw.critical.as_ref().is_some_and(|c| *c.get_ref()),
        });
    }
    out
}

fn check_session(u: &RawUdp, base: &str, e: &mut Errors<'_>) -> SessionPolicy {
    let d = RawUdpSession::default();
    let s = u.session.as_ref().unwrap_or(&d);
    let path = format!("{base}.session");
    let rate = int_in(
        e,
        &s.rate,
        &format!("{path}.rate"),
        "udp.session.rate.range",
        (0, 1_000_000),
    )
    .map_or(DEFAULT_SESSION_RATE, as_u64);
    let burst = int_in(
        e,
        &s.burst,
        &format!("{path}.burst"),
        "udp.session.burst.range",
        (1, 1_000_000),
    )
    .map_or(DEFAULT_SESSION_BURST.max(rate as u32), |n| n as u32);
    let idle_timeout_ms = int_in(
        e,
        &s.idle_timeout_ms,
        &format!("{path}.idle_timeout_ms"),
        "udp.session.idle_timeout_ms.range",
        (100, 86_400_000),
    )
    .map_or(DEFAULT_IDLE_TIMEOUT_MS, as_u64);
    let max_sessions = int_in(
        e,
        &s.max_sessions,
        &format!("{path}.max_sessions"),
        "udp.session.max_sessions.range",
        (1, MAX_SESSIONS),
    );
    let max = max_sessions.map_or(DEFAULT_MAX_SESSIONS, |n| n as u32);
    let reserve = match &s.critical_reserve {
        None => max_sessions.map_or(DEFAULT_SESSION_RESERVE, |n| (n / 64) as u32),
        Some(r) if (0..i64::from(max)).contains(r.get_ref()) => *r.get_ref() as u32,
        Some(r) => {
            e.push(
                "udp.session.critical_reserve.range",
                format!("{path}.critical_reserve"),
                r.span(),
                format!(
                    "must be at least 0 and less than max_sessions ({max}), got {}",
                    r.get_ref()
                ),
            );
            0
        }
    };
    SessionPolicy {
        // 0 disables the bucket; the bounds above keep the rest valid.
        rate: (rate > 0)
            .then(|| RatePolicy::per_second(rate, burst).ok())
            .flatten(),
        idle_timeout_ms,
        ceiling: Ceiling::new(max, reserve.min(max - 1)).unwrap_or(
            Ceiling::new(DEFAULT_MAX_SESSIONS, DEFAULT_SESSION_RESERVE).expect("in range"),
        ),
    }
}

fn check_envelope(u: &RawUdp, base: &str, e: &mut Errors<'_>) -> Option<EnvelopePolicy> {
    let a = u.auth.as_ref()?;
    let path = format!("{base}.auth");
    let raw = a.get_ref();
    let mut key_files = Vec::new();
    match &raw.keys {
        Some(list) if !list.get_ref().is_empty() => {
            if list.get_ref().len() > MAX_ENVELOPE_KEYS {
                e.push(
                    "udp.auth.keys.tooMany",
                    format!("{path}.keys"),
                    list.span(),
                    format!("at most {MAX_ENVELOPE_KEYS} keys (the key id is their index)"),
                );
            }
            for (j, k) in list.get_ref().iter().enumerate() {
                if k.get_ref().trim().is_empty() {
                    e.push(
                        "udp.auth.keys.empty",
                        format!("{path}.keys[{j}]"),
                        k.span(),
                        "a key file's path, such as \"/var/lib/gapura/game.key\"",
                    );
                }
                key_files.push(k.get_ref().clone());
            }
        }
        other => e.push(
            "udp.auth.keys.empty",
            format!("{path}.keys"),
            other.as_ref().map_or(a.span(), |l| l.span()),
            "the envelope needs at least one key file, such as keys = [\"/var/lib/gapura/game.key\"]",
        ),
    }
    let max_age_ms = int_in(
        e,
        &raw.max_age_ms,
        &format!("{path}.max_age_ms"),
        "udp.auth.max_age_ms.range",
        (1, 3_600_000),
    )
    .map_or(5_000, as_u64);
    let replay_window = match &raw.replay_window {
        None => 1_024,
        Some(w) => {
            let n = *w.get_ref();
            let (lo, hi) = REPLAY_WINDOW_BOUNDS;
            if (i64::from(lo)..=i64::from(hi)).contains(&n) && n % 64 == 0 {
                n as u32
            } else {
                e.push(
                    "udp.auth.replay_window.range",
                    format!("{path}.replay_window"),
                    w.span(),
                    format!("must be a multiple of 64 from {lo} to {hi}, got {n}"),
                );
                1_024
            }
        }
    };
    let key_budget = int_in(
        e,
        &raw.key_budget,
        &format!("{path}.key_budget"),
        "udp.auth.key_budget.range",
        (1, 100_000_000),
    )
    .map(|n| n as u32);
    Some(EnvelopePolicy {
        key_files,
        keys: Vec::new(),
        max_age_ms,
        replay_window,
        key_budget,
        strip: raw.strip.as_ref().is_none_or(|s| *s.get_ref()),
    })
}
