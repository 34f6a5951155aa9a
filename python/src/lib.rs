//! `cairn_index`: Cairn's vector indexes inside a Python process, as hnswlib's or usearch's
//! are — the same graphs, kernels and index files the server uses (`cairn-index`), without a
//! server in between (the crate is `engine` here: this library takes the name Python imports).
//! It exists so that users can have Cairn's index in-process, and so that
//! the one benchmark harness of issue #25 calls Cairn exactly as it calls hnswlib and FAISS.
//!
//! ```python
//! import numpy as np, cairn_index
//! index = cairn_index.Index("hnsw", dim=128, metric="l2", m=16, ef_construction=200)
//! index.add(np.random.rand(10_000, 128).astype(np.float32))   # ids 0..9999
//! ids, scores = index.search(queries, k=10, ef=64)            # (nq, 10) each
//! index.save("sift.cidx"); again = cairn_index.Index.load("sift.cidx")
//! ```
//!
//! Every call that works on vectors releases the GIL, so Python threads search (and add) in
//! parallel. A batch search runs on the calling thread (its queries one after another, or,
//! for `norm_scan`, all of them over each tile of codes in turn): the caller chooses the
//! parallelism, as with FAISS at one OpenMP thread, which is what a fair
//! benchmark at a fixed thread count needs. Scores are the user-facing ones the REST API
//! returns (the L2 distance, the cosine, the inner product).
//!
//! Index kinds: `flat`, `hnsw`, `ip_nsw`, `ip_nsw_plus`, `mips_auto`, `simple_lsh`,
//! `range_lsh`, `norm_scan`, with the parameters `IndexParams` takes for each (unknown ones
//! are refused).
//! `quantized` needs FAISS's codebook training, which this module does not link: it is
//! refused with a message saying so.

use std::path::PathBuf;

use engine::persist::{self, FileHeader};
use engine::{IndexParams, Metric, Placement, RowCodes, SearchParams, Trainers, VectorIndex};
use numpy::ndarray::{Array1, Array2};
use numpy::{IntoPyArray, PyArrayDyn, PyReadonlyArray2, PyReadonlyArrayDyn, PyUntypedArrayMethods};
use pyo3::exceptions::{PyIOError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// An index error as Python sees it: bad input is a `ValueError`, a file problem an `IOError`.
fn py_error(error: engine::IndexError) -> PyErr {
    use engine::IndexError;
    match error {
        IndexError::Io(e) => PyIOError::new_err(e.to_string()),
        error @ (IndexError::Corrupt { .. }
        | IndexError::WrongDimension { .. }
        | IndexError::InvalidParams(_)
        | IndexError::Full(_)) => PyValueError::new_err(error.to_string()),
    }
}

/// The metric of a name: `l2` (or `euclid`), `cosine`, `ip` (or `dot`, `inner_product`).
fn metric(name: &str) -> PyResult<Metric> {
    match name.to_ascii_lowercase().as_str() {
        "l2" | "euclid" | "euclidean" => Ok(Metric::L2),
        "cosine" | "angular" => Ok(Metric::Cosine),
        "ip" | "dot" | "inner_product" => Ok(Metric::InnerProduct),
        other => Err(PyValueError::new_err(format!(
            "metric must be l2, cosine or ip, got {other:?}"
        ))),
    }
}

fn metric_name(metric: Metric) -> &'static str {
    match metric {
        Metric::L2 => "l2",
        Metric::Cosine => "cosine",
        Metric::InnerProduct => "ip",
    }
}

/// A keyword argument as JSON, for `IndexParams`' own parsing (and its errors).
fn json_value(value: &Bound<'_, PyAny>) -> PyResult<serde_json::Value> {
    if let Ok(b) = value.extract::<bool>() {
        return Ok(b.into());
    }
    if let Ok(i) = value.extract::<u64>() {
        return Ok(i.into());
    }
    if let Ok(f) = value.extract::<f64>() {
        return Ok(f.into());
    }
    if let Ok(s) = value.extract::<String>() {
        return Ok(s.into());
    }
    Err(PyValueError::new_err(format!(
        "index parameters are numbers, booleans or strings, got {value}"
    )))
}

/// A search's answer as Python gets it: ids and scores, row by row.
type Hits<'py> = (Bound<'py, PyArrayDyn<i64>>, Bound<'py, PyArrayDyn<f32>>);

