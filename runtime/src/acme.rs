//! The runtime's side of `[acme]`: the ACME thread (`gapura_acme`) and
//! what it changes in the published snapshot.
//!
//! A snapshot is dressed before it is published ([`Running::dress`]):
//! each `acme = true` certificate gets what the state directory holds for
//! its names, and the snapshot the challenges in flight. The control loop
//! asks [`Running::poll`] every turn: the thread's new challenges and new
//! certificates are published at once as the current snapshot dressed
//! anew, the way a reload publishes (no connection dropped; open ones keep
//! the keys they agreed). Challenges are acknowledged to the thread only
//! once published, so the certificate authority is told to validate only
//! when every shard will answer it.

use crate::log;
use crate::publish::SnapshotCell;
use gapura_acme::{Answers, Event, Kind, Manager, Settings, Shared};
use gapura_config::{AcmeChallenge, AcmeSettings};
use gapura_gate::acme::{AlpnChallenge, Challenges};
use gapura_gate::tls::Secret;
use gapura_gate::Snapshot;
use std::fmt::Write;
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::{Arc, Mutex};

/// The thread's handles, kept by the control loop; empty without `[acme]`.
#[derive(Default)]
pub struct Running {
    settings: Option<AcmeSettings>,
    updates: Option<SyncSender<Settings>>,
    events: Option<Receiver<Event>>,
    answers: Answers,
    pub shared: Arc<Mutex<Shared>>,
}

fn thread_settings(a: &AcmeSettings) -> Settings {
    Settings {
        directory: a.directory.clone(),
        contact: a.contact.clone(),
        state_dir: a.state_dir.clone().into(),
        kinds: a
            .challenges
            .iter()
            .map(|c| match c {
                AcmeChallenge::Http01 => Kind::Http01,
                AcmeChallenge::TlsAlpn01 => Kind::TlsAlpn01,
            })
            .collect(),
        roots: a.roots.clone(),
        certificates: a.certificates.clone(),
    }
}

impl Running {
    /// Ready to dress the first snapshot; the thread starts with
    /// [`apply`](Self::apply), once the shards answer.
    pub fn prepared(settings: Option<&AcmeSettings>) -> Running {
        Running {
            settings: settings.cloned(),
            ..Running::default()
        }
    }

    /// Takes a reload's `[acme]`: the thread gets it (started if it was
    /// not); without `[acme]` the thread is left idle with no certificate.
    pub fn apply(&mut self, settings: Option<&AcmeSettings>) -> Result<(), String> {
        self.settings = settings.cloned();
        let Some(a) = settings else {
            if let Some(tx) = &self.updates {
                let _ = tx.try_send(Settings {
                    certificates: Vec::new(),
                    ..thread_settings(&empty())
                });
            }
            return Ok(());
        };
        if let Some(tx) = &self.updates {
            let _ = tx.send(thread_settings(a));
            return Ok(());
        }
        let (updates, rx) = mpsc::sync_channel(4);
        let (events_tx, events) = mpsc::sync_channel(16);
        let manager = Manager::new(
            thread_settings(a),
            Box::new(|line: &str| log!("{line}")),
            self.shared.clone(),
        );
        std::thread::Builder::new()
            .name("gapura-acme".into())
            .spawn(move || manager.run(rx, events_tx))
            .map_err(|e| format!("acme thread: {e}"))?;
        self.updates = Some(updates);
        self.events = Some(events);
        Ok(())
    }

    /// Fills `snap`'s ACME certificates from the state directory and sets
    /// the challenges in flight.
    pub fn dress(&self, snap: &mut Snapshot) {
        snap.acme = Arc::new(Challenges::new(&self.answers.http));
        let Some(tls) = snap.tls.as_mut() else {
            return;
        };
        let store = self
            .settings
            .as_ref()
            .map(|a| gapura_acme::store::Store::new(&a.state_dir));
        let t = Arc::make_mut(tls);
        for c in t.certificates.iter_mut().filter(|c| !c.acme.is_empty()) {
            if let Some(s) = store.as_ref().and_then(|s| s.load(&c.acme)) {
                c.chain = s.chain;
                c.key = Secret(s.key);
            }
        }
        t.acme_alpn = (self.answers.alpn.iter())
            .map(|a| AlpnChallenge {
                name: a.name.clone(),
                cert: a.cert_der.clone(),
                key: Secret(a.key_der.clone()),
            })
            .collect();
    }

    /// The thread's news, published; true when something was.
    pub fn poll(&mut self, cell: &SnapshotCell) -> bool {
        let Some(events) = &self.events else {
            return false;
        };
        let mut acks = Vec::new();
        let mut changed = false;
        while let Ok(e) = events.try_recv() {
            changed = true;
            match e {
                Event::Answers(a, ack) => {
                    self.answers = a;
                    acks.push(ack);
                }
                Event::Issued(names) => {
                    log!("acme: serving the new certificate for {}", names.join(", "))
                }
            }
        }
        if changed {
            let mut snap = (*cell.load()).clone();
            self.dress(&mut snap);
            let generation = cell.publish(snap);
            log!("acme: published generation {generation}");
        }
        for ack in acks {
            let _ = ack.send(());
        }
        changed
    }

    /// The ACME lines of `/metrics`.
    pub fn metrics(shared: &Mutex<Shared>, out: &mut String) {
        let s = shared.lock().unwrap_or_else(|e| e.into_inner());
        if s.certificates.is_empty() {
            return;
        }
        let _ = writeln!(
            out,
            "# TYPE gapura_acme_requests_total counter\ngapura_acme_requests_total {}\n# TYPE gapura_acme_orders_failed_total counter\ngapura_acme_orders_failed_total {}",
            s.requests, s.orders_failed
        );
        let _ = writeln!(
            out,
            "# TYPE gapura_acme_certificate_not_after_seconds gauge"
        );
        for c in &s.certificates {
            let _ = writeln!(
                out,
                "gapura_acme_certificate_not_after_seconds{{name=\"{}\"}} {}",
                c.names.first().map_or("", String::as_str),
                c.not_after.unwrap_or(0)
            );
        }
        let _ = writeln!(out, "# TYPE gapura_acme_certificate_issued_total counter");
        for c in &s.certificates {
            let _ = writeln!(
                out,
                "gapura_acme_certificate_issued_total{{name=\"{}\"}} {}",
                c.names.first().map_or("", String::as_str),
                c.issued
            );
        }
    }
}

/// Settings that order nothing.
fn empty() -> AcmeSettings {
    AcmeSettings {
        directory: String::new(),
        contact: Vec::new(),
        state_dir: String::new(),
        challenges: Vec::new(),
        roots: None,
        certificates: Vec::new(),
    }
}
