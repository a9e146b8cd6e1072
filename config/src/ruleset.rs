//! Semantic checks of `[[rule_set]]`, compiled rule by rule through the
//! gate's [`RuleSetBuilder`].
//!
//! The gate validates each rule and names the key an error is about
//! ([`RuleError::key`]); here it gets the set's and the rule's path
//! (`rule_set[N].rule[M].`) and the position of the value. Checks the gate
//! cannot make live here: the set's name (a preset's name is reserved,
//! `ruleSet.id.reserved`), a `path` with exactly one kind, and the action.
//! A name that no set has may be a preset's ([`SetTarget::Preset`]), so a
//! preset is used exactly like a set; it is compiled only when used.

use crate::codes::ProfileCode;
use crate::error::Errors;
use crate::names::BlockKind;
use crate::rawblocks::{RawRule, RawRuleSet};
use crate::values::StrList;
use gapura_gate::ruleset::{
    Action, PathPatternKind, PathSpec, Preset, RuleError, RuleSet, RuleSetBuilder, RuleSetError,
    RuleSpec, UserAgentSpec, MAX_RULES,
};
use std::collections::HashMap;
use std::ops::Range;
use toml::Spanned;

/// What a `rule_set` reference names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum SetTarget {
    /// The N-th `[[rule_set]]`.
    User(usize),
    Preset(Preset),
}

/// The checked sets, in profile order.
pub(crate) struct RuleSets {
    /// One per `[[rule_set]]`; `None` for a set with errors.
    pub compiled: Vec<Option<RuleSet>>,
    /// One per `[[rule_set]]` (empty when missing or invalid).
    pub names: Vec<String>,
    /// Name → position, for every valid name.
    pub ids: HashMap<String, usize>,
}

impl RuleSets {
    /// The set or preset a reference names.
    pub(crate) fn resolve(&self, name: &str) -> Option<SetTarget> {
        match self.ids.get(name) {
            Some(&i) => Some(SetTarget::User(i)),
            None => Preset::from_name(name).map(SetTarget::Preset),
        }
    }

    /// Whether a set has a rule with action `challenge` (presets have
    /// none; a set with errors answers true, its errors are reported).
    pub(crate) fn has_challenge_rule(&self, t: SetTarget) -> bool {
        match t {
            SetTarget::User(i) => self.compiled.get(i).is_none_or(|set| {
                set.as_ref().is_none_or(|set| {
                    (0..set.len()).any(|r| {
                        set.rule(r)
                            .is_some_and(|s| s.action == gapura_gate::ruleset::Action::Challenge)
                    })
                })
            }),
            SetTarget::Preset(_) => false,
        }
    }

    /// `known: a, b; presets: ...`, for messages.
    pub(crate) fn known(&self) -> String {
        let mut own: Vec<&str> = self.ids.keys().map(String::as_str).collect();
        own.sort_unstable();
        let presets: Vec<&str> = Preset::ALL.iter().map(|p| p.name()).collect();
        if own.is_empty() {
            format!("presets: {}", presets.join(", "))
        } else {
            format!("known: {}; presets: {}", own.join(", "), presets.join(", "))
        }
    }
}

/// Checks and compiles every set.
pub(crate) fn check_rule_sets(raw: &[Spanned<RawRuleSet>], e: &mut Errors<'_>) -> RuleSets {
    let mut sets = RuleSets {
        compiled: Vec::with_capacity(raw.len()),
        names: Vec::with_capacity(raw.len()),
        ids: HashMap::new(),
    };
    for (i, s) in raw.iter().enumerate() {
        let base = format!("rule_set[{i}]");
        let name = check_name(s.get_ref(), &base, s.span(), &sets.ids, e);
        if let Some(n) = &name {
            sets.ids.insert(n.clone(), i);
        }
        sets.names.push(name.unwrap_or_default());
        sets.compiled.push(check_rules(s.get_ref(), &base, e));
    }
    sets
}

const RULE_SET: BlockKind = BlockKind {
    key: "rule_set",
    noun: "rule set",
    codes: [
        "ruleSet.name.required",
        "ruleSet.name.invalid",
        "ruleSet.name.duplicate",
    ],
    required: "a rule set needs a name that hosts and routes refer to, such as name = \"edge\"",
};

/// The set's name; a preset's name is reserved (and so never taken by an
/// earlier set).
fn check_name(
    s: &RawRuleSet,
    base: &str,
    span: Range<usize>,
    ids: &HashMap<String, usize>,
    e: &mut Errors<'_>,
) -> Option<String> {
    let n = RULE_SET.check(&s.name, base, span, |v| ids.get(v).copied(), e)?;
    let v = n.get_ref();
    if Preset::from_name(v).is_some() {
        e.push(
            "ruleSet.id.reserved",
            format!("{base}.name"),
            n.span(),
            format!(
                "{v:?} is a preset's name: name the preset where a set is used \
                 (rule_set = {v:?}), or give this set a name of its own"
            ),
        );
        return None;
    }
    Some(v.clone())
}

