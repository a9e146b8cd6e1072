use super::*;
use gapura_gate::client::{cloudflare_ranges, Arrival, ClientMode, ForwardedHeader, Peer};
use std::net::{IpAddr, SocketAddr};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn without_a_client_table_the_peer_is_the_client() {
    let c = ok("[[host]]\nnames = [\"a.test\"]\n");
    let p = &c.snapshot.gate.client;
    assert_eq!(p.mode, ClientMode::Direct);
    assert!(p.trusted_proxies.is_empty());
    assert!(p.cloudflare_ranges.is_empty());
    assert!(p.proxy_protocol_peers.is_empty());
    let c = ok("[client]\nmode = \"direct\"\n");
    assert_eq!(c.snapshot.gate.client.mode, ClientMode::Direct);
}

#[test]
fn proxy_modes_trust_their_listed_proxies_for_one_hop() {
    let c = ok(r#"
[client]
mode = "x_forwarded_for"
trusted_proxies = ["10.0.0.5", "10.0.1.0/28", "2001:db8::/48"]
"#);
    let p = &c.snapshot.gate.client;
    assert_eq!(
        p.mode,
        ClientMode::TrustedProxy(ForwardedHeader::XForwardedFor)
    );
    for (addr, trusted) in [
        ("10.0.0.5", true),
        ("10.0.0.6", false),
        ("10.0.1.15", true),
        ("10.0.1.16", false),
        ("2001:db8::1", true),
        ("2001:db8:1::1", false),
    ] {
        assert_eq!(p.trusted_proxies.contains(ip(addr)), trusted, "{addr}");
    }
    assert!(p.cloudflare_ranges.is_empty());
    let headers: [(&str, &[u8]); 1] = [("x-forwarded-for", b"6.6.6.6, 192.0.2.1")];
    let r = p.resolve(Peer::tcp(ip("10.0.0.5")), &headers[..]);
    assert_eq!((r.addr, r.via), (ip("192.0.2.1"), Arrival::TrustedProxy));
    let r = p.resolve(Peer::tcp(ip("10.0.0.6")), &headers[..]);
    assert_eq!((r.addr, r.via), (ip("10.0.0.6"), Arrival::Direct));

    let c = ok("[client]\nmode = \"forwarded\"\ntrusted_proxies = [\"10.0.0.5\"]\n");
    assert_eq!(
        c.snapshot.gate.client.mode,
        ClientMode::TrustedProxy(ForwardedHeader::Forwarded)
    );
}

#[test]
fn cloudflare_mode_defaults_to_the_shipped_ranges_and_may_replace_them() {
    let builtin = cloudflare_ranges();
    for src in [
        "[client]\nmode = \"cloudflare\"\n",
        "[client]\nmode = \"cloudflare\"\ncloudflare_ranges = \"builtin\"\n",
    ] {
        let c = ok(src);
        let p = &c.snapshot.gate.client;
        assert_eq!(p.mode, ClientMode::Cloudflare);
        assert_eq!(p.cloudflare_ranges.range_count(), builtin.range_count());
        assert!(p.cloudflare_ranges.contains(ip("173.245.48.1")));
        assert!(p.cloudflare_ranges.contains(ip("2400:cb00::1")));
        assert!(p.trusted_proxies.is_empty());
    }
    let c = ok("[client]\nmode = \"cloudflare\"\ncloudflare_ranges = [\"127.0.0.1\", \"::1\"]\n");
    let p = &c.snapshot.gate.client;
    assert!(p.cloudflare_ranges.contains(ip("127.0.0.1")));
    assert!(p.cloudflare_ranges.contains(ip("::1")));
    assert!(!p.cloudflare_ranges.contains(ip("173.245.48.1")));
}

#[test]
fn client_mode_and_lists_must_agree() {
    assert_eq!(
        one("[client]\nmode = \"proxy\"\n"),
        at("client.mode.invalid", "client.mode", 2, 8)
    );
    assert_eq!(
        one("[client]\nmode = \"x_forwarded_for\"\n"),
        at(
            "client.trusted_proxies.required",
            "client.trusted_proxies",
            2,
            8
        )
    );
    assert_eq!(
        one("[client]\nmode = \"forwarded\"\ntrusted_proxies = []\n"),
        at(
            "client.trusted_proxies.required",
            "client.trusted_proxies",
            3,
            19
        )
    );
    assert_eq!(
        one("[client]\ntrusted_proxies = [\"10.0.0.5\"]\n"),
        at(
            "client.trusted_proxies.unexpected",
            "client.trusted_proxies",
            2,
            19
        )
    );
    assert_eq!(
        one("[client]\nmode = \"cloudflare\"\ntrusted_proxies = [\"10.0.0.5\"]\n"),
        at(
            "client.trusted_proxies.unexpected",
            "client.trusted_proxies",
            3,
            19
        )
    );
    assert_eq!(
        one("[client]\nmode = \"cloudflare\"\ncloudflare_ranges = \"all\"\n"),
        at(
            "client.cloudflare_ranges.invalid",
            "client.cloudflare_ranges",
            3,
            21
        )
    );
    assert_eq!(
        one("[client]\nmode = \"cloudflare\"\ncloudflare_ranges = []\n"),
        at(
            "client.cloudflare_ranges.invalid",
            "client.cloudflare_ranges",
            3,
            21
        )
    );
    assert_eq!(
        one("[client]\ncloudflare_ranges = [\"127.0.0.1\"]\n"),
        at(
            "client.cloudflare_ranges.unexpected",
            "client.cloudflare_ranges",
            2,
            21
        )
    );
}

#[test]
fn trusted_ranges_must_parse_and_not_be_too_broad() {
    let e = errors(
        "[client]\nmode = \"x_forwarded_for\"\n\
         trusted_proxies = [\"10.0.0.0/8\", \"10.1.0.0/16\", \"2001:db8::/32\"]\n",
    );
    assert_eq!(
        e.iter().map(key).collect::<Vec<_>>(),
        vec![
            at(
                "client.trusted_proxies.too_broad",
                "client.trusted_proxies[0]",
                3,
                20
            ),
            at(
                "client.trusted_proxies.too_broad",
                "client.trusted_proxies[2]",
                3,
                49
            ),
        ]
    );
    let e = errors(
        "[client]\nmode = \"x_forwarded_for\"\n\
         trusted_proxies = [\"nope\", \"10.0.0.0/33\", \"10.0.0.1/8\"]\n",
    );
    assert_eq!(
        e.iter().map(key).collect::<Vec<_>>(),
        vec![
            at("address.invalid", "client.trusted_proxies[0]", 3, 20),
            at("address.prefix.invalid", "client.trusted_proxies[1]", 3, 28),
            at("address.host_bits", "client.trusted_proxies[2]", 3, 43),
        ]
    );
    assert!(
        e[2].message.contains("the network is 10.0.0.0/8"),
        "{}",
        e[2].message
    );
    // Cloudflare's own ranges are broad (a /13, a /29) and are not held to it.
    ok("[client]\nmode = \"cloudflare\"\ncloudflare_ranges = [\"104.16.0.0/13\", \"2a06:98c0::/29\"]\n");
}

#[test]
fn listen_tables_mark_the_listeners_that_expect_a_proxy_header() {
    let c = ok(r#"
[server]
listen = ["127.0.0.1:8080", { addr = "127.0.0.1:8443", proxy_protocol = true },
          { addr = "[::1]:8443", proxy_protocol = false }]
[client]
proxy_protocol_peers = ["10.0.0.9", "2001:db8:1::/48"]
"#);
    let addr = |s: &str| -> SocketAddr { s.parse().unwrap() };
    assert_eq!(
        c.runtime.listen,
        [
            addr("127.0.0.1:8080"),
            addr("127.0.0.1:8443"),
            addr("[::1]:8443")
        ]
    );
    assert_eq!(c.runtime.proxy_protocol, [addr("127.0.0.1:8443")]);
    let p = &c.snapshot.gate.client;
    assert!(p.proxy_protocol_trusted(ip("10.0.0.9")));
    assert!(p.proxy_protocol_trusted(ip("2001:db8:1::7")));
    assert!(!p.proxy_protocol_trusted(ip("10.0.0.8")));
    assert_eq!(p.mode, ClientMode::Direct);
}

#[test]
fn proxy_protocol_peers_go_with_proxy_protocol_listeners() {
    let listener = "[server]\nlisten = [{ addr = \"127.0.0.1:8443\", proxy_protocol = true }]\n";
    assert_eq!(
        one(listener),
        at(
            "client.proxy_protocol_peers.required",
            "client.proxy_protocol_peers",
            2,
            55
        )
    );
    let e = errors(listener);
    assert_eq!(
        e[0].message,
        "server.listen[0].proxy_protocol expects a PROXY header: list who may send one in \
         client.proxy_protocol_peers"
    );
    assert_eq!(
        one(&format!("{listener}[client]\nproxy_protocol_peers = []\n")),
        at(
            "client.proxy_protocol_peers.required",
            "client.proxy_protocol_peers",
            4,
            24
        )
    );
    assert_eq!(
        one(&format!(
            "{listener}[client]\nproxy_protocol_peers = [\"10.0.0.0/15\"]\n"
        )),
        at(
            "client.proxy_protocol_peers.too_broad",
            "client.proxy_protocol_peers[0]",
            4,
            25
        )
    );
    assert_eq!(
        one("[client]\nproxy_protocol_peers = [\"10.0.0.9\"]\n"),
        at(
            "client.proxy_protocol_peers.unexpected",
            "client.proxy_protocol_peers",
            2,
            24
        )
    );
}

#[test]
fn listen_tables_are_checked_like_strings() {
    assert_eq!(
        one("[server]\nlisten = [{ addr = \"nowhere\" }]\n"),
        at("server.listen.invalid", "server.listen[0].addr", 2, 20)
    );
    assert_eq!(
        one("[server]\nlisten = [\"127.0.0.1:8080\", { addr = \"127.0.0.1:8080\" }]\n"),
        at("server.listen.duplicate", "server.listen[1].addr", 2, 38)
    );
    assert_eq!(
        one("[server]\nlisten = [{ addr = \"127.0.0.1:1\", proxy = true }]\n"),
        at("profile.unknown_key", "server.listen[0].proxy", 2, 35)
    );
    assert_eq!(
        one("[server]\nlisten = [{ addr = \"127.0.0.1:9090\" }]\n"),
        at("server.admin.conflict", "server.admin", 2, 20)
    );
}
