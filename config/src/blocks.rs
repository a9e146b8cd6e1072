//! Layering hosts over `[defaults]` and their bundle, and compiling what
//! they use: access lists, rule sets, robots.txt, maintenance and error
//! pages.
//!
//! [`layer_hosts`] runs before the rate-limit pairs are made: it stacks
//! each host's settings (defaults → bundle → host), lays the bundle's limits
//! under the host's (the defaults' are laid under both when the snapshot is
//! compiled, so a profile without bundles compiles exactly as before) and
//! gives the host the rate limit and class its layers name. [`finish`] runs
//! after: it resolves every host's and route's access list and rule set,
//! puts the lists and sets that anything uses into the snapshot in a stable
//! order (profile order; presets after the profile's own sets, in
//! [`Preset::ALL`] order), and compiles each host's [`HostExtras`].

use crate::access::AccessLists;
use crate::error::Errors;
use crate::extras::ExtrasCx;
use crate::host::{CheckedAction, CheckedHost};
use crate::hostlayer::{check_route_blocks, BlockLayer, LayerFields, Names, RouteBlocks};
use crate::hostsettings::{check_layer, host_extras, SettingsLayer};
use crate::layer::LimitsLayer;
use crate::names::{known_list, valid_policy_name};
use crate::pow::compile_pow;
use crate::rawblocks::RawBundle;
use crate::ruleset::{RuleSets, SetTarget};
use crate::schema::{RawHost, RawProfile};
use gapura_gate::access::AccessList;
use gapura_gate::mode::Mode;
use gapura_gate::policy::{BlockRef, HostExtras};
use gapura_gate::ruleset::{Preset, RuleSet};
use std::collections::{HashMap, HashSet};
use toml::Spanned;

/// Every host's layered settings.
pub(crate) struct HostLayers {
    /// Per host: defaults → bundle → host.
    pub hosts: Vec<SettingsLayer>,
    /// Per host, one per route of a proxy host (none otherwise).
    pub routes: Vec<Vec<RouteBlocks>>,
    /// `[defaults]` alone: what a request no host takes is answered by.
    pub defaults: SettingsLayer,
}

/// Checks `[defaults]`, the bundles and every host's own settings, stacks
/// them, and applies the stacked limits, rate limit and class to
/// `entries` (one per `raw.host`, in order).
pub(crate) fn layer_hosts(
    raw: &RawProfile,
    names: &Names<'_>,
    entries: &mut [CheckedHost],
    e: &mut Errors<'_>,
) -> HostLayers {
    let defaults = check_layer(&LayerFields::defaults(&raw.defaults), "defaults", names, e);
    let bundles = check_bundles(&raw.bundle, names, e);
    let mut layers = HostLayers {
        hosts: Vec::with_capacity(entries.len()),
        routes: Vec::with_capacity(entries.len()),
        defaults: SettingsLayer::default(),
    };
    for (i, (h, entry)) in raw.host.iter().zip(entries.iter_mut()).enumerate() {
        let base = format!("host[{i}]");
        let h: &RawHost = h.get_ref();
        let bundle = match &h.uses {
            None => SettingsLayer::default(),
            Some(u) => match bundles.ids.get(u.get_ref()) {
                Some(&b) => bundles.layers[b].clone(),
                None => {
                    e.push(
                        "host.bundle.unknown",
                        format!("{base}.use"),
                        u.span(),
                        format!(
                            "no [[bundle]] is named {:?} ({})",
                            u.get_ref(),
                            known_list(&bundles.ids, "bundle")
                        ),
                    );
                    SettingsLayer::default()
                }
            },
        };
        let own = check_layer(&LayerFields::host(h), &base, names, e);
        let below = SettingsLayer::merge(&defaults, &bundle);
        entry.limits = LimitsLayer::merge(bundle.limits, entry.limits);
        if entry.refs.rate_limit.is_none() {
            if let Some((limit, at, path)) = below.rate_limit.clone() {
                entry.refs.rate_limit = Some((limit, at));
                entry.refs.rate_limit_path = Some(path);
            }
        }
        entry.refs.class = entry.refs.class.or(below.class);
        let routes = match entry.action {
            CheckedAction::Proxy { .. } => h
                .route
                .iter()
                .enumerate()
                .map(|(j, r)| {
                    check_route_blocks(r.get_ref(), &format!("{base}.route[{j}]"), names, e)
                })
                .collect(),
            _ => Vec::new(),
        };
        layers.hosts.push(SettingsLayer::merge(&below, &own));
        layers.routes.push(routes);
    }
    layers.defaults = defaults;
    layers
}

