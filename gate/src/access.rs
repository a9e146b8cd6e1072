//! Access lists: who may pass by address, country and password.
//!
//! An [`AccessList`] is compiled from an [`spec::AccessListSpec`] into the
//! snapshot and never changes. [`AccessList::decide`] gives a request one of
//! five answers ([`AccessDecision`]): pass, refuse (403), drop the
//! connection, challenge (401 with a precomputed `WWW-Authenticate`), or
//! verify: a [`VerifyJob`] the runtime hands to the verification pool
//! through the [`line`], because PBKDF2 never runs on a shard thread.
//!
//! The order is fixed. The address side ([`AddressRules`]: address and
//! country allow and deny lists) gives a verdict, and
//! [`crate::country::access_step`] combines it with the users and `satisfy`
//! (see its table). When it asks for credentials, `Authorization: Basic` is
//! read into a stack buffer ([`basic`]); missing or unreadable credentials
//! are challenged. Readable ones are matched against **every** user's name
//! in constant time with no early exit, then looked up in the shard's
//! [`cache::VerifyCache`]: a hit passes at once. A miss becomes a job,
//! **also for a name nobody has and for a user without a hash**: those get a
//! job against a dummy verifier as costly as the list's real ones, whose
//! result is always failure, so neither can be told from a wrong password by
//! timing. Only after the credentials pass is `Authorization` stripped
//! before the upstream (unless `pass_credentials`); a list that let an
//! allowed address through without asking consumed nothing, so a header
//! meant for the upstream still reaches it.
//!
//! Every synchronous path (pass, refuse, drop, challenge, a cache hit, and
//! producing the job) is O(log ranges + users × 64 + credential bytes) and
//! allocates nothing: the job is a fixed-size value carrying its own copy of
//! the password and the verifier. [`VerifyJob::run`] is the costly part.

pub mod basic;
pub mod cache;
pub mod line;
pub mod password;
pub mod spec;

use crate::client::HeaderLines;
use crate::country::{access_step, AccessStep, AddressCheck, AddressRules, Country, Satisfy};
use crate::pages::{builtin_page, Page};
use basic::{read_authorization, Authorization, Unreadable, MAX_NAME_BYTES, MAX_PASSWORD_BYTES};
use cache::{CacheKeyer, VerifyCache};
use password::{Verifier, DEFAULT_ITERATIONS};
use sha2::{Digest, Sha256};
use std::fmt;
use std::net::IpAddr;

/// Most users one list may hold (`accessList.users.tooMany`): the name
/// comparison touches every one on each credentialed request.
pub const MAX_USERS: usize = 1000;

/// One basic-auth user as the gate holds it.
#[derive(Clone)]
pub struct User {
    name: [u8; MAX_NAME_BYTES],
    name_len: u8,
    /// Digest of the name and hash line (0 without a hash): part of every
    /// cache key, so a changed password finds no old entry.
    stamp: u64,
    verifier: Option<Verifier>,
}

impl User {
    /// A user named `name` (1 to 64 bytes; longer names are cut, which the
    /// validator never lets through) with an optional parsed hash.
    pub fn new(name: &str, verifier: Option<Verifier>) -> User {
        let bytes = &name.as_bytes()[..name.len().min(MAX_NAME_BYTES)];
        let mut n = [0u8; MAX_NAME_BYTES];
        n[..bytes.len()].copy_from_slice(bytes);
        let stamp = match &verifier {
            None => 0,
            Some(v) => {
                let d = Sha256::new()
                    .chain_update(b"gapura.credential-stamp.v1\0")
                    .chain_update([bytes.len() as u8])
                    .chain_update(bytes)
                    .chain_update(v.to_line().as_bytes())
                    .finalize();
                let mut s = [0u8; 8];
                s.copy_from_slice(&d[..8]);
                u64::from_le_bytes(s).max(1)
            }
        };
        User {
            name: n,
            name_len: bytes.len() as u8,
            stamp,
            verifier,
        }
    }

    pub fn name(&self) -> &[u8] {
        &self.name[..usize::from(self.name_len)]
    }

