//! The UDP relay end to end: the real binary, a real UDP upstream started
//! by the test, real client sockets. Relay correctness, silence towards
//! every source that failed a check (each captured on a socket of its
//! own), the amplification bound, the envelope with its key file, and the
//! drop counters.

mod common;

use common::udp::{relay_addr, Upstream};
use common::{profile, wait_until, Gapura, HELLO_HOST};
use gapura_gate::udp::EnvelopeKey;
use gapura_udp::envelope::seal;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, SystemTime};

const WAIT: Duration = Duration::from_secs(10);

fn start(relay: &str) -> Gapura {
    Gapura::start(&profile("", &format!("{HELLO_HOST}\n{relay}")))
}

/// A client socket on `src` (any port).
fn client(src: &str) -> UdpSocket {
    let s = UdpSocket::bind(format!("{src}:0")).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s
}

fn exchange(c: &UdpSocket, to: SocketAddr, data: &[u8]) -> Vec<u8> {
    c.send_to(data, to).unwrap();
    let mut buf = [0u8; 65_536];
    let (n, from) = c.recv_from(&mut buf).expect("a reply");
    assert_eq!(from, to, "the reply comes from the relay's address");
    buf[..n].to_vec()
}

/// Whether anything has arrived on `c` (without waiting).
fn nothing_arrived(c: &UdpSocket) -> bool {
    c.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 16];
    let empty =
        matches!(c.recv_from(&mut buf), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock);
    c.set_nonblocking(false).unwrap();
    empty
}

fn dropped(reason: &str) -> String {
    format!("gapura_udp_dropped_total{{relay=\"game\",shard=\"0\",reason=\"{reason}\"}}")
}

#[test]
fn datagrams_relay_to_a_real_upstream_and_back() {
    let up = Upstream::start(1);
    let g = start(&format!(
        "[[udp]]\nname = \"game\"\nlisten = [\"127.0.0.1:0\"]\nservers = [\"{}\"]\n",
        up.addr
    ));
    let at = relay_addr(&g, "game");
    let a = client("127.0.0.1");
    let b = client("127.0.0.2");
    for i in 0..20u32 {
        let msg = format!("ping {i}");
        assert_eq!(exchange(&a, at, msg.as_bytes()), msg.as_bytes());
    }
    assert_eq!(exchange(&b, at, b"from b"), b"from b");
    // Every byte of a 1,472-byte datagram, the default bound.
    let big: Vec<u8> = (0..1_472u32).map(|i| i as u8).collect();
    assert_eq!(exchange(&b, at, &big), big);
    let forwarded = "gapura_udp_forwarded_total{relay=\"game\",shard=\"0\"}";
    assert_eq!(g.wait_metric(forwarded, 22, WAIT), 22);
    assert_eq!(
        g.metric("gapura_udp_replied_total{relay=\"game\",shard=\"0\"}"),
        22
    );
    assert_eq!(
        g.metric("gapura_udp_sessions{relay=\"game\",shard=\"0\"}"),
        2
    );
    assert_eq!(
        g.metric("gapura_udp_sessions_opened_total{relay=\"game\",shard=\"0\"}"),
        2
    );
}

#[test]
fn no_source_that_failed_a_check_gets_a_reply() {
    let up = Upstream::start(1);
    let g = start(&format!(
        "[[udp]]\nname = \"game\"\nlisten = [\"127.0.0.1:0\"]\nservers = [\"{}\"]\n\
         max_datagram_bytes = 100\nsession = {{ rate = 1, burst = 2 }}\n\
         prefix = {{ requests = 1000 }}\n",
        up.addr
    ));
    let at = relay_addr(&g, "game");
    // Oversized: never relayed, never answered.
    let big = client("127.0.0.3");
    for _ in 0..5 {
        big.send_to(&[7u8; 101], at).unwrap();
    }
    // Over the session's bucket: two pass (and are echoed), the rest are
    // dropped silently.
    let flood = client("127.0.0.4");
    for _ in 0..10 {
        flood.send_to(b"x", at).unwrap();
    }
    g.wait_metric(&dropped("oversized"), 5, WAIT);
    g.wait_metric(&dropped("session_rate"), 8, WAIT);
    assert!(
        nothing_arrived(&big),
        "an oversized datagram's source hears nothing"
    );
    let mut buf = [0u8; 8];
    flood
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    assert_eq!(flood.recv_from(&mut buf).unwrap().0, 1);
    assert_eq!(flood.recv_from(&mut buf).unwrap().0, 1);
    assert!(nothing_arrived(&flood), "two echoes and not one more");
    assert!(wait_until(WAIT, || g
        .log_text()
        .contains("udp game: dropped session_rate from prefix")));
    let log = g.log_text();
    // The line carries the shard's running total for the reason.
    assert!(
        log.lines()
            .filter(|l| l.contains("dropped session_rate"))
            .any(|l| l.contains(" on this shard so far;")),
        "{log}"
    );
    assert!(!log.contains("127.0.0.4"), "no raw address in the log");
}

