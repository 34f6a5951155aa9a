//! Ordered (key, slot) pairs, the heaps graph search keeps them in, and the reservoir a long
//! scan keeps its best in.

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

/// A [`Neighbor`] packed into one integer that orders exactly as the pair does (`total_cmp`
/// on the key, then the slot): the key's bits mapped to an unsigned integer of the same order
/// above the slot.
///
/// Why. The link-code search queues thousands of links per query and pops a few hundred, and
/// with the pair's comparison (two float-to-integer maps and a tie test) its heap steps were
/// about a sixth of the search's instructions; packed, each step compares two integers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Packed(u64);

impl Packed {
    pub(crate) fn new(n: Neighbor) -> Self {
        Self::from_ordered(ordered_bits(n.key), n.slot)
    }

    /// The neighbour whose key's [`ordered_bits`] are `ordered` (a kernel that maps many keys
    /// at once hands them over this way).
    pub(crate) fn from_ordered(ordered: u32, slot: crate::Slot) -> Self {
        Self((u64::from(ordered) << 32) | u64::from(slot))
    }

    pub(crate) fn slot(self) -> crate::Slot {
        self.0 as u32
    }

    pub(crate) fn key(self) -> f32 {
        let ordered = (self.0 >> 32) as u32;
        let bits = if ordered & 0x8000_0000 != 0 {
            ordered ^ 0x8000_0000
        } else {
            !ordered
        };
        f32::from_bits(bits)
    }

    pub(crate) fn neighbor(self) -> Neighbor {
        Neighbor::new(self.slot(), self.key())
    }
}

