//! Forward-auth on a connection: the call to the provider (an HTTP/1.1
//! connection kept idle per provider and shard, at most
//! [`MAX_CALLS`](gapura_gate::auth::MAX_CALLS) calls at once per provider
//! and shard, bounded by the provider's timeout), and what its answer
//! does: an allow is remembered and the head decided again; a refusal or
//! redirect is relayed; a failure is 502, a timeout 504, a full provider
//! 503 with `Retry-After: 1`. Every outcome but an allow closes the
//! connection once its answer is sent.

use super::conn::{Conn, End};
use super::prepare::write_relay;
use super::stats::ErrorKind;
use super::Shard;
use crate::codec::head::{Method, ParsedHead};
use crate::transport::Transport;
use crate::upstream::authcall::{exchange, Answer, CallError};
use gapura_gate::answer::WriteCtx;
use gapura_gate::auth::{AuthJob, AuthProvider, Relay, MAX_CALLS};
use gapura_gate::pages::Page;
use gapura_gate::{ErrorStatus, Snapshot};
use monoio::net::TcpStream;
use std::cell::RefCell;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// Most idle provider connections a shard keeps, all providers together.
const MAX_IDLE: usize = 64;
/// How long a provider connection may sit idle before it is closed rather
/// than used (providers close idle connections of their own, often sooner).
const IDLE_LIFETIME_MS: u64 = 15_000;
/// A provider's failures are logged at most once in this long (per shard).
const FAILURE_LOG_EVERY_MS: u64 = 60_000;

/// A shard's provider connections and running calls, by the provider's
/// configuration (`AuthProvider::identity`), so both survive a reload that
/// keeps it.
#[derive(Default)]
pub(crate) struct AuthCalls {
    /// (provider, connection, idle since, ms on the coarse clock).
    idle: RefCell<Vec<(u64, TcpStream, u64)>>,
    running: RefCell<Vec<(u64, u32)>>,
    /// (provider, when its failures were last logged).
    warned: RefCell<Vec<(u64, u64)>>,
}

/// A running call's place; given back when dropped.
struct Place<'a> {
    calls: &'a AuthCalls,
    provider: u64,
}

impl Drop for Place<'_> {
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

impl AuthCalls {
    /// A place for a call to `provider`, unless [`MAX_CALLS`] run.
    fn begin(&self, provider: u64) -> Option<Place<'_>> {
        let mut running = self.running.borrow_mut();
        match running.iter_mut().find(|e| e.0 == provider) {
            Some(e) if e.1 >= MAX_CALLS => return None,
            Some(e) => e.1 += 1,
            None => running.push((provider, 1)),
        }
        Some(Place {
            calls: self,
            provider,
        })
    }

    /// An idle connection to `provider` younger than [`IDLE_LIFETIME_MS`];
    /// older ones are closed on the way.
    fn take_idle(&self, provider: u64) -> Option<TcpStream> {
        let now = crate::clock::now_ms();
        let mut idle = self.idle.borrow_mut();
        idle.retain(|e| now.saturating_sub(e.2) < IDLE_LIFETIME_MS);
        let i = idle.iter().rposition(|e| e.0 == provider)?;
        Some(idle.swap_remove(i).1)
    }

    fn put_idle(&self, provider: u64, stream: TcpStream) {
        let mut idle = self.idle.borrow_mut();
        if idle.len() >= MAX_IDLE {
            idle.remove(0);
        }
        idle.push((provider, stream, crate::clock::now_ms()));
    }

    /// Whether `provider`'s failure should be logged now: at most once a
    /// [`FAILURE_LOG_EVERY_MS`] per provider (marks it when so).
    fn should_warn(&self, provider: u64) -> bool {
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
    /// closed by the provider), else on a new one.
    async fn call(&self, p: &AuthProvider, request: &[u8]) -> Result<Answer, CallError> {
        if let Some(mut s) = self.take_idle(p.identity) {
            if let Ok((answer, reuse)) = exchange(p, &mut s, request.to_vec()).await {
                if reuse {
                    self.put_idle(p.identity, s);
                }
                return Ok(answer);
            }
        }
        let mut s = TcpStream::connect(p.addr)
            .await
            .map_err(|_| CallError::Failed)?;
        let _ = s.set_nodelay(true);
        let (answer, reuse) = exchange(p, &mut s, request.to_vec()).await?;
        if reuse {
            self.put_idle(p.identity, s);
        }
        Ok(answer)
    }
}

