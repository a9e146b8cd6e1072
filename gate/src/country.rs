//! Countries, country lists, and how they combine with address rules.
//!
//! A country exists only when a trusted Cloudflare peer said so in
//! `CF-IPCountry` (see [`crate::client`]); everywhere else it is unknown.
//! A [`Country`] is a compact slot (0 unknown, 1 Tor, then the 676 letter
//! pairs), so a request carries no string and parsing the header is a few
//! comparisons. A [`CountrySet`] is 678 bits in 11 words and a check is one
//! bit test.
//!
//! Countries are part of the address side of an access list. Deny wins over
//! everything; every non-empty allow list (addresses, countries) is a
//! restriction the request must meet; [`AddressRules::check`] folds both into
//! one [`RuleVerdict`], and [`access_step`] combines that verdict with the
//! list's users and `satisfy` mode into what the access list does next. All
//! checks are O(log ranges) or O(1) with no allocation.

mod codes;

use crate::cidr::CidrSet;
use std::fmt;
use std::net::IpAddr;

/// A country code as the gate holds it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Country(u16);

impl Country {
    /// `XX`: no trusted header, a missing, repeated or malformed one, or
    /// Cloudflare's own "unknown".
    pub const UNKNOWN: Country = Country(0);
    /// `T1`: a Tor exit node, kept apart from unknown.
    pub const TOR: Country = Country(1);
    /// Number of slots: unknown, Tor and 26 × 26 letter pairs.
    pub const SLOTS: usize = 2 + 26 * 26;

    /// Two ASCII letters, either case, as a country (assigned or not);
    /// `XX` is [`Country::UNKNOWN`]. `None` for anything else.
    #[inline]
    pub fn from_letters(a: u8, b: u8) -> Option<Country> {
        if !a.is_ascii_alphabetic() || !b.is_ascii_alphabetic() {
            return None;
        }
        let (a, b) = (a.to_ascii_uppercase(), b.to_ascii_uppercase());
        if a == b'X' && b == b'X' {
            return Some(Country::UNKNOWN);
        }
        Some(Country(2 + u16::from(a - b'A') * 26 + u16::from(b - b'A')))
    }

    /// The country a trusted `CF-IPCountry` value names: two letters in
    /// either case (an unassigned pair parses and matches no rule), `T1` for
    /// Tor, and [`Country::UNKNOWN`] for `XX` and anything that is not two
    /// letters. Surrounding spaces and tabs are ignored. O(1).
    #[inline]
    pub fn from_header(value: &[u8]) -> Country {
        match value.trim_ascii() {
            [a, b] if a.eq_ignore_ascii_case(&b'T') && *b == b'1' => Country::TOR,
            &[a, b] => Country::from_letters(a, b).unwrap_or(Country::UNKNOWN),
            _ => Country::UNKNOWN,
        }
    }

    /// A code a profile may write: an assigned ISO 3166-1 alpha-2 code or
    /// `XK`, or `T1` or `XX`, in either case. Unassigned pairs are refused
    /// here (a typo in a rule is an error), though they parse from headers.
    pub fn parse_code(code: &str) -> Option<Country> {
        let b = code.as_bytes();
        if b.len() != 2 {
            return None;
        }
        let c = Country::from_header(b);
        if c == Country::UNKNOWN && !b.eq_ignore_ascii_case(b"XX") {
            return None;
        }
        if c.slot() >= 2 && c.name().is_none() {
            return None;
        }
        Some(c)
    }

    /// The slot, 0..[`Country::SLOTS`].
    #[inline]
    pub fn slot(self) -> usize {
        usize::from(self.0)
    }

    /// The upper-case code: `DE`, `T1`, `XX`.
    pub fn code(self) -> [u8; 2] {
        match self.0 {
            0 => *b"XX",
            1 => *b"T1",
            n => {
                let i = n - 2;
                [b'A' + (i / 26) as u8, b'A' + (i % 26) as u8]
            }
        }
    }

    /// The English name for explain's sentences: "Germany", "Tor exit
    /// nodes", "Unknown country"; `None` for an unassigned pair. O(log n).
    pub fn name(self) -> Option<&'static str> {
        match self.0 {
            0 => Some("Unknown country"),
            1 => Some("Tor exit nodes"),
            _ => {
                let code = self.code();
                codes::COUNTRIES
                    .binary_search_by(|(c, _)| c.as_bytes().cmp(&code[..]))
                    .ok()
                    .map(|i| codes::COUNTRIES[i].1)
            }
        }
    }

    /// Every code a profile may name, upper-case, sorted: the assigned
    /// codes and `XK`, then `T1` and `XX`.
    pub fn known_codes() -> impl Iterator<Item = &'static str> {
        codes::COUNTRIES.iter().map(|(c, _)| *c).chain(["T1", "XX"])
    }
}

