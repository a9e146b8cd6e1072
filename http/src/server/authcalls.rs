//! A shard's forward-auth calls: the call to the provider (an HTTP/1.1
//! connection, TLS for an `https` provider, kept idle per provider and
//! shard for at most [`IDLE_LIFETIME_MS`] and used for at most
//! [`CONN_LIFETIME_MS`] in all; at most
//! [`MAX_CALLS`](gapura_gate::auth::MAX_CALLS) calls at once per provider
//! for the process, each shard holding its share), the failure log's
//! pace, and the page of a full provider.
//! What a connection does with the answer is `conn::forwardauth`.

use super::shard::Shard;
use crate::transport::plain::Plain;
use crate::transport::tls::{self, HandshakeFail};
use crate::transport::upstream::{name_or_address, UpstreamConn};
use crate::upstream::authcall::{exchange, Answer, CallError};
use gapura_gate::auth::{AuthProvider, MAX_CALLS};
use gapura_gate::pages::Page;
use monoio::net::TcpStream;
use std::cell::RefCell;
use std::sync::OnceLock;

/// Most idle provider connections a shard keeps, all providers together.
const MAX_IDLE: usize = 64;
/// How long a provider connection may sit idle before it is closed rather
/// than used (providers close idle connections of their own, often sooner).
const IDLE_LIFETIME_MS: u64 = 15_000;
/// How long a provider connection is used at all, from its handshake: a
/// provider's new addresses, certificates or policies reach every shard
/// within this.
const CONN_LIFETIME_MS: u64 = 60_000;
/// A provider's failures are logged at most once in this long (per shard).
const FAILURE_LOG_EVERY_MS: u64 = 60_000;

/// A shard's provider connections and running calls, by the provider's
/// configuration (`AuthProvider::identity`), so both survive a reload that
/// keeps it.
pub(crate) struct AuthCalls {
    /// (provider, connection, idle since, made at; ms on the coarse clock).
    idle: RefCell<Vec<(u64, UpstreamConn, u64, u64)>>,
    running: RefCell<Vec<(u64, u32)>>,
    /// Calls to one provider this shard may run at once: its share of
    /// [`MAX_CALLS`] for the process.
    max_calls: std::cell::Cell<u32>,
    /// (provider, when its failures were last logged).
    warned: RefCell<Vec<(u64, u64)>>,
}

/// A running call's place; given back when dropped.
pub(super) struct CallPlace<'a> {
    calls: &'a AuthCalls,
    provider: u64,
}

impl Drop for CallPlace<'_> {
    fn drop(&mut self) {
        // A provider with no call running has no entry: the list holds only
        // the providers being asked now.
        let mut running = self.calls.running.borrow_mut();
        if let Some(i) = running.iter().position(|e| e.0 == self.provider) {
            running[i].1 = running[i].1.saturating_sub(1);
            if running[i].1 == 0 {
                running.swap_remove(i);
            }
        }
    }
}

impl Default for AuthCalls {
    fn default() -> AuthCalls {
        AuthCalls {
            idle: RefCell::default(),
            running: RefCell::default(),
            max_calls: std::cell::Cell::new(MAX_CALLS),
            warned: RefCell::default(),
        }
    }
}

/// One shard's share of [`MAX_CALLS`] among `shards` (at least one call).
pub fn calls_per_shard(shards: usize) -> u32 {
    (MAX_CALLS / shards.max(1) as u32).max(1)
}

impl AuthCalls {
    /// Holds this shard to its share of [`MAX_CALLS`] among `shards`.
    pub(crate) fn set_shards(&self, shards: usize) {
        self.max_calls.set(calls_per_shard(shards));
    }

