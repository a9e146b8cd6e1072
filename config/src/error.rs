//! Profile errors and source positions.
//!
//! Every error a profile can produce is a [`ProfileError`]: a stable code
//! (part of the interface, listed in docs/profile.md), the TOML key path of
//! the offending value, and its 1-based line and column. Columns count
//! characters, not bytes, so an editor lands on the right spot after
//! multi-byte text. Positions come from byte offsets that `toml` reports;
//! [`Positions`] turns them into lines and columns in O(log lines + line).

use std::fmt;
use std::ops::Range;

/// One problem in a profile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProfileError {
    /// Stable code, such as `server.listen.invalid`.
    pub code: &'static str,
    /// TOML key path, such as `host[2].names[0]`; empty when the text could
    /// not be parsed far enough to name a key.
    pub path: String,
    /// 1-based line; 0 when the error has no position (the file could not be read).
    pub line: u32,
    /// 1-based column in characters; 0 when the error has no position.
    pub column: u32,
    pub message: String,
}

impl fmt::Display for ProfileError {
    /// `LINE:COL: error[CODE] PATH: MESSAGE`, or without `PATH: ` when the path is empty.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: error[{}] ", self.line, self.column, self.code)?;
        if !self.path.is_empty() {
            write!(f, "{}: ", self.path)?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for ProfileError {}

impl ProfileError {
    /// Displays as a warning: `LINE:COL: warning[CODE] PATH: MESSAGE`.
    pub fn as_warning(&self) -> AsWarning<'_> {
        AsWarning(self)
    }
}

/// A [`ProfileError`] that does not stop the profile, displayed as a warning.
pub struct AsWarning<'a>(&'a ProfileError);

impl fmt::Display for AsWarning<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let e = self.0;
        write!(f, "{}:{}: warning[{}] ", e.line, e.column, e.code)?;
        if !e.path.is_empty() {
            write!(f, "{}: ", e.path)?;
        }
        f.write_str(&e.message)
    }
}

/// Line starts of a source text, for turning byte offsets into positions.
pub(crate) struct Positions<'s> {
    src: &'s str,
    line_starts: Vec<usize>,
}

impl<'s> Positions<'s> {
    /// Indexes `src`. O(len), allocates one offset per line.
    pub(crate) fn new(src: &'s str) -> Positions<'s> {
        let mut line_starts = vec![0];
        line_starts.extend(src.match_indices('\n').map(|(i, _)| i + 1));
        Positions { src, line_starts }
    }

    /// 1-based (line, column in characters) of byte `offset`. An offset past
    /// the end or inside a character is clamped to the nearest boundary before it.
    pub(crate) fn line_column(&self, offset: usize) -> (u32, u32) {
        let mut offset = offset.min(self.src.len());
        while !self.src.is_char_boundary(offset) {
            offset -= 1;
        }
        let line = self.line_starts.partition_point(|&s| s <= offset) - 1;
        let column = self.src[self.line_starts[line]..offset].chars().count();
        (sat_u32(line + 1), sat_u32(column + 1))
    }
}

fn sat_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Collects errors while a profile is checked; every check goes on after an
/// error so that one run reports them all. Warnings (the profile still
/// loads) are collected beside them.
pub(crate) struct Errors<'s> {
    positions: Positions<'s>,
    list: Vec<ProfileError>,
    warnings: Vec<ProfileError>,
}

