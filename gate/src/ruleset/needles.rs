//! Substrings of a whole rule set, found in one pass over a text.
//!
//! Two texts are searched this way: the `User-Agent` lines (every
//! `contains` substring of every rule) and the canonical path (the longest
//! literal piece of every glob, a necessary condition checked before the
//! glob's automaton runs). The substrings go into one Aho-Corasick automaton
//! over ASCII-lowercased bytes. Each state carries the set of rules
//! ([`RuleBits`]) that some substring ending there belongs to, its failure
//! chain included, so reading the text once yields every rule whose
//! substring occurs, whatever the number of rules or substrings: O(text
//! length), with no per-match work and no allocation. Transitions are a
//! dense table over byte classes (case folded) with the failure links
//! already followed, so each byte read is one table load.
//!
//! Most bytes of a real text start no substring, so the scan skips ahead
//! while it is at the root: a 64 Ki-bit table of the substrings' first two
//! bytes in every case (a one-byte substring marks every pair it starts)
//! tells with one test on the raw bytes whether a position can start a
//! match. Skipping from the root never loses one: every occurrence starts at
//! a marked position, and the automaton is only left running while some
//! prefix is still open.
//!
//! When every substring is at least [`MIN_SHIFT_LEN`] bytes long, the skip
//! looks further ahead first (Wu-Manber): with `m` the shortest substring's
//! length (at most 8), the two bytes ending the window of `m` bytes that
//! starts at the position index a table of how far the window may move
//! without passing a possible start. A pair that ends no substring's first
//! `m` bytes at an offset below `m - 1` moves it `m - 1` bytes at once; a
//! pair that does moves it only so far that the occurrence it could belong to
//! still starts at or after the window. Only a window the table cannot move
//! reaches the pair test and the automaton. Pairs are hashed (case folded)
//! into 4,096 slots; a slot keeps the smallest move of the pairs that share
//! it, so a collision costs speed, never a match.
//!
//! When every substring starts with one of at most three raw bytes (a glob's
//! middle pieces mostly start with `/`), the scan instead finds those bytes
//! eight at a time with word operations and applies the pair test to each.

/// One bit per rule of a set (at most 256; a set holds at most 200).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RuleBits(pub [u64; 4]);

impl RuleBits {
    #[inline]
    pub fn set(&mut self, i: usize) {
        self.0[i / 64] |= 1 << (i % 64);
    }

    #[inline]
    pub fn get(&self, i: usize) -> bool {
        self.0[i / 64] & (1 << (i % 64)) != 0
    }

    #[inline]
    pub fn or(&mut self, other: &RuleBits) {
        for (a, b) in self.0.iter_mut().zip(other.0) {
            *a |= b;
        }
    }

    #[inline]
    pub fn and(&mut self, other: &RuleBits) {
        for (a, b) in self.0.iter_mut().zip(other.0) {
            *a &= b;
        }
    }

    /// Clears the bits `other` has.
    #[inline]
    pub fn and_not(&mut self, other: &RuleBits) {
        for (a, b) in self.0.iter_mut().zip(other.0) {
            *a &= !b;
        }
    }

    /// The bits of `self` that `other` lacks.
    #[inline]
    pub fn without(&self, other: &RuleBits) -> RuleBits {
        let mut out = *self;
        out.and_not(other);
        out
    }

    #[inline]
    pub fn contains_all(&self, other: &RuleBits) -> bool {
        self.0.iter().zip(other.0).all(|(a, b)| a & b == b)
    }

    pub fn is_empty(&self) -> bool {
        self.0 == [0; 4]
    }
}

const ROOT: u32 = 0;

/// The shortest substring length for which the look-ahead skip is used.
pub const MIN_SHIFT_LEN: usize = 3;
const SHIFT_SLOTS: usize = 4096;

