//! The decision end to end on a small snapshot: a known host's answer,
//! an unknown host's status, and the request limits' refusals.

use super::{Decision, GateState, NoTrace, Request};
use crate::answer::Answer;
use crate::client::Peer;
use crate::host::{HostAction, HostTable};
use crate::limits::RequestLimits;
use crate::pages::{ErrorPages, ErrorStatus};
use crate::quota::{Ceiling, QuotaSizes};
use crate::snapshot::{HostEntry, ServerSettings, Snapshot, Verdict};

fn state() -> GateState {
    let sizes = QuotaSizes {
        rate_entries: 1024,
        policy_slots: 16,
        slot_grace_ms: 1000,
        window_ms: 1000,
        window_keys: Ceiling::new(64, 8).unwrap(),
        lease_keys: Ceiling::new(64, 8).unwrap(),
        max_leases: 64,
        operations: 4,
    };
    GateState::new(&sizes, [7; 16]).unwrap()
}

struct Facts<'a> {
    host: Option<&'a [u8]>,
    target: &'a [u8],
    header_count: usize,
    content_length: Option<u64>,
}

fn decide<'s>(s: &'s Snapshot, f: Facts<'_>) -> Decision<'s> {
    let mut scratch = Box::new([0u8; crate::path::MAX_PATH_BYTES]);
    let headers: [(&str, &[u8]); 0] = [];
    let req = Request {
        peer: Peer::tcp("127.0.0.1".parse().unwrap()),
        method: b"GET",
        host: f.host,
        target: f.target,
        path: f.target,
        header_count: f.header_count,
        header_bytes: 0,
        content_length: f.content_length,
        headers: &headers[..],
        connection: None,
        tls: false,
    };
    s.decide(&req, &mut state(), 0, &mut scratch, &mut NoTrace)
}

fn snapshot() -> Snapshot {
    let mut hosts = HostTable::default();
    hosts.insert("a.test", 0).unwrap();
    Snapshot {
        generation: 1,
        server: ServerSettings {
            unknown_host: ErrorStatus::MisdirectedRequest,
            ..ServerSettings::default()
        },
        hosts,
        entries: vec![HostEntry {
            label: "a.test".into(),
            limits: RequestLimits {
                max_body_bytes: 10,
                ..RequestLimits::default()
            },
            action: HostAction::Respond(Answer::new(200, &[], b"a")),
            policy: Default::default(),
            extras: Default::default(),
        }],
        default_limits: RequestLimits::default(),
        pages: ErrorPages::builtin(),
        upstreams: Vec::new(),
        gate: Default::default(),
        udp: Vec::new(),
        tls: None,
        acme: Default::default(),
    }
}

fn facts(host: &'static [u8], target: &'static [u8]) -> Facts<'static> {
    Facts {
        host: Some(host),
        target,
        header_count: 0,
        content_length: None,
    }
}

#[test]
fn known_host_gets_its_answer() {
    let s = snapshot();
    let d = decide(&s, facts(b"a.test", b"/"));
    assert!(matches!(d.verdict, Verdict::Respond(a) if a.status == 200));
}

#[test]
fn unknown_host_gets_the_configured_status() {
    let s = snapshot();
    let d = decide(&s, facts(b"b.test", b"/"));
    assert!(matches!(
        d.verdict,
        Verdict::Refuse(ErrorStatus::MisdirectedRequest)
    ));
}

#[test]
fn host_body_limit_refuses_a_declared_body() {
    let s = snapshot();
    let d = decide(
        &s,
        Facts {
            content_length: Some(11),
            ..facts(b"a.test", b"/")
        },
    );
    assert!(matches!(
        d.verdict,
        Verdict::Refuse(ErrorStatus::PayloadTooLarge)
    ));
}

#[test]
fn head_limits_answer_414_and_431() {
    let s = snapshot();
    let long: &'static [u8] = Box::leak(vec![b'/'; 8193].into_boxed_slice());
    let d = decide(&s, facts(b"a.test", long));
    assert!(matches!(
        d.verdict,
        Verdict::Refuse(ErrorStatus::UriTooLong)
    ));
    let d = decide(
        &s,
        Facts {
            header_count: 101,
            ..facts(b"a.test", b"/")
        },
    );
    assert!(matches!(
        d.verdict,
        Verdict::Refuse(ErrorStatus::HeaderFieldsTooLarge)
    ));
}

