//! Proof of work: a browser solves a challenge for a cookie that lets it
//! through, both stateless and bound to the host and the client by an
//! HMAC-SHA-256 tag under the process's key.
//!
//! Modules: `token` (the challenge, the solution and the cookie, minted and
//! checked; the key; what a route applies, [`ProofOfWork`]), `verify` (the
//! verify endpoint's form) and `page` (the pages and answers). What they
//! make public is re-exported here.
//!
//! Here: the shard's counters ([`PowCounters`]), finding the cookie in
//! `Cookie` lines ([`find_cookie`]), whether a request is a browser's page
//! load ([`is_browser`]), the verify endpoint's path ([`VERIFY_PATH`]) and
//! the profile's defaults.

mod page;
mod token;
mod verify;

pub use page::{write_challenge_page, write_non_browser_page, write_verified, ChallengePage, Mint};
pub use token::{
    check_challenge, check_cookie, host_id, mint_challenge, mint_cookie, solves, ChallengeError,
    CookieError, PowKey, ProofOfWork, CHALLENGE_BYTES, CHALLENGE_CHARS, CHALLENGE_TTL_S,
    COOKIE_BYTES, COOKIE_CHARS, COOKIE_NAME, KEY_BYTES, MAX_DIFFICULTY, MAX_SOLUTION_DIGITS,
    MIN_DIFFICULTY, VERSION,
};
pub use verify::{
    is_local_target, verify_form, Rejection, ReturnTarget, Verified, MAX_FORM_BYTES,
    MAX_RETURN_BYTES,
};

/// The verify endpoint, answered on any host where a route has proof of
/// work.
pub const VERIFY_PATH: &[u8] = b"/.well-known/gapura/pow";
/// The built-in difficulty (leading zero bits).
pub const DEFAULT_DIFFICULTY: u8 = 16;
/// The built-in cookie lifetime: seven days.
pub const DEFAULT_LIFETIME_HOURS: u32 = 168;
/// The longest cookie lifetime: a year.
pub const MAX_LIFETIME_HOURS: u32 = 24 * 366;

/// One shard's proof-of-work counters (all hosts).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PowCounters {
    /// Challenge pages sent.
    pub challenges: u64,
    /// Verified solutions (a cookie given).
    pub solved: u64,
    /// Verify requests refused (403), by [`Rejection`].
    pub rejected: [u64; Rejection::COUNT],
    /// 403s to clients that are not browsers (not a GET or HEAD accepting
    /// `text/html`).
    pub non_browser: u64,
    /// Requests let on by a valid cookie.
    pub cookies_valid: u64,
    /// Cookies sent but refused (forged, expired, too easy, malformed).
    pub cookies_refused: u64,
    /// 503s: proof of work applies but there is no key.
    pub no_key: u64,
    /// Challenges a shadowed route let through.
    pub shadow_hits: u64,
}

/// The value of cookie `name` in a request's `Cookie` lines (the first
/// one), without allocating. Pairs are split on `;`, names compared
/// exactly after trimming spaces, as browsers send them.
pub fn find_cookie<'a>(lines: impl Iterator<Item = &'a [u8]>, name: &[u8]) -> Option<&'a [u8]> {
    for line in lines {
        for pair in line.split(|&b| b == b';') {
            let pair = pair.trim_ascii();
            let Some(eq) = pair.iter().position(|&b| b == b'=') else {
                continue;
            };
            if pair[..eq].trim_ascii() == name {
                let v = pair[eq + 1..].trim_ascii();
                // A quoted value is allowed by RFC 6265.
                let v = v
                    .strip_prefix(b"\"")
                    .and_then(|v| v.strip_suffix(b"\""))
                    .unwrap_or(v);
                return Some(v);
            }
        }
    }
    None
}

/// Whether a request is a browser's page load: a `GET` or `HEAD` whose
/// `Accept` names `text/html`.
pub fn is_browser<'a>(method: &[u8], accept: impl Iterator<Item = &'a [u8]>) -> bool {
    (method == b"GET" || method == b"HEAD")
        && accept
            .into_iter()
            .any(|a| a.windows(9).any(|w| w.eq_ignore_ascii_case(b"text/html")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cookie_is_found_among_others_and_lines() {
        let lines: [&[u8]; 2] = [b"a=1; b=2", b"x=y;  gapura_pow = abc ; z=\"q\""];
        assert_eq!(
            find_cookie(lines.iter().copied(), b"gapura_pow"),
            Some(&b"abc"[..])
        );
        assert_eq!(find_cookie(lines.iter().copied(), b"z"), Some(&b"q"[..]));
        assert_eq!(find_cookie(lines.iter().copied(), b"gapura"), None);
        let first: [&[u8]; 2] = [b"gapura_pow=one", b"gapura_pow=two"];
        assert_eq!(
            find_cookie(first.iter().copied(), b"gapura_pow"),
            Some(&b"one"[..])
        );
        let none: [&[u8]; 3] = [b"", b";;;", b"noequals"];
        assert_eq!(find_cookie(none.iter().copied(), b"noequals"), None);
    }

    #[test]
    fn a_browser_is_a_get_or_head_that_accepts_html() {
        let html: [&[u8]; 1] = [b"text/html,application/xhtml+xml"];
        let json: [&[u8]; 1] = [b"application/json"];
        assert!(is_browser(b"GET", html.iter().copied()));
        assert!(is_browser(b"HEAD", html.iter().copied()));
        assert!(!is_browser(b"POST", html.iter().copied()));
        assert!(!is_browser(b"GET", json.iter().copied()));
        assert!(!is_browser(b"GET", std::iter::empty()));
    }
}
