//! An access list as the profile writes it, compiled: every problem with
//! its code and key path under the list.

use crate::codes::{access_issue_path, ProfileCode};
use gapura_gate::access::password::hash_password;
use gapura_gate::access::spec::*;
use gapura_gate::country::Satisfy;

/// A well-formed line with 600,000 iterations, made without running them:
/// compiling parses hashes but never checks a password.
fn hash_line(iterations: u32) -> String {
    hash_password(b"pw", 1, b"0123456789abcdef").replace("$i=1$", &format!("$i={iterations}$"))
}

fn spec() -> AccessListSpec {
    AccessListSpec {
        name: "staff".into(),
        allow: vec!["192.0.2.0/24".into()],
        deny: vec!["192.0.2.66".into()],
        users: vec![UserSpec {
            name: "alice".into(),
            password_hash: Some(hash_line(600_000)),
        }],
        ..AccessListSpec::default()
    }
}

fn codes(result: Result<CompiledAccessList, Vec<AccessIssue>>) -> Vec<(&'static str, String)> {
    result
        .unwrap_err()
        .into_iter()
        .map(|i| (i.code(), access_issue_path(&i)))
        .collect()
}

#[test]
fn a_valid_list_compiles_without_warnings() {
    let c = spec().compile().unwrap();
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    assert_eq!(c.list.name(), "staff");
    assert_eq!(c.list.realm(), "staff");
    assert_eq!(c.list.users().len(), 1);
    assert!(c.list.users()[0].has_password());
    assert_eq!(c.list.rules().allow.range_count(), 1);
}

#[test]
fn a_plain_password_is_refused_without_echoing_it() {
    for plain in [
        "hunter2",
        "",
        "$2y$10$abcdefghijklmnopqrstuv",
        "PBKDF2-SHA256$i=1",
    ] {
        let mut s = spec();
        s.users[0].password_hash = Some(plain.into());
        let errs = s.compile().unwrap_err();
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].code(), "accessList.user.password.plain");
        assert_eq!(access_issue_path(&errs[0]), "users[0].password_hash");
        if !plain.is_empty() {
            assert!(!errs[0].to_string().contains(plain));
        }
    }
    let mut s = spec();
    s.users[0].password_hash = Some("hunter2".into());
    assert!(!format!("{s:?}").contains("hunter2"));
}

#[test]
fn malformed_and_weak_hashes_have_their_own_codes() {
    let mut s = spec();
    s.users[0].password_hash = Some("$pbkdf2-sha256$i=600000$short".into());
    assert_eq!(
        codes(s.compile()),
        [(
            "accessList.user.password.malformed",
            "users[0].password_hash".to_string()
        )]
    );
    for (iterations, ok) in [
        (99_999, false),
        (100_000, true),
        (10_000_000, true),
        (10_000_001, false),
    ] {
        let mut s = spec();
        s.users[0].password_hash = Some(hash_line(iterations));
        match s.compile() {
            Ok(_) => assert!(ok, "{iterations}"),
            Err(e) => {
                assert!(!ok, "{iterations}");
                assert_eq!(e[0].code(), "accessList.user.password.iterations");
                assert!(e[0].to_string().contains(&iterations.to_string()));
            }
        }
    }
}

#[test]
fn user_names_are_visible_ascii_without_colons_and_unique() {
    let mut s = spec();
    let hash = Some(hash_line(600_000));
    for name in ["", "a b", "a:b", "é", &"x".repeat(65), "bob", "bob", "Bob"] {
        s.users.push(UserSpec {
            name: name.to_string(),
            password_hash: hash.clone(),
        });
    }
    assert_eq!(
        codes(s.compile()),
        [
            (
                "accessList.user.username.invalid",
                "users[1].name".to_string()
            ),
            (
                "accessList.user.username.invalid",
                "users[2].name".to_string()
            ),
            (
                "accessList.user.username.invalid",
                "users[3].name".to_string()
            ),
            (
                "accessList.user.username.invalid",
                "users[4].name".to_string()
            ),
            (
                "accessList.user.username.invalid",
                "users[5].name".to_string()
            ),
            (
                "accessList.user.username.duplicate",
                "users[7].name".to_string()
            ),
        ]
    );
    assert!(valid_username(&"x".repeat(64)));
}

#[test]
fn at_most_a_thousand_users() {
    let mut s = spec();
    s.users = (0..1001)
        .map(|i| UserSpec {
            name: format!("u{i}"),
            password_hash: None,
        })
        .collect();
    assert_eq!(
        codes(s.compile()),
        [("accessList.users.tooMany", "users".to_string())]
    );
    s.users.pop();
    let c = s.compile().unwrap();
    assert_eq!(c.warnings.len(), 1000);
}

