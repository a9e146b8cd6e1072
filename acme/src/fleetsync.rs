//! The ACME thread's side of a fleet (`fleet`): every turn, the other
//! nodes' answers in flight are made live here and this node says what it
//! serves; every two seconds, each certificate the fleet holds that is
//! newer than this node's is taken; an order runs only under the
//! certificate's lock, publishes its answers for every node and waits
//! (at most [`SERVED_WAIT_MS`]) until each serves them before the
//! authority is told to validate; the certificate it brings is shared.
//!
//! With the engine away, a node orders on its own rather than let a
//! certificate end (its log says so).

use crate::client::Failure;
use crate::fleet::{
    answer_names, answers_record, cert_id, certificate_record, merge, read_answers_record,
    read_certificate_record, Fleet, ANSWERS_TTL_MS, LOCK_LEASE_MS, SERVED_WAIT_MS,
};
use crate::manager::{publish_here, Event, Manager};
use crate::order::{Answers, Issued, Publish};
use crate::schedule;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use std::sync::mpsc::SyncSender;
use std::time::{Duration, Instant};

/// How often it looks at the fleet's certificates.
const CERTIFICATES_EVERY: Duration = Duration::from_secs(2);
/// The record name the answers are sealed for.
const ANSWERS: &str = "answers";

/// Publishes an order's answers here and for the fleet.
struct FleetPublisher<'a> {
    fleet: &'a mut Fleet,
    others: Answers,
    events: &'a SyncSender<Event>,
}

impl<'a> FleetPublisher<'a> {
    fn new(
        fleet: &'a mut Fleet,
        others: &Answers,
        events: &'a SyncSender<Event>,
    ) -> FleetPublisher<'a> {
        FleetPublisher {
            fleet,
            others: others.clone(),
            events,
        }
    }
}