impl fmt::Display for Country {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = self.code();
        write!(f, "{}{}", c[0] as char, c[1] as char)
    }
}

impl fmt::Debug for Country {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Country({self})")
    }
}

const WORDS: usize = Country::SLOTS.div_ceil(64);

/// A set of countries: one bit per slot.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub struct CountrySet {
    words: [u64; WORDS],
}

impl CountrySet {
    pub fn new() -> CountrySet {
        CountrySet::default()
    }

    /// Adds a country; returns whether it was new.
    pub fn insert(&mut self, c: Country) -> bool {
        let (w, bit) = (c.slot() / 64, 1u64 << (c.slot() % 64));
        let new = self.words[w] & bit == 0;
        self.words[w] |= bit;
        new
    }

    /// One bit test. O(1), no allocation.
    #[inline]
    pub fn contains(&self, c: Country) -> bool {
        self.words[c.slot() / 64] & (1u64 << (c.slot() % 64)) != 0
    }

    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|&w| w == 0)
    }

    pub fn len(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// The members in slot order (unknown, Tor, then alphabetical).
    pub fn iter(&self) -> impl Iterator<Item = Country> + '_ {
        (0..Country::SLOTS as u16)
            .map(Country)
            .filter(|&c| self.contains(c))
    }
}

impl fmt::Debug for CountrySet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

/// Why a country list entry was refused, with its stable code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CountryListError {
    /// Not an assigned code, `XK`, `T1` or `XX`.
    Invalid { deny: bool, index: usize },
    /// The same code twice in one list (in either case).
    Duplicate { deny: bool, index: usize },
    /// A code in both lists (reported at the deny entry).
    Conflict { index: usize, country: Country },
}

impl fmt::Display for CountryListError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CountryListError::Invalid { .. } => f.write_str(
                "not a country code: write an ISO 3166-1 alpha-2 code, XK, T1 (Tor) or XX (unknown)",
            ),
            CountryListError::Duplicate { .. } => f.write_str("this code is already in the list"),
            CountryListError::Conflict { country, .. } => {
                write!(f, "{country} is in both the allow and the deny list")
            }
        }
    }
}

/// The verdict of one side of the address rules, or of both folded.
/// Ordered by strength: folding two verdicts keeps the stronger.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RuleVerdict {
    /// No list applies (all empty).
    Unrestricted,
    /// Inside every non-empty allow list, in no deny list.
    Allowed,
    /// Outside a non-empty allow list (and in no deny list).
    NotInAllowList,
    /// In a deny list: refused whatever the request sends.
    Denied,
}

impl RuleVerdict {
    /// The stronger of two verdicts: denied beats not-in-allow-list beats
    /// allowed beats unrestricted. So deny wins, and a request must be in
    /// both allow lists when both are set.
    #[inline]
    pub fn and(self, other: RuleVerdict) -> RuleVerdict {
        self.max(other)
    }

    /// `denied`, `allowed`, `not_in_allow_list`, `unrestricted` (for explain
    /// and counters).
    pub fn as_str(self) -> &'static str {
        match self {
            RuleVerdict::Unrestricted => "unrestricted",
            RuleVerdict::Allowed => "allowed",
            RuleVerdict::NotInAllowList => "not_in_allow_list",
            RuleVerdict::Denied => "denied",
        }
    }
}

/// A list's country allow and deny sets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CountryRules {
    pub allow: CountrySet,
    pub deny: CountrySet,
}

impl CountryRules {
    /// Parses both lists with the profile's rules (known codes only, no
    /// duplicates, nothing in both). Errors name the list and index.
    pub fn parse<S: AsRef<str>>(allow: &[S], deny: &[S]) -> Result<CountryRules, CountryListError> {
        let mut rules = CountryRules::default();
        for (deny_list, entries) in [(false, allow), (true, deny)] {
            let set = if deny_list {
                &mut rules.deny
            } else {
                &mut rules.allow
            };
            for (index, e) in entries.iter().enumerate() {
                let c = Country::parse_code(e.as_ref()).ok_or(CountryListError::Invalid {
                    deny: deny_list,
                    index,
                })?;
                if !set.insert(c) {
                    return Err(CountryListError::Duplicate {
                        deny: deny_list,
                        index,
                    });
                }
            }
        }
        for (index, e) in deny.iter().enumerate() {
            let country = Country::parse_code(e.as_ref()).expect("checked above");
            if rules.allow.contains(country) {
                return Err(CountryListError::Conflict { index, country });
            }
        }
        Ok(rules)
    }