/// The automaton of one rule set's substrings of one kind. Immutable.
#[derive(Clone, Debug)]
pub struct Needles {
    /// Per raw byte, its class (case folded; 0: in no substring).
    class: Box<[u8; 256]>,
    stride: u32,
    /// `dense[state * stride + class]`: the next state, failure links
    /// already followed.
    dense: Box<[u32]>,
    /// Per state, an index into `outs` (0: no rule ends here).
    out: Box<[u32]>,
    outs: Box<[RuleBits]>,
    /// Bit `b0 | b1 << 8` (raw bytes): some substring can start with them.
    pairs: Box<[u64; 1024]>,
    /// The rules that have substrings at all.
    all: RuleBits,
    /// Window length `m` of the look-ahead skip (0: not used).
    window: usize,
    /// Per hashed pair, how far a window ending with it may move.
    shift: Box<[u8; SHIFT_SLOTS]>,
    /// When every substring starts with one of at most three raw bytes
    /// (case variants counted), those bytes, each repeated over a word
    /// (`first_len` 0: not used). Paths' literals mostly start with `/`.
    first: [u64; 3],
    first_len: u8,
    /// Per byte of `first`, the bytes that may follow it (bit per raw byte,
    /// case variants set): the pair test of that scan, held in line so a
    /// path's few candidate positions never reach for `pairs`.
    second: [[u64; 4]; 3],
}

/// The sparse trie of the substrings (lowercased), each state's rules, the
/// table of first byte pairs, and every rule with a substring.
struct Trie {
    trie: Vec<Vec<(u8, u32)>>,
    bits: Vec<RuleBits>,
    pairs: Box<[u64; 1024]>,
    all: RuleBits,
}

/// The skip table: for each byte pair, how far a match can start after it
/// within the first `window` bytes of every substring (0: no skipping).
fn shift_table<S: AsRef<str>>(needles: &[(usize, S)]) -> (usize, Box<[u8; SHIFT_SLOTS]>) {
    let shortest = needles
        .iter()
        .map(|(_, n)| n.as_ref().len())
        .filter(|&l| l > 0)
        .min()
        .unwrap_or(0);
    let window = if shortest >= MIN_SHIFT_LEN {
        shortest.min(8)
    } else {
        0
    };
    let mut shift = Box::new([window.saturating_sub(1) as u8; SHIFT_SLOTS]);
    for (_, needle) in needles {
        let b = needle.as_ref().as_bytes();
        if window == 0 || b.is_empty() {
            continue;
        }
        // The pair ending at offset q of the first `window` bytes.
        for q in 1..window {
            let slot = &mut shift[pair_slot(b[q - 1], b[q])];
            *slot = (*slot).min((window - 1 - q) as u8);
        }
    }
    (window, shift)
}

/// The trie with sparse transitions, the rules ending at each state, and
/// the first-pair table.
fn sparse_trie<S: AsRef<str>>(needles: &[(usize, S)]) -> Trie {
    let mut t = Trie {
        trie: vec![Vec::new()],
        bits: vec![RuleBits::default()],
        pairs: Box::new([0u64; 1024]),
        all: RuleBits::default(),
    };
    for (rule, needle) in needles {
        let rule = *rule;
        let lower = needle.as_ref().as_bytes().to_ascii_lowercase();
        if lower.is_empty() {
            continue;
        }
        t.all.set(rule);
        match lower.get(1) {
            Some(&b1) => mark(&mut t.pairs, lower[0], b1),
            None => (0..=255).for_each(|b1| mark(&mut t.pairs, lower[0], b1)),
        }
        let mut s = ROOT as usize;
        for &b in &lower {
            s = match t.trie[s].iter().find(|(c, _)| *c == b) {
                Some(&(_, next)) => next as usize,
                None => {
                    let next = t.trie.len();
                    t.trie.push(Vec::new());
                    t.bits.push(RuleBits::default());
                    t.trie[s].push((b, next as u32));
                    next
                }
            };
        }
        t.bits[s].set(rule);
    }
    t
}

