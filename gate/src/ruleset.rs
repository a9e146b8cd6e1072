//! Rule sets: ordered rules on path, method and user agent; the first match
//! decides.
//!
//! A rule states any combination of a path condition (exact, prefix, glob or
//! regex over the canonical matching path of [`crate::path`]), a method set
//! (compared ignoring ASCII case) and a user-agent condition (substrings found
//! ignoring case in *any* `User-Agent` line, so a request that sends two
//! cannot hide a name in the one the upstream reads; or `empty`, a missing or
//! blank user agent). Every condition it states must hold. Its action is
//! deny (403 and the Forbidden page), drop (abort, no answer), allow (end
//! the set here; the rest of the chain still runs) or challenge (as allow,
//! and the request is marked for proof of work).
//!
//! Guarantee: the outcome is the matching rule with the lowest index, exactly
//! as if every rule were tried in order, and deciding it allocates nothing
//! (a regex may allocate its new lazy-DFA states the first time it meets a
//! path shape; see [`REGEX_CACHE_BYTES`]). How it is built for that:
//!
//! - exact and prefix paths sit in a [`PathMatcher`], found by hashing
//!   (O(segments)) with the rule's other conditions checked only on
//!   candidates that could still win;
//! - rules without an indexed path (none, glob, regex) are scanned in order,
//!   only below the best index found so far;
//! - inside a rule the cheap conditions run first (method, then user agent),
//!   the glob or regex last;
//! - every user-agent substring of the set is in one automaton (module
//!   `needles`): one pass over the `User-Agent` lines answers every rule's
//!   condition at once, made lazily, when the first rule needs it;
//! - a glob is first tried on its literal prefix and suffix (O(1)), then on
//!   its longest literal piece, found for every glob of the set in one more
//!   automaton pass over the path; only then does its own automaton run;
//! - globs, regexes and both passes read each byte once: linear in the
//!   path and the user agent.
//!
//! A regex search can give up (see [`GIVE_UP_AFTER_CLEARS`]): then the
//! rule's action decides, failing closed (a deny or drop counts it as a
//! match, an allow as no match), and the outcome counts the give-up.
//!
//! The set itself is immutable (it lives in the snapshot). What changes per
//! request lives with the caller, per shard: the regexes' lazy-DFA caches
//! ([`RegexCaches`], made for one set) and the counters ([`RuleSetCounters`],
//! plain `u64`s keyed by the set's stable name, so they survive a reload).
//!
//! `GET`/`HEAD /robots.txt` is exempt from rule sets: the caller skips the set
//! for it ([`crate::robots::is_robots_request`]).

mod build;
mod needles;
mod presets;
mod regex;
mod spec;
#[cfg(test)]
mod tests;

pub use build::RuleSetBuilder;
pub use needles::RuleBits;
pub use presets::{Preset, KNOWN_SCANNERS};
pub use regex::{
    GIVE_UP_AFTER_CLEARS, MAX_REGEX_BYTES, MIN_BYTES_PER_STATE, REGEX_CACHE_BYTES,
    REGEX_NEST_LIMIT, REGEX_NFA_BYTES,
};
pub use spec::{
    Action, PathPatternKind, PathSpec, RuleError, RuleSetError, RuleSpec, UserAgentSpec,
    MAX_METHODS, MAX_METHOD_BYTES, MAX_RULES, MAX_UA_SUBSTRINGS, MAX_UA_SUBSTRING_CHARS,
};

use crate::glob::Glob;
use crate::mode::Mode;
use crate::pathmatch::{compile_pattern, PathKind, PathMatcher};
use needles::Needles;
use regex::{PathRegex, RegexResult};
use regex_automata::hybrid::dfa::Cache;
use std::sync::atomic::{AtomicU64, Ordering};

/// Identifies a compiled set, so caches made for another are never used.
static NEXT_SET_ID: AtomicU64 = AtomicU64::new(1);

