//! The identity step of the chain, on [`Flow`]: the tenant, principal and
//! resource budgets and the tenant and principal leases
//! ([`crate::quota::dims`]), once the identity is derived, after the
//! access list's passwords and forward-auth.
//!
//! Where the values come from: on a route with forward-auth, only from
//! the identity lines the provider's allow copied (a client's own
//! `X-Auth-User` is not believed there); elsewhere from the request's
//! headers, the last line of each, but never a header a provider of the
//! host copies (on its routes without forward-auth a client could
//! otherwise claim a principal and spend its budget). The resource is the route (a
//! host without routes: the host). Keys are keyed hashes in domains of
//! their own; values are never kept. A request without a value for a
//! dimension is not counted in it.

use super::decision::Block;
use super::quota::{refuse_dims, trace_dims_admitted};
use super::steps::{Flow, Next};
use crate::client::HeaderLines;
use crate::quota::{DimRequest, Domain, QuotaTicket};
use crate::upstream::RouteMatch;
use std::ops::ControlFlow;

/// The value of header `name` (lowercase) in identity lines
/// (`Name: value\r\n`), the last one; `None` when absent or empty.
fn line_value<'a>(lines: &'a [u8], name: &str) -> Option<&'a [u8]> {
    lines
        .split(|&b| b == b'\n')
        .rev()
        .filter_map(|l| {
            let l = l.strip_suffix(b"\r").unwrap_or(l);
            let colon = l.iter().position(|&b| b == b':')?;
            l[..colon]
                .eq_ignore_ascii_case(name.as_bytes())
                .then(|| l[colon + 1..].trim_ascii())
        })
        .find(|v| !v.is_empty())
}

/// A dimension's value: from the provider's lines on a route with
/// forward-auth (`provided`); else from the request's headers, unless the
/// header is one a provider of the host copies (`stripped`: a client
/// claiming it would spend that principal's budget).
fn read_value<'v, H: HeaderLines + ?Sized>(
    (provided, stripped): (bool, &[crate::auth::HeaderMatch]),
    lines: Option<&'v [u8]>,
    headers: &'v H,
    name: Option<&'v str>,
) -> Option<&'v [u8]> {
    let name = name?;
    if provided {
        return line_value(lines?, name);
    }
    if stripped.iter().any(|m| m.matches(name.as_bytes())) {
        return None;
    }
    headers.lines(name).last().filter(|v| !v.is_empty())
}

impl<'s, H: HeaderLines + ?Sized, T: super::trace::Trace> Flow<'s, '_, H, T> {
    /// The identity step: runs when the snapshot has an identity dimension.
    #[inline(always)]
    pub(super) fn identity_dims(&mut self) -> Next<'s> {
        if !self.snap.gate.quota.dims.any() {
            return ControlFlow::Continue(());
        }
        self.identity_dims_block()
    }

    /// The work of [`Self::identity_dims`] once it applies.
    #[inline(never)]
    fn identity_dims_block(&mut self) -> Next<'s> {
        let gate = &self.snap.gate;
        let (dims, fleet) = (&gate.quota.dims, &gate.quota.fleet);
        let provided = self.policy.auth.is_some();
        let lines = (self.decision.identity.as_deref()).or(self.state.auth.resumed.as_deref());
        let headers = self.req.headers;
        let stripped = &self.entry.extras.identity_strip[..];
        let read = |name: Option<&'s str>| read_value((provided, stripped), lines, headers, name);
        let keyed =
            |domain: Domain, shared: bool, v: &[u8]| self.state.keyer_for(shared).bytes(domain, v);
        let tenant = read(gate.tenant_header.as_deref())
            .map(|v| keyed(Domain::Tenant, fleet.tenant.is_some(), v));
        let principal = read(gate.principal_header.as_deref())
            .map(|v| keyed(Domain::Principal, fleet.principal.is_some(), v));
        let resource = dims.resource.map(|_| {
            let path = match self.route.map(|r| &r.matcher) {
                Some(RouteMatch::Exact(p)) | Some(RouteMatch::Prefix(p)) => p.as_bytes(),
                None => b"",
            };
            let mut h = crate::hash::Fnv1a::new();
            h.write(self.entry.label.as_bytes());
            h.write(&[0xFF]);
            h.write(path);
            keyed(
                Domain::Resource,
                fleet.resource.is_some(),
                &h.finish().to_le_bytes(),
            )
        });
        let request = DimRequest {
            class: self.policy.class,
            tenant,
            principal,
            resource,
        };
        let now_ms = if fleet.any() {
            self.now_ms.saturating_add(self.state.unix_origin_ms)
        } else {
            self.now_ms
        };
        let state = &mut *self.state;
        let admitted = state
            .quota
            .admit_dims(&gate.quota, &request, &mut state.fleet, now_ms);
        let refusal = match admitted {
            Ok(ticket) => {
                self.decision.ticket = QuotaTicket::merge(self.decision.ticket, ticket);
                trace_dims_admitted(self.trace);
                return ControlFlow::Continue(());
            }
            Err(refusal) => refusal,
        };
        match refuse_dims(self.state, refusal, gate.quota_mode, self.trace) {
            Ok(()) => ControlFlow::Continue(()),
            Err(retry_after_s) => {
                self.decision.policy = Some(refusal.level.name());
                self.decision.step = Block::Identity;
                self.too_many(retry_after_s)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::line_value;

    #[test]
    fn a_providers_line_is_found_by_name_the_last_one() {
        let lines = b"X-Auth-User: alice\r\nX-Tenant: acme\r\nx-tenant:  beta \r\n";
        assert_eq!(line_value(lines, "x-tenant"), Some(&b"beta"[..]));
        assert_eq!(line_value(lines, "x-auth-user"), Some(&b"alice"[..]));
        assert_eq!(line_value(lines, "x-group"), None);
        assert_eq!(line_value(b"X-Tenant:\r\n", "x-tenant"), None);
    }
}
