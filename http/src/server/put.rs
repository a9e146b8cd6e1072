//! Appending answer bytes to a write buffer with one capacity check and
//! plain copies: `Vec::extend_from_slice` is a call of its own each time
//! (its capacity check, then `memcpy`), and the host's own answer is two
//! or three of them a request.

/// Appends `a` then `b` to `out`.
#[inline(always)]
pub(super) fn extend_two(out: &mut Vec<u8>, a: &[u8], b: &[u8]) {
    let n = out.len();
    let total = a.len() + b.len();
    out.reserve(total);
    let spare = &mut out.spare_capacity_mut()[..total];
    let (first, second) = spare.split_at_mut(a.len());
    // SAFETY: `MaybeUninit<u8>` and `u8` have one layout; the copies
    // initialise the first `total` spare bytes, which `set_len` then
    // takes in (`reserve` made them exist).
    unsafe {
        std::ptr::copy_nonoverlapping(a.as_ptr(), first.as_mut_ptr().cast::<u8>(), a.len());
        std::ptr::copy_nonoverlapping(b.as_ptr(), second.as_mut_ptr().cast::<u8>(), b.len());
        out.set_len(n + total);
    }
}

/// Appends `a`, `b` then `c` to `out`.
#[inline(always)]
pub(super) fn extend_three(out: &mut Vec<u8>, a: &[u8], b: &[u8], c: &[u8]) {
    let n = out.len();
    let total = a.len() + b.len() + c.len();
    out.reserve(total);
    let spare = &mut out.spare_capacity_mut()[..total];
    let (first, rest) = spare.split_at_mut(a.len());
    let (second, third) = rest.split_at_mut(b.len());
    // SAFETY: as in `extend_two`, for three parts.
    unsafe {
        std::ptr::copy_nonoverlapping(a.as_ptr(), first.as_mut_ptr().cast::<u8>(), a.len());
        std::ptr::copy_nonoverlapping(b.as_ptr(), second.as_mut_ptr().cast::<u8>(), b.len());
        std::ptr::copy_nonoverlapping(c.as_ptr(), third.as_mut_ptr().cast::<u8>(), c.len());
        out.set_len(n + total);
    }
}

/// Appends `a` to `out`.
#[inline(always)]
pub(super) fn extend_one(out: &mut Vec<u8>, a: &[u8]) {
    let n = out.len();
    out.reserve(a.len());
    let spare = &mut out.spare_capacity_mut()[..a.len()];
    // SAFETY: as in `extend_two`, for one part.
    unsafe {
        std::ptr::copy_nonoverlapping(a.as_ptr(), spare.as_mut_ptr().cast::<u8>(), a.len());
        out.set_len(n + a.len());
    }
}

#[cfg(test)]
mod tests {
    use super::{extend_one, extend_three, extend_two};

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
                extend_two(&mut out, a, b);
                assert_eq!(out, [&b"before"[..], a, b].concat(), "room {room}");
                let mut out = Vec::with_capacity(room);
                out.extend_from_slice(b"before");
                extend_one(&mut out, a);
                extend_one(&mut out, b);
                assert_eq!(out, [&b"before"[..], a, b].concat(), "room {room}");
                for c in [&b""[..], b"\r\nbody"] {
                    let mut out = Vec::with_capacity(room);
                    out.extend_from_slice(b"before");
                    extend_three(&mut out, a, b, c);
                    assert_eq!(out, [&b"before"[..], a, b, c].concat(), "room {room}");
                }
            }
        }
    }
}
