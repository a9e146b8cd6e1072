//! Regex path conditions: regex-automata's lazy DFA, bounded in size.
//!
//! A regex is compiled when the snapshot is built into a Thompson NFA and a
//! lazy (hybrid) DFA over it. The search reads each byte of the path once,
//! so it runs in time linear in the path whatever the pattern: `^(a+)+$`,
//! which a backtracking engine takes exponential time on, costs no more than
//! a literal. DFA states are built on demand into a per-shard [`Cache`] and
//! reused, so a path shape seen before is matched with no allocation; a new
//! shape allocates its few new states once.
//!
//! Bounds that keep a hostile pattern from taking memory or time:
//!
//! - the pattern is at most [`MAX_REGEX_BYTES`] and nests at most
//!   [`REGEX_NEST_LIMIT`] deep, so parsing is bounded;
//! - the compiled NFA is at most [`REGEX_NFA_BYTES`]; a counted repetition
//!   that would exceed it (`(a{100}){100}`) is refused at validation, not
//!   discovered at run time;
//! - the lazy DFA's cache is at most [`REGEX_CACHE_BYTES`] per shard, filled
//!   lazily: a pattern whose DFA would be exponential (`(a|b)*a(a|b){20}`)
//!   never materialises it; the cache is cleared when full;
//! - once the cache has been cleared [`GIVE_UP_AFTER_CLEARS`] time and new
//!   states came faster than one per [`MIN_BYTES_PER_STATE`] bytes searched
//!   since, the search gives up rather than keep building states. The rule's
//!   action then decides (fail closed: a deny or drop counts it as a match,
//!   an allow as no match), the give-up is counted, and the cache is reset
//!   so the next request starts fresh.
//!
//! What the bounds cost: a state costs O(NFA) to build, so the work one
//! search can do is bounded by about two cache fills of states, whatever
//! the path. Measured (bench `rules`): the exponential pattern above over
//! an 8,000-byte path built to need a new state at almost every byte gives
//! up after about 0.26 ms (with a 256 KiB cache and three clears it took
//! 1.7 ms); ordinary patterns have a few dozen states, built once and then
//! never cleared, so they never come near a give-up. Memory per regex: its
//! NFA in the snapshot, and at most [`REGEX_CACHE_BYTES`] per shard.
//!
//! A regex that can only match at the end of the path (it ends with `$`,
//! as most path regexes do: `\.(bak|old)$`) is searched backwards instead,
//! anchored at the path's end, with a lazy DFA of the reversed pattern: the
//! answer is the same (some match exists), but a path whose last bytes
//! cannot end a match is refused after reading only those bytes instead of
//! the whole path.
//!
//! Syntax: regex-automata's (Rust `regex`) syntax, matched unanchored over
//! the canonical path's bytes (`^` and `$` anchor), ASCII case ignored
//! (the canonical path is lowercase), Unicode classes off: `\w`, `\d`, `\s`
//! and `.` are byte classes, which is what a path holds.

use regex_automata::hybrid::dfa::{Cache, DFA};
use regex_automata::nfa::thompson;
use regex_automata::util::syntax;
use regex_automata::{Anchored, Input};
use regex_syntax::hir::Look;

/// Longest regex pattern, in bytes.
pub const MAX_REGEX_BYTES: usize = 1024;
/// Deepest nesting of groups and repetitions.
pub const REGEX_NEST_LIMIT: u32 = 32;
/// Most heap one regex's NFA may use while it is compiled (the NFA kept is
/// smaller: a 1,024-byte literal keeps about 41 KiB).
pub const REGEX_NFA_BYTES: usize = 256 * 1024;
/// Largest lazy DFA cache of one regex, per shard.
pub const REGEX_CACHE_BYTES: usize = 64 * 1024;
/// Cache clears tolerated before an inefficient search gives up.
pub const GIVE_UP_AFTER_CLEARS: usize = 1;
/// Bytes searched per new state below which the search counts as
/// inefficient (only after [`GIVE_UP_AFTER_CLEARS`] clears).
pub const MIN_BYTES_PER_STATE: usize = 10;

