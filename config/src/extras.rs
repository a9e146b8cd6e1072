//! A host's own answers as layered settings: `robots` and `robots_text`
//! (a managed robots.txt), `maintenance`, `error_pages` and
//! `replace_upstream`. Each layer's values are checked where they are
//! written (`check_*`, which `hostsettings` calls per layer); the stacked
//! settings of a host compile into its [`HostExtras`] fields
//! (`compile_*`, the table's compile steps). The one problem only the stack
//! shows is a custom robots.txt with no text in any layer, reported once
//! at the `robots` that asks for it.
//!
//! [`HostExtras`]: gapura_gate::policy::HostExtras

use crate::codes::ProfileCode;
use crate::error::{key_path, Errors};
use crate::hostlayer::Names;
use crate::layer::{replace, Fields};
use crate::names::known_list;
use crate::rawblocks::{RawErrorPages, RawMaintenance};
use crate::values::{choice, int_in, Opt};
use gapura_gate::custom_pages::{
    validate_entry, CustomPages, PageEntrySpec, PageForm, PageKey, ReplaceUpstream,
};
use gapura_gate::maintenance::{
    Maintenance, MaintenanceError, MaintenanceSpec, MAINTENANCE_STATUSES, MAX_RETRY_AFTER_SECONDS,
};
use gapura_gate::mode::Mode;
use gapura_gate::policy::HostMaintenance;
use gapura_gate::robots::{normalize_custom_text, Robots, RobotsError, RobotsMode};
use std::collections::HashSet;
use std::ops::Range;
use toml::Spanned;

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
        if id.is_some_and(|i| !names.allowing.get(i).copied().unwrap_or(true)) {
            // The bypass admits only what an allow rule matches: a list
            // without one lets no one past the page.
            e.warn(
                "host.maintenance.bypass_no_allow",
                format!("{base}.bypass"),
                b.span(),
                format!(
                    "the access list {:?} has no allow addresses or countries, so its address \
                     side admits no one and nobody gets past the maintenance page: give it the \
                     addresses that should (allow = [...])",
                    b.get_ref()
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

/// What compiling a host's extras reads beside its stacked settings.
pub(crate) struct ExtrasCx<'x, 'e> {
    /// Each access list's index in the snapshot (`None`: unused).
    pub list_index: &'x [Option<u32>],
    /// The host's key path (`host[N]`) and span.
    pub base: &'x str,
    pub span: Range<usize>,
    /// The `robots` keys already reported (by their start).
    pub reported: &'x mut HashSet<usize>,
    pub e: &'x mut Errors<'e>,
}

/// The host's robots.txt; `robots = "custom"` without text in any layer is
/// reported once, at that `robots`.
pub(crate) fn compile_robots(r: &RobotsLayer, cx: &mut ExtrasCx<'_, '_>) -> Option<Robots> {
    let v = r
        .value
        .as_ref()
        .filter(|v| v.mode != RobotsMode::Passthrough)?;
    match Robots::compile(v.mode, r.text.as_deref()) {
        Ok(robots) => Some(robots),
        Err(err) => {
            if err == RobotsError::CustomTextRequired
                && r.text.is_none()
                && cx.reported.insert(v.span.start)
            {
                cx.e.push(
                    err.code(),
                    v.path.clone(),
                    v.span.clone(),
                    "robots = \"custom\" needs robots_text, the file to serve, in this \
                     layer or one below",
                );
            }
            None
        }
    }
}

/// The host's pages for statuses (the maintenance page is the
/// maintenance's). Entries were validated where written: compiling them
/// cannot fail.
pub(crate) fn compile_pages(pages: &[(PageKey, PageEntrySpec)]) -> Option<CustomPages> {
    let statuses: Vec<_> = pages
        .iter()
        .filter_map(|(k, spec)| match k {
            PageKey::Status(s) => Some((*s, spec.clone())),
            PageKey::Maintenance => None,
        })
        .collect();
    (!statuses.is_empty())
        .then(|| CustomPages::compile(&statuses).ok())
        .flatten()
}

/// The host's maintenance, with the `maintenance` entry of its pages.
pub(crate) fn compile_maintenance(
    m: &MaintenanceLayer,
    pages: &[(PageKey, PageEntrySpec)],
    cx: &mut ExtrasCx<'_, '_>,
) -> Option<HostMaintenance> {
    let spec = MaintenanceSpec {
        enabled: m.enabled.unwrap_or(false),
        status: m.status.unwrap_or(503),
        retry_after_seconds: m.retry_after_seconds.unwrap_or(0),
        page: pages
            .iter()
            .find(|(k, _)| *k == PageKey::Maintenance)
            .map(|(_, spec)| spec.clone()),
    };
    match Maintenance::compile(&spec) {
        Ok(page) => page.map(|page| HostMaintenance {
            page,
            mode: m.mode.unwrap_or_default(),
            bypass: m.bypass.and_then(|d| cx.list_index[d]),
        }),
        Err(errs) => {
            // Checked per layer already: a backstop that never doubles them.
            if cx.e.is_empty() {
                for err in errs {
                    cx.e.push(
                        err.code(),
                        format!("{}.maintenance", cx.base),
                        cx.span.clone(),
                        err.to_string(),
                    );
                }
            }
            None
        }
    }
}
