//! The gate's errors through the profile's codes: each error a compile
//! reports gets its documented code and key.

use crate::codes::{rule_error_key, ProfileCode};
use gapura_gate::custom_pages::{
    validate_entry, PageEntrySpec, PageField, PageForm, MAX_HTML_BYTES,
};
use gapura_gate::maintenance::{Maintenance, MaintenanceSpec, MAX_RETRY_AFTER_SECONDS};
use gapura_gate::pathmatch::PatternError;
use gapura_gate::ruleset::{
    Action,
    PathPatternKind::{Exact, Glob as GlobKind, Prefix, Regex},
    RuleError, RuleSet, RuleSetError, RuleSpec,
};

fn codes(spec: PageEntrySpec) -> Vec<&'static str> {
    validate_entry(&spec)
        .iter()
        .map(ProfileCode::code)
        .collect()
}

fn deny() -> RuleSpec {
    RuleSpec::new(Action::Deny)
}

// Custom pages.

#[test]
fn unknown_variables_are_refused_in_every_field() {
    assert_eq!(
        codes(PageEntrySpec::document("<p>{user}</p>")),
        vec!["errorPages.variable.unknown"]
    );
    assert_eq!(
        codes(PageEntrySpec::message("Oops {code}", "Try {later}")),
        vec!["errorPages.variable.unknown", "errorPages.variable.unknown"]
    );
    let e = &validate_entry(&PageEntrySpec::message("{x}", "ok"))[0];
    assert_eq!(e.field, PageField::Heading);
    assert_eq!(
        e.to_string(),
        "{x} is not a variable; the variables are {status}, {statusText}, {requestId}, {host}, {cfRay}"
    );
    // Escaped, it is text.
    assert!(codes(PageEntrySpec::message("{{x}", "ok")).is_empty());
}

#[test]
fn message_validation_codes() {
    assert!(codes(PageEntrySpec::message("Gone", "It moved.")).is_empty());
    assert_eq!(
        codes(PageEntrySpec {
            form: PageForm::Message,
            ..PageEntrySpec::default()
        }),
        vec!["errorPages.heading.required", "errorPages.text.required"]
    );
    assert_eq!(
        codes(PageEntrySpec::message("  ", "x")),
        vec!["errorPages.heading.required"]
    );
    assert_eq!(
        codes(PageEntrySpec::message(&"h".repeat(121), &"t".repeat(501))),
        vec!["errorPages.heading.tooLong", "errorPages.text.tooLong"]
    );
    assert!(codes(PageEntrySpec::message(
        &"\u{e9}".repeat(120),
        &"t".repeat(500)
    ))
    .is_empty());
    assert_eq!(
        codes(PageEntrySpec::message("two\nlines", "tab\there")),
        vec!["errorPages.heading.invalid", "errorPages.text.invalid"]
    );
    let mut with_html = PageEntrySpec::message("a", "b");
    with_html.html = Some("<p>".into());
    assert_eq!(codes(with_html), vec!["errorPages.html.unexpected"]);
}

#[test]
fn document_validation_codes() {
    assert!(codes(PageEntrySpec::document("<!doctype html>\n<p>\tok</p>\r\n")).is_empty());
    assert_eq!(
        codes(PageEntrySpec {
            form: PageForm::Document,
            ..PageEntrySpec::default()
        }),
        vec!["errorPages.html.required"]
    );
    assert_eq!(
        codes(PageEntrySpec::document(" \n")),
        vec!["errorPages.html.required"]
    );
    assert_eq!(
        codes(PageEntrySpec::document(&"x".repeat(MAX_HTML_BYTES + 1))),
        vec!["errorPages.html.tooLong"]
    );
    assert!(codes(PageEntrySpec::document(&"x".repeat(MAX_HTML_BYTES))).is_empty());
    assert_eq!(
        codes(PageEntrySpec::document("a\u{0}b")),
        vec!["errorPages.html.invalid"]
    );
    let mut both = PageEntrySpec::document("<p>");
    both.heading = Some("h".into());
    both.text = Some("t".into());
    assert_eq!(
        codes(both),
        vec![
            "errorPages.heading.unexpected",
            "errorPages.text.unexpected"
        ]
    );
}

// Rule sets.

