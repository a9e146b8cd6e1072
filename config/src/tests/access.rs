//! `[[access_list]]`, its references from hosts, routes and `[server]`, and
//! every access-list code with its path and position.

use super::*;
use gapura_gate::access::AddressRefusal;
use gapura_gate::country::Satisfy;
use gapura_gate::mode::Mode;
use gapura_gate::policy::BlockRef;
use gapura_gate::HostAction;

/// `test-password` at 100,000 iterations, made by the gate's `hash_password`.
pub(super) const HASH: &str =
    "$pbkdf2-sha256$i=100000$Z2FwdXJhLXRlc3Qtc2FsdA$EM48Eo9Ro/tfRyNOp/j4lExxJ4utaKAVWpZKpt341rA";

fn block(index: u32, mode: Mode) -> Option<BlockRef> {
    Some(BlockRef { index, mode })
}

#[test]
fn an_access_list_compiles_every_key_into_the_gate() {
    let c = ok(&format!(
        r#"
[client]
mode = "cloudflare"

[[access_list]]
name = "staff"
allow = ["192.0.2.0/24", "2001:db8:1::/48"]
deny = ["192.0.2.66"]
countries = {{ allow = ["DE", "nl"], deny = ["T1"] }}
drop_denied = true
realm = "Staff area"
satisfy = "any"
pass_credentials = true
users = [{{ name = "alice", password_hash = "{HASH}" }}, {{ name = "bob", password_hash = "{HASH}" }}]

[[host]]
names = ["a.test"]
access_list = "staff"
"#
    ));
    let g = &c.snapshot.gate;
    assert_eq!(g.access_lists.len(), 1);
    let l = &g.access_lists[0];
    assert_eq!((l.name(), l.realm()), ("staff", "Staff area"));
    assert_eq!(l.satisfy(), Satisfy::Any);
    assert!(l.drop_denied() && l.pass_credentials());
    let users: Vec<(&[u8], bool)> = l
        .users()
        .iter()
        .map(|u| (u.name(), u.has_password()))
        .collect();
    assert_eq!(users, [(&b"alice"[..], true), (&b"bob"[..], true)]);
    assert!(l.rules().has_country_rules());
    assert_eq!(
        l.address_only_verdict("192.0.2.66".parse().unwrap()),
        Some(AddressRefusal::Drop)
    );
    assert_eq!(l.address_only_verdict("192.0.2.7".parse().unwrap()), None);
    assert_eq!(c.snapshot.entries[0].policy.access, block(0, Mode::Enforce));
    assert!(other_warnings(&c).is_empty(), "{:?}", c.warnings);
}

#[test]
fn realm_and_satisfy_default_to_the_name_and_all() {
    let c = ok(&format!(
        "[[access_list]]\nname = \"ops\"\nusers = [{{ name = \"a\", password_hash = \"{HASH}\" }}]\n\
         [[host]]\nnames = [\"a.test\"]\naccess_list = \"ops\"\n"
    ));
    let l = &c.snapshot.gate.access_lists[0];
    assert_eq!((l.realm(), l.satisfy()), ("ops", Satisfy::All));
    assert!(!l.drop_denied() && !l.pass_credentials());
}

const LISTS: &str = r#"
[[access_list]]
name = "a"
allow = ["10.0.0.0/8"]

[[access_list]]
name = "b"
deny = ["10.0.0.1"]

[[access_list]]
name = "c"
deny = ["10.0.0.2"]

[[upstream]]
name = "app"
servers = ["127.0.0.1:9001"]
"#;

#[test]
fn only_used_lists_are_compiled_in_profile_order() {
    let c = ok(&format!(
        r#"{LISTS}
[[host]]
names = ["p.test"]
kind = "proxy"
access_list = "c"
access_list_mode = "shadow"
  [[host.route]]
  path = "/"
  upstream = "app"
  [[host.route]]
  path = "/admin"
  upstream = "app"
  access_list = "a"
  [[host.route]]
  path = "/open"
  upstream = "app"
  access_list = false
  [[host.route]]
  path = "/strict"
  upstream = "app"
  access_list_mode = "enforce"
"#
    ));
    let g = &c.snapshot.gate;
    let names: Vec<&str> = g.access_lists.iter().map(|l| l.name()).collect();
    assert_eq!(
        names,
        ["a", "c"],
        "b is unused; profile order, not order of use"
    );
    let entry = &c.snapshot.entries[0];
    assert_eq!(entry.policy.access, block(1, Mode::Shadow));
    let HostAction::Proxy(p) = &entry.action else {
        panic!("a proxy host");
    };
    let routes: Vec<Option<BlockRef>> = p.routes.iter().map(|r| r.policy.access).collect();
    assert_eq!(
        routes,
        [
            // "/": the host's list and mode.
            block(1, Mode::Shadow),
            // "/admin": its own list, the host's mode.
            block(0, Mode::Shadow),
            // "/open": false turns the host's list off.
            None,
            // "/strict": the host's list, enforced.
            block(1, Mode::Enforce),
        ]
    );
    assert_eq!(g.accept_list, None);
}

