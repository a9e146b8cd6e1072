//! The per-step reference: the embedded default profile (its protective
//! defaults: global and per-network budgets and concurrency, connection
//! limits, the per-client rate limit), compiled by `gapura-config` as on a
//! 2-core machine with 8 GiB, with a proxy host `app.test` beside its
//! `respond` host and each step's policy added on that host on demand.
//!
//! The reference request is the one every variant is asked: `GET
//! /products/item-42?x=1` over TLS from 203.0.113.7 (connected directly),
//! with eight typical header lines (a browser's `User-Agent`, `Accept`,
//! `Accept-Language`, `Accept-Encoding`, a `Cookie` carrying a valid proof
//! of work cookie, `Authorization` for the password list and the forward
//! auth's remembered allow). Every variant lets it through to its answer.
//!
//! Every policy and remembered fact is written so that the request passes
//! each step's full work (no refusal, no early exit): the address list
//! does not list the client, the rule set matches nothing, the password is
//! in the verification cache, the provider's allow is remembered, the
//! cookie is valid, maintenance is on with the client on its bypass list.

use crate::reference::CHROME;
use gapura_config::{compile_with, Environment, NoFiles, NoNames, DEFAULT_PROFILE};
use gapura_gate::access::password::hash_password;
use gapura_gate::auth::{AuthJob, KeyFacts};
use gapura_gate::chain::{Block, Decision, GateState, NoTrace, Request, Trace};
use gapura_gate::client::Peer;
use gapura_gate::host::HostAction;
use gapura_gate::path::{PathScratch, MAX_PATH_BYTES};
use gapura_gate::pow::{mint_cookie, PowKey};
use gapura_gate::quota::Bucket;
use gapura_gate::{Snapshot, Verdict};
use std::cell::Cell;
use std::net::IpAddr;
use std::sync::{Arc, OnceLock};

/// A step's policy the reference adds to the default profile's, on the
/// proxy host. Steps 2, 3, 8 and 16 (client, host, request limits,
/// answer) and the path and route always run; steps 4 and 13 (budgets,
/// the client rate limit) are the default profile's own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// Step 5: `connection_rate = { requests = 1000, burst = 2000 }`.
    ConnectionRate,
    /// Step 6: an access list of address refusals only (four networks,
    /// none the client's): decided whole at step 6, step 12 skipped.
    AccessAddress,
    /// Step 7: the example profile's `edge` set (an exact allow, a prefix
    /// with methods, a glob, a regex, a user-agent rule).
    RuleSet,
    /// Step 9: `https_redirect = true` (the request came over TLS).
    HttpsRedirect,
    /// Step 10: `robots = "block_ai_crawlers"` (not a robots.txt request).
    Robots,
    /// Step 11: maintenance on, the client on the bypass list.
    Maintenance,
    /// Steps 6 and 12: an access list with the address refusals and a
    /// user, `satisfy = "all"`: the password is checked, a verification
    /// cache hit.
    AccessPassword,
    /// Step 14: forward-auth, a remembered allow at host grain.
    ForwardAuth,
    /// Step 15: the identity dimensions: a principal's budget and lease
    /// (from the provider's `Remote-User` when forward-auth is on) and a
    /// resource's budget.
    Identity,
    /// Step 16: proof of work on every request, a valid cookie.
    ProofOfWork,
}

/// Every policy, in the chain's order.
pub const ALL: [Policy; 10] = [
    Policy::ConnectionRate,
    Policy::AccessAddress,
    Policy::RuleSet,
    Policy::HttpsRedirect,
    Policy::Robots,
    Policy::Maintenance,
    Policy::AccessPassword,
    Policy::ForwardAuth,
    Policy::Identity,
    Policy::ProofOfWork,
];

/// The reference user's password.
pub const PASSWORD: &str = "correct horse";
/// `Authorization` for `alice:correct horse`.
pub const AUTHORIZATION: &[u8] = b"Basic YWxpY2U6Y29ycmVjdCBob3JzZQ==";
/// The client: directly connected (the default profile trusts no proxy).
pub const CLIENT: &str = "203.0.113.7";
/// The reference request's target.
pub const TARGET: &[u8] = b"/products/item-42?x=1";
/// The proof-of-work key the reference sets (the runtime reads it from a
/// file).
pub const POW_KEY: [u8; 32] = [8; 32];
/// Unix milliseconds at the shard's clock 0.
pub const UNIX_ORIGIN_MS: u64 = 1_800_000_000_000;