/// A compiled regex condition. Immutable; lives in the snapshot.
#[derive(Clone, Debug)]
pub(crate) struct PathRegex {
    dfa: DFA,
    /// Whether `dfa` is of the reversed pattern (every match ends at the
    /// path's end): searched backwards, anchored at the end.
    reverse: bool,
    /// The bytes a matching path may end with (bit per byte): all of them
    /// unless `reverse`, else those the reversed DFA does not refuse as its
    /// first byte read. A path ending with another byte cannot match.
    last_bytes: [u64; 4],
}

/// What one search said.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RegexResult {
    Match,
    NoMatch,
    /// The lazy DFA gave up (its cache was cleared too often): unknown.
    GaveUp,
}

impl PathRegex {
    /// Compiles `pattern` under the bounds above; the error is the message
    /// for `ruleSet.rule.path.regex.invalid`. Allocates; compile time only.
    pub(crate) fn compile(pattern: &str) -> Result<PathRegex, String> {
        if pattern.is_empty() {
            return Err("the regex is empty".to_owned());
        }
        if pattern.len() > MAX_REGEX_BYTES {
            return Err(format!("a regex is at most {MAX_REGEX_BYTES} bytes"));
        }
        let syntax = syntax::Config::new()
            .case_insensitive(true)
            .unicode(false)
            .utf8(false)
            .nest_limit(REGEX_NEST_LIMIT);
        let build = |reverse: bool| {
            DFA::builder()
                .syntax(syntax)
                .thompson(
                    thompson::Config::new()
                        .utf8(false)
                        .reverse(reverse)
                        .nfa_size_limit(Some(REGEX_NFA_BYTES)),
                )
                .configure(
                    DFA::config()
                        .cache_capacity(REGEX_CACHE_BYTES)
                        .minimum_cache_clear_count(Some(GIVE_UP_AFTER_CLEARS))
                        .minimum_bytes_per_state(Some(MIN_BYTES_PER_STATE)),
                )
                .build(pattern)
                .map_err(|e| error_chain(&e))
        };
        // The forward build validates (its errors are the ones reported);
        // an end-anchored pattern is then built reversed for searching.
        let forward = build(false)?;
        let end_anchored = syntax::parse_with(pattern, &syntax)
            .is_ok_and(|hir| hir.properties().look_set_suffix().contains(Look::End));
        if end_anchored {
            if let Ok(dfa) = build(true) {
                let last_bytes = possible_last_bytes(&dfa);
                return Ok(PathRegex {
                    dfa,
                    reverse: true,
                    last_bytes,
                });
            }
        }
        Ok(PathRegex {
            dfa: forward,
            reverse: false,
            last_bytes: [u64::MAX; 4],
        })
    }

    /// Whether a path ending with `b` may match (see `last_bytes`). O(1).
    #[inline]
    pub(crate) fn may_end_with(&self, b: u8) -> bool {
        self.last_bytes[usize::from(b >> 6)] >> (b & 63) & 1 != 0
    }

    /// A fresh cache for one shard. Allocates.
    pub(crate) fn create_cache(&self) -> Cache {
        self.dfa.create_cache()
    }

    /// Whether the regex matches anywhere in `path`. O(path length); no
    /// allocation once the states this path needs are cached. A give-up
    /// resets the cache (a small allocation, on that path only).
    #[inline]
    pub(crate) fn search(&self, cache: &mut Cache, path: &[u8]) -> RegexResult {
        let found = if self.reverse {
            let input = Input::new(path).anchored(Anchored::Yes).earliest(true);
            self.dfa.try_search_rev(cache, &input)
        } else {
            self.dfa
                .try_search_fwd(cache, &Input::new(path).earliest(true))
        };
        match found {
            Ok(Some(_)) => RegexResult::Match,
            Ok(None) => RegexResult::NoMatch,
            Err(_) => {
                cache.reset(&self.dfa);
                RegexResult::GaveUp
            }
        }
    }
}

