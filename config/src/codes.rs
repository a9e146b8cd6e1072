//! The profile's error codes for the gate's errors.
//!
//! The gate reports what is wrong as enums and knows nothing of the profile;
//! this module gives each its stable code (docs/profile.md lists them), and
//! the access list's issues their key path under the list. A code is part of
//! the interface: changing one is a breaking change.

use gapura_gate::access::spec::AccessIssue;
use gapura_gate::cidr::CidrError;
use gapura_gate::country::CountryListError;
use gapura_gate::custom_pages::PageError;
use gapura_gate::custom_pages::PagesError;
use gapura_gate::custom_pages::{PageField, PageProblem};
use gapura_gate::glob::GlobError;
use gapura_gate::maintenance::MaintenanceError;
use gapura_gate::pathmatch::PatternError;
use gapura_gate::quota::RatePolicyError;
use gapura_gate::robots::RobotsError;
use gapura_gate::ruleset::RuleError;
use gapura_gate::ruleset::RuleSetError;

/// A gate error's stable profile code.
pub(crate) trait ProfileCode {
    fn code(&self) -> &'static str;
}

impl ProfileCode for CidrError {
    fn code(&self) -> &'static str {
        match self {
            CidrError::Address => "address.invalid",
            CidrError::Prefix { .. } => "address.prefix.invalid",
            CidrError::HostBits { .. } => "address.host_bits",
        }
    }
}

impl ProfileCode for PageError {
    fn code(&self) -> &'static str {
        use PageField::*;
        use PageProblem::*;
        match (&self.problem, self.field) {
            (UnknownVariable(_), _) => "errorPages.variable.unknown",
            (Required, Heading) => "errorPages.heading.required",
            (TooLong, Heading) => "errorPages.heading.tooLong",
            (Invalid, Heading) => "errorPages.heading.invalid",
            (Unexpected, Heading) => "errorPages.heading.unexpected",
            (Required, Text) => "errorPages.text.required",
            (TooLong, Text) => "errorPages.text.tooLong",
            (Invalid, Text) => "errorPages.text.invalid",
            (Unexpected, Text) => "errorPages.text.unexpected",
            (Required, Html) => "errorPages.html.required",
            (TooLong, Html) => "errorPages.html.tooLong",
            (Invalid, Html) => "errorPages.html.invalid",
            (Unexpected, Html) => "errorPages.html.unexpected",
        }
    }
}

impl ProfileCode for PagesError {
    fn code(&self) -> &'static str {
        self.error
            .as_ref()
            .map_or("errorPages.status.unsupported", ProfileCode::code)
    }
}

impl ProfileCode for CountryListError {
    fn code(&self) -> &'static str {
        match self {
            CountryListError::Invalid { .. } => "country.invalid",
            CountryListError::Duplicate { .. } => "country.duplicate",
            CountryListError::Conflict { .. } => "country.conflict",
        }
    }
}

impl ProfileCode for GlobError {
    fn code(&self) -> &'static str {
        "ruleSet.rule.path.glob.invalid"
    }
}

impl ProfileCode for MaintenanceError {
    fn code(&self) -> &'static str {
        match self {
            MaintenanceError::Status => "maintenance.status.invalid",
            MaintenanceError::RetryAfter => "maintenance.retry_after_seconds.invalid",
            MaintenanceError::Page(e) => e.code(),
        }
    }
}

impl ProfileCode for RobotsError {
    fn code(&self) -> &'static str {
        match self {
            RobotsError::CustomTextRequired => "robots.custom_text.required",
            RobotsError::CustomTextTooLong => "robots.custom_text.too_long",
            RobotsError::CustomTextInvalid => "robots.custom_text.invalid",
        }
    }
}

