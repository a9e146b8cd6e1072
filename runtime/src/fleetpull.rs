//! A pulling node (`[fleet] profile = "pull"`): the puller thread and the
//! last good version (docs/fleet.md, "One profile for the fleet").
//!
//! The thread reads the signed pointer every `profile_poll_ms` (and
//! records that the node looked); a pointer the publisher's key did not
//! sign, or no newer than the last taken (its serial), is ignored; a
//! halted one keeps the node on what it runs. A new current version is
//! fetched (refused before its text crosses the network when over
//! `profile_max_bytes`), its signature and digest checked, and offered to
//! the control loop, which compiles it with this node's `[server]` and
//! `[fleet]` and publishes it as a reload does. The thread then writes the
//! ACK (and keeps the version in `state_dir`, the node's last good one)
//! or the NACK with every error. A node that missed versions takes the
//! current one only; one started without the engine runs its last good
//! version ([`kept_version`]). Nothing here is on a shard.

use crate::log;
use gapura_config::{Compiled, FleetProfile, FleetSettings};
use gapura_fleet::profile::{Pointer, ProfileStats, Report, State, Verifier};
use gapura_fleet::profilestore::Store;
use gapura_fleet::rollout::{is_canary, verdict};
use gapura_http::server::stats::ShardStats;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::time::Duration;

/// A version offered to the control loop, and where its verdict goes.
pub struct Offer {
    pub version: u64,
    pub text: String,
    reply: SyncSender<Result<(), Vec<String>>>,
}

/// The control loop's side: offers to apply, and the fleet's text it runs.
pub struct Pull {
    rx: Receiver<Offer>,
    /// The fleet version's text this node runs (its `[server]` and
    /// `[fleet]` replaced by the local file's), for reloads.
    pub current: Option<String>,
    /// What `/metrics` and `explain --live` say of the node's version.
    pub stats: Arc<ProfileStats>,
}

impl Pull {
    /// Applies every offer waiting: `apply` compiles and publishes the
    /// text (a reload's work) and says why not.
    pub fn serve(&mut self, mut apply: impl FnMut(&str) -> Result<(), Vec<String>>) {
        while let Ok(offer) = self.rx.try_recv() {
            let result = apply(&offer.text);
            if result.is_ok() {
                log!("fleet profile: version {} applied", offer.version);
                self.current = Some(offer.text.clone());
                self.stats.version.store(offer.version, Ordering::Relaxed);
            }
            let _ = offer.reply.send(result);
        }
    }
}

/// What the state directory keeps: the last pointer serial taken and the
/// version that ran well.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Kept {
    serial: u64,
    version: u64,
    sha256: String,
}

fn kept_path(dir: &str) -> PathBuf {
    Path::new(dir).join("current.meta")
}

fn text_path(dir: &str) -> PathBuf {
    Path::new(dir).join("current.toml")
}

impl Kept {
    fn load(dir: &str) -> Kept {
        let Ok(s) = std::fs::read_to_string(kept_path(dir)) else {
            return Kept::default();
        };
        let mut it = s.split_whitespace();
        let mut num = || it.next().and_then(|v| v.parse().ok()).unwrap_or(0);
        let (serial, version) = (num(), num());
        let sha256 = s.split_whitespace().nth(2).unwrap_or("").to_string();
        Kept {
            serial,
            version,
            sha256,
        }
    }

    fn save(&self, dir: &str) -> Result<(), String> {
        let line = format!("{} {} {}\n", self.serial, self.version, self.sha256);
        write_whole(&kept_path(dir), line.as_bytes())
    }
}

