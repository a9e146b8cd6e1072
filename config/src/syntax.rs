//! Errors `toml` and serde report while reading the raw profile.
//!
//! serde stops at the first problem, so syntax errors, unknown keys and
//! wrong types come one at a time. `toml` gives the byte span of the
//! offending key or value but not its key path, so the path is found by
//! reading the text a second time into a shape-only tree ([`Node`]) that
//! records where every key and array element starts: the error belongs to
//! the key or element that starts last at or before the error's offset.
//! When the text is not valid TOML there is no tree and the path is empty.
//!
//! [`read_all`] reports every unknown key and wrong type of a file in one
//! run: after each one it blanks the offending entry (its bytes become
//! spaces, its line breaks stay, so every other position is unchanged) and
//! reads again, until the text reads or an error cannot be stepped over.

use crate::error::{key_path, Errors};
use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use std::fmt;

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

/// The most unknown keys and wrong types one read reports (each costs a
/// read of the whole text).
const MAX_READ_ERRORS: usize = 64;

/// What [`read_all`] read: the profile (from the text with the offending
/// entries blanked), the errors that stepped over, and the key paths of the
/// entries blanked (a semantic error under one of them is their consequence).
pub(crate) struct ReadAll<T> {
    pub value: T,
    pub errors: Vec<crate::error::ProfileError>,
    pub blanked: Vec<String>,
}

/// Reads `src` as `T`, stepping over unknown keys and wrong types: each is
/// reported, its entry blanked, and the text read again. A syntax error, a
/// missing field, an error without a place, or text that no longer reads
/// once an entry is blanked ends the reading with every error found so far
/// (`Err`). At most [`MAX_READ_ERRORS`] are stepped over. O(errors × text).
pub(crate) fn read_all<T: serde::de::DeserializeOwned>(
    src: &str,
) -> Result<ReadAll<T>, Vec<crate::error::ProfileError>> {
    let mut text = src.to_owned();
    let mut errors = Errors::new(src);
    let mut blanked: Vec<String> = Vec::new();
    loop {
        let e = match toml::from_str::<T>(&text) {
            Ok(value) => {
                return Ok(ReadAll {
                    value,
                    errors: errors.into_sorted(),
                    blanked,
                })
            }
            Err(e) => e,
        };
        let message = e.message().trim().replace('\n', "; ");
        let code = classify(&message);
        let steppable = code != "profile.syntax"
            && !message.starts_with("missing field")
            && blanked.len() < MAX_READ_ERRORS;
        let entry = e
            .span()
            .filter(|_| steppable)
            .and_then(|span| entry_at(&text, span.start));
        let Some((path, range)) = entry else {
            // A missing field that an earlier blanking caused is not news.
            let consequence = message
                .strip_prefix("missing field `")
                .and_then(|m| m.split('`').next())
                .is_some_and(|field| blanked.iter().any(|b| b.rsplit('.').next() == Some(field)));
            if !consequence {
                for err in parse_error(&text, &e).into_sorted() {
                    errors.push_error(err);
                }
            }
            return Err(errors.into_sorted());
        };
        let span = e.span().unwrap_or(0..0);
        errors.push(code, path.clone(), span, message);
        blank(&mut text, range);
        if toml::from_str::<Node>(&text).is_err() {
            // The blanking broke the text: what follows would be its error.
            return Err(errors.into_sorted());
        }
        blanked.push(path);
    }
}

/// Replaces the bytes of `range` with spaces, keeping line breaks (and so
/// every byte offset and line of the text).
fn blank(text: &mut String, range: std::ops::Range<usize>) {
    let blanked: String = text[range.clone()]
        .chars()
        .flat_map(|c| {
            let keep = if c == '\n' { '\n' } else { ' ' };
            std::iter::repeat_n(keep, if c == '\n' { 1 } else { c.len_utf8() })
        })
        .collect();
    text.replace_range(range, &blanked);
}

/// Whether a blanked entry explains a semantic error at `path`: the error
/// is at the entry or inside it, or at the array that lost the element
/// (`servers` is empty once `servers[0]` is blanked).
pub(crate) fn explains(blanked: &str, path: &str) -> bool {
    is_under(path, blanked)
        || blanked
            .strip_suffix(']')
            .and_then(|b| b.rsplit_once('['))
            .is_some_and(|(array, _)| array == path)
}

/// Whether `path` is `under` or inside it (`a.b` is under `a`, `a[1]` too).
pub(crate) fn is_under(path: &str, under: &str) -> bool {
    path.strip_prefix(under)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('.') || rest.starts_with('['))
}

