//! Proof of work's tokens: the challenge a browser solves and the cookie it
//! gets for the solution, both stateless and bound to the host and the
//! client by an HMAC-SHA-256 tag under the process's key ([`PowKey`]).
//!
//! - A challenge is base64url (no padding) of `version | issued_at (u64 s)
//!   | nonce (16) | difficulty (1) | tag (16)`: 42 bytes, 56 characters.
//!   The tag covers a Gapura-specific prefix, the host's stable id, the
//!   client address masked to /32 (IPv4) or /64 (IPv6) and the fields
//!   before it. It is valid [`CHALLENGE_TTL_S`] from issue.
//! - A solution is a decimal counter such that
//!   `SHA-256(challenge + ":" + counter)` starts with `difficulty` zero
//!   bits ([`solves`]).
//! - A cookie is base64url of `version | expires_at (u64 s) | difficulty
//!   (1) | tag (16)`: 26 bytes, 35 characters, the tag over another prefix,
//!   the host, the masked client and the fields before it.
//!
//! Pure: time (unix seconds) and the nonce come from the caller. Checking a
//! cookie or a challenge decodes into stack buffers, clones a keyed HMAC
//! state and compares in constant time: no allocation.
//!
//! Beside the tokens, what they are minted and checked under: what a route
//! applies ([`ProofOfWork`]: the difficulty, the cookie's lifetime, the
//! host's id) and the cookie's name ([`COOKIE_NAME`]). The pages, the
//! verify endpoint and the chain's step build on this module; it uses none
//! of them.

use crate::hash::Fnv1a;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use std::net::IpAddr;
use subtle::ConstantTimeEq;

/// The token format's version.
pub const VERSION: u8 = 1;
/// How long a challenge may be solved: ten minutes.
pub const CHALLENGE_TTL_S: u64 = 600;
/// A challenge's bytes and its base64url length.
pub const CHALLENGE_BYTES: usize = 42;
pub const CHALLENGE_CHARS: usize = 56;
/// A cookie's bytes and its base64url length.
pub const COOKIE_BYTES: usize = 26;
pub const COOKIE_CHARS: usize = 35;
/// Difficulty bounds (leading zero bits).
pub const MIN_DIFFICULTY: u8 = 1;
pub const MAX_DIFFICULTY: u8 = 32;
/// The longest solution counter read (decimal digits of a u64).
pub const MAX_SOLUTION_DIGITS: usize = 20;
/// A key's bytes.
pub const KEY_BYTES: usize = 32;

/// The cookie's name.
pub const COOKIE_NAME: &[u8] = b"gapura_pow";

/// What a route applies, merged when the profile was compiled: the host's
/// settings (routes override only the switch).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProofOfWork {
    /// Leading zero bits a solution needs.
    pub difficulty: u8,
    /// How long a cookie stays valid, in seconds.
    pub lifetime_s: u64,
    /// Only requests this rule set (its index) marked with a `challenge`
    /// rule are challenged; `None`: every request.
    pub when: Option<u32>,
    /// Shadowed, a request that would be challenged is counted and goes on.
    pub mode: crate::mode::Mode,
    /// The host's stable id ([`host_id`]).
    pub host: u64,
}

const CHALLENGE_PREFIX: &[u8] = b"gapura-pow-challenge-v1";
const COOKIE_PREFIX: &[u8] = b"gapura-pow-cookie-v1";
const TAG_BYTES: usize = 16;

type HmacSha256 = Hmac<Sha256>;

/// The process's proof-of-work key: an HMAC-SHA-256 state keyed once, so
/// each tag costs only its message.
#[derive(Clone)]
pub struct PowKey {
    mac: HmacSha256,
}

impl std::fmt::Debug for PowKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PowKey(..)")
    }
}

impl PowKey {
    pub fn new(key: &[u8; KEY_BYTES]) -> PowKey {
        PowKey {
            // HMAC takes a key of any length.
            mac: <HmacSha256 as Mac>::new_from_slice(key).expect("HMAC takes any key length"),
        }
    }

