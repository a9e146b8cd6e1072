//! The ACME thread: keeps every `acme = true` certificate issued and
//! renewed, one order at a time, and tells the runtime what changed.
//!
//! Each certificate has a time it is next due: at start, now when the
//! state directory has none for its names, else its renewal time
//! (`schedule::renew_at`); after an issue, the new one's renewal time;
//! after a failure, the backoff or the server's `Retry-After`, whichever
//! is longer. The old certificate is served until a new one is stored.

use crate::client::{now_s, Client, Failure};
use crate::fleet::Fleet;
use crate::order::{self, Answers, Issued, Kind, Publish};
use crate::schedule;
use crate::store::Store;
use crate::transport::Transport;
use std::path::PathBuf;
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a request to the ACME server may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);

/// What the thread needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    pub directory: String,
    pub contact: Vec<String>,
    pub state_dir: PathBuf,
    /// The challenge types to answer, the preferred first.
    pub kinds: Vec<Kind>,
    /// Trust for the server (DER), else the public roots.
    pub roots: Option<Vec<Vec<u8>>>,
    /// Each certificate's names.
    pub certificates: Vec<Vec<String>>,
    /// On-demand certificates for names the profile does not list.
    pub on_demand: Option<crate::demand::OnDemand>,
}

/// What the thread tells the runtime.
pub enum Event {
    /// Make these answers live (or none, when empty) and say so on the
    /// sender once every shard will see them.
    Answers(Answers, SyncSender<()>),
    /// A certificate for these names was stored: publish it.
    Issued(Vec<String>),
}

/// One certificate's state, for metrics and logs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Status {
    pub names: Vec<String>,
    /// The served certificate's end (Unix seconds), if any.
    pub not_after: Option<i64>,
    /// When it is next ordered (Unix seconds).
    pub due_s: i64,
    pub failures: u32,
    pub issued: u64,
    /// When the server's renewal window is next asked for (Unix seconds;
    /// 0: at the next turn).
    pub ari_next_s: i64,
}

/// Counters the metrics read.
#[derive(Debug, Default)]
pub struct Shared {
    pub certificates: Vec<Status>,
    /// Requests sent to the ACME server.
    pub requests: u64,
    pub orders_failed: u64,
}

/// A random `u64` for jitter.
pub(crate) fn random() -> u64 {
    let mut b = [0u8; 8];
    let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut b);
    u64::from_le_bytes(b)
}

/// Makes `answers` live in this process: returns once published.
pub(crate) fn publish_here(events: &SyncSender<Event>, answers: &Answers) {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    if events.send(Event::Answers(answers.clone(), tx)).is_ok() {
        let _ = rx.recv_timeout(Duration::from_secs(10));
    }
}

struct Publisher<'a> {
    events: &'a SyncSender<Event>,
}

impl Publish for Publisher<'_> {
    fn answers(&mut self, answers: &Answers) {
        publish_here(self.events, answers);
    }
}

/// The thread's state.
pub struct Manager {
    settings: Settings,
    pub(crate) store: Store,
    client: Option<Client>,
    pub(crate) log: Box<dyn Fn(&str) + Send>,
    pub(crate) shared: Arc<Mutex<Shared>>,
    /// The last day each certificate's coming end was warned of.
    pub(crate) warned: Vec<i64>,
    /// `on_demand`, and its windows and refusals.
    pub(crate) on_demand: Option<crate::demand::OnDemand>,
    pub(crate) demand: crate::demand::State,
    /// The fleet's engine, with `[fleet]`.
    pub(crate) fleet: Option<Fleet>,
    /// The other nodes' answers in flight, and what this process serves.
    pub(crate) others: Answers,
    pub(crate) published: Answers,
    /// When the fleet's certificates were last looked at.
    pub(crate) fleet_checked: Option<Instant>,
    /// The last engine error logged (each new one is logged once).
    pub(crate) fleet_error: String,
}

impl Manager {
    pub fn new(
        settings: Settings,
        log: Box<dyn Fn(&str) + Send>,
        shared: Arc<Mutex<Shared>>,
        fleet: Option<Fleet>,
    ) -> Manager {
        let store = Store::new(&settings.state_dir);
        let mut m = Manager {
            settings: settings.clone(),
            store,
            client: None,
            log,
            shared,
            warned: Vec::new(),
            fleet,
            on_demand: None,
            demand: Default::default(),
            others: Answers::default(),
            published: Answers::default(),
            fleet_checked: None,
            fleet_error: String::new(),
        };
        m.adopt(settings);
        m
    }

