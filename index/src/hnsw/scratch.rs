//! Per-thread search scratch: a visited set cleared in O(1) and reusable heaps, so a query
//! allocates nothing once its thread has warmed up (hnswlib's `VisitedListPool`).

use std::cell::RefCell;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

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

/// Everything one graph search needs besides the graph.
pub(crate) struct Scratch {
    pub(crate) visited: Visited,
    /// Frontier, closest first.
    pub(crate) candidates: BinaryHeap<Reverse<Neighbor>>,
    /// Best `ef` accepted so far, worst on top.
    pub(crate) results: BinaryHeap<Neighbor>,
    /// Unvisited neighbours of the node being expanded, scored after their prefetch.
    pub(crate) pending: Vec<u32>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = const {
        RefCell::new(Scratch {
            visited: Visited { marks: Vec::new(), epoch: 0 },
            candidates: BinaryHeap::new(),
            results: BinaryHeap::new(),
            pending: Vec::new(),
        })
    };
}

/// Runs `f` with this thread's scratch, cleared and sized for `len` slots.
pub(crate) fn with_scratch<R>(len: usize, f: impl FnOnce(&mut Scratch) -> R) -> R {
    SCRATCH.with(|cell| {
        // A search never calls back into another search on the same thread, so the borrow
        // cannot be taken twice; fall back to a fresh scratch rather than panic if it were.
        match cell.try_borrow_mut() {
            Ok(mut scratch) => {
                scratch.visited.reset(len);
                scratch.candidates.clear();
                scratch.results.clear();
                f(&mut scratch)
            }
            Err(_) => {
                let mut fresh = Scratch {
                    visited: Visited {
                        marks: Vec::new(),
                        epoch: 0,
                    },
                    candidates: BinaryHeap::new(),
                    results: BinaryHeap::new(),
                    pending: Vec::new(),
                };
                fresh.visited.reset(len);
                f(&mut fresh)
            }
        }
    })
}
