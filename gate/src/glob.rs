//! Globs over canonical paths, matched in linear time.
//!
//! Syntax (ASCII, case ignored: the pattern is lowercased when compiled):
//!
//! - a glob starts with `/`; every other printable ASCII character is itself;
//! - `*` matches any run of bytes within one segment (no `/`), empty included;
//! - `**` matches any run of bytes across segments (`/` included);
//! - `/**/` matches `/` followed by zero or more whole segments and their `/`,
//!   so `/**/.env` takes `/.env` and `/a/b/.env` but not `/a.env`; a repeated
//!   `/**/**/` is the same as one `/**/`;
//! - three or more `*` in a row are refused.
//!
//! Guarantee: [`Glob::matches`] reads each byte of the path once and never
//! backtracks, so its cost is O(path length) whatever the pattern (the classic
//! `/**/a*a*a*a*b` against a long run of `a` is no slower than a literal), and
//! it allocates nothing. A pattern compiles to at most [`MAX_GLOB_TOKENS`]
//! tokens (a literal character or a wildcard), simulated as an automaton with
//! one bit of state per token position held in a `u128`: a step is a few
//! shifts and masks.
//!
//! State `k` set means "the first `k` tokens have matched the bytes read so
//! far". A literal token moves its state one bit up when the byte equals it;
//! a wildcard token keeps its state (a self loop) when it accepts the byte,
//! and may be skipped without reading (its state also sets the next one). The
//! `/**/` token may only be left right after a `/` was read, which is what
//! makes it match whole segments.

/// Most tokens (literal characters and wildcards) one glob may hold.
pub const MAX_GLOB_TOKENS: usize = 126;

/// Why a glob was refused. Every variant is the profile code
/// `ruleSet.rule.path.glob.invalid` ([`GlobError::code`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GlobError {
    /// The glob does not start with `/`.
    NotRooted,
    /// A character that is not printable ASCII.
    NotAscii,
    /// More than [`MAX_GLOB_TOKENS`] tokens.
    TooManyTokens,
    /// Three or more `*` in a row.
    TripleStar,
}

impl std::fmt::Display for GlobError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            GlobError::NotRooted => "a glob starts with '/'",
            GlobError::NotAscii => "a glob is printable ASCII",
            GlobError::TooManyTokens => "a glob has at most 126 characters and wildcards",
            GlobError::TripleStar => "a glob has at most two '*' in a row",
        })
    }
}

impl std::error::Error for GlobError {}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Token {
    Literal(u8),
    /// `*`: any bytes but `/`.
    Star,
    /// `**`: any bytes.
    AnyStar,
    /// The `**/` of `/**/`: any bytes, left only after a `/`.
    Segments,
}

/// A compiled glob. Immutable; lives in the snapshot.
#[derive(Clone)]
pub struct Glob {
    pattern: Box<str>,
    /// Per byte: the literal tokens equal to it.
    literal: Box<[u128; 256]>,
    /// Wildcard tokens that accept `/`.
    stay_on_slash: u128,
    /// Wildcard tokens that accept any other byte.
    stay_on_other: u128,
    /// Wildcards that may be skipped after any byte.
    skip_always: u128,
    /// Wildcards that may be skipped only after a `/` (`/**/`).
    skip_after_slash: u128,
    /// Longest run of adjacent wildcards: how far one skip can chain.
    skip_rounds: u32,
    start: u128,
    accept: u128,
}

impl std::fmt::Debug for Glob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Glob").field(&self.pattern).finish()
    }
}

impl Glob {
    /// Compiles `pattern`. Allocates (about 4 KiB); O(pattern length).
    pub fn compile(pattern: &str) -> Result<Glob, GlobError> {
        let tokens = tokenize(pattern)?;
        let mut glob = Glob {
            pattern: pattern.to_ascii_lowercase().into_boxed_str(),
            literal: Box::new([0u128; 256]),
            stay_on_slash: 0,
            stay_on_other: 0,
            skip_always: 0,
            skip_after_slash: 0,
            skip_rounds: 0,
            start: 1,
            accept: 1u128 << tokens.len(),
        };
        let mut run = 0u32;
        for (k, token) in tokens.iter().enumerate() {
            let bit = 1u128 << k;
            run = if matches!(token, Token::Literal(_)) {
                0
            } else {
                run + 1
            };
            glob.skip_rounds = glob.skip_rounds.max(run);
            match *token {
                Token::Literal(b) => {
                    glob.literal[b as usize] |= bit;
                    glob.literal[b.to_ascii_uppercase() as usize] |= bit;
                }
                Token::Star => {
                    glob.stay_on_other |= bit;
                    glob.skip_always |= bit;
                }
                Token::AnyStar => {
                    glob.stay_on_other |= bit;
                    glob.stay_on_slash |= bit;
                    glob.skip_always |= bit;
                }
                Token::Segments => {
                    glob.stay_on_other |= bit;
                    glob.stay_on_slash |= bit;
                    glob.skip_after_slash |= bit;
                }
            }
        }
        for _ in 0..glob.skip_rounds {
            glob.start |= (glob.start & glob.skip_always) << 1;
        }
        Ok(glob)
    }

