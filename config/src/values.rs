//! The value shapes every raw table is made of (a spanned scalar that may
//! be absent, a spanned list of strings, an integer or a string) and the
//! leaf checks every block uses on them: one of a fixed set of words, an
//! integer in a range, a byte size in a range. Each check records its error
//! with the code, key path and position it is given, and answers a
//! placeholder so the caller goes on. Depends on nothing but the error
//! collector and byte sizes.

use crate::error::Errors;
use crate::size::{format_size, parse_size, SizeError};
use serde::de::{self, Deserialize, Deserializer, Visitor};
use std::fmt;
use toml::Spanned;

/// A spanned scalar that may be absent.
pub(crate) type Opt<T> = Option<Spanned<T>>;

/// A spanned array of spanned strings.
pub(crate) type StrList = Spanned<Vec<Spanned<String>>>;

/// An integer or a string: `shards = "auto" | 4`, `max_body_bytes = "10 MiB" | 1500`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum IntOrString {
    Int(i64),
    Str(String),
}

impl<'de> Deserialize<'de> for IntOrString {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = IntOrString;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an integer or a string")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<IntOrString, E> {
                Ok(IntOrString::Int(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<IntOrString, E> {
                // TOML integers are i64; saturate so a range check still fires.
                Ok(IntOrString::Int(i64::try_from(v).unwrap_or(i64::MAX)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<IntOrString, E> {
                Ok(IntOrString::Str(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

/// One of a fixed set of words.
pub(crate) fn choice<T: Copy>(
    e: &mut Errors<'_>,
    v: &Opt<String>,
    path: &str,
    code: &'static str,
    options: &[(&str, T)],
    default: T,
) -> T {
    let Some(v) = v else {
        return default;
    };
    if let Some(&(_, t)) = options.iter().find(|(name, _)| name == v.get_ref()) {
        return t;
    }
    let names: Vec<String> = options.iter().map(|(n, _)| format!("{n:?}")).collect();
    e.push(
        code,
        path,
        v.span(),
        format!("must be one of {}, got {:?}", names.join(", "), v.get_ref()),
    );
    default
}

/// An integer within `lo..=hi`; `None` when absent or refused.
pub(crate) fn int_in(
    e: &mut Errors<'_>,
    v: &Opt<i64>,
    path: &str,
    code: &'static str,
    (lo, hi): (i64, i64),
) -> Option<i64> {
    let v = v.as_ref()?;
    let n = *v.get_ref();
    if (lo..=hi).contains(&n) {
        return Some(n);
    }
    let message = if hi == i64::MAX {
        format!("must be at least {lo}, got {n}")
    } else {
        format!("must be between {lo} and {hi}, got {n}")
    };
    e.push(code, path, v.span(), message);
    None
}

/// A byte size within `lo..=hi` (or 0 when `zero_is_none`); `None` when
/// absent or refused.
pub(crate) fn size_in(
    e: &mut Errors<'_>,
    v: &Opt<IntOrString>,
    path: &str,
    (range_code, invalid_code): (&'static str, &'static str),
    (lo, hi): (u64, u64),
    zero_is_none: bool,
) -> Option<u64> {
    let v = v.as_ref()?;
    let bounds = if zero_is_none {
        format!(
            "0 (no limit) or between {} and {}",
            format_size(lo),
            format_size(hi)
        )
    } else {
        format!("between {} and {}", format_size(lo), format_size(hi))
    };
    let n = match v.get_ref() {
        IntOrString::Int(n) => match u64::try_from(*n) {
            Ok(n) => n,
            Err(_) => {
                e.push(
                    range_code,
                    path,
                    v.span(),
                    format!("must be {bounds}, got {n}"),
                );
                return None;
            }
        },
        IntOrString::Str(s) => match parse_size(s) {
            Ok(n) => n,
            Err(SizeError::Invalid) => {
                e.push(
                    invalid_code,
                    path,
                    v.span(),
                    format!(
                        "{s:?} is not a size: use a number of bytes, optionally with a unit \
                         (B, KiB, MiB, GiB, TiB), such as \"10 MiB\""
                    ),
                );
                return None;
            }
            Err(SizeError::Overflow) => {
                e.push(
                    range_code,
                    path,
                    v.span(),
                    format!("must be {bounds}, got {s:?}"),
                );
                return None;
            }
        },
    };
    if (zero_is_none && n == 0) || (lo..=hi).contains(&n) {
        return Some(n);
    }
    e.push(
        range_code,
        path,
        v.span(),
        format!("must be {bounds}, got {}", format_size(n)),
    );
    None
}

/// A checked non-negative integer as `u64`.
pub(crate) fn as_u64(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}
