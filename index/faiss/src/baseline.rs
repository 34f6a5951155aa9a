//! FAISS's own indexes, as baselines: benchmarks build the same graph with the same
//! parameters in Cairn and in FAISS and compare them in one run.
//!
//! Results come back as [`cairn_index::Neighbor`]s with Cairn's "lower is closer" keys
//! (squared L2, or the negated inner product), so a benchmark scores both sides with the
//! same recall code.

use cairn_index::{Metric, Neighbor};
use faiss::index::autotune::ParameterSpace;
use faiss::index::IndexImpl;
use faiss::{index_factory, Index, MetricType};

use crate::{check, rows, to_u32, FaissError, Result};

/// Which FAISS index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BaselineKind {
    /// `IndexFlat`: exact scan with FAISS's BLAS/SIMD kernels.
    Flat,
    /// `IndexHNSWFlat` with `m` links per node (`2m` on layer 0, as in Cairn) and the given
    /// construction candidate list.
    Hnsw {
        /// Links per node on upper layers.
        m: usize,
        /// `efConstruction`.
        ef_construction: usize,
    },
}

/// A built FAISS index over row-major vectors. Slots are insertion order, as in Cairn.
pub struct FaissIndex {
    index: IndexImpl,
    kind: BaselineKind,
    metric: Metric,
    dim: usize,
}

impl FaissIndex {
    /// Builds the index over `data`, with FAISS's OpenMP threads (see [`crate::set_threads`]).
    /// Cosine vectors are normalised first and searched by inner product, as Cairn does.
    pub fn build(kind: BaselineKind, metric: Metric, dim: usize, data: &[f32]) -> Result<Self> {
        rows(data, dim)?;
        let description = match kind {
            BaselineKind::Flat => String::from("Flat"),
            BaselineKind::Hnsw { m, .. } if m >= 2 => format!("HNSW{m}"),
            BaselineKind::Hnsw { m, .. } => {
                return Err(FaissError::InvalidParams(format!(
                    "HNSW needs m ≥ 2, got {m}"
                )))
            }
        };
        let faiss_metric = match metric {
            Metric::L2 => MetricType::L2,
            Metric::Cosine | Metric::InnerProduct => MetricType::InnerProduct,
        };
        let mut index = index_factory(to_u32(dim)?, description, faiss_metric)?;
        if let BaselineKind::Hnsw {
            ef_construction, ..
        } = kind
        {
            let ef = u32::try_from(ef_construction).map_err(|_| {
                FaissError::InvalidParams(format!("efConstruction {ef_construction} too large"))
            })?;
            ParameterSpace::new()?.set_index_parameter(&index, "efConstruction", ef)?;
        }
        if metric == Metric::Cosine {
            let mut normalised = data.to_vec();
            normalised
                .chunks_mut(dim)
                .for_each(cairn_index::distance::normalize);
            index.add(&normalised)?;
        } else {
            index.add(data)?;
        }
        Ok(Self {
            index,
            kind,
            metric,
            dim,
        })
    }

    /// Which index this is.
    pub fn kind(&self) -> BaselineKind {
        self.kind
    }

    /// Number of indexed vectors.
    pub fn len(&self) -> usize {
        self.index.ntotal() as usize
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Sets HNSW's search candidate list (`efSearch`); ignored by `Flat`.
    pub fn set_ef_search(&mut self, ef: usize) -> Result<()> {
        if matches!(self.kind, BaselineKind::Flat) {
            return Ok(());
        }
        let ef = u32::try_from(ef)
            .map_err(|_| FaissError::InvalidParams(format!("efSearch {ef} too large")))?;
        ParameterSpace::new()?.set_index_parameter(&self.index, "efSearch", ef)?;
        Ok(())
    }

    /// The `k` nearest slots of one query, best first, with Cairn's keys. `&self`: FAISS CPU
    /// indexes allow concurrent searches of a built index.
    pub fn search(&self, query: &[f32], k: usize) -> Result<Vec<Neighbor>> {
        if query.len() != self.dim {
            return Err(FaissError::WrongDimension {
                dim: self.dim,
                len: query.len(),
            });
        }
        Ok(self.search_batch(query, k)?.pop().unwrap_or_default())
    }

    /// The `k` nearest slots of every query in `queries` (row-major, whole rows) in one FAISS
    /// call: FAISS's fast path, which opens one OpenMP region and allocates its HNSW visited
    /// table once per call rather than once per query. With one OpenMP thread
    /// ([`crate::set_threads`]) the queries are answered one after another on this thread.
    pub fn search_batch(&self, queries: &[f32], k: usize) -> Result<Vec<Vec<Neighbor>>> {
        let n = rows(queries, self.dim)?;
        if k == 0 {
            return Ok(vec![Vec::new(); n]);
        }
        let mut normalised;
        let queries = if self.metric == Metric::Cosine {
            normalised = queries.to_vec();
            normalised
                .chunks_exact_mut(self.dim)
                .for_each(cairn_index::distance::normalize);
            &normalised[..]
        } else {
            queries
        };
        let mut distances = vec![0f32; n * k];
        let mut labels = vec![-1 as faiss_sys::idx_t; n * k];
        // SAFETY: `n` queries of `dim` floats in, room for `n·k` distances and `n·k` labels
        // out, which is what `faiss_Index_search` reads and writes. `search` is const in FAISS
        // and safe to call concurrently on a built CPU index.
        check(unsafe {
            faiss_sys::faiss_Index_search(
                self.index.inner_ptr(),
                n as faiss_sys::idx_t,
                queries.as_ptr(),
                k as faiss_sys::idx_t,
                distances.as_mut_ptr(),
                labels.as_mut_ptr(),
            )
        })?;
        let higher_is_better = self.metric != Metric::L2;
        Ok(labels
            .chunks_exact(k)
            .zip(distances.chunks_exact(k))
            .map(|(labels, distances)| {
                labels
                    .iter()
                    .zip(distances)
                    .filter(|(label, _)| **label >= 0)
                    .map(|(&label, &d)| {
                        Neighbor::new(label as u32, if higher_is_better { -d } else { d })
                    })
                    .collect()
            })
            .collect())
    }

    /// Bytes of FAISS's serialised index (vectors plus graph), for bytes-per-vector figures:
    /// written to a temporary file and measured, as FAISS exposes no memory accounting.
    pub fn serialized_bytes(&self, scratch_dir: &std::path::Path) -> Result<u64> {
        let path = scratch_dir.join("faiss-baseline.index");
        let name = path
            .to_str()
            .ok_or_else(|| FaissError::InvalidParams(format!("path {path:?} is not UTF-8")))?;
        faiss::write_index(&self.index, name)?;
        let bytes = std::fs::metadata(&path)
            .map(|m| m.len())
            .map_err(|source| FaissError::Io {
                path: path.clone(),
                source,
            });
        let _ = std::fs::remove_file(&path);
        bytes
    }
}

#[cfg(test)]
mod tests {
    use cairn_index::dataset::{clustered_gaussian, ground_truth, recall_at_k, ClusterSpec};

