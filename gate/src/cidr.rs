//! CIDR sets: which addresses a list names, answered in O(log n).
//!
//! A [`CidrSet`] is a sorted array of merged, disjoint, non-adjacent ranges of
//! 128-bit keys. IPv4 addresses are keyed in the IPv4-mapped block
//! `::ffff:0:0/96`, so one array serves both families and an IPv4-mapped IPv6
//! address (`::ffff:1.2.3.4`) is the IPv4 address it carries. Membership needs
//! no longest-prefix match, so a flat array beats a trie: fewer dependent
//! loads, smaller, and a lookup is one binary search with no allocation.
//!
//! Parsing is strict. An entry is an address (`192.0.2.7`, `2001:db8::1`) or a
//! network (`192.0.2.0/24`); a network with host bits set (`10.0.0.1/8`) is an
//! error whose message names the network meant, because silently widening or
//! narrowing a written rule is worse than refusing it. An IPv6 network never
//! covers IPv4 addresses unless it is written in the mapped block itself:
//! `::/0` is every IPv6 address, not every address (`0.0.0.0/0` says IPv4).
//! Building a set allocates; looking up never does.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// First key of the IPv4-mapped block `::ffff:0:0/96`.
pub const V4_MAPPED_FIRST: u128 = 0xffff_0000_0000;
/// Last key of the IPv4-mapped block.
pub const V4_MAPPED_LAST: u128 = 0xffff_ffff_ffff;

/// The address with an IPv4-mapped IPv6 address turned into its IPv4 form;
/// every other address unchanged. O(1).
#[inline]
pub fn canonical(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => addr,
        },
        v4 => v4,
    }
}

/// The 128-bit key of an address: IPv4 (and IPv4-mapped IPv6) in
/// `::ffff:0:0/96`, IPv6 as its bits. O(1).
#[inline]
pub fn key(addr: IpAddr) -> u128 {
    match addr {
        IpAddr::V4(v4) => V4_MAPPED_FIRST | u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

/// One network: a canonical address (host bits clear) and a prefix length in
/// its own family (0..=32 for IPv4, 0..=128 for IPv6). IPv4-mapped IPv6
/// networks of /96 or longer are held as the IPv4 network they are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

/// Why an entry is not a network. Each has a stable code for the profile
/// validator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CidrError {
    /// Not an IPv4 or IPv6 address (zones, brackets, ports and leading zeros
    /// in IPv4 octets are refused too).
    Address,
    /// The prefix length is missing, not a plain decimal number, or longer
    /// than the family allows (`max`).
    Prefix { max: u8 },
    /// Bits are set below the prefix; `network` is what was probably meant.
    HostBits { network: Cidr },
}

impl fmt::Display for CidrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CidrError::Address => f.write_str("not an IPv4 or IPv6 address"),
            CidrError::Prefix { max } => {
                write!(f, "the prefix length must be a number from 0 to {max}")
            }
            CidrError::HostBits { network } => write!(
                f,
                "host bits are set below the prefix; the network is {network} \
                 (write that, or the address alone)"
            ),
        }
    }
}

impl std::error::Error for CidrError {}

impl Cidr {
    /// The network `addr/prefix`, refusing host bits below the prefix.
    /// An IPv4-mapped `addr` with prefix 96 or more becomes IPv4.
    pub fn new(addr: IpAddr, prefix: u8) -> Result<Cidr, CidrError> {
        let (addr, prefix) = match addr {
            IpAddr::V6(v6) if prefix >= 96 => match v6.to_ipv4_mapped() {
                Some(v4) => (IpAddr::V4(v4), prefix - 96),
                None => (addr, prefix),
            },
            _ => (addr, prefix),
        };
        let max = family_bits(addr);
        if prefix > max {
            return Err(CidrError::Prefix { max });
        }
        let network = Cidr {
            addr: mask(addr, prefix),
            prefix,
        };
        if network.addr != addr {
            return Err(CidrError::HostBits { network });
        }
        Ok(network)
    }

