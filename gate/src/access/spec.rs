//! What a profile says about an access list, checked and compiled.
//!
//! The config crate reads the TOML into an [`AccessListSpec`] (keys in
//! docs/access.md) and calls [`AccessListSpec::compile`], which reports every
//! problem it finds with a stable code and a key path relative to the list
//! (`allow[2]`, `users[0].password_hash`); the config crate prefixes the
//! list's own path and adds the line and column. Hosts and routes name a
//! list through an [`AccessListRef`], layered field by field. Compiling
//! allocates; nothing here is on the request path.

use super::basic::MAX_NAME_BYTES;
use super::password::{looks_like_hash, Verifier, MAX_ITERATIONS, MIN_ITERATIONS};
use super::{AccessList, AccessListParts, User, MAX_USERS};
use crate::cidr::{Cidr, CidrSet};
use crate::country::{AddressRules, CountryListError, CountryRules, Satisfy};
use std::collections::HashSet;

/// Longest realm, in bytes.
pub const MAX_REALM_BYTES: usize = 128;

/// One access list as the profile writes it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AccessListSpec {
    pub name: String,
    /// Addresses and networks allowed (`allow`).
    pub allow: Vec<String>,
    /// Addresses and networks refused (`deny`).
    pub deny: Vec<String>,
    /// `countries.allow`.
    pub countries_allow: Vec<String>,
    /// `countries.deny`.
    pub countries_deny: Vec<String>,
    pub drop_denied: bool,
    /// `None`: the list's name.
    pub realm: Option<String>,
    pub satisfy: Satisfy,
    pub pass_credentials: bool,
    pub users: Vec<UserSpec>,
}

/// One basic-auth user.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct UserSpec {
    pub name: String,
    /// The line `gapura passwd` printed. `None`: the user cannot sign in
    /// (a warning), a way to lock an account and keep its name.
    pub password_hash: Option<String>,
}

impl std::fmt::Debug for UserSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The field may hold a plain password by mistake: never print it.
        f.debug_struct("UserSpec")
            .field("name", &self.name)
            .field("password_hash", &self.password_hash.as_ref().map(|_| ".."))
            .finish()
    }
}

/// A problem or a warning, with a key path relative to the list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecIssue {
    pub code: &'static str,
    pub path: String,
    pub message: String,
}

impl SpecIssue {
    fn new(code: &'static str, path: impl Into<String>, message: impl Into<String>) -> SpecIssue {
        SpecIssue {
            code,
            path: path.into(),
            message: message.into(),
        }
    }
}

/// A compiled list and the warnings it carries.
#[derive(Clone, Debug)]
pub struct CompiledAccessList {
    pub list: AccessList,
    pub warnings: Vec<SpecIssue>,
}

/// `"all"` or `"any"`; anything else is `accessList.satisfy.invalid`.
pub fn parse_satisfy(text: &str) -> Result<Satisfy, SpecIssue> {
    match text {
        "all" => Ok(Satisfy::All),
        "any" => Ok(Satisfy::Any),
        _ => Err(SpecIssue::new(
            "accessList.satisfy.invalid",
            "satisfy",
            "satisfy must be \"all\" (address and password) or \"any\" (address or password)",
        )),
    }
}

/// Whether a realm can be written into `WWW-Authenticate` as it is: 1 to
/// 128 printable ASCII characters, no `"` or `\`.
pub fn valid_realm(realm: &str) -> bool {
    !realm.is_empty()
        && realm.len() <= MAX_REALM_BYTES
        && realm
            .bytes()
            .all(|b| (0x20..=0x7e).contains(&b) && b != b'"' && b != b'\\')
}

/// Whether a user name is 1 to 64 visible ASCII characters without `:`.
pub fn valid_username(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_BYTES
        && name.bytes().all(|b| b.is_ascii_graphic() && b != b':')
}

