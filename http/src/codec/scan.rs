//! The plain request head, read in one pass.
//!
//! Nearly every head a server reads has one plain shape: an upper-case
//! method, one space, a target of visible ASCII, one space, `HTTP/1.1` or
//! `HTTP/1.0`, lines ended by CRLF, token names followed at once by a
//! colon, values of visible ASCII, spaces and tabs, and the blank line.
//! [`scan`] reads exactly that shape, eight bytes at a time where it can.
//! A buffer that ends inside it is [`Declined::Partial`]: every byte so
//! far is one httparse reads the same way, so it too would wait for more
//! (the caller bounds the wait as it bounds httparse's). Anything else is
//! [`Declined::Other`] (a bare LF, leading blank lines, a control byte,
//! obs-text, more lines than the array holds), and the caller runs
//! httparse, which decides the head (accepting, waiting or refusing).
//! What `scan` accepts, httparse accepts with the same parts, to the byte:
//! the same method, target, version, lines (name and value, where they lie
//! in the buffer) and length; what it calls partial, httparse does too. A
//! property test holds both over generated, mutated and cut heads, and the
//! fuzz target `request_head` checks them on every input.
//!
//! No allocation. The `unsafe` here: the lines written into the caller's
//! array made a slice, and a name of token bytes (ASCII) made a `str`.

use super::bytes::alphanumeric_and;
use super::head::{HeaderBuf, Method};

/// A plain head `scan` read: its parts; its lines are the first
/// `line_count` of the caller's array.
#[derive(Debug)]
pub struct Plain<'b> {
    pub method: Method,
    /// The method as sent.
    pub method_token: &'b [u8],
    /// The target as sent (visible ASCII, at least one byte).
    pub target: &'b [u8],
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub version: u8,
    /// Lines written at the start of the caller's array.
    pub line_count: usize,
    /// Bytes of the head, the blank line included.
    pub head_len: usize,
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGH: u64 = 0x8080_8080_8080_8080;

/// The eight bytes at `at`, little-endian (the first byte lowest).
#[inline(always)]
fn word(buf: &[u8], at: usize) -> Option<u64> {
    let bytes: [u8; 8] = buf.get(at..at.checked_add(8)?)?.try_into().ok()?;
    Some(u64::from_le_bytes(bytes))
}

/// The high bit of every byte of `x` below `low` (at most 0x80), equal to
/// 0x7f, or 0x80 and above; exact for the lowest such byte (a borrow only
/// runs upward, out of a byte already flagged), which is all the callers
/// read.
#[inline(always)]
fn stops(x: u64, low: u8) -> u64 {
    let below = x.wrapping_sub(ONES * u64::from(low)) & !x;
    let del = x ^ (ONES * 0x7f);
    let is_del = del.wrapping_sub(ONES) & !del;
    (below | is_del | x) & HIGH
}

