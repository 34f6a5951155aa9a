//! A collection's settings: validated from the create request, stored in its RocksDB `meta`.

use std::collections::BTreeMap;

use cairn_api::{
    CreateCollection, Distance, IndexConfig, Modifier, SparseVector, SparseVectorParams,
    VectorOutput, VectorParams, VectorValue, VectorsConfig, WithVector,
};
use cairn_index::hnsw::HnswParams;
use cairn_index::ipnsw::IpNswPlusParams;
use cairn_index::lsh::LshParams;
use cairn_index::pyramid::PyramidParams;
use cairn_index::quant::{QuantizedParams, Quantizer, VqKind};
use cairn_index::{IndexParams, Metric};
use serde::{Deserialize, Serialize};

use crate::config::Limits;
use crate::error::{Result, ServerError};

/// Meta key the settings are stored under.
pub const META_KEY: &str = "collection_settings";

/// What a collection is, fixed at creation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CollectionSettings {
    /// Vector dimension.
    pub dim: usize,
    /// Distance as the user named it.
    pub distance: Distance,
    /// The index and its parameters.
    pub index: IndexParams,
    /// Filtered queries expected to match fewer points than this scan exactly.
    pub full_scan_threshold: usize,
    /// How the collection is split into partitions and routed; `None` for one partition.
    /// (Absent in settings stored before partitioning existed: those have one partition.)
    #[serde(default)]
    pub routing: Option<PyramidParams>,
    /// Copies of each partition (above 1 only in a cluster).
    #[serde(default = "one")]
    pub replication_factor: usize,
    /// Copies that must hold a write before it is acknowledged; each host refuses what it
    /// cannot promise (`PartitionHost::check`).
    #[serde(default = "one")]
    pub write_consistency_factor: usize,
    /// The vector's name when the collection was created with Qdrant's map of named vectors
    /// (`""` included, LangChain's shape); `None` when created with one unnamed vector. Upserts,
    /// `using` and `with_vector` name it, and results return it under that name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vector_name: Option<String>,
    /// Sparse vector spaces by name, beside the dense vector: each point may hold one vector
    /// of each, and each partition keeps an inverted index per name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sparse_vectors: BTreeMap<String, SparseVectorParams>,
}

fn one() -> usize {
    1
}

/// Qdrant's default for the exact-scan threshold of filtered queries.
const DEFAULT_FULL_SCAN_THRESHOLD: usize = 10_000;

/// Most partitions a collection may have.
pub const MAX_PARTITIONS: u32 = 256;

/// Options a standalone server accepts in the request's shape but cannot honour yet: refused
/// with a message rather than silently ignored, so that no one believes their data is
/// replicated when it is not.
fn refuse_unsupported(req: &CreateCollection) -> Result<()> {
    match req.shard_number {
        Some(0) => {
            return Err(ServerError::InvalidRequest(
                "shard_number (partitions) must be at least 1".into(),
            ))
        }
        Some(n) if n > MAX_PARTITIONS => {
            return Err(ServerError::LimitExceeded(format!(
                "shard_number (partitions) {n} is above the maximum of {MAX_PARTITIONS}"
            )))
        }
        _ => {}
    }
    if req.replication_factor == Some(0) {
        return Err(ServerError::InvalidRequest(
            "replication_factor must be at least 1".into(),
        ));
    }
    if req.write_consistency_factor == Some(0) {
        return Err(ServerError::InvalidRequest(
            "write_consistency_factor must be at least 1".into(),
        ));
    }
    Ok(())
}

