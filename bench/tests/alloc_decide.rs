//! The gate's whole chain allocates nothing on a synchronous decision: a
//! pass, an allow, every kind of refusal, a robots.txt answer, a
//! verification-cache hit and the deferring decision that hands a password
//! check to the pool. A counting global allocator proves it.

use gapura_bench::reference::{snapshot, CHROME, PASSWORD};
use gapura_gate::chain::{GateState, NoTrace, Request};
use gapura_gate::client::Peer;
use gapura_gate::path::MAX_PATH_BYTES;
use gapura_gate::{ErrorStatus, Verdict};

#[path = "../../gate/tests/common/mod.rs"]
mod counting;
use counting::allocations;

#[derive(Debug, PartialEq, Eq)]
enum Got {
    Respond(u16),
    Refuse(ErrorStatus),
    Drop,
    Challenge,
    Verify,
}

#[test]
fn every_synchronous_decision_allocates_nothing() {
    let snap = snapshot();
    let mut state = GateState::small();
    state.adopt(&snap, 0);
    let mut scratch = Box::new([0u8; MAX_PATH_BYTES]);
    let basic = format!(
        "Basic {}",
        base64_encode(format!("alice:{PASSWORD}").as_bytes())
    );
    type Case<'a> = (&'a str, &'a str, &'a [u8], &'a [u8], &'a [u8], &'a str, Got);
    let cases: Vec<Case<'_>> = vec![
        (
            "pass",
            "app.test",
            b"GET",
            b"/products/item-42?x=1",
            CHROME,
            "203.0.113.7",
            Got::Respond(200),
        ),
        (
            "rewritten path",
            "app.test",
            b"GET",
            b"/a//b/../c;x=1",
            CHROME,
            "203.0.113.7",
            Got::Respond(200),
        ),
        (
            "allow rule",
            "app.test",
            b"GET",
            b"/.well-known/x",
            CHROME,
            "203.0.113.7",
            Got::Respond(200),
        ),
        (
            "address deny",
            "app.test",
            b"GET",
            b"/",
            CHROME,
            "192.0.2.5",
            Got::Refuse(ErrorStatus::Forbidden),
        ),
        (
            "outside the allow list",
            "app.test",
            b"GET",
            b"/",
            CHROME,
            "198.51.100.1",
            Got::Refuse(ErrorStatus::Forbidden),
        ),
        (
            "prefix deny",
            "app.test",
            b"GET",
            b"/wp-admin/x",
            CHROME,
            "203.0.113.7",
            Got::Refuse(ErrorStatus::Forbidden),
        ),
        (
            "glob deny",
            "app.test",
            b"GET",
            b"/a/b/.env",
            CHROME,
            "203.0.113.7",
            Got::Refuse(ErrorStatus::Forbidden),
        ),
        (
            "regex deny",
            "app.test",
            b"GET",
            b"/db.bak",
            CHROME,
            "203.0.113.7",
            Got::Refuse(ErrorStatus::Forbidden),
        ),
        (
            "method deny",
            "app.test",
            b"TRACE",
            b"/",
            CHROME,
            "203.0.113.7",
            Got::Refuse(ErrorStatus::Forbidden),
        ),
        (
            "user-agent deny",
            "app.test",
            b"GET",
            b"/",
            b"sqlmap/1.7",
            "203.0.113.7",
            Got::Refuse(ErrorStatus::Forbidden),
        ),
        (
            "drop",
            "app.test",
            b"GET",
            b"/config.json",
            CHROME,
            "203.0.113.7",
            Got::Drop,
        ),
        (
            "robots.txt",
            "app.test",
            b"GET",
            b"/robots.txt",
            CHROME,
            "203.0.113.7",
            Got::Respond(200),
        ),
        (
            "unknown host",
            "other.test",
            b"GET",
            b"/",
            CHROME,
            "203.0.113.7",
            Got::Refuse(ErrorStatus::NotFound),
        ),
        (
            "no credentials: challenge",
            "auth.test",
            b"GET",
            b"/",
            CHROME,
            "203.0.113.7",
            Got::Challenge,
        ),
    ];
    let peer = Peer::tcp("10.0.0.1".parse().unwrap());
    let run = |state: &mut GateState,
               scratch: &mut [u8; MAX_PATH_BYTES],
               host: &str,
               method: &[u8],
               path: &[u8],
               ua: &[u8],
               client: &str,
               auth: Option<&str>| {
        let mut headers: Vec<(&str, &[u8])> = vec![
            ("host", host.as_bytes()),
            ("user-agent", ua),
            ("x-forwarded-for", client.as_bytes()),
        ];
        if let Some(a) = auth {
            headers.push(("authorization", a.as_bytes()));
        }
        let req = Request {
            peer,
            method,
            host: Some(host.as_bytes()),
            target: path,
            path,
            header_count: headers.len(),
            header_bytes: 80,
            content_length: None,
            headers: &headers[..],
            connection: None,
            tls: false,
        };
        // Warm once (a regex's lazy DFA fills its cache on new shapes).
        let _ = snap.decide(&req, state, 0, scratch, &mut NoTrace);
        let mut d = None;
        let used = allocations(|| d = Some(snap.decide(&req, state, 0, scratch, &mut NoTrace)));
        let d = d.expect("decided");
        let got = match d.verdict {
            Verdict::Respond(a) => Got::Respond(a.status),
            Verdict::Refuse(s) => Got::Refuse(s),
            Verdict::Drop => Got::Drop,
            Verdict::Challenge(_) => Got::Challenge,
            Verdict::Verify(_) => Got::Verify,
            other => panic!("unexpected {other:?}"),
        };
        let key = state.take_job().map(|j| j.cache_key());
        (got, used, key)
    };
    for (name, host, method, path, ua, client, want) in cases {
        let (got, used, _) = run(
            &mut state,
            &mut scratch,
            host,
            method,
            path,
            ua,
            client,
            None,
        );
        assert_eq!(got, want, "{name}");
        assert_eq!(used, 0, "{name}: {used} allocations");
    }
    // The deferring decision: a password to check builds its job in place.
    let (got, used, key) = run(
        &mut state,
        &mut scratch,
        "auth.test",
        b"GET",
        b"/",
        CHROME,
        "203.0.113.7",
        Some(&basic),
    );
    assert_eq!(got, Got::Verify);
    assert_eq!(used, 0, "deferring decision: {used} allocations");
    // Once the pool verified it, the cache answers without PBKDF2.
    state.verify_cache.insert(key.expect("a job"), 0);
    let (got, used, _) = run(
        &mut state,
        &mut scratch,
        "auth.test",
        b"GET",
        b"/",
        CHROME,
        "203.0.113.7",
        Some(&basic),
    );
    assert_eq!(got, Got::Respond(200));
    assert_eq!(used, 0, "cache hit: {used} allocations");
}

fn base64_encode(bytes: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in bytes.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                out.push(T[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}
