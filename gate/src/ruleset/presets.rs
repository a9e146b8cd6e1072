//! The three built-in rule sets, as the rules a profile would state: names
//! and specs only. [`Preset::compile`], which makes the set, is defined
//! beside `RuleSet`.

use super::spec::{Action, RuleSpec};
use crate::robots::AI_CRAWLERS;

/// User agents of well-known scanning tools: one name each that the tool's
/// default user agent contains and no browser's does. It removes noise, not
/// attackers (a real one changes the header). Refreshed with each release.
pub const KNOWN_SCANNERS: &[&str] = &[
    "sqlmap",
    "nikto",
    "Nmap Scripting Engine",
    "masscan",
    "zgrab",
    "nuclei",
];

/// A built-in, read-only rule set. A profile names one like any set; a set of
/// its own may not take a preset's name (`ruleSet.id.reserved`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Preset {
    /// Denies every user agent of [`AI_CRAWLERS`], as one rule: the robots
    /// preset and this set can never disagree about who an AI crawler is.
    BlockAiCrawlers,
    /// Denies the user agents of [`KNOWN_SCANNERS`], as one rule.
    BlockKnownScanners,
    /// Denies a missing or blank user agent (scripts, some health checks).
    BlockEmptyUserAgent,
}

impl Preset {
    pub const ALL: [Preset; 3] = [
        Preset::BlockAiCrawlers,
        Preset::BlockKnownScanners,
        Preset::BlockEmptyUserAgent,
    ];

    /// The reserved name a profile uses.
    pub fn name(self) -> &'static str {
        match self {
            Preset::BlockAiCrawlers => "block_ai_crawlers",
            Preset::BlockKnownScanners => "block_known_scanners",
            Preset::BlockEmptyUserAgent => "block_empty_user_agent",
        }
    }

    pub fn from_name(name: &str) -> Option<Preset> {
        Preset::ALL.into_iter().find(|p| p.name() == name)
    }

    /// The preset's rules, as a profile would state them.
    pub fn rules(self) -> Vec<RuleSpec> {
        vec![match self {
            Preset::BlockAiCrawlers => RuleSpec::new(Action::Deny).user_agent_contains(AI_CRAWLERS),
            Preset::BlockKnownScanners => {
                RuleSpec::new(Action::Deny).user_agent_contains(KNOWN_SCANNERS)
            }
            Preset::BlockEmptyUserAgent => RuleSpec::new(Action::Deny).user_agent_empty(),
        }]
    }
}