/// `quantization_config` in Cairn's shapes: `{"neq": {"codec", "m", "oversampling"}}` (NEQ:
/// one byte of norm plus `m − 1` codebooks of `codec` on the direction) and
/// `{"pq": {"m", "oversampling"}}` (plain product quantization), each `m` bytes per vector.
#[derive(Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
enum QuantizationRequest {
    Neq(VqRequest),
    Pq(VqRequest),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct VqRequest {
    #[serde(default)]
    codec: Option<VqKind>,
    #[serde(default)]
    m: Option<usize>,
    #[serde(default)]
    oversampling: Option<f32>,
}

/// Bytes per vector when a request names none: 8 (NEQ-PQ8 finds 96% of movielens-mips' top 10
/// within its top 64 estimates; BENCHMARKS.md).
const DEFAULT_CODE_BYTES: usize = 8;

/// The quantized index a `quantization_config` asks for, or `None` without one.
fn quantized_index(req: &CreateCollection) -> Result<Option<QuantizedParams>> {
    let Some(value) = req.quantization_config.as_ref().filter(|q| !q.is_null()) else {
        return Ok(None);
    };
    if let Some(qdrant) = ["scalar", "product", "binary"]
        .into_iter()
        .find(|k| value.get(k).is_some())
    {
        return Err(ServerError::InvalidRequest(format!(
            "quantization_config.{qdrant}: Qdrant's {qdrant} quantization is not supported; \
             use {{\"neq\": {{\"codec\": \"pq\", \"m\": 8}}}} or {{\"pq\": {{\"m\": 8}}}}"
        )));
    }
    let parsed: QuantizationRequest = serde_json::from_value(value.clone())
        .map_err(|e| ServerError::InvalidRequest(format!("quantization_config: {e}")))?;
    let (quantizer, oversampling) = match parsed {
        QuantizationRequest::Neq(r) => (
            Quantizer::Neq {
                kind: r.codec.unwrap_or(VqKind::Pq),
                m: r.m.unwrap_or(DEFAULT_CODE_BYTES),
            },
            r.oversampling,
        ),
        QuantizationRequest::Pq(r) => {
            if r.codec.is_some_and(|c| c != VqKind::Pq) {
                return Err(ServerError::InvalidRequest(
                    "quantization_config.pq.codec: plain quantization here is PQ; use neq for OPQ or RQ directions".into(),
                ));
            }
            (
                Quantizer::Plain {
                    kind: VqKind::Pq,
                    m: r.m.unwrap_or(DEFAULT_CODE_BYTES),
                },
                r.oversampling,
            )
        }
    };
    let mut params = QuantizedParams::new(quantizer);
    if let Some(o) = oversampling {
        params.oversampling = o;
    }
    params
        .validate()
        .map_err(|e| ServerError::InvalidRequest(format!("quantization_config: {e}")))?;
    if !matches!(req.index, None | Some(IndexConfig::Flat)) {
        return Err(ServerError::InvalidRequest(
            "quantization_config replaces the collection's index with a scan of the codes and an \
             exact re-rank; leave index out (or set it to flat)"
                .into(),
        ));
    }
    Ok(Some(params))
}

/// Most bytes in a vector's name.
const MAX_VECTOR_NAME: usize = 255;

/// The one vector space of a create request, and its name if it came in map form. Several
/// named vectors per point are refused with a message until points can hold them.
fn one_vector(vectors: &VectorsConfig) -> Result<(Option<String>, &VectorParams)> {
    let named = match vectors {
        VectorsConfig::Single(params) => return Ok((None, params)),
        VectorsConfig::Named(named) => named,
    };
    let mut entries = named.iter();
    match (entries.next(), entries.next()) {
        (Some((name, _)), _) if name.len() > MAX_VECTOR_NAME => Err(ServerError::InvalidRequest(
            format!("vectors: a vector name is at most {MAX_VECTOR_NAME} bytes"),
        )),
        (Some((name, params)), None) => Ok((Some(name.clone()), params)),
        (None, _) => Err(ServerError::InvalidRequest(
            "vectors: at least one vector is needed (collections of sparse vectors only are not \
             supported)"
                .into(),
        )),
        (Some(_), Some(_)) => {
            Err(ServerError::InvalidRequest(format!(
            "vectors: {} named vectors ({}) were asked for; Cairn holds one vector per point for \
             now, unnamed or named",
            named.len(),
            named.keys().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ")
        )))
        }
    }
}

impl CollectionSettings {
    /// Validates a create request.
    pub fn from_request(req: &CreateCollection, limits: &Limits) -> Result<Self> {
        let (vector_name, v) = one_vector(&req.vectors)?;
        if v.size == 0 {
            return Err(ServerError::InvalidRequest(
                "vectors.size must be at least 1".into(),
            ));
        }
        if v.size > limits.max_dim {
            return Err(ServerError::LimitExceeded(format!(
                "vectors.size {} is above the maximum of {}",
                v.size, limits.max_dim
            )));
        }
        if v.distance == Distance::Manhattan {
            return Err(ServerError::InvalidRequest(
                "vectors.distance Manhattan is not supported; use Cosine, Euclid or Dot".into(),
            ));
        }
        refuse_unsupported(req)?;
        let diff = v.hnsw_config.or(req.hnsw_config).unwrap_or_default();
        let defaults = HnswParams::default();
        let ef_construction = diff.ef_construct.unwrap_or(defaults.ef_construction);
        let hnsw = HnswParams {
            m: diff.m.unwrap_or(defaults.m),
            ef_construction,
            // Qdrant searches with ef = ef_construct unless told otherwise; so do we.
            ef_search: diff.ef_search.unwrap_or(ef_construction),
            seed: defaults.seed,
        };
        let hnsw_checked = || {
            hnsw.validate()
                .map_err(|e| ServerError::InvalidRequest(format!("hnsw_config: {e}")))
                .map(|()| hnsw)
        };
        let default_index = if v.distance == Distance::Dot {
            IndexConfig::ip_nsw_plus()
        } else {
            IndexConfig::Hnsw
        };
        let quantized = quantized_index(req)?;
        let index = match (quantized, req.index.unwrap_or(default_index)) {
            (Some(q), _) => IndexParams::Quantized(q),
            (None, index) => Self::index_params(index, hnsw_checked)?,
        };
        if let IndexParams::SimpleLsh(p) | IndexParams::RangeLsh(p) = &index {
            p.validate()
                .and_then(|()| index.check_lsh_ranges())
                .map_err(|e| ServerError::InvalidRequest(format!("index: {e}")))?;
        }
        let partitions = req.shard_number.unwrap_or(1) as usize;
        let routing = match (partitions, req.spill) {
            (1, None) => None,
            (1, Some(_)) => {
                return Err(ServerError::InvalidRequest(
                    "spill applies to partitioned collections (shard_number above 1)".into(),
                ))
            }
            (_, Some(spill)) if !(0.0..=1.0).contains(&spill) => {
                return Err(ServerError::InvalidRequest(format!(
                    "spill must be between 0 and 1, got {spill}"
                )))
            }
            // Inner-product queries (users) are not drawn from the items' distribution, so
            // points held apart say nothing of them: `Dot` keeps the fixed branching, and
            // spills only when asked (at a fixed branching a spill buys recall, not fewer
            // partitions).
            (_, spill) if v.distance == Distance::Dot => Some(PyramidParams {
                spill: spill.unwrap_or(0.0),
                route_recall: 0.0,
                ..PyramidParams::new(partitions)
            }),
            (_, spill) => Some(PyramidParams {
                spill: spill.unwrap_or(cairn_index::pyramid::DEFAULT_SPILL),
                ..PyramidParams::new(partitions)
            }),
        };
        let sparse_vectors = req.sparse_vectors.clone().unwrap_or_default();
        for name in sparse_vectors.keys() {
            if name.len() > MAX_VECTOR_NAME {
                return Err(ServerError::InvalidRequest(format!(
                    "sparse_vectors: a vector name is at most {MAX_VECTOR_NAME} bytes"
                )));
            }
            if Some(name) == vector_name.as_ref() {
                return Err(ServerError::InvalidRequest(format!(
                    "sparse_vectors: `{name}` is already the dense vector's name"
                )));
            }
        }
        let settings = Self {
            vector_name,
            sparse_vectors,
            routing,
            replication_factor: req.replication_factor.unwrap_or(1) as usize,
            write_consistency_factor: req.write_consistency_factor.unwrap_or(1) as usize,
            dim: v.size,
            distance: v.distance,
            index,
            full_scan_threshold: diff
                .full_scan_threshold
                .unwrap_or(DEFAULT_FULL_SCAN_THRESHOLD),
        };
        settings
            .index
            .check_metric(settings.metric())
            .map_err(|e| ServerError::InvalidRequest(format!("index: {e}")))?;
        Ok(settings)
    }