#[test]
fn every_validation_code() {
    let code = |spec: RuleSpec| RuleSet::compile(&[spec]).unwrap_err()[0].code();
    assert_eq!(code(deny()), "ruleSet.rule.empty");
    assert_eq!(code(deny().user_agent_contains(&[])), "ruleSet.rule.empty");
    assert_eq!(
        code(deny().path(Exact, "admin")),
        "ruleSet.rule.path.invalid"
    );
    assert_eq!(
        code(deny().path(Prefix, "/a%2fb")),
        "ruleSet.rule.path.encoded"
    );
    assert_eq!(
        code(deny().path(Prefix, "/a/")),
        "ruleSet.rule.path.notCanonical"
    );
    assert_eq!(
        code(deny().path(GlobKind, "/a***")),
        "ruleSet.rule.path.glob.invalid"
    );
    assert_eq!(
        code(deny().path(GlobKind, "a/*")),
        "ruleSet.rule.path.glob.invalid"
    );
    assert_eq!(
        code(deny().path(Regex, "(")),
        "ruleSet.rule.path.regex.invalid"
    );
    assert_eq!(
        code(deny().path(Regex, "(a{100}){100}")),
        "ruleSet.rule.path.regex.invalid"
    );
    assert_eq!(
        code(deny().methods(&["GE T"])),
        "ruleSet.rule.methods.invalid"
    );
    assert_eq!(code(deny().methods(&[""])), "ruleSet.rule.methods.invalid");
    assert_eq!(
        code(deny().methods(&["BASELINE-CONTROLS"])),
        "ruleSet.rule.methods.invalid"
    );
    let seventeen: Vec<String> = (0..17).map(|i| format!("M{i}")).collect();
    let many: Vec<&str> = seventeen.iter().map(String::as_str).collect();
    assert_eq!(code(deny().methods(&many)), "ruleSet.rule.methods.invalid");
    assert_eq!(
        code(deny().user_agent_contains(&["caf\u{e9}"])),
        "ruleSet.rule.userAgent.invalid"
    );
    assert_eq!(
        code(deny().user_agent_contains(&["  "])),
        "ruleSet.rule.userAgent.invalid"
    );
    let long = "a".repeat(129);
    assert_eq!(
        code(deny().user_agent_contains(&[&long])),
        "ruleSet.rule.userAgent.invalid"
    );
    let hundred_one: Vec<String> = (0..101).map(|i| format!("bot{i}")).collect();
    let many: Vec<&str> = hundred_one.iter().map(String::as_str).collect();
    assert_eq!(
        code(deny().user_agent_contains(&many)),
        "ruleSet.rule.userAgent.invalid"
    );
    // Bounds are inclusive.
    assert!(RuleSet::compile(&[deny().methods(&["BASELINE-CONTROL"])]).is_ok());
    assert!(RuleSet::compile(&[deny().user_agent_contains(&[&"a".repeat(128)])]).is_ok());
    assert!(RuleSet::compile(&[deny().user_agent_contains(&many[..100])]).is_ok());
}

#[test]
fn errors_carry_the_rule_position_and_key() {
    let errors = RuleSet::compile(&[
        deny().path(Exact, "/ok"),
        deny().methods(&["GET", "B@D"]),
        deny(),
        deny().user_agent_contains(&["ok", "\u{1}"]),
        deny().path(Regex, "[z-a]"),
    ])
    .unwrap_err();
    let got: Vec<_> = errors
        .iter()
        .map(|e| match e {
            RuleSetError::Rule { index, error } => (*index, error.code(), rule_error_key(error)),
            RuleSetError::TooManyRules => unreachable!(),
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (1, "ruleSet.rule.methods.invalid", ("methods", Some(1))),
            (2, "ruleSet.rule.empty", ("", None)),
            (
                3,
                "ruleSet.rule.userAgent.invalid",
                ("userAgent.contains", Some(1))
            ),
            (4, "ruleSet.rule.path.regex.invalid", ("path", None)),
        ]
    );
    let RuleSetError::Rule {
        error: RuleError::Regex(msg),
        ..
    } = &errors[3]
    else {
        panic!("{:?}", errors[3]);
    };
    assert!(msg.contains("invalid character class range"), "{msg}");
    assert_eq!(
        RuleError::Path(PatternError::NotCanonical).to_string(),
        PatternError::NotCanonical.to_string()
    );
}

// Maintenance.

#[test]
fn bounds_and_page_errors_have_codes() {
    let spec = MaintenanceSpec {
        enabled: true,
        status: 301,
        retry_after_seconds: MAX_RETRY_AFTER_SECONDS + 1,
        page: Some(PageEntrySpec {
            form: PageForm::Message,
            heading: Some("Back {soon}".into()),
            text: None,
            html: None,
        }),
    };
    let codes: Vec<_> = Maintenance::compile(&spec)
        .unwrap_err()
        .iter()
        .map(ProfileCode::code)
        .collect();
    assert_eq!(
        codes,
        vec![
            "maintenance.status.invalid",
            "maintenance.retry_after_seconds.invalid",
            "errorPages.variable.unknown",
            "errorPages.text.required",
        ]
    );
    assert!(Maintenance::compile(&MaintenanceSpec {
        enabled: true,
        retry_after_seconds: MAX_RETRY_AFTER_SECONDS,
        ..MaintenanceSpec::default()
    })
    .is_ok());
}