    /// Takes new settings, keeping the state of certificates it had (and
    /// of on-demand ones, while `on_demand` is on; at start, those the
    /// state directory holds).
    fn adopt(&mut self, settings: Settings) {
        let now = now_s();
        let store = Store::new(&settings.state_dir);
        let mut shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        let mut old = std::mem::take(&mut shared.certificates);
        if old.is_empty() && settings.on_demand.is_some() {
            old = (store.list().into_iter())
                .filter(|names| !settings.certificates.contains(names))
                .map(|names| Status {
                    names,
                    ..Status::default()
                })
                .collect();
        }
        let mut wanted = settings.certificates.clone();
        if settings.on_demand.is_some() {
            wanted.extend(
                (old.iter())
                    .map(|s| s.names.clone())
                    .filter(|n| !settings.certificates.contains(n)),
            );
        }
        shared.certificates = wanted
            .iter()
            .map(|names| {
                if let Some(s) = old.iter().find(|s| &s.names == names && s.due_s != 0) {
                    return s.clone();
                }
                let stored = store.load(names);
                Status {
                    names: names.clone(),
                    not_after: stored.as_ref().map(|s| s.validity.not_after),
                    due_s: stored.map_or(now, |s| schedule::renew_at(s.validity, random())),
                    failures: 0,
                    issued: 0,
                    ari_next_s: 0,
                }
            })
            .collect();
        self.warned = vec![0; shared.certificates.len()];
        if settings.directory != self.settings.directory || settings.roots != self.settings.roots {
            self.client = None;
        }
        self.store = store;
        self.on_demand = settings.on_demand.clone();
        self.settings = settings;
    }

    /// How many certificates the profile lists.
    pub(crate) fn listed(&self) -> usize {
        self.settings.certificates.len()
    }

    /// The server's trust roots, if the profile gives them.
    pub(crate) fn roots(&self) -> Option<&[Vec<u8>]> {
        self.settings.roots.as_deref()
    }