    /// Parameters of an index chosen by `index` (no quantization).
    fn index_params(
        index: IndexConfig,
        hnsw_checked: impl Fn() -> Result<HnswParams>,
    ) -> Result<IndexParams> {
        Ok(match index {
            IndexConfig::Flat => IndexParams::Flat,
            IndexConfig::Hnsw => IndexParams::Hnsw(hnsw_checked()?),
            IndexConfig::IpNsw => IndexParams::IpNsw(hnsw_checked()?),
            IndexConfig::IpNswPlus {
                m,
                ef_construction,
                ef_search,
                cos_m,
                cos_ef_construction,
                cos_ef_search,
            } => {
                let d = IpNswPlusParams::default();
                let p = IpNswPlusParams {
                    m: m.unwrap_or(d.m),
                    ef_construction: ef_construction.unwrap_or(d.ef_construction),
                    ef_search: ef_search.unwrap_or(d.ef_search),
                    cos_m: cos_m.unwrap_or(d.cos_m),
                    cos_ef_construction: cos_ef_construction.unwrap_or(d.cos_ef_construction),
                    cos_ef_search: cos_ef_search.unwrap_or(d.cos_ef_search),
                    seed: d.seed,
                };
                p.validate()
                    .map_err(|e| ServerError::InvalidRequest(format!("index: {e}")))?;
                IndexParams::IpNswPlus(p)
            }
            IndexConfig::SimpleLsh { bits, probe_items } => {
                let d = LshParams::default();
                IndexParams::SimpleLsh(LshParams {
                    bits: bits.unwrap_or(d.bits),
                    ranges: 1,
                    probe_items: probe_items.unwrap_or(d.probe_items),
                    ..d
                })
            }
            IndexConfig::RangeLsh {
                bits,
                ranges,
                shift,
                probe_items,
            } => {
                let d = LshParams::default();
                IndexParams::RangeLsh(LshParams {
                    bits: bits.unwrap_or(d.bits),
                    ranges: ranges.unwrap_or(d.ranges),
                    shift: shift.unwrap_or(d.shift),
                    probe_items: probe_items.unwrap_or(d.probe_items),
                    seed: d.seed,
                })
            }
        })
    }