impl AccessListSpec {
    /// Checks everything and compiles the list, or returns every error.
    /// Warnings ride along with a successful compile. Allocates.
    pub fn compile(&self) -> Result<CompiledAccessList, Vec<SpecIssue>> {
        let mut errors = Vec::new();
        let mut warnings = Vec::new();
        let allow = cidrs("allow", &self.allow, &mut errors);
        let deny = cidrs("deny", &self.deny, &mut errors);
        let countries = match CountryRules::parse(&self.countries_allow, &self.countries_deny) {
            Ok(c) => c,
            Err(e) => {
                errors.push(country_issue(&e));
                CountryRules::default()
            }
        };
        let rules = AddressRules {
            allow,
            deny,
            countries,
        };
        let no_address_rules =
            self.allow.is_empty() && self.deny.is_empty() && countries_empty(self);
        if self.drop_denied && no_address_rules {
            errors.push(SpecIssue::new(
                "accessList.ip.dropDenied.withoutAddresses",
                "drop_denied",
                "drop_denied is set but the list names no address or country to refuse",
            ));
        }
        match &self.realm {
            Some(r) if !valid_realm(r) => errors.push(SpecIssue::new(
                "accessList.realm.invalid",
                "realm",
                "the realm must be 1 to 128 printable ASCII characters without \" or \\",
            )),
            None if !self.users.is_empty() && !valid_realm(&self.name) => {
                errors.push(SpecIssue::new(
                    "accessList.realm.invalid",
                    "realm",
                    "the list's name cannot serve as the realm: set realm to 1 to 128 \
                     printable ASCII characters without \" or \\",
                ))
            }
            _ => {}
        }
        if self.users.len() > MAX_USERS {
            errors.push(SpecIssue::new(
                "accessList.users.tooMany",
                "users",
                format!("a list holds at most {MAX_USERS} users"),
            ));
        }
        let users = self.users(&mut errors, &mut warnings);
        if no_address_rules && self.users.is_empty() {
            warnings.push(SpecIssue::new(
                "accessList.empty",
                "",
                "the list names no address, country or user, so it lets everyone through",
            ));
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        let list = AccessList::from_parts(AccessListParts {
            name: self.name.clone(),
            rules,
            drop_denied: self.drop_denied,
            satisfy: self.satisfy,
            pass_credentials: self.pass_credentials,
            realm: self.realm.clone(),
            users,
        });
        Ok(CompiledAccessList { list, warnings })
    }

    fn users(&self, errors: &mut Vec<SpecIssue>, warnings: &mut Vec<SpecIssue>) -> Vec<User> {
        let mut seen = HashSet::new();
        let mut users = Vec::with_capacity(self.users.len());
        for (i, u) in self.users.iter().enumerate() {
            let path = format!("users[{i}]");
            if !valid_username(&u.name) {
                errors.push(SpecIssue::new(
                    "accessList.user.username.invalid",
                    format!("{path}.name"),
                    "a user name is 1 to 64 visible ASCII characters without ':'",
                ));
            } else if !seen.insert(u.name.as_str()) {
                errors.push(SpecIssue::new(
                    "accessList.user.username.duplicate",
                    format!("{path}.name"),
                    format!(
                        "the user {} is already in this list (names are case-sensitive)",
                        u.name
                    ),
                ));
            }
            let verifier = match &u.password_hash {
                None => {
                    warnings.push(SpecIssue::new(
                        "accessList.user.noPassword",
                        path.clone(),
                        "no password_hash is set, so this user cannot sign in",
                    ));
                    None
                }
                Some(h) => password_hash(h, &format!("{path}.password_hash"), errors),
            };
            users.push(User::new(&u.name, verifier));
        }
        users
    }
}

fn countries_empty(spec: &AccessListSpec) -> bool {
    spec.countries_allow.is_empty() && spec.countries_deny.is_empty()
}

fn password_hash(text: &str, path: &str, errors: &mut Vec<SpecIssue>) -> Option<Verifier> {
    // Messages never echo the value: it may be a real password.
    if !looks_like_hash(text) {
        errors.push(SpecIssue::new(
            "accessList.user.password.plain",
            path,
            "a profile holds password hashes only: this value is a plain password or \
             another format; store the line `gapura passwd` prints ($pbkdf2-sha256$...)",
        ));
        return None;
    }
    let Ok(v) = Verifier::parse(text) else {
        errors.push(SpecIssue::new(
            "accessList.user.password.malformed",
            path,
            "a malformed hash: expected $pbkdf2-sha256$i=ITERATIONS$SALT$HASH as \
             `gapura passwd` prints it",
        ));
        return None;
    };
    if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&v.iterations()) {
        errors.push(SpecIssue::new(
            "accessList.user.password.iterations",
            path,
            format!(
                "the hash uses {} iterations; use {MIN_ITERATIONS} to {MAX_ITERATIONS} \
                 (gapura passwd makes 600000)",
                v.iterations()
            ),
        ));
        return None;
    }
    Some(v)
}

/// Parses every entry, reporting each bad one at `key[i]` with the CIDR
/// parser's own code.
fn cidrs(key: &str, entries: &[String], errors: &mut Vec<SpecIssue>) -> CidrSet {
    let mut ok = Vec::with_capacity(entries.len());
    for (i, e) in entries.iter().enumerate() {
        match Cidr::parse(e) {
            Ok(c) => ok.push(c),
            Err(err) => errors.push(SpecIssue::new(
                err.code(),
                format!("{key}[{i}]"),
                err.to_string(),
            )),
        }
    }
    CidrSet::from_cidrs(ok)
}

fn country_issue(e: &CountryListError) -> SpecIssue {
    let path = match *e {
        CountryListError::Invalid { deny, index } | CountryListError::Duplicate { deny, index } => {
            format!("countries.{}[{index}]", if deny { "deny" } else { "allow" })
        }
        CountryListError::Conflict { index, .. } => format!("countries.deny[{index}]"),
    };
    SpecIssue::new(e.code(), path, e.to_string())
}

/// How a layer (defaults, bundle, host, route) names its access list.
/// `None` fields inherit from the layer below.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AccessListRef {
    /// `false` turns an inherited list off (the name is kept).
    pub enabled: Option<bool>,
    pub list: Option<String>,
}

impl AccessListRef {
    /// `over` on top of `base`, field by field.
    pub fn merge(base: &AccessListRef, over: &AccessListRef) -> AccessListRef {
        AccessListRef {
            enabled: over.enabled.or(base.enabled),
            list: over.list.clone().or_else(|| base.list.clone()),
        }
    }

    /// Merges layers from the bottom (defaults) to the top (route).
    pub fn layered<'a>(layers: impl IntoIterator<Item = &'a AccessListRef>) -> AccessListRef {
        layers.into_iter().fold(AccessListRef::default(), |acc, l| {
            AccessListRef::merge(&acc, l)
        })
    }

    /// The list in force: named, and not turned off (`enabled` defaults to
    /// on, so naming a list is the whole job).
    pub fn effective(&self) -> Option<&str> {
        match self.enabled {
            Some(false) => None,
            _ => self.list.as_deref(),
        }
    }
}

#[cfg(test)]
#[path = "spec_tests.rs"]
mod tests;