/// A rule as the gate states it, the span of its path pattern, and whether
/// a check made here failed.
struct Stated {
    spec: RuleSpec,
    pattern_at: Option<(&'static str, Range<usize>)>,
    path_refused: bool,
    ok: bool,
}

fn strings(list: &Option<StrList>) -> Vec<String> {
    list.as_ref().map_or_else(Vec::new, |l| {
        l.get_ref().iter().map(|s| s.get_ref().clone()).collect()
    })
}

fn state(r: &RawRule, span: Range<usize>, base: &str, e: &mut Errors<'_>) -> Stated {
    let mut ok = true;
    let action = match &r.action {
        None => {
            e.push(
                "ruleSet.rule.action.required",
                format!("{base}.action"),
                span.clone(),
                "a rule needs an action: \"deny\", \"drop\" or \"allow\"",
            );
            ok = false;
            Action::Deny
        }
        Some(a) => Action::parse(a.get_ref()).unwrap_or_else(|| {
            e.push(
                "ruleSet.rule.action.invalid",
                format!("{base}.action"),
                a.span(),
                format!(
                    "must be one of \"deny\", \"drop\", \"allow\", \"challenge\", got {:?}",
                    a.get_ref()
                ),
            );
            ok = false;
            Action::Deny
        }),
    };
    let mut spec = RuleSpec::new(action);
    let mut pattern_at = None;
    let mut path_refused = false;
    if let Some(p) = &r.path {
        let kinds: Vec<(&'static str, PathPatternKind, &Spanned<String>)> = [
            ("exact", PathPatternKind::Exact, &p.exact),
            ("prefix", PathPatternKind::Prefix, &p.prefix),
            ("glob", PathPatternKind::Glob, &p.glob),
            ("regex", PathPatternKind::Regex, &p.regex),
        ]
        .into_iter()
        .filter_map(|(k, kind, v)| v.as_ref().map(|v| (k, kind, v)))
        .collect();
        match kinds.as_slice() {
            [(key, kind, v)] => {
                spec.path = Some(PathSpec {
                    kind: *kind,
                    pattern: v.get_ref().clone(),
                });
                pattern_at = Some((*key, v.span()));
            }
            _ => {
                let at = kinds.get(1).map_or(span, |(_, _, v)| v.span());
                e.push(
                    "ruleSet.rule.path.kind",
                    format!("{base}.path"),
                    at,
                    "a rule's path states exactly one of exact, prefix, glob or regex",
                );
                ok = false;
                path_refused = true;
            }
        }
    }
    spec.methods = strings(&r.methods);
    if let Some(ua) = &r.user_agent {
        spec.user_agent = UserAgentSpec {
            contains: strings(&ua.contains),
            empty: ua.empty.as_ref().is_some_and(|v| *v.get_ref()),
        };
    }
    Stated {
        spec,
        pattern_at,
        path_refused,
        ok,
    }
}

/// The key path and position of a gate error about rule `r`.
fn locate(
    r: &Spanned<RawRule>,
    base: &str,
    stated: &Stated,
    error: &RuleError,
) -> (String, Range<usize>) {
    let raw = r.get_ref();
    let item = |list: &Option<StrList>, i: Option<usize>| {
        list.as_ref().map(|l| match i {
            Some(i) => l.get_ref().get(i).map_or(l.span(), Spanned::span),
            None => l.span(),
        })
    };
    match crate::codes::rule_error_key(error) {
        ("path", _) => match &stated.pattern_at {
            Some((kind, at)) => (format!("{base}.path.{kind}"), at.clone()),
            None => (format!("{base}.path"), r.span()),
        },
        ("methods", i) => (
            match i {
                Some(i) => format!("{base}.methods[{i}]"),
                None => format!("{base}.methods"),
            },
            item(&raw.methods, i).unwrap_or(r.span()),
        ),
        ("userAgent.contains", i) => (
            match i {
                Some(i) => format!("{base}.user_agent.contains[{i}]"),
                None => format!("{base}.user_agent.contains"),
            },
            raw.user_agent
                .as_ref()
                .and_then(|ua| item(&ua.contains, i))
                .unwrap_or(r.span()),
        ),
        _ => (base.to_string(), r.span()),
    }
}

/// Checks every rule of a set, in order; the set when all passed.
fn check_rules(s: &RawRuleSet, base: &str, e: &mut Errors<'_>) -> Option<RuleSet> {
    let mut builder = RuleSetBuilder::new();
    let mut ok = true;
    for (j, r) in s.rule.iter().enumerate() {
        let rbase = format!("{base}.rule[{j}]");
        let stated = state(r.get_ref(), r.span(), &rbase, e);
        ok &= stated.ok;
        if j == MAX_RULES {
            e.push(
                "ruleSet.rules.tooMany",
                rbase.clone(),
                r.span(),
                format!(
                    "a rule set holds at most {MAX_RULES} rules; this is number {}",
                    s.rule.len()
                ),
            );
            ok = false;
        }
        if j >= MAX_RULES {
            continue;
        }
        match builder.push(&stated.spec) {
            Ok(_) => {}
            // A path refused here left the rule with no condition.
            Err(RuleSetError::Rule {
                error: RuleError::Empty,
                ..
            }) if stated.path_refused => {}
            Err(RuleSetError::Rule { error, .. }) => {
                let (path, at) = locate(r, &rbase, &stated, &error);
                e.push(error.code(), path, at, error.to_string());
                ok = false;
            }
            Err(err) => {
                e.push(err.code(), rbase, r.span(), err.to_string());
                ok = false;
            }
        }
    }
    ok.then(|| builder.build())
}