    pub fn has_password(&self) -> bool {
        self.verifier.is_some()
    }
}

impl fmt::Debug for User {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("User")
            .field("name", &String::from_utf8_lossy(self.name()))
            .field("has_password", &self.has_password())
            .finish()
    }
}

/// What an access list is made of, already checked (see
/// [`spec::AccessListSpec::compile`] for the checked way in).
#[derive(Clone, Debug, Default)]
pub struct AccessListParts {
    pub name: String,
    pub rules: AddressRules,
    /// A refusal the address side makes aborts the connection instead of
    /// answering 403.
    pub drop_denied: bool,
    pub satisfy: Satisfy,
    /// Forward `Authorization` after the credentials passed.
    pub pass_credentials: bool,
    /// The realm in the challenge; the list's name when `None`.
    pub realm: Option<String>,
    pub users: Vec<User>,
}

/// A compiled access list. Immutable, held in the snapshot.
#[derive(Clone, Debug)]
pub struct AccessList {
    name: Box<str>,
    realm: Box<str>,
    rules: AddressRules,
    drop_denied: bool,
    satisfy: Satisfy,
    pass_credentials: bool,
    users: Box<[User]>,
    /// No users and no country rules (see `address_decides_all`): fixed at
    /// build, asked twice a request.
    decides_all: bool,
    dummy: Verifier,
    challenge: Page,
    busy: Page,
}

/// What the address alone decides at accept time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddressRefusal {
    /// Abort the connection now (`drop_denied`).
    Drop,
    /// Every request on this connection gets 403.
    Deny,
}

/// What the access list does with a request.
#[derive(Debug)]
// The job is a few hundred bytes by value on purpose: boxing it would
// allocate on the deferring path, which must not.
#[allow(clippy::large_enum_variant)]
pub enum AccessDecision<'l> {
    /// Go on with the chain. `strip_authorization`: the list consumed the
    /// credentials and the forwarder must remove `Authorization`.
    Pass { strip_authorization: bool },
    /// Answer 403 (the snapshot's access-denied page).
    Refuse,
    /// Abort the connection without an answer.
    Drop,
    /// Answer 401 with this precomputed page (carrying `WWW-Authenticate`).
    Challenge(&'l Page),
    /// A password must be checked: enter this job in the line, and resume
    /// with [`AccessList::after_verification`] (or answer
    /// [`AccessList::busy_page`] when the line is full or the wait ran out).
    Verify(VerifyJob),
}

/// What happened to the request's credentials, for explain and counters.
/// Never holds the credentials themselves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CredentialsFact {
    /// The list did not ask (the address side decided).
    NotAsked,
    /// No `Authorization: Basic` header.
    Missing,
    Unreadable(Unreadable),
    /// Verified recently: passed without PBKDF2.
    CacheHit,
    /// Sent to the verification pool.
    Deferred,
}

impl CredentialsFact {
    pub fn as_str(self) -> &'static str {
        match self {
            CredentialsFact::NotAsked => "not_asked",
            CredentialsFact::Missing => "missing",
            CredentialsFact::Unreadable(_) => "unreadable",
            CredentialsFact::CacheHit => "cache_hit",
            CredentialsFact::Deferred => "deferred",
        }
    }
}

/// A decision with the facts behind it.
#[derive(Debug)]
pub struct AccessOutcome<'l> {
    pub decision: AccessDecision<'l>,
    pub address: AddressCheck,
    pub credentials: CredentialsFact,
}

/// Whose password a job checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Subject {
    User,
    /// A name no user has: checked against the dummy, always fails.
    UnknownUser,
    /// A user without a hash: checked against the dummy, always fails.
    NoPassword,
}

/// How a verification ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum VerifyResult {
    Ok,
    WrongPassword,
    UnknownUser,
    NoPassword,
}

impl VerifyResult {
    pub fn is_ok(self) -> bool {
        self == VerifyResult::Ok
    }

