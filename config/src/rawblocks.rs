//! The raw `[[access_list]]`, `[[rule_set]]`, `[[auth_provider]]` and
//! `[[bundle]]` tables and the host-level settings every layer may hold
//! (`[defaults]`, a bundle, a host): `limits`, `maintenance`,
//! `error_pages`, `connection_rate`, `websocket`, `proof_of_work`, `hsts`
//! and the references to a list, a set or a provider, as serde reads them.
//! Those keys are declared once (`host_level_keys!`): the raw tables of
//! `[defaults]`, a bundle and a host are written from that one list
//! (`raw_layer!`), and so is `LayerKeys`, one layer's keys borrowed, which
//! `hostsettings` checks.
//!
//! Like `schema`, these mirror the TOML one to one, closed to unknown keys,
//! every scalar and array [`Spanned`]. References to a list or a set are a
//! scalar (a name, or `false`) with their mode in a key of its own
//! (`access_list_mode`), so every spelling TOML allows keeps its position:
//! `toml` cannot give a span to a table written with dotted keys, so no
//! value here is a spanned table.

use crate::values::{IntOrString, Opt, StrList};
use serde::de::{self, Deserialize, Deserializer, MapAccess, Visitor};
use std::fmt;
use toml::Spanned;

/// One `[[access_list]]`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAccessList {
    pub name: Opt<String>,
    pub allow: Option<StrList>,
    pub deny: Option<StrList>,
    pub countries: Option<RawCountries>,
    pub drop_denied: Opt<bool>,
    pub realm: Opt<String>,
    pub satisfy: Opt<String>,
    pub pass_credentials: Opt<bool>,
    #[serde(default)]
    pub users: Vec<Spanned<RawUser>>,
    pub users_file: Opt<String>,
}

/// `countries = { allow = [...], deny = [...] }` of an access list.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawCountries {
    pub allow: Option<StrList>,
    pub deny: Option<StrList>,
}

/// One user of an access list. `password` is read only to be refused
/// (`accessList.user.password.plain`) with a clear message rather than as
/// an unknown key.
#[derive(Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawUser {
    pub name: Opt<String>,
    pub password_hash: Opt<String>,
    pub password: Opt<String>,
}

impl fmt::Debug for RawUser {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Either field may hold a real password: never print them.
        f.debug_struct("RawUser")
            .field("name", &self.name)
            .field("password_hash", &self.password_hash.as_ref().map(|_| ".."))
            .field("password", &self.password.as_ref().map(|_| ".."))
            .finish()
    }
}

/// One `[[rule_set]]`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRuleSet {
    pub name: Opt<String>,
    /// `[[rule_set.rule]]`, in order: the first match decides.
    #[serde(default)]
    pub rule: Vec<Spanned<RawRule>>,
}

/// One `[[rule_set.rule]]`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRule {
    pub path: Option<RawRulePath>,
    pub methods: Option<StrList>,
    pub user_agent: Option<RawUserAgent>,
    pub action: Opt<String>,
}

/// A rule's `path`: exactly one of the four kinds.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRulePath {
    pub exact: Opt<String>,
    pub prefix: Opt<String>,
    pub glob: Opt<String>,
    pub regex: Opt<String>,
}

/// A rule's `user_agent`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawUserAgent {
    pub contains: Option<StrList>,
    pub empty: Opt<bool>,
}

/// One `[[auth_provider]]`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAuthProvider {
    pub name: Opt<String>,
    pub url: Opt<String>,
    pub preset: Opt<String>,
    pub copy_headers: Option<StrList>,
    pub request_headers: Option<StrList>,
    pub cache: Option<RawAuthCache>,
    pub timeout_ms: Opt<i64>,
    pub sign_in: Option<Spanned<RawSignIn>>,
    /// With an `https://` url: an upstream's `tls` table.
    pub tls: Option<Spanned<crate::schema::RawUpstreamTls>>,
}