/// The checked bundles, in profile order, and each valid name's position.
pub(crate) struct Bundles {
    pub layers: Vec<SettingsLayer>,
    pub ids: HashMap<String, usize>,
}

/// Checks every `[[bundle]]`: its name and its settings.
pub(crate) fn check_bundles(
    raw: &[Spanned<RawBundle>],
    names: &Names<'_>,
    e: &mut Errors<'_>,
) -> Bundles {
    let mut bundles = Bundles {
        layers: Vec::with_capacity(raw.len()),
        ids: HashMap::new(),
    };
    for (i, b) in raw.iter().enumerate() {
        let base = format!("bundle[{i}]");
        let span = b.span();
        let b = b.get_ref();
        let path = format!("{base}.name");
        match &b.name {
            None => e.push(
                "bundle.name.required",
                path,
                span,
                "a bundle needs a name that hosts use, such as name = \"public-site\"",
            ),
            Some(n) if !valid_policy_name(n.get_ref()) => e.push(
                "bundle.name.invalid",
                path,
                n.span(),
                format!(
                    "{:?} is not a bundle name: use 1 to 64 of a-z, 0-9, '_' and '-'",
                    n.get_ref()
                ),
            ),
            Some(n) => match bundles.ids.get(n.get_ref()) {
                Some(first) => e.push(
                    "bundle.name.duplicate",
                    path,
                    n.span(),
                    format!("{:?} is already the name of bundle[{first}]", n.get_ref()),
                ),
                None => {
                    bundles.ids.insert(n.get_ref().clone(), i);
                }
            },
        }
        bundles
            .layers
            .push(check_layer(&LayerFields::bundle(b), &base, names, e));
    }
    bundles
}

/// What the snapshot's policy and hosts get from the blocks.
pub(crate) struct Blocks {
    pub access_lists: Vec<AccessList>,
    pub rule_sets: Vec<RuleSet>,
    pub rule_set_names: Vec<String>,
    pub accept_list: Option<u32>,
    /// One per host, in order.
    pub extras: Vec<HostExtras>,
    /// `[defaults]`' error pages: a request no host takes gets them.
    pub unknown_host_pages: Option<gapura_gate::custom_pages::CustomPages>,
}

type Effective = (Option<(usize, Mode)>, Option<(SetTarget, Mode)>);

fn effective(access: &BlockLayer<usize>, rules: &BlockLayer<SetTarget>) -> Effective {
    (access.effective(), rules.effective())
}