    /// `ok`, `wrong_password`, `unknown_user`, `no_password` (explain only:
    /// counters and answers must not tell the last three apart).
    pub fn as_str(self) -> &'static str {
        match self {
            VerifyResult::Ok => "ok",
            VerifyResult::WrongPassword => "wrong_password",
            VerifyResult::UnknownUser => "unknown_user",
            VerifyResult::NoPassword => "no_password",
        }
    }
}

/// One password check, self-contained so it can move to a pool thread: the
/// verifier, a copy of the password, and the keys the cache and the line
/// use. The password is zeroed on drop and never printed. The runtime must
/// run every job, dummy or not: skipping one would reveal it.
pub struct VerifyJob {
    verifier: Verifier,
    password: [u8; MAX_PASSWORD_BYTES],
    password_len: u16,
    subject: Subject,
    cache_key: u64,
    share_key: u64,
    client_key: u64,
}

impl VerifyJob {
    /// Runs the PBKDF2 and compares in constant time. Costly (the
    /// verifier's iterations × 2 SHA-256 compressions): **pool threads
    /// only**. A dummy job runs the same work and always fails.
    pub fn run(&self) -> VerifyResult {
        let ok = self
            .verifier
            .check(&self.password[..usize::from(self.password_len)]);
        match self.subject {
            Subject::User if ok => VerifyResult::Ok,
            Subject::User => VerifyResult::WrongPassword,
            Subject::UnknownUser => VerifyResult::UnknownUser,
            Subject::NoPassword => VerifyResult::NoPassword,
        }
    }

    pub fn subject(&self) -> Subject {
        self.subject
    }

    /// The cache key to insert on [`VerifyResult::Ok`].
    pub fn cache_key(&self) -> u64 {
        self.cache_key
    }

    /// The line's share key: equal for identical credentials from the same
    /// client, 0 for a dummy job (never shared).
    pub fn share_key(&self) -> u64 {
        self.share_key
    }

    /// The client's key for the line's per-client share.
    pub fn client_key(&self) -> u64 {
        self.client_key
    }

    /// The iterations the job will run.
    pub fn iterations(&self) -> u32 {
        self.verifier.iterations()
    }
}

impl fmt::Debug for VerifyJob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VerifyJob")
            .field("subject", &self.subject)
            .field("iterations", &self.verifier.iterations())
            .finish_non_exhaustive()
    }
}

impl Drop for VerifyJob {
    fn drop(&mut self) {
        self.password.fill(0);
        std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
    }
}