    /// The pattern as compiled (lowercased).
    pub fn as_str(&self) -> &str {
        &self.pattern
    }

    /// Whether the whole of `canonical_path` matches. Reads each byte once:
    /// O(path length), no allocation, no backtracking. Case is ignored.
    #[inline]
    pub fn matches(&self, canonical_path: &[u8]) -> bool {
        self.run(canonical_path, &mut ())
    }

    /// [`matches`](Self::matches), counting its steps (one per word
    /// operation on the state: a byte's shift, then each skip round) into
    /// `steps`: what the linear-time tests hold.
    pub fn matches_counting(&self, canonical_path: &[u8], steps: &mut u64) -> bool {
        self.run(canonical_path, steps)
    }

    /// Rounds of skipping per byte (at most the pattern's tokens).
    pub fn skip_rounds(&self) -> u32 {
        self.skip_rounds
    }

    #[inline(always)]
    fn run<S: Steps>(&self, canonical_path: &[u8], steps: &mut S) -> bool {
        let mut state = self.start;
        for &b in canonical_path {
            let (stay, skip) = if b == b'/' {
                (self.stay_on_slash, self.skip_always | self.skip_after_slash)
            } else {
                (self.stay_on_other, self.skip_always)
            };
            state = ((state & self.literal[b as usize]) << 1) | (state & stay);
            steps.step();
            for _ in 0..self.skip_rounds {
                state |= (state & skip) << 1;
                steps.step();
            }
            if state == 0 {
                return false;
            }
        }
        state & self.accept != 0
    }
}

/// A step counter: nothing in production (`()`), a count in tests.
trait Steps {
    fn step(&mut self);
}

impl Steps for () {
    #[inline(always)]
    fn step(&mut self) {}
}

impl Steps for u64 {
    #[inline(always)]
    fn step(&mut self) {
        *self += 1;
    }
}