impl<'s> Errors<'s> {
    pub(crate) fn new(src: &'s str) -> Errors<'s> {
        Errors {
            positions: Positions::new(src),
            list: Vec::new(),
            warnings: Vec::new(),
        }
    }

    /// Records a warning at the start of byte range `span`.
    pub(crate) fn warn(
        &mut self,
        code: &'static str,
        path: impl Into<String>,
        span: Range<usize>,
        message: impl Into<String>,
    ) {
        let e = self.placed(code, path.into(), span, message.into());
        self.warnings.push(e);
    }

    /// How many errors were recorded so far (a check compares before and
    /// after its own).
    pub(crate) fn error_count(&self) -> usize {
        self.list.len()
    }

    /// The warnings in source order.
    pub(crate) fn take_warnings(&mut self) -> Vec<ProfileError> {
        let mut w = std::mem::take(&mut self.warnings);
        w.sort_by_key(|e| (e.line, e.column));
        w
    }

    /// Records an error at the start of byte range `span`.
    pub(crate) fn push(
        &mut self,
        code: &'static str,
        path: impl Into<String>,
        span: Range<usize>,
        message: impl Into<String>,
    ) {
        let e = self.placed(code, path.into(), span, message.into());
        self.list.push(e);
    }

    /// An error or warning at the start of byte range `span`.
    fn placed(
        &self,
        code: &'static str,
        path: String,
        span: Range<usize>,
        message: String,
    ) -> ProfileError {
        let (line, column) = self.positions.line_column(span.start);
        ProfileError {
            code,
            path,
            line,
            column,
            message,
        }
    }

    /// Records an error already placed.
    pub(crate) fn push_error(&mut self, e: ProfileError) {
        self.list.push(e);
    }

    /// Records an error that has no position (line and column 0).
    pub(crate) fn push_unplaced(
        &mut self,
        code: &'static str,
        path: impl Into<String>,
        message: impl Into<String>,
    ) {
        self.list.push(ProfileError {
            code,
            path: path.into(),
            line: 0,
            column: 0,
            message: message.into(),
        });
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The errors in source order (stable for errors at the same position).
    pub(crate) fn into_sorted(mut self) -> Vec<ProfileError> {
        self.list.sort_by_key(|e| (e.line, e.column));
        self.list
    }
}

/// Appends `key` to a TOML key path, quoting it when it is not a bare key.
pub(crate) fn key_path(parent: &str, key: &str) -> String {
    let bare = !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    let key = if bare {
        key.to_string()
    } else {
        let mut quoted = String::from("\"");
        for c in key.chars() {
            match c {
                '"' => quoted.push_str("\\\""),
                '\\' => quoted.push_str("\\\\"),
                c if c.is_control() => quoted.push_str(&format!("\\u{:04X}", c as u32)),
                c => quoted.push(c),
            }
        }
        quoted.push('"');
        quoted
    };
    if parent.is_empty() {
        key
    } else {
        format!("{parent}.{key}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_count_lines_and_characters_from_one() {
        let p = Positions::new("ab\ncdé☕x\n\nz");
        assert_eq!(p.line_column(0), (1, 1));
        assert_eq!(p.line_column(2), (1, 3));
        assert_eq!(p.line_column(3), (2, 1));
        // "cd" (2 bytes) + "é" (2 bytes) + "☕" (3 bytes): 'x' is byte 10, character 5.
        assert_eq!(p.line_column(10), (2, 5));
        assert_eq!(p.line_column(12), (3, 1));
        assert_eq!(p.line_column(13), (4, 1));
        assert_eq!(p.line_column(999), (4, 2));
    }

    #[test]
    fn offset_inside_a_character_lands_on_its_start() {
        let p = Positions::new("é");
        assert_eq!(p.line_column(1), (1, 1));
    }

    #[test]
    fn display_has_position_code_path_and_message() {
        let e = ProfileError {
            code: "server.listen.invalid",
            path: "server.listen[1]".into(),
            line: 4,
            column: 22,
            message: "bad".into(),
        };
        assert_eq!(
            e.to_string(),
            "4:22: error[server.listen.invalid] server.listen[1]: bad"
        );
        let e = ProfileError {
            path: String::new(),
            code: "profile.syntax",
            ..e
        };
        assert_eq!(e.to_string(), "4:22: error[profile.syntax] bad");
    }

    #[test]
    fn key_paths_quote_keys_that_are_not_bare() {
        assert_eq!(key_path("", "server"), "server");
        assert_eq!(
            key_path("host[0].headers", "X-Frame-Options"),
            "host[0].headers.X-Frame-Options"
        );
        assert_eq!(key_path("h", "a b"), "h.\"a b\"");
        assert_eq!(key_path("h", "a\"b"), "h.\"a\\\"b\"");
        assert_eq!(key_path("h", ""), "h.\"\"");
    }
}

/// Where the value of `key` lies in `src` (1-based line and column), for
/// a problem found after the profile compiled (a file it names that the
/// runtime cannot use): `key` in the `occurrence`-th table named `table`
/// (`"server"`, `"fleet"`, `"udp"`; 0 for the first), written as
/// `key = ...` on a line of its own. `None` when it is not written that
/// way (a dotted key elsewhere): the error then has no position.
pub fn locate(src: &str, table: &str, occurrence: usize, key: &str) -> Option<(u32, u32)> {
    let positions = Positions::new(src);
    let mut seen: Option<usize> = None;
    let mut in_table = false;
    let mut offset = 0;
    for line in src.split_inclusive('\n') {
        let start = offset;
        offset += line.len();
        let t = line.trim();
        if t.starts_with('[') {
            let name = t
                .trim_start_matches('[')
                .split(']')
                .next()
                .unwrap_or("")
                .trim();
            in_table = name == table;
            if in_table {
                seen = Some(seen.map_or(0, |n| n + 1));
            }
            continue;
        }
        if !in_table || seen != Some(occurrence) {
            continue;
        }
        let Some(rest) = t.strip_prefix(key) else {
            continue;
        };
        let Some(value) = rest.trim_start().strip_prefix('=') else {
            continue;
        };
        let value_at =
            start + line.len() - line.trim_start().len() + (t.len() - value.trim_start().len());
        return Some(positions.line_column(value_at));
    }
    None
}

#[cfg(test)]
mod locate_tests {
    use super::locate;

    #[test]
    fn a_keys_value_is_found_in_its_table() {
        let src = "[server]\nlisten = [\"x\"]\n  pow_key_file = \"k\"\n\n[[udp]]\nname = \"a\"\n[[udp]]\nname = \"b\"\nauth = { keys = [\"f\"] }\n";
        assert_eq!(locate(src, "server", 0, "pow_key_file"), Some((3, 18)));
        assert_eq!(locate(src, "udp", 1, "auth"), Some((9, 8)));
        assert_eq!(locate(src, "udp", 0, "auth"), None);
        assert_eq!(locate(src, "fleet", 0, "password_file"), None);
        // A key that only starts the same is not the key.
        assert_eq!(locate(src, "server", 0, "pow_key"), None);
    }
}
