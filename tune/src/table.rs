//! A fixed-capacity table of keys, least recently seen first out.
//!
//! Entries live in a slab with a doubly linked list through it, most
//! recently seen at the head. When the table is full, inserting a new key
//! first removes the least recently seen entry and hands it back, so the
//! caller can close its open slots into the histograms before it is lost.
//! Every operation is O(1) on average; memory is bounded by the capacity.

use std::collections::HashMap;
use std::hash::Hash;

const NONE: u32 = u32::MAX;

#[derive(Debug)]
struct Node<K, V> {
    key: K,
    val: V,
    prev: u32,
    next: u32,
}

/// At most `capacity` entries (at least 1).
#[derive(Debug)]
pub struct Lru<K, V> {
    index: HashMap<K, u32>,
    nodes: Vec<Node<K, V>>,
    head: u32,
    tail: u32,
    capacity: usize,
    evictions: u64,
}

impl<K: Hash + Eq + Clone, V: Default> Lru<K, V> {
    /// An empty table; `capacity` is clamped to 1..=u32::MAX - 1.
    pub fn new(capacity: usize) -> Self {
        Lru {
            index: HashMap::new(),
            nodes: Vec::new(),
            head: NONE,
            tail: NONE,
            capacity: capacity.clamp(1, (NONE - 1) as usize),
            evictions: 0,
        }
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the table holds nothing.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Entries removed to make room.
    pub fn evictions(&self) -> u64 {
        self.evictions
    }

    fn unlink(&mut self, i: u32) {
        let (prev, next) = (self.nodes[i as usize].prev, self.nodes[i as usize].next);
        match prev {
            NONE => self.head = next,
            p => self.nodes[p as usize].next = next,
        }
        match next {
            NONE => self.tail = prev,
            n => self.nodes[n as usize].prev = prev,
        }
    }

    fn push_front(&mut self, i: u32) {
        self.nodes[i as usize].prev = NONE;
        self.nodes[i as usize].next = self.head;
        if self.head != NONE {
            self.nodes[self.head as usize].prev = i;
        }
        self.head = i;
        if self.tail == NONE {
            self.tail = i;
        }
    }

    /// The entry of `key`, made most recently seen; a new default one when
    /// absent. The second value is the entry evicted to make room, if any.
    pub fn touch(&mut self, key: &K) -> (&mut V, Option<(K, V)>) {
        if let Some(&i) = self.index.get(key) {
            self.unlink(i);
            self.push_front(i);
            return (&mut self.nodes[i as usize].val, None);
        }
        let mut evicted = None;
        let i = if self.nodes.len() >= self.capacity && self.tail != NONE {
            let i = self.tail;
            self.unlink(i);
            let node = &mut self.nodes[i as usize];
            let old_key = std::mem::replace(&mut node.key, key.clone());
            let old_val = std::mem::take(&mut node.val);
            self.index.remove(&old_key);
            self.evictions += 1;
            evicted = Some((old_key, old_val));
            i
        } else {
            self.nodes.push(Node {
                key: key.clone(),
                val: V::default(),
                prev: NONE,
                next: NONE,
            });
            (self.nodes.len() - 1) as u32
        };
        self.index.insert(key.clone(), i);
        self.push_front(i);
        (&mut self.nodes[i as usize].val, evicted)
    }

    /// Empties the table, handing back every entry.
    pub fn drain(&mut self) -> impl Iterator<Item = (K, V)> + '_ {
        self.index.clear();
        self.head = NONE;
        self.tail = NONE;
        self.nodes.drain(..).map(|n| (n.key, n.val))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_least_recently_seen_goes_first() {
        let mut t: Lru<u32, u32> = Lru::new(2);
        *t.touch(&1).0 = 10;
        *t.touch(&2).0 = 20;
        t.touch(&1);
        let (v, evicted) = t.touch(&3);
        assert_eq!(*v, 0);
        assert_eq!(evicted, Some((2, 20)));
        assert_eq!(t.len(), 2);
        assert_eq!(t.evictions(), 1);
        let (v, evicted) = t.touch(&1);
        assert_eq!((*v, evicted), (10, None));
        let mut all: Vec<_> = t.drain().collect();
        all.sort();
        assert_eq!(all, vec![(1, 10), (3, 0)]);
        assert_eq!(t.len(), 0);
    }
}
