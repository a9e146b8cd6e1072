//! The page variables' syntax, and HTML encoding of their values.
//!
//! A variable is `{name}` with a name of ASCII letters and digits. `{{`
//! writes a literal `{`. Any other brace is literal, so CSS such as
//! `a{color:red}` needs no escaping. A `{name}` whose name is not one of
//! [`Var::ALL`] is an error (`errorPages.variable.unknown`).

/// A page variable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Var {
    /// The status code, folded in when the page is compiled.
    Status,
    /// The status's reason phrase, folded in when the page is compiled.
    StatusText,
    /// The request's ID: a runtime slot.
    RequestId,
    /// The request's host, cut at 253 bytes: a runtime slot.
    Host,
    /// Cloudflare's `CF-Ray` (empty unless Cloudflare's headers are
    /// trusted), cut at 64 bytes: a runtime slot.
    CfRay,
}

impl Var {
    pub const ALL: [Var; 5] = [
        Var::Status,
        Var::StatusText,
        Var::RequestId,
        Var::Host,
        Var::CfRay,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Var::Status => "status",
            Var::StatusText => "statusText",
            Var::RequestId => "requestId",
            Var::Host => "host",
            Var::CfRay => "cfRay",
        }
    }

    pub fn from_name(name: &str) -> Option<Var> {
        Var::ALL.into_iter().find(|v| v.name() == name)
    }
}

/// A piece of a parsed template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Piece {
    Text(String),
    Var(Var),
}

/// Splits `s` into literal text and variables. The error is the unknown
/// name. Allocates; O(n).
pub(crate) fn parse(s: &str) -> Result<Vec<Piece>, String> {
    let bytes = s.as_bytes();
    let mut pieces = Vec::new();
    let mut text = String::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'{' {
            if bytes.get(i + 1) == Some(&b'{') {
                text.push('{');
                i += 2;
                continue;
            }
            let name_len = bytes[i + 1..]
                .iter()
                .take_while(|b| b.is_ascii_alphanumeric())
                .count();
            let close = i + 1 + name_len;
            if name_len > 0 && bytes.get(close) == Some(&b'}') {
                let name = &s[i + 1..close];
                let var = Var::from_name(name).ok_or_else(|| name.to_owned())?;
                if !text.is_empty() {
                    pieces.push(Piece::Text(std::mem::take(&mut text)));
                }
                pieces.push(Piece::Var(var));
                i = close + 1;
                continue;
            }
        }
        // One whole character: the next boundary of `s`.
        let next = (i + 1..=bytes.len())
            .find(|&j| s.is_char_boundary(j))
            .unwrap_or(bytes.len());
        text.push_str(&s[i..next]);
        i = next;
    }
    if !text.is_empty() {
        pieces.push(Piece::Text(text));
    }
    Ok(pieces)
}

/// Feeds the HTML encoding of `value` to `sink`: `& < > " '` as entities,
/// every non-ASCII character as a numeric entity, control bytes and invalid
/// UTF-8 as `&#xfffd;`. The same function measures and writes, so the two
/// always agree. O(n), no allocation.
#[inline]
pub(crate) fn encode_html(value: &[u8], mut sink: impl FnMut(&[u8])) {
    for chunk in value.utf8_chunks() {
        let valid = chunk.valid().as_bytes();
        let mut run = 0;
        let mut i = 0;
        while i < valid.len() {
            let b = valid[i];
            let plain =
                (0x20..0x7F).contains(&b) && !matches!(b, b'&' | b'<' | b'>' | b'"' | b'\'');
            if plain {
                i += 1;
                continue;
            }
            sink(&valid[run..i]);
            match b {
                b'&' => sink(b"&amp;"),
                b'<' => sink(b"&lt;"),
                b'>' => sink(b"&gt;"),
                b'"' => sink(b"&quot;"),
                b'\'' => sink(b"&#39;"),
                _ if b < 0x80 => sink(b"&#xfffd;"),
                _ => {
                    let c = chunk.valid()[i..].chars().next().unwrap_or('\u{fffd}');
                    numeric_entity(c as u32, &mut sink);
                    i += c.len_utf8();
                    run = i;
                    continue;
                }
            }
            i += 1;
            run = i;
        }
        sink(&valid[run..]);
        if !chunk.invalid().is_empty() {
            sink(b"&#xfffd;");
        }
    }
}

/// `&#xHEX;`, lower case, no leading zeros.
fn numeric_entity(code: u32, sink: &mut impl FnMut(&[u8])) {
    let mut buf = [0u8; 12];
    let mut n = buf.len();
    buf[n - 1] = b';';
    n -= 1;
    let mut v = code;
    loop {
        n -= 1;
        buf[n] = b"0123456789abcdef"[(v & 0xF) as usize];
        v >>= 4;
        if v == 0 {
            break;
        }
    }
    n -= 3;
    buf[n..n + 3].copy_from_slice(b"&#x");
    sink(&buf[n..]);
}

/// The HTML encoding of `value` as a string. Allocates (compile time).
pub(crate) fn encode_html_string(value: &str) -> String {
    let mut out = Vec::with_capacity(value.len());
    encode_html(value.as_bytes(), |b| out.extend_from_slice(b));
    String::from_utf8(out).expect("the encoding is ASCII")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(v: &[u8]) -> String {
        let mut out = Vec::new();
        encode_html(v, |b| out.extend_from_slice(b));
        let mut len = 0;
        encode_html(v, |b| len += b.len());
        assert_eq!(len, out.len());
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn markup_and_quotes_are_entities() {
        assert_eq!(
            enc(b"<script>alert(\"x\")</script>"),
            "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;"
        );
        assert_eq!(enc(b"a&b'c"), "a&amp;b&#39;c");
        assert_eq!(enc(b"example.com"), "example.com");
        assert_eq!(enc(b""), "");
    }

    #[test]
    fn non_ascii_controls_and_invalid_utf8_become_numeric_entities() {
        assert_eq!(enc("caf\u{e9}".as_bytes()), "caf&#xe9;");
        assert_eq!(enc("\u{1F600}x".as_bytes()), "&#x1f600;x");
        assert_eq!(enc(b"a\0b\x1b\x7f"), "a&#xfffd;b&#xfffd;&#xfffd;");
        assert_eq!(enc(b"a\xffb\xc3"), "a&#xfffd;b&#xfffd;");
        assert_eq!(enc("\u{10FFFF}".as_bytes()), "&#x10ffff;");
    }

    #[test]
    fn variables_braces_and_escapes() {
        use Piece::{Text, Var as V};
        assert_eq!(
            parse("{status} {statusText}!").unwrap(),
            vec![
                V(Var::Status),
                Text(" ".into()),
                V(Var::StatusText),
                Text("!".into())
            ]
        );
        assert_eq!(parse("{{status}").unwrap(), vec![Text("{status}".into())]);
        assert_eq!(
            parse("{{{host}").unwrap(),
            vec![Text("{".into()), V(Var::Host)]
        );
        assert_eq!(
            parse("a{color:red} {} { host } {a-b} }} {").unwrap(),
            vec![Text("a{color:red} {} { host } {a-b} }} {".into())]
        );
        assert_eq!(
            parse("caf\u{e9}{cfRay}").unwrap(),
            vec![Text("caf\u{e9}".into()), V(Var::CfRay)]
        );
        assert_eq!(parse("{requestid}"), Err("requestid".to_owned()));
        assert_eq!(parse("x {nope} {host}"), Err("nope".to_owned()));
        assert_eq!(parse("{Status}"), Err("Status".to_owned()));
        assert_eq!(parse("").unwrap(), vec![]);
    }
}