/// Writes `bytes` to `path` whole, readable by the owner only.
fn write_whole(path: &Path, bytes: &[u8]) -> Result<(), String> {
    gapura_acme::store::write_whole(path, bytes, 0o600)
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// At start: the last good version a pulling node kept in its state
/// directory (its text and number), when it is whole; `None` otherwise
/// (the node starts from its local profile).
pub(crate) fn kept_version(local: &Compiled) -> Option<(String, u64)> {
    let p = local.runtime.fleet.as_ref()?.profile.as_ref()?;
    let kept = Kept::load(&p.state_dir);
    let text = std::fs::read_to_string(text_path(&p.state_dir)).ok()?;
    if gapura_fleet::profile::digest(text.as_bytes()) != kept.sha256 {
        log!(
            "fleet profile: {} does not match what was kept; starting from the local profile",
            text_path(&p.state_dir).display()
        );
        return None;
    }
    Some((text, kept.version))
}

/// A pulling node with a last good version kept runs it (with its local
/// `[server]` and `[fleet]`, compiled by `compile`), whether or not the
/// engine answers; otherwise (or when it does not compile here) the local
/// profile. Returns the compiled profile and the fleet's text it came
/// from.
pub(crate) fn last_good(
    profile: Option<&Path>,
    local: Compiled,
    compile: fn(Option<&Path>, &str) -> Result<Compiled, String>,
) -> (Compiled, Option<String>) {
    let Some((text, version)) = kept_version(&local) else {
        return (local, None);
    };
    match compile(profile, &text) {
        Ok(c) => {
            log!("fleet profile: starting from version {version}, the last good one kept");
            (c, Some(text))
        }
        Err(e) => {
            log!("fleet profile: the version kept does not compile here ({e}); starting from the local profile");
            (local, None)
        }
    }
}

/// Starts the puller when the profile pulls; `current`: the fleet's text
/// the node started from.
pub(crate) fn start(
    f: Option<&FleetSettings>,
    current: Option<String>,
    shards: Vec<Arc<ShardStats>>,
) -> Result<Option<Pull>, String> {
    let Some((f, p)) = f.and_then(|f| Some((f, f.profile.clone()?))) else {
        return Ok(None);
    };
    let verifier = Verifier::new(&p.publisher_key)?;
    std::fs::create_dir_all(&p.state_dir)
        .map_err(|e| format!("[fleet] state_dir {}: {e}", p.state_dir))?;
    let password = crate::fleet::read(f)?;
    let target = crate::fleet::target(f, password);
    let node = f.node.clone().unwrap_or_else(crate::fleet::host_name);
    let (tx, rx) = sync_channel(1);
    let stats = Arc::new(ProfileStats::default());
    if current.is_some() {
        let kept = Kept::load(&p.state_dir);
        stats.version.store(kept.version, Ordering::Relaxed);
    }
    let s = stats.clone();
    std::thread::Builder::new()
        .name("gapura-fleet-profile".into())
        .spawn(move || Puller::new(p, verifier, target, node, tx, (s, shards)).run())
        .map_err(|e| format!("fleet profile thread: {e}"))?;
    Ok(Some(Pull { rx, current, stats }))
}

struct Puller {
    p: FleetProfile,
    verifier: Verifier,
    target: gapura_fleet::Target,
    node: String,
    tx: SyncSender<Offer>,
    stats: Arc<ProfileStats>,
    kept: Kept,
    store: Option<Store>,
    /// Each shard's counters, for a canary's traffic.
    shards: Vec<Arc<ShardStats>>,
    /// A canary: since when it runs the version in soak (Unix ms), and its
    /// counts at the last look.
    canary_since: Option<u64>,
    sample: (u64, u64, u64),
    /// The engine was away at the last look (said once).
    away: bool,
}

/// Fewer answers than this in a canary's interval say nothing of it.
const MIN_INTERVAL_REQUESTS: u64 = 20;

fn unix_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Puller {
    fn new(
        p: FleetProfile,
        verifier: Verifier,
        target: gapura_fleet::Target,
        node: String,
        tx: SyncSender<Offer>,
        (stats, shards): (Arc<ProfileStats>, Vec<Arc<ShardStats>>),
    ) -> Puller {
        let kept = Kept::load(&p.state_dir);
        Puller {
            p,
            verifier,
            target,
            node,
            tx,
            stats,
            kept,
            shards,
            canary_since: None,
            sample: (0, 0, 0),
            store: None,
            away: false,
        }
    }

    fn run(mut self) {
        loop {
            if let Err(e) = self.look() {
                self.store = None;
                if !self.away {
                    log!(
                        "fleet profile: the engine is away ({e}); running version {} until it answers",
                        self.kept.version
                    );
                }
                self.away = true;
            }
            std::thread::sleep(Duration::from_millis(self.p.poll_ms));
        }
    }

    /// One look at the pointer, and what follows from it.
    fn look(&mut self) -> Result<(), String> {
        if self.store.is_none() {
            self.store = Some(Store::connect(&self.target)?);
        }
        let node = self.node.clone();
        self.store()?.seen(&node, unix_s())?;
        self.stats.last_pull.store(unix_s(), Ordering::Relaxed);
        if self.away {
            log!("fleet profile: the engine answers again");
            self.away = false;
        }
        let Some(pointer) = self.store()?.pointer()? else {
            return Ok(());
        };
        if pointer.serial <= self.kept.serial {
            return Ok(());
        }
        if !pointer.verify(&self.verifier) {
            log!(
                "fleet profile: a pointer (serial {}) not signed by the publisher key is ignored",
                pointer.serial
            );
            return self.settle(pointer.serial);
        }
        if pointer.state == State::Halted || (self.runs(&pointer) && self.canary_since.is_none()) {
            return self.settle(pointer.serial);
        }
        if pointer.rollout.staged() {
            return self.staged(&pointer);
        }
        self.apply(pointer.version, &pointer.sha256)?;
        self.settle(pointer.serial)
    }

    fn store(&mut self) -> Result<&mut Store, String> {
        self.store.as_mut().ok_or_else(|| "no engine".to_string())
    }

    /// Whether the node runs `p`'s version.
    fn runs(&self, p: &Pointer) -> bool {
        p.version == self.kept.version && p.sha256 == self.kept.sha256
    }

    /// The pointer of `serial` is behind the node: kept so.
    fn settle(&mut self, serial: u64) -> Result<(), String> {
        self.kept.serial = serial;
        self.kept.save(&self.p.state_dir)
    }

    /// Takes version `number`, keeps it when applied, and reports ACK or
    /// NACK: whether it was applied (`Err`: the engine or the disk failed).
    fn apply(&mut self, number: u64, sha256: &str) -> Result<bool, String> {
        let outcome = self.take(number, sha256);
        let report = Report {
            ack: outcome.is_ok(),
            version: number,
            time: unix_s(),
            errors: outcome.as_ref().err().cloned().unwrap_or_default(),
        };
        if let Ok(text) = &outcome {
            write_whole(&text_path(&self.p.state_dir), text.as_bytes())?;
            self.kept.version = number;
            self.kept.sha256 = sha256.to_string();
            self.kept.save(&self.p.state_dir)?;
        } else {
            log!(
                "fleet profile: version {number} refused: {}",
                report.errors.join("; ")
            );
        }
        let counter = if report.ack {
            &self.stats.acks
        } else {
            &self.stats.nacks
        };
        counter.fetch_add(1, Ordering::Relaxed);
        let node = self.node.clone();
        self.store()?.report(&node, &report)?;
        Ok(report.ack)
    }

    /// A staged rollout: the canaries take the version and watch their
    /// traffic through the soak; the rest wait for them.
    fn staged(&mut self, p: &Pointer) -> Result<(), String> {
        let store = self.store()?;
        let halt = (store.halted()?)
            .filter(|(serial, _)| *serial == p.serial)
            .map(|(_, why)| why);
        let nodes = store.nodes()?;
        let now = unix_s();
        let fresh = (self.p.poll_ms * 10 / 1000).max(30);
        let seen: Vec<&str> = (nodes.iter())
            .filter(|(_, _, at)| at.is_some_and(|at| at + fresh >= now))
            .map(|(n, _, _)| n.as_str())
            .collect();
        let pct = p.rollout.canary_pct;
        if is_canary(&self.node, p.version, pct, seen.iter().copied()) {
            return self.as_canary(p, halt);
        }
        if let Some(why) = halt {
            log!(
                "fleet profile: the rollout of version {} is halted ({why}); staying",
                p.version
            );
            return self.settle(p.serial);
        }
        // Every canary seen lately has applied it, and held it a soak.
        let mut latest = None;
        for c in seen
            .iter()
            .filter(|n| is_canary(n, p.version, pct, seen.iter().copied()))
        {
            let report = nodes
                .iter()
                .find(|(n, _, _)| n == c)
                .and_then(|(_, r, _)| r.as_ref());
            match report {
                Some(r) if r.ack && r.version == p.version => {
                    latest = Some(latest.map_or(r.time, |t: u64| t.max(r.time)));
                }
                _ => return Ok(()),
            }
        }
        let Some(latest) = latest else {
            return Ok(());
        };
        if now.saturating_mul(1000) < latest.saturating_mul(1000) + p.rollout.soak_ms {
            return Ok(());
        }
        if !self.runs(p) {
            self.apply(p.version, &p.sha256)?;
        }
        self.settle(p.serial)
    }

    /// A canary: takes the version (a refusal halts the rollout), then
    /// each interval reports its traffic and halts the rollout and
    /// returns when a threshold is passed; settled once the soak is over.
    fn as_canary(&mut self, p: &Pointer, halt: Option<String>) -> Result<(), String> {
        if let Some(why) = halt {
            return self.return_back(p, &why);
        }
        let now_ms = unix_s().saturating_mul(1000);
        if !self.runs(p) {
            if self.apply(p.version, &p.sha256)? {
                self.canary_since = Some(now_ms);
                self.sample = self.counts();
                return Ok(());
            }
            let why = format!("{} refused version {}", self.node, p.version);
            self.store()?.halt(p.serial, &why)?;
            return self.settle(p.serial);
        }
        let now = self.counts();
        let interval = (
            now.0.saturating_sub(self.sample.0),
            now.1.saturating_sub(self.sample.1),
            now.2.saturating_sub(self.sample.2),
        );
        self.sample = now;
        let line = format!(
            "{} {} {} {} {}",
            p.version,
            interval.0,
            interval.1,
            interval.2,
            unix_s()
        );
        let node = self.node.clone();
        self.store()?.health(&node, &line)?;
        if let Some(why) = verdict(&p.rollout, interval, MIN_INTERVAL_REQUESTS) {
            let why = format!("{}: {why}", self.node);
            self.store()?.halt(p.serial, &why)?;
            return self.return_back(p, &why);
        }
        let since = *self.canary_since.get_or_insert(now_ms);
        if now_ms >= since + p.rollout.soak_ms {
            self.canary_since = None;
            return self.settle(p.serial);
        }
        Ok(())
    }

    /// A halted rollout on a canary: back to the version before it.
    fn return_back(&mut self, p: &Pointer, why: &str) -> Result<(), String> {
        log!(
            "fleet profile: the rollout of version {} is halted ({why})",
            p.version
        );
        let previous = (p.rollout.previous, p.rollout.previous_sha256.clone());
        if self.runs(p) && previous.0 > 0 && self.apply(previous.0, &previous.1)? {
            log!("fleet profile: back on version {}", previous.0);
        }
        self.canary_since = None;
        self.settle(p.serial)
    }

    /// The node's answers so far: all, 5xx, and requests the gate refused.
    fn counts(&self) -> (u64, u64, u64) {
        let mut c = (0, 0, 0);
        for s in &self.shards {
            c.0 += s.responses.iter().map(|r| r.get()).sum::<u64>();
            c.1 += s.responses[4].get();
            c.2 += s.quota_refused.iter().map(|r| r.get()).sum::<u64>();
        }
        c
    }

    /// Fetches, checks and applies version `number`: its text, or every
    /// reason it was not applied.
    fn take(&mut self, number: u64, sha256: &str) -> Result<String, Vec<String>> {
        let store = self
            .store
            .as_mut()
            .ok_or_else(|| vec!["no engine".into()])?;
        let v = match store.version(number, self.p.max_bytes) {
            Ok(Some(v)) => v,
            Ok(None) => return Err(vec![format!("version {number} is not in the engine")]),
            Err(e) => return Err(vec![e]),
        };
        v.check(&self.verifier, self.p.max_bytes)
            .map_err(|e| vec![e])?;
        if v.sha256 != sha256 {
            return Err(vec![format!(
                "version {number} is not the one the pointer names"
            )]);
        }
        let (reply, verdict) = sync_channel(1);
        let offer = Offer {
            version: number,
            text: v.text.clone(),
            reply,
        };
        self.tx
            .send(offer)
            .map_err(|_| vec!["the server is stopping".to_string()])?;
        match verdict.recv_timeout(Duration::from_secs(120)) {
            Ok(Ok(())) => Ok(v.text),
            Ok(Err(errors)) => Err(errors),
            Err(_) => Err(vec!["the server did not apply it in time".into()]),
        }
    }
}
