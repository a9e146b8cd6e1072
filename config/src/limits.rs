//! Semantic checks of a request-limits layer (`[defaults.limits]`, a
//! host's or a bundle's `limits`) and of a route's body limit.

use crate::error::Errors;
use crate::layer::LimitsLayer;
use crate::rawblocks::RawLimits;
use crate::values::{as_u64, int_in, size_in, IntOrString, Opt};

/// Checks one limits layer (`[defaults.limits]` or a host's `limits`).
pub(crate) fn check_limits(l: &RawLimits, prefix: &str, e: &mut Errors<'_>) -> LimitsLayer {
    use gapura_gate::limits::{HEADER_BYTES_BOUNDS, HEADER_COUNT_BOUNDS, URL_BYTES_BOUNDS};
    let narrow = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
    LimitsLayer {
        max_body_bytes: check_body_limit(&l.max_body_bytes, &format!("{prefix}.max_body_bytes"), e),
        max_header_count: int_in(
            e,
            &l.max_header_count,
            &format!("{prefix}.max_header_count"),
            "limits.max_header_count.range",
            (
                i64::from(HEADER_COUNT_BOUNDS.0),
                i64::from(HEADER_COUNT_BOUNDS.1),
            ),
        )
        .map(|n| narrow(as_u64(n))),
        max_header_bytes: size_in(
            e,
            &l.max_header_bytes,
            &format!("{prefix}.max_header_bytes"),
            (
                "limits.max_header_bytes.range",
                "limits.max_header_bytes.invalid",
            ),
            (
                u64::from(HEADER_BYTES_BOUNDS.0),
                u64::from(HEADER_BYTES_BOUNDS.1),
            ),
            false,
        )
        .map(narrow),
        max_url_bytes: size_in(
            e,
            &l.max_url_bytes,
            &format!("{prefix}.max_url_bytes"),
            ("limits.max_url_bytes.range", "limits.max_url_bytes.invalid"),
            (u64::from(URL_BYTES_BOUNDS.0), u64::from(URL_BYTES_BOUNDS.1)),
            false,
        )
        .map(narrow),
    }
}

/// A `max_body_bytes` value of any layer; `None` when absent or refused.
pub(crate) fn check_body_limit(
    v: &Opt<IntOrString>,
    path: &str,
    e: &mut Errors<'_>,
) -> Option<u64> {
    size_in(
        e,
        v,
        path,
        (
            "limits.max_body_bytes.range",
            "limits.max_body_bytes.invalid",
        ),
        (1, gapura_gate::limits::MAX_BODY_BYTES_BOUND),
        true,
    )
}
