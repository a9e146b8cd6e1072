//! `gapura fleet`: the publisher's side of one profile for the fleet
//! (`gapura_fleet::profile`): a signing key, publishing a checked profile,
//! status, rollback and halt. Each command is one connection to the
//! engine and exits; none runs beside a server.

use crate::cli::{EngineArgs, FleetCommand, SignerArgs};
use gapura_fleet::profile::{Signer, State};
use gapura_fleet::profilestore::Store;
use gapura_fleet::rollout::Rollout;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::process::ExitCode;

pub fn run(c: FleetCommand) -> ExitCode {
    let result = match c {
        FleetCommand::Keygen { keyfile } => keygen(&keyfile),
        FleetCommand::Publish {
            signer,
            author,
            max_bytes,
            canary,
            soak,
            halt_on_5xx,
            halt_on_refused,
            file,
        } => {
            let rollout = Rollout {
                canary_pct: canary.unwrap_or(0),
                soak_ms: soak,
                halt_5xx_permille: halt_on_5xx.map_or(0, |p| u16::from(p) * 10),
                halt_refused_permille: halt_on_refused.map_or(0, |p| u16::from(p) * 10),
                ..Rollout::default()
            };
            publish(&signer, author, (max_bytes, rollout), &file)
        }
        FleetCommand::Status { engine, json } => status(&engine, json),
        FleetCommand::Rollback { signer, version } => rollback(&signer, version),
        FleetCommand::Halt { signer } => halt(&signer),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(why) => {
            eprintln!("gapura fleet: {why}");
            ExitCode::from(1)
        }
    }
}

fn keygen(path: &Path) -> Result<(), String> {
    let (pkcs8, signer) = Signer::generate()?;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    f.write_all(&pkcs8)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    println!("publisher_key = \"{}\"", signer.public());
    Ok(())
}

/// The publisher's key: refused when others may read or write it.
fn signer(path: &Path) -> Result<Signer, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if meta.permissions().mode() & 0o007 != 0 {
        return Err(format!(
            "{}: readable or writable by others: chmod 600 it",
            path.display()
        ));
    }
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    Signer::from_pkcs8(&bytes).map_err(|e| format!("{}: {e}", path.display()))
}

/// The engine the arguments name.
fn store(e: &EngineArgs) -> Result<Store, String> {
    let target = match (&e.redis, &e.profile) {
        (Some(url), _) => gapura_fleet::Target {
            addresses: vec![url.clone()],
            cluster: false,
            password: None,
            timeout: std::time::Duration::from_secs(5),
        },
        (None, Some(p)) => {
            let c = crate::run::compile(Some(p))?;
            let f = c
                .runtime
                .fleet
                .ok_or_else(|| format!("{} has no [fleet]", p.display()))?;
            let password = crate::fleet::read(&f)?;
            gapura_fleet::Target {
                timeout: std::time::Duration::from_secs(5),
                ..crate::fleet::target(&f, password)
            }
        }
        (None, None) => return Err("name the engine: --redis URL or --profile FILE".into()),
    };
    Store::connect(&target).map_err(|e| format!("the engine: {e}"))
}

fn now() -> (u64, u64) {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    (d.as_secs(), d.as_millis() as u64)
}