    /// Whether either list names anything.
    pub fn is_empty(&self) -> bool {
        self.allow.is_empty() && self.deny.is_empty()
    }

    /// The country side's verdict. `None` (no trusted country) is unknown,
    /// `XX`: refused by an allow list unless it holds `XX`. O(1).
    #[inline]
    pub fn verdict(&self, country: Option<Country>) -> RuleVerdict {
        let c = country.unwrap_or(Country::UNKNOWN);
        if self.deny.contains(c) {
            RuleVerdict::Denied
        } else if self.allow.is_empty() {
            RuleVerdict::Unrestricted
        } else if self.allow.contains(c) {
            RuleVerdict::Allowed
        } else {
            RuleVerdict::NotInAllowList
        }
    }
}

/// The address side of an access list: address allow and deny sets and the
/// country rules.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AddressRules {
    pub allow: CidrSet,
    pub deny: CidrSet,
    pub countries: CountryRules,
}

/// What the address side found, for the decision and for explain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AddressCheck {
    /// Both sides folded: what [`access_step`] takes.
    pub verdict: RuleVerdict,
    /// The address lists alone.
    pub address: RuleVerdict,
    /// The country lists alone.
    pub country: RuleVerdict,
}

impl AddressRules {
    /// Whether the rules name nothing: the address side is then
    /// unrestricted and can refuse no one.
    pub fn is_empty(&self) -> bool {
        self.allow.is_empty() && self.deny.is_empty() && self.countries.is_empty()
    }

    /// Whether the verdict depends on the country (so it cannot be taken at
    /// accept time, before the request's headers are read).
    pub fn has_country_rules(&self) -> bool {
        !self.countries.is_empty()
    }

    /// The address side's verdict for a resolved client and its trusted
    /// country (`None`: not from Cloudflare, treated as `XX`).
    /// O(log ranges), no allocation.
    #[inline]
    pub fn check(&self, addr: IpAddr, country: Option<Country>) -> AddressCheck {
        let address = if self.deny.contains(addr) {
            RuleVerdict::Denied
        } else if self.allow.is_empty() {
            RuleVerdict::Unrestricted
        } else if self.allow.contains(addr) {
            RuleVerdict::Allowed
        } else {
            RuleVerdict::NotInAllowList
        };
        let country = self.countries.verdict(country);
        AddressCheck {
            verdict: address.and(country),
            address,
            country,
        }
    }
}

/// How an access list combines the address side with its users.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Satisfy {
    /// An allowed (or unrestricted) visitor must also give a password; the
    /// rest are refused.
    #[default]
    All,
    /// An allowed visitor passes without a password; everyone else who is
    /// not denied may give one instead.
    Any,
}

/// What the access list does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccessStep {
    /// Let the request on; no credentials were asked for or consumed.
    Pass,
    /// Check the request's credentials: valid ones pass, missing or wrong
    /// ones get 401.
    AskCredentials,
    /// Answer 403.
    Refuse,
    /// Abort the connection without an answer (`drop_denied`).
    Drop,
}

