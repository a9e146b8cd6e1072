//! HTTP/3 framing (RFC 9114 §7): QUIC variable-length integers, frame
//! headers, and the frames Gapura writes (HEADERS, DATA, SETTINGS, GOAWAY).

/// Frame types (RFC 9114 §7.2).
pub const DATA: u64 = 0x0;
pub const HEADERS: u64 = 0x1;
pub const CANCEL_PUSH: u64 = 0x3;
pub const SETTINGS: u64 = 0x4;
pub const PUSH_PROMISE: u64 = 0x5;
pub const GOAWAY: u64 = 0x7;
pub const MAX_PUSH_ID: u64 = 0xd;

/// Unidirectional stream types (RFC 9114 §6.2, RFC 9204 §4.2).
pub const STREAM_CONTROL: u64 = 0x0;
pub const STREAM_PUSH: u64 = 0x1;
pub const STREAM_QPACK_ENCODER: u64 = 0x2;
pub const STREAM_QPACK_DECODER: u64 = 0x3;

/// Settings (RFC 9114 §7.2.4.1, RFC 9204 §5).
pub const SETTING_QPACK_MAX_TABLE_CAPACITY: u64 = 0x1;
pub const SETTING_MAX_FIELD_SECTION_SIZE: u64 = 0x6;
pub const SETTING_QPACK_BLOCKED_STREAMS: u64 = 0x7;

/// Error codes (RFC 9114 §8.1, RFC 9204 §6).
pub mod code {
    pub const NO_ERROR: u64 = 0x100;
    pub const GENERAL_PROTOCOL_ERROR: u64 = 0x101;
    pub const INTERNAL_ERROR: u64 = 0x102;
    pub const STREAM_CREATION_ERROR: u64 = 0x103;
    pub const CLOSED_CRITICAL_STREAM: u64 = 0x104;
    pub const FRAME_UNEXPECTED: u64 = 0x105;
    pub const FRAME_ERROR: u64 = 0x106;
    pub const EXCESSIVE_LOAD: u64 = 0x107;
    pub const ID_ERROR: u64 = 0x108;
    pub const SETTINGS_ERROR: u64 = 0x109;
    pub const MISSING_SETTINGS: u64 = 0x10a;
    pub const REQUEST_REJECTED: u64 = 0x10b;
    pub const REQUEST_CANCELLED: u64 = 0x10c;
    pub const REQUEST_INCOMPLETE: u64 = 0x10d;
    pub const MESSAGE_ERROR: u64 = 0x10e;
    pub const QPACK_DECOMPRESSION_FAILED: u64 = 0x200;
    pub const QPACK_ENCODER_STREAM_ERROR: u64 = 0x201;
}

/// The largest value a variable-length integer holds.
pub const VARINT_MAX: u64 = (1 << 62) - 1;

/// Reads a variable-length integer (RFC 9000 §16) at the start of `b`:
/// its value and length, or `None` when `b` holds only part of it.
#[inline]
pub fn read_varint(b: &[u8]) -> Option<(u64, usize)> {
    let first = *b.first()?;
    let len = 1usize << (first >> 6);
    if b.len() < len {
        return None;
    }
    let mut v = (first & 0x3f) as u64;
    for &byte in &b[1..len] {
        v = (v << 8) | byte as u64;
    }
    Some((v, len))
}

/// Appends `v` (at most [`VARINT_MAX`]) in its shortest form.
pub fn write_varint(out: &mut Vec<u8>, v: u64) {
    debug_assert!(v <= VARINT_MAX);
    if v < 1 << 6 {
        out.push(v as u8);
    } else if v < 1 << 14 {
        out.extend_from_slice(&((v as u16) | 0x4000).to_be_bytes());
    } else if v < 1 << 30 {
        out.extend_from_slice(&((v as u32) | 0x8000_0000).to_be_bytes());
    } else {
        out.extend_from_slice(&(v | 0xc000_0000_0000_0000).to_be_bytes());
    }
}

/// A frame's type and payload length, read from its start; `None` while
/// the header is incomplete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHead {
    pub kind: u64,
    pub len: u64,
    /// Bytes of the header itself.
    pub header_len: usize,
}

