//! The one deterministic generator of the project's tests, benchmarks and
//! generated corpora: xorshift64 (13, 7, 17). Seeded by the caller, so a
//! failing case replays; never for keys or anything a client could predict
//! to its advantage. O(1), no allocation. `lanes`: the lanes run beside
//! the chain, request by request, for the tests and the fuzz target that
//! compare them.

pub mod lanes;

/// Advances `state` one xorshift64 step and returns the new state. A zero
/// state stays zero: seed with a non-zero value.
#[inline]
pub fn xorshift64(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// A seeded [`xorshift64`] stream with the two draws tests use.
pub struct TestRng(pub u64);

impl TestRng {
    /// The next value of the stream (an endless stream, so a plain value
    /// rather than an iterator's `Option`).
    #[inline]
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        xorshift64(&mut self.0)
    }

    /// A value below `n` (`n` > 0; slightly biased, which tests don't mind).
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sequence_is_the_reference_xorshift64() {
        let mut s = 1u64;
        assert_eq!(xorshift64(&mut s), 0x4082_2041);
        assert_eq!(xorshift64(&mut s), 0x100041060c011441);
        assert_eq!(s, 0x100041060c011441, "the state is the value");
        let mut z = 0;
        assert_eq!(xorshift64(&mut z), 0);
    }
}
