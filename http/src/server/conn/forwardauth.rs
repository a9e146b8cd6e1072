//! Forward-auth on a connection: what the provider's answer does. An
//! allow is remembered and the head decided again; a refusal or redirect
//! is relayed; a failure is 502, a timeout 504, a full provider 503 with
//! `Retry-After: 1`. Every outcome but an allow closes the connection once
//! its answer is sent. The calls themselves are the shard's
//! (`server::authcalls`).

use super::{Conn, End};
use crate::codec::head::{Method, ParsedHead};
use crate::server::authcalls::busy_page;
use crate::server::shard::Shard;
use crate::server::stats::ErrorKind;
use crate::transport::tls::HandshakeFail;
use crate::transport::Transport;
use crate::upstream::authcall::{Answer, CallError};
use gapura_gate::answer::WriteCtx;
use gapura_gate::auth::{AuthJob, AuthProvider, Relay};
use gapura_gate::sink::Sink;
use gapura_gate::{ErrorStatus, Snapshot};
use std::sync::Arc;
use std::time::Duration;

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
        let Some(_place) = shard.upstream.auth.begin(p.identity) else {
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
        // A client that goes away abandons its call (the provider's
        // connection is closed with it).
        let result = monoio::select! {
            r = monoio::time::timeout(wait, shard.upstream.auth.call(&shard, p, &request)) => r,
            _ = super::gone::client_gone(self.io.stream_mut()) => {
                count(|c| c.abandoned += 1);
                self.ubuf = request;
                return Err(End::Error(ErrorKind::Io));
            }
        };
        self.ubuf = request;
        log_failure(&shard, p, &result);
        match result {
            Err(_) | Ok(Err(CallError::Tls(HandshakeFail::Timeout))) => {
                count(|c| c.timeouts += 1);
                if shadow {
                    shadowed();
                    return Ok(None);
                }
                Err(self
                    .auth_refusal(snap, ErrorStatus::GatewayTimeout, head)
                    .await)
            }
            Ok(Err(CallError::Failed | CallError::Tls(_))) | Ok(Ok(Answer::Fail(_))) => {
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
            Ok(Ok(Answer::Relay(relay))) => {
                let status = relay.status;
                if status / 100 == 3 {
                    count(|c| c.redirected += 1);
                } else {
                    count(|c| c.denied += 1);
                }
                if shadow {
                    shadowed();
                    return Ok(None);
                }
                let relay = self.sign_in_redirect(p, status, head).unwrap_or(relay);
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
        relay.write_into(self.io.answer(), &date, head.method == Method::Head);
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
        // A navigation: a page the user opens (an HTML Accept, and no
        // `Sec-Fetch-Mode` other than `navigate`), never a script's fetch,
        // which gets the provider's 401 to act on.
        let browser = matches!(head.method, Method::Get | Method::Head)
            && head.wants_html
            && !head.not_navigation;
        if status != 401 || !browser {
            return None;
        }
        let buf = self.io.unread();
        let host = head.host.clone().and_then(|r| buf.get(r)).unwrap_or(b"");
        let target = buf.get(head.target.clone())?;
        if sign_in.is_sign_in_page(host, target) {
            return None;
        }
        let mut location = Vec::with_capacity(256);
        sign_in.write_location(S::TLS, host, target, &mut location);
        Some(Relay::new(302, &[(b"Location", &location)], b""))
    }

    async fn auth_refusal(&mut self, snap: &Snapshot, s: ErrorStatus, head: &ParsedHead) -> End {
        self.write_page(snap, s, head.wants_html, head.method == Method::Head);
        self.close_after_refusal(ErrorKind::Limit).await
    }

    fn write_closing(&mut self, answer: &gapura_gate::Answer, head: &ParsedHead) {
        let date = self.shard.date.line();
        let id = super::request_id(&self.log, &self.shard);
        let out = self.io.answer();
        answer.write_into(out, &closing(&date, head));
        answer.stamp(out.written_mut(), head.method == Method::Head, || id);
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

/// Logs a failed call (no answer in time, no connection, an answer that
/// is no allow, refusal or redirect), at most once a minute per provider.
fn log_failure(
    shard: &Shard,
    p: &AuthProvider,
    result: &Result<Result<Answer, CallError>, monoio::time::error::Elapsed>,
) {
    let why = match result {
        Err(_) | Ok(Err(CallError::Tls(HandshakeFail::Timeout))) => "no answer within timeout_ms",
        Ok(Err(CallError::Failed)) => "cannot connect, or the connection broke",
        Ok(Err(CallError::Tls(HandshakeFail::Verify))) => {
            "its TLS certificate did not verify; nothing was sent"
        }
        Ok(Err(CallError::Tls(HandshakeFail::ClientAlert))) => {
            "it refused the TLS handshake (a client certificate it does not take?)"
        }
        Ok(Err(CallError::Tls(_))) => "the TLS handshake failed",
        Ok(Ok(Answer::Fail(_))) => "an answer that is not a usable allow, refusal or redirect",
        Ok(Ok(_)) => return,
    };
    let status = match result {
        Ok(Ok(Answer::Fail(s))) => format!(", status {s}"),
        _ => String::new(),
    };
    if let Some(warn) = shard.logs.warn {
        if shard.upstream.auth.should_warn(p.identity) {
            warn(format_args!(
                "forward-auth: shard {}: provider {} failed ({why}{status}); its requests get \
                 502/504 (at most one line a minute per provider)",
                shard.id, p.name
            ));
        }
    }
}
