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
        if self.admits(key) {
            self.offer(Neighbor::new(slot, key));
        }
    }

    /// Whether a key could enter now: fewer than `k` held, or not above the `k`-th. A scan
    /// asks before it pays for anything else about the slot (a filter's verdict).
    #[inline]
    pub(crate) fn admits(&self, key: f32) -> bool {
        let bar = self.bar();
        key <= bar || Self::fills_with_nan(key, bar)
    }

    /// A NaN key compares false with everything, yet a heap still filling takes it (`offer`
    /// orders it after every number, so the first number offered to a full heap displaces it).
    #[inline]
    fn fills_with_nan(key: f32, bar: f32) -> bool {
        key.is_nan() && bar == f32::INFINITY
    }

    /// The largest key that may still enter: +∞ until `k` are held (−∞ for `k` = 0).
    #[inline]
    fn bar(&self) -> f32 {
        if self.k == 0 {
            return f32::NEG_INFINITY;
        }
        match self.heap.peek() {
            // A NaN worst (which orders after every number) is displaced by any number.
            Some(worst) if self.heap.len() >= self.k && !worst.key.is_nan() => worst.key,
            Some(_) | None => f32::INFINITY,
        }
    }

    /// Offers the keys of the consecutive slots from `first`, each entering if `accept`
    /// takes it; `accept` is asked only about keys that could enter. The bar is kept in a
    /// register between entries, so a scan's hot loop is a load, a compare and a branch
    /// that is almost never taken.
    #[inline]
    pub(crate) fn offer_run(
        &mut self,
        first: crate::Slot,
        keys: &[f32],
        mut accept: impl FnMut(crate::Slot) -> bool,
    ) {
        let mut bar = self.bar();
        for (j, &key) in keys.iter().enumerate() {
            if key <= bar || Self::fills_with_nan(key, bar) {
                let slot = first + j as crate::Slot;
                if accept(slot) {
                    self.offer(Neighbor::new(slot, key));
                    bar = self.bar();
                }
            }
        }
    }

    #[inline]
    pub(crate) fn offer(&mut self, n: Neighbor) {
        if self.k == 0 {
            return;
        }
        if self.heap.len() < self.k {
            self.heap.push(n);
        } else if let Some(mut worst) = self.heap.peek_mut() {
            // Replaced in place: one sift down when the guard drops, where a pop and a push
            // sifted twice.
            if n < *worst {
                *worst = n;
            }
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
    fn a_run_keeps_what_one_by_one_offers_keep() {
        let keys: Vec<f32> = (0..200).map(|i| ((i * 37 % 101) as f32).sin()).collect();
        for k in [0, 1, 5, 300] {
            let mut one_by_one = TopK::new(k);
            let mut run = TopK::new(k);
            for (slot, &key) in keys.iter().enumerate() {
                if slot % 3 != 0 {
                    one_by_one.offer_key(slot as u32 + 10, key);
                }
            }
            run.offer_run(10, &keys, |slot| (slot - 10) % 3 != 0);
            assert_eq!(run.into_sorted(), one_by_one.into_sorted(), "k {k}");
        }
    }

    /// NaN keys enter a filling heap and leave it for any number, as `offer` has them do.
    #[test]
    fn nan_keys_fill_but_never_displace() {
        for k in [1, 3] {
            let keys = [f32::NAN, 2.0, f32::NAN, 1.0];
            let mut one_by_one = TopK::new(k);
            for (slot, &key) in keys.iter().enumerate() {
                one_by_one.offer(Neighbor::new(slot as u32, key));
            }
            let mut run = TopK::new(k);
            run.offer_run(0, &keys, |_| true);
            let (a, b) = (one_by_one.into_sorted(), run.into_sorted());
            assert_eq!(a.len(), b.len());
            for (x, y) in a.iter().zip(&b) {
                assert_eq!(
                    (x.slot, x.key.to_bits()),
                    (y.slot, y.key.to_bits()),
                    "k {k}"
                );
            }
        }
    }

    #[test]
    fn zero_k_keeps_nothing() {
        let mut top = TopK::new(0);
        top.offer(Neighbor::new(1, 1.0));
        assert!(top.into_sorted().is_empty());
    }
}
