//! A reload (SIGHUP, or a changed profile with `--watch`, or a pulling
//! node's new fleet version): the profile compiled again and published, unless a setting that takes effect only
//! at start would change (a table's size, whether there is a `[fleet]`, the
//! fleet's secret), which is refused and logged; the fleet's and the ACME
//! thread's settings applied, the new snapshot dressed with the ACME
//! certificates and challenges.

use crate::admin::Global;
use crate::log;
use crate::publish::SnapshotCell;
use gapura_config::RuntimeSettings;
use std::path::Path;
use std::sync::atomic::Ordering;

/// What a reload compiles: the profile file, or (a pulling node) the
/// fleet's version with the file's `[server]` and `[fleet]`.
#[derive(Clone, Copy)]
pub(crate) struct Source<'a> {
    pub profile: Option<&'a Path>,
    pub pulled: Option<&'a str>,
}

/// Compiles and publishes `source`; `Err` with every reason it was not
/// published (each also logged).
pub(crate) fn do_reload(
    cell: &SnapshotCell,
    global: &Global,
    (settings, fleet, acme): (
        &RuntimeSettings,
        &mut crate::fleet::Running,
        &mut crate::acme::Running,
    ),
    source: Source<'_>,
    slots: &mut crate::health::Slots,
) -> Result<(), Vec<String>> {
    let compiled = match source.pulled {
        Some(text) => crate::run::compile_pulled(source.profile, text),
        None => crate::run::compile(source.profile),
    };
    match compiled {
        Ok(c) => {
            if let Some(why) = refuse_resize(cell, &c.snapshot, global) {
                return Err(vec![why]);
            }
            if let Some(why) = refuse_fleet(cell, fleet, c.runtime.fleet.as_ref(), global) {
                return Err(vec![why]);
            }
            publish_compiled(cell, global, (settings, fleet, acme), c, slots);
            Ok(())
        }
        Err(msg) => {
            global.reloads_failed.fetch_add(1, Ordering::Relaxed);
            for line in msg.lines() {
                log!("reload failed: {line}");
            }
            log!(
                "reload failed; still serving generation {}",
                cell.generation()
            );
            Err(msg.lines().map(str::to_string).collect())
        }
    }
}

/// Publishes a compiled profile as a reload does: the fleet's and ACME's
/// settings applied, the snapshot dressed and published.
fn publish_compiled(
    cell: &SnapshotCell,
    global: &Global,
    (settings, fleet, acme): (
        &RuntimeSettings,
        &mut crate::fleet::Running,
        &mut crate::acme::Running,
    ),
    mut c: gapura_config::Compiled,
    slots: &mut crate::health::Slots,
) {
    slots.assign(&mut c.snapshot);
    let fleet_settings = c.runtime.fleet.take();
    let acme_settings = c.runtime.acme.take();
    if c.runtime
        != (RuntimeSettings {
            fleet: None,
            acme: None,
            ..settings.clone()
        })
    {
        log!("reload: listener, shard, driver and admin settings take effect only on restart; serving the rest");
    }
    fleet.apply(fleet_settings.as_ref());
    if let Err(e) = acme.apply(acme_settings.as_ref(), fleet_settings.as_ref()) {
        log!("reload: {e}");
    }
    acme.dress(&mut c.snapshot);
    let generation = cell.publish(c.snapshot);
    global.generation.store(generation, Ordering::Relaxed);
    global.reloads_ok.fetch_add(1, Ordering::Relaxed);
    log!("reloaded: generation {generation}");
}

/// Refuses a reload whose `[fleet]` cannot be applied to the running
/// process (`Running::refusal` says which), logging why; the reason when
/// refused.
fn refuse_fleet(
    cell: &SnapshotCell,
    running: &crate::fleet::Running,
    new: Option<&gapura_config::FleetSettings>,
    global: &Global,
) -> Option<String> {
    let why = running.refusal(new)?;
    global.reloads_failed.fetch_add(1, Ordering::Relaxed);
    log!("reload refused: {why}");
    log!(
        "reload failed; still serving generation {}",
        cell.generation()
    );
    Some(why)
}

/// Refuses a reload that changes a table's size (each shard sized its
/// tables at start), logging the setting; the reason when refused.
fn refuse_resize(
    cell: &SnapshotCell,
    new: &gapura_gate::Snapshot,
    global: &Global,
) -> Option<String> {
    let change = cell
        .load()
        .gate
        .quota_sizes
        .change_to(&new.gate.quota_sizes)?;
    global.reloads_failed.fetch_add(1, Ordering::Relaxed);
    let why = format!(
        "{} changes from {} to {}; each shard sized its tables at start, restart to resize",
        change.key, change.running, change.new
    );
    log!("reload refused: {why}");
    log!(
        "reload failed; still serving generation {}",
        cell.generation()
    );
    Some(why)
}
