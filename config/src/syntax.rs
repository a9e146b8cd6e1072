//! Errors `toml` and serde report while reading the raw profile.
//!
//! serde stops at the first problem, so syntax errors, unknown keys and
//! wrong types come one at a time. `toml` gives the byte span of the
//! offending key or value but not its key path, so the path is found by
//! reading the text a second time into a shape-only tree ([`Node`]) that
//! records where every key and array element starts: the error belongs to
//! the key or element that starts last at or before the error's offset.
//! When the text is not valid TOML there is no tree and the path is empty.

use crate::error::{key_path, Errors};
use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use std::fmt;
use toml::Spanned;

/// Converts a `toml` error into a profile error with code, path and position.
pub(crate) fn parse_error<'s>(src: &'s str, e: &toml::de::Error) -> Errors<'s> {
    let message = e.message().trim().replace('\n', "; ");
    let code = classify(&message);
    let span = e.span().unwrap_or(0..0);
    let path = if code == "profile.syntax" {
        String::new()
    } else {
        locate(src, span.start)
    };
    let mut errors = Errors::new(src);
    if e.span().is_some() {
        errors.push(code, path, span, message);
    } else {
        errors.push_unplaced(code, path, message);
    }
    errors
}

/// The code of a `toml`/serde message. serde's own messages have fixed
/// prefixes; anything else comes from the TOML parser.
fn classify(message: &str) -> &'static str {
    const TYPE_PREFIXES: [&str; 5] = [
        "invalid type",
        "invalid value",
        "invalid length",
        "unknown variant",
        "missing field",
    ];
    if message.starts_with("unknown field") {
        "profile.unknown_key"
    } else if TYPE_PREFIXES.iter().any(|p| message.starts_with(p)) {
        "profile.type"
    } else {
        "profile.syntax"
    }
}

/// The key path of the key or array element at byte `offset`; empty when the
/// text does not parse as a TOML document.
fn locate(src: &str, offset: usize) -> String {
    let Ok(root) = toml::from_str::<Node>(src) else {
        return String::new();
    };
    let mut marks = Vec::new();
    root.marks("", &mut marks);
    let mut best: Option<(usize, String)> = None;
    for (start, path) in marks {
        // Later marks at the same start are deeper: prefer them.
        if start <= offset && best.as_ref().is_none_or(|(b, _)| start >= *b) {
            best = Some((start, path));
        }
    }
    best.map(|(_, p)| p).unwrap_or_default()
}

/// The shape of a TOML document: where keys and array elements start.
#[derive(Debug)]
enum Node {
    Table(Vec<(Spanned<String>, Node)>),
    Array(Vec<Spanned<Node>>),
    Scalar,
}

impl Node {
    /// Appends (start offset, key path) for every key and element under `self`.
    fn marks(&self, path: &str, out: &mut Vec<(usize, String)>) {
        match self {
            Node::Table(entries) => {
                for (key, value) in entries {
                    let p = key_path(path, key.get_ref());
                    out.push((key.span().start, p.clone()));
                    value.marks(&p, out);
                }
            }
            Node::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    let p = format!("{path}[{i}]");
                    out.push((item.span().start, p.clone()));
                    item.get_ref().marks(&p, out);
                }
            }
            Node::Scalar => {}
        }
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Node;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any TOML value")
            }
            fn visit_bool<E>(self, _: bool) -> Result<Node, E> {
                Ok(Node::Scalar)
            }
            fn visit_i64<E>(self, _: i64) -> Result<Node, E> {
                Ok(Node::Scalar)
            }
            fn visit_u64<E>(self, _: u64) -> Result<Node, E> {
                Ok(Node::Scalar)
            }
            fn visit_f64<E>(self, _: f64) -> Result<Node, E> {
                Ok(Node::Scalar)
            }
            fn visit_str<E>(self, _: &str) -> Result<Node, E> {
                Ok(Node::Scalar)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(Node::Array(items))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
                // A date-time arrives as a map with a private key and makes
                // this fail; the error then simply has no path.
                let mut entries = Vec::new();
                while let Some(key) = map.next_key::<Spanned<String>>()? {
                    entries.push((key, map.next_value()?));
                }
                Ok(Node::Table(entries))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_map_to_codes() {
        assert_eq!(
            classify("unknown field `x`, expected `y`"),
            "profile.unknown_key"
        );
        assert_eq!(
            classify("invalid type: string \"x\", expected i64"),
            "profile.type"
        );
        assert_eq!(
            classify("invalid table header; expected `.`, `]`"),
            "profile.syntax"
        );
        assert_eq!(
            classify("duplicate key `a` in document root"),
            "profile.syntax"
        );
    }

    #[test]
    fn locate_finds_the_deepest_key_or_element_before_the_offset() {
        let src = "[server]\nshards = 1\n\n[[host]]\nnames = [\"a\", 3]\nheaders.X-A = 1\n";
        assert_eq!(locate(src, src.find("shards").unwrap()), "server.shards");
        assert_eq!(locate(src, src.find("1\n").unwrap()), "server.shards");
        assert_eq!(locate(src, src.find("3]").unwrap()), "host[0].names[1]");
        assert_eq!(
            locate(src, src.rfind("1\n").unwrap()),
            "host[0].headers.X-A"
        );
    }

    #[test]
    fn locate_gives_no_path_for_broken_text() {
        assert_eq!(locate("[server\n", 3), "");
    }
}
