//! Who the client is: the address every address rule, rate key and log uses.
//!
//! The connection's peer is the client unless the profile trusts that peer
//! to say otherwise, and then only for exactly one hop:
//!
//! - `Direct`: every forwarding header is ignored.
//! - `TrustedProxy`: a peer inside `trusted_proxies` names the client in the
//!   one header the profile chose: the last element of the last
//!   `X-Forwarded-For` line, or the `for=` of the last element of the last
//!   `Forwarded` line. Earlier elements were written by whoever the proxy
//!   talked to and are never read. The other header is ignored, since a proxy
//!   that sets one usually passes the other through untouched.
//! - `Cloudflare`: a peer inside `cloudflare_ranges` (Cloudflare's published
//!   edge ranges by default; the cloudflared address for a tunnel) names the
//!   client in `CF-Connecting-IP`, its country in `CF-IPCountry` and the
//!   request's id in `CF-Ray`. These are believed together or not at all.
//!
//! A value that does not parse (`unknown`, an obfuscated `_name`, garbage, a
//! repeated `CF-Connecting-IP`) falls back to the peer, so a forged or broken
//! header can never choose an address; a peer outside the trusted list has
//! its headers ignored. An empty list trusts nobody. The PROXY protocol is a
//! connection-level step before all this (see [`ClientPolicy::accept_proxy_header`]):
//! its source stands in for the peer. IPv4-mapped IPv6 addresses are turned
//! into IPv4 everywhere. Resolution reads borrowed header lines and never
//! allocates.

use crate::cidr::{canonical, Cidr, CidrSet};
use crate::country::Country;
use forwarded::{last_forwarded_for, last_xff_element, parse_bare, valid_cf_ray};
use std::net::{IpAddr, SocketAddr};

mod forwarded;

pub const X_FORWARDED_FOR: &str = "x-forwarded-for";
pub const FORWARDED: &str = "forwarded";
pub const CF_CONNECTING_IP: &str = "cf-connecting-ip";
pub const CF_IPCOUNTRY: &str = "cf-ipcountry";
pub const CF_RAY: &str = "cf-ray";

/// Longest address text read from a header (an IPv6 address in brackets with
/// a port is at most 55 bytes); longer values are not addresses.
pub const MAX_NODE_BYTES: usize = 64;
/// Longest `CF-Ray` kept (Cloudflare's are about 20 bytes: hex, `-`, a
/// colo code). Only `A-Z a-z 0-9 -` are kept, so the value is safe to echo
/// in error pages.
pub const MAX_CF_RAY_BYTES: usize = 64;

/// Cloudflare's published IPv4 edge ranges (<https://www.cloudflare.com/ips-v4>).
pub const CLOUDFLARE_IPV4: &[&str] = &[
    "173.245.48.0/20",
    "103.21.244.0/22",
    "103.22.200.0/22",
    "103.31.4.0/22",
    "141.101.64.0/18",
    "108.162.192.0/18",
    "190.93.240.0/20",
    "188.114.96.0/20",
    "197.234.240.0/22",
    "198.41.128.0/17",
    "162.158.0.0/15",
    "104.16.0.0/13",
    "104.24.0.0/14",
    "172.64.0.0/13",
    "131.0.72.0/22",
];

/// Cloudflare's published IPv6 edge ranges (<https://www.cloudflare.com/ips-v6>).
pub const CLOUDFLARE_IPV6: &[&str] = &[
    "2400:cb00::/32",
    "2606:4700::/32",
    "2803:f800::/32",
    "2405:b500::/32",
    "2405:8100::/32",
    "2a06:98c0::/29",
    "2c0f:f248::/32",
];

/// The default `cloudflare_ranges`: both lists above. Allocates.
pub fn cloudflare_ranges() -> CidrSet {
    let all: Vec<&str> = CLOUDFLARE_IPV4
        .iter()
        .chain(CLOUDFLARE_IPV6)
        .copied()
        .collect();
    CidrSet::parse_list(&all).expect("the built-in Cloudflare ranges parse")
}

