//! Host-level settings as layers: `[defaults]`, a `[[bundle]]` and a
//! `[[host]]` each hold any of them, and a route holds its access list and
//! rule set. A layer's fields are all optional; `hostsettings` declares
//! them and how two layers stack (a field the upper layer leaves out is
//! inherited), so a host's settings are defaults → bundle → host, and a
//! route's blocks are that → route. This module holds the checks the
//! table calls and the layers' own types.
//!
//! A reference to an access list or a rule set is a name, or `false` for
//! none; its mode (`access_list_mode`, `rule_set_mode`) is a field of its
//! own, so a layer may shadow whatever list a lower layer names. Error pages
//! merge per entry: an entry is replaced whole by the layer that sets it.
//!
//! Values are checked in the layer that writes them, so a problem in
//! `[defaults]` or a bundle is reported once, at its own key, however many
//! hosts inherit it. Host-level layers share the `host.*` codes: the key
//! path tells which layer (`defaults.rule_set`, `bundle[1].rule_set`,
//! `host[0].rule_set`).

use crate::codes::ProfileCode;
use crate::error::{key_path, Errors};
use crate::gatekeys::{rate_limit, Known};
use crate::layer::{replace, Fields};
use crate::names::known_list;
use crate::rawblocks::{
    LayerKeys, RawBundle, RawErrorPages, RawLimits, RawMaintenance, RawNameRef,
};
use crate::ruleset::{RuleSets, SetTarget};
use crate::schema::{RawDefaults, RawHost, RawRoute};
use crate::values::{choice, int_in, Opt};
use gapura_gate::custom_pages::{
    validate_entry, PageEntrySpec, PageForm, PageKey, ReplaceUpstream,
};
use gapura_gate::maintenance::{MaintenanceError, MAINTENANCE_STATUSES, MAX_RETRY_AFTER_SECONDS};
use gapura_gate::mode::Mode;
use gapura_gate::robots::{normalize_custom_text, RobotsMode};
use std::collections::HashMap;
use std::ops::Range;
use toml::Spanned;

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

/// A layer's `maintenance` table.
#[derive(Clone, Debug, Default)]
pub(crate) struct MaintenanceLayer {
    pub enabled: Option<bool>,
    pub status: Option<u16>,
    pub retry_after_seconds: Option<u32>,
    /// The bypass list's position among `[[access_list]]`.
    pub bypass: Option<usize>,
    pub mode: Option<Mode>,
}

impl Fields for MaintenanceLayer {
    fn merge_fields(base: &Self, over: &Self) -> Self {
        MaintenanceLayer {
            enabled: over.enabled.or(base.enabled),
            status: over.status.or(base.status),
            retry_after_seconds: over.retry_after_seconds.or(base.retry_after_seconds),
            bypass: over.bypass.or(base.bypass),
            mode: over.mode.or(base.mode),
        }
    }
}

/// The `robots` value of a layer, with where it is written (for a custom
/// file without text).
#[derive(Clone, Debug)]
pub(crate) struct RobotsValue {
    pub mode: RobotsMode,
    pub path: String,
    pub span: Range<usize>,
}

/// A layer's `robots` and `robots_text`.
#[derive(Clone, Debug, Default)]
pub(crate) struct RobotsLayer {
    pub value: Option<RobotsValue>,
    pub text: Option<String>,
}

impl Fields for RobotsLayer {
    fn merge_fields(base: &Self, over: &Self) -> Self {
        RobotsLayer {
            value: replace(&base.value, &over.value),
            text: replace(&base.text, &over.text),
        }
    }
}

/// The names a layer may refer to.
pub(crate) struct Names<'a> {
    /// Access list name → position.
    pub lists: &'a HashMap<String, usize>,
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