    /// One address as a network of its full length.
    pub fn host(addr: IpAddr) -> Cidr {
        let addr = canonical(addr);
        Cidr {
            addr,
            prefix: family_bits(addr),
        }
    }

    /// Parses `ADDR` or `ADDR/PREFIX` (surrounding ASCII whitespace allowed).
    pub fn parse(text: &str) -> Result<Cidr, CidrError> {
        let text = text.trim_ascii();
        let (addr, prefix) = match text.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (text, None),
        };
        let addr: IpAddr = addr.parse().map_err(|_| CidrError::Address)?;
        match prefix {
            None => Ok(Cidr::host(addr)),
            Some(p) => {
                let max = family_bits(addr);
                let prefix = parse_prefix(p).ok_or(CidrError::Prefix { max })?;
                if prefix > max {
                    return Err(CidrError::Prefix { max });
                }
                Cidr::new(addr, prefix)
            }
        }
    }

    /// The network address (host bits clear).
    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    /// The prefix length in the address's own family.
    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    /// Whether `addr` (canonicalised) is inside. Compares in the address's
    /// own family: an IPv6 network never holds an IPv4 address unless it was
    /// written in the mapped block. O(1).
    pub fn contains(&self, addr: IpAddr) -> bool {
        match (self.addr, canonical(addr)) {
            (IpAddr::V4(net), IpAddr::V4(a)) => {
                let m = mask_bits_u32(self.prefix);
                u32::from(a) & m == u32::from(net)
            }
            (IpAddr::V6(net), IpAddr::V6(a)) => {
                let m = mask_bits_u128(self.prefix);
                u128::from(a) & m == u128::from(net)
            }
            _ => false,
        }
    }

    /// The key ranges this network covers: one, or two for an IPv6 network
    /// that contains the whole IPv4-mapped block (which is cut out).
    fn key_ranges(&self) -> ([(u128, u128); 2], usize) {
        let lo = key(self.addr);
        let hi = match self.addr {
            IpAddr::V4(_) => lo | u128::from(!mask_bits_u32(self.prefix)),
            IpAddr::V6(_) => lo | !mask_bits_u128(self.prefix),
        };
        let none = [(0, 0); 2];
        if self.addr.is_ipv6() && lo <= V4_MAPPED_FIRST && hi >= V4_MAPPED_LAST {
            let mut out = none;
            let mut n = 0;
            if lo < V4_MAPPED_FIRST {
                out[n] = (lo, V4_MAPPED_FIRST - 1);
                n += 1;
            }
            if hi > V4_MAPPED_LAST {
                out[n] = (V4_MAPPED_LAST + 1, hi);
                n += 1;
            }
            (out, n)
        } else {
            ([(lo, hi), (0, 0)], 1)
        }
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

impl FromStr for Cidr {
    type Err = CidrError;
    fn from_str(s: &str) -> Result<Cidr, CidrError> {
        Cidr::parse(s)
    }
}

fn family_bits(addr: IpAddr) -> u8 {
    if addr.is_ipv4() {
        32
    } else {
        128
    }
}

/// 1 to 3 decimal digits, no sign, no leading zero except `0` itself.
fn parse_prefix(p: &str) -> Option<u8> {
    let b = p.as_bytes();
    if b.is_empty() || b.len() > 3 || !b.iter().all(u8::is_ascii_digit) {
        return None;
    }
    if b.len() > 1 && b[0] == b'0' {
        return None;
    }
    p.parse::<u16>().ok().and_then(|n| u8::try_from(n).ok())
}

fn mask_bits_u32(prefix: u8) -> u32 {
    if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(prefix))
    }
}

fn mask_bits_u128(prefix: u8) -> u128 {
    if prefix == 0 {
        0
    } else {
        u128::MAX << (128 - u32::from(prefix))
    }
}