/// Shortest IPv4 prefix a trusted-proxy entry may have: a broad range would
/// let anyone inside it choose their own address.
pub const MIN_TRUSTED_PREFIX_V4: u8 = 16;
/// Shortest IPv6 prefix a trusted-proxy entry may have.
pub const MIN_TRUSTED_PREFIX_V6: u8 = 48;

/// Whether a network is too broad to trust as a proxy (the profile refuses
/// it in `trusted_proxies` and `proxy_protocol_peers`).
pub fn too_broad_to_trust(c: &Cidr) -> bool {
    match c.addr() {
        IpAddr::V4(_) => c.prefix() < MIN_TRUSTED_PREFIX_V4,
        IpAddr::V6(_) => c.prefix() < MIN_TRUSTED_PREFIX_V6,
    }
}

/// Gives a request's header lines by name. The http crate implements it
/// over its parsed header array, so nothing is copied.
pub trait HeaderLines {
    /// Every line of header `name` (ASCII case-insensitive; callers pass
    /// lower case), in the order they arrived. Must not allocate.
    fn lines<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + Clone + 'a;
}

/// Name and value pairs, as tests and explain hold a request.
impl<'x> HeaderLines for [(&'x str, &'x [u8])] {
    fn lines<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + Clone + 'a {
        self.iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| *v)
    }
}

/// Which header a trusted proxy names the client in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ForwardedHeader {
    /// `X-Forwarded-For`: its last element.
    XForwardedFor,
    /// `Forwarded` (RFC 7239): the `for=` of its last element.
    Forwarded,
}

/// How the client address is found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ClientMode {
    /// The peer is the client.
    #[default]
    Direct,
    /// A peer in `trusted_proxies` names the client in this header.
    TrustedProxy(ForwardedHeader),
    /// A peer in `cloudflare_ranges` names the client in `CF-Connecting-IP`.
    Cloudflare,
}

/// The compiled client-address settings, held in the snapshot.
#[derive(Clone, Debug, Default)]
pub struct ClientPolicy {
    pub mode: ClientMode,
    /// Peers whose forwarding header is believed (`TrustedProxy` mode).
    pub trusted_proxies: CidrSet,
    /// Peers whose `CF-*` headers are believed (`Cloudflare` mode).
    pub cloudflare_ranges: CidrSet,
    /// Peers allowed to send a PROXY header on listeners that expect one.
    pub proxy_protocol_peers: CidrSet,
}

/// The address a connection came from, settled at accept: the TCP peer, or
/// the source a trusted PROXY header gave.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Peer {
    addr: IpAddr,
    via_proxy_protocol: bool,
}

impl Peer {
    /// A TCP peer (IPv4-mapped turned into IPv4).
    pub fn tcp(addr: IpAddr) -> Peer {
        Peer {
            addr: canonical(addr),
            via_proxy_protocol: false,
        }
    }

    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    /// Whether the address came from a PROXY header.
    pub fn via_proxy_protocol(&self) -> bool {
        self.via_proxy_protocol
    }
}

/// How the client's address reached us.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Arrival {
    /// The peer itself (no trusted hop, or its header did not parse).
    Direct,
    /// Named by a trusted proxy's forwarding header.
    TrustedProxy,
    /// Named by a Cloudflare edge's `CF-Connecting-IP`.
    Cloudflare,
    /// The source of a trusted PROXY header.
    ProxyProtocol,
}

impl Arrival {
    /// `direct`, `trusted_proxy`, `cloudflare`, `proxy_protocol`.
    pub fn as_str(self) -> &'static str {
        match self {
            Arrival::Direct => "direct",
            Arrival::TrustedProxy => "trusted_proxy",
            Arrival::Cloudflare => "cloudflare",
            Arrival::ProxyProtocol => "proxy_protocol",
        }
    }
}

/// The resolved client of one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResolvedClient<'h> {
    /// The client address (IPv4-mapped turned into IPv4).
    pub addr: IpAddr,
    pub via: Arrival,
    /// `Some` only through Cloudflare: what `CF-IPCountry` said
    /// ([`Country::UNKNOWN`] when it was missing, repeated or not a code).
    /// `None` elsewhere; country rules treat both as unknown.
    pub country: Option<Country>,
    /// `CF-Ray` from a trusted Cloudflare peer, when well-formed.
    pub cf_ray: Option<&'h [u8]>,
    /// The connection's peer (after PROXY protocol), for logs and explain.
    pub peer: IpAddr,
}