/// Index of the first byte at or after `at` that is not visible ASCII
/// (0x21..=0x7e) for `low` 0x21, or not a space or visible ASCII for
/// `low` 0x20; `None` when the buffer ends first.
#[inline(always)]
fn run_end(buf: &[u8], mut at: usize, low: u8) -> Option<usize> {
    while let Some(x) = word(buf, at) {
        let m = stops(x, low);
        if m != 0 {
            return Some(at + (m.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    while let Some(&b) = buf.get(at) {
        if b < low || b >= 0x7f {
            return Some(at);
        }
        at += 1;
    }
    None
}

/// A token byte (RFC 9110 `tchar`): what a header name holds.
static TCHAR: [bool; 256] = alphanumeric_and(b"!#$%&'*+-.^_`|~");

/// The method and the index just past its space: `GET ` in one compare,
/// else upper-case letters up to a space (at most 16).
#[inline(always)]
fn method(buf: &[u8]) -> Result<(Method, &[u8], usize), Declined> {
    if buf.get(..4) == Some(&b"GET "[..]) {
        return Ok((Method::Get, &buf[..3], 4));
    }
    let mut i = 0;
    while let Some(&b) = buf.get(i) {
        if b == b' ' {
            if i == 0 {
                return Err(Declined::Other);
            }
            return Ok((Method::from_bytes(&buf[..i]), &buf[..i], i + 1));
        }
        if !b.is_ascii_uppercase() || i == 16 {
            return Err(Declined::Other);
        }
        i += 1;
    }
    Err(Declined::Partial)
}

/// Why [`scan`] declined a head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Declined {
    /// The buffer ends inside a plain head: every byte so far is one a
    /// plain head has there, so httparse too waits for more.
    Partial,
    /// A byte a plain head does not have there (or more lines than the
    /// array holds): httparse decides.
    Other,
}

/// Reads a plain head at the start of `buf` into `headers` (module doc):
/// its parts and its lines, or why not.
pub fn scan<'h, 'b, const N: usize>(
    buf: &'b [u8],
    headers: &'h mut HeaderBuf<'b, N>,
) -> Result<(Plain<'b>, &'h [httparse::Header<'b>]), Declined> {
    let plain = scan_into(buf, headers)?;
    // SAFETY: `scan_into` wrote the first `line_count` lines of `headers`.
    let lines = unsafe { written(headers, plain.line_count) };
    Ok((plain, lines))
}

/// The contract with httparse, checked on `buf` with an array of `N`
/// lines (for tests and the fuzz target): `Ok(true)` when [`scan`] took
/// the head and httparse read the
/// same method, target, version, lines (each where it lies in `buf`) and
/// length; `Ok(false)` when it declined, httparse waiting too where it
/// called the head partial; `Err` says how the two disagree.
pub fn check_against_httparse<const N: usize>(buf: &[u8]) -> Result<bool, String> {
    let mut mine = super::head::header_buf::<N>();
    let mut theirs = [httparse::EMPTY_HEADER; N];
    let mut req = httparse::Request::new(&mut theirs);
    let (plain, lines) = match scan(buf, &mut mine) {
        Ok(taken) => taken,
        Err(Declined::Partial) => {
            return match req.parse(buf) {
                Ok(httparse::Status::Partial) => Ok(false),
                other => Err(format!("partial, httparse {other:?}")),
            };
        }
        Err(Declined::Other) => return Ok(false),
    };
    let parsed = req.parse(buf);
    if parsed != Ok(httparse::Status::Complete(plain.head_len)) {
        return Err(format!("{} bytes, httparse {parsed:?}", plain.head_len));
    }
    let same = |a: &[u8], b: &[u8]| a.as_ptr() == b.as_ptr() && a.len() == b.len();
    if !req
        .method
        .is_some_and(|m| same(m.as_bytes(), plain.method_token))
    {
        return Err(format!("method, httparse {:?}", req.method));
    }
    if !req.path.is_some_and(|p| same(p.as_bytes(), plain.target)) {
        return Err(format!("target, httparse {:?}", req.path));
    }
    if req.version != Some(plain.version) {
        return Err(format!(
            "version {}, httparse {:?}",
            plain.version, req.version
        ));
    }
    if req.headers.len() != lines.len() {
        return Err(format!(
            "{} lines, httparse {}",
            lines.len(),
            req.headers.len()
        ));
    }
    for (t, m) in req.headers.iter().zip(lines) {
        if !same(t.name.as_bytes(), m.name.as_bytes()) || !same(t.value, m.value) {
            return Err(format!(
                "line {:?}: {:?}, httparse {:?}",
                m.name, m.value, t.value
            ));
        }
    }
    Ok(true)
}

/// The first `n` lines of `headers` as a slice.
///
/// # Safety
/// The first `n` elements of `headers` were written (by [`scan_into`]).
#[inline(always)]
pub(super) unsafe fn written<'h, 'b, const N: usize>(
    headers: &'h HeaderBuf<'b, N>,
    n: usize,
) -> &'h [httparse::Header<'b>] {
    debug_assert!(n <= N);
    // SAFETY: the caller's promise; the array outlives the slice ('h).
    unsafe { std::slice::from_raw_parts(headers.as_ptr().cast(), n) }
}

/// [`scan`], the lines' count for the slice: the array is borrowed only
/// for the call, so a caller can hand it to httparse when this declines.
#[inline(always)]
pub(super) fn scan_into<'b, const N: usize>(
    buf: &'b [u8],
    headers: &mut HeaderBuf<'b, N>,
) -> Result<Plain<'b>, Declined> {
    use Declined::{Other, Partial};
    // A byte past the buffer's end: the head is not complete yet.
    macro_rules! need {
        ($e:expr) => {
            match $e {
                Some(v) => v,
                None => return Err(Partial),
            }
        };
    }
    let (method, method_token, target_start) = method(buf)?;
    let target_end = need!(run_end(buf, target_start, 0x21));
    if target_end == target_start || buf[target_end] != b' ' {
        return Err(Other);
    }
    let v = target_end + 1;
    let version = match buf.get(v..v + 10) {
        Some(line) if line == b"HTTP/1.1\r\n" => 1,
        Some(line) if line == b"HTTP/1.0\r\n" => 0,
        Some(_) => return Err(Other),
        None => {
            let part = &buf[v..];
            return Err(
                if b"HTTP/1.1\r\n".starts_with(part) || b"HTTP/1.0\r\n".starts_with(part) {
                    Partial
                } else {
                    Other
                },
            );
        }
    };
    let mut at = v + 10;
    let mut n = 0;
    loop {
        let first = *need!(buf.get(at));
        if first == b'\r' {
            if *need!(buf.get(at + 1)) != b'\n' {
                return Err(Other);
            }
            break;
        }
        let name_start = at;
        let mut b = first;
        while b != b':' {
            if !TCHAR[b as usize] {
                return Err(Other);
            }
            at += 1;
            b = *need!(buf.get(at));
        }
        if at == name_start {
            return Err(Other);
        }
        let name = &buf[name_start..at];
        at += 1;
        while matches!(*need!(buf.get(at)), b' ' | b'\t') {
            at += 1;
        }
        let value_start = at;
        let value_end = loop {
            at = need!(run_end(buf, at, 0x20));
            match buf[at] {
                b'\t' => at += 1,
                b'\r' => break at,
                _ => return Err(Other),
            }
        };
        if *need!(buf.get(value_end + 1)) != b'\n' {
            return Err(Other);
        }
        let mut trimmed = value_end;
        while trimmed > value_start && matches!(buf[trimmed - 1], b' ' | b'\t') {
            trimmed -= 1;
        }
        let Some(slot) = headers.get_mut(n) else {
            return Err(Other);
        };
        slot.write(httparse::Header {
            // SAFETY: every byte of `name` passed `TCHAR`: ASCII, so UTF-8.
            name: unsafe { std::str::from_utf8_unchecked(name) },
            value: &buf[value_start..trimmed],
        });
        n += 1;
        at = value_end + 2;
    }
    Ok(Plain {
        method,
        method_token,
        target: &buf[target_start..target_end],
        version,
        line_count: n,
        head_len: at + 2,
    })
}