fn mask(addr: IpAddr, prefix: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => IpAddr::V4(Ipv4Addr::from(u32::from(a) & mask_bits_u32(prefix))),
        IpAddr::V6(a) => IpAddr::V6(Ipv6Addr::from(u128::from(a) & mask_bits_u128(prefix))),
    }
}

/// Up to this many IPv4 ranges a lookup compares each in turn.
const SMALL_V4: usize = 4;

/// An immutable set of networks. Lookups are O(log ranges) with no
/// allocation; building allocates.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CidrSet {
    /// First key of each range, ascending.
    starts: Box<[u128]>,
    /// Last key of each range; `ends[i] + 1 < starts[i + 1]` (disjoint and
    /// not adjacent: touching ranges are merged).
    ends: Box<[u128]>,
    /// The same ranges clipped to the IPv4 block (`::ffff:0:0/96`), as
    /// 32-bit addresses: a quarter of the bytes to search, so a cold lookup
    /// touches a few cache lines instead of one per step.
    v4_starts: Box<[u32]>,
    v4_ends: Box<[u32]>,
    /// `v4_by_octet[o]`: the first IPv4 range starting at or after `o.0.0.0`
    /// (257 entries, the last one the count), so a lookup searches only the
    /// ranges that start in its first octet.
    v4_by_octet: Box<[u32]>,
}

/// Collects networks and ranges, then sorts and merges them into a set.
#[derive(Clone, Debug, Default)]
pub struct CidrSetBuilder {
    ranges: Vec<(u128, u128)>,
}

impl CidrSetBuilder {
    pub fn new() -> CidrSetBuilder {
        CidrSetBuilder::default()
    }

    /// Adds a network. Allocates.
    pub fn add(&mut self, cidr: Cidr) -> &mut Self {
        let (ranges, n) = cidr.key_ranges();
        self.ranges.extend_from_slice(&ranges[..n]);
        self
    }

    /// Adds an inclusive range of keys (see [`key`]); an empty range
    /// (`first > last`) adds nothing. Allocates.
    pub fn add_keys(&mut self, first: u128, last: u128) -> &mut Self {
        if first <= last {
            self.ranges.push((first, last));
        }
        self
    }

    /// Sorts and merges overlapping and adjacent ranges. O(n log n).
    pub fn build(mut self) -> CidrSet {
        self.ranges.sort_unstable();
        let mut merged: Vec<(u128, u128)> = Vec::with_capacity(self.ranges.len());
        for (lo, hi) in self.ranges {
            match merged.last_mut() {
                Some(last) if lo <= last.1.saturating_add(1) => {
                    last.1 = last.1.max(hi);
                }
                _ => merged.push((lo, hi)),
            }
        }
        let v4: Vec<(u32, u32)> = merged
            .iter()
            .filter(|r| r.1 >= V4_MAPPED_FIRST && r.0 <= V4_MAPPED_LAST)
            .map(|r| {
                (
                    (r.0.max(V4_MAPPED_FIRST) - V4_MAPPED_FIRST) as u32,
                    (r.1.min(V4_MAPPED_LAST) - V4_MAPPED_FIRST) as u32,
                )
            })
            .collect();
        let v4_by_octet = (0..=256u32)
            .map(|o| v4.partition_point(|r| u64::from(r.0) < u64::from(o) << 24) as u32)
            .collect();
        CidrSet {
            starts: merged.iter().map(|r| r.0).collect(),
            ends: merged.iter().map(|r| r.1).collect(),
            v4_starts: v4.iter().map(|r| r.0).collect(),
            v4_ends: v4.iter().map(|r| r.1).collect(),
            v4_by_octet,
        }
    }
}

impl CidrSet {
    /// The empty set: contains nothing.
    pub fn empty() -> CidrSet {
        CidrSet::default()
    }

    /// A set of these networks. Allocates.
    pub fn from_cidrs<I: IntoIterator<Item = Cidr>>(cidrs: I) -> CidrSet {
        let mut b = CidrSetBuilder::new();
        for c in cidrs {
            b.add(c);
        }
        b.build()
    }

