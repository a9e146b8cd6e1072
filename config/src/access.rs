//! Semantic checks of `[[access_list]]`, compiled through the gate's
//! [`AccessListSpec::compile`].
//!
//! The gate checks a list's values and reports each problem with a code and
//! a key path relative to the list (`allow[2]`, `users[0].password_hash`);
//! here the list's own path (`access_list[N].`) is put in front and the
//! position found from the raw value the relative path names, so the codes
//! are exactly the gate's. Checks the gate cannot make live here: the
//! list's name, a plain `password` key (refused like a plain password in
//! `password_hash`, `accessList.user.password.plain`), and country rules in
//! a profile whose client mode carries no country
//! (`accessList.countries.noSource`). The gate's warnings (a user without a
//! hash, a list that names nothing) become profile warnings.
//!
//! Every list is compiled, used or not; only the used ones go into the
//! snapshot (`blocks`). Messages never echo a password field.

use crate::codes::{access_issue_path, ProfileCode};
use crate::env::CertificateLoader;
use crate::error::Errors;
use crate::names::BlockKind;
use crate::rawblocks::{RawAccessList, RawUser};
use crate::usersfile::FileUsers;
use crate::values::{Opt, StrList};
use gapura_gate::access::spec::{parse_satisfy, AccessIssue, AccessListSpec, UserSpec};
use gapura_gate::access::AccessList;
use std::collections::HashMap;
use std::ops::Range;
use toml::Spanned;

/// The checked lists, in profile order.
pub(crate) struct AccessLists {
    /// One per `[[access_list]]`; `None` for a list with errors.
    pub compiled: Vec<Option<AccessList>>,
    /// Whether each list has address rules (`allow` or `deny`): only those
    /// can refuse at accept.
    pub has_addresses: Vec<bool>,
    /// Whether each list has allow rules (addresses or countries): only
    /// those admit a client by its address alone (a maintenance bypass).
    pub has_allow: Vec<bool>,
    /// Name → position, for every valid name.
    pub ids: HashMap<String, usize>,
}

/// Checks every list. `client_mode` is `client.mode` as written: country
/// rules need `"cloudflare"`.
pub(crate) fn check_access_lists(
    raw: &[Spanned<RawAccessList>],
    client_mode: &Opt<String>,
    files: &dyn CertificateLoader,
    e: &mut Errors<'_>,
) -> AccessLists {
    let mut lists = AccessLists {
        compiled: Vec::with_capacity(raw.len()),
        has_addresses: Vec::with_capacity(raw.len()),
        has_allow: Vec::with_capacity(raw.len()),
        ids: HashMap::new(),
    };
    // An invalid mode has its own error; then say nothing about countries.
    let no_country_source = match client_mode {
        None => true,
        Some(m) => matches!(
            m.get_ref().as_str(),
            "direct" | "x_forwarded_for" | "forwarded"
        ),
    };
    for (i, l) in raw.iter().enumerate() {
        let base = format!("access_list[{i}]");
        let span = l.span();
        let l = l.get_ref();
        let name = ACCESS_LIST
            .check(
                &l.name,
                &base,
                span.clone(),
                |v| lists.ids.get(v).copied(),
                e,
            )
            .map(|n| n.get_ref().clone());
        if let Some(n) = &name {
            lists.ids.insert(n.clone(), i);
        }
        if no_country_source {
            check_country_source(l, &base, e);
        }
        let (mut spec, mut checked) = spec(l, name.unwrap_or_default(), &base, e);
        let file = users_file(l, &base, files, e);
        match &file {
            Some(Ok(f)) => spec.users = f.users().to_vec(),
            Some(Err(())) => checked = false,
            None => {}
        }
        let file = file.and_then(Result::ok);
        let place = |issue: &AccessIssue| match &file {
            Some(f) => f.locate(&base, issue),
            None => {
                let (path, at) = locate(l, &base, span.clone(), issue);
                (path, at, issue.to_string())
            }
        };
        let list = match spec.compile() {
            Ok(_) if !checked => None,
            Ok(c) => {
                for w in &c.warnings {
                    let (path, at, message) = place(w);
                    e.warn(w.code(), path, at, message);
                }
                Some(c.list)
            }
            Err(issues) => {
                for issue in &issues {
                    let (path, at, message) = place(issue);
                    e.push(issue.code(), path, at, message);
                }
                None
            }
        };
        lists.compiled.push(list);
        lists.has_allow.push(
            l.allow.as_ref().is_some_and(|a| !a.get_ref().is_empty())
                || l.countries
                    .as_ref()
                    .and_then(|c| c.allow.as_ref())
                    .is_some_and(|a| !a.get_ref().is_empty()),
        );
        lists.has_addresses.push(
            l.allow.as_ref().is_some_and(|a| !a.get_ref().is_empty())
                || l.deny.as_ref().is_some_and(|d| !d.get_ref().is_empty()),
        );
    }
    lists
}