/// The key path and byte range (key through value) of the entry holding
/// byte `offset`: the key or element that starts last at or before it.
fn entry_at(src: &str, offset: usize) -> Option<(String, std::ops::Range<usize>)> {
    let root = toml::from_str::<Node>(src).ok()?;
    let mut marks = Vec::new();
    root.entries("", &mut marks);
    let mut best: Option<(String, std::ops::Range<usize>)> = None;
    for (path, range) in marks {
        if range.start <= offset && best.as_ref().is_none_or(|(_, b)| range.start >= b.start) {
            best = Some((path, range));
        }
    }
    // A range that does not hold the offset would blank the wrong text.
    best.filter(|(_, r)| r.end > offset && r.end <= src.len())
        .map(|(p, r)| (p, with_comma(src, dotted_start(src, r.start)..r.end)))
}

/// An entry of an inline table or array with its comma: the one after it,
/// or for the last entry the one before (`{ a = 1, }` is not TOML).
fn with_comma(src: &str, r: std::ops::Range<usize>) -> std::ops::Range<usize> {
    let blank = |b: &u8| matches!(b, b' ' | b'\t');
    let bytes = src.as_bytes();
    let after = bytes[r.end..].iter().take_while(|b| blank(b)).count();
    if bytes.get(r.end + after) == Some(&b',') {
        return r.start..r.end + after + 1;
    }
    let before = bytes[..r.start]
        .iter()
        .rev()
        .take_while(|b| blank(b))
        .count();
    if r.start > before && bytes[r.start - before - 1] == b',' {
        return r.start - before - 1..r.end;
    }
    r
}

/// The start of the whole key whose last part starts at `start`: the inner
/// parts of a dotted key (`a.b = 1`) are placed at their own start, and
/// blanking from there would leave `a.` behind. Steps back over key
/// characters, dots and blanks on the same line.
fn dotted_start(src: &str, start: usize) -> usize {
    // A table's header (`[a.b]`): the whole header goes.
    let line = src[..start].rfind('\n').map_or(0, |i| i + 1);
    if src[line..start].trim_start().starts_with('[') {
        return line;
    }
    let before = &src.as_bytes()[..start];
    let back = before
        .iter()
        .rev()
        .take_while(|&&b| {
            b.is_ascii_alphanumeric()
                || matches!(b, b'_' | b'-' | b'.' | b'"' | b'\'' | b' ' | b'\t')
        })
        .count();
    start - back
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

/// The shape of a TOML document: where keys and array elements start and
/// where their values end.
#[derive(Debug)]
enum Node {
    Table(Vec<(Key, Placed)>),
    Array(Vec<Placed>),
    Scalar,
}

/// A value and, where `toml` gives one, its byte range (a table made by a
/// dotted key has none).
#[derive(Debug)]
struct Placed {
    node: Node,
    span: Option<std::ops::Range<usize>>,
}

impl Placed {
    /// Where the value ends: its own end, or for a table made by a dotted
    /// key, its last entry's.
    fn end(&self) -> Option<usize> {
        if let Some(span) = &self.span {
            return Some(span.end);
        }
        match &self.node {
            Node::Table(entries) => entries.iter().filter_map(|(_, v)| v.end()).max(),
            Node::Array(items) => items.iter().filter_map(Placed::end).max(),
            Node::Scalar => None,
        }
    }
}

/// A table's key and, where `toml` gives one, where it starts (the inner
/// keys of a dotted key such as `a.b = 1` come without one).
#[derive(Debug)]
struct Key {
    name: String,
    start: Option<usize>,
}

impl Node {
    /// Appends (key path, key start through value end) for every key and
    /// element under `self` that has a place.
    fn entries(&self, path: &str, out: &mut Vec<(String, std::ops::Range<usize>)>) {
        self.walk(path, &mut |p, start, value| {
            if let (Some(start), Some(end)) = (start, value.end()) {
                out.push((p.to_owned(), start..end));
            }
        });
    }

    /// Appends (start offset, key path) for every key and element under `self`.
    fn marks(&self, path: &str, out: &mut Vec<(usize, String)>) {
        self.walk(path, &mut |p, start, _| {
            if let Some(start) = start {
                out.push((start, p.to_owned()));
            }
        });
    }

    /// Calls `f(path, start, value)` for every key and element, parents
    /// first; `start` is the key's (or the value's) start when known.
    fn walk(&self, path: &str, f: &mut dyn FnMut(&str, Option<usize>, &Placed)) {
        let mut visit = |p: String, start: Option<usize>, value: &Placed| {
            let start = start.or(value.span.as_ref().map(|s| s.start));
            f(&p, start, value);
            value.node.walk(&p, f);
        };
        match self {
            Node::Table(entries) => {
                for (key, value) in entries {
                    visit(key_path(path, &key.name), key.start, value);
                }
            }
            Node::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    visit(format!("{path}[{i}]"), None, item);
                }
            }
            Node::Scalar => {}
        }
    }
}