fn tokenize(pattern: &str) -> Result<Vec<Token>, GlobError> {
    let p = pattern.as_bytes();
    if p.first() != Some(&b'/') {
        return Err(GlobError::NotRooted);
    }
    let mut tokens = Vec::with_capacity(p.len());
    let mut i = 0;
    while i < p.len() {
        let b = p[i];
        if b == b'*' {
            let run = p[i..].iter().take_while(|&&c| c == b'*').count();
            if run >= 3 {
                return Err(GlobError::TripleStar);
            }
            if run == 1 {
                tokens.push(Token::Star);
                i += 1;
            } else if p[i - 1] == b'/' && p.get(i + 2) == Some(&b'/') {
                // `/**/`: the '/' before is a literal token already; the one
                // after belongs to the wildcard.
                if tokens.last() != Some(&Token::Segments) {
                    tokens.push(Token::Segments);
                }
                i += 3;
            } else {
                tokens.push(Token::AnyStar);
                i += 2;
            }
        } else {
            if !(0x20..=0x7E).contains(&b) {
                return Err(GlobError::NotAscii);
            }
            tokens.push(Token::Literal(b.to_ascii_lowercase()));
            i += 1;
        }
        if tokens.len() > MAX_GLOB_TOKENS {
            return Err(GlobError::TooManyTokens);
        }
    }
    Ok(tokens)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn glob(p: &str) -> Glob {
        Glob::compile(p).unwrap()
    }

    fn check(pattern: &str, yes: &[&str], no: &[&str]) {
        let g = glob(pattern);
        for p in yes {
            assert!(g.matches(p.as_bytes()), "{pattern} should take {p}");
        }
        for p in no {
            assert!(!g.matches(p.as_bytes()), "{pattern} should not take {p}");
        }
    }

    #[test]
    fn literal_glob_matches_only_itself() {
        check(
            "/admin",
            &["/admin", "/ADMIN"],
            &["/admin/x", "/admi", "/adminx", "/"],
        );
    }

    #[test]
    fn star_stays_within_one_segment() {
        check(
            "/*.php",
            &["/index.php", "/.php", "/a.b.php"],
            &["/a/index.php", "/index.phps", "/index.php/x"],
        );
        check("/a/*", &["/a/b", "/a/"], &["/a", "/a/b/c"]);
        check("/*/x", &["/a/x", "//x"], &["/x", "/a/b/x"]);
    }

    #[test]
    fn double_star_crosses_segments() {
        check("/**", &["/", "/a", "/a/b/c"], &[]);
        check("/**.php", &["/a.php", "/a/b/c.php"], &["/a.php/x"]);
        check(
            "/admin/**",
            &["/admin/", "/admin/x", "/admin/x/y"],
            &["/admin", "/administrator"],
        );
        check("/a**b", &["/ab", "/a/x/b", "/axb"], &["/a/x/c"]);
    }

    #[test]
    fn slash_double_star_slash_takes_zero_or_more_segments() {
        check(
            "/**/.env",
            &["/.env", "/a/.env", "/a/b/.env", "/A/.ENV"],
            &["/a.env", "/x.env", "/a/b.env", "/.env/x", "/.envx"],
        );
        check(
            "/api/**/admin",
            &["/api/admin", "/api/v1/admin", "/api/v1/x/admin"],
            &["/apiadmin", "/api/xadmin", "/api/v1/admin/x"],
        );
        check(
            "/**/*.bak",
            &["/a.bak", "/x/y/a.bak", "/.bak"],
            &["/x/y", "/a.bak/z"],
        );
        // Repeated `/**/` is one.
        check("/**/**/x", &["/x", "/a/x", "/a/b/x"], &["/ax"]);
    }

    #[test]
    fn patterns_are_lowercased_and_ascii_only() {
        check("/Admin/*.PHP", &["/admin/x.php", "/ADMIN/X.PHP"], &[]);
        assert_eq!(glob("/Admin").as_str(), "/admin");
        assert_eq!(
            Glob::compile("/caf\u{e9}").unwrap_err(),
            GlobError::NotAscii
        );
        assert_eq!(Glob::compile("/a\tb").unwrap_err(), GlobError::NotAscii);
        assert_eq!(Glob::compile("admin").unwrap_err(), GlobError::NotRooted);
        assert_eq!(Glob::compile("").unwrap_err(), GlobError::NotRooted);
        assert_eq!(Glob::compile("**/.env").unwrap_err(), GlobError::NotRooted);
        assert_eq!(Glob::compile("/a***").unwrap_err(), GlobError::TripleStar);
    }

    #[test]
    fn at_most_126_tokens() {
        let ok = format!("/{}", "a".repeat(125));
        assert!(Glob::compile(&ok).is_ok());
        let too_many = format!("/{}", "a".repeat(126));
        assert_eq!(
            Glob::compile(&too_many).unwrap_err(),
            GlobError::TooManyTokens
        );
        // `/**/` counts two tokens: the '/' and the wildcard.
        let wild = format!("{}/**/x", "/a".repeat(61));
        assert!(Glob::compile(&wild).is_ok());
        let g = Glob::compile(&wild).unwrap();
        let path = format!("{}/q/r/x", "/a".repeat(61));
        assert!(g.matches(path.as_bytes()));
        assert!(Glob::compile(&format!("{}/**/xy", "/a".repeat(61))).is_ok());
        let wild = format!("{}/**/xyz", "/a".repeat(61));
        assert_eq!(Glob::compile(&wild).unwrap_err(), GlobError::TooManyTokens);
    }

    #[test]
    fn quadratic_case_runs_in_linear_time() {
        // A backtracking matcher takes O(n^5) on this pattern; this one
        // takes exactly (1 + skip rounds) steps per byte it reads, so twice
        // the path is twice the steps.
        let g = glob("/**/a*a*a*a*a*b");
        let per_byte = 1 + u64::from(g.skip_rounds());
        assert!(g.skip_rounds() <= MAX_GLOB_TOKENS as u32);
        let steps_for = |n: usize, tail: &[u8]| {
            let mut path = b"/".to_vec();
            path.extend(std::iter::repeat_n(b'a', n));
            path.extend_from_slice(tail);
            let mut steps = 0u64;
            let matched = g.matches_counting(&path, &mut steps);
            assert_eq!(matched, g.matches(&path));
            (matched, steps, path.len() as u64)
        };
        let (m1, s1, len1) = steps_for(8_000, b"");
        let (m2, s2, len2) = steps_for(16_000, b"");
        assert!(!m1 && !m2);
        assert_eq!(s1, len1 * per_byte);
        assert_eq!(s2, len2 * per_byte);
        let (m3, s3, len3) = steps_for(8_000, b"b");
        assert!(m3);
        assert_eq!(s3, len3 * per_byte);
        // A path that fails early stops early.
        let mut deep = Vec::new();
        for _ in 0..4_000 {
            deep.extend_from_slice(b"/a");
        }
        let mut steps = 0u64;
        assert!(!g.matches_counting(&deep, &mut steps));
        assert!(steps <= deep.len() as u64 * per_byte);
    }
}
