//! The `name` of a named block (`[[access_list]]`, `[[rule_set]]`,
//! `[[rate_limit]]`, `[[upstream]]`): present, `[a-z0-9_-]{1,64}`, and not
//! the name of an earlier block of the same kind. One check for all four,
//! with each kind's codes and messages. Also the name rule itself, which
//! operations and bundles share ([`valid_policy_name`]), and the list of
//! known names a message gives when a reference names no block
//! ([`known_list`]).

use crate::error::Errors;
use crate::values::Opt;
use std::collections::HashMap;
use std::ops::Range;
use toml::Spanned;

/// A kind of named block, for codes and messages.
pub(crate) struct BlockKind {
    /// The profile key: `access_list`.
    pub key: &'static str,
    /// In messages: `access list`.
    pub noun: &'static str,
    /// The codes of a missing, an invalid and a duplicate name.
    pub codes: [&'static str; 3],
    /// The message when the name is missing.
    pub required: &'static str,
}

impl BlockKind {
    /// The block's name when it is present, valid and not taken. `first`
    /// gives the index of an earlier block with that name.
    pub fn check<'n>(
        &self,
        name: &'n Opt<String>,
        base: &str,
        span: Range<usize>,
        first: impl Fn(&str) -> Option<usize>,
        e: &mut Errors<'_>,
    ) -> Option<&'n Spanned<String>> {
        let [required, invalid, duplicate] = self.codes;
        let path = format!("{base}.name");
        let Some(n) = name else {
            e.push(required, path, span, self.required);
            return None;
        };
        let v = n.get_ref();
        let (code, message) = if !valid_policy_name(v) {
            let article = if self.noun.starts_with(['a', 'e', 'i', 'o', 'u']) {
                "an"
            } else {
                "a"
            };
            (
                invalid,
                format!(
                    "{v:?} is not {article} {} name: use 1 to 64 of a-z, 0-9, '_' and '-'",
                    self.noun
                ),
            )
        } else if let Some(i) = first(v) {
            (
                duplicate,
                format!("{v:?} is already the name of {}[{i}]", self.key),
            )
        } else {
            return Some(n);
        };
        e.push(code, path, n.span(), message);
        None
    }
}

/// `[a-z0-9_-]{1,64}`: the names of operations and rate limits.
pub(crate) fn valid_policy_name(v: &str) -> bool {
    (1..=64).contains(&v.len())
        && v.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

/// `known: a, b` or `the profile has no [[rate_limit]]`, for messages.
pub(crate) fn known_list<T>(names: &HashMap<String, T>, table: &str) -> String {
    let mut known: Vec<&str> = names.keys().map(String::as_str).collect();
    known.sort_unstable();
    if known.is_empty() {
        format!("the profile has no [[{table}]]")
    } else {
        format!("known: {}", known.join(", "))
    }
}
