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
use gapura_acme::{Answers, Event, Fleet, FleetState, Kind, Manager, SealKey, Settings, Shared};
use gapura_config::{AcmeChallenge, AcmeSettings, FleetSettings};
use gapura_fleet::acme::AcmeStore;
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
    /// The compiled snapshot's TLS settings, before they were dressed.
    base_tls: Option<Arc<gapura_gate::tls::TlsSettings>>,
    /// On-demand certificates: the shards' side of the queue, the thread's
    /// side (until it starts), and the names of those issued.
    pub asks: Option<SyncSender<String>>,
    asks_rx: Option<Receiver<String>>,
    on_demand: Vec<Vec<String>>,
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
        on_demand: a.on_demand.as_ref().map(|o| gapura_acme::OnDemand {
            ask: o.ask.clone(),
            count: o.count,
            per_s: o.per_s,
        }),
    }
}

/// How many unclaimed names the shards may hand over before the thread
/// takes them (more are dropped).
const ASKS_QUEUE: usize = 64;

impl Running {
    /// Ready to dress the first snapshot; the thread starts with
    /// [`apply`](Self::apply), once the shards answer.
    pub fn prepared(settings: Option<&AcmeSettings>) -> Running {
        // The shards get the queue whenever `[acme]` is there at start (a
        // reload may turn `on_demand` on or off; the thread drains the
        // queue either way).
        let (asks, asks_rx) = match settings {
            Some(_) => {
                let (tx, rx) = mpsc::sync_channel(ASKS_QUEUE);
                (Some(tx), Some(rx))
            }
            None => (None, None),
        };
        let on_demand = match settings {
            Some(a) if a.on_demand.is_some() => (gapura_acme::store::Store::new(&a.state_dir)
                .list())
            .into_iter()
            .filter(|n| !a.certificates.contains(n))
            .collect(),
            _ => Vec::new(),
        };
        Running {
            settings: settings.cloned(),
            asks,
            asks_rx,
            on_demand,
            ..Running::default()
        }
    }

    /// Takes a reload's `[acme]`: the thread gets it (started if it was
    /// not, with `fleet`'s engine when there is one); without `[acme]` the
    /// thread is left idle with no certificate.
    pub fn apply(
        &mut self,
        settings: Option<&AcmeSettings>,
        fleet: Option<&FleetSettings>,
    ) -> Result<(), String> {
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
        let fleet = match fleet {
            Some(f) => Some(fleet_of(f, a)?),
            None => None,
        };
        let (updates, rx) = mpsc::sync_channel(4);
        let (events_tx, events) = mpsc::sync_channel(16);
        let manager = Manager::new(
            thread_settings(a),
            Box::new(|line: &str| log!("{line}")),
            self.shared.clone(),
            fleet,
        );
        let asks = self
            .asks_rx
            .take()
            .unwrap_or_else(|| mpsc::sync_channel(1).1);
        std::thread::Builder::new()
            .name("gapura-acme".into())
            .spawn(move || manager.run(rx, asks, events_tx))
            .map_err(|e| format!("acme thread: {e}"))?;
        self.updates = Some(updates);
        self.events = Some(events);
        Ok(())
    }

    /// Dresses a compiled snapshot (start, reload): its TLS settings are
    /// kept as they were compiled, then [`apply_to`](Self::apply_to).
    pub fn dress(&mut self, snap: &mut Snapshot) {
        self.base_tls = snap.tls.clone();
        self.apply_to(snap);
    }

    /// Fills `snap`'s ACME certificates from the state directory, adds the
    /// on-demand ones, and sets the challenges in flight.
    fn apply_to(&self, snap: &mut Snapshot) {
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
        for names in &self.on_demand {
            let Some(s) = store.as_ref().and_then(|s| s.load(names)) else {
                continue;
            };
            let at = t.certificates.len() as u32;
            if names.iter().any(|n| t.names.insert(n, at).is_err()) {
                continue;
            }
            t.certificates.push(gapura_gate::tls::Certificate {
                label: format!("acme:on-demand:{}", names.join(",")),
                chain: s.chain,
                key: Secret(s.key),
                ocsp: None,
                acme: names.clone(),
            });
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
                    let listed = self
                        .settings
                        .as_ref()
                        .is_some_and(|a| a.certificates.contains(&names));
                    if !listed && !self.on_demand.contains(&names) {
                        self.on_demand.push(names.clone());
                    }
                    log!("acme: serving the new certificate for {}", names.join(", "))
                }
            }
        }
        if changed {
            let mut snap = (*cell.load()).clone();
            snap.tls = self.base_tls.clone();
            self.apply_to(&mut snap);
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

/// The fleet's engine as the ACME thread asks it.
struct Engine(AcmeStore);

impl FleetState for Engine {
    fn lock(&mut self, cert: &str, lease_ms: u64) -> Result<Option<u64>, String> {
        self.0.lock(cert, lease_ms)
    }
    fn unlock(&mut self, cert: &str, fence: u64) -> Result<(), String> {
        self.0.unlock(cert, fence)
    }
    fn put_certificate(&mut self, cert: &str, fence: u64, sealed: &[u8]) -> Result<bool, String> {
        self.0.put_certificate(cert, fence, sealed)
    }
    fn certificate(&mut self, cert: &str) -> Result<Option<Vec<u8>>, String> {
        self.0.certificate(cert)
    }
    fn set_answers(&mut self, node: &str, blob: Option<&[u8]>, ttl_ms: u64) -> Result<(), String> {
        self.0.set_answers(node, blob, ttl_ms)
    }
    fn answers(&mut self) -> Result<Vec<(String, Vec<u8>)>, String> {
        self.0.answers()
    }
    fn serving(&mut self, node: &str, names: &str, ttl_ms: u64) -> Result<(), String> {
        self.0.serving(node, names, ttl_ms)
    }
    fn served_by(&mut self, names: &[String]) -> Result<usize, String> {
        self.0.served_by(names)
    }
}

/// The fleet as the ACME thread sees it: the engine of `[fleet]` (its
/// password read now), this node's name, the key of `shared_key_file`
/// (read now: a file that cannot be read, or a short secret, stops it).
fn fleet_of(f: &FleetSettings, a: &AcmeSettings) -> Result<Fleet, String> {
    let path = a
        .shared_key_file
        .as_deref()
        .ok_or("[acme] shared_key_file is required with [fleet]")?;
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("[acme] shared_key_file {path}: {e}"))?;
    let secret = text.lines().next().unwrap_or("").trim();
    if secret.len() < 32 {
        return Err(format!(
            "[acme] shared_key_file {path}: its first line must be at least 32 characters"
        ));
    }
    let password = crate::fleet::read(f)?;
    let mut target = crate::fleet::target(f, password);
    target.timeout = std::time::Duration::from_secs(2);
    Ok(Fleet {
        state: Box::new(Engine(AcmeStore::new(target, "gapura"))),
        node: f.node.clone().unwrap_or_else(crate::fleet::host_name),
        key: SealKey::from_secret(secret.as_bytes()),
        nodes: f.nodes_expected,
    })
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
        shared_key_file: None,
        on_demand: None,
    }
}
