//! A reload (SIGHUP, or a changed profile with `--watch`): the profile
//! compiled again and published, unless a setting that takes effect only
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

pub(crate) fn do_reload(
    cell: &SnapshotCell,
    global: &Global,
    (settings, fleet, acme): (
        &RuntimeSettings,
        &mut crate::fleet::Running,
        &mut crate::acme::Running,
    ),
    profile: Option<&Path>,
    slots: &mut crate::health::Slots,
) {
    match crate::run::compile(profile) {
        Ok(c) if refuse_resize(cell, &c.snapshot, global) => {}
        Ok(c) if refuse_fleet(cell, fleet, c.runtime.fleet.as_ref(), global) => {}
        Ok(mut c) => {
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
        Err(msg) => {
            global.reloads_failed.fetch_add(1, Ordering::Relaxed);
            for line in msg.lines() {
                log!("reload failed: {line}");
            }
            log!(
                "reload failed; still serving generation {}",
                cell.generation()
            );
        }
    }
}

/// Refuses a reload whose `[fleet]` cannot be applied to the running
/// process (`Running::refusal` says which), logging why; true when refused.
fn refuse_fleet(
    cell: &SnapshotCell,
    running: &crate::fleet::Running,
    new: Option<&gapura_config::FleetSettings>,
    global: &Global,
) -> bool {
    let Some(why) = running.refusal(new) else {
        return false;
    };
    global.reloads_failed.fetch_add(1, Ordering::Relaxed);
    log!("reload refused: {why}");
    log!(
        "reload failed; still serving generation {}",
        cell.generation()
    );
    true
}

/// Refuses a reload that changes a table's size (each shard sized its
/// tables at start), logging the setting; true when refused.
fn refuse_resize(cell: &SnapshotCell, new: &gapura_gate::Snapshot, global: &Global) -> bool {
    let Some(change) = cell
        .load()
        .gate
        .quota_sizes
        .change_to(&new.gate.quota_sizes)
    else {
        return false;
    };
    global.reloads_failed.fetch_add(1, Ordering::Relaxed);
    log!(
        "reload refused: {} changes from {} to {}; each shard sized its tables at start, restart to resize",
        change.key,
        change.running,
        change.new
    );
    log!(
        "reload failed; still serving generation {}",
        cell.generation()
    );
    true
}