/// Resolves every host's and route's blocks into `entries` and builds the
/// snapshot's lists, sets and host extras: the list checked at accept, the
/// blocks in force per host and route, the lists and sets they use (only
/// those reach the snapshot, in profile order), then each host's references
/// and extras.
pub(crate) fn finish(
    raw: &RawProfile,
    (lists, sets, auth): (AccessLists, RuleSets, &crate::auth::AuthProviders),
    layers: &HostLayers,
    entries: &mut [CheckedHost],
    e: &mut Errors<'_>,
) -> Blocks {
    let mut used_lists = vec![false; lists.compiled.len()];
    let mut used_sets: HashSet<SetTarget> = HashSet::new();
    let accept = accept_list(raw, &lists, e);
    if let Some(d) = accept {
        used_lists[d] = true;
    }
    let hosts = blocks_in_force(layers, &mut used_lists, &mut used_sets);
    let (access_lists, list_index) = used_access_lists(lists.compiled, &used_lists);
    let (rule_sets, rule_set_names, set_index) = used_rule_sets(sets, &used_sets);

    let access_ref = |a: &Option<(usize, Mode)>| {
        a.and_then(|(d, mode)| list_index[d].map(|index| BlockRef { index, mode }))
    };
    let rules_ref = |r: &Option<(SetTarget, Mode)>| {
        r.and_then(|(t, mode)| set_index.get(&t).map(|&index| BlockRef { index, mode }))
    };
    let mut reported = HashSet::new();
    let mut extras = Vec::with_capacity(entries.len());
    for (i, (entry, (own, routes))) in entries.iter_mut().zip(&hosts).enumerate() {
        entry.policy.access = access_ref(&own.0);
        entry.policy.rules = rules_ref(&own.1);
        if let CheckedAction::Proxy { routes: checked } = &mut entry.action {
            for (r, (access, rules)) in checked.iter_mut().zip(routes) {
                r.policy.access = access_ref(access);
                r.policy.rules = rules_ref(rules);
            }
        }
        let mut x = host_extras(
            &layers.hosts[i],
            &mut ExtrasCx {
                list_index: &list_index,
                base: &format!("host[{i}]"),
                span: raw.host.get(i).map_or(0..0, Spanned::span),
                reported: &mut reported,
                e,
            },
        );
        x.pow = route_pow(i, entry, &layers.hosts[i], &layers.routes[i], &set_index, e);
        x.identity_strip = route_auth(entry, &layers.hosts[i], &layers.routes[i], auth);
        extras.push(x);
    }
    Blocks {
        access_lists,
        rule_sets,
        rule_set_names,
        accept_list: accept.and_then(|d| list_index[d]),
        extras,
        unknown_host_pages: crate::extras::compile_pages(&layers.defaults.pages),
    }
}

/// Proof of work on each route of a proxy host (the host's settings, the
/// route's switch); the host's settings when any route has it, for its
/// verify endpoint. A route whose `when` names a set it does not apply is
/// never challenged: a warning says so.
fn route_pow(
    i: usize,
    entry: &mut CheckedHost,
    host: &SettingsLayer,
    routes: &[RouteBlocks],
    set_index: &HashMap<SetTarget, u32>,
    e: &mut Errors<'_>,
) -> Option<gapura_gate::pow::ProofOfWork> {
    let CheckedAction::Proxy { routes: checked } = &mut entry.action else {
        return None;
    };
    let mut any = false;
    for (j, (r, blocks)) in checked.iter_mut().zip(routes).enumerate() {
        r.policy.pow = compile_pow(&host.pow, blocks.pow, &entry.label, set_index);
        let Some(pow) = r.policy.pow else {
            continue;
        };
        any = true;
        if let Some(w) = &host.pow.when {
            if r.policy.rules.map(|b| b.index) != pow.when {
                e.warn(
                    "route.proof_of_work.when.unapplied",
                    format!("host[{i}].route[{j}]"),
                    w.span.clone(),
                    format!(
                        "{} asks proof of work of requests rule set {:?} marks, but this route \
                         does not apply that set: none of its requests will be challenged",
                        w.path, w.name
                    ),
                );
            }
        }
    }
    any.then(|| crate::pow::settings(&host.pow, &entry.label, set_index))
}

/// Each proxy route's forward-auth provider (its own, else the host's);
/// the identity headers of every provider the routes ask, which the host
/// removes from what clients send on all its routes.
fn route_auth(
    entry: &mut CheckedHost,
    host: &SettingsLayer,
    routes: &[RouteBlocks],
    auth: &crate::auth::AuthProviders,
) -> Vec<gapura_gate::auth::HeaderMatch> {
    let CheckedAction::Proxy { routes: checked } = &mut entry.action else {
        return Vec::new();
    };
    let mut strip = Vec::new();
    for (r, blocks) in checked.iter_mut().zip(routes) {
        r.policy.auth = blocks.auth.or(host.auth).flatten().map(|index| BlockRef {
            index,
            mode: blocks.auth_mode.or(host.auth_mode).unwrap_or_default(),
        });
        if let Some(p) = r
            .policy
            .auth
            .and_then(|b| auth.compiled.get(b.index as usize))
        {
            for m in &p.copy {
                if !strip.contains(m) {
                    strip.push(m.clone());
                }
            }
        }
    }
    strip
}