#[test]
fn remembered_source_keys_are_the_keyers_own() {
    use crate::quota::{Domain, Keyer, SourcePrefix};
    let mut s = state();
    let own = Keyer::new([7; 16]);
    let fleet = Keyer::new([9; 16]);
    let a: std::net::IpAddr = "192.0.2.1".parse().unwrap();
    let b: std::net::IpAddr = "192.0.2.200".parse().unwrap();
    let c: std::net::IpAddr = "2001:db8::1".parse().unwrap();
    let cases = [
        (false, Domain::SourceBudget, a, SourcePrefix::BUDGET),
        (false, Domain::SourceBudget, a, SourcePrefix::BUDGET),
        (false, Domain::RateSource, a, SourcePrefix::RATE),
        (false, Domain::SourceBudget, b, SourcePrefix::BUDGET),
        (false, Domain::RateSource, b, SourcePrefix::RATE),
        (false, Domain::RateSource, c, SourcePrefix::RATE),
        (false, Domain::RateSource, c, SourcePrefix::BUDGET),
        (false, Domain::RateHeaderFallback, a, SourcePrefix::RATE),
        (true, Domain::SourceBudget, b, SourcePrefix::BUDGET),
        (false, Domain::SourceBudget, b, SourcePrefix::BUDGET),
    ];
    for (i, (shared, domain, addr, prefix)) in cases.into_iter().enumerate() {
        // Before the fleet's seed, the fleet keyer is the process's.
        let want = own.source(domain, addr, prefix);
        assert_eq!(s.source_key(shared, domain, addr, prefix), want, "case {i}");
    }
    s.enable_fleet([9; 16], 16);
    for (i, (shared, domain, addr, prefix)) in cases.into_iter().enumerate() {
        let keyer = if shared { &fleet } else { &own };
        let want = keyer.source(domain, addr, prefix);
        assert_eq!(
            s.source_key(shared, domain, addr, prefix),
            want,
            "case {i} after the fleet's seed"
        );
        assert_eq!(
            s.source_key(!shared, domain, addr, prefix),
            if shared { own } else { fleet }.source(domain, addr, prefix),
            "case {i}, the other keyer"
        );
    }
}

/// `s` with a second host, `r.test`: a redirect with the first's limits.
fn with_redirect(mut s: Snapshot) -> Snapshot {
    use crate::host::{KeepTarget, Redirect};
    s.hosts.insert("r.test", 1).unwrap();
    let mut redirect = s.entries[0].clone();
    redirect.label = "r.test".into();
    redirect.action =
        HostAction::Redirect(Redirect::new(301, "https://x.test", KeepTarget::Path, &[]));
    s.entries.push(redirect);
    s
}

/// The quiet lane (a host with every block off, once its snapshot is
/// adopted) decides what the whole chain decides: the same verdict, step
/// and limits for answers, redirects and every request-limit refusal.
#[test]
fn a_quiet_host_is_decided_as_the_whole_chain_decides_it() {
    let s = with_redirect(snapshot());
    assert!(s.entries.iter().all(|e| super::quiet_host(&s, e)));
    let long: &'static [u8] = Box::leak(vec![b'/'; 8193].into_boxed_slice());
    let mut adopted = state();
    adopted.adopt(&s, 0);
    assert!(adopted.quiet(&s, 0) && adopted.quiet(&s, 1));
    let mut scratch = Box::new([0u8; crate::path::MAX_PATH_BYTES]);
    let headers: [(&str, &[u8]); 0] = [];
    for host in [&b"a.test"[..], b"r.test", b"b.test"] {
        for target in [&b"/"[..], b"/x?y", long] {
            for header_count in [0, 100, 101] {
                for content_length in [None, Some(0), Some(10), Some(11)] {
                    let req = Request {
                        peer: Peer::tcp("127.0.0.1".parse().unwrap()),
                        method: b"GET",
                        host: Some(host),
                        target,
                        path: target,
                        header_count,
                        header_bytes: 0,
                        content_length,
                        headers: &headers[..],
                        connection: None,
                        tls: false,
                    };
                    let quiet = s.decide(&req, &mut adopted, 0, &mut scratch, &mut NoTrace);
                    let whole = s.decide(&req, &mut state(), 0, &mut scratch, &mut NoTrace);
                    assert_eq!(
                        format!("{quiet:?}"),
                        format!("{whole:?}"),
                        "{host:?} {} bytes, {header_count} lines, {content_length:?}",
                        target.len()
                    );
                }
            }
        }
    }
}

/// A snapshot the state did not adopt (another host list, or another
/// generation) is never decided by the quiet lane.
#[test]
fn the_quiet_lane_is_only_for_the_adopted_snapshot() {
    let s = snapshot();
    let mut st = state();
    st.adopt(&s, 0);
    assert!(st.quiet(&s, 0));
    let copy = s.clone();
    assert!(!st.quiet(&copy, 0), "another host list");
    let mut next = s.clone();
    next.generation += 1;
    assert!(!st.quiet(&next, 0), "another generation");
    assert!(!st.quiet(&s, 1), "a host the snapshot does not have");
}

