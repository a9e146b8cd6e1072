//! Appending answer bytes to a write buffer with one capacity check and
//! plain copies: `Vec::extend_from_slice` is a call of its own each time
//! (its capacity check, then `memcpy`), and the host's own answer is two
//! or three of them a request.

/// Appends `parts` to `out` in order, with one capacity check. Inlined
/// with its count known, so the copies are unrolled.
#[inline(always)]
pub(super) fn extend<const N: usize>(out: &mut Vec<u8>, parts: [&[u8]; N]) {
    let n = out.len();
    let total: usize = parts.iter().map(|p| p.len()).sum();
    out.reserve(total);
    let mut at = out.spare_capacity_mut()[..total].as_mut_ptr().cast::<u8>();
    // SAFETY: `MaybeUninit<u8>` and `u8` have one layout; `reserve` made
    // `total` spare bytes exist, the copies initialise them in order (each
    // part after the last, `at` never past the `total` bytes checked by
    // the slice above), and `set_len` then takes them in.
    unsafe {
        for p in parts {
            std::ptr::copy_nonoverlapping(p.as_ptr(), at, p.len());
            at = at.add(p.len());
        }
        out.set_len(n + total);
    }
}

#[cfg(test)]
mod tests {
    use super::extend;

    #[test]
    fn parts_are_appended_in_order_whatever_the_room() {
        let parts: [(&[u8], &[u8]); 4] = [
            (b"", b""),
            (b"head", b""),
            (b"", b"date"),
            (b"head\r\n", b"Date: x\r\n"),
        ];
        for room in [0, 1, 5, 64] {
            for (a, b) in parts {
                let mut out = Vec::with_capacity(room);
                out.extend_from_slice(b"before");
                extend(&mut out, [a, b]);
                assert_eq!(out, [&b"before"[..], a, b].concat(), "room {room}");
                let mut out = Vec::with_capacity(room);
                out.extend_from_slice(b"before");
                extend(&mut out, [a]);
                extend(&mut out, [b]);
                assert_eq!(out, [&b"before"[..], a, b].concat(), "room {room}");
                for c in [&b""[..], b"\r\nbody"] {
                    let mut out = Vec::with_capacity(room);
                    out.extend_from_slice(b"before");
                    extend(&mut out, [a, b, c]);
                    assert_eq!(out, [&b"before"[..], a, b, c].concat(), "room {room}");
                }
            }
        }
    }
}