/// For a reversed, end-anchored DFA: the bytes whose transition from the
/// anchored start state is not dead, that is the bytes some match may end
/// with. Every byte when the empty string matches at the end, or when the
/// DFA cannot say (a quit or cache error): the set may be too wide, never
/// too narrow. Allocates a scratch cache; compile time only.
fn possible_last_bytes(dfa: &DFA) -> [u64; 4] {
    let all = [u64::MAX; 4];
    let mut cache = dfa.create_cache();
    let mut set = [0u64; 4];
    for b in 0..=255u8 {
        // The start state is asked for again each time: a cache clear
        // during a transition invalidates the ids taken before it.
        let hay = [b];
        let input = Input::new(&hay[..]).anchored(Anchored::Yes);
        let Ok(start) = dfa.start_state_reverse(&mut cache, &input) else {
            return all;
        };
        match dfa.next_eoi_state(&mut cache, start) {
            Ok(eoi) if eoi.is_match() => return all,
            Ok(_) => {}
            Err(_) => return all,
        }
        match dfa.next_state(&mut cache, start, b) {
            Ok(next) if next.is_dead() => {}
            Ok(_) => set[usize::from(b >> 6)] |= 1 << (b & 63),
            Err(_) => return all,
        }
    }
    set
}

/// The error and its sources, innermost last: regex-automata's build error
/// says only which stage failed; the parse or size error is its source.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut msg = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        msg.push_str(": ");
        msg.push_str(&s.to_string());
        source = s.source();
    }
    msg
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(pattern: &str, path: &str) -> RegexResult {
        let re = PathRegex::compile(pattern).unwrap();
        let mut cache = re.create_cache();
        re.search(&mut cache, path.as_bytes())
    }

    #[test]
    fn unanchored_case_insensitive_byte_matching() {
        assert_eq!(run(r"\.php$", "/a/index.php"), RegexResult::Match);
        assert_eq!(run(r"\.php$", "/a/index.php/x"), RegexResult::NoMatch);
        assert_eq!(run(r"^/wp-", "/wp-login.php"), RegexResult::Match);
        assert_eq!(run(r"^/wp-", "/x/wp-login.php"), RegexResult::NoMatch);
        assert_eq!(run(r"ADMIN", "/admin"), RegexResult::Match);
        assert_eq!(run(r"/\d+/edit", "/users/42/edit"), RegexResult::Match);
        assert_eq!(
            run(r"caf.$", "/caf\u{e9}"),
            RegexResult::NoMatch,
            "é is two bytes"
        );
        assert_eq!(run(r"caf..$", "/caf\u{e9}"), RegexResult::Match);
    }

    #[test]
    fn end_anchored_patterns_search_backwards_with_the_same_answers() {
        let cases = [
            (r"\.(bak|old|orig)$", "/db.bak", RegexResult::Match),
            (r"\.(bak|old|orig)$", "/db.BAK", RegexResult::Match),
            (r"\.(bak|old|orig)$", "/db.bak/x", RegexResult::NoMatch),
            (
                r"\.(bak|old|orig)$",
                "/products/item-42",
                RegexResult::NoMatch,
            ),
            (r"^/admin$", "/admin", RegexResult::Match),
            (r"^/admin$", "/x/admin", RegexResult::NoMatch),
            (r"x*$", "/anything", RegexResult::Match),
            (r"/\d+$", "/users/42", RegexResult::Match),
            (r"/\d+$", "/users/42a", RegexResult::NoMatch),
            (r"(a$|b)", "/xb/y", RegexResult::Match),
            (r"(?m)a$", "/xa", RegexResult::Match),
        ];
        for (pattern, path, want) in cases {
            assert_eq!(run(pattern, path), want, "{pattern} on {path}");
        }
        assert!(PathRegex::compile(r"\.bak$").unwrap().reverse);
        assert!(PathRegex::compile(r"^/a$").unwrap().reverse);
        assert!(!PathRegex::compile(r"(a$|b)").unwrap().reverse);
        assert!(!PathRegex::compile(r"/admin").unwrap().reverse);
        assert!(!PathRegex::compile(r"(?m)a$").unwrap().reverse);
    }

    #[test]
    fn the_last_byte_refuses_only_paths_that_cannot_match() {
        let re = PathRegex::compile(r"\.(bak|old)$").unwrap();
        let ends: Vec<u8> = (0..=255u8).filter(|&b| re.may_end_with(b)).collect();
        assert_eq!(ends, b"DKdk".to_vec());
        // Patterns that can end anywhere, or that match the empty end.
        for pattern in [r"x*$", r"(a|)$", r"admin", r"\w$|/$"] {
            let re = PathRegex::compile(pattern).unwrap();
            let n = (0..=255u8).filter(|&b| re.may_end_with(b)).count();
            assert!(n >= 36, "{pattern}: {n}");
        }
        // Whatever the pattern, a path the regex matches ends with an
        // admitted byte.
        for (pattern, path) in [
            (r"\.(bak|old)$", "/db.BAK"),
            (r"/\d+$", "/users/42"),
            (r"^/a$", "/A"),
            (r"[^/]$", "/x"),
            (r"\b$", "/ab"),
        ] {
            let re = PathRegex::compile(pattern).unwrap();
            assert_eq!(run(pattern, path), RegexResult::Match, "{pattern}");
            assert!(
                re.may_end_with(*path.as_bytes().last().unwrap()),
                "{pattern}"
            );
        }
    }

    #[test]
    fn hostile_and_oversized_patterns_are_refused_with_the_parse_error() {
        let msg = PathRegex::compile("(").unwrap_err();
        assert!(msg.contains("unclosed group"), "{msg}");
        assert!(PathRegex::compile("").is_err());
        assert!(PathRegex::compile(&"a".repeat(MAX_REGEX_BYTES + 1)).is_err());
        assert!(PathRegex::compile(&"a".repeat(MAX_REGEX_BYTES)).is_ok());
        let nested = format!("{}a{}", "(".repeat(40), ")".repeat(40));
        assert!(PathRegex::compile(&nested).is_err());
        let huge = PathRegex::compile("(a{100}){100}").unwrap_err();
        assert!(huge.contains("exceeded limit of 262144"), "{huge}");
        // Unicode is off: a Unicode class must be asked for with (?u).
        assert!(PathRegex::compile(r"\p{L}").is_err());
    }

    #[test]
    fn catastrophic_backtracking_pattern_gets_its_answer_without_backtracking() {
        // A lazy DFA reads each byte once per search; the cache's give-up
        // bound is held by exponential_dfa_gives_up_instead_of_rebuilding_forever.
        let re = PathRegex::compile(r"^/(a+)+$").unwrap();
        let mut cache = re.create_cache();
        let mut path = b"/".to_vec();
        path.extend(std::iter::repeat_n(b'a', 8_000));
        path.push(b'!');
        assert_eq!(re.search(&mut cache, &path), RegexResult::NoMatch);
        path.pop();
        assert_eq!(re.search(&mut cache, &path), RegexResult::Match);
    }

    #[test]
    fn exponential_dfa_gives_up_instead_of_rebuilding_forever() {
        let re = PathRegex::compile(r"(a|b)*a(a|b){20}x").unwrap();
        let mut cache = re.create_cache();
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let mut path = b"/".to_vec();
        for _ in 0..16_000 {
            crate::testing::xorshift64(&mut x);
            path.push(if x & 1 == 0 { b'a' } else { b'b' });
        }
        let t = std::time::Instant::now();
        assert_eq!(re.search(&mut cache, &path), RegexResult::GaveUp);
        println!("exponential DFA gave up after {:?}", t.elapsed());
        // The reset cache serves an ordinary path again.
        assert_eq!(re.search(&mut cache, b"/ab"), RegexResult::NoMatch);
    }
}