/// `sign_in = { url, return_parameter }`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSignIn {
    pub url: Opt<String>,
    pub return_parameter: Opt<String>,
}

/// `cache = { ttl_ms, entries, scope }`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAuthCache {
    pub ttl_ms: Opt<i64>,
    pub negative_ttl_ms: Opt<i64>,
    pub entries: Opt<i64>,
    pub scope: Opt<String>,
}

/// The host-level keys every layer holds alike (`[defaults]`, a
/// `[[bundle]]`, a `[[host]]`), declared once, in the order the layers'
/// tables list them: the references to a list or a set, then (after the
/// keys a layer places between them) the settings. `$then!` receives the
/// two groups after its own arguments; `raw_layer!` writes them into a
/// layer's raw table and `LayerKeys` borrows them. `limits`, `rate_limit`
/// and `class` are not here: a host reads them with its own checks.
macro_rules! host_level_keys {
    ($then:ident ! $args:tt) => {
        $then! { $args
            {
                access_list: $crate::values::Opt<$crate::rawblocks::RawNameRef>,
                access_list_mode: $crate::values::Opt<String>,
                rule_set: $crate::values::Opt<$crate::rawblocks::RawNameRef>,
                rule_set_mode: $crate::values::Opt<String>,
            }
            {
                robots: $crate::values::Opt<String>,
                robots_text: $crate::values::Opt<String>,
                maintenance: Option<$crate::rawblocks::RawMaintenance>,
                error_pages: Option<$crate::rawblocks::RawErrorPages>,
                replace_upstream: $crate::values::Opt<String>,
                connection_rate: Option<toml::Spanned<$crate::rawblocks::RawConnectionRate>>,
                websocket: Option<toml::Spanned<$crate::rawblocks::RawWebSocket>>,
                proof_of_work: Option<toml::Spanned<$crate::rawblocks::RawProofOfWork>>,
                /// The forward-auth provider (`[[auth_provider]]`), or `false`.
                auth: $crate::values::Opt<$crate::rawblocks::RawNameRef>,
                auth_mode: $crate::values::Opt<String>,
                /// Plaintext requests to HTTPS (`https_port`, default 443).
                https_redirect: $crate::values::Opt<bool>,
                https_port: $crate::values::Opt<i64>,
                /// `Strict-Transport-Security` on answers over TLS.
                hsts: Option<toml::Spanned<$crate::rawblocks::RawHsts>>,
            }
        }
    };
}
pub(crate) use host_level_keys;