/// Logs a failed call (no answer in time, no connection, an answer that
/// is no allow, refusal or redirect), at most once a minute per provider.
fn log_failure(
    shard: &Shard,
    p: &AuthProvider,
    result: &Result<Result<Answer, CallError>, monoio::time::error::Elapsed>,
) {
    let why = match result {
        Err(_) => "no answer within timeout_ms",
        Ok(Err(CallError::Failed)) => "cannot connect, or the connection broke",
        Ok(Ok(Answer::Fail)) => "an answer that is not a usable allow, refusal or redirect",
        Ok(Ok(_)) => return,
    };
    if let Some(warn) = shard.warn {
        if shard.auth.should_warn(p.identity) {
            warn(format_args!(
                "forward-auth: shard {}: provider {} failed ({why}); its requests get 502/504 \
                 (at most one line a minute per provider)",
                shard.id, p.name
            ));
        }
    }
}

/// The 503 of a provider whose calls are all taken, built once.
fn busy_page() -> &'static Page {
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

impl<S: Transport> Conn<S> {
    /// Asks provider `i` about the head in the buffer (its call's request
    /// head is in `ubuf`): the identity lines of an allow (`Ok`), or the
    /// end of the connection once the provider's refusal or the failure's
    /// page is sent.
    pub(super) async fn authenticate(
        &mut self,
        snap: &Snapshot,
        provider: gapura_gate::policy::BlockRef,
        job: AuthJob,
        head: &ParsedHead,
    ) -> Result<Option<Arc<[u8]>>, End> {
        let i = provider.index;
        let shadow = provider.mode == gapura_gate::mode::Mode::Shadow;
        let Some(p) = snap.gate.auth_providers.get(i as usize) else {
            return Err(self.auth_refusal(snap, ErrorStatus::BadGateway, head).await);
        };
        let shard = self.shard.clone();
        let count = |f: fn(&mut gapura_gate::auth::AuthCounters)| {
            if let Some(c) = shard.gate_mut().auth.counters.get_mut(i as usize) {
                f(c);
            }
        };
        // Shadowed, what would refuse is counted and the request goes on
        // (without identity headers).
        let shadowed = || {
            if let Some(c) = shard.gate_mut().auth.counters.get_mut(i as usize) {
                c.shadow_hits += 1;
            }
        };
        let Some(_place) = shard.auth.begin(p.identity) else {
            count(|c| c.busy += 1);
            if shadow {
                shadowed();
                return Ok(None);
            }
            let answer = busy_page().for_client(head.wants_html);
            self.write_closing(answer, head);
            return Err(self.close_after_refusal(ErrorKind::Limit).await);
        };
        count(|c| c.calls += 1);
        let request = std::mem::take(&mut self.ubuf);
        let wait = Duration::from_millis(p.timeout_ms);
        let result = monoio::time::timeout(wait, shard.auth.call(p, &request)).await;
        self.ubuf = request;
        log_failure(&shard, p, &result);
        match result {
            Err(_) => {
                count(|c| c.timeouts += 1);
                if shadow {
                    shadowed();
                    return Ok(None);
                }
                Err(self
                    .auth_refusal(snap, ErrorStatus::GatewayTimeout, head)
                    .await)
            }
            Ok(Err(CallError::Failed)) | Ok(Ok(Answer::Fail)) => {
                count(|c| c.errors += 1);
                if shadow {
                    shadowed();
                    return Ok(None);
                }
                Err(self.auth_refusal(snap, ErrorStatus::BadGateway, head).await)
            }
            Ok(Ok(Answer::Allow(lines))) => {
                count(|c| c.allowed += 1);
                let identity: Option<Arc<[u8]>> = (!lines.is_empty()).then(|| Arc::from(lines));
                let now_ms = shard.now_ms();
                shard
                    .gate_mut()
                    .auth
                    .remember(i as usize, p, &job, identity.clone(), now_ms);
                Ok(identity)
            }
            Ok(Ok(Answer::Relay {
                status,
                head: h,
                body,
            })) => {
                if status / 100 == 3 {
                    count(|c| c.redirected += 1);
                } else {
                    count(|c| c.denied += 1);
                }
                if shadow {
                    shadowed();
                    return Ok(None);
                }
                let relay = self.sign_in_redirect(p, status, head).unwrap_or_else(|| {
                    let head_len = h.len() as u32;
                    let mut bytes = h;
                    bytes.extend_from_slice(&body);
                    Relay {
                        status,
                        bytes: Arc::from(bytes),
                        head_len,
                    }
                });
                Err(self.answer_relay(i as usize, p, &job, relay, head).await)
            }
        }
    }