    /// Runs until `updates` is closed: new settings arrive there, and
    /// on-demand names on `asks`.
    pub fn run(
        mut self,
        updates: Receiver<Settings>,
        asks: Receiver<String>,
        events: SyncSender<Event>,
    ) {
        loop {
            if self.fleet.is_some() {
                self.sync_fleet(&events);
            }
            self.take_asks(&asks);
            let now = now_s();
            self.warn_expiry(now);
            self.ask_windows(now);
            let next = self.due_index(now);
            if let Some(i) = next {
                self.attempt(i, &events);
                continue;
            }
            let often = self.fleet.is_some() || self.on_demand.is_some();
            let wait = match often {
                // The fleet's answers and certificates, and on-demand
                // names, are looked at often.
                true => Duration::from_millis(crate::fleet::SYNC_MS),
                false => Duration::from_secs(
                    self.next_due().map_or(3600, |d| (d - now).clamp(1, 3600)) as u64,
                ),
            };
            match updates.recv_timeout(wait) {
                Ok(s) => self.adopt(s),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
            while let Ok(s) = updates.try_recv() {
                self.adopt(s);
            }
        }
    }

    /// Asks the server's renewal window (RFC 9773) for each certificate
    /// whose time to ask has come, and moves its renewal into the window:
    /// a random time in it, the same for the same window (at once when it
    /// has begun), never later than a day before the certificate ends.
    /// A failure asks again in an hour and changes nothing else.
    fn ask_windows(&mut self, now: i64) {
        let count = self.shared.lock().map_or(0, |s| s.certificates.len());
        for i in 0..count {
            let (names, end, next) = {
                let s = self.shared.lock().unwrap_or_else(|e| e.into_inner());
                let c = &s.certificates[i];
                (c.names.clone(), c.not_after, c.ari_next_s)
            };
            let Some(end) = end.filter(|_| next <= now) else {
                continue;
            };
            let Some(leaf) = self
                .store
                .load(&names)
                .and_then(|s| s.chain.into_iter().next())
            else {
                continue;
            };
            let asked = self
                .directory_client()
                .and_then(|c| c.renewal_window(&leaf));
            let requests = self
                .client
                .as_mut()
                .map_or(0, |c| std::mem::take(&mut c.requests));
            self.count(requests);
            let mut s = self.shared.lock().unwrap_or_else(|e| e.into_inner());
            let c = &mut s.certificates[i];
            match asked {
                Ok(Some((window, again))) => {
                    let seed =
                        ring::digest::digest(&ring::digest::SHA256, names.join(",").as_bytes());
                    let mut b = [0u8; 8];
                    b.copy_from_slice(&seed.as_ref()[..8]);
                    c.due_s = crate::ari::choose(window, u64::from_le_bytes(b)).min(end - 86_400);
                    c.ari_next_s = now
                        + again
                            .map_or(crate::ari::ASK_AGAIN_S, |ms| (ms / 1000) as i64)
                            .clamp(60, 86_400);
                }
                // No renewal information: the certificate's own dates.
                Ok(None) => c.ari_next_s = i64::MAX,
                Err(_) => c.ari_next_s = now + 3600,
            }
        }
    }

    pub(crate) fn due_index(&self, now: i64) -> Option<usize> {
        let shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        shared.certificates.iter().position(|s| s.due_s <= now)
    }

    fn next_due(&self) -> Option<i64> {
        let shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        shared.certificates.iter().map(|s| s.due_s).min()
    }

    /// Logs once a day for each certificate within a week of its end.
    fn warn_expiry(&mut self, now: i64) {
        let shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        for (i, s) in shared.certificates.iter().enumerate() {
            let Some(end) = s.not_after else { continue };
            let day = now / 86_400;
            if end - now < schedule::EXPIRY_WARNING_S && self.warned.get(i) != Some(&day) {
                (self.log)(&format!(
                    "acme: warning: the certificate for {} ends in {} h and is not renewed yet",
                    s.names.join(", "),
                    (end - now).max(0) / 3600
                ));
                if let Some(w) = self.warned.get_mut(i) {
                    *w = day;
                }
            }
        }
    }

    /// The client, connected (the directory read), without an account yet.
    fn directory_client(&mut self) -> Result<&mut Client, Failure> {
        if self.client.is_none() {
            let transport = Transport::new(self.settings.roots.as_deref(), REQUEST_TIMEOUT)
                .map_err(Failure::new)?;
            let key = self.store.account_key().map_err(Failure::new)?;
            self.count(1);
            self.client = Some(Client::connect(transport, key, &self.settings.directory)?);
        }
        self.client
            .as_mut()
            .ok_or_else(|| Failure::new("no client"))
    }

    /// The client, connected and with its account.
    fn client(&mut self) -> Result<&mut Client, Failure> {
        let contact = self.settings.contact.clone();
        let c = self.directory_client()?;
        if !c.has_account() {
            c.account(&contact)?;
        }
        Ok(c)
    }

    pub(crate) fn count(&self, requests: u64) {
        let mut shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        shared.requests += requests;
    }

    /// Orders certificate `i` now (with a fleet: unless the fleet has a
    /// newer one, and only while holding its lock).
    fn attempt(&mut self, i: usize, events: &SyncSender<Event>) {
        let names = {
            let shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
            shared.certificates[i].names.clone()
        };
        let now = now_s();
        let mut fleet = self.fleet.take();
        let result = match fleet.as_mut() {
            Some(f) => self
                .fleet_turn(f, i, &names, now, events)
                .map(|fence| self.fleet_order(f, &names, fence, events)),
            None => Some(self.order(&names, &mut Publisher { events })),
        };
        self.fleet = fleet;
        let Some(result) = result else { return };
        let now = now_s();
        match result.and_then(|issued| {
            self.store.save(&names, &issued).map_err(Failure::new)?;
            Ok(issued)
        }) {
            Ok(issued) => {
                let _ = events.send(Event::Issued(names.clone()));
                let mut shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
                let s = &mut shared.certificates[i];
                s.not_after = Some(issued.validity.not_after);
                s.due_s = schedule::renew_at(issued.validity, random());
                s.failures = 0;
                s.issued += 1;
                s.ari_next_s = 0;
                (self.log)(&format!(
                    "acme: certificate for {} issued, valid until {} (Unix), renewal due in {} h",
                    names.join(", "),
                    issued.validity.not_after,
                    (s.due_s - now).max(0) / 3600
                ));
            }
            Err(f) => self.failed(i, &names, &f, now),
        }
    }

    /// One order for `names`, its requests counted.
    pub(crate) fn order(
        &mut self,
        names: &[String],
        publish: &mut dyn Publish,
    ) -> Result<Issued, Failure> {
        let kinds = self.settings.kinds.clone();
        let replaces = self
            .store
            .load(names)
            .and_then(|s| crate::ari::cert_id(s.chain.first()?));
        let result = match self.client() {
            Ok(c) => order::issue(c, (names, replaces.as_deref()), &kinds, publish),
            Err(f) => Err(f),
        };
        let requests = self
            .client
            .as_mut()
            .map_or(0, |c| std::mem::take(&mut c.requests));
        self.count(requests);
        result
    }

    pub(crate) fn failed(&mut self, i: usize, names: &[String], f: &Failure, now: i64) {
        // A failure may be the connection's or the account's: start over.
        self.client = None;
        let mut shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        shared.orders_failed += 1;
        let s = &mut shared.certificates[i];
        s.failures += 1;
        let wait = schedule::backoff_ms(s.failures, random()).max(f.retry_after_ms.unwrap_or(0));
        s.due_s = now + (wait / 1000).max(1) as i64;
        let serving = match s.not_after {
            Some(end) => format!(
                "serving the current certificate, which ends in {} h",
                (end - now).max(0) / 3600
            ),
            None => "no certificate to serve for these names yet".to_string(),
        };
        (self.log)(&format!(
            "acme: order for {} failed ({} in a row): {f}; next attempt in {} s; {serving}",
            names.join(", "),
            s.failures,
            (wait / 1000).max(1)
        ));
    }
}
