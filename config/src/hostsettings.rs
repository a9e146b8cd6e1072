//! The host-level settings, declared once: one entry per setting of
//! [`SettingsLayer`], in the order the layers are checked, gives
//!
//! - its field and type in a layer;
//! - how an upper layer stacks on a lower one (`layer`'s merge rules):
//!   `replace` (the upper value, whole), `fields` (field by field) or
//!   `entries` (entry by entry, each replaced whole);
//! - the keys it reads, each with its value and its built-in, which
//!   docs/profile.md's host-level table shows (a test holds them equal):
//!   in parentheses those every raw table places itself (`limits`,
//!   `rate_limit`, `class`: a host checks its own in `host`), in braces
//!   the keys of `rawblocks`' list that every layer holds alike;
//! - its check, an expression over those keys, the layer's key path
//!   (`base`), the [`Names`] it may refer to (`names`) and the errors (`e`);
//! - its compile step, when the host's [`HostExtras`] has a field of it:
//!   an expression over the host's stacked settings (`m`) and what
//!   compiling reads beside them (`cx`). The extras made per route (proof
//!   of work, the identity headers to strip) are named in the header and
//!   set by `blocks`.
//!
//! From the table come [`SettingsLayer`], [`SettingsLayer::merge`],
//! [`check_layer`], [`host_extras`] and the keys the docs' test reads.
//! `check_layer` binds every key of a layer by name, exhaustively: a key of
//! the list that no setting reads, or reads twice, does not compile, and a
//! key a check leaves unread is an unused variable. One more host-level
//! key is a line of `rawblocks`' list (its raw type), an entry here (or a
//! key of an entry), its check when it is new, and its row in
//! docs/profile.md.

use crate::connlimits::{check_connection_rate, check_websocket};
use crate::error::Errors;
use crate::extras::{
    check_maintenance, check_pages, check_replace_upstream, check_robots, compile_maintenance,
    compile_pages, compile_robots, ExtrasCx, MaintenanceLayer, RobotsLayer,
};
use crate::gatekeys;
use crate::hostlayer::{
    self, access, check_rate_limit, rules, BlockLayer, LayerFields, Names, HOST_ACCESS, HOST_RULES,
};
use crate::layer::LimitsLayer;
use crate::limits::check_limits;
use crate::pow::{check_pow, PowLayer};
use crate::rawblocks::LayerKeys;
use crate::ruleset::SetTarget;
use crate::tls::{check_https, HttpsLayer};
use gapura_gate::custom_pages::{PageEntrySpec, PageKey, ReplaceUpstream};
use gapura_gate::mode::Mode;
use gapura_gate::policy::{HostExtras, WebSocketLimits};
use gapura_gate::quota::{Class, RatePolicy};
use std::ops::Range;

/// One key of the table, as the docs describe it.
#[cfg(test)]
#[derive(Debug)]
pub(crate) struct KeyDoc {
    pub key: &'static str,
    /// What the key takes: `table`, `name`, `word`...
    pub value: &'static str,
    /// What a host has when no layer sets it.
    pub builtin: &'static str,
}

/// A merge rule of the table, applied to one field of two layers.
macro_rules! merge_by {
    (replace, $base:expr, $over:expr) => {
        $crate::layer::replace(&$base, &$over)
    };
    (fields, $base:expr, $over:expr) => {
        $crate::layer::Fields::merge_fields(&$base, &$over)
    };
    (entries, $base:expr, $over:expr) => {
        $crate::layer::entries(&$base, &$over)
    };
}