impl AccessList {
    /// Compiles checked parts: precomputes the challenge and busy pages
    /// and the dummy verifier (as costly as the most costly user, or
    /// [`DEFAULT_ITERATIONS`] when no user has a hash). Allocates.
    pub fn from_parts(parts: AccessListParts) -> AccessList {
        let realm = parts.realm.unwrap_or_else(|| parts.name.clone());
        let iterations = parts
            .users
            .iter()
            .filter_map(|u| u.verifier.map(|v| v.iterations()))
            .max()
            .unwrap_or(DEFAULT_ITERATIONS);
        let dummy = Verifier::dummy(iterations, parts.name.as_bytes());
        let www = format!("Basic realm=\"{realm}\", charset=\"UTF-8\"");
        let challenge = builtin_page(
            401,
            "Sign in to reach this page.",
            "401 Unauthorized\nauthentication required\n",
            &[("WWW-Authenticate", www.as_str())],
        );
        let busy = builtin_page(
            429,
            "Too many sign-ins are being checked. Please try again in a moment.",
            "429 Too Many Requests\ntoo many sign-ins are being checked, retry in a moment\n",
            &[("Retry-After", "1")],
        );
        let decides_all = parts.users.is_empty() && parts.rules.countries.is_empty();
        AccessList {
            decides_all,
            name: parts.name.into(),
            realm: realm.into(),
            rules: parts.rules,
            drop_denied: parts.drop_denied,
            satisfy: parts.satisfy,
            pass_credentials: parts.pass_credentials,
            users: parts.users.into(),
            dummy,
            challenge,
            busy,
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn realm(&self) -> &str {
        &self.realm
    }

    pub fn rules(&self) -> &AddressRules {
        &self.rules
    }

    pub fn satisfy(&self) -> Satisfy {
        self.satisfy
    }

    pub fn drop_denied(&self) -> bool {
        self.drop_denied
    }

    pub fn users(&self) -> &[User] {
        &self.users
    }

    /// Whether `Authorization` reaches the upstream after the list accepted
    /// the credentials (`pass_credentials = true`). When false the proxy
    /// removes it on every pass that consumed credentials.
    pub fn pass_credentials(&self) -> bool {
        self.pass_credentials
    }

    /// The 401 page (`WWW-Authenticate: Basic realm="…", charset="UTF-8"`,
    /// `Cache-Control: no-store`).
    pub fn challenge_page(&self) -> &Page {
        &self.challenge
    }

    /// The 429 page with `Retry-After: 1`, for a full line or a wait that
    /// ran out.
    pub fn busy_page(&self) -> &Page {
        &self.busy
    }

    /// Whether the address side is the whole list: no users and no country
    /// rules. Then [`address_only_verdict`](Self::address_only_verdict)
    /// decides exactly what [`decide`](Self::decide) would, and a request
    /// it lets through passes. O(1).
    #[inline]
    pub fn address_decides_all(&self) -> bool {
        self.decides_all
    }

    /// What the address alone decides, for the runtime to apply at accept
    /// when the connection's address is the client (no trusted proxy, no
    /// PROXY header on the listener): `Some` only when the answer cannot
    /// depend on the country or the credentials. O(log ranges), 0 B.
    pub fn address_only_verdict(&self, addr: IpAddr) -> Option<AddressRefusal> {
        // The address lists alone: folding in a country can only make the
        // verdict stronger, and a stronger verdict refuses whenever a
        // weaker one does, so a refusal here holds whatever the country.
        let verdict = self.rules.check(addr, None).address;
        match access_step(
            verdict,
            !self.users.is_empty(),
            self.satisfy,
            self.drop_denied,
        ) {
            AccessStep::Drop => Some(AddressRefusal::Drop),
            AccessStep::Refuse => Some(AddressRefusal::Deny),
            AccessStep::Pass | AccessStep::AskCredentials => None,
        }
    }

    /// Decides a request. `client` and `country` come from
    /// [`crate::client::ClientPolicy::resolve`]; `cache` is the shard's
    /// (`None` for explain, which neither reads nor refreshes it).
    /// O(log ranges + users × 64 + credential bytes), no allocation.
    pub fn decide<H: HeaderLines + ?Sized>(
        &self,
        client: IpAddr,
        country: Option<Country>,
        headers: &H,
        cache: Option<&mut VerifyCache>,
        keyer: &CacheKeyer,
        now_ms: u64,
    ) -> AccessOutcome<'_> {
        let address = self.rules.check(client, country);
        let step = access_step(
            address.verdict,
            !self.users.is_empty(),
            self.satisfy,
            self.drop_denied,
        );
        let (decision, credentials) = match step {
            AccessStep::Pass => (
                AccessDecision::Pass {
                    strip_authorization: false,
                },
                CredentialsFact::NotAsked,
            ),
            AccessStep::Refuse => (AccessDecision::Refuse, CredentialsFact::NotAsked),
            AccessStep::Drop => (AccessDecision::Drop, CredentialsFact::NotAsked),
            AccessStep::AskCredentials => {
                self.check_credentials(client, headers, cache, keyer, now_ms)
            }
        };
        AccessOutcome {
            decision,
            address,
            credentials,
        }
    }

    fn check_credentials<H: HeaderLines + ?Sized>(
        &self,
        client: IpAddr,
        headers: &H,
        cache: Option<&mut VerifyCache>,
        keyer: &CacheKeyer,
        now_ms: u64,
    ) -> (AccessDecision<'_>, CredentialsFact) {
        let creds = match read_authorization(headers) {
            Authorization::Missing => {
                return (
                    AccessDecision::Challenge(&self.challenge),
                    CredentialsFact::Missing,
                )
            }
            Authorization::Unreadable(why) => {
                return (
                    AccessDecision::Challenge(&self.challenge),
                    CredentialsFact::Unreadable(why),
                )
            }
            Authorization::Basic(c) => c,
        };
        let (index, found) = self.find_user(creds.name());
        let (subject, verifier, stamp) = match self.users.get(index).filter(|_| found) {
            Some(User {
                verifier: Some(v),
                stamp,
                ..
            }) => (Subject::User, *v, *stamp),
            Some(_) => (Subject::NoPassword, self.dummy, 0),
            None => (Subject::UnknownUser, self.dummy, 0),
        };
        // Computed for every subject, so the synchronous part costs the same.
        let cache_key = keyer.credentials_key(stamp, client, creds.as_sent());
        if let Some(cache) = cache {
            if subject == Subject::User && cache.lookup(cache_key, now_ms) {
                return (
                    AccessDecision::Pass {
                        strip_authorization: !self.pass_credentials,
                    },
                    CredentialsFact::CacheHit,
                );
            }
        }
        let pw = creds.password();
        let mut password = [0u8; MAX_PASSWORD_BYTES];
        password[..pw.len()].copy_from_slice(pw);
        let job = VerifyJob {
            verifier,
            password,
            password_len: pw.len() as u16,
            subject,
            cache_key,
            // Every subject shares as a real user's does: identical
            // requests for a name nobody has join one job too, so neither
            // the line nor the time tells a known name from an unknown one.
            share_key: cache_key,
            client_key: keyer.client_key(client),
        };
        (AccessDecision::Verify(job), CredentialsFact::Deferred)
    }

    /// Compares `name` with every user's name in constant time, without an
    /// early exit: eight 64-bit XORs and the length per user, folded with
    /// bit operations only (no branch depends on a byte of a name). Returns
    /// the matching index (0 when none) and whether one matched.
    /// O(users), about a nanosecond per user.
    fn find_user(&self, name: &[u8]) -> (usize, bool) {
        let mut candidate = [0u8; MAX_NAME_BYTES];
        let len = name.len().min(MAX_NAME_BYTES);
        candidate[..len].copy_from_slice(&name[..len]);
        // A name longer than 64 bytes cannot match: its length never equals.
        let cand_len = name.len().min(usize::from(u8::MAX)) as u8;
        let mut index = 0u32;
        let mut found = 0u64;
        for (i, u) in self.users.iter().enumerate() {
            let diff = std::hint::black_box(
                name_diff(&u.name, &candidate) | u64::from(u.name_len ^ cand_len),
            );
            // 1 when diff == 0, else 0, without a branch.
            let eq = ((diff | diff.wrapping_neg()) >> 63) ^ 1;
            let mask = 0u32.wrapping_sub(eq as u32);
            index = (index & !mask) | (i as u32 & mask);
            found |= eq;
        }
        (index as usize, found == 1)
    }

    /// The decision once the pool's verdict is back: pass (stripping
    /// `Authorization` unless `pass_credentials`) or challenge. Insert the
    /// job's cache key on success before calling. O(1).
    pub fn after_verification(&self, result: VerifyResult) -> AccessDecision<'_> {
        if result.is_ok() {
            AccessDecision::Pass {
                strip_authorization: !self.pass_credentials,
            }
        } else {
            AccessDecision::Challenge(&self.challenge)
        }
    }
}

/// The OR of the XORs of two padded names, word by word: 0 iff equal.
#[inline(always)]
fn name_diff(a: &[u8; MAX_NAME_BYTES], b: &[u8; MAX_NAME_BYTES]) -> u64 {
    let mut diff = 0u64;
    for (x, y) in a.chunks_exact(8).zip(b.chunks_exact(8)) {
        let x = u64::from_ne_bytes(x.try_into().expect("8 bytes"));
        let y = u64::from_ne_bytes(y.try_into().expect("8 bytes"));
        diff |= x ^ y;
    }
    diff
}

#[cfg(test)]
mod tests;