#[inline]
pub fn read_frame_head(b: &[u8]) -> Option<FrameHead> {
    let (kind, a) = read_varint(b)?;
    let (len, c) = read_varint(&b[a..])?;
    Some(FrameHead {
        kind,
        len,
        header_len: a + c,
    })
}

/// Frame types HTTP/2 had that HTTP/3 reserves: receiving one is a
/// connection error (RFC 9114 §7.2.8).
pub fn reserved_http2_type(kind: u64) -> bool {
    matches!(kind, 0x2 | 0x6 | 0x8 | 0x9)
}

/// Appends a frame header.
pub fn write_frame_head(out: &mut Vec<u8>, kind: u64, len: u64) {
    write_varint(out, kind);
    write_varint(out, len);
}

/// The control stream Gapura opens: its type and SETTINGS, which say the
/// decoder keeps no dynamic table (QPACK's defaults of 0, written out)
/// and how large a request's field section may be.
pub fn control_stream_preface(max_field_section: u64) -> Vec<u8> {
    let mut settings = Vec::with_capacity(16);
    for (id, v) in [
        (SETTING_QPACK_MAX_TABLE_CAPACITY, 0),
        (SETTING_QPACK_BLOCKED_STREAMS, 0),
        (SETTING_MAX_FIELD_SECTION_SIZE, max_field_section),
    ] {
        write_varint(&mut settings, id);
        write_varint(&mut settings, v);
    }
    let mut out = Vec::with_capacity(settings.len() + 4);
    write_varint(&mut out, STREAM_CONTROL);
    write_frame_head(&mut out, SETTINGS, settings.len() as u64);
    out.extend_from_slice(&settings);
    out
}

/// A GOAWAY frame naming the first request stream not served.
pub fn goaway(stream_id: u64) -> Vec<u8> {
    let mut id = Vec::with_capacity(8);
    write_varint(&mut id, stream_id);
    let mut out = Vec::with_capacity(10);
    write_frame_head(&mut out, GOAWAY, id.len() as u64);
    out.extend_from_slice(&id);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_in_their_shortest_form() {
        for (v, len) in [
            (0u64, 1usize),
            (63, 1),
            (64, 2),
            (16_383, 2),
            (16_384, 4),
            ((1 << 30) - 1, 4),
            (1 << 30, 8),
            (VARINT_MAX, 8),
        ] {
            let mut out = Vec::new();
            write_varint(&mut out, v);
            assert_eq!(out.len(), len, "{v}");
            assert_eq!(read_varint(&out), Some((v, len)));
            assert_eq!(read_varint(&out[..len - 1]), None, "partial");
        }
        // RFC 9000 A.1's examples.
        assert_eq!(
            read_varint(&[0xc2, 0x19, 0x7c, 0x5e, 0xff, 0x14, 0xe8, 0x8c]),
            Some((151_288_809_941_952_652, 8))
        );
        assert_eq!(
            read_varint(&[0x9d, 0x7f, 0x3e, 0x7d]),
            Some((494_878_333, 4))
        );
        assert_eq!(read_varint(&[0x7b, 0xbd]), Some((15_293, 2)));
        assert_eq!(read_varint(&[0x25]), Some((37, 1)));
        assert_eq!(read_varint(&[0x40, 0x25]), Some((37, 2)));
    }

    #[test]
    fn the_control_preface_is_a_settings_frame() {
        let p = control_stream_preface(65_536);
        assert_eq!(p[0], STREAM_CONTROL as u8);
        let h = read_frame_head(&p[1..]).unwrap();
        assert_eq!(h.kind, SETTINGS);
        assert_eq!(1 + h.header_len + h.len as usize, p.len());
        let mut at = 1 + h.header_len;
        let mut seen = Vec::new();
        while at < p.len() {
            let (id, a) = read_varint(&p[at..]).unwrap();
            let (v, b) = read_varint(&p[at + a..]).unwrap();
            seen.push((id, v));
            at += a + b;
        }
        assert_eq!(seen, vec![(0x1, 0), (0x7, 0), (0x6, 65_536)]);
    }

    #[test]
    fn goaway_names_its_stream() {
        let g = goaway(8);
        assert_eq!(g, vec![0x07, 0x01, 0x08]);
    }
}