    /// Parses every entry; the first bad one is returned with its index.
    /// Allocates.
    pub fn parse_list<S: AsRef<str>>(entries: &[S]) -> Result<CidrSet, (usize, CidrError)> {
        let mut b = CidrSetBuilder::new();
        for (i, e) in entries.iter().enumerate() {
            b.add(Cidr::parse(e.as_ref()).map_err(|err| (i, err))?);
        }
        Ok(b.build())
    }

    /// Whether `addr` is in the set. O(log ranges), no allocation.
    #[inline]
    pub fn contains(&self, addr: IpAddr) -> bool {
        self.contains_key(key(addr))
    }

    /// Whether a key (see [`key`]) is in the set. O(log ranges).
    #[inline(always)]
    pub fn contains_key(&self, k: u128) -> bool {
        if (V4_MAPPED_FIRST..=V4_MAPPED_LAST).contains(&k) {
            return self.contains_v4((k - V4_MAPPED_FIRST) as u32);
        }
        let i = self.starts.partition_point(|&s| s <= k);
        i > 0 && self.ends[i - 1] >= k
    }

    /// An IPv4 address: the ranges starting before its octet all start
    /// before it, those starting after its octet all after it, so the last
    /// range starting at or before it is found among its octet's ranges
    /// (or is the one just before them).
    #[inline]
    fn contains_v4(&self, a: u32) -> bool {
        if self.v4_starts.len() <= SMALL_V4 {
            // A trusted proxy or two: compared in place, without the index.
            return self
                .v4_starts
                .iter()
                .zip(self.v4_ends.iter())
                .any(|(&s, &e)| s <= a && a <= e);
        }
        let o = (a >> 24) as usize;
        let (lo, hi) = (
            self.v4_by_octet[o] as usize,
            self.v4_by_octet[o + 1] as usize,
        );
        let i = lo + self.v4_starts[lo..hi].partition_point(|&s| s <= a);
        i > 0 && self.v4_ends[i - 1] >= a
    }

    /// Whether the set holds nothing.
    pub fn is_empty(&self) -> bool {
        self.starts.is_empty()
    }

    /// How many merged ranges the set holds (not how many entries built it).
    pub fn range_count(&self) -> usize {
        self.starts.len()
    }

    /// The merged ranges as inclusive key pairs, ascending.
    pub fn ranges(&self) -> impl Iterator<Item = (u128, u128)> + '_ {
        self.starts.iter().copied().zip(self.ends.iter().copied())
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

    #[test]
    fn addresses_and_networks_parse_to_their_canonical_form() {
        assert_eq!(
            Cidr::parse("192.0.2.7").unwrap().to_string(),
            "192.0.2.7/32"
        );
        assert_eq!(
            Cidr::parse(" 10.0.0.0/8 ").unwrap().to_string(),
            "10.0.0.0/8"
        );
        assert_eq!(
            Cidr::parse("2001:DB8::/32").unwrap().to_string(),
            "2001:db8::/32"
        );
        assert_eq!(Cidr::parse("::/0").unwrap().to_string(), "::/0");
        assert_eq!(Cidr::parse("0.0.0.0/0").unwrap().to_string(), "0.0.0.0/0");
        assert_eq!(
            Cidr::parse("::ffff:192.0.2.0/120").unwrap().to_string(),
            "192.0.2.0/24"
        );
        assert_eq!(
            Cidr::parse("::ffff:192.0.2.9").unwrap().to_string(),
            "192.0.2.9/32"
        );
    }

    #[test]
    fn host_bits_are_an_error_naming_the_network() {
        let e = Cidr::parse("10.0.0.1/8").unwrap_err();
        assert_eq!(
            e.to_string(),
            "host bits are set below the prefix; the network is 10.0.0.0/8 \
             (write that, or the address alone)"
        );
        let e = Cidr::parse("2001:db8::1/64").unwrap_err();
        assert_eq!(
            e,
            CidrError::HostBits {
                network: Cidr::parse("2001:db8::/64").unwrap()
            }
        );
    }