impl Publish for FleetPublisher<'_> {
    fn answers(&mut self, answers: &Answers) {
        let f = &mut *self.fleet;
        let empty = answers.http.is_empty() && answers.alpn.is_empty();
        let blob = (!empty).then(|| f.key.seal(ANSWERS, &answers_record(answers)));
        let _ = f
            .state
            .set_answers(&f.node, blob.as_deref(), ANSWERS_TTL_MS);
        let all = merge(answers, &self.others);
        publish_here(self.events, &all);
        let _ = f
            .state
            .serving(&f.node, &answer_names(&all).join(" "), ANSWERS_TTL_MS);
        if empty {
            return;
        }
        // Every node serves them before the authority may come to any.
        let want = answer_names(answers);
        let end = Instant::now() + Duration::from_millis(SERVED_WAIT_MS);
        while Instant::now() < end {
            if f.state.served_by(&want).unwrap_or(0) >= f.nodes as usize {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Manager {
    /// One turn of the fleet's state: answers in flight, and every two
    /// seconds its certificates.
    pub(crate) fn sync_fleet(&mut self, events: &SyncSender<Event>) {
        let Some(mut f) = self.fleet.take() else {
            return;
        };
        match f.state.answers() {
            Ok(list) => {
                let mut others = Answers::default();
                for (node, blob) in list {
                    let read = (node != f.node)
                        .then(|| f.key.open(ANSWERS, &blob))
                        .flatten()
                        .and_then(|p| read_answers_record(&p));
                    if let Some(a) = read {
                        others = merge(&others, &a);
                    }
                }
                self.others = others;
            }
            Err(e) => self.engine_error(&e),
        }
        if answer_names(&self.others) != answer_names(&self.published) {
            publish_here(events, &self.others);
            self.published = self.others.clone();
            let names = answer_names(&self.published).join(" ");
            let _ = f.state.serving(&f.node, &names, ANSWERS_TTL_MS);
        }
        if self
            .fleet_checked
            .is_none_or(|t| t.elapsed() >= CERTIFICATES_EVERY)
        {
            self.fleet_checked = Some(Instant::now());
            let count = self.shared.lock().map_or(0, |s| s.certificates.len());
            for i in 0..count {
                self.take_fleets(&mut f, i, events);
            }
        }
        self.fleet = Some(f);
    }

    fn engine_error(&mut self, e: &str) {
        if self.fleet_error != e {
            (self.log)(&format!("acme: the fleet's engine: {e}"));
            self.fleet_error = e.to_string();
        }
    }

    fn names_of(&self, i: usize) -> Vec<String> {
        let shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        shared.certificates[i].names.clone()
    }

    /// Takes the fleet's certificate `i` when it is newer than this
    /// node's; true when taken.
    fn take_fleets(&mut self, f: &mut Fleet, i: usize, events: &SyncSender<Event>) -> bool {
        let names = self.names_of(i);
        let id = cert_id(&names);
        let sealed = match f.state.certificate(&id) {
            Ok(Some(s)) => s,
            Ok(None) => return false,
            Err(e) => {
                self.engine_error(&e);
                return false;
            }
        };
        let Some((chain_pem, key_pem)) = f
            .key
            .open(&id, &sealed)
            .and_then(|p| read_certificate_record(&names, &p))
        else {
            self.engine_error(&format!(
                "the certificate for {id} cannot be opened (another acme.shared_key_file?)"
            ));
            return false;
        };
        let Some(issued) = issued_from(chain_pem, key_pem) else {
            return false;
        };
        let current = {
            let shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
            shared.certificates[i].not_after
        };
        if current.is_some_and(|c| c >= issued.validity.not_after) {
            return false;
        }
        if let Err(e) = self.store.save(&names, &issued) {
            (self.log)(&format!("acme: {e}"));
            return false;
        }
        let _ = events.send(Event::Issued(names.clone()));
        let mut shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        let s = &mut shared.certificates[i];
        s.not_after = Some(issued.validity.not_after);
        s.due_s = schedule::renew_at(issued.validity, crate::manager::random());
        s.failures = 0;
        s.ari_next_s = 0;
        (self.log)(&format!(
            "acme: took the fleet's certificate for {}, valid until {} (Unix)",
            names.join(", "),
            issued.validity.not_after
        ));
        true
    }

    /// Before an order: the fleet's certificate if newer (then no order
    /// while it is not due), else the lock. `Some(fence)` to order (0:
    /// the engine is away, ordered alone); `None` to wait.
    pub(crate) fn fleet_turn(
        &mut self,
        f: &mut Fleet,
        i: usize,
        names: &[String],
        now: i64,
        events: &SyncSender<Event>,
    ) -> Option<u64> {
        if self.take_fleets(f, i, events) && self.due_index(now) != Some(i) {
            return None;
        }
        match f.state.lock(&cert_id(names), LOCK_LEASE_MS) {
            Ok(Some(fence)) => {
                (self.log)(&format!(
                    "acme: ordering {} for the fleet (lock {fence})",
                    names.join(", ")
                ));
                Some(fence)
            }
            Ok(None) => {
                let mut shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
                shared.certificates[i].due_s = now + 2;
                None
            }
            Err(e) => {
                self.engine_error(&e);
                (self.log)(&format!(
                    "acme: the fleet's engine is away: {} is ordered by this node alone",
                    names.join(", ")
                ));
                Some(0)
            }
        }
    }

    /// Orders `names` under the fleet's lock (`fence`): its answers made
    /// live on every node, the certificate shared, the lock let go.
    pub(crate) fn fleet_order(
        &mut self,
        f: &mut Fleet,
        names: &[String],
        fence: u64,
        events: &SyncSender<Event>,
    ) -> Result<Issued, Failure> {
        let others = self.others.clone();
        let mut publisher = FleetPublisher::new(f, &others, events);
        let result = self.order(names, &mut publisher);
        drop(publisher);
        let result = result.and_then(|issued| self.share(f, names, fence, issued));
        let _ = f.state.unlock(&cert_id(names), fence);
        result
    }

    /// Shares a certificate ordered under `fence` with the fleet.
    fn share(
        &mut self,
        f: &mut Fleet,
        names: &[String],
        fence: u64,
        issued: Issued,
    ) -> Result<Issued, Failure> {
        if fence == 0 {
            return Ok(issued);
        }
        let id = cert_id(names);
        let sealed = f.key.seal(
            &id,
            &certificate_record(names, &issued.chain_pem, &issued.key_pem),
        );
        match f.state.put_certificate(&id, fence, &sealed) {
            Ok(true) => {}
            Ok(false) => (self.log)(&format!(
                "acme: the lock for {id} ended before the certificate came: kept on this node only"
            )),
            Err(e) => self.engine_error(&e),
        }
        Ok(issued)
    }
}

/// An issued certificate from its PEM chain and key.
fn issued_from(chain_pem: String, key_pem: String) -> Option<Issued> {
    let chain_der: Vec<Vec<u8>> = CertificateDer::pem_slice_iter(chain_pem.as_bytes())
        .filter_map(Result::ok)
        .map(|c| c.to_vec())
        .collect();
    let validity = crate::validity::of(chain_der.first()?)?;
    let key_der = rustls::pki_types::PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
        .ok()?
        .secret_der()
        .to_vec();
    Some(Issued {
        chain_pem,
        key_pem,
        chain_der,
        key_der,
        validity,
    })
}