/// Failure links, breadth first; each state's outputs inherit its failure
/// target's. Returns the links and the breadth-first order.
fn failure_links(trie: &[Vec<(u8, u32)>], bits: &mut [RuleBits]) -> (Vec<u32>, Vec<u32>) {
    let mut fail = vec![ROOT; trie.len()];
    let mut queue = std::collections::VecDeque::new();
    for &(_, next) in &trie[ROOT as usize] {
        queue.push_back(next);
    }
    let mut order = vec![ROOT];
    while let Some(s) = queue.pop_front() {
        order.push(s);
        let f = fail[s as usize] as usize;
        let inherited = bits[f];
        bits[s as usize].or(&inherited);
        for &(b, next) in &trie[s as usize] {
            let mut g = f;
            let target = loop {
                if let Some(&(_, t)) = trie[g].iter().find(|(c, _)| *c == b) {
                    break t;
                }
                if g == ROOT as usize {
                    break ROOT;
                }
                g = fail[g] as usize;
            };
            fail[next as usize] = target;
            queue.push_back(next);
        }
    }
    (fail, order)
}

/// Dense transitions over byte classes (ASCII case folded, every byte of no
/// substring in class 0), failure links resolved: states in breadth-first
/// order, so a state's failure target is already done.
fn dense_transitions(
    trie: &[Vec<(u8, u32)>],
    fail: &[u32],
    order: &[u32],
) -> (Box<[u8; 256]>, usize, Vec<u32>) {
    let mut class = Box::new([0u8; 256]);
    let mut stride = 1usize;
    for t in trie {
        for &(b, _) in t {
            if class[usize::from(b)] == 0 {
                class[usize::from(b)] = stride as u8;
                class[usize::from(b.to_ascii_uppercase())] = stride as u8;
                stride += 1;
            }
        }
    }
    let mut dense = vec![ROOT; trie.len() * stride];
    for &s in order {
        let s = s as usize;
        for c in 0..stride {
            dense[s * stride + c] = if s == ROOT as usize {
                ROOT
            } else {
                dense[fail[s] as usize * stride + c]
            };
        }
        for &(b, next) in &trie[s] {
            dense[s * stride + usize::from(class[usize::from(b)])] = next;
        }
    }
    (class, stride, dense)
}

/// When the substrings start with at most three distinct bytes (either
/// case): those bytes broadcast over a word, the second bytes allowed after
/// each, and how many there are (0: scan without them).
fn first_bytes<S: AsRef<str>>(
    needles: &[(usize, S)],
    pairs: &[u64; 1024],
) -> ([u64; 3], [[u64; 4]; 3], u8) {
    let mut starts: Vec<u8> = Vec::new();
    for (_, needle) in needles {
        if let Some(&b) = needle.as_ref().as_bytes().first() {
            for v in [b.to_ascii_lowercase(), b.to_ascii_uppercase()] {
                if !starts.contains(&v) {
                    starts.push(v);
                }
            }
        }
    }
    let mut first = [0u64; 3];
    let mut second = [[0u64; 4]; 3];
    if !(1..=3).contains(&starts.len()) {
        return (first, second, 0);
    }
    for ((w, after), &b) in first.iter_mut().zip(second.iter_mut()).zip(&starts) {
        *w = u64::from(b) * LOW_BYTES;
        for b1 in 0..=255u8 {
            if pair_marked(pairs, b, b1) {
                after[usize::from(b1 >> 6)] |= 1 << (b1 & 63);
            }
        }
    }
    (first, second, starts.len() as u8)
}

/// Each state's output as an index into one list of distinct rule sets (0:
/// none).
fn output_sets(bits: &[RuleBits]) -> (Box<[u32]>, Vec<RuleBits>) {
    let mut outs = vec![RuleBits::default()];
    let out = bits
        .iter()
        .map(|b| {
            if b.is_empty() {
                0
            } else if let Some(i) = outs.iter().position(|o| o == b) {
                i as u32
            } else {
                outs.push(*b);
                (outs.len() - 1) as u32
            }
        })
        .collect();
    (out, outs)
}

impl Default for Needles {
    fn default() -> Self {
        Needles::build::<&str>(&[])
    }
}

