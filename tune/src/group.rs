//! Which host and route a line belongs to.
//!
//! With a profile, the host is the one the gate picks for the line's `host`
//! ([`HostTable::lookup`](gapura_gate::HostTable::lookup): exact names,
//! then the longest wildcard, then the default host) and, on a proxy host,
//! the route is the one the gate picks for the canonical path
//! ([`gapura_gate::path::canonical`], then [`ProxyHost::route`](gapura_gate::ProxyHost::route)).
//! A line no host takes is in host `(no host)`; a respond or redirect
//! host, a path without a canonical form or a path no route takes has
//! route `*`. Without a profile the group is the `host` as logged, in
//! ASCII lowercase without its port, and the route is `*`.
//!
//! At most `max_groups` groups are kept; lines of any further group go to
//! one group, host `(other)` route `*`, counted apart.

use gapura_config::Compiled;
use gapura_gate::path::{canonical, PathScratch, MAX_PATH_BYTES};
use gapura_gate::upstream::RouteMatch;
use gapura_gate::HostAction;
use std::collections::HashMap;

/// The host label of lines no host of the profile takes.
pub const NO_HOST: &str = "(no host)";
/// The host label of the group past the limit.
pub const OTHER: &str = "(other)";

/// A group's names, as the report shows them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupName {
    pub host: String,
    /// `*` (all paths), a prefix route's path, or `= PATH` for an exact one.
    pub route: String,
}

/// Maps lines to group numbers (0..).
pub struct Grouper<'p> {
    profile: Option<&'p Compiled>,
    by_route: HashMap<(u32, u32), u32>,
    by_host: HashMap<Vec<u8>, u32>,
    names: Vec<GroupName>,
    other: Option<u32>,
    max_groups: usize,
    scratch: Box<PathScratch>,
}

const NO_ID: u32 = u32::MAX;

impl<'p> Grouper<'p> {
    pub fn new(profile: Option<&'p Compiled>, max_groups: usize) -> Self {
        Grouper {
            profile,
            by_route: HashMap::new(),
            by_host: HashMap::new(),
            names: Vec::new(),
            other: None,
            max_groups: max_groups.max(1),
            scratch: Box::new([0; MAX_PATH_BYTES]),
        }
    }

    /// Every group's names, by group number.
    pub fn names(&self) -> &[GroupName] {
        &self.names
    }

    /// The group of a line's host and path.
    pub fn group(&mut self, host: &[u8], path: &[u8]) -> u32 {
        match self.profile {
            Some(p) => self.profile_group(p, host, path),
            None => self.host_group(host),
        }
    }

    fn add(&mut self, name: GroupName) -> Option<u32> {
        if self.names.len() >= self.max_groups {
            return None;
        }
        self.names.push(name);
        Some((self.names.len() - 1) as u32)
    }

    fn other(&mut self) -> u32 {
        if let Some(o) = self.other {
            return o;
        }
        self.names.push(GroupName {
            host: OTHER.into(),
            route: "*".into(),
        });
        let o = (self.names.len() - 1) as u32;
        self.other = Some(o);
        o
    }

    fn host_group(&mut self, host: &[u8]) -> u32 {
        let host = strip_port(host);
        if let Some(&g) = self.by_host.get(host) {
            return g;
        }
        let key = host.to_ascii_lowercase();
        if let Some(&g) = self.by_host.get(&key) {
            return g;
        }
        let name = GroupName {
            host: String::from_utf8_lossy(&key).into_owned(),
            route: "*".into(),
        };
        match self.add(name) {
            Some(g) => {
                self.by_host.insert(key, g);
                g
            }
            None => self.other(),
        }
    }

    fn profile_group(&mut self, p: &Compiled, host: &[u8], path: &[u8]) -> u32 {
        let snap = &p.snapshot;
        let host_id = snap.hosts.lookup(Some(host));
        let entry = host_id.and_then(|h| snap.entries.get(h as usize));
        let route = match entry.map(|e| &e.action) {
            Some(HostAction::Proxy(proxy)) => canonical(path, &mut self.scratch)
                .ok()
                .and_then(|c| proxy.route(c))
                .and_then(|r| proxy.routes.iter().position(|x| std::ptr::eq(x, r))),
            _ => None,
        };
        let key = (host_id.unwrap_or(NO_ID), route.map_or(NO_ID, |r| r as u32));
        if let Some(&g) = self.by_route.get(&key) {
            return g;
        }
        let route_name = match (entry.map(|e| &e.action), route) {
            (Some(HostAction::Proxy(proxy)), Some(r)) => match &proxy.routes[r].matcher {
                RouteMatch::Prefix(p) => p.clone(),
                RouteMatch::Exact(p) => format!("= {p}"),
            },
            _ => "*".into(),
        };
        let name = GroupName {
            host: entry.map_or_else(|| NO_HOST.to_string(), |e| e.label.clone()),
            route: route_name,
        };
        match self.add(name) {
            Some(g) => {
                self.by_route.insert(key, g);
                g
            }
            None => self.other(),
        }
    }
}

/// The host without a `:port` (an IPv6 literal keeps its brackets).
fn strip_port(host: &[u8]) -> &[u8] {
    let host = host.trim_ascii();
    if host.first() == Some(&b'[') {
        return match host.iter().position(|&b| b == b']') {
            Some(end) => &host[..=end],
            None => host,
        };
    }
    match host.iter().rposition(|&b| b == b':') {
        Some(colon) => &host[..colon],
        None => host,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_profile_hosts_group_and_fold_past_the_limit() {
        let mut g = Grouper::new(None, 2);
        assert_eq!(g.group(b"A.test:8080", b"/x"), 0);
        assert_eq!(g.group(b"a.test", b"/y"), 0);
        assert_eq!(g.group(b"[::1]:80", b"/"), 1);
        assert_eq!(g.group(b"c.test", b"/"), 2);
        assert_eq!(g.group(b"d.test", b"/"), 2);
        assert_eq!(g.names()[1].host, "[::1]");
        assert_eq!(g.names()[2].host, OTHER);
    }
}