/// The profile text: the embedded default profile, the proxy host with the
/// `added` policies, the tables they name, and `[protection] off = off`.
pub fn profile(added: &[Policy], off: &[&str]) -> String {
    let has = |p| added.contains(&p);
    let mut host = String::new();
    let mut tables = String::new();
    if has(Policy::ConnectionRate) {
        host += "connection_rate = { requests = 1000, burst = 2000 }\n";
    }
    let deny =
        r#"deny = ["198.51.100.0/24", "192.0.2.0/24", "2001:db8:bad::/48", "100.64.0.0/10"]"#;
    if has(Policy::AccessPassword) {
        // PBKDF2 at 100,000 iterations: once a process.
        static HASH: OnceLock<String> = OnceLock::new();
        let hash =
            HASH.get_or_init(|| hash_password(PASSWORD.as_bytes(), 100_000, b"reference-salt"));
        host += "access_list = \"office\"\n";
        tables += &format!(
            "[[access_list]]\nname = \"office\"\n{deny}\nsatisfy = \"all\"\n\
             users = [{{ name = \"alice\", password_hash = \"{hash}\" }}]\n\n"
        );
    } else if has(Policy::AccessAddress) {
        host += "access_list = \"blocklist\"\n";
        tables += &format!("[[access_list]]\nname = \"blocklist\"\n{deny}\n\n");
    }
    if has(Policy::RuleSet) {
        host += "rule_set = \"edge\"\n";
        tables += r#"[[rule_set]]
name = "edge"

[[rule_set.rule]]
path.exact = "/admin/health"
action = "allow"

[[rule_set.rule]]
path.prefix = "/admin"
methods = ["POST", "PUT", "DELETE"]
action = "deny"

[[rule_set.rule]]
path.glob = "/**/.env"
action = "drop"

[[rule_set.rule]]
path.regex = '\.(bak|old|swp)$'
action = "deny"

[[rule_set.rule]]
user_agent = { contains = ["sqlmap", "nikto"], empty = true }
action = "deny"

"#;
    }
    if has(Policy::HttpsRedirect) {
        host += "https_redirect = true\n";
    }
    if has(Policy::Robots) {
        host += "robots = \"block_ai_crawlers\"\n";
    }
    if has(Policy::ForwardAuth) {
        host += "auth = \"sso\"\n";
        tables += "[[auth_provider]]\nname = \"sso\"\nurl = \"http://127.0.0.1:9091\"\n\
                   preset = \"authelia\"\ncopy_headers = [\"Remote-User\"]\n\
                   cache = { ttl_ms = 300000, entries = 4096, scope = \"host\" }\n\n";
    }
    if has(Policy::ProofOfWork) {
        host += "proof_of_work = { enabled = true, difficulty = 16 }\n";
    }
    if has(Policy::Identity) {
        tables += "[quota.principal]\nheader = \"remote-user\"\nrequests = 1000000000\n\
                   concurrent = 1000\n\n[quota.resource]\nrequests = 1000000000\n\n";
    }
    if has(Policy::Maintenance) {
        host += "[host.maintenance]\nenabled = true\nbypass = \"staff\"\n";
        tables += "[[access_list]]\nname = \"staff\"\nallow = [\"203.0.113.0/24\"]\n\n";
    }
    let off = off
        .iter()
        .map(|d| format!("\"{d}\""))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "{DEFAULT_PROFILE}\n[protection]\noff = [{off}]\n\n\
         [[host]]\nnames = [\"app.test\"]\nkind = \"proxy\"\n{host}\n\
         [[host.route]]\npath = \"/\"\nupstream = \"app\"\n\n\
         [[upstream]]\nname = \"app\"\nservers = [\"127.0.0.1:9000\"]\n\n{tables}"
    )
}