/// `replace_upstream`: `"off"`, `"html"` or `"any"`.
pub(crate) fn check_replace_upstream(
    v: &Opt<String>,
    base: &str,
    e: &mut Errors<'_>,
) -> Option<ReplaceUpstream> {
    choice(
        e,
        v,
        &format!("{base}.replace_upstream"),
        "host.replace_upstream.invalid",
        &[
            ("off", Some(ReplaceUpstream::Off)),
            ("html", Some(ReplaceUpstream::Html)),
            ("any", Some(ReplaceUpstream::Any)),
        ],
        None,
    )
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

/// `robots` and `robots_text`. A text is checked where it is written; a
/// text beside a `robots` that is not `"custom"` is refused, since nothing
/// would read it.
pub(crate) fn check_robots(
    robots: &Opt<String>,
    robots_text: &Opt<String>,
    base: &str,
    e: &mut Errors<'_>,
) -> RobotsLayer {
    let path = format!("{base}.robots");
    let mode = choice(
        e,
        robots,
        &path,
        "host.robots.invalid",
        &[
            ("passthrough", Some(RobotsMode::Passthrough)),
            ("disallow_all", Some(RobotsMode::DisallowAll)),
            ("block_ai_crawlers", Some(RobotsMode::BlockAiCrawlers)),
            ("custom", Some(RobotsMode::Custom)),
        ],
        None,
    );
    let value = mode.zip(robots.as_ref()).map(|(mode, v)| RobotsValue {
        mode,
        path,
        span: v.span(),
    });
    let text = robots_text.as_ref().map(|t| {
        let path = format!("{base}.robots_text");
        if let Some(m) = mode.filter(|m| *m != RobotsMode::Custom) {
            e.push(
                "robots.custom_text.unexpected",
                path,
                t.span(),
                format!(
                    "robots = {:?} serves no text of yours; robots_text belongs to \
                     robots = \"custom\"",
                    m.as_str()
                ),
            );
        } else if let Err(err) = normalize_custom_text(t.get_ref()) {
            e.push(err.code(), path, t.span(), err.to_string());
        }
        t.get_ref().clone()
    });
    RobotsLayer { value, text }
}

/// `maintenance` of a layer at `base`.
pub(crate) fn check_maintenance(
    m: &Option<RawMaintenance>,
    base: &str,
    names: &Names<'_>,
    e: &mut Errors<'_>,
) -> MaintenanceLayer {
    let Some(m) = m else {
        return MaintenanceLayer::default();
    };
    let base = format!("{base}.maintenance");
    let status = m.status.as_ref().and_then(|s| {
        let ok = u16::try_from(*s.get_ref())
            .ok()
            .filter(|c| MAINTENANCE_STATUSES.contains(c));
        if ok.is_none() {
            e.push(
                MaintenanceError::Status.code(),
                format!("{base}.status"),
                s.span(),
                format!("{}, got {}", MaintenanceError::Status, s.get_ref()),
            );
        }
        ok
    });
    let retry_after_seconds = int_in(
        e,
        &m.retry_after_seconds,
        &format!("{base}.retry_after_seconds"),
        MaintenanceError::RetryAfter.code(),
        (0, i64::from(MAX_RETRY_AFTER_SECONDS)),
    )
    .map(|n| u32::try_from(n).unwrap_or(0));
    let bypass = m.bypass.as_ref().and_then(|b| {
        let id = names.lists.get(b.get_ref()).copied();
        if id.is_none() {
            e.push(
                "host.maintenance.bypassUnknown",
                format!("{base}.bypass"),
                b.span(),
                format!(
                    "no [[access_list]] is named {:?} ({})",
                    b.get_ref(),
                    known_list(names.lists, "access_list")
                ),
            );
        }
        id
    });
    let mode = choice(
        e,
        &m.mode,
        &format!("{base}.mode"),
        "maintenance.mode.invalid",
        &[
            ("enforce", Some(Mode::Enforce)),
            ("shadow", Some(Mode::Shadow)),
        ],
        None,
    );
    MaintenanceLayer {
        enabled: m.enabled.as_ref().map(|v| *v.get_ref()),
        status,
        retry_after_seconds,
        bypass,
        mode,
    }
}

/// Every entry of an `error_pages` table: a customizable status or
/// `maintenance`, a message or (with `html`) a document.
pub(crate) fn check_pages(
    p: &Option<RawErrorPages>,
    base: &str,
    e: &mut Errors<'_>,
) -> Vec<(PageKey, PageEntrySpec)> {
    let Some(p) = p else {
        return Vec::new();
    };
    let base = &format!("{base}.error_pages");
    let mut pages = Vec::with_capacity(p.0.len());
    for (key, entry) in &p.0 {
        let path = key_path(base, key.get_ref());
        let Some(page_key) = PageKey::parse(key.get_ref()) else {
            e.push(
                "errorPages.status.unsupported",
                path,
                key.span(),
                format!(
                    "{:?} has no page a host may replace: use 403, 404, 413, 414, 421, 429, \
                     431, 502, 503, 504 or maintenance",
                    key.get_ref()
                ),
            );
            continue;
        };
        let text = |v: &Opt<String>| v.as_ref().map(|v| v.get_ref().clone());
        let spec = PageEntrySpec {
            form: if entry.html.is_some() {
                PageForm::Document
            } else {
                PageForm::Message
            },
            heading: text(&entry.heading),
            text: text(&entry.text),
            html: text(&entry.html),
        };
        for err in validate_entry(&spec) {
            let field = err.field.name();
            let value = match field {
                "heading" => &entry.heading,
                "text" => &entry.text,
                _ => &entry.html,
            };
            let at = value.as_ref().map_or_else(|| key.span(), Spanned::span);
            e.push(err.code(), key_path(&path, field), at, err.to_string());
        }
        pages.push((page_key, spec));
    }
    pages
}