/// Checks `path` as `check` does (merged with the local profile's
/// `[server]` and `[fleet]` when `--profile` names one) and publishes it.
fn publish(
    s: &SignerArgs,
    author: Option<String>,
    (max, rollout): (u64, Rollout),
    path: &Path,
) -> Result<(), String> {
    let key = signer(&s.key)?;
    // The size first: an oversized file is refused before it is read.
    let len = std::fs::metadata(path)
        .map_err(|e| format!("{}: {e}", path.display()))?
        .len();
    if len > max {
        return Err(format!(
            "{} is {len} bytes, over --max-bytes {max}: not published",
            path.display()
        ));
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let checked = match &s.engine.profile {
        Some(local) => {
            let local_text =
                std::fs::read_to_string(local).map_err(|e| format!("{}: {e}", local.display()))?;
            gapura_config::fleet_profile_with_local(&text, &local_text)?
        }
        None => text.clone(),
    };
    let base = path.parent().unwrap_or(Path::new("."));
    if let Err(errors) = crate::profile::load_text(&checked, base) {
        for e in &errors {
            eprintln!("{}:{e}", path.display());
        }
        return Err(format!(
            "{}: {} error(s): not published",
            path.display(),
            errors.len()
        ));
    }
    let author = author
        .or_else(|| std::env::var("USER").ok())
        .unwrap_or_else(|| "unknown".into());
    let mut store = store(&s.engine)?;
    let (v, p) = store.publish(text, &author, now(), rollout, &key)?;
    println!(
        "published version {} ({} bytes, sha256 {}), current under serial {}",
        v.number, v.size, v.sha256, p.serial
    );
    if p.rollout.staged() {
        println!(
            "staged: {}% of the nodes first, held {} ms before the rest; canaries return to version {} on a halt",
            p.rollout.canary_pct, p.rollout.soak_ms, p.rollout.previous
        );
    }
    Ok(())
}

fn status(e: &EngineArgs, json: bool) -> Result<(), String> {
    let mut store = store(e)?;
    let pointer = store.pointer()?;
    let latest = store.latest()?;
    let nodes = store.nodes()?;
    let halt = (store.halted()?)
        .filter(|(serial, _)| pointer.as_ref().is_some_and(|p| p.serial == *serial))
        .map(|(_, why)| why);
    if json {
        let v = serde_json::json!({
            "current": pointer.as_ref().map(|p| serde_json::json!({
                "version": p.version, "sha256": p.sha256, "state": p.state.word(),
                "serial": p.serial, "canary_percent": p.rollout.canary_pct,
                "soak_ms": p.rollout.soak_ms, "previous": p.rollout.previous,
            })),
            "halted_by_canary": halt,
            "latest": latest,
            "nodes": nodes.iter().map(|(name, r, seen)| serde_json::json!({
                "node": name,
                "version": r.as_ref().map(|r| r.version),
                "ack": r.as_ref().map(|r| r.ack),
                "applied": r.as_ref().map(|r| r.time),
                "errors": r.as_ref().map(|r| r.errors.clone()).unwrap_or_default(),
                "seen": seen,
            })).collect::<Vec<_>>(),
        });
        println!("{v}");
        return Ok(());
    }
    match &pointer {
        Some(p) => println!(
            "current: version {} ({}), sha256 {}; latest published {latest}",
            p.version,
            p.state.word(),
            p.sha256
        ),
        None => println!("current: nothing published"),
    }
    if let Some(p) = pointer.as_ref().filter(|p| p.rollout.staged()) {
        println!(
            "staged: {}% canaries, soak {} ms, returning to version {} on a halt",
            p.rollout.canary_pct, p.rollout.soak_ms, p.rollout.previous
        );
    }
    if let Some(why) = &halt {
        println!("halted by a canary: {why}");
    }
    for (name, r, seen) in &nodes {
        let seen = seen.map_or("never".to_string(), |s| format!("at {s}"));
        match r {
            Some(r) if r.ack => {
                println!(
                    "{name}: runs version {} (ack at {}), last seen {seen}",
                    r.version, r.time
                )
            }
            Some(r) => {
                println!(
                    "{name}: refused version {} (nack at {}), last seen {seen}",
                    r.version, r.time
                );
                for e in &r.errors {
                    println!("  {e}");
                }
            }
            None => println!("{name}: no report, last seen {seen}"),
        }
    }
    Ok(())
}

fn rollback(s: &SignerArgs, version: Option<u64>) -> Result<(), String> {
    let key = signer(&s.key)?;
    let mut store = store(&s.engine)?;
    let current = store.pointer()?.map_or(0, |p| p.version);
    let target = version.unwrap_or(current.saturating_sub(1));
    let v = store
        .version(target, u64::MAX)?
        .ok_or_else(|| format!("there is no version {target}"))?;
    let p = store.point(
        (v.number, &v.sha256),
        State::Live,
        Rollout::default(),
        now().1,
        &key,
    )?;
    println!(
        "version {} is current again (serial {}); it was {current}",
        v.number, p.serial
    );
    Ok(())
}

fn halt(s: &SignerArgs) -> Result<(), String> {
    let key = signer(&s.key)?;
    let mut store = store(&s.engine)?;
    let current = store
        .pointer()?
        .ok_or("nothing is published: nothing to halt")?;
    let version = (current.version, current.sha256.as_str());
    let p = store.point(
        version,
        State::Halted,
        current.rollout.clone(),
        now().1,
        &key,
    )?;
    println!(
        "version {}'s rollout is halted (serial {}): every node stays on what it runs",
        p.version, p.serial
    );
    Ok(())
}