/// A compiled reference and a shard's state for it, with the facts a
/// warm shard remembers (the verified password, the provider's allow).
pub struct Reference {
    pub snap: Snapshot,
    pub state: GateState,
    pub scratch: Box<PathScratch>,
    /// The request bucket of the request's connection (step 5).
    pub connection: Cell<Bucket>,
    /// The request's header lines (the proof-of-work cookie is minted for
    /// this snapshot's key).
    pub headers: [(&'static str, Vec<u8>); 8],
    /// [`Reference::header_bytes`] of `headers`.
    pub header_bytes: usize,
    /// The client, connected directly.
    pub peer: Peer,
    /// When the provider's allow was last remembered.
    pub remembered_ms: u64,
    /// The shard's clock: [`Reference::decide`] moves it 10 ms a request,
    /// the per-client rate limit's pace, so no budget or limit refuses.
    pub now_ms: u64,
}

/// Compiles `profile(added, off)` on 2 cores and 8 GiB.
pub fn compile(added: &[Policy], off: &[&str]) -> Snapshot {
    let env = Environment {
        cores: 2,
        memory_bytes: 8 << 30,
        resolver: &NoNames,
        certificates: &NoFiles,
    };
    let src = profile(added, off);
    let mut snap = match compile_with(&src, &env) {
        Ok(c) => c.snapshot,
        Err(e) => panic!("the reference profile compiles: {e:#?}\n{src}"),
    };
    snap.generation = 1;
    snap.gate.pow_key = Some(PowKey::new(&POW_KEY));
    snap
}

impl Reference {
    /// The reference with the `added` policies, the default profile's
    /// protections less `off`, warmed: one decision made, the password
    /// verified, the provider's allow remembered.
    pub fn new(added: &[Policy], off: &[&str]) -> Reference {
        let snap = compile(added, off);
        let mut state =
            GateState::new(&snap.gate.quota_sizes, [0x5a; 16]).expect("the profile's sizes");
        state.unix_origin_ms = UNIX_ORIGIN_MS;
        state.adopt(&snap, 0);
        let client: IpAddr = CLIENT.parse().expect("literal");
        let pow_host = proxy_route_pow_host(&snap);
        let cookie = {
            let mut c = b"theme=dark; lang=en; gapura_pow=".to_vec();
            if let Some(host) = pow_host {
                let expires = UNIX_ORIGIN_MS / 1000 + 365 * 86_400;
                let key = PowKey::new(&POW_KEY);
                c.extend_from_slice(&mint_cookie(&key, host, client, expires, 16));
            }
            c
        };
        let headers = [
            ("host", b"app.test".to_vec()),
            ("user-agent", CHROME.to_vec()),
            (
                "accept",
                b"text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8".to_vec(),
            ),
            ("accept-language", b"en-GB,en;q=0.9".to_vec()),
            ("accept-encoding", b"gzip, deflate, br".to_vec()),
            ("cookie", cookie),
            ("authorization", AUTHORIZATION.to_vec()),
            ("sec-fetch-mode", b"navigate".to_vec()),
        ];
        let header_bytes = headers.iter().map(|(n, v)| n.len() + v.len()).sum();
        let mut r = Reference {
            snap,
            header_bytes,
            peer: Peer::tcp(client),
            remembered_ms: 0,
            state,
            scratch: Box::new([0u8; MAX_PATH_BYTES]),
            connection: Cell::new(Bucket::default()),
            headers,
            now_ms: 0,
        };
        r.warm();
        r
    }

    /// Makes the shard warm: a first decision (the password's job is
    /// verified and cached), the provider's allow remembered.
    pub fn warm(&mut self) {
        let ticket = self.decide_raw(b"app.test", &mut NoTrace).ticket;
        if let Some(t) = ticket {
            self.state.release(t);
        }
        if let Some(job) = self.state.take_job() {
            self.state.verify_cache.insert(job.cache_key(), self.now_ms);
        }
        self.remember_auth();
    }

    /// Remembers the provider's allow for the request (its TTL is 300 s
    /// of the shard's clock: a long run renews it).
    pub fn remember_auth(&mut self) {
        let _ = self.state.auth.take_job();
        let Some(p) = self.snap.gate.auth_providers.first() else {
            return;
        };
        let headers = self.header_refs();
        let facts = KeyFacts {
            client: CLIENT.parse().expect("literal"),
            scheme: b"https",
            host: b"app.test",
            method: b"GET",
            target: TARGET,
            headers: &headers[..],
        };
        let (request_key, host_key) = self.state.auth.keys(p, &facts);
        let job = AuthJob {
            provider: 0,
            request_key,
            host_key,
        };
        let lines: Arc<[u8]> = Arc::from(&b"Remote-User: alice\r\n"[..]);
        self.state
            .auth
            .remember(0, p, &job, Some(lines), self.now_ms);
        self.remembered_ms = self.now_ms;
    }

    /// The header lines as the chain reads them.
    pub fn header_refs(&self) -> [(&'static str, &[u8]); 8] {
        std::array::from_fn(|i| (self.headers[i].0, &self.headers[i].1[..]))
    }

    /// Decides the reference request for `host` at the shard's clock,
    /// without moving it; the caller releases the ticket. No allocation
    /// but the trace's.
    pub fn decide_raw<T: Trace>(&mut self, host: &[u8], trace: &mut T) -> Decision<'_> {
        let headers: [(&str, &[u8]); 8] =
            std::array::from_fn(|i| (self.headers[i].0, &self.headers[i].1[..]));
        let req = Request {
            peer: self.peer,
            method: b"GET",
            host: Some(host),
            target: TARGET,
            path: TARGET,
            header_count: headers.len(),
            header_bytes: self.header_bytes,
            content_length: None,
            headers: &headers[..],
            connection: Some(&self.connection),
            tls: true,
        };
        self.snap
            .decide(&req, &mut self.state, self.now_ms, &mut self.scratch, trace)
    }

    /// One request as a shard serves it: decided, its leases given back
    /// once answered, the clock moved 10 ms (the provider's allow is
    /// remembered again every 200 s of that clock, once in 20,000
    /// requests). Answers the step that decided it and whether the host
    /// answered (a respond host's answer or the route's upstream).
    pub fn serve<T: Trace>(&mut self, host: &[u8], trace: &mut T) -> (Block, bool) {
        let d = self.decide_raw(host, trace);
        let got = (
            d.step,
            matches!(d.verdict, Verdict::Respond(_) | Verdict::Forward(..)),
        );
        if let Some(t) = d.ticket {
            self.state.release(t);
        }
        self.now_ms += 10;
        if self.now_ms - self.remembered_ms >= 200_000 {
            self.remember_auth();
        }
        got
    }
}

/// The proof-of-work host id of the proxy host's first route, when it
/// has proof of work.
fn proxy_route_pow_host(snap: &Snapshot) -> Option<u64> {
    snap.entries.iter().find_map(|e| match &e.action {
        HostAction::Proxy(p) => p.routes.first().and_then(|r| r.policy.pow.map(|w| w.host)),
        _ => None,
    })
}
