//! The inverted indexes of a partition's sparse vectors, one per sparse vector name: for each
//! dimension, the slots whose vector holds it and their values. A sparse query walks the
//! lists of its own dimensions only and sums the products, so it scores exactly the points
//! sharing a dimension with it — the exact dot product, with no approximation to tune.
//!
//! Like the payload indexes, the lists only grow: a slot is never reused, so a dead slot is
//! skipped when a search meets it, and the vacuum, which rebuilds the table, drops it. The
//! document frequencies behind `idf` count live points only.

use std::collections::{BTreeMap, HashMap};

use cairn_api::SparseVector;
use cairn_index::Slot;

/// Every sparse vector name's index.
#[derive(Debug, Default)]
pub struct SparseIndexes {
    by_name: HashMap<String, SparseIndex>,
}

#[derive(Debug, Default)]
struct SparseIndex {
    /// Dimension → (slot, value) for every slot published with this dimension.
    postings: HashMap<u32, Vec<(Slot, f32)>>,
    /// Dimension → live points holding it.
    df: HashMap<u32, u32>,
    /// Live points holding a vector of this name.
    points: u64,
}

/// What one sparse search did, for `explain`.
#[derive(Debug, Clone, Copy, Default)]
pub struct SparseStats {
    /// Postings read (each one product).
    pub postings: u64,
}

impl SparseIndexes {
    /// Indexes the sparse vectors of the point published at `slot`.
    pub fn add(&mut self, slot: Slot, sparse: &BTreeMap<String, SparseVector>) {
        for (name, vector) in sparse {
            let index = self.by_name.entry(name.clone()).or_default();
            index.points += 1;
            for (&dim, &value) in vector.indices.iter().zip(&vector.values) {
                index.postings.entry(dim).or_default().push((slot, value));
                *index.df.entry(dim).or_default() += 1;
            }
        }
    }

    /// Takes a dead point's vectors out of the frequencies (its postings stay, skipped).
    pub fn remove(&mut self, sparse: &BTreeMap<String, SparseVector>) {
        for (name, vector) in sparse {
            let Some(index) = self.by_name.get_mut(name) else {
                continue;
            };
            index.points = index.points.saturating_sub(1);
            for dim in &vector.indices {
                if let Some(n) = index.df.get_mut(dim) {
                    *n = n.saturating_sub(1);
                }
            }
        }
    }

    /// The `k` best slots by dot product with `query` among those `accept` lets through,
    /// best first; with `idf`, each query value is weighted by its dimension's inverse
    /// document frequency (Qdrant's formula: `ln((N − n + 0.5) / (n + 0.5) + 1)`, `N` the
    /// live points with a vector of this name, `n` those holding the dimension).
    /// `slots` bounds the slot numbers (the table's length).
    pub fn search(
        &self,
        name: &str,
        query: &SparseVector,
        idf: bool,
        slots: usize,
        k: usize,
        accept: impl Fn(Slot) -> bool,
    ) -> (Vec<(Slot, f32)>, SparseStats) {
        let mut stats = SparseStats::default();
        let Some(index) = self.by_name.get(name) else {
            return (Vec::new(), stats);
        };
        // A dense accumulator: a few hundred KB per query at 100k slots, and no hashing on
        // the hot path; `touched` lists the slots to read back.
        let mut scores = vec![0.0f32; slots];
        let mut seen = vec![false; slots];
        let mut touched: Vec<Slot> = Vec::new();
        let n = index.points as f32;
        for (&dim, &value) in query.indices.iter().zip(&query.values) {
            let Some(list) = index.postings.get(&dim) else {
                continue;
            };
            let weight = if idf {
                let df = index.df.get(&dim).copied().unwrap_or(0) as f32;
                value * ((n - df + 0.5) / (df + 0.5) + 1.0).ln()
            } else {
                value
            };
            stats.postings += list.len() as u64;
            for &(slot, v) in list {
                let i = slot as usize;
                if i >= slots {
                    continue;
                }
                scores[i] += weight * v;
                if !seen[i] {
                    seen[i] = true;
                    touched.push(slot);
                }
            }
        }
        let mut hits: Vec<(Slot, f32)> = touched
            .into_iter()
            .filter(|&slot| accept(slot))
            .map(|slot| (slot, scores[slot as usize]))
            .collect();
        let by_score = |a: &(Slot, f32), b: &(Slot, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        if hits.len() > k && k > 0 {
            hits.select_nth_unstable_by(k - 1, by_score);
        }
        hits.truncate(k);
        hits.sort_unstable_by(by_score);
        (hits, stats)
    }

    /// Bytes the postings hold (an estimate, for `index_memory_bytes`).
    pub fn memory_bytes(&self) -> usize {
        self.by_name
            .values()
            .flat_map(|index| index.postings.values())
            .map(|list| list.capacity() * std::mem::size_of::<(Slot, f32)>())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vectors(pairs: &[(u32, f32)]) -> BTreeMap<String, SparseVector> {
        let (indices, values) = pairs.iter().copied().unzip();
        BTreeMap::from([("w".to_owned(), SparseVector { indices, values })])
    }

    fn query(pairs: &[(u32, f32)]) -> SparseVector {
        let (indices, values) = pairs.iter().copied().unzip();
        SparseVector { indices, values }
    }

    #[test]
    fn scores_are_exact_dot_products_over_shared_dimensions() {
        let mut index = SparseIndexes::default();
        index.add(0, &vectors(&[(1, 1.0), (2, 2.0)]));
        index.add(1, &vectors(&[(2, 3.0)]));
        index.add(2, &vectors(&[(7, 5.0)]));
        let (hits, stats) =
            index.search("w", &query(&[(2, 1.0), (1, 10.0)]), false, 3, 10, |_| true);
        // Slot 2 shares no dimension: not a hit.
        assert_eq!(hits, vec![(0, 12.0), (1, 3.0)]);
        assert_eq!(stats.postings, 3);
        let (hits, _) = index.search("w", &query(&[(2, 1.0)]), false, 3, 1, |s| s != 0);
        assert_eq!(hits, vec![(1, 3.0)]);
        assert!(index
            .search("other", &query(&[(2, 1.0)]), false, 3, 10, |_| true)
            .0
            .is_empty());
    }

    #[test]
    fn idf_weighs_rare_dimensions_up_and_follows_deletes() {
        let mut index = SparseIndexes::default();
        let common = vectors(&[(1, 1.0)]);
        for slot in 0..3 {
            index.add(slot, &common);
        }
        index.add(3, &vectors(&[(1, 1.0), (9, 1.0)]));
        let idf = |n: f32, df: f32| ((n - df + 0.5) / (df + 0.5) + 1.0).ln();
        let (hits, _) = index.search("w", &query(&[(1, 1.0), (9, 1.0)]), true, 4, 1, |_| true);
        assert_eq!(hits[0].0, 3);
        assert!((hits[0].1 - (idf(4.0, 4.0) + idf(4.0, 1.0))).abs() < 1e-6);
        // Two of the common points die: N = 2, df(1) = 2.
        index.remove(&common);
        index.remove(&common);
        let (hits, _) = index.search("w", &query(&[(1, 1.0)]), true, 4, 1, |s| s >= 2);
        assert!((hits[0].1 - idf(2.0, 2.0)).abs() < 1e-6);
    }
}