#[test]
fn a_blind_spoofer_gets_at_most_three_times_over_a_session_life() {
    // Every datagram is answered five times over.
    let up = Upstream::start(5);
    let g = start(&format!(
        "[[udp]]\nname = \"game\"\nlisten = [\"127.0.0.1:0\"]\nservers = [\"{}\"]\n",
        up.addr
    ));
    let at = relay_addr(&g, "game");
    let c = client("127.0.0.5");
    c.send_to(&[1u8; 100], at).unwrap();
    // 3 x 100 bytes may go back.
    g.wait_metric(&dropped("amplification"), 2, WAIT);
    let mut buf = [0u8; 200];
    for _ in 0..3 {
        assert_eq!(c.recv_from(&mut buf).unwrap().0, 100);
    }
    assert!(
        nothing_arrived(&c),
        "the fourth and fifth copies were dropped"
    );
    // A second datagram after a reply is what a spoofer who never sees
    // the replies can send too: it proves nothing, and again only three
    // of its five copies come back.
    c.send_to(&[2u8; 100], at).unwrap();
    g.wait_metric(&dropped("amplification"), 4, WAIT);
    for _ in 0..3 {
        assert_eq!(c.recv_from(&mut buf).unwrap().0, 100);
    }
    assert!(nothing_arrived(&c), "3x over the session's life");
    assert_eq!(g.metric(&dropped("amplification")), 4);
}

