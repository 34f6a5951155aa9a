//! A half-precision copy of a store's rows, made for one bulk graph build and dropped after
//! it: the build's searches and neighbour choices score it, so each scored neighbour fetches
//! half the bytes (`distance/half.rs` says why that matters).
//!
//! What it changes. Only which links the build keeps, and only between near-ties: each
//! coordinate is within one part in 2,048 of the row's (after the shift below). The graph's
//! searches score the full rows as before, so results and their scores do not change.
//!
//! The shift. For L2 the copy holds `x − μ`, μ the rows' mean, and a query is shifted alike:
//! distances do not change, and the halves spend their bits on what differs between rows
//! rather than on an offset all rows share (SIFT's coordinates are all positive). Cosine
//! rows are unit vectors and are copied as they are; inner product keeps its float rows (a
//! shift would change its keys, and its norms are unbounded).

use std::borrow::Cow;

use rayon::prelude::*;

use super::aligned::reserve_on_huge_pages;
use super::{prefetch_bytes, Placement, VectorStore};
use crate::distance::half::{half_kernels, HalfKernel, HalfKernel4, HALF_MAX};
use crate::distance::Metric;
use crate::Slot;

/// Halves per cache line.
const LINE_HALVES: usize = 32;

/// Rows of `dim` halves, row-major, the first starting on a cache line; see the module docs.
pub(crate) struct HalfRows {
    dim: usize,
    /// The rows start at `halves[start]`, a 64-byte boundary (found inside a slightly larger
    /// allocation: no unsafe view of an over-aligned type is needed).
    halves: Vec<u16>,
    start: usize,
    /// What was subtracted from every row (L2: the mean), subtracted from queries too.
    shift: Option<Vec<f32>>,
    key_fn: HalfKernel,
    key4_fn: HalfKernel4,
    to_half: fn(&[f32], &mut [u16]),
    to_f32: fn(&[u16], &mut [f32]),
}

impl HalfRows {
    /// A half copy of `store`'s rows, or `None` where it would not serve: this CPU has no
    /// half kernels, the rows are not in RAM (a mapped store was asked to keep its memory
    /// small), the metric is inner product, or a shifted coordinate lies beyond half of the
    /// half range (or is not finite).
    pub(crate) fn of(store: &VectorStore) -> Option<Self> {
        let kernels = half_kernels()?;
        if store.placement() != Placement::Memory || store.is_empty() {
            return None;
        }
        let (key_fn, key4_fn, shifted) = match store.metric() {
            Metric::L2 => (kernels.l2_squared, kernels.l2_squared4, true),
            Metric::Cosine => (kernels.neg_dot, kernels.neg_dot4, false),
            Metric::InnerProduct => return None,
        };
        let dim = store.dim();
        let shift = shifted.then(|| mean(store));
        let widest = store
            .as_flat()
            .par_chunks(dim.max(1))
            .map(|row| widest_shifted(row, shift.as_deref()))
            .reduce(|| 0.0, f32::max);
        if widest.is_nan() || widest > HALF_MAX / 2.0 {
            return None;
        }
        let mut halves = Vec::new();
        let len = store.len() * dim;
        reserve_on_huge_pages(&mut halves, len + LINE_HALVES);
        halves.resize(len + LINE_HALVES, 0u16);
        let start = (halves.as_ptr() as usize).next_multiple_of(64) - halves.as_ptr() as usize;
        let start = start / std::mem::size_of::<u16>();
        let mut copy = Self {
            dim,
            halves,
            start,
            shift,
            key_fn,
            key4_fn,
            to_half: kernels.to_half,
            to_f32: kernels.to_f32,
        };
        let (shift, to_half) = (copy.shift.as_deref(), copy.to_half);
        copy.halves[start..start + len]
            .par_chunks_mut(dim.max(1))
            .zip(store.as_flat().par_chunks(dim.max(1)))
            .for_each_init(Vec::new, |shifted, (out, row)| match shift {
                Some(mu) => {
                    shifted.clear();
                    shifted.extend(row.iter().zip(mu).map(|(x, m)| x - m));
                    to_half(shifted, out);
                }
                None => to_half(row, out),
            });
        Some(copy)
    }

    /// Row `slot`, which must exist.
    #[inline]
    pub(crate) fn row(&self, slot: Slot) -> &[u16] {
        let at = self.start + slot as usize * self.dim;
        &self.halves[at..at + self.dim]
    }