/// The access list's decision table. `has_users`: the list has basic-auth
/// users; `drop_denied`: a refusal the address side makes alone aborts the
/// connection instead of answering 403.
///
/// | verdict | no users | users, `all` | users, `any` |
/// |---|---|---|---|
/// | denied | refuse | refuse | refuse |
/// | not in allow list | refuse | refuse | ask |
/// | allowed | pass | ask | pass |
/// | unrestricted | pass | ask | ask |
///
/// "refuse" is [`AccessStep::Drop`] when `drop_denied` is set. A denied
/// country is refused under `any` even with a valid password. O(1).
#[inline]
pub fn access_step(
    verdict: RuleVerdict,
    has_users: bool,
    satisfy: Satisfy,
    drop_denied: bool,
) -> AccessStep {
    let refuse = if drop_denied {
        AccessStep::Drop
    } else {
        AccessStep::Refuse
    };
    match (verdict, has_users, satisfy) {
        (RuleVerdict::Denied, _, _) => refuse,
        (RuleVerdict::NotInAllowList, false, _) => refuse,
        (RuleVerdict::NotInAllowList, true, Satisfy::All) => refuse,
        (RuleVerdict::NotInAllowList, true, Satisfy::Any) => AccessStep::AskCredentials,
        (RuleVerdict::Allowed, false, _) => AccessStep::Pass,
        (RuleVerdict::Allowed, true, Satisfy::All) => AccessStep::AskCredentials,
        (RuleVerdict::Allowed, true, Satisfy::Any) => AccessStep::Pass,
        (RuleVerdict::Unrestricted, false, _) => AccessStep::Pass,
        (RuleVerdict::Unrestricted, true, _) => AccessStep::AskCredentials,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(code: &str) -> Country {
        Country::parse_code(code).unwrap()
    }

    #[test]
    fn header_values_parse_to_slots() {
        assert_eq!(Country::from_header(b"DE"), c("DE"));
        assert_eq!(Country::from_header(b"de"), c("DE"));
        assert_eq!(Country::from_header(b" dE\t"), c("DE"));
        assert_eq!(Country::from_header(b"T1"), Country::TOR);
        assert_eq!(Country::from_header(b"t1"), Country::TOR);
        for unknown in [
            &b"XX"[..],
            b"xx",
            b"",
            b"D",
            b"DEU",
            b"D1",
            b"1T",
            b"\xc3\x84A",
            b"D E",
        ] {
            assert_eq!(
                Country::from_header(unknown),
                Country::UNKNOWN,
                "{unknown:?}"
            );
        }
        // An unassigned pair is a country that matches no rule.
        let qq = Country::from_header(b"QQ");
        assert_ne!(qq, Country::UNKNOWN);
        assert_eq!(qq.to_string(), "QQ");
        assert_eq!(qq.name(), None);
    }

    #[test]
    fn slots_are_unknown_tor_then_letter_pairs() {
        assert_eq!(Country::UNKNOWN.slot(), 0);
        assert_eq!(Country::TOR.slot(), 1);
        assert_eq!(Country::from_header(b"AA").slot(), 2);
        assert_eq!(Country::from_header(b"ZZ").slot(), Country::SLOTS - 1);
        assert_eq!(Country::SLOTS, 678);
        for slot in 2..Country::SLOTS as u16 {
            let code = Country(slot).code();
            if &code != b"XX" {
                assert_eq!(Country::from_letters(code[0], code[1]), Some(Country(slot)));
            }
        }
    }

    #[test]
    fn profile_codes_are_the_assigned_ones_plus_xk_t1_xx() {
        assert_eq!(codes::COUNTRIES.len(), 250);
        assert!(codes::COUNTRIES.windows(2).all(|w| w[0].0 < w[1].0));
        assert_eq!(Country::known_codes().count(), 252);
        assert_eq!(c("de").to_string(), "DE");
        assert_eq!(c("XK").name(), Some("Kosovo"));
        assert_eq!(c("t1"), Country::TOR);
        assert_eq!(c("xx"), Country::UNKNOWN);
        assert_eq!(c("DE").name(), Some("Germany"));
        assert_eq!(Country::TOR.name(), Some("Tor exit nodes"));
        assert_eq!(Country::UNKNOWN.name(), Some("Unknown country"));
        for bad in ["QQ", "D", "DEU", "", "1T", "ÄA", "EU"] {
            assert_eq!(Country::parse_code(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn country_sets_are_one_bit_per_slot() {
        let mut s = CountrySet::new();
        assert!(s.is_empty());
        assert!(s.insert(c("DE")));
        assert!(!s.insert(c("DE")));
        assert!(s.insert(Country::TOR));
        assert!(s.insert(Country::from_header(b"ZZ")));
        assert_eq!(s.len(), 3);
        assert!(s.contains(c("DE")) && !s.contains(c("FR")));
        assert_eq!(
            s.iter().map(|c| c.to_string()).collect::<Vec<_>>(),
            ["T1", "DE", "ZZ"]
        );
        assert_eq!(std::mem::size_of::<CountrySet>(), 88);
    }

    #[test]
    fn list_errors_name_the_entry() {
        assert_eq!(
            CountryRules::parse(&["DE", "QQ"], &[]),
            Err(CountryListError::Invalid {
                deny: false,
                index: 1
            })
        );
        assert_eq!(
            CountryRules::parse(&[], &["FR", "fr"]),
            Err(CountryListError::Duplicate {
                deny: true,
                index: 1
            })
        );
        let e = CountryRules::parse(&["DE", "FR"], &["RU", "fr"]).unwrap_err();
        assert_eq!(
            e,
            CountryListError::Conflict {
                index: 1,
                country: c("FR")
            }
        );
        assert_eq!(e.to_string(), "FR is in both the allow and the deny list");
    }

    fn rules(
        allow_ip: &[&str],
        deny_ip: &[&str],
        allow_c: &[&str],
        deny_c: &[&str],
    ) -> AddressRules {
        AddressRules {
            allow: CidrSet::parse_list(allow_ip).unwrap(),
            deny: CidrSet::parse_list(deny_ip).unwrap(),
            countries: CountryRules::parse(allow_c, deny_c).unwrap(),
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn country_verdicts_follow_allow_and_deny() {
        let r = CountryRules::parse(&["DE", "FR"], &["T1"]).unwrap();
        assert_eq!(r.verdict(Some(c("DE"))), RuleVerdict::Allowed);
        assert_eq!(r.verdict(Some(c("US"))), RuleVerdict::NotInAllowList);
        assert_eq!(r.verdict(Some(Country::TOR)), RuleVerdict::Denied);
        assert_eq!(
            r.verdict(Some(Country::UNKNOWN)),
            RuleVerdict::NotInAllowList
        );
        assert_eq!(r.verdict(None), RuleVerdict::NotInAllowList);
        let with_xx = CountryRules::parse(&["DE", "XX"], &[]).unwrap();
        assert_eq!(with_xx.verdict(None), RuleVerdict::Allowed);
        assert_eq!(
            with_xx.verdict(Some(Country::TOR)),
            RuleVerdict::NotInAllowList
        );
        let deny_only = CountryRules::parse(&[], &["RU"]).unwrap();
        assert_eq!(deny_only.verdict(Some(c("RU"))), RuleVerdict::Denied);
        assert_eq!(deny_only.verdict(Some(c("DE"))), RuleVerdict::Unrestricted);
        assert_eq!(deny_only.verdict(None), RuleVerdict::Unrestricted);
        assert_eq!(
            CountryRules::default().verdict(Some(c("DE"))),
            RuleVerdict::Unrestricted
        );
    }

    #[test]
    fn deny_wins_over_every_allow() {
        let r = rules(&["192.0.2.0/24"], &["192.0.2.66"], &["DE"], &["RU"]);
        // A denied address in the allowed range from an allowed country.
        assert_eq!(
            r.check(ip("192.0.2.66"), Some(c("DE"))).verdict,
            RuleVerdict::Denied
        );
        // An allowed address from a denied country.
        let chk = r.check(ip("192.0.2.1"), Some(c("RU")));
        assert_eq!(chk.verdict, RuleVerdict::Denied);
        assert_eq!(chk.address, RuleVerdict::Allowed);
        assert_eq!(chk.country, RuleVerdict::Denied);
    }

    #[test]
    fn both_allow_lists_must_be_met() {
        let r = rules(&["192.0.2.0/24"], &[], &["DE"], &[]);
        let v = |a, k| r.check(ip(a), k).verdict;
        assert_eq!(v("192.0.2.1", Some(c("DE"))), RuleVerdict::Allowed);
        assert_eq!(v("192.0.2.1", Some(c("FR"))), RuleVerdict::NotInAllowList);
        assert_eq!(
            v("198.51.100.1", Some(c("DE"))),
            RuleVerdict::NotInAllowList
        );
        assert_eq!(v("192.0.2.1", None), RuleVerdict::NotInAllowList);
        // Only a country allow list: the address side is unrestricted.
        let r = rules(&[], &[], &["DE"], &[]);
        let chk = r.check(ip("198.51.100.1"), Some(c("DE")));
        assert_eq!(chk.address, RuleVerdict::Unrestricted);
        assert_eq!(chk.verdict, RuleVerdict::Allowed);
        assert_eq!(
            rules(&[], &[], &[], &[]).check(ip("::1"), None).verdict,
            RuleVerdict::Unrestricted
        );
    }

    #[test]
    fn ipv4_mapped_clients_meet_ipv4_rules() {
        let r = rules(&[], &["203.0.113.0/24"], &[], &[]);
        assert_eq!(
            r.check(ip("::ffff:203.0.113.9"), None).verdict,
            RuleVerdict::Denied
        );
    }

    #[test]
    fn decision_table_has_every_row() {
        use AccessStep::*;
        use RuleVerdict::*;
        use Satisfy::{All, Any};
        // (verdict, has_users, satisfy, drop_denied) -> step
        let table = [
            (Denied, false, All, false, Refuse),
            (Denied, false, All, true, Drop),
            (Denied, true, All, false, Refuse),
            (Denied, true, All, true, Drop),
            (Denied, true, Any, false, Refuse),
            (Denied, true, Any, true, Drop),
            (NotInAllowList, false, All, false, Refuse),
            (NotInAllowList, false, All, true, Drop),
            (NotInAllowList, false, Any, false, Refuse),
            (NotInAllowList, true, All, false, Refuse),
            (NotInAllowList, true, All, true, Drop),
            (NotInAllowList, true, Any, false, AskCredentials),
            (NotInAllowList, true, Any, true, AskCredentials),
            (Allowed, false, All, false, Pass),
            (Allowed, false, All, true, Pass),
            (Allowed, true, All, false, AskCredentials),
            (Allowed, true, All, true, AskCredentials),
            (Allowed, true, Any, false, Pass),
            (Allowed, true, Any, true, Pass),
            (Unrestricted, false, All, false, Pass),
            (Unrestricted, false, Any, true, Pass),
            (Unrestricted, true, All, false, AskCredentials),
            (Unrestricted, true, Any, false, AskCredentials),
            (Unrestricted, true, Any, true, AskCredentials),
        ];
        for (verdict, users, satisfy, drop, want) in table {
            assert_eq!(
                access_step(verdict, users, satisfy, drop),
                want,
                "{verdict:?} users={users} {satisfy:?} drop={drop}"
            );
        }
        // `satisfy` does not matter without users.
        for v in [Denied, NotInAllowList, Allowed, Unrestricted] {
            for drop in [false, true] {
                assert_eq!(
                    access_step(v, false, All, drop),
                    access_step(v, false, Any, drop)
                );
            }
        }
    }

    #[test]
    fn a_denied_country_with_a_password_under_any_is_refused() {
        let r = rules(&[], &[], &["DE"], &["RU"]);
        let denied = r.check(ip("198.51.100.7"), Some(c("RU")));
        assert_eq!(denied.verdict, RuleVerdict::Denied);
        // The password is never asked for, so a valid one cannot help.
        assert_eq!(
            access_step(denied.verdict, true, Satisfy::Any, false),
            AccessStep::Refuse
        );
        assert_eq!(
            access_step(denied.verdict, true, Satisfy::Any, true),
            AccessStep::Drop
        );
    }

    #[test]
    fn a_country_outside_the_allow_list_may_give_a_password_under_any() {
        let r = rules(&[], &[], &["DE"], &["RU"]);
        let outside = r.check(ip("198.51.100.7"), Some(c("FR")));
        assert_eq!(outside.verdict, RuleVerdict::NotInAllowList);
        assert_eq!(
            access_step(outside.verdict, true, Satisfy::Any, false),
            AccessStep::AskCredentials
        );
        assert_eq!(
            access_step(outside.verdict, true, Satisfy::All, false),
            AccessStep::Refuse
        );
        let allowed = r.check(ip("198.51.100.7"), Some(c("DE")));
        assert_eq!(
            access_step(allowed.verdict, true, Satisfy::Any, false),
            AccessStep::Pass
        );
        assert_eq!(
            access_step(allowed.verdict, true, Satisfy::All, false),
            AccessStep::AskCredentials
        );
    }

    #[test]
    fn unknown_and_tor_are_refused_by_an_allow_list_without_them() {
        let r = rules(&[], &[], &["DE"], &[]);
        for k in [None, Some(Country::UNKNOWN), Some(Country::TOR)] {
            let v = r.check(ip("198.51.100.7"), k).verdict;
            assert_eq!(
                access_step(v, false, Satisfy::All, false),
                AccessStep::Refuse
            );
        }
        let tor_ok = rules(&[], &[], &["DE", "T1"], &[]);
        let v = tor_ok.check(ip("198.51.100.7"), Some(Country::TOR)).verdict;
        assert_eq!(access_step(v, false, Satisfy::All, false), AccessStep::Pass);
    }

    #[test]
    fn verdict_names_are_stable() {
        assert_eq!(RuleVerdict::Denied.as_str(), "denied");
        assert_eq!(RuleVerdict::Allowed.as_str(), "allowed");
        assert_eq!(RuleVerdict::NotInAllowList.as_str(), "not_in_allow_list");
        assert_eq!(RuleVerdict::Unrestricted.as_str(), "unrestricted");
    }
}