impl Needles {
    /// Builds the automaton from (rule index, substring) pairs; substrings
    /// are non-empty printable ASCII (checked by the caller). Allocates;
    /// O(total substring bytes). The steps: the skip table of the first
    /// `window` bytes, the sparse trie with its first-pair table, failure
    /// links breadth first, dense transitions over byte classes, the first
    /// bytes a scan may search for, and the deduplicated output sets.
    pub fn build<S: AsRef<str>>(needles: &[(usize, S)]) -> Needles {
        let (window, shift) = shift_table(needles);
        let Trie {
            trie,
            mut bits,
            pairs,
            all,
        } = sparse_trie(needles);
        let (fail, order) = failure_links(&trie, &mut bits);
        let (class, stride, dense) = dense_transitions(&trie, &fail, &order);
        let (first, second, first_len) = first_bytes(needles, &pairs);
        let (out, outs) = output_sets(&bits);
        Needles {
            class,
            stride: stride as u32,
            dense: dense.into_boxed_slice(),
            out,
            outs: outs.into_boxed_slice(),
            pairs,
            all,
            window,
            shift,
            first,
            first_len,
            second,
        }
    }

    /// Adds to `found` the rules with a substring in `line`, ASCII case
    /// ignored. O(line length) amortised, no allocation.
    pub fn scan(&self, line: &[u8], found: &mut RuleBits) {
        if self.first_len != 0 {
            return self.scan_by_first(line, found);
        }
        let n = line.len();
        let mut i = 0;
        let mut s = ROOT;
        while i < n {
            if s == ROOT && self.window != 0 {
                // Move a window of `m` bytes by its last pair while the
                // table allows; every substring is at least `m` long, so
                // none starts where the window no longer fits.
                loop {
                    let end = i + self.window - 1;
                    if end >= n {
                        return;
                    }
                    let by = self.shift[pair_slot(line[end - 1], line[end])];
                    if by == 0 {
                        break;
                    }
                    i += usize::from(by);
                }
                if !self.pair_may_start(line[i], line[i + 1]) {
                    i += 1;
                    continue;
                }
            } else if s == ROOT {
                // Skip positions that cannot start a substring: one table
                // test per position on the raw two bytes.
                match line[i..]
                    .windows(2)
                    .position(|w| self.pair_may_start(w[0], w[1]))
                {
                    Some(skip) => i += skip,
                    None => {
                        // Only a one-byte substring can still start, at the
                        // last byte.
                        i = n - 1;
                        if !self.single_may_start(line[i]) {
                            return;
                        }
                    }
                }
            }
            let Some(next) = self.step(s, line[i], found) else {
                return;
            };
            s = next;
            i += 1;
        }
    }

    /// [`scan`](Self::scan) when every substring starts with one of the
    /// `first` bytes: eight bytes at a time, the positions holding one of
    /// them are found with word operations; each whose pair may start a
    /// substring runs the automaton until it is back at the root (no match
    /// is open then, so none can start before that point). O(line length).
    fn scan_by_first(&self, line: &[u8], found: &mut RuleBits) {
        let n = line.len();
        // The automaton has read every byte before `next`.
        let mut next = 0;
        let mut base = 0;
        while base < n {
            let word = word_at(line, base);
            let mut hits = 0u64;
            for &f in &self.first[..usize::from(self.first_len)] {
                hits |= zero_bytes(word ^ f);
            }
            // Padding bytes are zero, and no substring starts with zero.
            while hits != 0 {
                let p = base + (hits.trailing_zeros() / 8) as usize;
                hits &= hits - 1;
                if p < next || (p + 1 < n && !self.follows_first(line[p], line[p + 1])) {
                    continue;
                }
                let mut s = ROOT;
                let mut j = p;
                loop {
                    let Some(next) = self.step(s, line[j], found) else {
                        return;
                    };
                    s = next;
                    j += 1;
                    if s == ROOT || j == n {
                        break;
                    }
                }
                next = j;
            }
            base += 8;
        }
    }

    /// The automaton's move from `s` on byte `b`, adding the rules whose
    /// substring ends there to `found`; `None` once `found` holds every
    /// rule (nothing is left to find).
    #[inline(always)]
    fn step(&self, s: u32, b: u8, found: &mut RuleBits) -> Option<u32> {
        let next =
            self.dense[s as usize * self.stride as usize + usize::from(self.class[usize::from(b)])];
        let o = self.out[next as usize];
        if o != 0 {
            found.or(&self.outs[o as usize]);
            if found.contains_all(&self.all) {
                return None;
            }
        }
        Some(next)
    }

