//! UDP relays' policy: what a `[[udp]]` relay compiles into, the reasons a
//! datagram is dropped, and the budgets every datagram pays before anything
//! reads it ([`budgets`]), and what `scope = "fleet"` adds to them
//! ([`fleet`]: budgets shared across nodes).
//!
//! Every datagram is hostile until it has passed, in this order: its size
//! bound, the global budget, its source prefix's budget, its operation
//! class's budget (the class is read from a fixed byte range of the raw
//! datagram, not decoded), then the relay's own checks (session, per-session
//! bucket, envelope; the udp crate). A datagram refused anywhere is dropped
//! without a reply and counted by its [`UdpDrop`] reason.
//!
//! The tables reuse the quota machinery ([`crate::quota`]): fixed windows, a
//! [`WindowTable`](crate::quota::WindowTable) over tracked keys for the
//! prefixes, with a ceiling of its own, so a datagram flood can neither
//! spend HTTP clients' budgets nor take their tracked-key capacity.
//!
//! Immutable; built once per snapshot. Nothing here allocates after that.

pub mod budgets;
pub mod fleet;

use crate::quota::{Budget, Ceiling, RatePolicy};
use crate::upstream::{Balance, UpstreamServer};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::net::SocketAddr;

pub use budgets::{Admitted, UdpBudgets};
pub use fleet::{UdpFleet, UdpFleetBudgets};

/// The most operation classes a relay names (the unmatched class aside).
pub const MAX_CLASSES: usize = 32;
/// The most bytes an operation field spans.
pub const MAX_OPERATION_BYTES: u8 = 4;
/// The largest datagram a relay may accept (an IPv4 UDP payload's bound).
pub const MAX_DATAGRAM_BYTES: u32 = 65_507;
/// The most envelope keys one relay holds (the key id is one byte).
pub const MAX_ENVELOPE_KEYS: usize = 16;
/// Bounds of the replay window in nonces: 64 ..= 8192, a multiple of 64.
pub const REPLAY_WINDOW_BOUNDS: (u32, u32) = (64, 8_192);
/// Replies a session not yet proved (by an authenticated envelope) may be
/// sent, in multiples of the bytes it sent.
pub const AMPLIFICATION_FACTOR: u64 = 3;

/// One `[[udp]]` relay, compiled.
#[derive(Clone, Debug)]
pub struct UdpPolicy {
    pub name: String,
    /// Where it listens (fixed at start: a reload cannot move a socket).
    pub listen: Vec<SocketAddr>,
    /// Upstream datagram servers; a session keeps the one it was given.
    pub servers: Vec<UpstreamServer>,
    pub balance: Balance,
    /// A datagram longer than this is dropped (`oversized`).
    pub max_datagram_bytes: u32,
    pub budgets: UdpBudgetPolicy,
    /// Where the operation class is read; `None`: every datagram is of the
    /// unmatched class.
    pub operation: Option<OperationField>,
    /// Index 0 is the unmatched class (`other`); then the profile's, in
    /// order. At most [`MAX_CLASSES`] + 1.
    pub classes: Vec<UdpClass>,
    pub session: SessionPolicy,
    pub envelope: Option<EnvelopePolicy>,
}

/// The budgets of one relay, per shard (the global and class limits already
/// divided when their scope says so).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdpBudgetPolicy {
    pub window_ms: u64,
    /// Datagrams per window, all sources.
    pub global: Option<Budget>,
    /// Datagrams per window per source prefix (IPv4 /24, IPv6 /56).
    pub prefix: Option<Budget>,
    /// The prefix table's ceiling on tracked prefixes and its reserve.
    pub tracked: Ceiling,
    /// The budgets shared across the fleet (`scope = "fleet"`): their
    /// local shares; with one, `global` and `prefix` are whole per shard.
    pub fleet: UdpFleetBudgets,
}

/// A byte range of the raw datagram that names its operation class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OperationField {
    pub offset: u16,
    /// 1 ..= [`MAX_OPERATION_BYTES`].
    pub len: u8,
}