    use super::*;

    fn set(n: usize) -> (Vec<f32>, Vec<f32>) {
        let spec = ClusterSpec {
            n,
            dim: 32,
            clusters: 20,
            spread: 0.5,
            intrinsic_dim: None,
            seed: 7,
        };
        let base = clustered_gaussian(spec).data;
        let queries = clustered_gaussian(ClusterSpec {
            n: 50,
            seed: 8,
            ..spec
        })
        .data;
        (base, queries)
    }

    #[test]
    fn flat_is_exact_and_hnsw_is_close_for_every_metric() {
        let (base, queries) = set(3000);
        for metric in [Metric::L2, Metric::Cosine, Metric::InnerProduct] {
            let b = cairn_index::dataset::Vectors {
                dim: 32,
                data: base.clone(),
            };
            let q = cairn_index::dataset::Vectors {
                dim: 32,
                data: queries.clone(),
            };
            let truth = ground_truth(&b, &q, metric, 10);
            for kind in [
                BaselineKind::Flat,
                BaselineKind::Hnsw {
                    m: 16,
                    ef_construction: 100,
                },
            ] {
                let mut index = FaissIndex::build(kind, metric, 32, &base).unwrap();
                index.set_ef_search(128).unwrap();
                assert_eq!(index.len(), 3000);
                let found: Vec<Vec<u32>> = queries
                    .chunks(32)
                    .map(|q| {
                        index
                            .search(q, 10)
                            .unwrap()
                            .iter()
                            .map(|n| n.slot)
                            .collect()
                    })
                    .collect();
                let recall = recall_at_k(&found, &truth, 10);
                // HNSW built on raw inner product is the MIPS baseline Cairn's ip-NSW+ is
                // meant to beat: on unnormalised vectors it reaches ~0.85 here, not 0.95
                // (the norm bias of PAPERS.md §2). It must still clearly work.
                let floor = match (kind, metric) {
                    (BaselineKind::Flat, _) => 0.999,
                    (BaselineKind::Hnsw { .. }, Metric::InnerProduct) => 0.7,
                    (BaselineKind::Hnsw { .. }, Metric::L2 | Metric::Cosine) => 0.95,
                };
                assert!(recall >= floor, "{kind:?} {metric:?}: recall {recall}");
            }
        }
    }

    #[test]
    fn a_batch_answers_as_its_queries_do_one_by_one() {
        let (base, queries) = set(2000);
        for metric in [Metric::L2, Metric::Cosine] {
            let kind = BaselineKind::Hnsw {
                m: 16,
                ef_construction: 100,
            };
            let mut index = FaissIndex::build(kind, metric, 32, &base).unwrap();
            index.set_ef_search(64).unwrap();
            crate::set_threads(1);
            let batch = index.search_batch(&queries, 10).unwrap();
            assert_eq!(batch.len(), 50);
            for (q, row) in queries.chunks(32).zip(&batch) {
                assert_eq!(row, &index.search(q, 10).unwrap(), "{metric:?}");
            }
            assert!(index
                .search_batch(&queries, 0)
                .unwrap()
                .iter()
                .all(Vec::is_empty));
            assert!(index.search_batch(&queries[..40], 10).is_err());
        }
    }

    #[test]
    fn wrong_query_dimension_is_an_error() {
        let (base, _) = set(100);
        let index = FaissIndex::build(BaselineKind::Flat, Metric::L2, 32, &base).unwrap();
        assert!(matches!(
            index.search(&[0.0; 31], 5),
            Err(FaissError::WrongDimension { .. })
        ));
    }
}