    /// A store row (or a query in the store's form) as this copy's keys expect it: shifted
    /// like the rows, left in floats.
    pub(crate) fn query<'a>(&self, row: &'a [f32]) -> Cow<'a, [f32]> {
        match &self.shift {
            Some(mu) => row.iter().zip(mu).map(|(x, m)| x - m).collect(),
            None => row.into(),
        }
    }

    /// Row `slot` widened to floats into `out`: the query form of a stored row as this copy
    /// holds it (for the distances between two stored rows).
    pub(crate) fn widen_into(&self, slot: Slot, out: &mut Vec<f32>) {
        out.resize(self.dim, 0.0);
        (self.to_f32)(self.row(slot), out);
    }

    /// The key of `slot` for a query from [`HalfRows::query`].
    #[inline]
    pub(crate) fn key(&self, query: &[f32], slot: Slot) -> f32 {
        (self.key_fn)(query, self.row(slot))
    }

    /// The keys of four slots in one kernel call.
    #[inline]
    pub(crate) fn key4(&self, query: &[f32], slots: [Slot; 4]) -> [f32; 4] {
        (self.key4_fn)(query, slots.map(|slot| self.row(slot)))
    }

    /// Asks the CPU to start loading row `slot` (every line of it, as the store does for
    /// its float rows up to their prefetch limit).
    #[inline]
    pub(crate) fn prefetch(&self, slot: Slot) {
        let row = self.row(slot);
        prefetch_bytes(row.as_ptr().cast(), std::mem::size_of_val(row).div_ceil(64));
    }
}

/// The mean row, summed in f64 so that a million rows lose nothing to rounding.
fn mean(store: &VectorStore) -> Vec<f32> {
    let dim = store.dim();
    let sums = store
        .as_flat()
        .par_chunks(dim * 1024)
        .map(|rows| {
            let mut sums = vec![0f64; dim];
            for row in rows.chunks_exact(dim) {
                sums.iter_mut()
                    .zip(row)
                    .for_each(|(s, x)| *s += f64::from(*x));
            }
            sums
        })
        .reduce(
            || vec![0f64; dim],
            |mut a, b| {
                a.iter_mut().zip(&b).for_each(|(a, b)| *a += b);
                a
            },
        );
    let n = store.len() as f64;
    sums.into_iter().map(|s| (s / n) as f32).collect()
}

/// The largest |xᵢ − μᵢ| of a row (NaN when a coordinate is not finite).
fn widest_shifted(row: &[f32], shift: Option<&[f32]>) -> f32 {
    let mut widest = 0f32;
    for (i, x) in row.iter().enumerate() {
        let v = (x - shift.map_or(0.0, |mu| mu[i])).abs();
        if v.is_nan() || v.is_infinite() {
            return f32::NAN;
        }
        widest = widest.max(v);
    }
    widest
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(metric: Metric, rows: &[Vec<f32>]) -> VectorStore {
        let mut store = VectorStore::new(metric, rows[0].len());
        store.append(&rows.concat()).unwrap();
        store
    }

    #[test]
    fn half_keys_are_the_float_keys_to_within_rounding() {
        if half_kernels().is_none() {
            return;
        }
        // An offset shared by every row (as SIFT's positive coordinates): the shift keeps it
        // out of the halves' bits.
        let rows: Vec<Vec<f32>> = (0..40)
            .map(|r| {
                (0..37)
                    .map(|i| 1000.0 + ((r * 31 + i * 7) % 23) as f32 * 0.5)
                    .collect()
            })
            .collect();
        for metric in [Metric::L2, Metric::Cosine] {
            let store = store(metric, &rows);
            let half = HalfRows::of(&store).expect("a half copy");
            let q = half.query(store.row(3)).into_owned();
            let mut widened = Vec::new();
            half.widen_into(3, &mut widened);
            for slot in 0..40 {
                let exact = store.key_fn()(store.row(3), store.row(slot));
                let tol = 1e-3 * exact.abs().max(1.0);
                assert!(
                    (half.key(&q, slot) - exact).abs() < tol,
                    "{metric:?} {slot}"
                );
                assert!((half.key(&widened, slot) - exact).abs() < tol, "{metric:?}");
            }
            let four = half.key4(&q, [0, 1, 2, 39]);
            for (k, slot) in four.into_iter().zip([0, 1, 2, 39]) {
                assert!((k - half.key(&q, slot)).abs() < 1e-3 * k.abs().max(1.0));
            }
            assert_eq!(half.row(0).as_ptr() as usize % 64, 0);
        }
    }

    #[test]
    fn no_half_copy_where_it_would_not_serve() {
        if half_kernels().is_none() {
            return;
        }
        let rows = vec![vec![1.0, 2.0], vec![3.0, 4.0]];
        assert!(HalfRows::of(&store(Metric::InnerProduct, &rows)).is_none());
        let wide = vec![vec![0.0, -1e6], vec![0.0, 1e6]];
        assert!(HalfRows::of(&store(Metric::L2, &wide)).is_none());
        assert!(HalfRows::of(&VectorStore::new(Metric::L2, 2)).is_none());
    }
}
