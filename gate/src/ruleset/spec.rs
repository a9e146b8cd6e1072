//! A rule as the profile states it, its bounds, and its validation codes.

use crate::glob::GlobError;
use crate::pathmatch::PatternError;
use crate::token::is_tchar;

/// Most rules in one set (`ruleSet.rules.tooMany` above it).
pub const MAX_RULES: usize = 200;
/// Most methods in one rule.
pub const MAX_METHODS: usize = 16;
/// Longest method token.
pub const MAX_METHOD_BYTES: usize = 16;
/// Most user-agent substrings in one rule.
pub const MAX_UA_SUBSTRINGS: usize = 100;
/// Longest user-agent substring, in characters (after trimming).
pub const MAX_UA_SUBSTRING_CHARS: usize = 128;

/// What a matched rule does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// 403 with the (host's or built-in) Forbidden page.
    Deny,
    /// Abort the connection, no answer.
    Drop,
    /// End the set here; the rest of the chain still runs.
    Allow,
    /// End the set here and mark the request for proof of work (a host or
    /// route whose `proof_of_work.when` names this set challenges it).
    Challenge,
}

impl Action {
    /// Parses the profile value `deny`, `drop`, `allow` or `challenge`.
    pub fn parse(s: &str) -> Option<Action> {
        Some(match s {
            "deny" => Action::Deny,
            "drop" => Action::Drop,
            "allow" => Action::Allow,
            "challenge" => Action::Challenge,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Action::Deny => "deny",
            Action::Drop => "drop",
            Action::Allow => "allow",
            Action::Challenge => "challenge",
        }
    }
}

/// How a rule's path pattern matches the canonical path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PathPatternKind {
    /// The whole path equals the pattern.
    Exact,
    /// The path is the pattern or continues it with `/`.
    Prefix,
    /// A [`crate::glob`] glob over the whole path.
    Glob,
    /// A regex found anywhere in the path (see [`super::MAX_REGEX_BYTES`]).
    Regex,
}

impl PathPatternKind {
    pub fn parse(s: &str) -> Option<PathPatternKind> {
        Some(match s {
            "exact" => PathPatternKind::Exact,
            "prefix" => PathPatternKind::Prefix,
            "glob" => PathPatternKind::Glob,
            "regex" => PathPatternKind::Regex,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            PathPatternKind::Exact => "exact",
            PathPatternKind::Prefix => "prefix",
            PathPatternKind::Glob => "glob",
            PathPatternKind::Regex => "regex",
        }
    }
}

/// A path condition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathSpec {
    pub kind: PathPatternKind,
    pub pattern: String,
}

/// A user-agent condition: it holds when any substring occurs in any
/// `User-Agent` line (ASCII case ignored), or, with `empty`, when the user
/// agent is missing or blank. No substrings and `empty` false is no
/// condition.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UserAgentSpec {
    pub contains: Vec<String>,
    pub empty: bool,
}

/// One rule as stated. Every condition given must hold; at least one must
/// be given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleSpec {
    pub path: Option<PathSpec>,
    /// Empty: any method.
    pub methods: Vec<String>,
    pub user_agent: UserAgentSpec,
    pub action: Action,
}

impl RuleSpec {
    /// A rule with no condition yet.
    pub fn new(action: Action) -> RuleSpec {
        RuleSpec {
            path: None,
            methods: Vec::new(),
            user_agent: UserAgentSpec::default(),
            action,
        }
    }

    pub fn path(mut self, kind: PathPatternKind, pattern: &str) -> RuleSpec {
        self.path = Some(PathSpec {
            kind,
            pattern: pattern.to_owned(),
        });
        self
    }

    pub fn methods(mut self, methods: &[&str]) -> RuleSpec {
        self.methods = methods.iter().map(|m| (*m).to_owned()).collect();
        self
    }

    pub fn user_agent_contains(mut self, substrings: &[&str]) -> RuleSpec {
        self.user_agent.contains = substrings.iter().map(|s| (*s).to_owned()).collect();
        self
    }

