//! Host-level settings as layers: `[defaults]`, a `[[bundle]]` and a
//! `[[host]]` each hold any of them, and a route holds its access list and
//! rule set. A layer's fields are all optional; `hostsettings` declares
//! them and how two layers stack (a field the upper layer leaves out is
//! inherited), so a host's settings are defaults → bundle → host, and a
//! route's blocks are that → route. This module holds what a layer reads
//! and the checks of its references (`extras` those of the host's own
//! answers).
//!
//! A reference to an access list or a rule set is a name, or `false` for
//! none; its mode (`access_list_mode`, `rule_set_mode`) is a field of its
//! own, so a layer may shadow whatever list a lower layer names.
//!
//! Values are checked in the layer that writes them, so a problem in
//! `[defaults]` or a bundle is reported once, at its own key, however many
//! hosts inherit it. Host-level layers share the `host.*` codes: the key
//! path tells which layer (`defaults.rule_set`, `bundle[1].rule_set`,
//! `host[0].rule_set`).

use crate::error::Errors;
use crate::gatekeys::{rate_limit, Known};
use crate::layer::Fields;
use crate::names::known_list;
use crate::rawblocks::{LayerKeys, RawBundle, RawLimits, RawNameRef};
use crate::ruleset::{RuleSets, SetTarget};
use crate::schema::{RawDefaults, RawHost, RawRoute};
use crate::values::{choice, Opt};
use gapura_gate::mode::Mode;
use std::collections::HashMap;
use std::ops::Range;

/// A layer's reference: a block, or none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pick<T> {
    /// `false`: none, whatever a lower layer names.
    Off,
    On(T),
}

/// A layer's access list or rule set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BlockLayer<T> {
    pub pick: Option<Pick<T>>,
    pub mode: Option<Mode>,
}

impl<T> Default for BlockLayer<T> {
    fn default() -> Self {
        BlockLayer {
            pick: None,
            mode: None,
        }
    }
}

impl<T: Copy> Fields for BlockLayer<T> {
    fn merge_fields(base: &Self, over: &Self) -> Self {
        BlockLayer::merge(*base, *over)
    }
}

impl<T: Copy> BlockLayer<T> {
    /// `over` on top of `base`, field by field.
    pub(crate) fn merge(base: BlockLayer<T>, over: BlockLayer<T>) -> BlockLayer<T> {
        BlockLayer {
            pick: over.pick.or(base.pick),
            mode: over.mode.or(base.mode),
        }
    }

    /// The block in force and its mode (enforce unless a layer says shadow).
    pub(crate) fn effective(&self) -> Option<(T, Mode)> {
        match self.pick {
            Some(Pick::On(t)) => Some((t, self.mode.unwrap_or_default())),
            _ => None,
        }
    }
}

/// The names a layer may refer to.
pub(crate) struct Names<'a> {
    /// Access list name → position.
    pub lists: &'a HashMap<String, usize>,
    /// Whether each access list has allow rules.
    pub allowing: &'a [bool],
    pub sets: &'a RuleSets,
    pub known: &'a Known<'a>,
    pub auth: &'a crate::auth::AuthProviders,
}

/// The host-level keys of one layer, wherever they are written. `limits`,
/// `rate_limit` and `class` are `None` where another check reads them
/// (`[defaults.limits]` in `validate`, a host's own in `host`).
#[derive(Clone, Copy)]
pub(crate) struct LayerFields<'a> {
    pub limits: Option<&'a RawLimits>,
    pub rate_limit: Option<&'a Opt<String>>,
    pub class: Option<&'a Opt<String>>,
    pub keys: LayerKeys<'a>,
}

