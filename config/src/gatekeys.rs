//! The gate keys of hosts and routes (`rate_limit`, `class`, `operation`),
//! checked; `pairs` makes the (rate limit, host) pairs they name.
//!
//! Layering is host → route: a route inherits its host's `rate_limit` and
//! `class` unless it sets its own (`rate_limit = false` turns the host's
//! limit off for that route).

use crate::error::Errors;
use crate::names::known_list;
use crate::rawgate::RawRateRef;
use crate::schema::{RawHost, RawRoute};
use crate::values::{choice, Opt};
use gapura_gate::quota::Class;
use std::collections::HashMap;
use std::ops::Range;

/// The names hosts and routes may refer to.
pub(crate) struct Known<'a> {
    /// Rate limit name → index.
    pub rate_limits: &'a HashMap<String, u32>,
    /// Operation name → id.
    pub operations: &'a HashMap<String, u16>,
}

/// A host's gate keys after their checks.
#[derive(Clone, Debug, Default)]
pub(crate) struct HostRefs {
    /// The limit's index and the span of the reference.
    pub rate_limit: Option<(u32, Range<usize>)>,
    /// The reference's key path when a lower layer (`[defaults]`, a
    /// bundle) wrote it; `None`: the host's own `rate_limit`.
    pub rate_limit_path: Option<String>,
    pub class: Option<Class>,
}

/// A route's `rate_limit`.
#[derive(Clone, Debug, Default)]
pub(crate) enum RouteRate {
    /// Not set: the host's.
    #[default]
    Inherit,
    /// `false`: none.
    Off,
    /// A limit's index and the span of the reference.
    Named(u32, Range<usize>),
}

/// A route's gate keys after their checks.
#[derive(Clone, Debug, Default)]
pub(crate) struct RouteRefs {
    pub rate_limit: RouteRate,
    pub class: Option<Class>,
    pub operation: Option<u16>,
}

pub(crate) fn class(
    e: &mut Errors<'_>,
    v: &Opt<String>,
    path: &str,
    code: &'static str,
) -> Option<Class> {
    v.as_ref()?;
    choice(
        e,
        v,
        path,
        code,
        &[
            ("normal", Some(Class::Normal)),
            ("critical", Some(Class::Critical)),
            ("health", Some(Class::Health)),
        ],
        None,
    )
}

/// A rate limit named at `path`; None (with an error) when unknown.
pub(crate) fn rate_limit(
    e: &mut Errors<'_>,
    name: &str,
    at: Range<usize>,
    path: String,
    code: &'static str,
    known: &Known<'_>,
) -> Option<(u32, Range<usize>)> {
    match known.rate_limits.get(name) {
        Some(&i) => Some((i, at)),
        None => {
            e.push(
                code,
                path,
                at,
                format!(
                    "no [[rate_limit]] is named {name:?} ({})",
                    known_list(known.rate_limits, "rate_limit")
                ),
            );
            None
        }
    }
}

/// Checks a host's `rate_limit` and `class`.
pub(crate) fn check_host_refs(
    h: &RawHost,
    base: &str,
    known: &Known<'_>,
    e: &mut Errors<'_>,
) -> HostRefs {
    let rate_limit = h.rate_limit.as_ref().and_then(|r| {
        rate_limit(
            e,
            r.get_ref(),
            r.span(),
            format!("{base}.rate_limit"),
            "host.rate_limit.unknown",
            known,
        )
    });
    HostRefs {
        rate_limit,
        rate_limit_path: None,
        class: class(e, &h.class, &format!("{base}.class"), "host.class.invalid"),
    }
}

/// Checks a route's `rate_limit`, `class` and `operation`.
pub(crate) fn check_route_refs(
    r: &RawRoute,
    base: &str,
    known: &Known<'_>,
    e: &mut Errors<'_>,
) -> RouteRefs {
    let path = format!("{base}.rate_limit");
    let rate_limit = match &r.rate_limit {
        None => RouteRate::Inherit,
        Some(v) => match v.get_ref() {
            RawRateRef::Flag(false) => RouteRate::Off,
            RawRateRef::Flag(true) => {
                e.push(
                    "route.rate_limit.invalid",
                    path,
                    v.span(),
                    "a route's rate_limit is the name of a [[rate_limit]], or false for none; \
                     leave it out to use the host's",
                );
                RouteRate::Inherit
            }
            RawRateRef::Name(n) => {
                match rate_limit(e, n, v.span(), path, "route.rate_limit.unknown", known) {
                    Some((i, at)) => RouteRate::Named(i, at),
                    None => RouteRate::Inherit,
                }
            }
        },
    };
    let operation = r.operation.as_ref().and_then(|o| {
        let id = known.operations.get(o.get_ref()).copied();
        if id.is_none() {
            e.push(
                "route.operation.unknown",
                format!("{base}.operation"),
                o.span(),
                format!(
                    "no [[quota.operation]] is named {:?} ({})",
                    o.get_ref(),
                    known_list(known.operations, "quota.operation")
                ),
            );
        }
        id
    });
    RouteRefs {
        rate_limit,
        class: class(e, &r.class, &format!("{base}.class"), "route.class.invalid"),
        operation,
    }
}