/// Writes the layer, its merge and its check from the table below.
macro_rules! host_settings {
    (
        check($base:ident, $names:ident, $e:ident);
        compile($m:ident, $cx:ident) { $($xf0:ident: $x0:expr),* $(,)? }
        $(
            $(#[$doc:meta])*
            $name:ident: $ty:ty = $rule:ident
            $(( $($okey:ident: $ovalue:literal = $obuiltin:literal),+ $(,)? ))?
            { $($key:ident: $value:literal = $builtin:literal),* $(,)? }
            check $check:expr
            $(, extras $xf:ident: $compile:expr)?;
        )*
    ) => {
        /// One layer of host-level settings, each field optional.
        #[derive(Clone, Debug, Default)]
        pub(crate) struct SettingsLayer {
            $($(#[$doc])* pub $name: $ty,)*
        }

        impl SettingsLayer {
            /// `over` on top of `base`, each setting by its rule.
            pub(crate) fn merge(base: &SettingsLayer, over: &SettingsLayer) -> SettingsLayer {
                SettingsLayer {
                    $($name: merge_by!($rule, base.$name, over.$name),)*
                }
            }
        }

        /// Checks one host-level layer written at `base` (`defaults`,
        /// `bundle[N]`, `host[N]`), setting by setting in table order.
        pub(crate) fn check_layer(
            fields: &LayerFields<'_>,
            $base: &str,
            $names: &Names<'_>,
            $e: &mut Errors<'_>,
        ) -> SettingsLayer {
            let LayerFields { keys, $($($($okey,)+)?)* } = *fields;
            let LayerKeys { $($($key,)*)* } = keys;
            SettingsLayer {
                $($name: $check,)*
            }
        }

        /// Every key a layer reads, in table order, with its value and
        /// its built-in as docs/profile.md's host-level table gives them.
        #[cfg(test)]
        pub(crate) const KEYS: &[KeyDoc] = &[$(
            $($(KeyDoc { key: stringify!($okey), value: $ovalue, builtin: $obuiltin },)+)?
            $(KeyDoc { key: stringify!($key), value: $value, builtin: $builtin },)*
        )*];

        /// A host's extras from its stacked settings, setting by setting
        /// in table order. Every value was checked in the layer that wrote
        /// it.
        pub(crate) fn host_extras($m: &SettingsLayer, $cx: &mut ExtrasCx<'_, '_>) -> HostExtras {
            HostExtras {
                $($($xf: $compile,)?)*
                $($xf0: $x0,)*
            }
        }
    };
}

host_settings! {
    check(base, names, e);
    compile(m, cx) { pow: None, identity_strip: Vec::new() }

    /// The request limits.
    limits: LimitsLayer = fields (limits: "table" = "the limits above") {}
        check limits.map_or_else(LimitsLayer::default, |l| {
            check_limits(l, &format!("{base}.limits"), e)
        });
    /// The limit's index, the reference's span and key path.
    rate_limit: Option<(u32, Range<usize>, String)> = replace
        (rate_limit: "name" = "none") {}
        check check_rate_limit(rate_limit, base, names, e);
    class: Option<Class> = replace (class: "word" = r#""normal""#) {}
        check class.and_then(|c| {
            gatekeys::class(e, c, &format!("{base}.class"), "host.class.invalid")
        });
    /// Position among `[[access_list]]`.
    access: BlockLayer<usize> = fields {
        access_list: "name or false" = "none",
        access_list_mode: "mode" = r#""enforce""#,
    }
        check access(e, (access_list, access_list_mode), base, &HOST_ACCESS, names);
    rules: BlockLayer<SetTarget> = fields {
        rule_set: "name or false" = "none",
        rule_set_mode: "mode" = r#""enforce""#,
    }
        check rules(e, (rule_set, rule_set_mode), base, &HOST_RULES, names);
    robots: RobotsLayer = fields {
        robots: "word" = r#""passthrough""#,
        robots_text: "string" = "none",
    }
        check check_robots(robots, robots_text, base, e),
        extras robots: compile_robots(&m.robots, cx);
    maintenance: MaintenanceLayer = fields { maintenance: "table" = "off" }
        check check_maintenance(maintenance, base, names, e),
        extras maintenance: compile_maintenance(&m.maintenance, &m.pages, cx);
    /// Entries by key, each whole.
    pages: Vec<(PageKey, PageEntrySpec)> = entries { error_pages: "table" = "none" }
        check check_pages(error_pages, base, e),
        extras pages: compile_pages(&m.pages);
    replace_upstream: Option<ReplaceUpstream> = replace {
        replace_upstream: "word" = r#""off""#,
    }
        check check_replace_upstream(replace_upstream, base, e),
        extras replace_upstream: m.replace_upstream.unwrap_or_default();
    /// `Some(None)`: turned off in this layer.
    connection_rate: Option<Option<RatePolicy>> = replace {
        connection_rate: "table" = "none",
    }
        check check_connection_rate(connection_rate.as_ref(), base, e),
        extras connection_rate: m.connection_rate.flatten();
    websocket: Option<Option<WebSocketLimits>> = replace { websocket: "table" = "none" }
        check check_websocket(websocket.as_ref(), base, e),
        extras websocket: m.websocket.flatten();
    pow: PowLayer = fields { proof_of_work: "table" = "off" }
        check check_pow(proof_of_work.as_ref(), base, names.sets, e);
    /// `Some(None)`: turned off in this layer.
    auth: Option<Option<u32>> = replace { auth: "name or false" = "none" }
        check crate::auth::check_auth_ref(
            auth,
            &format!("{base}.auth"),
            "host.auth.unknown",
            names.auth,
            e,
        );
    auth_mode: Option<Mode> = replace { auth_mode: "mode" = r#""enforce""# }
        check hostlayer::auth_mode(auth_mode, base, "host.auth.mode.invalid", e);
    https: HttpsLayer = fields {
        https_redirect: "boolean" = "false",
        https_port: "integer" = "443",
        hsts: "table" = "none",
    }
        check check_https(https_redirect, https_port, hsts.as_ref(), base, e),
        extras https: m.https.compile();
}