#[derive(Clone, Copy, Debug)]
struct Method {
    bytes: [u8; MAX_METHOD_BYTES],
    len: u8,
    /// The first eight bytes, ASCII lower-cased, zero-padded: a method of
    /// at most eight bytes is matched with one word comparison.
    folded: u64,
}

impl Method {
    fn new(upper: &str) -> Method {
        let mut bytes = [0; MAX_METHOD_BYTES];
        bytes[..upper.len()].copy_from_slice(upper.as_bytes());
        Method {
            bytes,
            len: upper.len() as u8,
            folded: needles::fold_case(needles::word_at(upper.as_bytes(), 0)),
        }
    }

    #[inline]
    fn matches(&self, method: &[u8]) -> bool {
        if method.len() != usize::from(self.len) {
            return false;
        }
        if method.len() <= 8 {
            return needles::fold_case(needles::word_at(method, 0)) == self.folded;
        }
        self.bytes[..usize::from(self.len)].eq_ignore_ascii_case(method)
    }
}

#[derive(Clone, Debug)]
enum PathCond {
    None,
    /// Exact or prefix: in the set's matcher.
    Indexed,
    Glob(GlobCond),
    /// Index into the set's regexes.
    Regex(usize),
}

/// A glob and the literal text every path it takes must start and end
/// with: most globs (`/**/*.php`, `/**/.env`) are refused by these two
/// comparisons without running the automaton.
#[derive(Clone, Debug)]
struct GlobCond {
    glob: Glob,
    /// The pattern up to its first `*`.
    prefix: Box<[u8]>,
    /// The pattern after its last `*`. After a `/**/` this includes the `/`,
    /// which the path also holds there: `/**/` is left only after a `/`.
    suffix: Box<[u8]>,
    /// The longest piece between two `*`s, when it is worth a search (two
    /// bytes or more): it is in the set's path needles. The pieces before the
    /// first `*` and after the last one are not searched for: `ends_fit`
    /// compares them in place.
    literal: Option<Box<str>>,
}

impl GlobCond {
    fn new(glob: Glob) -> GlobCond {
        let p = glob.as_str().as_bytes();
        let first = p.iter().position(|&b| b == b'*').unwrap_or(p.len());
        let last = p.iter().rposition(|&b| b == b'*').map_or(0, |i| i + 1);
        // Every piece between `*`s occurs in a path the glob takes (a piece
        // after `/**/` starts with the `/` the path holds there). The first
        // and the last piece are the prefix and the suffix.
        let pieces: Vec<&str> = glob.as_str().split('*').collect();
        let literal = pieces
            .get(1..pieces.len().saturating_sub(1))
            .unwrap_or_default()
            .iter()
            .max_by_key(|piece| piece.len())
            .filter(|piece| piece.len() >= 2)
            .map(|piece| Box::from(*piece));
        GlobCond {
            prefix: p[..first].into(),
            suffix: p[last.max(first).min(p.len())..].into(),
            literal,
            glob,
        }
    }

    /// The O(1) checks: the path starts with the prefix and ends with the
    /// suffix.
    #[inline]
    fn ends_fit(&self, path: &[u8]) -> bool {
        let (p, s) = (self.prefix.len(), self.suffix.len());
        path.len() >= p.max(s)
            && path[..p].eq_ignore_ascii_case(&self.prefix)
            && path[path.len() - s..].eq_ignore_ascii_case(&self.suffix)
    }
}

#[derive(Clone, Debug)]
struct Rule {
    action: Action,
    methods: Box<[Method]>,
    ua_contains: bool,
    ua_empty: bool,
    path: PathCond,
}