    /// The pair test of [`scan_by_first`](Self::scan_by_first), where `b0`
    /// is one of `first`'s bytes.
    #[inline(always)]
    fn follows_first(&self, b0: u8, b1: u8) -> bool {
        let k = self.first[..usize::from(self.first_len)]
            .iter()
            .position(|&w| w as u8 == b0)
            .unwrap_or(0);
        self.second[k][usize::from(b1 >> 6)] >> (b1 & 63) & 1 != 0
    }

    #[inline(always)]
    fn pair_may_start(&self, b0: u8, b1: u8) -> bool {
        pair_marked(&self.pairs, b0, b1)
    }

    #[inline]
    fn single_may_start(&self, b0: u8) -> bool {
        // A one-byte substring marks its byte with every successor, 0
        // included.
        self.pair_may_start(b0, 0)
    }
}

/// `a == b` for slices of equal length, eight bytes at a time inline (the
/// memo's hit path, where a library call costs as much as the comparison).
#[inline]
pub(super) fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    debug_assert_eq!(a.len(), b.len());
    let n = a.len().min(b.len());
    if n < 8 {
        return a[..n] == b[..n];
    }
    let word = |s: &[u8], i: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&s[i..i + 8]);
        u64::from_le_bytes(w)
    };
    let mut diff = 0;
    let mut i = 0;
    while i + 8 <= n {
        diff |= word(a, i) ^ word(b, i);
        i += 8;
    }
    // The last, possibly overlapping, word.
    diff |= word(a, n - 8) ^ word(b, n - 8);
    diff == 0
}

/// The eight bytes of `s` from `at` as a little-endian word, zeros past
/// its end. In registers: a whole word is one load, a short tail the
/// slice's last word shifted down (a tail copied through memory would be
/// read back straight after writes of other sizes, which stalls).
#[inline(always)]
pub(super) fn word_at(s: &[u8], at: usize) -> u64 {
    let load = |w: &[u8]| u64::from_le_bytes(w.try_into().unwrap_or([0; 8]));
    let n = s.len();
    if at + 8 <= n {
        return load(&s[at..at + 8]);
    }
    if at >= n {
        return 0;
    }
    if n >= 8 {
        return load(&s[n - 8..]) >> (8 * (at + 8 - n));
    }
    s[at..]
        .iter()
        .enumerate()
        .fold(0, |w, (i, &b)| w | u64::from(b) << (8 * i))
}

/// Every byte of `w` ASCII lower-cased, eight at a time (no carry crosses
/// a byte: each sum stays below 0x100).
#[inline(always)]
pub(super) fn fold_case(w: u64) -> u64 {
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let low = w & !HIGH;
    let at_least_a = low.wrapping_add(0x3f3f_3f3f_3f3f_3f3f);
    let past_z = low.wrapping_add(0x2525_2525_2525_2525);
    let upper = at_least_a & !past_z & !w & HIGH;
    w | (upper >> 2)
}

const LOW_BYTES: u64 = 0x0101_0101_0101_0101;
const LOW_SEVEN: u64 = 0x7f7f_7f7f_7f7f_7f7f;

/// The high bit of each byte of `v` that is zero, and no other bit.
#[inline(always)]
fn zero_bytes(v: u64) -> u64 {
    !(((v & LOW_SEVEN).wrapping_add(LOW_SEVEN)) | v | LOW_SEVEN)
}

/// The slot of a pair in the shift table, ASCII case folded.
#[inline(always)]
fn pair_slot(b0: u8, b1: u8) -> usize {
    let (a, b) = (
        usize::from(b0.to_ascii_lowercase()),
        usize::from(b1.to_ascii_lowercase()),
    );
    ((a << 5) ^ b ^ (a >> 3)) & (SHIFT_SLOTS - 1)
}

/// Marks the raw byte pairs that lowercase to `b0 b1`: every case
/// variant, so the scan needs no lowercasing to test a position.
/// Whether the raw pair `b0 b1` is marked in a pair table.
#[inline(always)]
fn pair_marked(pairs: &[u64; 1024], b0: u8, b1: u8) -> bool {
    let k = usize::from(u16::from_le_bytes([b0, b1]));
    pairs[k >> 6] >> (k & 63) & 1 != 0
}