impl ClientPolicy {
    /// Whether `tcp_peer` may send a PROXY header. On a listener that
    /// expects one, a connection from anyone else is closed before reading.
    #[inline]
    pub fn proxy_protocol_trusted(&self, tcp_peer: IpAddr) -> bool {
        self.proxy_protocol_peers.contains(tcp_peer)
    }

    /// The connection's peer after a parsed PROXY header whose source is
    /// `source`: that source for a proxied connection, the TCP peer for
    /// LOCAL and UNKNOWN (`None`). `None` when `tcp_peer` is not trusted to
    /// send one (close the connection). O(log n).
    pub fn accept_proxy_header(
        &self,
        tcp_peer: IpAddr,
        source: Option<SocketAddr>,
    ) -> Option<Peer> {
        if !self.proxy_protocol_trusted(tcp_peer) {
            return None;
        }
        Some(match source {
            Some(src) => Peer {
                addr: canonical(src.ip()),
                via_proxy_protocol: true,
            },
            None => Peer::tcp(tcp_peer),
        })
    }

    /// The client's address of one request and how it was learned, as
    /// [`Self::resolve`] finds them: the peer's, with no header read, when
    /// the peer is the client (`direct`). Inlined: the lanes of
    /// `chain::lane` ask only this.
    #[inline(always)]
    pub fn resolve_addr<H: HeaderLines + ?Sized>(
        &self,
        peer: Peer,
        headers: &H,
    ) -> (IpAddr, Arrival) {
        if self.mode == ClientMode::Direct {
            let via = if peer.via_proxy_protocol {
                Arrival::ProxyProtocol
            } else {
                Arrival::Direct
            };
            return (peer.addr, via);
        }
        let r = self.resolve(peer, headers);
        (r.addr, r.via)
    }

    /// Resolves the client of one request. O(header bytes read + log n), no
    /// allocation.
    pub fn resolve<'h, H: HeaderLines + ?Sized>(
        &self,
        peer: Peer,
        headers: &'h H,
    ) -> ResolvedClient<'h> {
        let direct = ResolvedClient {
            addr: peer.addr,
            via: if peer.via_proxy_protocol {
                Arrival::ProxyProtocol
            } else {
                Arrival::Direct
            },
            country: None,
            cf_ray: None,
            peer: peer.addr,
        };
        match self.mode {
            ClientMode::Direct => direct,
            ClientMode::TrustedProxy(which) => {
                if !self.trusted_proxies.contains(peer.addr) {
                    return direct;
                }
                let named = match which {
                    ForwardedHeader::XForwardedFor => {
                        last_line(headers, X_FORWARDED_FOR).and_then(last_xff_element)
                    }
                    ForwardedHeader::Forwarded => {
                        last_line(headers, FORWARDED).and_then(last_forwarded_for)
                    }
                };
                match named {
                    Some(addr) => ResolvedClient {
                        addr,
                        via: Arrival::TrustedProxy,
                        ..direct
                    },
                    None => direct,
                }
            }
            ClientMode::Cloudflare => {
                if !self.cloudflare_ranges.contains(peer.addr) {
                    return direct;
                }
                let Some(addr) = only_line(headers, CF_CONNECTING_IP).and_then(parse_bare) else {
                    return direct;
                };
                let country =
                    only_line(headers, CF_IPCOUNTRY).map_or(Country::UNKNOWN, Country::from_header);
                ResolvedClient {
                    addr,
                    via: Arrival::Cloudflare,
                    country: Some(country),
                    cf_ray: only_line(headers, CF_RAY).filter(|v| valid_cf_ray(v)),
                    peer: peer.addr,
                }
            }
        }
    }
}

fn last_line<'h, H: HeaderLines + ?Sized>(headers: &'h H, name: &'static str) -> Option<&'h [u8]> {
    headers.lines(name).last()
}

