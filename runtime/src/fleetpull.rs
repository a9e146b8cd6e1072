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
use gapura_fleet::profile::{ProfileStats, Report, State, Verifier};
use gapura_fleet::profilestore::Store;
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

/// Writes `bytes` to `path` whole (a temporary file renamed over it),
/// readable by the owner only.
fn write_whole(path: &Path, bytes: &[u8]) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| format!("{}: {e}", tmp.display()))?;
    f.write_all(bytes)
        .and_then(|()| f.sync_all())
        .map_err(|e| format!("{}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| format!("{}: {e}", path.display()))
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

/// Starts the puller when the profile pulls; `current`: the fleet's text
/// the node started from.
pub(crate) fn start(
    f: Option<&FleetSettings>,
    current: Option<String>,
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
        .spawn(move || Puller::new(p, verifier, target, node, tx, s).run())
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
    /// The engine was away at the last look (said once).
    away: bool,
}

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
        stats: Arc<ProfileStats>,
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
        let store = self.store.as_mut().ok_or("no engine")?;
        store.seen(&self.node, unix_s())?;
        self.stats.last_pull.store(unix_s(), Ordering::Relaxed);
        if self.away {
            log!("fleet profile: the engine answers again");
            self.away = false;
        }
        let Some(pointer) = store.pointer()? else {
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
            self.kept.serial = pointer.serial;
            return Ok(());
        }
        let running = pointer.version == self.kept.version && pointer.sha256 == self.kept.sha256;
        if pointer.state == State::Halted || running {
            self.kept.serial = pointer.serial;
            return self.kept.save(&self.p.state_dir);
        }
        let outcome = self.take(pointer.version, &pointer.sha256);
        self.kept.serial = pointer.serial;
        let report = Report {
            ack: outcome.is_ok(),
            version: pointer.version,
            time: unix_s(),
            errors: outcome.as_ref().err().cloned().unwrap_or_default(),
        };
        if let Ok(text) = &outcome {
            write_whole(&text_path(&self.p.state_dir), text.as_bytes())?;
            self.kept.version = pointer.version;
            self.kept.sha256 = pointer.sha256.clone();
        } else {
            log!(
                "fleet profile: version {} refused: {}",
                pointer.version,
                report.errors.join("; ")
            );
        }
        self.kept.save(&self.p.state_dir)?;
        let counter = if report.ack {
            &self.stats.acks
        } else {
            &self.stats.nacks
        };
        counter.fetch_add(1, Ordering::Relaxed);
        let store = self.store.as_mut().ok_or("no engine")?;
        store.report(&self.node, &report)
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