    /// The 16-byte tag of `prefix | host | masked client | fields`.
    fn tag(&self, prefix: &[u8], host: u64, client: IpAddr, fields: &[u8]) -> [u8; TAG_BYTES] {
        let mut mac = self.mac.clone();
        mac.update(prefix);
        mac.update(&host.to_be_bytes());
        mac.update(&masked(client));
        mac.update(fields);
        let full = mac.finalize().into_bytes();
        let mut tag = [0u8; TAG_BYTES];
        tag.copy_from_slice(&full[..TAG_BYTES]);
        tag
    }
}

/// A host's stable id for tags: a hash of its first name, so a reload that
/// keeps the host keeps its cookies valid.
pub fn host_id(label: &str) -> u64 {
    let mut h = Fnv1a::new();
    h.write(label.as_bytes());
    h.finish()
}

/// The client as a tag binds it: IPv4 whole (tagged 4), IPv6 by its /64
/// (tagged 6), an IPv4-mapped IPv6 address as the IPv4 one.
fn masked(client: IpAddr) -> [u8; 9] {
    let mut out = [0u8; 9];
    match client {
        IpAddr::V4(v4) => {
            out[0] = 4;
            out[1..5].copy_from_slice(&v4.octets());
        }
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => {
                out[0] = 4;
                out[1..5].copy_from_slice(&v4.octets());
            }
            None => {
                out[0] = 6;
                out[1..9].copy_from_slice(&v6.octets()[..8]);
            }
        },
    }
    out
}

/// Writes a challenge for `host` and `client`, issued at `now_s`.
pub fn mint_challenge(
    key: &PowKey,
    host: u64,
    client: IpAddr,
    now_s: u64,
    nonce: [u8; 16],
    difficulty: u8,
) -> [u8; CHALLENGE_CHARS] {
    let mut raw = [0u8; CHALLENGE_BYTES];
    raw[0] = VERSION;
    raw[1..9].copy_from_slice(&now_s.to_be_bytes());
    raw[9..25].copy_from_slice(&nonce);
    raw[25] = difficulty;
    let tag = key.tag(CHALLENGE_PREFIX, host, client, &raw[..26]);
    raw[26..].copy_from_slice(&tag);
    encode(&raw)
}

/// Why a challenge was not accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChallengeError {
    /// Not a challenge of this version.
    Malformed,
    /// Not ours, or not for this host and client.
    BadTag,
    /// Older than [`CHALLENGE_TTL_S`] (or issued in the future).
    Expired,
}

/// Checks a challenge for `host` and `client` at `now_s`; its difficulty
/// when valid. No allocation.
pub fn check_challenge(
    key: &PowKey,
    host: u64,
    client: IpAddr,
    now_s: u64,
    challenge: &[u8],
) -> Result<u8, ChallengeError> {
    let raw: [u8; CHALLENGE_BYTES] = decode(challenge).ok_or(ChallengeError::Malformed)?;
    if raw[0] != VERSION {
        return Err(ChallengeError::Malformed);
    }
    let tag = key.tag(CHALLENGE_PREFIX, host, client, &raw[..26]);
    if !bool::from(tag.ct_eq(&raw[26..])) {
        return Err(ChallengeError::BadTag);
    }
    let issued = u64::from_be_bytes(raw[1..9].try_into().unwrap_or([0xff; 8]));
    if issued > now_s || now_s - issued > CHALLENGE_TTL_S {
        return Err(ChallengeError::Expired);
    }
    Ok(raw[25])
}

/// Whether `counter` (decimal digits) solves `challenge` at `difficulty`:
/// SHA-256 of `challenge:counter` starts with `difficulty` zero bits.
pub fn solves(challenge: &[u8], counter: &[u8], difficulty: u8) -> bool {
    if counter.is_empty()
        || counter.len() > MAX_SOLUTION_DIGITS
        || !counter.iter().all(u8::is_ascii_digit)
        || difficulty > MAX_DIFFICULTY
    {
        return false;
    }
    let digest = Sha256::new()
        .chain_update(challenge)
        .chain_update(b":")
        .chain_update(counter)
        .finalize();
    leading_zero_bits(&digest) >= u32::from(difficulty)
}

fn leading_zero_bits(d: &[u8]) -> u32 {
    let mut n = 0;
    for &b in d {
        if b == 0 {
            n += 8;
        } else {
            return n + b.leading_zeros();
        }
    }
    n
}

