//! What a profile says about an access list, checked and compiled.
//!
//! The config crate reads the TOML into an [`AccessListSpec`] (keys in
//! docs/access.md) and calls [`AccessListSpec::compile`], which reports every
//! problem it finds as an [`AccessIssue`] naming the entry it is about (the
//! third `allow` entry, the first user's hash); the config crate gives each
//! its stable code, its key path and its line and column. Hosts and routes name a
//! list through an [`AccessListRef`], layered field by field. Compiling
//! allocates; nothing here is on the request path.

use super::basic::MAX_NAME_BYTES;
use super::password::{looks_like_hash, Verifier, MAX_ITERATIONS, MIN_ITERATIONS};
use super::{AccessList, AccessListParts, User, MAX_USERS};
use crate::cidr::{Cidr, CidrError, CidrSet};
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

/// A problem or a warning of an access list, naming the entry it is about.
/// `Display` is the message; the profile code and key path are the config
/// crate's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AccessIssue {
    /// `satisfy` is neither `"all"` nor `"any"`.
    Satisfy,
    /// Entry `index` of `allow` (or of `deny`) is no address or network.
    Address {
        deny: bool,
        index: usize,
        error: CidrError,
    },
    /// A `countries` entry is wrong.
    Country(CountryListError),
    /// `drop_denied` with no address or country to refuse.
    DropDeniedWithoutAddresses,
    /// The realm (`from_name`: the list's name standing in for it) cannot
    /// be written into `WWW-Authenticate`.
    Realm { from_name: bool },
    /// More than [`MAX_USERS`] users.
    TooManyUsers,
    /// A warning: no address, country or user, so everyone passes.
    Empty,
    /// User `user`'s name is not 1 to 64 visible ASCII characters without `:`.
    Username { user: usize },
    /// User `user` repeats an earlier user's `name`.
    DuplicateUser { user: usize, name: String },
    /// A warning: user `user` has no hash and cannot sign in.
    NoPassword { user: usize },
    /// User `user`'s hash is a plain password or another format.
    PlainPassword { user: usize },
    /// User `user`'s hash is malformed.
    MalformedHash { user: usize },
    /// User `user`'s hash uses an iteration count out of bounds.
    Iterations { user: usize, iterations: u32 },
}

impl std::fmt::Display for AccessIssue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Messages never echo a hash: it may be a real password.
        match self {
            AccessIssue::Satisfy => f.write_str(
                "satisfy must be \"all\" (address and password) or \"any\" (address or password)",
            ),
            AccessIssue::Address { error, .. } => error.fmt(f),
            AccessIssue::Country(e) => e.fmt(f),
            AccessIssue::DropDeniedWithoutAddresses => {
                f.write_str("drop_denied is set but the list names no address or country to refuse")
            }
            AccessIssue::Realm { from_name: false } => f.write_str(
                "the realm must be 1 to 128 printable ASCII characters without \" or \\",
            ),
            AccessIssue::Realm { from_name: true } => f.write_str(
                "the list's name cannot serve as the realm: set realm to 1 to 128 \
                 printable ASCII characters without \" or \\",
            ),
            AccessIssue::TooManyUsers => write!(f, "a list holds at most {MAX_USERS} users"),
            AccessIssue::Empty => f.write_str(
                "the list names no address, country or user, so it lets everyone through",
            ),
            AccessIssue::Username { .. } => {
                f.write_str("a user name is 1 to 64 visible ASCII characters without ':'")
            }
            AccessIssue::DuplicateUser { name, .. } => write!(
                f,
                "the user {name} is already in this list (names are case-sensitive)"
            ),
            AccessIssue::NoPassword { .. } => {
                f.write_str("no password_hash is set, so this user cannot sign in")
            }
            AccessIssue::PlainPassword { .. } => f.write_str(
                "a profile holds password hashes only: this value is a plain password or \
                 another format; store the line `gapura passwd` prints ($pbkdf2-sha256$...)",
            ),
            AccessIssue::MalformedHash { .. } => f.write_str(
                "a malformed hash: expected $pbkdf2-sha256$i=ITERATIONS$SALT$HASH as \
                 `gapura passwd` prints it",
            ),
            AccessIssue::Iterations { iterations, .. } => write!(
                f,
                "the hash uses {iterations} iterations; use {MIN_ITERATIONS} to \
                 {MAX_ITERATIONS} (gapura passwd makes 600000)"
            ),
        }
    }
}