    /// The vector's name (`""`: unnamed).
    pub fn vector_name(&self) -> &str {
        self.vector_name.as_deref().unwrap_or("")
    }

    /// `vectors` as created: one unnamed vector space, or the map naming it.
    pub fn vectors_config(&self) -> VectorsConfig {
        let params = VectorParams::new(self.dim, self.distance);
        match &self.vector_name {
            None => params.into(),
            Some(name) => VectorsConfig::Named([(name.clone(), params)].into()),
        }
    }

    /// Checks that `name` is one of the collection's sparse vectors.
    pub fn check_sparse_name(&self, name: &str, field: &str) -> Result<()> {
        if self.sparse_vectors.contains_key(name) {
            return Ok(());
        }
        Err(ServerError::InvalidRequest(
            if self.sparse_vectors.is_empty() {
                format!(
                    "{field}.{name}: the collection has no sparse vectors (create it with \
                 `sparse_vectors`)"
                )
            } else {
                format!(
                    "{field}.{name}: the collection has no sparse vector `{name}`; it has {}",
                    self.sparse_names()
                )
            },
        ))
    }

    /// The sparse vector names, for messages.
    fn sparse_names(&self) -> String {
        self.sparse_vectors
            .keys()
            .map(|k| format!("`{k}`"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Whether sparse vector `name` scores with inverse document frequencies.
    pub fn sparse_idf(&self, name: &str) -> bool {
        self.sparse_vectors
            .get(name)
            .is_some_and(|p| p.modifier == Some(Modifier::Idf))
    }

    /// `sparse_vectors` as collection info reports it (absent when there are none).
    pub fn sparse_config(&self) -> Option<BTreeMap<String, SparseVectorParams>> {
        (!self.sparse_vectors.is_empty()).then(|| self.sparse_vectors.clone())
    }

    /// Checks that `name` (`using`, or a named vector sent; absent: `""`) is this collection's
    /// vector.
    pub fn check_vector_name(&self, name: &str, field: &str) -> Result<()> {
        if name == self.vector_name() {
            return Ok(());
        }
        Err(ServerError::InvalidRequest(match self.vector_name() {
            "" => format!(
                "{field}: the collection has one unnamed vector, not `{name}` (leave the name out \
                 or use \"\")"
            ),
            own => format!("{field}: the collection's vector is named `{own}`, not `{name}`"),
        }))
    }

    /// Whether `with_vector` asks for the vector; a name the collection lacks is an error.
    pub fn wants_vector(&self, with_vector: Option<&WithVector>, field: &str) -> Result<bool> {
        let Some(with_vector) = with_vector else {
            return Ok(false);
        };
        if let WithVector::Names(names) = with_vector {
            for name in names {
                if name != self.vector_name() && !self.sparse_vectors.contains_key(name) {
                    self.check_vector_name(name, &format!("{field}with_vector"))?;
                }
            }
        }
        Ok(with_vector.includes(self.vector_name())
            || self
                .sparse_vectors
                .keys()
                .any(|name| with_vector.includes(name)))
    }

    /// A point's vectors as results return them: the dense one under the collection's
    /// vector name, the sparse ones by name.
    pub fn vectors_output(
        &self,
        dense: Vec<f32>,
        sparse: &BTreeMap<String, SparseVector>,
    ) -> VectorOutput {
        if sparse.is_empty() {
            return self.vector_output(dense);
        }
        let mut named: BTreeMap<String, VectorValue> = sparse
            .iter()
            .map(|(name, v)| (name.clone(), VectorValue::Sparse(v.clone())))
            .collect();
        named.insert(self.vector_name().to_owned(), VectorValue::Dense(dense));
        VectorOutput::Named(named)
    }

    /// Keeps the vectors `with_vector` names (partitions return them all); the unnamed dense
    /// vector left alone goes back to a plain list, as Qdrant returns it.
    pub fn pick_vectors(
        &self,
        output: VectorOutput,
        with_vector: &WithVector,
    ) -> Option<VectorOutput> {
        let VectorOutput::Named(mut named) = output else {
            return with_vector.includes(self.vector_name()).then_some(output);
        };
        named.retain(|name, _| with_vector.includes(name));
        if named.is_empty() {
            return None;
        }
        match named.remove("") {
            Some(VectorValue::Dense(v)) if named.is_empty() => Some(VectorOutput::Dense(v)),
            Some(unnamed) => {
                named.insert(String::new(), unnamed);
                Some(VectorOutput::Named(named))
            }
            None => Some(VectorOutput::Named(named)),
        }
    }

    /// A stored vector as results return it: under the collection's vector name, if it has one.
    pub fn vector_output(&self, vector: Vec<f32>) -> VectorOutput {
        VectorOutput::Dense(vector).named(self.vector_name())
    }

    /// Number of partitions.
    pub fn partitions(&self) -> usize {
        self.routing.map_or(1, |r| r.partitions)
    }

    /// The index metric.
    pub fn metric(&self) -> Metric {
        match self.distance {
            Distance::Cosine => Metric::Cosine,
            Distance::Euclid => Metric::L2,
            // Manhattan is refused at creation; a stored one can only come from a foreign file.
            Distance::Dot | Distance::Manhattan => Metric::InnerProduct,
        }
    }
}