/// Writes the cookie value for `host` and `client`, valid until
/// `expires_s`.
pub fn mint_cookie(
    key: &PowKey,
    host: u64,
    client: IpAddr,
    expires_s: u64,
    difficulty: u8,
) -> [u8; COOKIE_CHARS] {
    let mut raw = [0u8; COOKIE_BYTES];
    raw[0] = VERSION;
    raw[1..9].copy_from_slice(&expires_s.to_be_bytes());
    raw[9] = difficulty;
    let tag = key.tag(COOKIE_PREFIX, host, client, &raw[..10]);
    raw[10..].copy_from_slice(&tag);
    encode(&raw)
}

/// Why a cookie was not accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CookieError {
    Malformed,
    /// Forged, or for another host or client.
    BadTag,
    Expired,
    /// Solved at a lower difficulty than the host asks now.
    TooEasy,
}

/// Checks a cookie value for `host` and `client` at `now_s`, against the
/// host's current `difficulty`. No allocation.
pub fn check_cookie(
    key: &PowKey,
    host: u64,
    client: IpAddr,
    now_s: u64,
    difficulty: u8,
    cookie: &[u8],
) -> Result<(), CookieError> {
    let raw: [u8; COOKIE_BYTES] = decode(cookie).ok_or(CookieError::Malformed)?;
    if raw[0] != VERSION {
        return Err(CookieError::Malformed);
    }
    let tag = key.tag(COOKIE_PREFIX, host, client, &raw[..10]);
    if !bool::from(tag.ct_eq(&raw[10..])) {
        return Err(CookieError::BadTag);
    }
    let expires = u64::from_be_bytes(raw[1..9].try_into().unwrap_or([0; 8]));
    if now_s >= expires {
        return Err(CookieError::Expired);
    }
    if raw[9] < difficulty {
        return Err(CookieError::TooEasy);
    }
    Ok(())
}

fn encode<const B: usize, const C: usize>(raw: &[u8; B]) -> [u8; C] {
    let mut out = [0u8; C];
    let n = URL_SAFE_NO_PAD
        .encode_slice(raw, &mut out)
        .unwrap_or_default();
    debug_assert_eq!(n, C);
    out
}

