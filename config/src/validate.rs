//! The entry point of the semantic checks: [`check`] runs every block's
//! check in order and gathers what compiling needs ([`Checked`]).
//!
//! Every check records its error and goes on with a placeholder value, so a
//! single run reports every problem of the profile; the result is only
//! compiled when no error was recorded. Hosts are checked in `host` (proxy
//! hosts and routes in `route`), upstream groups in `upstream`, `[quota]` in
//! `quota`, `[[rate_limit]]` in `ratelimit`, `[client]` in `client`, the
//! hosts' and routes' gate keys in `gatekeys` (their pairs in `pairs`),
//! `[[access_list]]` in `access`,
//! `[[rule_set]]` in `ruleset`, `[server]` in `server`, limits layers in
//! `limits`, and the layered host-level settings (`[defaults]`,
//! `[[bundle]]`) in `hostlayer` and `blocks`. The leaf checks they share
//! (`choice`, `int_in`, `size_in`) are in `values`.

use crate::access::check_access_lists;
use crate::blocks::{finish, layer_hosts};
use crate::client::check_client;
use crate::env::Environment;
use crate::error::Errors;
use crate::gatekeys::Known;
use crate::host::{check_hosts, CheckedHost};
use crate::hostlayer::Names;
use crate::layer::LimitsLayer;
use crate::limits::check_limits;
use crate::pairs::resolve_policies;
use crate::quota::check_quota;
use crate::ratelimit::check_rate_limits;
use crate::ruleset::check_rule_sets;
use crate::schema::RawProfile;
use crate::server::check_server;
use crate::settings::{RuntimeSettings, Shards};
use crate::upstream::check_upstreams;
use gapura_gate::policy::{GatePolicy, HostExtras};
use gapura_gate::{HostTable, ServerSettings, UpstreamGroup};

/// A profile that passed every check, ready to compile.
pub(crate) struct Checked {
    pub runtime: RuntimeSettings,
    pub server: ServerSettings,
    /// Client resolution, quotas, rate limits and their pairs, per shard.
    pub gate: GatePolicy,
    /// `[defaults.limits]` (not yet merged over the built-ins).
    pub defaults: LimitsLayer,
    pub hosts: HostTable,
    /// One per `[[host]]`, in order: index = `HostId`.
    pub entries: Vec<CheckedHost>,
    /// One per `[[upstream]]`, in order: index = `UpstreamId`.
    pub upstreams: Vec<UpstreamGroup>,
    /// One per `[[host]]`, in order.
    pub extras: Vec<HostExtras>,
    /// One per `[[udp]]`, in order.
    pub udp: Vec<std::sync::Arc<gapura_gate::udp::UdpPolicy>>,
    /// What TLS listeners serve.
    pub tls: Option<std::sync::Arc<gapura_gate::tls::TlsSettings>>,
}