/// `server.access_list`: a known list with addresses to refuse by.
fn accept_list(raw: &RawProfile, lists: &AccessLists, e: &mut Errors<'_>) -> Option<usize> {
    let a = raw.server.access_list.as_ref()?;
    match lists.ids.get(a.get_ref()) {
        None => {
            e.push(
                "server.accessList.unknown",
                "server.access_list",
                a.span(),
                format!(
                    "no [[access_list]] is named {:?} ({})",
                    a.get_ref(),
                    known_list(&lists.ids, "access_list")
                ),
            );
            None
        }
        Some(&d) if !lists.has_addresses[d] => {
            e.push(
                "server.accessList.noAddresses",
                "server.access_list",
                a.span(),
                format!(
                    "the list checked at accept refuses by address only, and \
                     access_list[{d}] ({:?}) has no allow or deny addresses",
                    a.get_ref()
                ),
            );
            None
        }
        Some(&d) => Some(d),
    }
}

/// Every host's and route's blocks in force, marking the lists and sets
/// they (and maintenance bypasses) use.
fn blocks_in_force(
    layers: &HostLayers,
    used_lists: &mut [bool],
    used_sets: &mut HashSet<SetTarget>,
) -> Vec<(Effective, Vec<Effective>)> {
    let mut hosts = Vec::with_capacity(layers.hosts.len());
    for (host, routes) in layers.hosts.iter().zip(&layers.routes) {
        let own = effective(&host.access, &host.rules);
        let routes: Vec<Effective> = routes
            .iter()
            .map(|r| {
                effective(
                    &BlockLayer::merge(host.access, r.access),
                    &BlockLayer::merge(host.rules, r.rules),
                )
            })
            .collect();
        for (access, rules) in std::iter::once(&own).chain(&routes) {
            if let Some((d, _)) = access {
                used_lists[*d] = true;
            }
            if let Some((t, _)) = rules {
                used_sets.insert(*t);
            }
        }
        if host.maintenance.enabled == Some(true) {
            if let Some(d) = host.maintenance.bypass {
                used_lists[d] = true;
            }
        }
        hosts.push((own, routes));
    }
    hosts
}

/// The used access lists in profile order, and each list's index among
/// them (`None`: unused).
fn used_access_lists(
    compiled: Vec<Option<AccessList>>,
    used: &[bool],
) -> (Vec<AccessList>, Vec<Option<u32>>) {
    let mut list_index: Vec<Option<u32>> = vec![None; compiled.len()];
    let mut access_lists = Vec::new();
    for (d, list) in compiled.into_iter().enumerate() {
        if let (true, Some(list)) = (used[d], list) {
            list_index[d] = Some(index(access_lists.len()));
            access_lists.push(list);
        }
    }
    (access_lists, list_index)
}

/// The used rule sets, the profile's in order then the presets, with their
/// names and each one's index among them.
fn used_rule_sets(
    sets: RuleSets,
    used: &HashSet<SetTarget>,
) -> (Vec<RuleSet>, Vec<String>, HashMap<SetTarget, u32>) {
    let mut set_index: HashMap<SetTarget, u32> = HashMap::new();
    let mut rule_sets = Vec::new();
    let mut rule_set_names = Vec::new();
    for (d, (set, name)) in sets.compiled.into_iter().zip(sets.names).enumerate() {
        if let (true, Some(set)) = (used.contains(&SetTarget::User(d)), set) {
            set_index.insert(SetTarget::User(d), index(rule_sets.len()));
            rule_sets.push(set);
            rule_set_names.push(name);
        }
    }
    for p in Preset::ALL {
        if used.contains(&SetTarget::Preset(p)) {
            set_index.insert(SetTarget::Preset(p), index(rule_sets.len()));
            rule_sets.push(p.compile());
            rule_set_names.push(p.name().to_string());
        }
    }
    (rule_sets, rule_set_names, set_index)
}

fn index(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}