/// The names under which `toml` hands out a place (serde_spanned's
/// protocol, which [`Spanned`] uses too).
const SPANNED: &str = "$__serde_spanned_private_Spanned";
const SPANNED_FIELDS: [&str; 3] = [
    "$__serde_spanned_private_start",
    "$__serde_spanned_private_end",
    "$__serde_spanned_private_value",
];

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_str<E>(self, s: &str) -> Result<Key, E> {
                Ok(Key {
                    name: s.to_owned(),
                    start: None,
                })
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Key, A::Error> {
                let (mut name, mut start) = (None, None);
                while let Some(field) = map.next_key::<String>()? {
                    if field == SPANNED_FIELDS[0] {
                        start = Some(map.next_value::<usize>()?);
                    } else if field == SPANNED_FIELDS[2] {
                        name = Some(map.next_value::<Key>()?.name);
                    } else {
                        map.next_value::<serde::de::IgnoredAny>()?;
                    }
                }
                let name = name.ok_or_else(|| serde::de::Error::missing_field("value"))?;
                Ok(Key { name, start })
            }
        }
        d.deserialize_struct(SPANNED, &SPANNED_FIELDS, V)
    }
}

/// Reads any value as a [`Node`]; asked for a place, a table that has none
/// arrives as its plain map, told apart by its first key.
struct NodeVisitor {
    placed: bool,
}

impl NodeVisitor {
    fn done<E>(&self, node: Node) -> Result<Placed, E> {
        Ok(Placed { node, span: None })
    }
}

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Placed;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any TOML value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<Placed, E> {
        self.done(Node::Scalar)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Placed, E> {
        self.done(Node::Scalar)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Placed, E> {
        self.done(Node::Scalar)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Placed, E> {
        self.done(Node::Scalar)
    }
    fn visit_str<E>(self, _: &str) -> Result<Placed, E> {
        self.done(Node::Scalar)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Placed, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Placed>()? {
            items.push(item);
        }
        self.done(Node::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Placed, A::Error> {
        // A date-time arrives as a map with a private key and makes this
        // fail; the error then simply has no path.
        let mut entries = Vec::new();
        while let Some(key) = map.next_key::<Key>()? {
            if self.placed && entries.is_empty() && key.name == SPANNED_FIELDS[0] {
                return placed_value(map.next_value::<usize>()?, &mut map);
            }
            entries.push((key, map.next_value::<Placed>()?));
        }
        self.done(Node::Table(entries))
    }
}

/// The rest of a placed value once its start is read: its end and the value.
fn placed_value<'de, A: MapAccess<'de>>(start: usize, map: &mut A) -> Result<Placed, A::Error> {
    let (mut end, mut node) = (start, None);
    while let Some(field) = map.next_key::<String>()? {
        if field == SPANNED_FIELDS[1] {
            end = map.next_value::<usize>()?;
        } else if field == SPANNED_FIELDS[2] {
            node = Some(map.next_value::<Node>()?);
        } else {
            map.next_value::<serde::de::IgnoredAny>()?;
        }
    }
    let node = node.ok_or_else(|| serde::de::Error::missing_field("value"))?;
    Ok(Placed {
        node,
        span: Some(start..end),
    })
}

impl<'de> Deserialize<'de> for Placed {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_struct(SPANNED, &SPANNED_FIELDS, NodeVisitor { placed: true })
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(d.deserialize_any(NodeVisitor { placed: false })?.node)
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

    #[test]
    fn dotted_keys_are_located_at_their_value() {
        let src = "[[host]]\nnames = [\"b\"]\nx.y = 2\n";
        assert_eq!(locate(src, src.find('2').unwrap()), "host[0].x.y");
        assert_eq!(
            entry_at(src, src.find('2').unwrap()),
            Some((
                "host[0].x.y".to_string(),
                src.find('x').unwrap()..src.find('2').unwrap() + 1
            ))
        );
    }

    #[test]
    fn blanking_keeps_offsets_and_line_breaks() {
        let mut t = String::from("a = \"é\"\nb = [1,\n 2]\nc = 3\n");
        let start = t.find('b').unwrap();
        let end = t.find(']').unwrap() + 1;
        blank(&mut t, start..end);
        assert_eq!(t.len(), "a = \"é\"\nb = [1,\n 2]\nc = 3\n".len());
        assert_eq!(t.lines().count(), 4);
        assert_eq!(t.find('c'), Some(end + 1));
    }

    #[test]
    fn paths_under_a_blanked_entry() {
        assert!(is_under("host[0].limits", "host[0].limits"));
        assert!(is_under("host[0].limits.x", "host[0].limits"));
        assert!(is_under("host[0].names[1]", "host[0].names"));
        assert!(!is_under("host[0].limitsx", "host[0].limits"));
        assert!(!is_under("host[1].limits", "host[0].limits"));
        assert!(explains("upstream[0].servers[0]", "upstream[0].servers"));
        assert!(explains("host[0].limits", "host[0].limits.x"));
        assert!(!explains("host[0].limits", "host[0]"));
    }
}
