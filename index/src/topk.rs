//! Ordered (key, slot) pairs and the heaps graph search keeps them in.

use std::cmp::Ordering;

/// One search hit: a slot and its "lower is closer" key (see [`crate::distance`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Neighbor {
    /// The slot that matched.
    pub slot: crate::Slot,
    /// Lower is closer: squared L2, or the negated inner product.
    pub key: f32,
}

impl Neighbor {
    /// A new hit.
    pub fn new(slot: crate::Slot, key: f32) -> Self {
        Self { slot, key }
    }
}

impl Eq for Neighbor {}

impl Ord for Neighbor {
    /// Total order by key, then slot, so sorting is deterministic even with ties and NaN.
    fn cmp(&self, other: &Self) -> Ordering {
        self.key
            .total_cmp(&other.key)
            .then(self.slot.cmp(&other.slot))
    }
}

impl PartialOrd for Neighbor {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Keeps the `k` smallest neighbours seen; `O(log k)` per offer.
pub(crate) struct TopK {
    k: usize,
    heap: std::collections::BinaryHeap<Neighbor>,
}

impl TopK {
    pub(crate) fn new(k: usize) -> Self {
        Self {
            k,
            heap: std::collections::BinaryHeap::with_capacity(k + 1),
        }
    }

    /// [`TopK::offer`] for a scan's hot loop: a key that cannot enter is turned away with
    /// one compare against the current `k`-th, before any `Neighbor` is built.
    #[inline]
    pub(crate) fn offer_key(&mut self, slot: crate::Slot, key: f32) {
        let admits = self.heap.len() < self.k || self.heap.peek().is_some_and(|w| key <= w.key);
        if admits {
            self.offer(Neighbor::new(slot, key));
        }
    }

    #[inline]
    pub(crate) fn offer(&mut self, n: Neighbor) {
        if self.k == 0 {
            return;
        }
        if self.heap.len() < self.k {
            self.heap.push(n);
        } else if self.heap.peek().is_some_and(|worst| n < *worst) {
            self.heap.pop();
            self.heap.push(n);
        }
    }

    /// Best first.
    pub(crate) fn into_sorted(self) -> Vec<Neighbor> {
        self.heap.into_sorted_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_k_smallest_best_first() {
        let mut top = TopK::new(3);
        for (slot, key) in [(0, 5.0), (1, 1.0), (2, 4.0), (3, 0.5), (4, 9.0), (5, 2.0)] {
            top.offer(Neighbor::new(slot, key));
        }
        let slots: Vec<u32> = top.into_sorted().iter().map(|n| n.slot).collect();
        assert_eq!(slots, vec![3, 1, 5]);
    }

    #[test]
    fn zero_k_keeps_nothing() {
        let mut top = TopK::new(0);
        top.offer(Neighbor::new(1, 1.0));
        assert!(top.into_sorted().is_empty());
    }
}