/// What `lane_answer` answers for a head to `host` with `facts`, at the
/// path `/`: the host and its answer, which a quiet host's lane answers
/// with no leases.
fn quiet_answer<'s>(
    s: &'s Snapshot,
    state: &mut GateState,
    host: Option<&[u8]>,
    facts: (usize, usize, usize),
) -> Option<(crate::HostId, &'s crate::answer::Answer)> {
    let headers: [(&str, &[u8]); 0] = [];
    let head = super::LaneHead {
        peer: Peer::tcp("127.0.0.1".parse().unwrap()),
        host,
        path: b"/",
        facts,
        headers: &headers[..],
    };
    let mut scratch = Box::new([0u8; crate::path::MAX_PATH_BYTES]);
    match s.lane_answer(state, 0, || &mut *scratch, head)? {
        super::Lane::Answer {
            host,
            answer,
            ticket: None,
            ..
        } => Some((host, answer)),
        other => panic!("a quiet host pays nothing: {other:?}"),
    }
}

/// `lane_answer` finds a quiet host's own answer exactly when the chain
/// decides it for a request without a body: the same answer and host, no
/// ticket, not closing; for a redirect, an unknown host, a request over a
/// head limit or a snapshot not adopted it finds none.
#[test]
fn the_quiet_answer_is_the_answer_the_chain_decides() {
    let mut s = snapshot();
    s.entries[0].limits.max_header_bytes = 64;
    let s = with_redirect(s);
    let long: &'static [u8] = Box::leak(vec![b'/'; 8193].into_boxed_slice());
    let mut adopted = state();
    adopted.adopt(&s, 0);
    let mut scratch = Box::new([0u8; crate::path::MAX_PATH_BYTES]);
    let headers: [(&str, &[u8]); 0] = [];
    let mut answered = 0;
    for host in [Some(&b"a.test"[..]), Some(b"r.test"), Some(b"b.test"), None] {
        for target in [&b"/"[..], b"/x?y", long] {
            for header_count in [0, 100, 101] {
                for header_bytes in [0, 64, 65] {
                    let req = Request {
                        peer: Peer::tcp("127.0.0.1".parse().unwrap()),
                        method: b"GET",
                        host,
                        target,
                        path: target,
                        header_count,
                        header_bytes,
                        content_length: None,
                        headers: &headers[..],
                        connection: None,
                        tls: false,
                    };
                    let whole = s.decide(&req, &mut state(), 0, &mut scratch, &mut NoTrace);
                    let facts = (target.len(), header_count, header_bytes);
                    let case = format!("{host:?} {facts:?}");
                    match quiet_answer(&s, &mut adopted, host, facts) {
                        Some((id, a)) => {
                            answered += 1;
                            assert!(
                                matches!(whole.verdict, Verdict::Respond(w) if std::ptr::eq(w, a)),
                                "{case}: {whole:?}"
                            );
                            assert_eq!(whole.host, Some(id), "{case}");
                            assert!(whole.ticket.is_none() && !whole.close, "{case}");
                        }
                        None => assert!(
                            !matches!(whole.verdict, Verdict::Respond(_)),
                            "{case}: the chain answers {whole:?}"
                        ),
                    }
                }
            }
        }
    }
    // a.test within its limits: one target of two short ones, two line
    // counts, two byte counts.
    assert_eq!(answered, 2 * 2 * 2);
    // Not for a snapshot the state did not adopt.
    let mut other = s.clone();
    other.generation += 1;
    assert!(quiet_answer(&other, &mut adopted, Some(b"a.test"), (1, 0, 0)).is_none());
    // Nor for a host with a block on.
    let mut ruled = s.clone();
    ruled.generation += 1;
    ruled.entries[0].policy.rules = Some(crate::policy::BlockRef {
        index: 0,
        mode: crate::mode::Mode::Enforce,
    });
    let mut st = state();
    st.adopt(&ruled, 0);
    assert!(quiet_answer(&ruled, &mut st, Some(b"a.test"), (1, 0, 0)).is_none());
}

/// A client's hashed id in the access log and the refusal warnings: the
/// same on every node of a fleet (the fleet's seed keys it), different
/// under different seeds.
#[test]
fn a_clients_hashed_id_is_the_same_on_every_node_of_a_fleet() {
    let a: std::net::IpAddr = "203.0.113.9".parse().unwrap();
    let node = |fleet_seed: u8| {
        let mut s = GateState::small();
        s.enable_fleet([fleet_seed; 16], 16);
        s
    };
    let (one, two) = (node(7), node(7));
    assert_eq!(one.address_hash(a), two.address_hash(a));
    assert_eq!(one.prefix_hash(a), two.prefix_hash(a));
    assert_ne!(one.address_hash(a), one.prefix_hash(a));
    let elsewhere = node(8);
    assert_ne!(one.address_hash(a), elsewhere.address_hash(a));
}