    #[test]
    fn bad_addresses_and_prefixes_are_refused_with_codes() {
        for bad in [
            "",
            "1.2.3",
            "1.2.3.4.5",
            "256.0.0.1",
            "010.0.0.1",
            "fe80::1%eth0",
            "[::1]",
            "1.2.3.4:80",
            "example.com",
            "/8",
        ] {
            assert_eq!(Cidr::parse(bad), Err(CidrError::Address), "{bad:?}");
        }
        for (bad, max) in [
            ("10.0.0.0/33", 32),
            ("10.0.0.0/", 32),
            ("10.0.0.0/08", 32),
            ("10.0.0.0/+8", 32),
            ("10.0.0.0/8/8", 32),
            ("::/129", 128),
            ("::/1000", 128),
            ("::/x", 128),
        ] {
            assert_eq!(Cidr::parse(bad), Err(CidrError::Prefix { max }), "{bad:?}");
        }
        assert_eq!(
            CidrError::Prefix { max: 32 }.to_string(),
            "the prefix length must be a number from 0 to 32"
        );
    }

    #[test]
    fn parse_list_reports_the_index_of_the_first_bad_entry() {
        let e = CidrSet::parse_list(&["10.0.0.0/8", "192.0.2.1/24", "x"]).unwrap_err();
        assert_eq!(e.0, 1);
        assert!(matches!(e.1, CidrError::HostBits { .. }));
    }

    #[test]
    fn ipv4_mapped_addresses_are_their_ipv4_address() {
        let s = set(&["192.0.2.0/24"]);
        assert!(s.contains(ip("192.0.2.200")));
        assert!(s.contains(ip("::ffff:192.0.2.200")));
        assert!(!s.contains(ip("::ffff:192.0.3.1")));
        assert_eq!(canonical(ip("::ffff:1.2.3.4")), ip("1.2.3.4"));
        assert_eq!(canonical(ip("::1.2.3.4")), ip("::1.2.3.4"));
    }

    #[test]
    fn ipv6_networks_never_cover_ipv4_unless_written_mapped() {
        let all6 = set(&["::/0"]);
        assert!(all6.contains(ip("2001:db8::1")));
        assert!(all6.contains(ip("::")));
        assert!(!all6.contains(ip("1.2.3.4")));
        assert!(!all6.contains(ip("::ffff:1.2.3.4")));
        assert_eq!(all6.range_count(), 2);
        let all4 = set(&["0.0.0.0/0"]);
        assert!(all4.contains(ip("255.255.255.255")));
        assert!(!all4.contains(ip("::1")));
        let both = set(&["::/0", "0.0.0.0/0"]);
        assert_eq!(both.ranges().collect::<Vec<_>>(), vec![(0, u128::MAX)]);
        let mapped = set(&["::ffff:0:0/96"]);
        assert!(mapped.contains(ip("8.8.8.8")));
        assert!(!Cidr::parse("::/0").unwrap().contains(ip("1.2.3.4")));
    }

    #[test]
    fn adjacent_and_overlapping_networks_merge_exactly() {
        let halves = set(&["10.0.0.128/25", "10.0.0.0/25"]);
        assert_eq!(
            halves.ranges().collect::<Vec<_>>(),
            set(&["10.0.0.0/24"]).ranges().collect::<Vec<_>>()
        );
        let nested = set(&["10.0.0.0/8", "10.1.2.3", "10.255.255.255"]);
        assert_eq!(nested.range_count(), 1);
        let gap = set(&["10.0.0.0/32", "10.0.0.2/32"]);
        assert_eq!(gap.range_count(), 2);
        assert!(!gap.contains(ip("10.0.0.1")));
        let mut b = CidrSetBuilder::new();
        b.add_keys(5, 9)
            .add_keys(10, 12)
            .add_keys(1, 3)
            .add_keys(9, 4);
        assert_eq!(
            b.build().ranges().collect::<Vec<_>>(),
            vec![(1, 3), (5, 12)]
        );
        let mut b = CidrSetBuilder::new();
        b.add_keys(u128::MAX - 1, u128::MAX).add_keys(0, u128::MAX);
        assert_eq!(b.build().ranges().collect::<Vec<_>>(), vec![(0, u128::MAX)]);
    }