/// One vector index (see the module docs).
#[pyclass(module = "cairn_index", frozen)]
pub struct Index {
    inner: Box<dyn VectorIndex>,
}

#[pymethods]
impl Index {
    /// A new, empty index of `kind` over `dim`-dimensional vectors compared by `metric`;
    /// keyword arguments are the kind's parameters (`m`, `ef_construction`, `ef_search`,
    /// `seed` for the graphs).
    #[new]
    #[pyo3(signature = (kind, dim, metric = "l2", **params))]
    fn new(
        kind: &str,
        dim: usize,
        metric: &str,
        params: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let mut spec = serde_json::Map::new();
        spec.insert("kind".into(), kind.into());
        for (key, value) in params.into_iter().flat_map(|d| d.iter()) {
            spec.insert(key.extract::<String>()?, json_value(&value)?);
        }
        let params: IndexParams = serde_json::from_value(spec.into())
            .map_err(|e| PyValueError::new_err(format!("{kind}: {e}")))?;
        let metric = self::metric(metric)?;
        let inner = engine::new_index(
            &params,
            metric,
            dim,
            &Trainers::default(),
            &Placement::Memory,
        )
        .map_err(py_error)?;
        Ok(Self { inner })
    }

    /// Appends the rows of `vectors` (a C-contiguous float32 array of shape (n, dim)); their
    /// ids are the next n integers, returned as (first, end).
    fn add(&self, py: Python<'_>, vectors: PyReadonlyArray2<'_, f32>) -> PyResult<(u64, u64)> {
        let dim = self.inner.dim();
        if vectors.shape()[1] != dim {
            return Err(PyValueError::new_err(format!(
                "vectors have {} columns; the index holds {dim}-dimensional vectors",
                vectors.shape()[1]
            )));
        }
        let rows = vectors.as_slice().map_err(|_| {
            PyValueError::new_err("vectors must be C-contiguous (numpy.ascontiguousarray)")
        })?;
        let n = vectors.shape()[0] as u64;
        let first = py
            .allow_threads(|| self.inner.add(rows))
            .map_err(py_error)?;
        Ok((u64::from(first), u64::from(first) + n))
    }