#[test]
fn the_server_access_list_is_checked_at_accept() {
    let c = ok(&format!("[server]\naccess_list = \"b\"\n{LISTS}"));
    let g = &c.snapshot.gate;
    let names: Vec<&str> = g.access_lists.iter().map(|l| l.name()).collect();
    assert_eq!(names, ["b"]);
    assert_eq!(g.accept_list, Some(0));
    assert_eq!(
        g.access_lists[0].address_only_verdict("10.0.0.1".parse().unwrap()),
        Some(AddressRefusal::Deny)
    );
}

#[test]
fn server_access_list_must_name_a_list_with_addresses() {
    assert_eq!(
        one(&format!("[server]\naccess_list = \"zz\"\n{LISTS}")),
        at("server.accessList.unknown", "server.access_list", 2, 15)
    );
    let e = errors(&format!("[server]\naccess_list = \"zz\"\n{LISTS}"));
    assert_eq!(
        e[0].message,
        "no [[access_list]] is named \"zz\" (known: a, b, c)"
    );
    let src = format!(
        "[server]\naccess_list = \"pw\"\n[[access_list]]\nname = \"pw\"\n\
         users = [{{ name = \"a\", password_hash = \"{HASH}\" }}]\n"
    );
    assert_eq!(
        one(&src),
        at("server.accessList.noAddresses", "server.access_list", 2, 15)
    );
}

/// (profile, code, path, line, column) for one error each.
fn list_cases() -> Vec<(String, &'static str, &'static str, u32, u32)> {
    let list = |body: &str| format!("[[access_list]]\nname = \"l\"\n{body}\n");
    let cf = |body: &str| format!("[client]\nmode = \"cloudflare\"\n{}", list(body));
    let hash_1000 = HASH.replace("i=100000", "i=1000");
    let user = |field: &str| format!("users = [{{ name = \"u\", {field} }}]");
    vec![
        (
            "[[access_list]]\nallow = [\"10.0.0.1\"]\n".into(),
            "accessList.name.required",
            "access_list[0].name",
            1,
            1,
        ),
        (
            "[[access_list]]\nname = \"Staff\"\n".into(),
            "accessList.name.invalid",
            "access_list[0].name",
            2,
            8,
        ),
        (
            format!("{}{}", list(""), list("")),
            "accessList.name.duplicate",
            "access_list[1].name",
            5,
            8,
        ),
        (
            list("allow = [\"10.0.0.1\", \"10.0.0.300\"]"),
            "address.invalid",
            "access_list[0].allow[1]",
            3,
            22,
        ),
        (
            list("deny = [\"10.0.0.1/8\"]"),
            "address.host_bits",
            "access_list[0].deny[0]",
            3,
            9,
        ),
        (
            cf("countries.allow = [\"DE\", \"ZZ\"]"),
            "country.invalid",
            "access_list[0].countries.allow[1]",
            5,
            26,
        ),
        (
            cf("countries = { allow = [\"DE\"], deny = [\"de\"] }"),
            "country.conflict",
            "access_list[0].countries.deny[0]",
            5,
            39,
        ),
        (
            list("countries.deny = [\"T1\"]"),
            "accessList.countries.noSource",
            "access_list[0].countries.deny",
            3,
            18,
        ),
        (
            list("drop_denied = true"),
            "accessList.ip.dropDenied.withoutAddresses",
            "access_list[0].drop_denied",
            3,
            15,
        ),
        (
            list("realm = \"a\\\"b\""),
            "accessList.realm.invalid",
            "access_list[0].realm",
            3,
            9,
        ),
        (
            list("satisfy = \"either\""),
            "accessList.satisfy.invalid",
            "access_list[0].satisfy",
            3,
            11,
        ),
        (
            list(&format!(
                "users = [{{ name = \"a:b\", password_hash = \"{HASH}\" }}]"
            )),
            "accessList.user.username.invalid",
            "access_list[0].users[0].name",
            3,
            19,
        ),
        (
            list(&format!(
                "[[access_list.users]]\nname = \"a\"\npassword_hash = \"{HASH}\"\n\
                 [[access_list.users]]\nname = \"a\"\npassword_hash = \"{HASH}\""
            )),
            "accessList.user.username.duplicate",
            "access_list[0].users[1].name",
            7,
            8,
        ),
        (
            list(&user("password_hash = \"hunter2\"")),
            "accessList.user.password.plain",
            "access_list[0].users[0].password_hash",
            3,
            40,
        ),
        (
            list(&user("password = \"hunter2\"")),
            "accessList.user.password.plain",
            "access_list[0].users[0].password",
            3,
            35,
        ),
        (
            list(&user("password_hash = \"$pbkdf2-sha256$i=1$x\"")),
            "accessList.user.password.malformed",
            "access_list[0].users[0].password_hash",
            3,
            40,
        ),
        (
            list(&user(&format!("password_hash = \"{hash_1000}\""))),
            "accessList.user.password.iterations",
            "access_list[0].users[0].password_hash",
            3,
            40,
        ),
    ]
}