/// The header's value when it was sent exactly once.
fn only_line<'h, H: HeaderLines + ?Sized>(headers: &'h H, name: &'static str) -> Option<&'h [u8]> {
    let mut lines = headers.lines(name);
    let first = lines.next()?;
    match lines.next() {
        None => Some(first),
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn set(entries: &[&str]) -> CidrSet {
        CidrSet::parse_list(entries).unwrap()
    }

    fn forwarded(which: ForwardedHeader) -> ClientPolicy {
        ClientPolicy {
            mode: ClientMode::TrustedProxy(which),
            trusted_proxies: set(&["10.0.0.5", "2001:db8:ffff::/64"]),
            ..ClientPolicy::default()
        }
    }

    fn cloudflare() -> ClientPolicy {
        ClientPolicy {
            mode: ClientMode::Cloudflare,
            cloudflare_ranges: cloudflare_ranges(),
            ..ClientPolicy::default()
        }
    }

    const CF_EDGE: &str = "172.64.1.1";

    fn resolve<'h>(
        p: &ClientPolicy,
        peer: &str,
        h: &'h [(&'h str, &'h [u8])],
    ) -> ResolvedClient<'h> {
        p.resolve(Peer::tcp(ip(peer)), h)
    }

    #[test]
    fn direct_mode_ignores_every_forwarding_header() {
        let p = ClientPolicy::default();
        let h: &[(&str, &[u8])] = &[
            ("X-Forwarded-For", b"1.1.1.1"),
            ("Forwarded", b"for=2.2.2.2"),
            ("CF-Connecting-IP", b"3.3.3.3"),
            ("CF-IPCountry", b"DE"),
        ];
        let r = resolve(&p, "10.0.0.5", h);
        assert_eq!(
            r,
            ResolvedClient {
                addr: ip("10.0.0.5"),
                via: Arrival::Direct,
                country: None,
                cf_ray: None,
                peer: ip("10.0.0.5"),
            }
        );
    }

    #[test]
    fn xff_takes_the_last_element_of_the_last_line_with_spaces() {
        let p = forwarded(ForwardedHeader::XForwardedFor);
        let h: &[(&str, &[u8])] = &[("X-Forwarded-For", b" 203.0.113.7 ,\t198.51.100.9 ")];
        let r = resolve(&p, "10.0.0.5", h);
        assert_eq!((r.addr, r.via), (ip("198.51.100.9"), Arrival::TrustedProxy));
        assert_eq!(r.peer, ip("10.0.0.5"));
        let h: &[(&str, &[u8])] = &[
            ("x-forwarded-for", b"1.1.1.1, 2.2.2.2"),
            ("Host", b"a.test"),
            ("X-FORWARDED-FOR", b"3.3.3.3 , 4.4.4.4"),
        ];
        assert_eq!(resolve(&p, "10.0.0.5", h).addr, ip("4.4.4.4"));
    }

    #[test]
    fn xff_element_forms_and_failures() {
        let p = forwarded(ForwardedHeader::XForwardedFor);
        let cases: &[(&[u8], &str)] = &[
            (b"2001:db8::9", "2001:db8::9"),
            (b"[2001:db8::9]", "2001:db8::9"),
            (b"[2001:db8::9]:443", "2001:db8::9"),
            (b"198.51.100.9:8080", "198.51.100.9"),
            (b"::ffff:198.51.100.9", "198.51.100.9"),
            // Failures name the peer.
            (b"1.1.1.1,", "10.0.0.5"),
            (b"unknown", "10.0.0.5"),
            (b"_hidden", "10.0.0.5"),
            (b"", "10.0.0.5"),
            (b"198.51.100.9:99999", "10.0.0.5"),
            (b"198.51.100.9 8080", "10.0.0.5"),
            (b"[2001:db8::9]x", "10.0.0.5"),
            (b"[198.51.100.9]", "10.0.0.5"),
            (b"example.com", "10.0.0.5"),
            (b"\xff\xfe", "10.0.0.5"),
        ];
        for (value, want) in cases {
            let h: &[(&str, &[u8])] = &[("X-Forwarded-For", value)];
            let r = resolve(&p, "10.0.0.5", h);
            assert_eq!(r.addr, ip(want), "{:?}", String::from_utf8_lossy(value));
            let via = if *want == "10.0.0.5" {
                Arrival::Direct
            } else {
                Arrival::TrustedProxy
            };
            assert_eq!(r.via, via);
        }
        let long = [b'1'; 200];
        let h: &[(&str, &[u8])] = &[("X-Forwarded-For", &long)];
        assert_eq!(resolve(&p, "10.0.0.5", h).via, Arrival::Direct);
        let h: &[(&str, &[u8])] = &[];
        assert_eq!(resolve(&p, "10.0.0.5", h).via, Arrival::Direct);
    }

    #[test]
    fn forwarded_takes_the_for_of_the_last_element() {
        let p = forwarded(ForwardedHeader::Forwarded);
        let cases: &[(&[&[u8]], &str)] = &[
            (
                &[b"for=192.0.2.60;proto=http;by=203.0.113.43"],
                "192.0.2.60",
            ),
            (&[b"for=\"[2001:db8::1]:4711\""], "2001:db8::1"),
            (&[b"For=\"[2001:db8:cafe::17]\""], "2001:db8:cafe::17"),
            (&[b"for=\"192.0.2.43:4711\";proto=https"], "192.0.2.43"),
            (&[b"for=192.0.2.43, for=198.51.100.17"], "198.51.100.17"),
            (
                &[b"for=192.0.2.43 ,for=198.51.100.17 ; proto=https"],
                "198.51.100.17",
            ),
            (&[b"for=1.1.1.1", b"for=2.2.2.2"], "2.2.2.2"),
            (&[b"for=1.1.1.1;x=\"a,b\", for=2.2.2.2"], "2.2.2.2"),
            (&[b"for=2.2.2.2;x=\"a,b;c\""], "2.2.2.2"),
            (&[b"for=\"[2001:db8::\\31]:_p\""], "2001:db8::31"),
            (&[b"for=\"::ffff:192.0.2.1\""], "192.0.2.1"),
            // Failures name the peer.
            (&[b"for=192.0.2.43, for=\"_hidden\""], "10.0.0.5"),
            (&[b"for=192.0.2.43, for=unknown"], "10.0.0.5"),
            (&[b"for=1.2.3.4, proto=https"], "10.0.0.5"),
            (&[b"for=1.2.3.4", b""], "10.0.0.5"),
            (&[b"for=\"1.2.3.4"], "10.0.0.5"),
            (&[b"for=1.2.3.4;for=5.6.7.8"], "10.0.0.5"),
            (&[b"for=1.2.3.4;proto"], "10.0.0.5"),
            (&[b"for=\"1.2.3.4\"x"], "10.0.0.5"),
            (&[b"for=1.2\"3.4"], "10.0.0.5"),
            (&[b"for=\"1.2.3.4\\\""], "10.0.0.5"),
        ];
        for (lines, want) in cases {
            let h: Vec<(&str, &[u8])> = lines.iter().map(|l| ("Forwarded", *l)).collect();
            let r = p.resolve(Peer::tcp(ip("10.0.0.5")), &h[..]);
            assert_eq!(r.addr, ip(want), "{lines:?}");
        }
    }

    #[test]
    fn a_trusted_proxy_is_believed_only_for_its_chosen_header() {
        let h: &[(&str, &[u8])] = &[
            ("X-Forwarded-For", b"1.1.1.1"),
            ("Forwarded", b"for=2.2.2.2"),
            ("CF-Connecting-IP", b"3.3.3.3"),
        ];
        let xff = forwarded(ForwardedHeader::XForwardedFor);
        assert_eq!(resolve(&xff, "10.0.0.5", h).addr, ip("1.1.1.1"));
        let fwd = forwarded(ForwardedHeader::Forwarded);
        assert_eq!(resolve(&fwd, "10.0.0.5", h).addr, ip("2.2.2.2"));
        assert_eq!(resolve(&fwd, "10.0.0.5", h).country, None);
    }

    #[test]
    fn headers_from_an_untrusted_peer_are_ignored() {
        let h: &[(&str, &[u8])] = &[("X-Forwarded-For", b"1.1.1.1")];
        let p = forwarded(ForwardedHeader::XForwardedFor);
        let r = resolve(&p, "10.0.0.6", h);
        assert_eq!((r.addr, r.via), (ip("10.0.0.6"), Arrival::Direct));
        // An empty list trusts nobody.
        let nobody = ClientPolicy {
            mode: ClientMode::TrustedProxy(ForwardedHeader::XForwardedFor),
            ..ClientPolicy::default()
        };
        assert_eq!(resolve(&nobody, "10.0.0.5", h).addr, ip("10.0.0.5"));
        // IPv6 proxies inside the trusted /64.
        assert_eq!(resolve(&p, "2001:db8:ffff::7", h).addr, ip("1.1.1.1"));
        assert_eq!(
            resolve(&p, "2001:db8:fffe::7", h).addr,
            ip("2001:db8:fffe::7")
        );
    }

    #[test]
    fn ipv4_mapped_peers_are_their_ipv4_address() {
        let h: &[(&str, &[u8])] = &[("X-Forwarded-For", b"::ffff:198.51.100.9")];
        let p = forwarded(ForwardedHeader::XForwardedFor);
        let r = resolve(&p, "::ffff:10.0.0.5", h);
        assert_eq!(r.peer, ip("10.0.0.5"));
        assert_eq!((r.addr, r.via), (ip("198.51.100.9"), Arrival::TrustedProxy));
        let r = resolve(&ClientPolicy::default(), "::ffff:1.2.3.4", h);
        assert_eq!(r.addr, ip("1.2.3.4"));
        assert!(r.addr.is_ipv4());
        assert_eq!(Peer::tcp(ip("::ffff:1.2.3.4")).addr(), ip("1.2.3.4"));
    }

    #[test]
    fn cloudflare_edge_names_client_country_and_ray() {
        let h: &[(&str, &[u8])] = &[
            ("CF-Connecting-IP", b"2001:db8::77"),
            ("CF-IPCountry", b"de"),
            ("CF-Ray", b"8a1b2c3d4e5f6789-FRA"),
            ("X-Forwarded-For", b"9.9.9.9"),
        ];
        let r = resolve(&cloudflare(), CF_EDGE, h);
        assert_eq!(
            r,
            ResolvedClient {
                addr: ip("2001:db8::77"),
                via: Arrival::Cloudflare,
                country: Country::parse_code("DE"),
                cf_ray: Some(&b"8a1b2c3d4e5f6789-FRA"[..]),
                peer: ip(CF_EDGE),
            }
        );
        let r = resolve(&cloudflare(), "2606:4700::1", h);
        assert_eq!(r.via, Arrival::Cloudflare);
    }

    #[test]
    fn forged_cloudflare_headers_from_an_untrusted_peer_are_ignored() {
        let h: &[(&str, &[u8])] = &[
            ("CF-Connecting-IP", b"1.1.1.1"),
            ("CF-IPCountry", b"DE"),
            ("CF-Ray", b"abc-FRA"),
        ];
        for peer in [
            "198.51.100.1",
            "2001:db8::1",
            "::ffff:198.51.100.1",
            "172.63.255.255",
        ] {
            let r = resolve(&cloudflare(), peer, h);
            assert_eq!(r.addr, canonical(ip(peer)), "{peer}");
            assert_eq!(r.via, Arrival::Direct);
            assert_eq!(r.country, None);
            assert_eq!(r.cf_ray, None);
        }
        // A generic trusted proxy passing CF headers through gives no country.
        let r = resolve(&forwarded(ForwardedHeader::XForwardedFor), "10.0.0.5", h);
        assert_eq!((r.addr, r.country), (ip("10.0.0.5"), None));
    }

    #[test]
    fn cloudflare_headers_are_believed_together_or_not_at_all() {
        let cf = cloudflare();
        // No or repeated CF-Connecting-IP: the edge is the client, no country.
        for h in [
            &[("CF-IPCountry", &b"DE"[..])][..],
            &[
                ("CF-Connecting-IP", &b"1.1.1.1"[..]),
                ("CF-Connecting-IP", b"2.2.2.2"),
            ][..],
            &[
                ("CF-Connecting-IP", &b"1.1.1.1:80"[..]),
                ("CF-IPCountry", b"DE"),
            ][..],
        ] {
            let r = resolve(&cf, CF_EDGE, h);
            assert_eq!(
                (r.addr, r.via, r.country),
                (ip(CF_EDGE), Arrival::Direct, None)
            );
        }
        // Missing, repeated or garbage country: unknown, but from Cloudflare.
        for h in [
            &[("CF-Connecting-IP", &b"1.1.1.1"[..])][..],
            &[
                ("CF-Connecting-IP", &b"1.1.1.1"[..]),
                ("CF-IPCountry", b"DE"),
                ("CF-IPCountry", b"FR"),
            ][..],
            &[
                ("CF-Connecting-IP", &b"1.1.1.1"[..]),
                ("CF-IPCountry", b"Germany"),
            ][..],
            &[
                ("CF-Connecting-IP", &b"1.1.1.1"[..]),
                ("CF-IPCountry", b"XX"),
            ][..],
        ] {
            let r = resolve(&cf, CF_EDGE, h);
            assert_eq!((r.addr, r.country), (ip("1.1.1.1"), Some(Country::UNKNOWN)));
        }
        let h: &[(&str, &[u8])] = &[("CF-Connecting-IP", b" 1.1.1.1 "), ("cf-ipcountry", b"T1")];
        assert_eq!(resolve(&cf, CF_EDGE, h).country, Some(Country::TOR));
    }

    #[test]
    fn cf_ray_is_kept_only_when_safe_to_echo() {
        let cf = cloudflare();
        let ray = |v: &'static [u8]| {
            let h: Vec<(&str, &[u8])> = vec![("CF-Connecting-IP", b"1.1.1.1"), ("CF-Ray", v)];
            cf.resolve(Peer::tcp(ip(CF_EDGE)), &h[..])
                .cf_ray
                .map(<[u8]>::to_vec)
        };
        assert_eq!(
            ray(b"8a1b2c3d4e5f6789-FRA"),
            Some(b"8a1b2c3d4e5f6789-FRA".to_vec())
        );
        assert_eq!(ray(b"<script>"), None);
        assert_eq!(ray(b""), None);
        assert_eq!(ray(&[b'a'; 65]), None);
    }

    #[test]
    fn cloudflare_tunnel_trusts_the_local_connector() {
        let tunnel = ClientPolicy {
            mode: ClientMode::Cloudflare,
            cloudflare_ranges: set(&["127.0.0.1", "::1"]),
            ..ClientPolicy::default()
        };
        let h: &[(&str, &[u8])] = &[("CF-Connecting-IP", b"1.1.1.1"), ("CF-IPCountry", b"NL")];
        assert_eq!(resolve(&tunnel, "127.0.0.1", h).via, Arrival::Cloudflare);
        assert_eq!(resolve(&tunnel, CF_EDGE, h).via, Arrival::Direct);
    }

    #[test]
    fn default_cloudflare_ranges_cover_the_published_lists() {
        let cf = cloudflare_ranges();
        assert_eq!(CLOUDFLARE_IPV4.len(), 15);
        assert_eq!(CLOUDFLARE_IPV6.len(), 7);
        for inside in [
            "173.245.48.1",
            "104.16.0.1",
            "104.27.255.255",
            "172.71.255.255",
            "131.0.75.255",
            "2400:cb00::1",
            "2a06:98c7:ffff::1",
            "::ffff:162.159.0.1",
        ] {
            assert!(cf.contains(ip(inside)), "{inside}");
        }
        for outside in ["104.28.0.0", "172.72.0.0", "8.8.8.8", "2a06:98c8::1", "::1"] {
            assert!(!cf.contains(ip(outside)), "{outside}");
        }
    }

    #[test]
    fn broad_ranges_are_too_broad_to_trust() {
        let c = |s: &str| Cidr::parse(s).unwrap();
        assert!(too_broad_to_trust(&c("0.0.0.0/0")));
        assert!(too_broad_to_trust(&c("10.0.0.0/8")));
        assert!(!too_broad_to_trust(&c("10.1.0.0/16")));
        assert!(!too_broad_to_trust(&c("10.0.0.5")));
        assert!(too_broad_to_trust(&c("::/0")));
        assert!(too_broad_to_trust(&c("2001:db8::/32")));
        assert!(!too_broad_to_trust(&c("2001:db8::/48")));
    }

    #[test]
    fn proxy_protocol_source_stands_in_for_the_peer() {
        let p = ClientPolicy {
            mode: ClientMode::TrustedProxy(ForwardedHeader::XForwardedFor),
            trusted_proxies: set(&["10.0.0.5"]),
            proxy_protocol_peers: set(&["10.0.0.9"]),
            ..ClientPolicy::default()
        };
        let hdr = Some("[::ffff:198.51.100.4]:5555".parse().unwrap());
        assert_eq!(p.accept_proxy_header(ip("10.0.0.8"), hdr), None);
        assert!(!p.proxy_protocol_trusted(ip("10.0.0.8")));
        let peer = p.accept_proxy_header(ip("::ffff:10.0.0.9"), hdr).unwrap();
        assert_eq!(
            (peer.addr(), peer.via_proxy_protocol()),
            (ip("198.51.100.4"), true)
        );
        // The PROXY source is not a trusted proxy, so its XFF is ignored.
        let h: &[(&str, &[u8])] = &[("X-Forwarded-For", b"1.1.1.1")];
        let r = p.resolve(peer, h);
        assert_eq!(
            (r.addr, r.via),
            (ip("198.51.100.4"), Arrival::ProxyProtocol)
        );
        // LOCAL and UNKNOWN keep the TCP peer.
        {
            let peer = p.accept_proxy_header(ip("10.0.0.9"), None).unwrap();
            assert_eq!(
                (peer.addr(), peer.via_proxy_protocol()),
                (ip("10.0.0.9"), false)
            );
        }
        // A PROXY source that is itself a trusted proxy may forward one hop.
        let hdr = Some("10.0.0.5:1".parse().unwrap());
        let peer = p.accept_proxy_header(ip("10.0.0.9"), hdr).unwrap();
        let r = p.resolve(peer, h);
        assert_eq!(
            (r.addr, r.via, r.peer),
            (ip("1.1.1.1"), Arrival::TrustedProxy, ip("10.0.0.5"))
        );
    }

    #[test]
    fn hostile_header_bytes_never_panic_and_fall_back_to_the_peer() {
        // Deterministic xorshift; bytes drawn mostly from the headers' own
        // alphabet so the parsers get deep.
        let mut x: u64 = 0x154A50;
        let mut next = move || {
            crate::testing::xorshift64(&mut x);
            x
        };
        let alphabet = b"0123456789abcdefABCDEF:.[]\",; =_-forFORunknown\t\xff";
        let policies = [
            forwarded(ForwardedHeader::XForwardedFor),
            forwarded(ForwardedHeader::Forwarded),
            cloudflare(),
        ];
        let mut line = Vec::new();
        for _ in 0..20_000 {
            line.clear();
            for _ in 0..next() % 80 {
                line.push(alphabet[(next() % alphabet.len() as u64) as usize]);
            }
            let name = [
                "X-Forwarded-For",
                "Forwarded",
                "CF-Connecting-IP",
                "CF-IPCountry",
                "CF-Ray",
            ][(next() % 5) as usize];
            let h: &[(&str, &[u8])] = &[(name, &line), ("CF-Connecting-IP", b"1.1.1.1")];
            for p in &policies {
                for peer in ["10.0.0.5", CF_EDGE] {
                    let r = resolve(p, peer, h);
                    if r.via == Arrival::Direct {
                        assert_eq!(r.addr, ip(peer));
                    }
                    if let Some(ray) = r.cf_ray {
                        assert!(ray.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'-'));
                    }
                }
            }
        }
    }

    #[test]
    fn arrival_names_are_stable() {
        assert_eq!(Arrival::Direct.as_str(), "direct");
        assert_eq!(Arrival::TrustedProxy.as_str(), "trusted_proxy");
        assert_eq!(Arrival::Cloudflare.as_str(), "cloudflare");
        assert_eq!(Arrival::ProxyProtocol.as_str(), "proxy_protocol");
    }
}