impl std::error::Error for AccessIssue {}

/// A compiled list and the warnings it carries.
#[derive(Clone, Debug)]
pub struct CompiledAccessList {
    pub list: AccessList,
    pub warnings: Vec<AccessIssue>,
}

/// `"all"` or `"any"`; anything else is [`AccessIssue::Satisfy`].
pub fn parse_satisfy(text: &str) -> Result<Satisfy, AccessIssue> {
    match text {
        "all" => Ok(Satisfy::All),
        "any" => Ok(Satisfy::Any),
        _ => Err(AccessIssue::Satisfy),
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
    pub fn compile(&self) -> Result<CompiledAccessList, Vec<AccessIssue>> {
        let mut errors = Vec::new();
        let mut warnings = Vec::new();
        let allow = cidrs(false, &self.allow, &mut errors);
        let deny = cidrs(true, &self.deny, &mut errors);
        let countries = match CountryRules::parse(&self.countries_allow, &self.countries_deny) {
            Ok(c) => c,
            Err(e) => {
                errors.push(AccessIssue::Country(e));
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
            errors.push(AccessIssue::DropDeniedWithoutAddresses);
        }
        match &self.realm {
            Some(r) if !valid_realm(r) => errors.push(AccessIssue::Realm { from_name: false }),
            None if !self.users.is_empty() && !valid_realm(&self.name) => {
                errors.push(AccessIssue::Realm { from_name: true })
            }
            _ => {}
        }
        if self.users.len() > MAX_USERS {
            errors.push(AccessIssue::TooManyUsers);
        }
        let users = self.users(&mut errors, &mut warnings);
        if no_address_rules && self.users.is_empty() {
            warnings.push(AccessIssue::Empty);
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

    fn users(&self, errors: &mut Vec<AccessIssue>, warnings: &mut Vec<AccessIssue>) -> Vec<User> {
        let mut seen = HashSet::new();
        let mut users = Vec::with_capacity(self.users.len());
        for (i, u) in self.users.iter().enumerate() {
            if !valid_username(&u.name) {
                errors.push(AccessIssue::Username { user: i });
            } else if !seen.insert(u.name.as_str()) {
                errors.push(AccessIssue::DuplicateUser {
                    user: i,
                    name: u.name.clone(),
                });
            }
            let verifier = match &u.password_hash {
                None => {
                    warnings.push(AccessIssue::NoPassword { user: i });
                    None
                }
                Some(h) => password_hash(h, i, errors),
            };
            users.push(User::new(&u.name, verifier));
        }
        users
    }
}

fn countries_empty(spec: &AccessListSpec) -> bool {
    spec.countries_allow.is_empty() && spec.countries_deny.is_empty()
}

fn password_hash(text: &str, user: usize, errors: &mut Vec<AccessIssue>) -> Option<Verifier> {
    if !looks_like_hash(text) {
        errors.push(AccessIssue::PlainPassword { user });
        return None;
    }
    let Ok(v) = Verifier::parse(text) else {
        errors.push(AccessIssue::MalformedHash { user });
        return None;
    };
    if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&v.iterations()) {
        errors.push(AccessIssue::Iterations {
            user,
            iterations: v.iterations(),
        });
        return None;
    }
    Some(v)
}

/// Parses every entry of `allow` (or `deny`), reporting each bad one.
fn cidrs(deny: bool, entries: &[String], errors: &mut Vec<AccessIssue>) -> CidrSet {
    let mut ok = Vec::with_capacity(entries.len());
    for (index, e) in entries.iter().enumerate() {
        match Cidr::parse(e) {
            Ok(c) => ok.push(c),
            Err(error) => errors.push(AccessIssue::Address { deny, index, error }),
        }
    }
    CidrSet::from_cidrs(ok)
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
