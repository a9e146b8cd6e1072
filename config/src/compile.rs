//! Turns a checked profile into the gate's snapshot.
//!
//! Nothing here can fail: every value was checked by `validate` and `host`.
//! This is where the limit layers are stacked (built-in, then defaults, then
//! the host, then a proxy route's own layer) and where every fixed answer is
//! rendered into bytes.

use crate::error::ProfileError;
use crate::host::CheckedAction;
use crate::layer::LimitsLayer;
use crate::settings::RuntimeSettings;
use crate::validate::Checked;
use gapura_gate::snapshot::HostEntry;
use gapura_gate::{Answer, ErrorPages, HostAction, ProxyHost, Redirect, Route, Snapshot};

/// A compiled profile: what the runtime applies and what the gate decides on.
#[derive(Clone, Debug)]
pub struct Compiled {
    pub runtime: RuntimeSettings,
    /// Generation 0; the runtime sets it when it publishes.
    pub snapshot: gapura_gate::Snapshot,
    /// What loads but deserves a look (a user without a password hash, an
    /// access list that names nothing), in source order, each with its
    /// code, key path and position.
    pub warnings: Vec<ProfileError>,
    /// The protection dimensions `[protection] off` turned off (every other
    /// one is written or defaulted).
    pub protection_off: Vec<&'static str>,
}

/// Builds the snapshot (generation 0) and the runtime settings. Allocates
/// every answer's bytes; O(profile).
pub(crate) fn compile(c: Checked) -> Compiled {
    let defaults = LimitsLayer::merge(LimitsLayer::builtin(), c.defaults);
    let entries = c
        .entries
        .into_iter()
        .zip(c.extras)
        .map(|(h, extras)| {
            let host = LimitsLayer::merge(defaults, h.limits);
            HostEntry {
                label: h.label,
                limits: host.resolve(),
                action: action(h.action, host),
                policy: h.policy,
                extras,
            }
        })
        .collect();
    Compiled {
        runtime: c.runtime,
        snapshot: Snapshot {
            generation: 0,
            server: c.server,
            hosts: c.hosts,
            entries,
            default_limits: defaults.resolve(),
            pages: ErrorPages::builtin(),
            upstreams: c.upstreams,
            gate: c.gate,
            udp: c.udp,
            tls: c.tls,
            acme: Default::default(),
        },
        warnings: Vec::new(),
        protection_off: Vec::new(),
    }
}

/// `host` is the host's limits, resolved down to the built-ins.
fn action(a: CheckedAction, host: LimitsLayer) -> HostAction {
    match a {
        CheckedAction::Respond {
            status,
            content_type,
            headers,
            body,
        } => {
            let mut all: Vec<(&str, &str)> = Vec::with_capacity(headers.len() + 1);
            all.push(("Content-Type", &content_type));
            all.extend(headers.iter().map(|(n, v)| (n.as_str(), v.as_str())));
            HostAction::Respond(Answer::new(status, &all, body.as_bytes()))
        }
        CheckedAction::Redirect {
            status,
            target,
            keep,
            headers,
        } => {
            let extra: Vec<(&str, &str)> = headers
                .iter()
                .map(|(n, v)| (n.as_str(), v.as_str()))
                .collect();
            HostAction::Redirect(Redirect::new(status, &target, keep, &extra))
        }
        CheckedAction::Proxy { routes } => {
            let routes: Vec<Route> = routes
                .into_iter()
                .map(|r| Route {
                    matcher: r.matcher,
                    upstream: r.upstream,
                    limits: LimitsLayer::merge(host, r.limits).resolve(),
                    websocket: r.websocket,
                    request_id: r.request_id,
                    policy: r.policy,
                })
                .collect();
            // Route paths passed the same pattern check in validation.
            HostAction::Proxy(ProxyHost::new(routes).unwrap_or_default())
        }
    }
}
