//! Stable identities: the keys that per-shard state (pools, balancer
//! counters, passive health, rate buckets) follows across reloads. Each is
//! 64-bit FNV-1a over documented bytes, the same in every process and
//! release (a test pins the values), so a reload that keeps a server or a
//! (rate limit, host) pair keeps its state.

use gapura_gate::hash::Fnv1a;
use std::net::SocketAddr;

/// The stable identity of a server: 64-bit FNV-1a over the group name's
/// bytes, one 0xFF byte (never in a name), then `4` and the four IPv4
/// octets or `6` and the sixteen IPv6 octets, then the port big-endian.
/// The same group and address give the same key in every process and
/// release; the flow label and scope of an IPv6 address are not part of it.
pub(crate) fn server_key(group: &str, addr: SocketAddr) -> u64 {
    let mut h = Fnv1a::new();
    h.write(group.as_bytes());
    h.write(&[0xFF]);
    match addr {
        SocketAddr::V4(a) => {
            h.write(&[4]);
            h.write(&a.ip().octets());
        }
        SocketAddr::V6(a) => {
            h.write(&[6]);
            h.write(&a.ip().octets());
        }
    }
    h.write(&addr.port().to_be_bytes());
    h.finish()
}

/// The stable identity of a (rate limit, host) pair: 64-bit FNV-1a over the
/// limit's name, one 0xFF byte (never in a name), then the host's first
/// name in ASCII lowercase without a trailing dot (the way host names
/// compare).
pub(crate) fn pair_identity(limit: &str, host: &str) -> u64 {
    let host = host.strip_suffix('.').unwrap_or(host);
    let mut h = Fnv1a::new();
    h.write(limit.as_bytes());
    h.write(&[0xFF]);
    h.write(host.to_ascii_lowercase().as_bytes());
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fnv(bytes: &[u8]) -> u64 {
        let mut h = Fnv1a::new();
        h.write(bytes);
        h.finish()
    }

    #[test]
    fn fnv1a_matches_the_reference_vectors() {
        assert_eq!(fnv(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn server_keys_hash_the_documented_bytes() {
        let a: SocketAddr = "127.0.0.1:9001".parse().unwrap();
        let mut bytes = b"app\xFF\x04".to_vec();
        bytes.extend_from_slice(&[127, 0, 0, 1, 0x23, 0x29]);
        assert_eq!(server_key("app", a), fnv(&bytes));
        let b: SocketAddr = "[::1]:9002".parse().unwrap();
        let mut bytes = b"app\xFF\x06".to_vec();
        bytes.extend_from_slice(&[0; 15]);
        bytes.extend_from_slice(&[1, 0x23, 0x2a]);
        assert_eq!(server_key("app", b), fnv(&bytes));
        assert_ne!(server_key("app", a), server_key("api", a));
        assert_ne!(
            server_key("app", a),
            server_key("app", "127.0.0.1:9002".parse().unwrap())
        );
    }
}