#[test]
fn a_user_without_a_hash_is_a_warning_and_cannot_sign_in() {
    let mut s = spec();
    s.users[0].password_hash = None;
    let c = s.compile().unwrap();
    assert_eq!(c.warnings.len(), 1);
    assert_eq!(c.warnings[0].code(), "accessList.user.noPassword");
    assert_eq!(access_issue_path(&c.warnings[0]), "users[0]");
    assert!(!c.list.users()[0].has_password());
}

#[test]
fn realms_are_printable_ascii_without_quotes() {
    for (realm, ok) in [
        ("Staff area", true),
        ("", false),
        ("a\"b", false),
        ("a\\b", false),
        ("tab\there", false),
        ("Zoë", false),
        (&"r".repeat(128), true),
        (&"r".repeat(129), false),
    ] {
        let mut s = spec();
        s.realm = Some(realm.to_string());
        match s.compile() {
            Ok(c) => {
                assert!(ok, "{realm:?}");
                assert_eq!(c.list.realm(), realm);
            }
            Err(e) => {
                assert!(!ok, "{realm:?}");
                assert_eq!(e[0].code(), "accessList.realm.invalid");
                assert_eq!(access_issue_path(&e[0]), "realm");
            }
        }
    }
    // A name that cannot be a realm needs one when there are users.
    let mut s = spec();
    s.name = "a\"b".into();
    assert_eq!(
        codes(s.compile()),
        [("accessList.realm.invalid", "realm".to_string())]
    );
}

#[test]
fn drop_denied_needs_something_to_refuse() {
    let mut s = spec();
    s.drop_denied = true;
    assert!(s.compile().is_ok());
    s.allow.clear();
    s.deny.clear();
    assert_eq!(
        codes(s.compile()),
        [(
            "accessList.ip.dropDenied.withoutAddresses",
            "drop_denied".to_string()
        )]
    );
    // Countries count as something to refuse.
    s.countries_deny = vec!["T1".into()];
    assert!(s.compile().is_ok());
}

#[test]
fn address_and_country_errors_keep_the_parsers_codes() {
    let mut s = spec();
    s.allow = vec![
        "192.0.2.0/24".into(),
        "nonsense".into(),
        "10.0.0.1/8".into(),
    ];
    s.deny = vec!["192.0.2.0/33".into()];
    s.countries_allow = vec!["DE".into(), "QQ".into()];
    assert_eq!(
        codes(s.compile()),
        [
            ("address.invalid", "allow[1]".to_string()),
            ("address.host_bits", "allow[2]".to_string()),
            ("address.prefix.invalid", "deny[0]".to_string()),
            ("country.invalid", "countries.allow[1]".to_string()),
        ]
    );
    let mut s = spec();
    s.countries_allow = vec!["DE".into()];
    s.countries_deny = vec!["RU".into(), "de".into()];
    assert_eq!(
        codes(s.compile()),
        [("country.conflict", "countries.deny[1]".to_string())]
    );
}

#[test]
fn an_empty_list_warns_that_it_lets_everyone_through() {
    let s = AccessListSpec {
        name: "open".into(),
        ..AccessListSpec::default()
    };
    let c = s.compile().unwrap();
    assert_eq!(c.warnings[0].code(), "accessList.empty");
}

#[test]
fn satisfy_parses_all_and_any_only() {
    assert_eq!(parse_satisfy("all"), Ok(Satisfy::All));
    assert_eq!(parse_satisfy("any"), Ok(Satisfy::Any));
    assert_eq!(
        parse_satisfy("ALL").unwrap_err().code(),
        "accessList.satisfy.invalid"
    );
}

#[test]
fn references_layer_field_by_field() {
    let defaults = AccessListRef {
        enabled: None,
        list: Some("office".into()),
    };
    let host = AccessListRef::default();
    let route_off = AccessListRef {
        enabled: Some(false),
        list: None,
    };
    let route_other = AccessListRef {
        enabled: None,
        list: Some("admins".into()),
    };
    assert_eq!(
        AccessListRef::layered([&defaults, &host]).effective(),
        Some("office")
    );
    let off = AccessListRef::layered([&defaults, &host, &route_off]);
    assert_eq!(off.effective(), None);
    // The name is kept while off, and a later layer can turn it back on.
    assert_eq!(off.list.as_deref(), Some("office"));
    let on = AccessListRef {
        enabled: Some(true),
        list: None,
    };
    assert_eq!(
        AccessListRef::layered([&defaults, &route_off, &on]).effective(),
        Some("office")
    );
    assert_eq!(
        AccessListRef::layered([&defaults, &host, &route_other]).effective(),
        Some("admins")
    );
    assert_eq!(AccessListRef::default().effective(), None);
}