#[test]
fn list_errors_have_their_code_key_path_and_position() {
    for (src, code, path, line, column) in list_cases() {
        assert_eq!(one(&src), at(code, path, line, column), "{src}");
    }
}

#[test]
fn more_than_a_thousand_users_is_too_many() {
    let mut src = String::from("[[access_list]]\nname = \"l\"\n");
    for i in 0..1001 {
        src.push_str(&format!(
            "[[access_list.users]]\nname = \"u{i}\"\npassword_hash = \"{HASH}\"\n"
        ));
    }
    // At the first user past the bound: line 3 + 3 × 1000.
    assert_eq!(
        one(&src),
        at("accessList.users.tooMany", "access_list[0].users", 3003, 1)
    );
}

#[test]
fn password_messages_never_echo_the_value() {
    let src =
        "[[access_list]]\nname = \"l\"\nusers = [{ name = \"u\", password = \"s3cr3t-value\" }, \
               { name = \"v\", password_hash = \"s3cr3t-value\" }]\n";
    let e = errors(src);
    assert_eq!(e.len(), 2, "{e:#?}");
    for err in &e {
        assert_eq!(err.code, "accessList.user.password.plain");
        assert!(!err.message.contains("s3cr3t"), "{}", err.message);
        assert!(!format!("{err:?}").contains("s3cr3t"));
    }
}

#[test]
fn every_problem_of_every_list_is_reported_at_once() {
    let e = codes(
        "[[access_list]]\nname = \"l\"\nallow = [\"x\", \"10.0.0.0/33\"]\nsatisfy = \"some\"\n\
         [[access_list]]\nname = \"l\"\nrealm = \"\"\n",
    );
    assert_eq!(
        e,
        [
            ("address.invalid", "access_list[0].allow[0]".to_string()),
            ("address.prefix.invalid", "access_list[0].allow[1]".into()),
            (
                "accessList.satisfy.invalid",
                "access_list[0].satisfy".into()
            ),
            ("accessList.name.duplicate", "access_list[1].name".into()),
            ("accessList.realm.invalid", "access_list[1].realm".into()),
        ]
    );
}

#[test]
fn users_without_a_hash_and_empty_lists_are_warnings() {
    let c = ok(&format!(
        "[[access_list]]\nname = \"l\"\nusers = [{{ name = \"a\", password_hash = \"{HASH}\" }}, \
         {{ name = \"locked\" }}]\n[[access_list]]\nname = \"nothing\"\n"
    ));
    let w: Vec<_> = c.warnings.iter().map(key).collect();
    assert_eq!(
        w,
        [
            at(
                "accessList.user.noPassword",
                "access_list[0].users[1]",
                3,
                136
            ),
            at("accessList.empty", "access_list[1]", 4, 1),
        ]
    );
    for w in &c.warnings {
        assert!(DOC.contains(&format!("| `{}` |", w.code)), "{}", w.code);
    }
    // Unused lists are checked but not compiled.
    assert!(c.snapshot.gate.access_lists.is_empty());
}

