//! The HPACK/QPACK Huffman code (RFC 7541 Appendix B), decoded.
//!
//! The code is canonical: codes of one length are consecutive, in symbol
//! order, after every shorter code. The 257 code lengths (EOS last) are
//! therefore the whole table; decoding walks the bits, one length at a
//! time, against the first code and the count of each length.

/// Each symbol's code length in bits; 256 is EOS.
const LENGTHS: [u8; 257] = [
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 30, 28,
    28, 28, 28, 28, 28, 28, 28, 28, 6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6, 5, 5,
    5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10, 13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7,
    7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6, 15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6,
    6, 5, 6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28, 20, 22, 20, 20, 22, 22, 22, 23, 22,
    23, 23, 23, 23, 23, 24, 23, 24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24, 22,
    21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23, 21, 21, 22, 21, 23, 22, 23, 23, 20,
    22, 22, 22, 23, 22, 22, 23, 26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25, 19,
    21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27, 20, 24, 20, 21, 22, 21, 21, 23, 22,
    22, 25, 25, 24, 24, 26, 23, 26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26, 30,
];

/// Lengths run from 5 to 30 bits.
const MAX_LEN: usize = 30;

/// Per length: the first code, how many codes, where its symbols start
/// in [`SYMBOLS`].
struct Canon {
    first: [u32; MAX_LEN + 1],
    count: [u16; MAX_LEN + 1],
    start: [u16; MAX_LEN + 1],
    symbols: [u16; 257],
}

const fn canon() -> Canon {
    let mut c = Canon {
        first: [0; MAX_LEN + 1],
        count: [0; MAX_LEN + 1],
        start: [0; MAX_LEN + 1],
        symbols: [0; 257],
    };
    let mut s = 0;
    while s < 257 {
        c.count[LENGTHS[s] as usize] += 1;
        s += 1;
    }
    let mut code: u32 = 0;
    let mut at: u16 = 0;
    let mut len = 1;
    while len <= MAX_LEN {
        code <<= 1;
        c.first[len] = code;
        c.start[len] = at;
        code += c.count[len] as u32;
        at += c.count[len];
        len += 1;
    }
    // Symbols in (length, symbol) order.
    let mut fill = c.start;
    let mut s = 0;
    while s < 257 {
        let l = LENGTHS[s] as usize;
        c.symbols[fill[l] as usize] = s as u16;
        fill[l] += 1;
        s += 1;
    }
    c
}

static CANON: Canon = canon();

/// Why a Huffman string was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HuffmanError;

/// Appends the decoded bytes of `input` to `out`, refusing EOS inside the
/// string, padding longer than 7 bits and padding that is not all ones
/// (RFC 7541 §5.2). `out` grows by at most `input.len() * 8 / 5` bytes.
pub fn decode(input: &[u8], out: &mut Vec<u8>) -> Result<(), HuffmanError> {
    let c = &CANON;
    let mut code: u32 = 0;
    let mut len = 0usize;
    for &byte in input {
        for shift in (0..8).rev() {
            code = (code << 1) | ((byte >> shift) & 1) as u32;
            len += 1;
            if len > MAX_LEN {
                return Err(HuffmanError);
            }
            let offset = code.wrapping_sub(c.first[len]);
            if code >= c.first[len] && offset < c.count[len] as u32 {
                let symbol = c.symbols[c.start[len] as usize + offset as usize];
                if symbol == 256 {
                    return Err(HuffmanError);
                }
                out.push(symbol as u8);
                code = 0;
                len = 0;
            }
        }
    }
    // What is left is padding: the most significant bits of EOS (all
    // ones), shorter than a byte.
    if len > 7 || code != (1u32 << len) - 1 {
        return Err(HuffmanError);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    fn text(input: &[u8]) -> Result<String, HuffmanError> {
        let mut out = Vec::new();
        decode(input, &mut out)?;
        Ok(String::from_utf8(out).unwrap())
    }

    #[test]
    fn rfc7541_examples_decode() {
        // RFC 7541 C.4.1 to C.4.3 and C.6.1.
        assert_eq!(
            text(&hex("f1e3c2e5f23a6ba0ab90f4ff")).unwrap(),
            "www.example.com"
        );
        assert_eq!(text(&hex("a8eb10649cbf")).unwrap(), "no-cache");
        assert_eq!(text(&hex("25a849e95ba97d7f")).unwrap(), "custom-key");
        assert_eq!(text(&hex("25a849e95bb8e8b4bf")).unwrap(), "custom-value");
        assert_eq!(text(&hex("6402")).unwrap(), "302");
        assert_eq!(text(&hex("aec3771a4b")).unwrap(), "private");
        assert_eq!(
            text(&hex("d07abe941054d444a8200595040b8166e082a62d1bff")).unwrap(),
            "Mon, 21 Oct 2013 20:13:21 GMT"
        );
        assert_eq!(
            text(&hex("9d29ad171863c78f0b97c8e9ae82ae43d3")).unwrap(),
            "https://www.example.com"
        );
        assert_eq!(text(&[]).unwrap(), "");
    }

    #[test]
    fn the_table_is_the_canonical_code() {
        // Every length is used by a run of consecutive codes; the last code
        // (EOS) is 30 ones.
        let c = &CANON;
        assert_eq!(c.first[5], 0);
        assert_eq!(c.first[30] + c.count[30] as u32 - 1, (1 << 30) - 1);
        assert_eq!(c.symbols[256], 256);
        // '0' '1' '2' 'a' 'c' 'e' 'i' 'o' 's' 't' are the 5-bit codes.
        assert_eq!(
            &c.symbols[..10],
            &[48, 49, 50, 97, 99, 101, 105, 111, 115, 116]
        );
    }

    #[test]
    fn bad_padding_and_eos_are_refused() {
        // "0" is 00000: padded with zeros instead of ones.
        assert_eq!(text(&[0b0000_0000]), Err(HuffmanError));
        // A whole byte of padding.
        assert_eq!(text(&hex("f1e3c2e5f23a6ba0ab90f4ffff")), Err(HuffmanError));
        // EOS itself.
        assert_eq!(text(&[0xff, 0xff, 0xff, 0xff]), Err(HuffmanError));
    }
}