    /// The `k` nearest stored vectors of each query: `queries` is one float32 vector of
    /// shape (dim,) or a batch of shape (nq, dim). Returns (ids, scores), int64 and float32,
    /// of shape (k,) or (nq, k), best first; a query with fewer than `k` results pads its row
    /// with id -1 and score NaN. `ef` is the graph's candidate list (the index's default when
    /// not given); `exact` scans every vector instead.
    #[pyo3(signature = (queries, k = 10, ef = None, exact = false))]
    fn search<'py>(
        &self,
        py: Python<'py>,
        queries: PyReadonlyArrayDyn<'py, f32>,
        k: usize,
        ef: Option<usize>,
        exact: bool,
    ) -> PyResult<Hits<'py>> {
        let dim = self.inner.dim();
        let shape = queries.shape().to_vec();
        let (nq, single) = match shape.as_slice() {
            [d] if *d == dim => (1, true),
            [n, d] if *d == dim => (*n, false),
            _ => {
                return Err(PyValueError::new_err(format!(
                    "queries must have shape ({dim},) or (n, {dim}), got {shape:?}"
                )))
            }
        };
        if k == 0 {
            return Err(PyValueError::new_err("k must be at least 1"));
        }
        let rows = queries.as_slice().map_err(|_| {
            PyValueError::new_err("queries must be C-contiguous (numpy.ascontiguousarray)")
        })?;
        let params = SearchParams {
            ef,
            exact,
            ..SearchParams::default()
        };
        let metric = self.inner.metric();
        let (ids, scores) = py
            .allow_threads(|| -> engine::Result<_> {
                let mut ids = Array2::<i64>::from_elem((nq, k), -1);
                let mut scores = Array2::<f32>::from_elem((nq, k), f32::NAN);
                let answers = self.inner.search_batch(rows, k, &params, None)?;
                for (q, (hits, _)) in answers.iter().enumerate() {
                    for (j, hit) in hits.iter().take(k).enumerate() {
                        ids[[q, j]] = i64::from(hit.slot);
                        scores[[q, j]] = metric.key_to_score(hit.key);
                    }
                }
                Ok((ids, scores))
            })
            .map_err(py_error)?;
        let (ids, scores) = if single {
            let ids: Array1<i64> = ids.row(0).to_owned();
            let scores: Array1<f32> = scores.row(0).to_owned();
            (ids.into_dyn(), scores.into_dyn())
        } else {
            (ids.into_dyn(), scores.into_dyn())
        };
        Ok((ids.into_pyarray(py), scores.into_pyarray(py)))
    }

    /// Writes the index to `path` in Cairn's index file format (checksummed, written to a
    /// temporary file and renamed, so a crash leaves the old file or the new one).
    fn save(&self, py: Python<'_>, path: PathBuf) -> PyResult<()> {
        py.allow_threads(|| {
            let header = FileHeader {
                kind: self.inner.kind(),
                metric: self.inner.metric(),
                dim: self.inner.dim() as u64,
                count: self.inner.len() as u64,
                applied_seq: 0,
            };
            // Streamed to the file: saving an index needs no second copy of it in memory.
            persist::write_file_with(&path, &header, |out| self.inner.write_to(out))
        })
        .map_err(py_error)
    }

    /// Reads an index written by `save` (or a Cairn server's `index.cidx`).
    #[staticmethod]
    fn load(py: Python<'_>, path: PathBuf) -> PyResult<Self> {
        let inner = py
            .allow_threads(|| {
                let (header, payload) = persist::read_file(&path)?;
                engine::read_index(
                    header.kind,
                    &payload,
                    &Trainers::default(),
                    &Placement::Memory,
                )
            })
            .map_err(py_error)?;
        Ok(Self { inner })
    }

    /// The stored vector of `id` (after the metric's preprocessing: unit length for cosine).
    fn vector<'py>(&self, py: Python<'py>, id: u32) -> PyResult<Bound<'py, PyArrayDyn<f32>>> {
        let vector = self
            .inner
            .vector(id)
            .ok_or_else(|| PyValueError::new_err(format!("no vector has id {id}")))?;
        Ok(Array1::from(vector).into_dyn().into_pyarray(py))
    }

    /// Vectors added.
    fn __len__(&self) -> usize {
        self.inner.len()
    }

    /// The vectors' dimension.
    #[getter]
    fn dim(&self) -> usize {
        self.inner.dim()
    }

    /// The index kind (`hnsw`, `ip_nsw_plus`, …).
    #[getter]
    fn kind(&self) -> &'static str {
        self.inner.kind().name()
    }

    /// How an index that chooses its own structure from the data chose (`mips_auto`: e.g.
    /// `"norm_scan: norm spread … ≥ 1.25 over the first 1024 rows"`), or `None`. What `ef`
    /// means follows the choice: a graph's candidate list, or the norm scan's items read.
    #[getter]
    fn choice(&self) -> Option<String> {
        self.inner.choice()
    }

    /// The metric (`l2`, `cosine` or `ip`).
    #[getter]
    fn metric(&self) -> &'static str {
        metric_name(self.inner.metric())
    }

    /// Keeps codes beside a graph index for its searches: `"int8"` or `"binary"` (Qdrant's
    /// scalar and binary quantization: the search traverses by the codes and re-ranks by the
    /// full vectors), `"rabitq"` (RaBitQ codes of the graph's links: estimates steer the
    /// search, every result is scored exactly), or `None` to drop them. Codes are derived
    /// from the vectors and links, so they are not saved: set them again after `load`.
    #[pyo3(signature = (kind, quantile = RowCodes::DEFAULT_QUANTILE))]
    fn set_codes(&self, py: Python<'_>, kind: Option<&str>, quantile: f64) -> PyResult<()> {
        let codes = match kind {
            None => None,
            Some("int8") => Some(RowCodes::Int8 { quantile }),
            Some("binary") => Some(RowCodes::Binary),
            Some("rabitq") => Some(RowCodes::Rabitq),
            Some(other) => {
                return Err(PyValueError::new_err(format!(
                    "unknown codes `{other}`: int8, binary, rabitq or None"
                )))
            }
        };
        py.allow_threads(|| self.inner.set_codes(codes))
            .map_err(py_error)
    }

    /// Bytes of memory the index holds.
    fn memory_bytes(&self) -> usize {
        self.inner.memory_bytes()
    }

    fn __repr__(&self) -> String {
        format!(
            "cairn_index.Index(kind={:?}, dim={}, metric={:?}, len={})",
            self.kind(),
            self.dim(),
            self.metric(),
            self.inner.len()
        )
    }
}

/// The module.
#[pymodule]
fn cairn_index(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Index>()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