impl OperationField {
    /// The field's bytes as a big-endian number; `None` when the datagram
    /// is too short to hold them. O(1).
    #[inline]
    pub fn read(&self, datagram: &[u8]) -> Option<u32> {
        let start = usize::from(self.offset);
        let bytes = datagram.get(start..start + usize::from(self.len))?;
        Some(bytes.iter().fold(0u32, |v, &b| (v << 8) | u32::from(b)))
    }
}

/// An operation class: which field values it takes, its budget, and whether
/// it may use the reserves (the optional-work budget's rest and the session
/// table's critical reserve).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UdpClass {
    pub name: String,
    /// Field values of this class (empty for the unmatched class).
    pub values: Vec<u32>,
    /// Datagrams per window of this class (per shard).
    pub budget: Option<Budget>,
    pub critical: bool,
}

impl UdpClass {
    /// The unmatched class, with no budget of its own.
    pub fn other() -> UdpClass {
        UdpClass {
            name: "other".into(),
            values: Vec::new(),
            budget: None,
            critical: false,
        }
    }
}

/// Sessions: a client address and port bound to one upstream-facing socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionPolicy {
    /// Each session's inbound token bucket; `None` when `rate = 0`.
    pub rate: Option<RatePolicy>,
    /// A session with no datagram either way for this long is closed.
    pub idle_timeout_ms: u64,
    /// Live sessions per shard, and the part only critical classes take.
    pub ceiling: Ceiling,
}

/// The authenticated envelope (docs/udp.md has the wire format).
#[derive(Clone, Debug)]
pub struct EnvelopePolicy {
    /// Key files, in key-id order (id = index).
    pub key_files: Vec<String>,
    /// The keys, loaded by the runtime from `key_files` (same order); a
    /// relay without its keys drops every datagram (`unknown_key`).
    pub keys: Vec<EnvelopeKey>,
    /// A timestamp further than this from the relay's clock is `stale`.
    pub max_age_ms: u64,
    /// Nonces remembered per key (the nonce space is the key's).
    pub replay_window: u32,
    /// Datagrams each key id may send per budget window on each shard,
    /// counted once its envelope verified; `None`: no key budget.
    pub key_budget: Option<u32>,
    /// Relay only the payload (true) or the whole envelope (false).
    pub strip: bool,
}

type HmacSha256 = Hmac<Sha256>;

/// An envelope key: an HMAC-SHA-256 state keyed once, so each tag costs
/// only its message. Never printed.
#[derive(Clone)]
pub struct EnvelopeKey {
    mac: HmacSha256,
}

impl std::fmt::Debug for EnvelopeKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EnvelopeKey(..)")
    }
}

impl EnvelopeKey {
    /// A key of any length (the key files hold 32 bytes).
    pub fn new(key: &[u8]) -> EnvelopeKey {
        EnvelopeKey {
            mac: <HmacSha256 as Mac>::new_from_slice(key).expect("HMAC takes any key length"),
        }
    }

    /// HMAC-SHA-256 of `message`, whole. O(len), no allocation.
    pub fn tag(&self, message: &[u8]) -> [u8; 32] {
        let mut mac = self.mac.clone();
        mac.update(message);
        mac.finalize().into_bytes().into()
    }
}

/// Why a datagram was dropped: the label of its counter, stable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UdpDrop {
    /// Longer than `max_datagram_bytes`.
    Oversized,
    /// The relay's global budget for this window is spent.
    GlobalBudget,
    /// The source prefix's budget for this window is spent.
    PrefixBudget,
    /// The source prefix is not tracked and the prefix table is at its
    /// ceiling (fail closed).
    TrackedKeys,
    /// The operation class's budget for this window is spent.
    OperationBudget,
    /// No session may be opened: the table is at its ceiling (or the
    /// class may not use the reserve).
    SessionCapacity,
    /// The session's token bucket is empty.
    SessionRate,
    /// Not an envelope: too short or an unknown version.
    Malformed,
    /// An envelope naming a key the relay does not hold.
    UnknownKey,
    /// An envelope whose tag does not verify.
    BadTag,
    /// An envelope whose timestamp is further than `max_age_ms` from now.
    Stale,
    /// An envelope whose nonce its key's window has seen, from any source
    /// (or that is older than the window).
    Replayed,
    /// The envelope's key has spent its budget for this window.
    KeyBudget,
    /// A reply past a session's amplification bound.
    Amplification,
    /// Could not be relayed: no server, no socket for the session, or a
    /// send that failed (either way; a full socket buffer included).
    Unrelayed,
}

