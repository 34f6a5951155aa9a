//! Per-thread search scratch: a visited set cleared in O(1) and reusable heaps, so a query
//! allocates nothing once its thread has warmed up (hnswlib's `VisitedListPool`).

use std::cell::RefCell;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::topk::Packed;
use crate::Neighbor;

/// Visited marks stamped with an epoch: bumping the epoch clears the set.
pub(crate) struct Visited {
    marks: Vec<u16>,
    epoch: u16,
}

impl Visited {
    fn reset(&mut self, len: usize) {
        if self.marks.len() < len {
            self.marks.resize(len.next_power_of_two(), 0);
        }
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            self.marks.iter_mut().for_each(|m| *m = 0);
            self.epoch = 1;
        }
    }

    /// Marks `slot`; true if it was not marked yet.
    #[inline]
    pub(crate) fn insert(&mut self, slot: u32) -> bool {
        let mark = &mut self.marks[slot as usize];
        if *mark == self.epoch {
            false
        } else {
            *mark = self.epoch;
            true
        }
    }
}

/// Visited slots, one bit each, cleared by zeroing only the words a search set: the link-code
/// search's set (`link_codes.rs`).
///
/// Why bits there: that search tests the mark of every link whose estimate passes, at random
/// slots, while 1.5 KB link blocks stream through the core's cache. At 1M slots the epoch
/// marks above take 2 MiB, as much as a core's L2 on the machine profiled, and their loads
/// took a quarter of the search's samples there; a bitset is 128 KiB and stays cached (1.08×
/// the QPS at 1M against the marks, BENCHMARKS.md). The plain search keeps the epoch marks:
/// there each test comes before a full-row fetch that costs far more, and the bitset measured
/// 0.94–0.97× its QPS.
pub(crate) struct VisitedBits {
    words: Vec<u64>,
    /// Indexes of the words set since the last reset.
    touched: Vec<u32>,
}

impl VisitedBits {
    const fn new() -> Self {
        Self {
            words: Vec::new(),
            touched: Vec::new(),
        }
    }

    fn reset(&mut self, len: usize) {
        // Past an eighth of the words, one pass over all of them is the cheaper clear.
        if self.touched.len() > self.words.len() / 8 {
            self.words.fill(0);
        } else {
            for &word in &self.touched {
                self.words[word as usize] = 0;
            }
        }
        self.touched.clear();
        let needed = len.div_ceil(64);
        if self.words.len() < needed {
            self.words.resize(needed.next_power_of_two(), 0);
        }
    }

    /// Whether `slot` is marked.
    #[inline]
    pub(crate) fn contains(&self, slot: u32) -> bool {
        self.words[(slot >> 6) as usize] & (1u64 << (slot & 63)) != 0
    }

    /// Marks `slot`; true if it was not marked yet.
    #[inline]
    pub(crate) fn insert(&mut self, slot: u32) -> bool {
        let (index, bit) = ((slot >> 6) as usize, 1u64 << (slot & 63));
        let word = &mut self.words[index];
        if *word & bit != 0 {
            return false;
        }
        if *word == 0 {
            self.touched.push(index as u32);
        }
        *word |= bit;
        true
    }
}

/// Everything one graph search needs besides the graph.
pub(crate) struct Scratch {
    pub(crate) visited: Visited,
    /// The link-code search's visited set (see [`VisitedBits`]).
    pub(crate) visited_bits: VisitedBits,
    /// Frontier, closest first.
    pub(crate) candidates: BinaryHeap<Reverse<Neighbor>>,
    /// The link-code search's frontier, closest first (see [`Packed`]).
    pub(crate) frontier: BinaryHeap<Reverse<Packed>>,
    /// Best `ef` accepted so far, worst on top.
    pub(crate) results: BinaryHeap<Neighbor>,
    /// The link-code search's results, worst on top (see [`Packed`]).
    pub(crate) best: BinaryHeap<Packed>,
    /// Unvisited neighbours of the node being expanded, scored after their prefetch.
    pub(crate) pending: Vec<u32>,
}

impl Scratch {
    /// Empty: sized by the first search that uses it.
    const fn new() -> Self {
        Scratch {
            visited: Visited {
                marks: Vec::new(),
                epoch: 0,
            },
            visited_bits: VisitedBits::new(),
            candidates: BinaryHeap::new(),
            frontier: BinaryHeap::new(),
            results: BinaryHeap::new(),
            best: BinaryHeap::new(),
            pending: Vec::new(),
        }
    }
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = const { RefCell::new(Scratch::new()) };
}

/// Runs `f` with this thread's scratch, cleared and sized for `len` slots.
pub(crate) fn with_scratch<R>(len: usize, f: impl FnOnce(&mut Scratch) -> R) -> R {
    SCRATCH.with(|cell| {
        // A search never calls back into another search on the same thread, so the borrow
        // cannot be taken twice; fall back to a fresh scratch rather than panic if it were.
        match cell.try_borrow_mut() {
            Ok(mut scratch) => {
                scratch.visited.reset(len);
                scratch.visited_bits.reset(len);
                scratch.candidates.clear();
                scratch.frontier.clear();
                scratch.results.clear();
                scratch.best.clear();
                f(&mut scratch)
            }
            Err(_) => {
                let mut fresh = Scratch::new();
                fresh.visited.reset(len);
                fresh.visited_bits.reset(len);
                f(&mut fresh)
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::VisitedBits;

    #[test]
    fn visited_bits_forget_everything_at_a_reset_by_either_clear() {
        let mut bits = VisitedBits::new();
        bits.reset(100_000);
        // Few words touched: the reset zeroes those alone.
        for slot in [0u32, 63, 64, 99_999] {
            assert!(bits.insert(slot), "{slot} was new");
            assert!(!bits.insert(slot), "{slot} is marked");
        }
        bits.reset(100_000);
        assert!(
            [0u32, 63, 64, 99_999].iter().all(|&slot| bits.insert(slot)),
            "every slot new again"
        );
        // Every word touched: the reset zeroes them all in one pass.
        bits.reset(5000);
        assert!(
            (0..5000).all(|slot| bits.insert(slot)),
            "every slot new again"
        );
        assert!(
            (0..5000).all(|slot| !bits.insert(slot)),
            "every slot marked"
        );
        bits.reset(5000);
        assert!(
            (0..5000).all(|slot| bits.insert(slot)),
            "every slot new after the full clear"
        );
    }
}