impl<'a> LayerFields<'a> {
    pub(crate) fn defaults(d: &'a RawDefaults) -> LayerFields<'a> {
        LayerFields {
            limits: None,
            rate_limit: Some(&d.rate_limit),
            class: Some(&d.class),
            keys: d.keys(),
        }
    }

    pub(crate) fn bundle(b: &'a RawBundle) -> LayerFields<'a> {
        LayerFields {
            limits: Some(&b.limits),
            rate_limit: Some(&b.rate_limit),
            class: Some(&b.class),
            keys: b.keys(),
        }
    }

    pub(crate) fn host(h: &'a RawHost) -> LayerFields<'a> {
        LayerFields {
            limits: None,
            rate_limit: None,
            class: None,
            keys: h.keys(),
        }
    }
}

/// The codes of one kind of reference at one level.
pub(crate) struct Codes {
    unknown: &'static str,
    invalid: &'static str,
    mode: &'static str,
}

pub(crate) const HOST_ACCESS: Codes = Codes {
    unknown: "host.accessList.unknown",
    invalid: "host.accessList.invalid",
    mode: "host.accessList.mode.invalid",
};
const ROUTE_ACCESS: Codes = Codes {
    unknown: "route.accessList.unknown",
    invalid: "route.accessList.invalid",
    mode: "route.accessList.mode.invalid",
};
pub(crate) const HOST_RULES: Codes = Codes {
    unknown: "host.ruleSet.unknown",
    invalid: "host.ruleSet.invalid",
    mode: "host.ruleSet.mode.invalid",
};
const ROUTE_RULES: Codes = Codes {
    unknown: "route.ruleSet.unknown",
    invalid: "route.ruleSet.invalid",
    mode: "route.ruleSet.mode.invalid",
};

/// `key` and `key_mode` of a layer: a reference and its mode.
#[allow(clippy::too_many_arguments)]
fn block<T>(
    e: &mut Errors<'_>,
    (value, mode): (&Opt<RawNameRef>, &Opt<String>),
    base: &str,
    key: &str,
    codes: &Codes,
    what: &str,
    resolve: impl Fn(&str) -> Option<T>,
    known: impl Fn() -> String,
) -> BlockLayer<T> {
    let path = format!("{base}.{key}");
    let pick = value.as_ref().and_then(|v| match v.get_ref() {
        RawNameRef::Flag(false) => Some(Pick::Off),
        RawNameRef::Flag(true) => {
            e.push(
                codes.invalid,
                path.clone(),
                v.span(),
                format!("{key} is the name of {what}, or false for none; leave it out to inherit"),
            );
            None
        }
        RawNameRef::Name(n) => match resolve(n) {
            Some(t) => Some(Pick::On(t)),
            None => {
                e.push(
                    codes.unknown,
                    path.clone(),
                    v.span(),
                    format!("no {what} is named {n:?} ({})", known()),
                );
                None
            }
        },
    });
    let mode = choice(
        e,
        mode,
        &format!("{base}.{key}_mode"),
        codes.mode,
        &[
            ("enforce", Some(Mode::Enforce)),
            ("shadow", Some(Mode::Shadow)),
        ],
        None,
    );
    BlockLayer { pick, mode }
}

pub(crate) fn access(
    e: &mut Errors<'_>,
    fields: (&Opt<RawNameRef>, &Opt<String>),
    base: &str,
    codes: &Codes,
    names: &Names<'_>,
) -> BlockLayer<usize> {
    block(
        e,
        fields,
        base,
        "access_list",
        codes,
        "[[access_list]]",
        |n| names.lists.get(n).copied(),
        || known_list(names.lists, "access_list"),
    )
}

pub(crate) fn rules(
    e: &mut Errors<'_>,
    fields: (&Opt<RawNameRef>, &Opt<String>),
    base: &str,
    codes: &Codes,
    names: &Names<'_>,
) -> BlockLayer<SetTarget> {
    block(
        e,
        fields,
        base,
        "rule_set",
        codes,
        "[[rule_set]] or preset",
        |n| names.sets.resolve(n),
        || names.sets.known(),
    )
}

/// `rate_limit` of `[defaults]` or a bundle: a known limit, with where it
/// is named.
pub(crate) fn check_rate_limit(
    r: Option<&Opt<String>>,
    base: &str,
    names: &Names<'_>,
    e: &mut Errors<'_>,
) -> Option<(u32, Range<usize>, String)> {
    r.and_then(Option::as_ref).and_then(|r| {
        let path = format!("{base}.rate_limit");
        rate_limit(
            e,
            r.get_ref(),
            r.span(),
            path.clone(),
            "host.rate_limit.unknown",
            names.known,
        )
        .map(|(i, at)| (i, at, path))
    })
}

/// A route's access list and rule set.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RouteBlocks {
    pub access: BlockLayer<usize>,
    pub rules: BlockLayer<SetTarget>,
    /// `proof_of_work = true | false`.
    pub pow: Option<bool>,
    /// `auth = "NAME" | false`.
    pub auth: Option<Option<u32>>,
    pub auth_mode: Option<Mode>,
}

/// `auth_mode`: `"enforce"` or `"shadow"`.
pub(crate) fn auth_mode(
    v: &Opt<String>,
    base: &str,
    code: &'static str,
    e: &mut Errors<'_>,
) -> Option<Mode> {
    v.as_ref().map(|_| {
        crate::values::choice(
            e,
            v,
            &format!("{base}.auth_mode"),
            code,
            &[("enforce", Mode::Enforce), ("shadow", Mode::Shadow)],
            Mode::Enforce,
        )
    })
}

/// Checks a route's `access_list`, `rule_set` and their modes.
pub(crate) fn check_route_blocks(
    r: &RawRoute,
    base: &str,
    names: &Names<'_>,
    e: &mut Errors<'_>,
) -> RouteBlocks {
    RouteBlocks {
        access: access(
            e,
            (&r.access_list, &r.access_list_mode),
            base,
            &ROUTE_ACCESS,
            names,
        ),
        rules: rules(
            e,
            (&r.rule_set, &r.rule_set_mode),
            base,
            &ROUTE_RULES,
            names,
        ),
        pow: r.proof_of_work.as_ref().map(|b| *b.get_ref()),
        auth: crate::auth::check_auth_ref(
            &r.auth,
            &format!("{base}.auth"),
            "route.auth.unknown",
            names.auth,
            e,
        ),
        auth_mode: auth_mode(&r.auth_mode, base, "route.auth.mode.invalid", e),
    }
}