/// A compiled rule set. Immutable; lives in the snapshot.
#[derive(Clone, Debug)]
pub struct RuleSet {
    id: u64,
    /// The rules as stated, normalised (methods upper case and sorted,
    /// substrings trimmed and unique), for explain.
    specs: Box<[RuleSpec]>,
    rules: Box<[Rule]>,
    /// Exact and prefix paths; the value is the rule index.
    matcher: PathMatcher<usize>,
    /// Rules without an indexed path.
    scan: RuleBits,
    /// Per method some rule names: the rules a request with that method may
    /// still match (those naming it and those naming no method).
    method_masks: Box<[(Method, RuleBits)]>,
    /// The same for any other method: the rules naming no method.
    other_methods: RuleBits,
    /// Class of a path's last byte, case folded (see `last_masks`).
    last_class: Box<[u8; 256]>,
    /// Per class: the rules a path ending with a byte of that class may
    /// still match. A glob whose pattern ends with a literal byte is in the
    /// masks of that byte (either case) only, an end-anchored regex in those
    /// of the bytes a match may end with; every other rule is in all of
    /// them.
    last_masks: Box<[RuleBits]>,
    /// Rules whose user-agent condition is substrings only: refuted by a
    /// user-agent pass that did not find theirs.
    ua_only: RuleBits,
    /// Globs with a literal piece: refuted by a path pass that did not find
    /// theirs.
    glob_literals: RuleBits,
    ua: Needles,
    /// The globs' literal pieces.
    path_needles: Needles,
    regexes: Box<[PathRegex]>,
    needs_path: bool,
}

/// The request facts a rule set reads. Borrowed, nothing copied.
#[derive(Clone, Debug)]
pub struct RuleRequest<'a, U> {
    /// The method as sent.
    pub method: &'a [u8],
    /// The canonical matching path ([`crate::path::canonical`]); needed only
    /// when [`RuleSet::needs_path`], else it may be empty.
    pub path: &'a [u8],
    /// Every `User-Agent` header value, in order (none when missing). Cloned
    /// to be read again, so it should be a cheap iterator (a filter over the
    /// parsed header array, or a slice's).
    pub user_agents: U,
}

/// What a set decided for one request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RuleOutcome {
    /// The matching rule, counted from 0 (explain counts from 1).
    pub rule: Option<usize>,
    /// Its action; `None` when no rule matched (the request goes on).
    pub action: Option<Action>,
    /// Regex searches that gave up during this evaluation.
    pub regex_give_ups: u32,
}

/// A refusal the chain must carry out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuleRefusal {
    /// Answer 403 with the Forbidden page.
    Deny,
    /// Abort the connection without an answer.
    Drop,
}

/// An outcome and what is left to carry out under the set's mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RuleDecision {
    pub outcome: RuleOutcome,
    /// `None`: the request goes on (no match, an allow, or a shadowed
    /// refusal).
    pub refusal: Option<RuleRefusal>,
}

/// One shard's counters for one set: plain integers, kept by the shard under
/// the set's stable name so they survive a reload.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RuleSetCounters {
    pub denied: u64,
    pub dropped: u64,
    pub allowed: u64,
    /// Requests a `challenge` rule marked for proof of work.
    pub challenged: u64,
    /// Regex searches that gave up (each decided by its rule's action).
    pub regex_give_ups: u64,
    /// Refusals a shadowed set would have made.
    pub shadow_hits: u64,
}

impl RuleSetCounters {
    /// Counts an outcome and applies `mode` to its refusal: enforced, a deny
    /// or drop is returned; shadowed it is counted in `shadow_hits` and the
    /// request goes on. O(1), no allocation.
    #[inline]
    pub fn record(&mut self, outcome: &RuleOutcome, mode: Mode) -> Option<RuleRefusal> {
        self.regex_give_ups += u64::from(outcome.regex_give_ups);
        let would = match outcome.action {
            Some(Action::Deny) => Some(RuleRefusal::Deny),
            Some(Action::Drop) => Some(RuleRefusal::Drop),
            Some(Action::Allow) => {
                self.allowed += 1;
                None
            }
            Some(Action::Challenge) => {
                self.challenged += 1;
                None
            }
            None => None,
        };
        let refusal = mode.apply(would, &mut self.shadow_hits);
        match refusal {
            Some(RuleRefusal::Deny) => self.denied += 1,
            Some(RuleRefusal::Drop) => self.dropped += 1,
            None => {}
        }
        refusal
    }
}