    pub fn user_agent_empty(mut self) -> RuleSpec {
        self.user_agent.empty = true;
        self
    }
}

/// Why one rule was refused (the config crate gives each its profile code).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RuleError {
    /// No condition (`ruleSet.rule.empty`).
    Empty,
    /// An exact or prefix pattern (`ruleSet.rule.path.invalid`, `.encoded`,
    /// `.notCanonical`).
    Path(PatternError),
    /// `ruleSet.rule.path.glob.invalid`.
    Glob(GlobError),
    /// `ruleSet.rule.path.regex.invalid`, with the parse or size error.
    Regex(String),
    /// `ruleSet.rule.methods.invalid`: `item` is the offending entry, or
    /// `None` for too many.
    Methods { item: Option<usize> },
    /// `ruleSet.rule.userAgent.invalid`: `item` is the offending substring,
    /// or `None` for too many.
    UserAgent { item: Option<usize> },
}

impl std::fmt::Display for RuleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RuleError::Empty => f.write_str(
                "a rule needs at least one condition (path, methods or userAgent); one with none \
                 would match every request",
            ),
            RuleError::Path(e) => e.fmt(f),
            RuleError::Glob(e) => e.fmt(f),
            RuleError::Regex(msg) => f.write_str(msg),
            RuleError::Methods { item: None } => write!(f, "a rule lists at most {MAX_METHODS} methods"),
            RuleError::Methods { item: Some(_) } => write!(
                f,
                "a method is an HTTP token of 1 to {MAX_METHOD_BYTES} characters"
            ),
            RuleError::UserAgent { item: None } => write!(
                f,
                "a rule lists at most {MAX_UA_SUBSTRINGS} user-agent substrings"
            ),
            RuleError::UserAgent { item: Some(_) } => write!(
                f,
                "a user-agent substring is printable ASCII, 1 to {MAX_UA_SUBSTRING_CHARS} characters"
            ),
        }
    }
}

impl std::error::Error for RuleError {}

/// Why a rule set was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RuleSetError {
    /// More than [`MAX_RULES`] rules (`ruleSet.rules.tooMany`).
    TooManyRules,
    /// Rule `index` (counted from 0) was refused.
    Rule { index: usize, error: RuleError },
}

impl std::fmt::Display for RuleSetError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RuleSetError::TooManyRules => write!(f, "a rule set holds at most {MAX_RULES} rules"),
            RuleSetError::Rule { index, error } => write!(f, "rule {}: {error}", index + 1),
        }
    }
}

impl std::error::Error for RuleSetError {}

/// Checks the methods and returns them upper case, unique and sorted.
pub(crate) fn normalize_methods(methods: &[String]) -> Result<Vec<String>, RuleError> {
    if methods.len() > MAX_METHODS {
        return Err(RuleError::Methods { item: None });
    }
    let mut out = Vec::with_capacity(methods.len());
    for (i, m) in methods.iter().enumerate() {
        if m.is_empty() || m.len() > MAX_METHOD_BYTES || !m.bytes().all(is_tchar) {
            return Err(RuleError::Methods { item: Some(i) });
        }
        out.push(m.to_ascii_uppercase());
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// Checks the substrings and returns them trimmed, unique ignoring case
/// (the first spelling kept) and sorted ignoring case.
pub(crate) fn normalize_user_agents(contains: &[String]) -> Result<Vec<String>, RuleError> {
    if contains.len() > MAX_UA_SUBSTRINGS {
        return Err(RuleError::UserAgent { item: None });
    }
    let mut out: Vec<String> = Vec::with_capacity(contains.len());
    for (i, s) in contains.iter().enumerate() {
        let t = s.trim();
        if t.is_empty()
            || t.len() > MAX_UA_SUBSTRING_CHARS
            || !t.bytes().all(|b| (0x20..0x7F).contains(&b))
        {
            return Err(RuleError::UserAgent { item: Some(i) });
        }
        if !out.iter().any(|o| o.eq_ignore_ascii_case(t)) {
            out.push(t.to_owned());
        }
    }
    out.sort_by_key(|s| s.to_ascii_lowercase());
    Ok(out)
}