/// A float's bits mapped to an unsigned integer of the same order as `f32::total_cmp`:
/// positive keys rise with their bits, so setting the sign bit puts them above the negatives,
/// whose bits fall as they rise, so all of those are flipped. [`Packed`]'s keys; the link-code
/// kernel (`distance/codes.rs`, `LinkEstimates`) maps its estimates the same way.
pub(crate) fn ordered_bits(key: f32) -> u32 {
    let bits = key.to_bits();
    bits ^ (((bits as i32 >> 31) as u32) | 0x8000_0000)
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

/// Keys [`Reservoir::offer_run`] tests at once: one 256-bit register of floats.
const OFFER_GROUP: usize = 8;

/// Whether any key of a group is at most `bar` (a NaN key is not): written as a mask so that
/// it compiles to vector compares, not a branch per key.
#[inline]
fn any_at_most(group: &[f32], bar: f32) -> bool {
    group
        .iter()
        .fold(0u32, |mask, &key| mask | u32::from(key <= bar))
        != 0
}

/// Keeps the `k` smallest of a long run of keys, as [`TopK`] does, for scans that offer many
/// keys in a row (FAISS's `ReservoirTopN`).
///
/// Why not a heap. A scan in norm order admits a key every dozen rows or so (the bar falls
/// slowly, as the norms do), and a heap pays each admission a sift of `log k` total-order
/// compares: on a norm-ordered scan of 1,400 rows that cost four times the byte kernel's sums.
/// Here an admitted key is appended to a buffer of `2k`; a full buffer is cut to its `k`
/// smallest by one linear-time selection, and the `k`-th becomes the bar. The bar is higher
/// than a heap's between cuts, so a few more keys are appended, each for the price of a
/// store. Entries are held as one integer each ([`Packed`]) whose order is [`Neighbor`]'s, so
/// the selection compares integers. Keys are tested a group of [`OFFER_GROUP`] at a time
/// against the bar first: most groups hold none that reaches it.
///
/// The same `k` come out as from a [`TopK`] offered the same keys when none is NaN (ties
/// ordered by slot). A NaN key enters only while the bar is +∞, as it does a [`TopK`].
pub(crate) struct Reservoir {
    k: usize,
    items: Vec<Packed>,
    /// The largest key that may enter: +∞ until `k` numbers have been kept by a cut.
    bar: f32,
}

impl Reservoir {
    pub(crate) fn new(k: usize) -> Self {
        Self {
            k,
            items: Vec::with_capacity(2 * k),
            bar: if k == 0 {
                f32::NEG_INFINITY
            } else {
                f32::INFINITY
            },
        }
    }

    /// Offers the keys of the consecutive slots from `first`, each entering if `accept`
    /// takes it; `accept` is asked only about keys that could enter.
    #[inline]
    pub(crate) fn offer_run(
        &mut self,
        first: crate::Slot,
        keys: &[f32],
        mut accept: impl FnMut(crate::Slot) -> bool,
    ) {
        let mut groups = keys.chunks_exact(OFFER_GROUP);
        let mut start = first;
        for group in groups.by_ref() {
            // A bar of +∞ lets NaN keys in too: those are tested key by key.
            if self.bar == f32::INFINITY || any_at_most(group, self.bar) {
                self.offer_keys(start, group, &mut accept);
            }
            start += OFFER_GROUP as crate::Slot;
        }
        self.offer_keys(start, groups.remainder(), &mut accept);
    }

    #[inline]
    fn offer_keys(
        &mut self,
        first: crate::Slot,
        keys: &[f32],
        accept: &mut impl FnMut(crate::Slot) -> bool,
    ) {
        for (j, &key) in keys.iter().enumerate() {
            let open = self.bar == f32::INFINITY;
            if key <= self.bar || (key.is_nan() && open) {
                let slot = first + j as crate::Slot;
                if accept(slot) {
                    self.items.push(Packed::new(Neighbor::new(slot, key)));
                    if self.items.len() >= 2 * self.k {
                        self.cut();
                    }
                }
            }
        }
    }

    /// Keeps the `k` smallest; their largest key becomes the bar (unless it is NaN: then
    /// fewer than `k` numbers are held, and any number may still enter).
    #[cold]
    fn cut(&mut self) {
        if self.k == 0 {
            self.items.clear();
            return;
        }
        self.items.select_nth_unstable(self.k - 1);
        self.items.truncate(self.k);
        let kth = self.items[self.k - 1].key();
        self.bar = if kth.is_nan() { f32::INFINITY } else { kth };
    }

    /// Best first.
    pub(crate) fn into_sorted(mut self) -> Vec<Neighbor> {
        self.items.sort_unstable();
        self.items.truncate(self.k);
        self.items.into_iter().map(Packed::neighbor).collect()
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

    /// A reservoir keeps what a heap offered the same keys keeps, bit for bit: infinite
    /// keys and ties anywhere in a group, a filter, runs of every length split at every
    /// offset, `k` from nothing to more than the keys.
    #[test]
    fn a_reservoir_keeps_what_a_heap_keeps() {
        let keys: Vec<f32> = (0..203)
            .map(|i| match i % 13 {
                0 => f32::INFINITY,
                5 => f32::NEG_INFINITY,
                9 => 0.25,
                _ => ((i * 29 % 101) as f32).cos(),
            })
            .collect();
        let accept = |slot: u32| slot % 7 != 3;
        for k in [0, 1, 2, 4, 9, 70, 300] {
            for split in [0, 1, 7, 8, 9, 30, 203] {
                let mut heap = TopK::new(k);
                for (slot, &key) in keys.iter().enumerate() {
                    if accept(slot as u32 + 10) {
                        heap.offer(Neighbor::new(slot as u32 + 10, key));
                    }
                }
                let mut reservoir = Reservoir::new(k);
                let (a, b) = keys.split_at(split);
                reservoir.offer_run(10, a, accept);
                reservoir.offer_run(10 + split as u32, b, accept);
                let (kept, want) = (reservoir.into_sorted(), heap.into_sorted());
                let bits = |top: &[Neighbor]| -> Vec<(u32, u32)> {
                    top.iter().map(|n| (n.slot, n.key.to_bits())).collect()
                };
                assert_eq!(bits(&kept), bits(&want), "k {k}, split {split}");
            }
        }
    }

    /// NaN keys fill a reservoir but never displace a number once `k` numbers are kept.
    #[test]
    fn nan_keys_fill_but_never_displace() {
        let keys = [f32::NAN, 2.0, f32::NAN, 1.0, 3.0, 0.5, f32::NAN];
        for (k, want) in [(1, vec![5]), (2, vec![5, 3]), (5, vec![5, 3, 1, 4])] {
            let mut reservoir = Reservoir::new(k);
            reservoir.offer_run(0, &keys, |_| true);
            let kept = reservoir.into_sorted();
            let numbers: Vec<u32> = kept
                .iter()
                .filter(|n| !n.key.is_nan())
                .map(|n| n.slot)
                .collect();
            assert_eq!(numbers, want, "k {k}");
            assert_eq!(kept.len(), k.min(keys.len()), "k {k}");
        }
    }

    #[test]
    fn zero_k_keeps_nothing() {
        let mut top = TopK::new(0);
        top.offer(Neighbor::new(1, 1.0));
        assert!(top.into_sorted().is_empty());
    }

    /// Packed neighbours order as neighbours do and unpack to the same bits: keys of every
    /// kind, each under scattered slots and under two fixed ones (ties broken by the slot).
    #[test]
    fn packed_neighbors_order_and_read_back_as_the_pairs_do() {
        let keys = [
            f32::NEG_INFINITY,
            -3.5,
            -1e-30,
            -0.0,
            0.0,
            f32::MIN_POSITIVE,
            1e-30,
            1.0,
            2.0,
            2.0,
            f32::MAX,
            f32::INFINITY,
            f32::NAN,
            -f32::NAN,
        ];
        let pairs: Vec<Neighbor> = keys
            .iter()
            .enumerate()
            .map(|(i, &k)| Neighbor::new((i * 7919 % 13) as u32, k))
            .chain(
                keys.iter()
                    .flat_map(|&key| [Neighbor::new(7, key), Neighbor::new(2, key)]),
            )
            .collect();
        for a in &pairs {
            let back = Packed::new(*a).neighbor();
            assert_eq!((back.slot, back.key.to_bits()), (a.slot, a.key.to_bits()));
            for b in &pairs {
                assert_eq!(
                    Packed::new(*a).cmp(&Packed::new(*b)),
                    a.cmp(b),
                    "{a:?} {b:?}"
                );
            }
        }
    }
}
