//! Table storage that is resident only where it is used.
//!
//! A table's entries are kept as two machine words each (`[u64; 2]`), so
//! its allocation is a zeroed one: the allocator takes fresh pages from
//! the kernel without writing them, and a page becomes resident only when
//! an entry in it is first written. A table sized for a million keys costs
//! the memory of the keys it holds, not of its capacity; reads of entries
//! never written (a probe, the sweeper) map no memory either. The all-zero
//! words are every table's empty entry.
//!
//! No allocation after [`Words::zeroed`]; `get` and `set` are a copy each.

use std::marker::PhantomData;

/// An entry that packs into two words, the empty entry into zeros.
pub(crate) trait TwoWords: Copy {
    fn pack(self) -> [u64; 2];
    fn unpack(words: [u64; 2]) -> Self;
}

/// A fixed array of `E`, stored as words.
#[derive(Debug)]
pub(crate) struct Words<E> {
    raw: Box<[[u64; 2]]>,
    entry: PhantomData<E>,
}

impl<E: TwoWords> Words<E> {
    /// `n` empty entries, from zeroed pages (none resident yet).
    pub(crate) fn zeroed(n: usize) -> Words<E> {
        Words {
            raw: vec![[0u64; 2]; n].into_boxed_slice(),
            entry: PhantomData,
        }
    }

    #[inline]
    pub(crate) fn get(&self, idx: usize) -> E {
        E::unpack(self.raw[idx])
    }

    #[inline]
    pub(crate) fn set(&mut self, idx: usize, e: E) {
        self.raw[idx] = e.pack();
    }

    /// Every entry empty again (writes them all: rare).
    pub(crate) fn clear(&mut self) {
        self.raw.fill([0; 2]);
    }

    pub(crate) fn len(&self) -> usize {
        self.raw.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Copy, Debug, PartialEq)]
    struct E(u64, u32, u32);

    impl TwoWords for E {
        fn pack(self) -> [u64; 2] {
            [self.0, u64::from(self.1) | u64::from(self.2) << 32]
        }
        fn unpack(w: [u64; 2]) -> E {
            E(w[0], w[1] as u32, (w[1] >> 32) as u32)
        }
    }

    #[test]
    fn entries_start_empty_and_keep_what_is_set() {
        let mut t: Words<E> = Words::zeroed(1 << 10);
        assert_eq!(t.get(1_023), E(0, 0, 0));
        t.set(7, E(u64::MAX, u32::MAX, 3));
        assert_eq!(t.get(7), E(u64::MAX, u32::MAX, 3));
        t.clear();
        assert_eq!(t.get(7), E(0, 0, 0));
        assert_eq!(t.len(), 1 << 10);
    }
}