#[test]
fn a_fresh_envelope_proves_the_source_and_a_replay_from_another_is_dropped() {
    let up = Upstream::start(5);
    let dir = common::TempDir::new();
    let key_path = dir.0.join("game.key");
    std::fs::write(&key_path, "07".repeat(32)).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let g = start(&format!(
        "[[udp]]\nname = \"game\"\nlisten = [\"127.0.0.1:0\"]\nservers = [\"{}\"]\n\
         auth = {{ keys = [\"{}\"], max_age_ms = 5000 }}\n",
        up.addr,
        key_path.display()
    ));
    let at = relay_addr(&g, "game");
    let key = EnvelopeKey::new(&[7u8; 32]);
    let c = client("127.0.0.8");
    let mut d = Vec::new();
    seal(&key, 0, unix_ms(), 1, &[3u8; 20], &mut d);
    c.send_to(&d, at).unwrap();
    // Proved by its envelope: all five copies come back.
    let mut buf = [0u8; 200];
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    for _ in 0..5 {
        assert_eq!(c.recv_from(&mut buf).unwrap().0, 20);
    }
    // The captured envelope sent again from another source: dropped, no
    // session, no reply.
    let replayer = client("127.0.0.9");
    replayer.send_to(&d, at).unwrap();
    assert_eq!(g.wait_metric(&dropped("replayed"), 1, WAIT), 1);
    assert!(nothing_arrived(&replayer), "no reply to a replay");
    assert_eq!(g.metric(&dropped("amplification")), 0);
    assert_eq!(
        g.metric("gapura_udp_sessions{relay=\"game\",shard=\"0\"}"),
        1
    );
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

#[test]
fn the_envelope_is_checked_with_the_key_file_and_stripped() {
    let up = Upstream::start(1);
    let dir = common::TempDir::new();
    let key_path = dir.0.join("game.key");
    let g = start(&format!(
        "[[udp]]\nname = \"game\"\nlisten = [\"127.0.0.1:0\"]\nservers = [\"{}\"]\n\
         auth = {{ keys = [\"{}\"], max_age_ms = 5000 }}\n",
        up.addr,
        key_path.display()
    ));
    let at = relay_addr(&g, "game");
    // Created at first start, private, 64 hex digits.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&key_path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let hex = std::fs::read_to_string(&key_path).unwrap();
    let bytes: Vec<u8> = (0..32)
        .map(|i| u8::from_str_radix(&hex.trim()[i * 2..i * 2 + 2], 16).unwrap())
        .collect();
    let key = EnvelopeKey::new(&bytes);
    let c = client("127.0.0.6");
    let mut d = Vec::new();
    seal(&key, 0, unix_ms(), 1, b"move north", &mut d);
    assert_eq!(
        exchange(&c, at, &d),
        b"move north",
        "stripped before relaying"
    );
    // The same envelope again: replayed, silence.
    c.send_to(&d, at).unwrap();
    // A forged one, a stale one, an unknown key: silence from each.
    let forger = client("127.0.0.7");
    let mut forged = d.clone();
    let last = forged.len() - 1;
    forged[last] ^= 1;
    forger.send_to(&forged, at).unwrap();
    seal(&key, 0, unix_ms() - 60_000, 2, b"old", &mut d);
    forger.send_to(&d, at).unwrap();
    seal(&key, 3, unix_ms(), 3, b"who", &mut d);
    forger.send_to(&d, at).unwrap();
    forger.send_to(b"not an envelope", at).unwrap();
    for reason in ["replayed", "bad_tag", "stale", "unknown_key", "malformed"] {
        assert_eq!(g.wait_metric(&dropped(reason), 1, WAIT), 1, "{reason}");
    }
    assert!(nothing_arrived(&c), "no reply to the replay");
    assert!(
        nothing_arrived(&forger),
        "no reply to anything the forger sent"
    );
    assert_eq!(
        g.metric("gapura_udp_sessions{relay=\"game\",shard=\"0\"}"),
        1
    );
}

#[test]
fn a_drain_stops_receiving_and_closes_sessions() {
    let up = Upstream::start(1);
    let mut g = start(&format!(
        "[[udp]]\nname = \"game\"\nlisten = [\"127.0.0.1:0\"]\nservers = [\"{}\"]\n",
        up.addr
    ));
    let at = relay_addr(&g, "game");
    let c = client("127.0.0.8");
    assert_eq!(exchange(&c, at, b"hello"), b"hello");
    g.signal(libc::SIGTERM);
    let status = g.wait_exit(WAIT).expect("exits after the drain");
    assert!(status.success());
}

fn explain(profile_text: &str, args: &[&str]) -> (bool, String) {
    let dir = common::TempDir::new();
    let p = dir.0.join("profile.toml");
    std::fs::write(&p, profile_text).unwrap();
    let out = std::process::Command::new(common::bin())
        .arg("explain")
        .arg("--profile")
        .arg(&p)
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

#[test]
fn explain_names_the_step_that_drops_a_datagram() {
    let relay = "[server]\nlisten = []\nadmin = \"off\"\n[[udp]]\nname = \"game\"\n\
                 listen = [\"127.0.0.1:7000\"]\nservers = [\"127.0.0.1:7001\"]\n\
                 max_datagram_bytes = 4\noperation = { offset = 0, bytes = 1 }\n\
                 classes = [{ name = \"join\", values = [1] }]\n";
    let (ok, out) = explain(relay, &["udp://game", "203.0.113.7:5555", "01 aa"]);
    assert!(ok, "{out}");
    assert!(out.contains("class join"), "{out}");
    assert!(
        out.contains("relayed to 127.0.0.1:7001 (2 bytes) on a new session"),
        "{out}"
    );
    let (_, out) = explain(
        relay,
        &["udp://game", "203.0.113.7:5555", "0102030405", "--json"],
    );
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["answer"]["reason"], "oversized");
    assert_eq!(v["steps"][0]["step"], "size");
    let with_key = relay.replace(
        "classes",
        "auth = { keys = [\"/nonexistent/k.key\"] }\nclasses",
    );
    let (_, out) = explain(&with_key, &["udp://game", "203.0.113.7:5555", "0100"]);
    assert!(out.contains("drops it: not an envelope"), "{out}");
    let (ok, out) = explain(relay, &["udp://other", "203.0.113.7:5555", "00"]);
    assert!(
        !ok && out.contains("no [[udp]] relay named \"other\""),
        "{out}"
    );
}

#[test]
fn a_reload_keeps_sessions_and_takes_the_new_limits() {
    let up = Upstream::start(1);
    let relay = |rate: u32| {
        format!(
            "[[udp]]\nname = \"game\"\nlisten = [\"127.0.0.1:0\"]\nservers = [\"{}\"]\n\
             session = {{ rate = {rate}, burst = {rate} }}\n",
            up.addr
        )
    };
    let g = start(&relay(1_000));
    let at = relay_addr(&g, "game");
    let c = client("127.0.0.9");
    assert_eq!(exchange(&c, at, b"before"), b"before");
    // The same relay with a session bucket of one datagram a second.
    std::fs::write(
        &g.profile,
        profile("", &format!("{HELLO_HOST}\n{}", relay(1))),
    )
    .unwrap();
    g.signal(libc::SIGHUP);
    assert!(g.wait_log("reloaded: generation 2", WAIT));
    // The session survives (no second one opens), and its bucket now
    // holds one: of three datagrams, the first passes.
    for _ in 0..3 {
        c.send_to(b"after", at).unwrap();
    }
    let mut buf = [0u8; 16];
    assert_eq!(c.recv_from(&mut buf).unwrap().0, 5);
    g.wait_metric(&dropped("session_rate"), 2, WAIT);
    assert!(nothing_arrived(&c));
    assert_eq!(
        g.metric("gapura_udp_sessions_opened_total{relay=\"game\",shard=\"0\"}"),
        1
    );
}