    /// Answers a provider's refusal or redirect (or the sign-in redirect
    /// made of a 401), remembers it for the request, and closes once sent.
    async fn answer_relay(
        &mut self,
        i: usize,
        p: &AuthProvider,
        job: &AuthJob,
        relay: Relay,
        head: &ParsedHead,
    ) -> End {
        let shard = self.shard.clone();
        let status = relay.status;
        let date = shard.date.line();
        write_relay(self.io.out(), &relay, &date, head.method == Method::Head);
        let now_ms = shard.now_ms();
        shard
            .gate_mut()
            .auth
            .remember_refusal(i, p, job, relay, now_ms);
        shard.stats.response(status);
        self.log_status(status);
        self.close_after_refusal(ErrorKind::Limit).await
    }

    /// A browser's 401 from a provider with a sign-in page: a 302 to it
    /// with the original URL in its return parameter, unless the request
    /// is for the sign-in page itself. The head is still at `io.pos`.
    fn sign_in_redirect(&self, p: &AuthProvider, status: u16, head: &ParsedHead) -> Option<Relay> {
        let sign_in = p.sign_in.as_ref()?;
        let browser = matches!(head.method, Method::Get | Method::Head) && head.wants_html;
        if status != 401 || !browser {
            return None;
        }
        let buf = self.io.unread();
        let host = head.host.clone().and_then(|r| buf.get(r)).unwrap_or(b"");
        let target = buf.get(head.target.clone())?;
        if sign_in.is_sign_in_page(host, target) {
            return None;
        }
        let mut bytes = b"HTTP/1.1 302 Found\r\nLocation: ".to_vec();
        sign_in.write_location(S::TLS, host, target, &mut bytes);
        bytes.extend_from_slice(b"\r\nCache-Control: no-store\r\nContent-Length: 0\r\n");
        Some(Relay {
            status: 302,
            head_len: bytes.len() as u32,
            bytes: Arc::from(bytes),
        })
    }

    async fn auth_refusal(&mut self, snap: &Snapshot, s: ErrorStatus, head: &ParsedHead) -> End {
        self.write_page(snap, s, head.wants_html, head.method == Method::Head);
        self.close_after_refusal(ErrorKind::Limit).await
    }

    fn write_closing(&mut self, answer: &gapura_gate::Answer, head: &ParsedHead) {
        let date = self.shard.date.line();
        answer.write_into(self.io.out(), &closing(&date, head));
        let id = super::conn::request_id(&self.log, &self.shard);
        answer.stamp(self.io.out(), head.method == Method::Head, || id);
        self.shard.stats.response(answer.status);
        self.log_status(answer.status);
    }
}

fn closing<'d>(date: &'d [u8], head: &ParsedHead) -> WriteCtx<'d> {
    WriteCtx {
        date_line: date,
        head_only: head.method == Method::Head,
        close: true,
        keep_alive_10: false,
    }
}