/// Checks the whole profile; `env.cores` is the shard count when `shards`
/// is `"auto"`, `env.resolver` resolves upstream names. The result is
/// meaningful only when `errors` stays empty.
pub(crate) fn check(raw: &RawProfile, env: &Environment<'_>, errors: &mut Errors<'_>) -> Checked {
    let (mut runtime, mut server, proxy_listener, tls_listener) =
        check_server(&raw.server, !raw.udp.is_empty(), errors);
    server.http3 = crate::http3::check_http3(raw.http3.as_ref(), errors);
    let tls = crate::tls::check_tls(
        &raw.certificate,
        raw.tls.as_ref(),
        tls_listener.as_ref(),
        env.certificates,
        errors,
    )
    .map(|t| {
        let mut t = std::sync::Arc::unwrap_or_clone(t);
        t.h2 = server.http2.enabled;
        std::sync::Arc::new(t)
    });
    runtime.acme = crate::acme::check_profile(raw, env.certificates, errors);
    let shards = match runtime.shards {
        Shards::Count(n) => n,
        Shards::Auto => env.cores.max(1),
    };
    let defaults = check_limits(&raw.defaults.limits, "defaults.limits", errors);
    let upstreams = check_upstreams(&raw.upstream, env.resolver, env.certificates, errors);
    runtime.fleet = crate::fleet::check_fleet(raw.fleet.as_ref(), errors);
    let fleet = raw
        .fleet
        .as_ref()
        .map(|_| runtime.fleet.as_ref().map_or(1, |f| f.nodes_expected));
    let quota = check_quota(&raw.quota, (shards, fleet), errors);
    let udp = crate::udp::check_udp(&raw.udp, (shards, fleet), env.resolver, errors);
    runtime.udp_listen = udp.iter().flat_map(|u| u.listen.iter().copied()).collect();
    let rates = check_rate_limits(&raw.rate_limit, shards, fleet, errors);
    let client = check_client(&raw.client, proxy_listener.as_ref(), errors);
    let behind_proxies =
        client.mode != gapura_gate::client::ClientMode::Direct || proxy_listener.is_some();
    crate::ratelimit::warn_per_shard_behind_proxies(&rates, shards, behind_proxies, errors);
    let known = Known {
        rate_limits: &rates.ids,
        operations: &quota.operation_ids,
    };
    let (hosts, mut entries) = check_hosts(&raw.host, &upstreams.ids, &known, errors);
    let lists = check_access_lists(&raw.access_list, &raw.client.mode, env.certificates, errors);
    let sets = check_rule_sets(&raw.rule_set, errors);
    let auth = crate::auth::check_auth_providers(
        &raw.auth_provider,
        env.resolver,
        env.certificates,
        errors,
    );
    let layers = layer_hosts(
        raw,
        &Names {
            lists: &lists.ids,
            allowing: &lists.has_allow,
            sets: &sets,
            known: &known,
            auth: &auth,
        },
        &mut entries,
        errors,
    );
    let names: Vec<String> = rates.defs.iter().map(|d| d.name.clone()).collect();
    let rate_pairs = resolve_policies(
        &mut entries,
        &names,
        quota.sizes.policy_slots,
        quota.policy_slots_at.clone(),
        errors,
    );
    let blocks = finish(raw, (lists, sets, &auth), &layers, &mut entries, errors);
    let gate = GatePolicy {
        client,
        quota_sizes: quota.sizes,
        quota: quota.limits,
        quota_mode: quota.mode,
        identity_header: quota.identity_header,
        tenant_header: quota.dim_headers.0,
        principal_header: quota.dim_headers.1,
        rate_limits: rates.defs,
        rate_pairs,
        operations: quota.operations,
        unknown_host_policy: gapura_gate::policy::RequestPolicy {
            operation: quota.unknown_host_operation,
            ..Default::default()
        },
        unknown_host_pages: blocks.unknown_host_pages,
        connections: quota.connections,
        access_lists: blocks.access_lists,
        rule_sets: blocks.rule_sets,
        rule_set_names: blocks.rule_set_names,
        accept_list: blocks.accept_list,
        pow_key: None,
        pow_in_use: blocks.extras.iter().any(|x| x.pow.is_some()),
        auth_providers: auth.compiled,
    };
    if gate.pow_in_use && runtime.pow_key_file.is_none() {
        errors.warn(
            "server.pow_key_file.missing",
            "server",
            0..0,
            "proof of work is on but [server] pow_key_file is not set: without a key its \
             routes answer 503 (set pow_key_file = \"/var/lib/gapura/pow.key\"; it is created \
             at first start)",
        );
    }
    warn_insecure(raw, &runtime, &entries, &blocks.extras, &gate, errors);
    Checked {
        runtime,
        server,
        gate,
        defaults,
        hosts,
        entries,
        upstreams: upstreams.groups,
        extras: blocks.extras,
        udp,
        tls,
    }
}

/// Warns of hosts a plain-HTTP listener serves without `https_redirect`
/// that ask for a password, call a forward-auth provider
/// (`host.insecure_credentials`: credentials and session cookies would
/// cross the network in cleartext) or set the proof-of-work cookie
/// (`host.insecure_session`). Warnings: a host behind a TLS-terminating
/// load balancer is served over plain HTTP on purpose.
fn warn_insecure(
    raw: &RawProfile,
    runtime: &RuntimeSettings,
    entries: &[CheckedHost],
    extras: &[HostExtras],
    gate: &GatePolicy,
    e: &mut Errors<'_>,
) {
    if runtime.listen.len() <= runtime.tls.len() {
        // Every listener speaks TLS.
        return;
    }
    for (i, ((host, entry), x)) in raw.host.iter().zip(entries).zip(extras).enumerate() {
        if x.https.redirect_port.is_some() {
            continue;
        }
        let routes = match &entry.action {
            crate::host::CheckedAction::Proxy { routes } => routes.as_slice(),
            _ => &[],
        };
        let policies = || std::iter::once(&entry.policy).chain(routes.iter().map(|r| &r.policy));
        let password = policies().any(|p| {
            p.access.is_some_and(|b| {
                gate.access_lists
                    .get(b.index as usize)
                    .is_some_and(|l| !l.users().is_empty())
            })
        });
        let provider = policies().any(|p| p.auth.is_some());
        let pow = x.pow.is_some() || policies().any(|p| p.pow.is_some());
        let what = match (password, provider) {
            (true, true) => Some("asks for a password and calls a forward-auth provider"),
            (true, false) => Some("asks for a password"),
            (false, true) => Some("calls a forward-auth provider with the client's credentials"),
            (false, false) => None,
        };
        if let Some(what) = what {
            e.warn(
                "host.insecure_credentials",
                format!("host[{i}]"),
                host.span(),
                format!(
                    "host {} {what} while a listener without tls = true serves it and it \
                     has no https_redirect: credentials cross the network in cleartext (set \
                     https_redirect = true, or serve it over TLS only)",
                    entry.label
                ),
            );
        }
        if pow {
            e.warn(
                "host.insecure_session",
                format!("host[{i}]"),
                host.span(),
                format!(
                    "host {} sets the proof-of-work cookie while a listener without tls = true \
                     serves it and it has no https_redirect: the cookie travels in cleartext \
                     and is never Secure (set https_redirect = true)",
                    entry.label
                ),
            );
        }
    }
}