    /// A place for a call to `provider`, unless this shard's share of
    /// [`MAX_CALLS`] runs.
    pub(super) fn begin(&self, provider: u64) -> Option<CallPlace<'_>> {
        let mut running = self.running.borrow_mut();
        match running.iter_mut().find(|e| e.0 == provider) {
            Some(e) if e.1 >= self.max_calls.get() => return None,
            Some(e) => e.1 += 1,
            None => running.push((provider, 1)),
        }
        Some(CallPlace {
            calls: self,
            provider,
        })
    }

    /// An idle connection to `provider` idle for less than
    /// [`IDLE_LIFETIME_MS`] and made less than [`CONN_LIFETIME_MS`] ago,
    /// with when it was made; others are closed on the way.
    fn take_idle(&self, provider: u64) -> Option<(UpstreamConn, u64)> {
        let now = crate::clock::now_ms();
        let mut idle = self.idle.borrow_mut();
        idle.retain(|e| {
            now.saturating_sub(e.2) < IDLE_LIFETIME_MS && now.saturating_sub(e.3) < CONN_LIFETIME_MS
        });
        let i = idle.iter().rposition(|e| e.0 == provider)?;
        let (_, conn, _, made) = idle.swap_remove(i);
        Some((conn, made))
    }

    fn put_idle(&self, provider: u64, stream: UpstreamConn, made: u64) {
        let now = crate::clock::now_ms();
        if now.saturating_sub(made) >= CONN_LIFETIME_MS {
            return;
        }
        let mut idle = self.idle.borrow_mut();
        if idle.len() >= MAX_IDLE {
            idle.remove(0);
        }
        idle.push((provider, stream, now, made));
    }

    /// Whether `provider`'s failure should be logged now: at most once a
    /// [`FAILURE_LOG_EVERY_MS`] per provider (marks it when so).
    pub(super) fn should_warn(&self, provider: u64) -> bool {
        let now = crate::clock::now_ms();
        let mut warned = self.warned.borrow_mut();
        match warned.iter_mut().find(|e| e.0 == provider) {
            Some(e) if now.saturating_sub(e.1) < FAILURE_LOG_EVERY_MS => false,
            Some(e) => {
                e.1 = now;
                true
            }
            None => {
                // Bounded like the idle connections: providers a reload
                // dropped leave room for the new ones.
                if warned.len() >= MAX_IDLE {
                    warned.remove(0);
                }
                warned.push((provider, now));
                true
            }
        }
    }

    /// One call: on an idle connection first (once more on a new one if
    /// that fails before an answer, as idle connections may have been
    /// closed by the provider), else on a new one. `shard` is the one these
    /// calls are of (its TLS client configurations and counters).
    pub(super) async fn call(
        &self,
        shard: &Shard,
        p: &AuthProvider,
        request: &[u8],
    ) -> Result<Answer, CallError> {
        if let Some((mut s, made)) = self.take_idle(p.identity) {
            if let Ok((answer, reuse)) = exchange(p, &mut s, request.to_vec()).await {
                if reuse {
                    self.put_idle(p.identity, s, made);
                }
                return Ok(answer);
            }
        }
        let made = crate::clock::now_ms();
        let mut s = connect(shard, p).await?;
        let (answer, reuse) = exchange(p, &mut s, request.to_vec()).await?;
        if reuse {
            self.put_idle(p.identity, s, made);
        }
        Ok(answer)
    }
}

/// A new connection to provider `p`: TCP, then for an `https` provider the
/// TLS handshake (verified for its `server_name`, the url's host unless
/// written), within the call's timeout; a failed handshake is counted by
/// reason with the upstreams' and nothing of the call is sent.
async fn connect(shard: &Shard, p: &AuthProvider) -> Result<UpstreamConn, CallError> {
    let tcp = TcpStream::connect(p.addr)
        .await
        .map_err(|_| CallError::Failed)?;
    let _ = tcp.set_nodelay(true);
    let Some(tls) = &p.tls else {
        return Ok(UpstreamConn::Plain(Plain::new(tcp, None)));
    };
    let fail = |why: HandshakeFail| {
        shard.stats.upstream_tls_failures[why as usize].inc();
        CallError::Tls(why)
    };
    let (Some(config), Ok(name)) = (
        shard.upstream_tls(tls, gapura_gate::upstream::UpstreamProtocol::Http1),
        name_or_address(tls.server_name.as_deref(), p.addr),
    ) else {
        return Err(fail(HandshakeFail::Other));
    };
    let deadline = crate::clock::deadline(p.timeout_ms);
    match tls::connect(tcp, config, name, deadline).await {
        Ok(s) => Ok(UpstreamConn::Tls(s)),
        Err(why) => Err(fail(why)),
    }
}

/// The 503 of a provider whose calls are all taken, built once.
pub(super) fn busy_page() -> &'static Page {
    static PAGE: OnceLock<Page> = OnceLock::new();
    PAGE.get_or_init(|| {
        gapura_gate::pages::builtin_page(
            503,
            "The sign-in service is busy. Please try again in a moment.",
            "503 Service Unavailable: the sign-in service is busy\n",
            &[("Retry-After", "1")],
        )
    })
}