#[test]
fn host_and_route_references_must_name_a_list() {
    let route = |line: &str| {
        format!(
            "{LISTS}[[host]]\nnames = [\"a.test\"]\nkind = \"proxy\"\n\
             [[host.route]]\npath = \"/\"\nupstream = \"app\"\n{line}\n"
        )
    };
    let host = |line: &str| format!("{LISTS}[[host]]\nnames = [\"a.test\"]\n{line}\n");
    let cases = [
        (
            host("access_list = \"zz\""),
            "host.accessList.unknown",
            "host[0].access_list",
            19,
            15,
        ),
        (
            host("access_list = true"),
            "host.accessList.invalid",
            "host[0].access_list",
            19,
            15,
        ),
        (
            host("access_list_mode = \"dry\""),
            "host.accessList.mode.invalid",
            "host[0].access_list_mode",
            19,
            20,
        ),
        (
            route("access_list = \"zz\""),
            "route.accessList.unknown",
            "host[0].route[0].access_list",
            23,
            15,
        ),
        (
            route("access_list = true"),
            "route.accessList.invalid",
            "host[0].route[0].access_list",
            23,
            15,
        ),
        (
            route("access_list_mode = \"dry\""),
            "route.accessList.mode.invalid",
            "host[0].route[0].access_list_mode",
            23,
            20,
        ),
    ];
    for (src, code, path, line, column) in cases {
        assert_eq!(one(&src), at(code, path, line, column), "{src}");
    }
    let e = errors(&host("access_list = \"zz\""));
    assert_eq!(
        e[0].message,
        "no [[access_list]] is named \"zz\" (known: a, b, c)"
    );
    assert_eq!(
        one("[[host]]\nnames = [\"a.test\"]\naccess_list = \"x\"\n").1,
        "host[0].access_list"
    );
    let e = errors("[[host]]\nnames = [\"a.test\"]\naccess_list = \"x\"\n");
    assert_eq!(
        e[0].message,
        "no [[access_list]] is named \"x\" (the profile has no [[access_list]])"
    );
}

#[test]
fn a_users_file_gives_a_list_its_users_and_each_problem_its_line() {
    let list = |file: &str, users: &str| {
        format!(
            "[[access_list]]\nname = \"staff\"\nusers_file = \"{file}\"\n{users}\n\
             [[host]]\nnames = [\"a.test\"]\naccess_list = \"staff\"\n"
        )
    };
    let c = compile_str(&list("/etc/gapura/staff.users", "")).unwrap();
    let l = &c.snapshot.gate.access_lists[0];
    let users: Vec<(&[u8], bool)> = l
        .users()
        .iter()
        .map(|u| (u.name(), u.has_password()))
        .collect();
    assert_eq!(users, [(&b"alice"[..], true), (&b"carol"[..], false)]);
    // carol cannot sign in: the gate's warning, at the file's line.
    let w: Vec<_> = other_warnings(&c)
        .into_iter()
        .map(|w| (w.code, w.path.as_str(), w.message.as_str()))
        .collect();
    assert_eq!(w.len(), 1, "{w:?}");
    assert_eq!(w[0].1, "access_list[0].users_file");
    assert!(
        w[0].2.starts_with("/etc/gapura/staff.users line 3: "),
        "{w:?}"
    );
    // A plain password on line 3 of the file.
    let e = errors(&list("bad.users", ""));
    assert_eq!(e.len(), 1, "{e:?}");
    assert_eq!(
        (e[0].code, e[0].path.as_str(), e[0].line, e[0].column),
        (
            "accessList.user.password.plain",
            "access_list[0].users_file",
            3,
            14
        )
    );
    assert!(
        e[0].message.starts_with("bad.users line 3: "),
        "{}",
        e[0].message
    );
    assert!(!e[0].message.contains("secret"), "{}", e[0].message);
    assert_eq!(
        one(&list("missing.users", "")),
        at(
            "accessList.usersFile.unreadable",
            "access_list[0].users_file",
            3,
            14
        )
    );
    assert_eq!(
        one(&list("staff.users", "users = [{ name = \"dave\" }]")),
        at(
            "accessList.usersFile.withUsers",
            "access_list[0].users_file",
            3,
            14
        )
    );
}

#[test]
fn a_profile_others_may_read_is_warned_of_its_verifiers() {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("gapura-readable-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("gapura.toml");
    std::fs::write(
        &path,
        format!(
            "[[access_list]]\nname = \"staff\"\nusers = [{{ name = \"alice\", password_hash = \"{HASH}\" }}]\n\n\
             [[host]]\nnames = [\"a.test\"]\naccess_list = \"staff\"\n\n[protection]\noff = [\"all\"]\n"
        ),
    )
    .unwrap();
    let readable = |mode: u32| {
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        let c = load_file(&path).unwrap();
        c.warnings
            .iter()
            .filter(|w| w.code == "profile.verifiers.readable")
            .map(|w| (w.path.clone(), w.line))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        readable(0o644),
        [("access_list[0].users[0].password_hash".to_string(), 3)]
    );
    assert!(readable(0o640).is_empty());
    std::fs::remove_dir_all(&dir).unwrap();
}