    #[test]
    fn range_edges_are_inclusive() {
        let s = set(&["192.0.2.16/28", "2001:db8::/127"]);
        assert!(!s.contains(ip("192.0.2.15")));
        assert!(s.contains(ip("192.0.2.16")));
        assert!(s.contains(ip("192.0.2.31")));
        assert!(!s.contains(ip("192.0.2.32")));
        assert!(s.contains(ip("2001:db8::1")));
        assert!(!s.contains(ip("2001:db8::2")));
        assert!(!CidrSet::empty().contains(ip("0.0.0.0")));
        assert!(CidrSet::empty().is_empty());
    }

    use crate::testing::TestRng as Rng;

    /// An address near a few clusters so that random networks overlap,
    /// touch and nest often.
    fn random_addr(r: &mut Rng) -> IpAddr {
        let low = r.below(1 << 12) as u32;
        match r.below(4) {
            0 => IpAddr::V4(Ipv4Addr::from(0x0a00_0000 | low)),
            1 => IpAddr::V4(Ipv4Addr::from(r.next() as u32)),
            2 => IpAddr::V6(Ipv6Addr::from(0x2001_0db8_u128 << 96 | u128::from(low))),
            _ => IpAddr::V6(Ipv6Addr::from(
                u128::from(r.next()) << 64 | u128::from(r.next()),
            )),
        }
    }

    fn random_cidr(r: &mut Rng) -> Cidr {
        let addr = random_addr(r);
        let bits = family_bits(addr);
        let prefix = match r.below(3) {
            0 => bits - r.below(13) as u8,
            1 => bits - r.below(u64::from(bits) + 1) as u8,
            _ => bits,
        };
        Cidr::new(mask(addr, prefix), prefix).unwrap()
    }

    #[test]
    fn contains_agrees_with_a_linear_scan() {
        let mut r = Rng(0x152026);
        for round in 0..300 {
            let n = r.below(40) as usize;
            let cidrs: Vec<Cidr> = (0..n).map(|_| random_cidr(&mut r)).collect();
            let s = CidrSet::from_cidrs(cidrs.iter().copied());
            let mut probes: Vec<IpAddr> = (0..200).map(|_| random_addr(&mut r)).collect();
            // Every network's edges and their neighbours.
            for c in &cidrs {
                let (ranges, k) = c.key_ranges();
                for &(lo, hi) in &ranges[..k] {
                    for x in [lo.wrapping_sub(1), lo, hi, hi.wrapping_add(1)] {
                        probes.push(IpAddr::V6(Ipv6Addr::from(x)));
                    }
                }
            }
            for a in probes {
                let naive = cidrs.iter().any(|c| c.contains(a));
                assert_eq!(s.contains(a), naive, "round {round}: {a} in {cidrs:?}");
            }
        }
    }

    #[test]
    fn built_ranges_are_sorted_disjoint_and_not_adjacent() {
        let mut r = Rng(0x154A50);
        for _ in 0..300 {
            let n = r.below(60) as usize;
            let s = CidrSet::from_cidrs((0..n).map(|_| random_cidr(&mut r)));
            let ranges: Vec<_> = s.ranges().collect();
            for &(lo, hi) in &ranges {
                assert!(lo <= hi);
            }
            for w in ranges.windows(2) {
                assert!(w[0].1 < w[1].0 && w[1].0 - w[0].1 > 1, "{w:?}");
            }
        }
    }
}