fn mark(pairs: &mut [u64; 1024], b0: u8, b1: u8) {
    for x in [b0, b0.to_ascii_uppercase()] {
        for y in [b1, b1.to_ascii_uppercase()] {
            let k = usize::from(u16::from_le_bytes([x, y]));
            pairs[k >> 6] |= 1 << (k & 63);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(needles: &[(usize, &str)], lines: &[&str]) -> Vec<usize> {
        let ua = Needles::build(needles);
        let mut bits = RuleBits::default();
        for l in lines {
            ua.scan(l.as_bytes(), &mut bits);
        }
        (0..256).filter(|&i| bits.get(i)).collect()
    }

    #[test]
    fn substrings_are_found_anywhere_ignoring_case() {
        let n = [(0, "sqlmap"), (1, "GPTBot"), (2, "nikto")];
        assert_eq!(found(&n, &["sqlmap/1.7"]), vec![0]);
        assert_eq!(
            found(&n, &["Mozilla/5.0 (compatible; gptbot/1.0)"]),
            vec![1]
        );
        assert_eq!(found(&n, &["xx SQLMAP xx Nikto"]), vec![0, 2]);
        assert_eq!(found(&n, &["Mozilla/5.0 Chrome/120"]), Vec::<usize>::new());
        assert_eq!(
            found(&n, &["sqlma", "p"]),
            Vec::<usize>::new(),
            "no match across lines"
        );
    }

    #[test]
    fn overlapping_and_nested_substrings_all_count() {
        let n = [(0, "abcd"), (1, "bc"), (2, "c"), (3, "abce"), (4, "d")];
        assert_eq!(found(&n, &["xabcd"]), vec![0, 1, 2, 4]);
        assert_eq!(found(&n, &["abce"]), vec![1, 2, 3]);
        assert_eq!(found(&n, &["aabcabce"]), vec![1, 2, 3]);
        // A failure link into a longer partial match.
        let n = [(0, "aab"), (1, "ab")];
        assert_eq!(found(&n, &["aaab"]), vec![0, 1]);
        let n = [(0, "she"), (1, "he"), (2, "hers")];
        assert_eq!(found(&n, &["ushers"]), vec![0, 1, 2]);
    }

    #[test]
    fn one_byte_substrings_and_line_ends() {
        let n = [(5, "z"), (6, "yz")];
        assert_eq!(found(&n, &["z"]), vec![5]);
        assert_eq!(found(&n, &["aaz"]), vec![5]);
        assert_eq!(found(&n, &["Yz"]), vec![5, 6]);
        assert_eq!(found(&n, &["y"]), Vec::<usize>::new());
        assert_eq!(found(&n, &[""]), Vec::<usize>::new());
    }

    #[test]
    fn rule_index_beyond_the_first_word() {
        let n = [(199, "bot"), (64, "spider")];
        assert_eq!(found(&n, &["a spider bot"]), vec![64, 199]);
    }

    #[test]
    fn skipping_never_loses_a_match() {
        // No one-byte substring: most positions are skipped.
        let needles = [(0, "xyz"), (1, "yzq"), (2, "zz"), (3, "qxq")];
        agrees_on_random_lines(&needles, b"xyzqXYZQab", 16, 2_000, 0x1234_5678_9ABC_DEF1);
    }

    #[test]
    fn look_ahead_skip_agrees_with_naive_search() {
        // Every substring is three bytes or more: the window skip runs.
        let sets: [&[(usize, &str)]; 3] = [
            &[(0, "abc"), (1, "bcab"), (2, "cccc"), (3, "aXb")],
            &[(0, "gptbot"), (1, "ccbot"), (2, "bot"), (3, "abca")],
            &[(0, "aaaaaaaaaa"), (1, "abababab"), (2, "babbab")],
        ];
        for needles in sets {
            assert!(Needles::build(needles).window >= MIN_SHIFT_LEN);
            agrees_on_random_lines(
                needles,
                b"abcABCxgptboGPTBO",
                40,
                3_000,
                0x2545_F491_4F6C_DD1D,
            );
        }
    }

    #[test]
    fn first_byte_skip_agrees_with_naive_search() {
        // At most three raw first bytes: the word-wise skip runs, also with
        // one-byte substrings, nested ones and matches across words.
        let sets: [&[(usize, &str)]; 4] = [
            &[(0, "/.env."), (1, "/.git/"), (2, "/backup"), (3, "/dump")],
            &[(0, "/aa/"), (1, "/a/a"), (2, "//"), (3, "/"), (4, "/b.a")],
            &[(0, "ab"), (1, "a"), (2, "aab"), (3, "abab")],
            &[(0, "/admin/"), (1, "/wp-includes/"), (2, ".env")],
        ];
        for needles in sets {
            assert!(Needles::build(needles).first_len > 0, "{needles:?}");
            agrees_on_random_lines(
                needles,
                b"/.abAenvgitBckupdm",
                40,
                4_000,
                0x5DEE_CE66_D1CE_4E5B,
            );
        }
        let n = [(0, "/admin/"), (1, "/wp-includes/")];
        assert_eq!(found(&n, &["/x/ADMIN/y"]), vec![0]);
        assert_eq!(found(&n, &["/x/admin"]), Vec::<usize>::new());
        assert_eq!(found(&n, &["/a/b/c/d/e/f/g/h/wp-includes/x.js"]), vec![1]);
    }

    #[test]
    fn fold_case_lowers_every_byte_alone() {
        for b in 0..=255u8 {
            for pos in 0..8 {
                let w = u64::from(b) << (8 * pos) | 0x5a41_7a61_ff80_405b & !(0xff << (8 * pos));
                let want = u64::from_le_bytes(w.to_le_bytes().map(|x| x.to_ascii_lowercase()));
                assert_eq!(fold_case(w), want, "byte {b:#x} at {pos}");
            }
        }
    }

    #[test]
    fn word_at_pads_with_zeros_past_the_end() {
        let s: Vec<u8> = (1..=20).collect();
        for n in 0..=s.len() {
            for at in 0..n + 9 {
                let mut w = [0u8; 8];
                for (i, d) in w.iter_mut().enumerate() {
                    *d = s[..n].get(at + i).copied().unwrap_or(0);
                }
                assert_eq!(word_at(&s[..n], at), u64::from_le_bytes(w), "n {n} at {at}");
            }
        }
    }

    #[test]
    fn same_bytes_agrees_with_slice_equality() {
        let base: Vec<u8> = (0..64u8).map(|i| i.wrapping_mul(37) ^ 0x5a).collect();
        for n in 0..=64 {
            let a = &base[..n];
            let copy = base[..n].to_owned();
            assert!(same_bytes(a, &copy), "length {n}");
            for at in 0..n {
                for bit in [1u8, 0x20, 0x80] {
                    let mut b = a.to_vec();
                    b[at] ^= bit;
                    assert!(!same_bytes(a, &b), "length {n}, byte {at}");
                }
            }
        }
    }

    #[test]
    fn agrees_with_naive_search() {
        let needles = [
            (0, "ab"),
            (1, "ba"),
            (2, "aab"),
            (3, "bab"),
            (4, "a"),
            (5, "bbbb"),
            (6, "abab"),
        ];
        agrees_on_random_lines(&needles, b"abABc", 12, 2_000, 0x9E37_79B9_7F4A_7C15);
    }

    /// `rounds` random lines of fewer than `max_len` bytes from `alphabet`:
    /// the scan finds exactly the needles a naive case-folded search finds.
    fn agrees_on_random_lines(
        needles: &[(usize, &str)],
        alphabet: &[u8],
        max_len: u64,
        rounds: usize,
        seed: u64,
    ) {
        let mut x = seed;
        for _ in 0..rounds {
            let mut line = Vec::new();
            for _ in 0..(x % max_len) {
                crate::testing::xorshift64(&mut x);
                line.push(alphabet[(x % alphabet.len() as u64) as usize]);
            }
            x = x.wrapping_add(1);
            let line = String::from_utf8(line).unwrap();
            let lower = line.to_ascii_lowercase();
            let want: Vec<usize> = needles
                .iter()
                .filter(|(_, n)| lower.contains(&n.to_ascii_lowercase()))
                .map(|(i, _)| *i)
                .collect();
            assert_eq!(found(needles, &[&line]), want, "{line:?}");
        }
    }
}