impl UdpDrop {
    /// Every reason, in the order of the steps.
    pub const ALL: [UdpDrop; 15] = [
        UdpDrop::Oversized,
        UdpDrop::GlobalBudget,
        UdpDrop::PrefixBudget,
        UdpDrop::TrackedKeys,
        UdpDrop::OperationBudget,
        UdpDrop::SessionCapacity,
        UdpDrop::SessionRate,
        UdpDrop::Malformed,
        UdpDrop::UnknownKey,
        UdpDrop::BadTag,
        UdpDrop::Stale,
        UdpDrop::Replayed,
        UdpDrop::KeyBudget,
        UdpDrop::Amplification,
        UdpDrop::Unrelayed,
    ];

    /// Its index in [`ALL`](Self::ALL).
    pub fn index(self) -> usize {
        self as usize
    }

    /// The metric label and log word.
    pub fn label(self) -> &'static str {
        match self {
            UdpDrop::Oversized => "oversized",
            UdpDrop::GlobalBudget => "global_budget",
            UdpDrop::PrefixBudget => "prefix_budget",
            UdpDrop::TrackedKeys => "tracked_keys",
            UdpDrop::OperationBudget => "operation_budget",
            UdpDrop::SessionCapacity => "session_capacity",
            UdpDrop::SessionRate => "session_rate",
            UdpDrop::Malformed => "malformed",
            UdpDrop::UnknownKey => "unknown_key",
            UdpDrop::BadTag => "bad_tag",
            UdpDrop::Stale => "stale",
            UdpDrop::Replayed => "replayed",
            UdpDrop::KeyBudget => "key_budget",
            UdpDrop::Amplification => "amplification",
            UdpDrop::Unrelayed => "unrelayed",
        }
    }

    /// The step that drops for this reason, as docs/udp.md names it.
    pub fn step(self) -> &'static str {
        match self {
            UdpDrop::Oversized => "size",
            UdpDrop::GlobalBudget => "global budget",
            UdpDrop::PrefixBudget | UdpDrop::TrackedKeys => "prefix budget",
            UdpDrop::OperationBudget => "operation budget",
            UdpDrop::SessionCapacity => "session",
            UdpDrop::SessionRate => "session rate",
            UdpDrop::Malformed
            | UdpDrop::UnknownKey
            | UdpDrop::BadTag
            | UdpDrop::Stale
            | UdpDrop::Replayed => "envelope",
            UdpDrop::KeyBudget => "key budget",
            UdpDrop::Amplification => "amplification",
            UdpDrop::Unrelayed => "relay",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drop_reasons_index_their_table() {
        for (i, r) in UdpDrop::ALL.iter().enumerate() {
            assert_eq!(r.index(), i);
        }
        let labels: std::collections::HashSet<_> = UdpDrop::ALL.iter().map(|r| r.label()).collect();
        assert_eq!(labels.len(), UdpDrop::ALL.len());
    }

    #[test]
    fn the_operation_field_reads_big_endian_and_refuses_short_datagrams() {
        let f = OperationField { offset: 1, len: 2 };
        assert_eq!(f.read(&[9, 0x01, 0x02, 7]), Some(0x0102));
        assert_eq!(f.read(&[9, 0x01]), None);
        assert_eq!(f.read(&[]), None);
        let wide = OperationField {
            offset: 0,
            len: MAX_OPERATION_BYTES,
        };
        assert_eq!(wide.read(&[0xff; 4]), Some(u32::MAX));
    }

    #[test]
    fn envelope_keys_are_hmac_sha256() {
        // RFC 4231 test case 2.
        let k = EnvelopeKey::new(b"Jefe");
        let tag = k.tag(b"what do ya want for nothing?");
        assert_eq!(tag[..8], [0x5b, 0xdc, 0xc1, 0x46, 0xbf, 0x60, 0x75, 0x4e]);
        assert_eq!(format!("{k:?}"), "EnvelopeKey(..)");
    }
}