/// One shard's lazy-DFA caches for the regexes of one compiled set, and a
/// small memo of user-agent scans (most connections send one user agent
/// over and over).
#[derive(Clone, Debug)]
pub struct RegexCaches {
    set_id: u64,
    caches: Box<[Cache]>,
    /// Direct-mapped by a hash of the line; an entry is used only when its
    /// stored bytes equal the line, so a collision costs a scan, never a
    /// wrong answer. Empty for caches that fit no set.
    ua_memo: Box<[UaMemo]>,
}

/// Entries of the user-agent memo.
const UA_MEMO_ENTRIES: usize = 16;
/// Longest user agent the memo keeps; longer ones are scanned each time.
const UA_MEMO_BYTES: usize = 240;

/// The answer first, then the line: a hit on a short line reads two cache
/// lines.
#[derive(Clone, Debug)]
struct UaMemo {
    len: u16,
    found: RuleBits,
    bytes: [u8; UA_MEMO_BYTES],
}

impl Default for UaMemo {
    fn default() -> Self {
        UaMemo {
            len: u16::MAX,
            found: RuleBits::default(),
            bytes: [0; UA_MEMO_BYTES],
        }
    }
}

fn ua_memo_slot(line: &[u8]) -> usize {
    // Only picks a slot (the bytes are compared on a hit): the length and
    // the first and last eight bytes, mixed. O(1).
    let head = needles::word_at(line, 0);
    let tail = needles::word_at(line, line.len().saturating_sub(8));
    let h = (head ^ tail.rotate_left(29) ^ line.len() as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (h >> 60) as usize % UA_MEMO_ENTRIES
}

impl RegexCaches {
    /// The memoised scan of one user-agent line, or a scan that fills the
    /// memo. O(line) on a miss, O(line) compare on a hit; no allocation.
    #[inline(always)]
    fn ua_scan(&mut self, needles: &Needles, line: &[u8]) -> RuleBits {
        if self.ua_memo.is_empty() || line.len() > UA_MEMO_BYTES {
            let mut found = RuleBits::default();
            needles.scan(line, &mut found);
            return found;
        }
        let e = &mut self.ua_memo[ua_memo_slot(line)];
        if usize::from(e.len) == line.len() && needles::same_bytes(&e.bytes[..line.len()], line) {
            return e.found;
        }
        let mut found = RuleBits::default();
        needles.scan(line, &mut found);
        e.len = line.len() as u16;
        e.bytes[..line.len()].copy_from_slice(line);
        e.found = found;
        found
    }
}

impl RegexCaches {
    /// Caches that fit no set: every regex search with them gives up (and so
    /// fails closed). For a set without regexes they are all it needs.
    pub fn none() -> RegexCaches {
        RegexCaches {
            set_id: 0,
            caches: Box::new([]),
            ua_memo: Box::new([]),
        }
    }
}

/// Per-request state of one evaluation.
struct Eval<'a, 'c, U> {
    path: &'a [u8],
    user_agents: U,
    ua_found: Option<RuleBits>,
    ua_blank: Option<bool>,
    path_found: Option<RuleBits>,
    caches: &'c mut RegexCaches,
    give_ups: u32,
}

impl<'a, U: Iterator<Item = &'a [u8]> + Clone> Eval<'a, '_, U> {
    fn ua_blank(&mut self) -> bool {
        *self.ua_blank.get_or_insert_with(|| {
            self.user_agents
                .clone()
                .all(|line| line.iter().all(|&b| b == b' ' || b == b'\t'))
        })
    }

    /// The globs whose literal piece the path holds: one pass, made once.
    fn path_found(&mut self, needles: &Needles) -> &RuleBits {
        let path = self.path;
        self.path_found.get_or_insert_with(|| {
            let mut found = RuleBits::default();
            needles.scan(path, &mut found);
            found
        })
    }

    #[inline(always)]
    fn ua_found(&mut self, needles: &Needles) -> &RuleBits {
        if self.ua_found.is_none() {
            let mut found = RuleBits::default();
            for line in self.user_agents.clone() {
                found.or(&self.caches.ua_scan(needles, line));
            }
            self.ua_found = Some(found);
        }
        self.ua_found.get_or_insert_with(RuleBits::default)
    }
}

impl Preset {
    /// The compiled set. Allocates; compile time only (a snapshot compiles a
    /// preset only when something names it).
    pub fn compile(self) -> RuleSet {
        RuleSet::compile(&self.rules()).expect("presets are valid")
    }
}

impl RuleSet {
    /// Compiles a whole set, collecting every error. Allocates; compile time
    /// only. See [`RuleSetBuilder`] for the costs.
    pub fn compile(specs: &[RuleSpec]) -> Result<RuleSet, Vec<RuleSetError>> {
        let mut builder = RuleSetBuilder::new();
        let mut errors = Vec::new();
        for spec in specs {
            if let Err(e) = builder.push(spec) {
                let stop = e == RuleSetError::TooManyRules;
                errors.push(e);
                if stop {
                    break;
                }
            }
        }
        if errors.is_empty() {
            Ok(builder.build())
        } else {
            Err(errors)
        }
    }

    /// Number of rules.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Rule `index` as stated (normalised), for explain and docs.
    pub fn rule(&self, index: usize) -> Option<&RuleSpec> {
        self.specs.get(index)
    }

    /// Whether any rule reads the path: only then must the caller compute
    /// the canonical path for [`RuleRequest::path`].
    pub fn needs_path(&self) -> bool {
        self.needs_path
    }

    /// Number of regex rules (each holds a lazy-DFA cache per shard).
    pub fn regex_count(&self) -> usize {
        self.regexes.len()
    }

    /// Fresh caches for this set, one per regex, for one shard. Allocates (a
    /// few KiB per regex, growing to at most [`REGEX_CACHE_BYTES`] each as
    /// path shapes are met); made when a shard first uses a new snapshot.
    pub fn new_regex_caches(&self) -> RegexCaches {
        RegexCaches {
            set_id: self.id,
            caches: self.regexes.iter().map(PathRegex::create_cache).collect(),
            ua_memo: (0..UA_MEMO_ENTRIES).map(|_| UaMemo::default()).collect(),
        }
    }

    /// Whether `caches` were made for this set.
    pub fn owns(&self, caches: &RegexCaches) -> bool {
        caches.set_id == self.id && caches.caches.len() == self.regexes.len()
    }

    /// The first rule the request matches, counting nothing. Only regexes
    /// touch `caches`; caches made for another set make every regex give up
    /// (fail closed). Cost: one matcher lookup (O(segments)), then
    /// the unindexed rules below the best index, each O(1) for method and
    /// user agent (after one O(user-agent bytes) pass for the whole set) and
    /// O(path) for a glob or regex. No allocation (a regex's first meeting
    /// with a path shape may allocate its new DFA states).
    pub fn evaluate<'a, U>(&self, req: &RuleRequest<'a, U>, caches: &mut RegexCaches) -> RuleOutcome
    where
        U: Iterator<Item = &'a [u8]> + Clone,
    {
        let mut ev = Eval {
            path: req.path,
            user_agents: req.user_agents.clone(),
            ua_found: None,
            ua_blank: None,
            path_found: None,
            caches,
            give_ups: 0,
        };
        // The rules this method leaves, as one mask: the method is then
        // known to hold for every rule tried.
        let methods = self
            .method_masks
            .iter()
            .find(|(m, _)| m.matches(req.method))
            .map_or(&self.other_methods, |(_, bits)| bits);
        let mut best = usize::MAX;
        if !self.matcher.is_empty() {
            if let Some((_, &i)) = self.matcher.lookup_where(req.path, |_, &i| {
                methods.get(i) && self.user_agent_holds(i, &mut ev)
            }) {
                best = i;
            }
        }
        // Unindexed rules below the best, in order, with the method and the
        // path's last byte already applied. Both masks only ever leave out
        // rules that cannot match, so the first rule that holds is the
        // first of the set.
        let mut candidates = self.scan;
        candidates.and(methods);
        if let Some(&last) = req.path.last() {
            candidates.and(&self.last_masks[usize::from(self.last_class[usize::from(last)])]);
        }
        // The first rule that needs the user-agent pass, or the path's
        // literal pass, makes it; its answer then strikes out every later
        // rule it refutes, so they are never looked at.
        let mut w = 0;
        while w < candidates.0.len() {
            let bits = candidates.0[w];
            if bits == 0 {
                w += 1;
                continue;
            }
            let i = w * 64 + bits.trailing_zeros() as usize;
            if i >= best {
                break;
            }
            candidates.0[w] = bits & (bits - 1);
            if ev.ua_found.is_none() && self.ua_only.get(i) {
                let found = *ev.ua_found(&self.ua);
                candidates.and_not(&self.ua_only.without(&found));
                if !found.get(i) {
                    continue;
                }
            }
            if ev.path_found.is_none() && self.glob_literals.get(i) {
                let found = *ev.path_found(&self.path_needles);
                candidates.and_not(&self.glob_literals.without(&found));
                if !found.get(i) {
                    continue;
                }
            }
            if self.user_agent_holds(i, &mut ev) && self.path_condition_holds(i, &mut ev) {
                best = i;
                break;
            }
        }
        let rule = (best != usize::MAX).then_some(best);
        RuleOutcome {
            rule,
            action: rule.map(|i| self.rules[i].action),
            regex_give_ups: ev.give_ups,
        }
    }

    /// [`evaluate`](Self::evaluate), then [`RuleSetCounters::record`]: the
    /// outcome, counted, and the refusal left under `mode`. Same cost.
    #[inline]
    pub fn decide<'a, U>(
        &self,
        req: &RuleRequest<'a, U>,
        caches: &mut RegexCaches,
        counters: &mut RuleSetCounters,
        mode: Mode,
    ) -> RuleDecision
    where
        U: Iterator<Item = &'a [u8]> + Clone,
    {
        let outcome = self.evaluate(req, caches);
        let refusal = counters.record(&outcome, mode);
        RuleDecision { outcome, refusal }
    }

    /// The user-agent condition (the method is known to hold).
    #[inline]
    fn user_agent_holds<'a, U>(&self, i: usize, ev: &mut Eval<'a, '_, U>) -> bool
    where
        U: Iterator<Item = &'a [u8]> + Clone,
    {
        let rule = &self.rules[i];
        if rule.ua_contains || rule.ua_empty {
            let holds = (rule.ua_empty && ev.ua_blank())
                || (rule.ua_contains && ev.ua_found(&self.ua).get(i));
            if !holds {
                return false;
            }
        }
        true
    }

    /// The path condition of an unindexed rule.
    #[inline]
    fn path_condition_holds<'a, U>(&self, i: usize, ev: &mut Eval<'a, '_, U>) -> bool
    where
        U: Iterator<Item = &'a [u8]> + Clone,
    {
        let rule = &self.rules[i];
        match &rule.path {
            PathCond::None => true,
            PathCond::Indexed => false,
            PathCond::Glob(glob) => {
                if !glob.ends_fit(ev.path) {
                    return false;
                }
                if glob.literal.is_some() && !ev.path_found(&self.path_needles).get(i) {
                    return false;
                }
                glob.glob.matches(ev.path)
            }
            PathCond::Regex(slot) => {
                let result = if ev.caches.set_id == self.id {
                    match ev.caches.caches.get_mut(*slot) {
                        Some(cache) => self.regexes[*slot].search(cache, ev.path),
                        None => RegexResult::GaveUp,
                    }
                } else {
                    RegexResult::GaveUp
                };
                match result {
                    RegexResult::Match => true,
                    RegexResult::NoMatch => false,
                    RegexResult::GaveUp => {
                        ev.give_ups += 1;
                        rule.action != Action::Allow
                    }
                }
            }
        }
    }
}
