//! `[fleet] profile = "pull"`: a node that runs the fleet's profile, as
//! signed versions through the engine (docs/fleet.md, "One profile for the
//! fleet"). The local file keeps `[server]`, `[fleet]` and the publisher's
//! key, which the fleet cannot change.
//!
//! Keys: `profile` (`"local"`, the default, or `"pull"`), `publisher_key`
//! (required with `"pull"`: the base64 of the publisher's Ed25519 public
//! key, as `gapura fleet keygen` prints it), `state_dir` (where the last
//! good version is kept; default `/var/lib/gapura/fleet`),
//! `profile_poll_ms` (how often the pointer is read, 100..=60000, 1000)
//! and `profile_max_bytes` (the largest version taken, 1024..=67108864,
//! 1 MiB).

use crate::error::Errors;
use crate::rawgate::RawFleet;
use crate::settings::FleetProfile;
use crate::values::int_in;

/// The default of `state_dir`.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/gapura/fleet";

pub(crate) fn check_profile(f: &RawFleet, e: &mut Errors<'_>) -> Option<FleetProfile> {
    let pull = match &f.profile {
        None => false,
        Some(p) => match p.get_ref().as_str() {
            "local" => false,
            "pull" => true,
            other => {
                e.push(
                    "fleet.profile.invalid",
                    "fleet.profile",
                    p.span(),
                    format!(
                        "{other:?}: profile is \"local\" (this file) or \"pull\" (the fleet's)"
                    ),
                );
                return None;
            }
        },
    };
    let poll_ms = int_in(
        e,
        &f.profile_poll_ms,
        "fleet.profile_poll_ms",
        "fleet.profile_poll_ms.range",
        (100, 60_000),
    )
    .map_or(1_000, |n| n as u64);
    let max_bytes = int_in(
        e,
        &f.profile_max_bytes,
        "fleet.profile_max_bytes",
        "fleet.profile_max_bytes.range",
        (1024, 64 << 20),
    )
    .map_or(1 << 20, |n| n as u64);
    let key = f.publisher_key.as_ref();
    if !pull {
        return None;
    }
    let Some(key) = key else {
        e.push(
            "fleet.publisher_key.required",
            "fleet.publisher_key",
            f.profile.as_ref().map_or(0..0, |p| p.span()),
            "profile = \"pull\" takes only what the publisher signed: set publisher_key to \
             the line `gapura fleet keygen` printed",
        );
        return None;
    };
    if key_ok(key.get_ref()).is_err() {
        e.push(
            "fleet.publisher_key.invalid",
            "fleet.publisher_key",
            key.span(),
            "not an Ed25519 public key: 44 characters of base64, as `gapura fleet keygen` \
             prints it",
        );
        return None;
    }
    let state_dir = match &f.state_dir {
        Some(d) if d.get_ref().trim().is_empty() => {
            e.push(
                "fleet.state_dir.invalid",
                "fleet.state_dir",
                d.span(),
                "a state directory needs a path",
            );
            return None;
        }
        Some(d) => d.get_ref().clone(),
        None => DEFAULT_STATE_DIR.to_string(),
    };
    Some(FleetProfile {
        publisher_key: key.get_ref().trim().to_string(),
        state_dir,
        poll_ms,
        max_bytes,
    })
}

/// Whether `key` is 32 bytes of standard base64.
fn key_ok(key: &str) -> Result<(), ()> {
    let key = key.trim();
    let b = key.as_bytes();
    let valid = b.len() == 44
        && b[43] == b'='
        && b[..43]
            .iter()
            .all(|&c| c.is_ascii_alphanumeric() || c == b'+' || c == b'/');
    valid.then_some(()).ok_or(())
}

/// The profile a pulling node runs: the fleet's `fleet_text` with this
/// node's `[server]` and `[fleet]` from `local_text` in place of its own
/// (the fleet cannot change them). `Err`: either is not TOML.
pub fn with_local(fleet_text: &str, local_text: &str) -> Result<String, String> {
    let mut fleet: toml::Table = fleet_text
        .parse()
        .map_err(|e| format!("the fleet's profile is not TOML: {e}"))?;
    let local: toml::Table = local_text
        .parse()
        .map_err(|e| format!("the local profile is not TOML: {e}"))?;
    for key in ["server", "fleet"] {
        fleet.remove(key);
        if let Some(v) = local.get(key) {
            fleet.insert(key.to_string(), v.clone());
        }
    }
    Ok(fleet.to_string())
}

#[cfg(test)]
mod tests {
    use super::with_local;

    #[test]
    fn the_local_server_and_fleet_replace_the_fleets() {
        let fleet =
            "[server]\nshards = 8\n\n[fleet]\nnode = \"x\"\n\n[[host]]\nnames = [\"a.test\"]\n";
        let local = "[server]\nlisten = [\"127.0.0.1:1\"]\n\n[fleet]\nnode = \"edge-1\"\n\n[[host]]\nnames = [\"local.test\"]\n";
        let merged: toml::Table = with_local(fleet, local).unwrap().parse().unwrap();
        assert_eq!(merged["server"].get("shards"), None);
        assert_eq!(merged["server"]["listen"][0].as_str(), Some("127.0.0.1:1"));
        assert_eq!(merged["fleet"]["node"].as_str(), Some("edge-1"));
        assert_eq!(merged["host"][0]["names"][0].as_str(), Some("a.test"));
        assert!(with_local("[[host]", local).is_err());
    }
}