impl ProfileCode for RuleError {
    fn code(&self) -> &'static str {
        match self {
            RuleError::Empty => "ruleSet.rule.empty",
            RuleError::Path(PatternError::Invalid) => "ruleSet.rule.path.invalid",
            RuleError::Path(PatternError::Encoded) => "ruleSet.rule.path.encoded",
            RuleError::Path(PatternError::NotCanonical) => "ruleSet.rule.path.notCanonical",
            RuleError::Glob(_) => "ruleSet.rule.path.glob.invalid",
            RuleError::Regex(_) => "ruleSet.rule.path.regex.invalid",
            RuleError::Methods { .. } => "ruleSet.rule.methods.invalid",
            RuleError::UserAgent { .. } => "ruleSet.rule.userAgent.invalid",
        }
    }
}

impl ProfileCode for RuleSetError {
    fn code(&self) -> &'static str {
        match self {
            RuleSetError::TooManyRules => "ruleSet.rules.tooMany",
            RuleSetError::Rule { error, .. } => error.code(),
        }
    }
}

impl ProfileCode for RatePolicyError {
    fn code(&self) -> &'static str {
        match self {
            RatePolicyError::Requests => "rate_limit.requests.invalid",
            RatePolicyError::Rate => "rate_limit.rate.invalid",
            RatePolicyError::Burst => "rate_limit.burst.invalid",
        }
    }
}

impl ProfileCode for AccessIssue {
    fn code(&self) -> &'static str {
        match self {
            AccessIssue::Satisfy => "accessList.satisfy.invalid",
            AccessIssue::Address { error, .. } => error.code(),
            AccessIssue::Country(e) => e.code(),
            AccessIssue::DropDeniedWithoutAddresses => "accessList.ip.dropDenied.withoutAddresses",
            AccessIssue::Realm { .. } => "accessList.realm.invalid",
            AccessIssue::TooManyUsers => "accessList.users.tooMany",
            AccessIssue::Empty => "accessList.empty",
            AccessIssue::Username { .. } => "accessList.user.username.invalid",
            AccessIssue::DuplicateUser { .. } => "accessList.user.username.duplicate",
            AccessIssue::NoPassword { .. } => "accessList.user.noPassword",
            AccessIssue::PlainPassword { .. } => "accessList.user.password.plain",
            AccessIssue::MalformedHash { .. } => "accessList.user.password.malformed",
            AccessIssue::Iterations { .. } => "accessList.user.password.iterations",
        }
    }
}

/// The key path under the access list that an issue is about (`allow[2]`,
/// `users[0].password_hash`); empty for the list itself.
pub(crate) fn access_issue_path(issue: &AccessIssue) -> String {
    match issue {
        AccessIssue::Satisfy => "satisfy".into(),
        AccessIssue::Address { deny, index, .. } => {
            format!("{}[{index}]", if *deny { "deny" } else { "allow" })
        }
        AccessIssue::Country(
            CountryListError::Invalid { deny, index } | CountryListError::Duplicate { deny, index },
        ) => format!(
            "countries.{}[{index}]",
            if *deny { "deny" } else { "allow" }
        ),
        AccessIssue::Country(CountryListError::Conflict { index, .. }) => {
            format!("countries.deny[{index}]")
        }
        AccessIssue::DropDeniedWithoutAddresses => "drop_denied".into(),
        AccessIssue::Realm { .. } => "realm".into(),
        AccessIssue::TooManyUsers => "users".into(),
        AccessIssue::Empty => String::new(),
        AccessIssue::Username { user } | AccessIssue::DuplicateUser { user, .. } => {
            format!("users[{user}].name")
        }
        AccessIssue::NoPassword { user } => format!("users[{user}]"),
        AccessIssue::PlainPassword { user }
        | AccessIssue::MalformedHash { user }
        | AccessIssue::Iterations { user, .. } => format!("users[{user}].password_hash"),
    }
}

/// The key under a rule that a rule error is about (`path`, `methods`,
/// `userAgent.contains`), with the list entry when there is one; empty for
/// the rule itself.
pub(crate) fn rule_error_key(error: &RuleError) -> (&'static str, Option<usize>) {
    match error {
        RuleError::Empty => ("", None),
        RuleError::Path(_) | RuleError::Glob(_) | RuleError::Regex(_) => ("path", None),
        RuleError::Methods { item } => ("methods", *item),
        RuleError::UserAgent { item } => ("userAgent.contains", *item),
    }
}
