//! The names a `Connection` field lists: hop-by-hop, as the field itself
//! is (RFC 9110 §7.6.1), in a request and in an answer alike. The first
//! [`MAX_LISTED`] names are kept (an entry past them is ignored). No
//! allocation.

/// Most `Connection` tokens honoured.
pub const MAX_LISTED: usize = 16;

/// The names every `Connection` line of a head lists.
pub struct Listed<'a> {
    names: [&'a [u8]; MAX_LISTED],
    n: usize,
}

impl<'a> Listed<'a> {
    /// The names `lines`' `Connection` fields list, each trimmed.
    #[inline]
    pub fn of(lines: &[httparse::Header<'a>]) -> Listed<'a> {
        let mut l = Listed {
            names: [b""; MAX_LISTED],
            n: 0,
        };
        for h in lines.iter() {
            if h.name.eq_ignore_ascii_case("connection") {
                for t in h.value.split(|&b| b == b',') {
                    let t = t.trim_ascii();
                    if !t.is_empty() && l.n < MAX_LISTED {
                        l.names[l.n] = t;
                        l.n += 1;
                    }
                }
            }
        }
        l
    }

    /// The names listed, in order.
    pub fn names(&self) -> &[&'a [u8]] {
        &self.names[..self.n]
    }

    /// Whether `name` is listed (ASCII case-insensitive).
    #[inline]
    pub fn contains(&self, name: &[u8]) -> bool {
        self.names().iter().any(|t| t.eq_ignore_ascii_case(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_connection_line_is_read_and_the_first_sixteen_kept() {
        let many = (0..20)
            .map(|i| format!("x-{i}"))
            .collect::<Vec<_>>()
            .join(",");
        let lines = [
            httparse::Header {
                name: "Connection",
                value: b"keep-alive, X-Secret",
            },
            httparse::Header {
                name: "X-Secret",
                value: b"s",
            },
            httparse::Header {
                name: "connection",
                value: b" ,Upgrade",
            },
            httparse::Header {
                name: "Connection",
                value: many.as_bytes(),
            },
        ];
        let l = Listed::of(&lines);
        assert_eq!(
            &l.names()[..3],
            [&b"keep-alive"[..], b"X-Secret", b"Upgrade"]
        );
        assert_eq!(l.names().len(), MAX_LISTED);
        assert!(l.contains(b"x-secret") && l.contains(b"UPGRADE"));
        assert!(!l.contains(b"x-19"), "past the sixteenth");
        assert!(!l.contains(b"host"));
    }
}
