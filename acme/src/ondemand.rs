//! On-demand certificates: a name no certificate claims, seen in a
//! handshake, is handed to the ACME thread (never waited on); the thread
//! asks the operator's `ask` endpoint (`?domain=NAME`, 200 allows) and,
//! within the rate, orders a certificate for it, which is then served
//! from the next handshake and renewed like any other.
//!
//! Bounded: a name is asked about at most once a minute after a refusal,
//! the asks themselves at most four times the order rate, and the
//! remembered refusals at most [`MAX_REFUSED`].

use crate::client::now_s;
use crate::manager::{Manager, Status};
use std::sync::mpsc::Receiver;

/// The most refused names remembered.
pub const MAX_REFUSED: usize = 1024;
/// How long a refused name is not asked about again.
pub const REFUSED_FOR_S: i64 = 60;

/// `on_demand` as the thread keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OnDemand {
    pub ask: String,
    /// Orders allowed per `per_s` seconds.
    pub count: u32,
    pub per_s: u64,
}

/// A fixed window's count.
#[derive(Debug, Default)]
pub(crate) struct Window {
    start_s: i64,
    used: u32,
}

impl Window {
    /// Takes one of `count` in the window of `per_s` seconds `now_s` is in.
    pub(crate) fn take(&mut self, count: u32, per_s: u64, now_s: i64) -> bool {
        let start = now_s - now_s.rem_euclid(per_s.max(1) as i64);
        if start != self.start_s {
            self.start_s = start;
            self.used = 0;
        }
        if self.used >= count {
            return false;
        }
        self.used += 1;
        true
    }
}

/// The thread's on-demand state.
#[derive(Debug, Default)]
pub(crate) struct State {
    pub(crate) orders: Window,
    pub(crate) asks: Window,
    /// Names refused, and until when.
    pub(crate) refused: Vec<(String, i64)>,
}

/// Whether `name` may be a certificate's name: a host name of letters,
/// digits, `-` and `.`, not an address, at most 253 bytes.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.contains('.')
        && name.parse::<std::net::IpAddr>().is_err()
        && name.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

/// The ask URL for `name`.
pub fn ask_url(ask: &str, name: &str) -> String {
    let sep = if ask.contains('?') { '&' } else { '?' };
    format!("{ask}{sep}domain={name}")
}

impl Manager {
    /// Takes the names handed over since the last turn.
    pub(crate) fn take_asks(&mut self, asks: &Receiver<String>) {
        let Some(od) = self.on_demand.clone() else {
            while asks.try_recv().is_ok() {}
            return;
        };
        while let Ok(name) = asks.try_recv() {
            let now = now_s();
            if !valid_name(&name) || self.tracked(&name) {
                continue;
            }
            self.demand.refused.retain(|(_, until)| *until > now);
            if self.demand.refused.iter().any(|(n, _)| *n == name) {
                continue;
            }
            if !self
                .demand
                .asks
                .take(od.count.saturating_mul(4), od.per_s, now)
            {
                continue;
            }
            match self.ask(&od, &name) {
                Ok(true) if self.demand.orders.take(od.count, od.per_s, now) => {
                    (self.log)(&format!("acme: on demand: {name} allowed by ask; ordering"));
                    let mut shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
                    shared.certificates.push(Status {
                        names: vec![name],
                        not_after: None,
                        due_s: now,
                        failures: 0,
                        issued: 0,
                        ari_next_s: 0,
                    });
                    drop(shared);
                    self.warned.push(0);
                }
                Ok(true) => (self.log)(&format!(
                    "acme: on demand: {name} allowed by ask, but the rate ({}/{} s) is spent",
                    od.count, od.per_s
                )),
                Ok(false) => {
                    (self.log)(&format!("acme: on demand: ask refused {name}"));
                    if self.demand.refused.len() >= MAX_REFUSED {
                        self.demand.refused.remove(0);
                    }
                    self.demand.refused.push((name, now + REFUSED_FOR_S));
                }
                Err(e) => (self.log)(&format!("acme: on demand: ask for {name}: {e}")),
            }
        }
    }

    fn tracked(&self, name: &str) -> bool {
        let shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        shared
            .certificates
            .iter()
            .any(|s| s.names.iter().any(|n| n == name))
    }

    /// Asks the endpoint: 200 allows, any other status refuses.
    fn ask(&self, od: &OnDemand, name: &str) -> Result<bool, String> {
        let t = crate::transport::Transport::new(self.roots(), std::time::Duration::from_secs(5))?;
        Ok(t.request("GET", &ask_url(&od.ask, name), None)?.status == 200)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_allows_its_count_and_starts_over_with_the_next() {
        let mut w = Window::default();
        assert!(w.take(2, 60, 120));
        assert!(w.take(2, 60, 150));
        assert!(!w.take(2, 60, 179));
        assert!(w.take(2, 60, 180));
        assert!(!w.take(0, 60, 300));
    }

    #[test]
    fn only_host_names_are_ordered() {
        for ok in ["a.test", "www.a-b.example", "x1.y2.z3"] {
            assert!(valid_name(ok), "{ok}");
        }
        for bad in [
            "",
            "localhost",
            "127.0.0.1",
            "a..test",
            "-a.test",
            "a-.test",
            "a_b.test",
            "*.a.test",
            "a.test.",
            &"a".repeat(254),
        ] {
            assert!(!valid_name(bad), "{bad}");
        }
    }

    #[test]
    fn the_name_is_added_to_the_ask_url() {
        assert_eq!(
            ask_url("http://ask/ok", "a.test"),
            "http://ask/ok?domain=a.test"
        );
        assert_eq!(
            ask_url("http://ask/ok?k=1", "a.test"),
            "http://ask/ok?k=1&domain=a.test"
        );
    }
}