/// A layer's raw table: `struct Name { head } { middle } { tail }` with the
/// host-level keys between head and middle and between middle and tail,
/// and its `keys()`, the borrowed `LayerKeys`.
macro_rules! raw_layer {
    ({ $(#[$m:meta])* $vis:vis struct $name:ident { $($head:tt)* } { $($mid:tt)* } { $($tail:tt)* } }
     { $($(#[$da:meta])* $a:ident: $ta:ty,)* }
     { $($(#[$db:meta])* $b:ident: $tb:ty,)* }) => {
        $(#[$m])*
        $vis struct $name {
            $($head)*
            $($(#[$da])* pub $a: $ta,)*
            $($mid)*
            $($(#[$db])* pub $b: $tb,)*
            $($tail)*
        }

        impl $name {
            /// The host-level keys of this layer.
            pub(crate) fn keys(&self) -> $crate::rawblocks::LayerKeys<'_> {
                $crate::rawblocks::LayerKeys { $($a: &self.$a,)* $($b: &self.$b,)* }
            }
        }
    };
}
pub(crate) use raw_layer;

/// The borrowed host-level keys of one layer, whichever table holds them.
macro_rules! layer_keys {
    ({}
     { $($(#[$da:meta])* $a:ident: $ta:ty,)* }
     { $($(#[$db:meta])* $b:ident: $tb:ty,)* }) => {
        /// The host-level keys of one layer, borrowed from its raw table.
        #[derive(Clone, Copy)]
        pub(crate) struct LayerKeys<'a> {
            $($(#[$da])* pub $a: &'a $ta,)*
            $($(#[$db])* pub $b: &'a $tb,)*
        }
    };
}

host_level_keys!(layer_keys! {});

host_level_keys!(raw_layer! {
    /// One `[[bundle]]`: a name and any host-level setting.
    #[derive(Debug, Default, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    pub(crate) struct RawBundle {
        pub name: Opt<String>,
        #[serde(default)]
        pub limits: RawLimits,
    } {
        pub rate_limit: Opt<String>,
        pub class: Opt<String>,
    } {}
});

/// `[host.maintenance]` (and in `[defaults]` and bundles).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawMaintenance {
    pub enabled: Opt<bool>,
    pub status: Opt<i64>,
    pub retry_after_seconds: Opt<i64>,
    pub bypass: Opt<String>,
    pub mode: Opt<String>,
}

/// One entry of `error_pages`: a message (`heading` and `text`) or, when it
/// has `html`, a document.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPageEntry {
    pub heading: Opt<String>,
    pub text: Opt<String>,
    pub html: Opt<String>,
}

/// `error_pages = { "404" = {...}, maintenance = {...} }` in document
/// order, each key spanned (a key that is no status is a semantic error).
#[derive(Debug, Default)]
pub(crate) struct RawErrorPages(pub Vec<(Spanned<String>, RawPageEntry)>);

impl<'de> Deserialize<'de> for RawErrorPages {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawErrorPages;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a table of statuses (\"404\") or \"maintenance\" to page entries")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawErrorPages, A::Error> {
                let mut list = Vec::new();
                while let Some(key) = map.next_key::<Spanned<String>>()? {
                    let entry = map.next_value::<RawPageEntry>()?;
                    list.push((key, entry));
                }
                Ok(RawErrorPages(list))
            }
        }
        d.deserialize_map(V)
    }
}

/// `[defaults.limits]` and `[host.limits]`. Byte sizes are an integer or a
/// string with a unit.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawLimits {
    pub max_body_bytes: Opt<IntOrString>,
    pub max_header_count: Opt<i64>,
    pub max_header_bytes: Opt<IntOrString>,
    pub max_url_bytes: Opt<IntOrString>,
}

/// `connection_rate = { requests = 100, burst = 200 }`: per second.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawConnectionRate {
    pub requests: Opt<i64>,
    pub burst: Opt<i64>,
}

/// `websocket = { messages_per_second = 50, burst = 100,
/// max_message_bytes = 1048576, on_limit = "drop" }`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawWebSocket {
    pub messages_per_second: Opt<i64>,
    pub burst: Opt<i64>,
    pub max_message_bytes: Opt<IntOrString>,
    pub on_limit: Opt<String>,
}

/// `proof_of_work = { ... }` at a host level.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawProofOfWork {
    pub enabled: Opt<bool>,
    pub difficulty: Opt<i64>,
    pub token_lifetime_hours: Opt<i64>,
    /// A rule set whose `challenge` rules choose the requests challenged.
    pub when: Opt<String>,
    pub mode: Opt<String>,
}

/// `hsts = { max_age_s, include_subdomains, preload }`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawHsts {
    pub max_age_s: Opt<i64>,
    pub include_subdomains: Opt<bool>,
    pub preload: Opt<bool>,
}

/// `access_list` and `rule_set`: a name, or `false` for none (`true` is
/// read so that it is refused with a clear code).
#[derive(Debug)]
pub(crate) enum RawNameRef {
    Name(String),
    Flag(bool),
}

impl<'de> Deserialize<'de> for RawNameRef {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = RawNameRef;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a name, or false")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RawNameRef, E> {
                Ok(RawNameRef::Name(v.to_string()))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<RawNameRef, E> {
                Ok(RawNameRef::Flag(v))
            }
        }
        d.deserialize_any(V)
    }
}
