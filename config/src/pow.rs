//! Proof of work in a profile: `proof_of_work = { enabled, difficulty,
//! token_lifetime_hours, when, mode }` at every host level (defaults,
//! bundle, host), layered field by field, and `proof_of_work = true |
//! false` on a route (the switch only; the values are the host's). Only a
//! proxy host's routes are challenged; the host's verify endpoint exists
//! when any of them is.

use crate::error::Errors;
use crate::rawblocks::RawProofOfWork;
use crate::ruleset::{RuleSets, SetTarget};
use crate::values::{choice, int_in};
use gapura_gate::mode::Mode;
use gapura_gate::pow::{
    ProofOfWork, DEFAULT_DIFFICULTY, DEFAULT_LIFETIME_HOURS, MAX_DIFFICULTY, MAX_LIFETIME_HOURS,
    MIN_DIFFICULTY,
};
use std::collections::HashMap;
use std::ops::Range;
use toml::Spanned;

/// `when`, resolved: the set, where it was written.
#[derive(Clone, Debug)]
pub(crate) struct WhenRef {
    pub set: SetTarget,
    pub name: String,
    pub span: Range<usize>,
    pub path: String,
}

/// One layer's proof of work, each field optional.
#[derive(Clone, Debug, Default)]
pub(crate) struct PowLayer {
    pub enabled: Option<bool>,
    pub difficulty: Option<u8>,
    pub lifetime_hours: Option<u32>,
    pub when: Option<WhenRef>,
    pub mode: Option<Mode>,
}

impl crate::layer::Fields for PowLayer {
    fn merge_fields(base: &PowLayer, over: &PowLayer) -> PowLayer {
        PowLayer {
            enabled: over.enabled.or(base.enabled),
            difficulty: over.difficulty.or(base.difficulty),
            lifetime_hours: over.lifetime_hours.or(base.lifetime_hours),
            when: over.when.clone().or_else(|| base.when.clone()),
            mode: over.mode.or(base.mode),
        }
    }
}

/// Checks `proof_of_work` of a layer at `base`.
pub(crate) fn check_pow(
    raw: Option<&Spanned<RawProofOfWork>>,
    base: &str,
    sets: &RuleSets,
    e: &mut Errors<'_>,
) -> PowLayer {
    let Some(raw) = raw else {
        return PowLayer::default();
    };
    let base = format!("{base}.proof_of_work");
    let r = raw.get_ref();
    let difficulty = int_in(
        e,
        &r.difficulty,
        &format!("{base}.difficulty"),
        "host.proof_of_work.difficulty.range",
        (i64::from(MIN_DIFFICULTY), i64::from(MAX_DIFFICULTY)),
    )
    .map(|d| d as u8);
    let lifetime_hours = int_in(
        e,
        &r.token_lifetime_hours,
        &format!("{base}.token_lifetime_hours"),
        "host.proof_of_work.token_lifetime_hours.range",
        (1, i64::from(MAX_LIFETIME_HOURS)),
    )
    .map(|h| h as u32);
    let mode = r.mode.as_ref().map(|_| {
        choice(
            e,
            &r.mode,
            &format!("{base}.mode"),
            "host.proof_of_work.mode.invalid",
            &[("enforce", Mode::Enforce), ("shadow", Mode::Shadow)],
            Mode::Enforce,
        )
    });
    let when = r.when.as_ref().and_then(|w| {
        let path = format!("{base}.when");
        let name = w.get_ref();
        let Some(set) = sets.resolve(name) else {
            e.push(
                "host.proof_of_work.when.unknown",
                &path,
                w.span(),
                format!("no [[rule_set]] is named {name:?} ({})", sets.known()),
            );
            return None;
        };
        if !sets.has_challenge_rule(set) {
            e.push(
                "host.proof_of_work.when.no_challenge",
                &path,
                w.span(),
                format!(
                    "rule set {name:?} has no rule with action = \"challenge\", so it would \
                     never mark a request for proof of work"
                ),
            );
            return None;
        }
        Some(WhenRef {
            set,
            name: name.clone(),
            span: w.span(),
            path,
        })
    });
    PowLayer {
        enabled: r.enabled.as_ref().map(|b| *b.get_ref()),
        difficulty,
        lifetime_hours,
        when,
        mode,
    }
}

/// A host's proof of work as its routes apply it (`None`: off), and the
/// settings its verify endpoint checks against. `route` is a route's
/// switch.
pub(crate) fn compile_pow(
    host: &PowLayer,
    route: Option<bool>,
    label: &str,
    set_index: &HashMap<SetTarget, u32>,
) -> Option<ProofOfWork> {
    if !route.or(host.enabled).unwrap_or(false) {
        return None;
    }
    Some(settings(host, label, set_index))
}

/// The host's settings, switch aside.
pub(crate) fn settings(
    host: &PowLayer,
    label: &str,
    set_index: &HashMap<SetTarget, u32>,
) -> ProofOfWork {
    ProofOfWork {
        difficulty: host.difficulty.unwrap_or(DEFAULT_DIFFICULTY),
        lifetime_s: u64::from(host.lifetime_hours.unwrap_or(DEFAULT_LIFETIME_HOURS)) * 3600,
        // A set no route applies is not in the snapshot: nothing marks.
        when: host
            .when
            .as_ref()
            .map(|w| set_index.get(&w.set).copied().unwrap_or(u32::MAX)),
        mode: host.mode.unwrap_or_default(),
        host: gapura_gate::pow::host_id(label),
    }
}