/// An access list's users read from its `users_file`, and where their
/// problems are reported.
struct UsersFile {
    path: String,
    span: Range<usize>,
    parsed: FileUsers,
}

impl UsersFile {
    /// `users` as the file gave them.
    fn users(&self) -> &[gapura_gate::access::spec::UserSpec] {
        &self.parsed.users
    }

    /// A user's issue: at the `users_file` key, the message naming the
    /// file's line; any other issue as [`locate`] would place it, at the
    /// list.
    fn locate(&self, base: &str, issue: &AccessIssue) -> (String, Range<usize>, String) {
        let relative = access_issue_path(issue);
        let (first, index) = split_index(relative.split('.').next().unwrap_or(""));
        let path = format!("{base}.users_file");
        if first != "users" {
            return (
                format!("{base}.{relative}"),
                self.span.clone(),
                issue.to_string(),
            );
        }
        let line = index
            .and_then(|j| self.parsed.lines.get(j))
            .map_or(String::new(), |n| format!(" line {n}"));
        let message = format!("{}{line}: {issue}", self.path);
        (path, self.span.clone(), message)
    }
}

/// Reads a list's `users_file` when it names one: `Err` (reported here)
/// when it cannot be read or the list also writes `users`.
fn users_file(
    l: &RawAccessList,
    base: &str,
    files: &dyn CertificateLoader,
    e: &mut Errors<'_>,
) -> Option<Result<UsersFile, ()>> {
    let f = l.users_file.as_ref()?;
    let (path, span) = (f.get_ref().clone(), f.span());
    let key = format!("{base}.users_file");
    if !l.users.is_empty() {
        e.push(
            "accessList.usersFile.withUsers",
            key,
            span,
            "a list takes its users from users_file or from users, not both",
        );
        return Some(Err(()));
    }
    match files.load_users(&path) {
        Ok(text) => Some(Ok(UsersFile {
            parsed: crate::usersfile::parse(&text),
            path,
            span,
        })),
        Err(why) => {
            e.push("accessList.usersFile.unreadable", key, span, why);
            Some(Err(()))
        }
    }
}

/// A profile others may read holds password verifiers: warned once per
/// list, at its first `password_hash`.
pub(crate) fn warn_readable(raw: &[Spanned<RawAccessList>], e: &mut Errors<'_>) {
    for (i, l) in raw.iter().enumerate() {
        let first = l.get_ref().users.iter().enumerate().find_map(|(j, u)| {
            let h = u.get_ref().password_hash.as_ref()?;
            Some((j, h.span()))
        });
        if let Some((j, at)) = first {
            e.warn(
                "profile.verifiers.readable",
                format!("access_list[{i}].users[{j}].password_hash"),
                at,
                "this profile may be read by others and holds password verifiers: keep \
                 them in a users_file (mode 0600), or chmod the profile o-r",
            );
        }
    }
}

const ACCESS_LIST: BlockKind = BlockKind {
    key: "access_list",
    noun: "access list",
    codes: [
        "accessList.name.required",
        "accessList.name.invalid",
        "accessList.name.duplicate",
    ],
    required:
        "an access list needs a name that hosts and routes refer to, such as name = \"staff\"",
};

/// Country rules without a country source: every country would be
/// unknown, so an allow list refuses everyone and a deny list nobody.
fn check_country_source(l: &RawAccessList, base: &str, e: &mut Errors<'_>) {
    let Some(c) = &l.countries else {
        return;
    };
    let first = [("allow", &c.allow), ("deny", &c.deny)]
        .into_iter()
        .find_map(|(k, v)| {
            v.as_ref()
                .filter(|v| !v.get_ref().is_empty())
                .map(|v| (k, v))
        });
    if let Some((key, list)) = first {
        e.push(
            "accessList.countries.noSource",
            format!("{base}.countries.{key}"),
            list.span(),
            "countries come only from Cloudflare: with client.mode other than \"cloudflare\" \
             every country is unknown, so a country allow list refuses everyone and a deny \
             list nobody",
        );
    }
}