/// Decodes exactly `N` bytes of base64url (no padding) into a stack
/// buffer; `None` for anything else.
fn decode<const N: usize>(text: &[u8]) -> Option<[u8; N]> {
    // A longer text cannot decode to N bytes; bound the work first.
    if text.len() != (N * 4).div_ceil(3) {
        return None;
    }
    let mut buf = [0u8; 64];
    let n = URL_SAFE_NO_PAD.decode_slice(text, &mut buf).ok()?;
    if n != N {
        return None;
    }
    let mut out = [0u8; N];
    out.copy_from_slice(&buf[..N]);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> PowKey {
        PowKey::new(&[7; KEY_BYTES])
    }

    const HOST: u64 = 42;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// Finds a solution the slow way, at low difficulty.
    fn solve(challenge: &[u8], difficulty: u8) -> String {
        (0u64..)
            .map(|n| n.to_string())
            .find(|c| solves(challenge, c.as_bytes(), difficulty))
            .unwrap()
    }

    #[test]
    fn a_challenge_is_valid_for_its_host_and_client_for_ten_minutes() {
        let k = key();
        let c = mint_challenge(&k, HOST, ip("203.0.113.7"), 1_000, [3; 16], 12);
        assert_eq!(c.len(), CHALLENGE_CHARS);
        assert_eq!(
            check_challenge(&k, HOST, ip("203.0.113.7"), 1_000, &c),
            Ok(12)
        );
        assert_eq!(
            check_challenge(&k, HOST, ip("203.0.113.7"), 1_600, &c),
            Ok(12)
        );
        assert_eq!(
            check_challenge(&k, HOST, ip("203.0.113.7"), 1_601, &c),
            Err(ChallengeError::Expired)
        );
        assert_eq!(
            check_challenge(&k, HOST, ip("203.0.113.7"), 999, &c),
            Err(ChallengeError::Expired)
        );
        assert_eq!(
            check_challenge(&k, HOST + 1, ip("203.0.113.7"), 1_000, &c),
            Err(ChallengeError::BadTag)
        );
        assert_eq!(
            check_challenge(&k, HOST, ip("203.0.113.8"), 1_000, &c),
            Err(ChallengeError::BadTag)
        );
        let other = PowKey::new(&[8; KEY_BYTES]);
        assert_eq!(
            check_challenge(&other, HOST, ip("203.0.113.7"), 1_000, &c),
            Err(ChallengeError::BadTag)
        );
        assert_eq!(
            check_challenge(&k, HOST, ip("203.0.113.7"), 1_000, b"short"),
            Err(ChallengeError::Malformed)
        );
    }

    #[test]
    fn ipv6_clients_are_bound_by_their_slash_64() {
        let k = key();
        let c = mint_challenge(&k, HOST, ip("2001:db8:1:2::1"), 0, [0; 16], 8);
        assert!(check_challenge(&k, HOST, ip("2001:db8:1:2::ffff"), 0, &c).is_ok());
        assert_eq!(
            check_challenge(&k, HOST, ip("2001:db8:1:3::1"), 0, &c),
            Err(ChallengeError::BadTag)
        );
        let m = mint_cookie(&k, HOST, ip("::ffff:192.0.2.1"), 10, 8);
        assert_eq!(check_cookie(&k, HOST, ip("192.0.2.1"), 0, 8, &m), Ok(()));
    }

    #[test]
    fn a_solution_has_the_leading_zero_bits_and_nothing_else_counts() {
        let k = key();
        let c = mint_challenge(&k, HOST, ip("192.0.2.1"), 0, [9; 16], 10);
        let s = solve(&c, 10);
        assert!(solves(&c, s.as_bytes(), 10));
        let digest = Sha256::new()
            .chain_update(c)
            .chain_update(b":")
            .chain_update(s.as_bytes())
            .finalize();
        assert!(leading_zero_bits(&digest) >= 10);
        assert!(!solves(&c, b"", 1));
        assert!(!solves(&c, b"12a", 1));
        assert!(!solves(&c, &[b'1'; 21], 1));
        assert!(!solves(&c, s.as_bytes(), 33));
    }

    #[test]
    fn a_cookie_is_refused_forged_expired_too_easy_or_for_another_host_or_client() {
        let k = key();
        let client = ip("198.51.100.4");
        let cookie = mint_cookie(&k, HOST, client, 5_000, 16);
        assert_eq!(cookie.len(), COOKIE_CHARS);
        assert_eq!(check_cookie(&k, HOST, client, 4_999, 16, &cookie), Ok(()));
        assert_eq!(
            check_cookie(&k, HOST, client, 5_000, 16, &cookie),
            Err(CookieError::Expired)
        );
        assert_eq!(
            check_cookie(&k, HOST, client, 0, 17, &cookie),
            Err(CookieError::TooEasy)
        );
        assert_eq!(
            check_cookie(&k, HOST + 1, client, 0, 16, &cookie),
            Err(CookieError::BadTag)
        );
        assert_eq!(
            check_cookie(&k, HOST, ip("198.51.100.5"), 0, 16, &cookie),
            Err(CookieError::BadTag)
        );
        // A forged expiry: the tag no longer matches.
        let mut raw: [u8; COOKIE_BYTES] = decode(&cookie).unwrap();
        raw[1..9].copy_from_slice(&u64::MAX.to_be_bytes());
        let forged: [u8; COOKIE_CHARS] = encode(&raw);
        assert_eq!(
            check_cookie(&k, HOST, client, 0, 16, &forged),
            Err(CookieError::BadTag)
        );
        for bad in [
            &b""[..],
            b"x",
            &[b'A'; COOKIE_CHARS + 1],
            &[b'*'; COOKIE_CHARS],
        ] {
            assert_eq!(
                check_cookie(&k, HOST, client, 0, 16, bad),
                Err(CookieError::Malformed)
            );
        }
    }

    #[test]
    fn any_bytes_check_without_panic() {
        let k = key();
        let mut rng = crate::testing::TestRng(0x9e37_79b9);
        for _ in 0..5_000 {
            let len = rng.below(80) as usize;
            let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            let _ = check_cookie(&k, HOST, ip("192.0.2.1"), 0, 1, &bytes);
            let _ = check_challenge(&k, HOST, ip("192.0.2.1"), 0, &bytes);
            let _ = solves(&bytes, &bytes, 3);
        }
    }

    #[test]
    fn host_ids_are_stable_and_distinct() {
        assert_eq!(host_id("a.test"), host_id("a.test"));
        assert_ne!(host_id("a.test"), host_id("b.test"));
    }
}
