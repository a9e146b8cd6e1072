//! On-demand certificates: a name no certificate claims, seen in a
//! handshake, is handed to the ACME thread (never waited on); the thread
//! asks the operator's `ask` endpoint (`?domain=NAME`, 200 allows) and,
//! within the rate, orders a certificate for it, which is then served
//! from the next handshake and renewed like any other.
//!
//! Bounded: a name is asked about at most once a minute after a refusal,
//! the asks themselves at most four times the order rate, the remembered
//! refusals at most `MAX_REFUSED`, the certificates held on demand at
//! most `MAX_ON_DEMAND`.

use crate::client::now_s;
use crate::demand::{ask_url, valid_name, OnDemand, MAX_ON_DEMAND, MAX_REFUSED, REFUSED_FOR_S};
use crate::manager::{Manager, Status};
use std::sync::mpsc::Receiver;

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
            let held = self.shared.lock().map_or(0, |s| s.certificates.len());
            if held >= self.listed() + MAX_ON_DEMAND {
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