fn strings(list: &Option<StrList>) -> Vec<String> {
    list.as_ref().map_or_else(Vec::new, |l| {
        l.get_ref().iter().map(|s| s.get_ref().clone()).collect()
    })
}

/// The gate's spec of a list, and whether the checks made here passed (the
/// gate's own checks run either way, on placeholders where these failed).
fn spec(l: &RawAccessList, name: String, base: &str, e: &mut Errors<'_>) -> (AccessListSpec, bool) {
    let mut ok = true;
    let satisfy = match &l.satisfy {
        None => Default::default(),
        Some(s) => match parse_satisfy(s.get_ref()) {
            Ok(s) => s,
            Err(issue) => {
                e.push(
                    issue.code(),
                    format!("{base}.satisfy"),
                    s.span(),
                    issue.to_string(),
                );
                ok = false;
                Default::default()
            }
        },
    };
    let mut users = Vec::with_capacity(l.users.len());
    for (j, u) in l.users.iter().enumerate() {
        let u: &RawUser = u.get_ref();
        if let Some(p) = &u.password {
            e.push(
                "accessList.user.password.plain",
                format!("{base}.users[{j}].password"),
                p.span(),
                "a profile holds password hashes only: make one with `gapura passwd` and \
                 store the line it prints as password_hash",
            );
            ok = false;
        }
        users.push(UserSpec {
            name: u
                .name
                .as_ref()
                .map_or_else(String::new, |n| n.get_ref().clone()),
            password_hash: u.password_hash.as_ref().map(|h| h.get_ref().clone()),
        });
    }
    let (countries_allow, countries_deny) =
        l.countries.as_ref().map_or((Vec::new(), Vec::new()), |c| {
            (strings(&c.allow), strings(&c.deny))
        });
    let spec = AccessListSpec {
        name,
        allow: strings(&l.allow),
        deny: strings(&l.deny),
        countries_allow,
        countries_deny,
        drop_denied: l.drop_denied.as_ref().is_some_and(|d| *d.get_ref()),
        realm: l.realm.as_ref().map(|r| r.get_ref().clone()),
        satisfy,
        pass_credentials: l.pass_credentials.as_ref().is_some_and(|p| *p.get_ref()),
        users,
    };
    (spec, ok)
}

/// `"allow[2]"` → `("allow", Some(2))`; `"satisfy"` → `("satisfy", None)`.
fn split_index(part: &str) -> (&str, Option<usize>) {
    match part.strip_suffix(']').and_then(|p| p.split_once('[')) {
        Some((key, n)) => (key, n.parse().ok()),
        None => (part, None),
    }
}

fn element(list: &Option<StrList>, i: Option<usize>) -> Option<Range<usize>> {
    let list = list.as_ref()?;
    match i {
        Some(i) => list.get_ref().get(i).map(Spanned::span),
        None => Some(list.span()),
    }
}

/// The full key path and the position of the value an issue's relative
/// path names; the list's own span when it names nothing written.
fn locate(
    l: &RawAccessList,
    base: &str,
    span: Range<usize>,
    issue: &AccessIssue,
) -> (String, Range<usize>) {
    let relative = access_issue_path(issue);
    let path = if relative.is_empty() {
        base.to_string()
    } else {
        format!("{base}.{relative}")
    };
    let mut parts = relative.split('.');
    let (first, index) = split_index(parts.next().unwrap_or(""));
    let second = parts.next();
    let spanned = |v: &Opt<String>| v.as_ref().map(Spanned::span);
    let at = match (first, second) {
        ("allow", _) => element(&l.allow, index),
        ("deny", _) => element(&l.deny, index),
        ("countries", Some(side)) => {
            let (side, index) = split_index(side);
            l.countries.as_ref().and_then(|c| match side {
                "allow" => element(&c.allow, index),
                _ => element(&c.deny, index),
            })
        }
        ("drop_denied", _) => l.drop_denied.as_ref().map(Spanned::span),
        ("realm", _) => spanned(&l.realm).or_else(|| spanned(&l.name)),
        ("satisfy", _) => spanned(&l.satisfy),
        ("users", field) => match index {
            // Too many: at the first user past the bound.
            None => l
                .users
                .get(gapura_gate::access::MAX_USERS)
                .map(Spanned::span),
            Some(j) => l.users.get(j).map(|u| {
                let r = u.get_ref();
                match field {
                    Some("name") => spanned(&r.name),
                    Some("password_hash") => spanned(&r.password_hash),
                    _ => None,
                }
                .unwrap_or_else(|| u.span())
            }),
        },
        _ => None,
    };
    (path, at.unwrap_or(span))
}
