//! A collection's settings: validated from the create request, stored in its RocksDB `meta`.

use std::collections::BTreeMap;
use std::path::Path;

use cairn_api::{
    CreateCollection, Distance, HnswConfigDiff, IndexConfig, IpNswPlusConfig, Modifier,
    SparseVector, SparseVectorParams, UpdateCollection, VectorOutput, VectorParams, VectorValue,
    VectorsConfig, WithVector,
};
use cairn_index::hnsw::HnswParams;
use cairn_index::ipnsw::IpNswPlusParams;
use cairn_index::lsh::LshParams;
use cairn_index::norm_scan::NormScanParams;
use cairn_index::pyramid::PyramidParams;
use cairn_index::quant::{QuantizedParams, Quantizer, VqKind};
use cairn_index::{IndexParams, Metric, Placement, RowCodes};
use serde::{Deserialize, Serialize};
use serde_json::json;

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
    /// Dense vectors beside the main one, by name (Qdrant's several named vectors per point).
    /// Each has its own dimension, distance and index in every partition, and a point may
    /// leave any of them out; the main vector (`dim`, `distance`, `index`, `vector_name`) is
    /// the one every point carries and partitions are routed by.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra_vectors: BTreeMap<String, ExtraVector>,
    /// The main vector's row codes (Qdrant's `scalar` or `binary` quantization), which its
    /// graph traverses by before re-ranking by the full vectors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub codes: Option<RowCodes>,
    /// The collection's own `quantization_config` as Qdrant's kinds, which every dense vector
    /// takes unless it names its own: what collection info reports at the top level.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_codes: Option<RowCodes>,
    /// The main vector's rows live in a memory-mapped file, not in RAM (Qdrant's `on_disk`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub on_disk: bool,
}

/// A named dense vector beside a collection's main one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExtraVector {
    /// Its dimension.
    pub dim: usize,
    /// Its distance.
    pub distance: Distance,
    /// Its index.
    pub index: IndexParams,
    /// Its row codes, as the main vector's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub codes: Option<RowCodes>,
    /// Its rows live in a memory-mapped file, as the main vector's may.
    #[serde(default, skip_serializing_if = "is_false")]
    pub on_disk: bool,
}

/// One dense vector space of a collection, the main vector's or one beside it: what a vector
/// sent for it is checked against and what searches it.
#[derive(Debug, Clone, Copy)]
pub struct DenseSpace<'a> {
    /// Its name (`""`: the unnamed main vector).
    pub name: &'a str,
    /// `None` for the main vector; the position among `extra_vectors` (in name order, as
    /// partitions keep their indexes) for the others.
    pub extra: Option<usize>,
    /// Its dimension.
    pub dim: usize,
    /// Its distance.
    pub distance: Distance,
    /// Its index.
    pub index: &'a IndexParams,
    /// The row codes its index keeps.
    pub codes: Option<RowCodes>,
    /// Whether its index's rows live in a memory-mapped file.
    pub on_disk: bool,
}

impl DenseSpace<'_> {
    /// The index metric.
    pub fn metric(&self) -> Metric {
        metric_of(self.distance)
    }

    /// Where its index keeps its rows, for a partition whose files are in `dir`: the mapped
    /// scratch files of `on_disk` vectors go beside the partition's other files.
    pub fn placement(&self, dir: &Path) -> Placement {
        if self.on_disk {
            Placement::Mapped(dir.to_path_buf())
        } else {
            Placement::Memory
        }
    }
}

fn is_false(value: &bool) -> bool {
    !*value
}

/// The index metric of a distance.
fn metric_of(distance: Distance) -> Metric {
    match distance {
        Distance::Cosine => Metric::Cosine,
        Distance::Euclid => Metric::L2,
        // Manhattan is refused at creation; a stored one can only come from a foreign file.
        Distance::Dot | Distance::Manhattan => Metric::InnerProduct,
    }
}

/// Most dense vectors (named) a collection may have: each is an index in every partition.
pub const MAX_DENSE_VECTORS: usize = 16;

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

/// `quantization_config` in Cairn's shapes: `{"neq": {"codec", "m", "oversampling",
/// "training"}}` (NEQ: one byte of norm plus `m − 1` codebooks of `codec` on the direction,
/// trained with every direction alike or weighted for inner product) and
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
    #[serde(default)]
    training: Option<NeqTraining>,
}

/// How NEQ's direction codebooks are trained (`quantization_config.neq.training`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum NeqTraining {
    /// Every direction weighs alike (the NEQ paper's).
    Directions,
    /// Each direction weighs its vector's squared norm, as its inner products do, and the
    /// tables are refitted to the codes Cairn picks (NEQ-IP).
    InnerProduct,
}

/// Bytes per vector when a request names none: 8 (NEQ-PQ8 finds 96% of movielens-mips' top 10
/// within its top 64 estimates; BENCHMARKS.md).
const DEFAULT_CODE_BYTES: usize = 8;

/// NEQ's training when a request names none: for inner product. With the default codec (PQ)
/// it found more of movielens-mips' top 10 than plain NEQ and than plain PQ, OPQ and RQ at
/// T ≤ 32, and matched plain NEQ on the controls (BENCHMARKS.md, C6).
const DEFAULT_NEQ_TRAINING: NeqTraining = NeqTraining::InnerProduct;

/// The quantized index a `quantization_config` asks for, or `None` without one.
fn quantized_index(
    req: &CreateCollection,
    asked: Option<IndexConfig>,
) -> Result<Option<QuantizedParams>> {
    let Some(value) = req.quantization_config.as_ref().filter(|q| !q.is_null()) else {
        return Ok(None);
    };
    if is_graph_codes(value) {
        return Ok(None);
    }
    if value.get("product").is_some() {
        return Err(ServerError::InvalidRequest(
            "quantization_config.product: Qdrant's product quantization is not supported; use \
             scalar or binary, or for Dot Cairn's quantized scan, {\"neq\": {\"codec\": \"pq\", \
             \"m\": 8}} or {\"pq\": {\"m\": 8}}"
                .into(),
        ));
    }
    let parsed: QuantizationRequest = serde_json::from_value(value.clone())
        .map_err(|e| ServerError::InvalidRequest(format!("quantization_config: {e}")))?;
    let (quantizer, oversampling) = match parsed {
        QuantizationRequest::Neq(r) => {
            let kind = r.codec.unwrap_or(VqKind::Pq);
            let m = r.m.unwrap_or(DEFAULT_CODE_BYTES);
            let quantizer = match r.training.unwrap_or(DEFAULT_NEQ_TRAINING) {
                NeqTraining::Directions => Quantizer::Neq { kind, m },
                NeqTraining::InnerProduct => Quantizer::NeqIp { kind, m },
            };
            (quantizer, r.oversampling)
        }
        QuantizationRequest::Pq(r) => {
            if r.codec.is_some_and(|c| c != VqKind::Pq) {
                return Err(ServerError::InvalidRequest(
                    "quantization_config.pq.codec: plain quantization here is PQ; use neq for OPQ or RQ directions".into(),
                ));
            }
            if r.training.is_some() {
                return Err(ServerError::InvalidRequest(
                    "quantization_config.pq.training: plain PQ trains on the vectors themselves; \
                     training chooses how neq's direction codebooks are trained"
                        .into(),
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
    if !matches!(asked, None | Some(IndexConfig::Flat)) {
        return Err(ServerError::InvalidRequest(
            "quantization_config replaces the collection's index with a scan of the codes and an \
             exact re-rank; leave index out (or set it to flat)"
                .into(),
        ));
    }
    Ok(Some(params))
}

/// Qdrant's `scalar` quantization: only `int8`, which is all Qdrant has.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScalarRequest {
    #[serde(rename = "type")]
    kind: ScalarType,
    #[serde(default)]
    quantile: Option<f64>,
    /// Where Qdrant keeps the codes when vectors are on disk; Cairn keeps codes in memory
    /// always, so either value gives the same answers.
    #[serde(default, rename = "always_ram")]
    _always_ram: Option<bool>,
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum ScalarType {
    Int8,
}

/// Qdrant's `binary` quantization: one bit per coordinate, the query's too (`one_bit`,
/// `query_encoding` `default` or `binary`); the other encodings are refused by name.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BinaryRequest {
    #[serde(default, rename = "always_ram")]
    _always_ram: Option<bool>,
    #[serde(default)]
    encoding: Option<String>,
    #[serde(default)]
    query_encoding: Option<String>,
}

/// Cairn's `rabitq` kind: RaBitQ codes of the graph's links (`hnsw/link_codes.rs` in
/// `cairn-index`), kept in memory beside the links.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RabitqRequest {
    #[serde(default, rename = "always_ram")]
    _always_ram: Option<bool>,
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
enum CodesRequest {
    Scalar(ScalarRequest),
    Binary(BinaryRequest),
    Rabitq(RabitqRequest),
}

/// Whether a `quantization_config` names one of the kinds kept beside a graph (Qdrant's
/// `scalar` and `binary`, Cairn's `rabitq`), rather than a quantized index.
fn is_graph_codes(value: &serde_json::Value) -> bool {
    ["scalar", "binary", "rabitq"]
        .iter()
        .any(|kind| value.get(kind).is_some())
}

/// The row codes a Qdrant-shaped `quantization_config` (`field`) asks for: `None` without one
/// or for Cairn's own kinds, which [`quantized_index`] reads.
fn row_codes(value: Option<&serde_json::Value>, field: &str) -> Result<Option<RowCodes>> {
    let Some(value) = value.filter(|v| is_graph_codes(v)) else {
        return Ok(None);
    };
    let invalid = |m: String| ServerError::InvalidRequest(format!("{field}: {m}"));
    let parsed: CodesRequest =
        serde_json::from_value(value.clone()).map_err(|e| invalid(e.to_string()))?;
    let codes = match parsed {
        CodesRequest::Scalar(r) => {
            let ScalarType::Int8 = r.kind;
            RowCodes::Int8 {
                quantile: r.quantile.unwrap_or(RowCodes::DEFAULT_QUANTILE),
            }
        }
        CodesRequest::Binary(r) => {
            if let Some(e) = r.encoding.filter(|e| e != "one_bit") {
                return Err(invalid(format!(
                    "binary.encoding `{e}` is not implemented; Cairn's binary codes are one_bit"
                )));
            }
            if let Some(e) = r.query_encoding.filter(|e| e != "default" && e != "binary") {
                return Err(invalid(format!(
                    "binary.query_encoding `{e}` is not implemented; queries are coded as the \
                     points are (default)"
                )));
            }
            RowCodes::Binary
        }
        CodesRequest::Rabitq(RabitqRequest { .. }) => RowCodes::Rabitq,
    };
    codes.validate().map_err(|e| invalid(e.to_string()))?;
    Ok(Some(codes))
}

/// The row codes a vector's own `quantization_config` asks for: Qdrant's kinds only.
fn vector_codes(value: Option<&serde_json::Value>, field: &str) -> Result<Option<RowCodes>> {
    match value.filter(|v| !v.is_null()) {
        None => Ok(None),
        Some(v) if is_graph_codes(v) => row_codes(Some(v), field),
        Some(_) => Err(ServerError::InvalidRequest(format!(
            "{field}: a vector's own quantization is Qdrant's scalar or binary, or Cairn's \
             rabitq; Cairn's neq and pq are set by the collection's quantization_config"
        ))),
    }
}

/// A vector's update with Qdrant 1.19's `memory` tier read as `on_disk` (`cold` is on disk,
/// `cached` and `pinned` in RAM), so either spelling restates the collection's setting.
fn memory_as_on_disk(diff: &serde_json::Value, field: &str) -> Result<serde_json::Value> {
    let mut diff = diff.clone();
    let Some(memory) = diff.as_object_mut().and_then(|d| d.remove("memory")) else {
        return Ok(diff);
    };
    let on_disk = match memory.as_str() {
        Some("cold") => true,
        Some("cached" | "pinned") => false,
        _ => {
            return Err(ServerError::InvalidRequest(format!(
                "{field}.memory: cached, pinned or cold, got {memory}"
            )))
        }
    };
    if diff
        .get("on_disk")
        .is_some_and(|given| *given != json!(on_disk))
    {
        return Err(ServerError::InvalidRequest(format!(
            "{field}.memory {memory} contradicts {field}.on_disk"
        )));
    }
    diff["on_disk"] = json!(on_disk);
    Ok(diff)
}

/// Refuses `on_disk` vectors for an index that keeps its rows in memory only.
fn check_on_disk(on_disk: bool, index: &IndexParams, field: &str) -> Result<()> {
    if !on_disk {
        return Ok(());
    }
    index
        .kind()
        .check_placement(&Placement::Mapped(Default::default()))
        .map_err(|e| ServerError::InvalidRequest(format!("{field}: {e}")))
}

/// Checks that `index` (of `field`) can keep row codes: graphs only.
fn check_codes(codes: Option<RowCodes>, index: &IndexParams, field: &str) -> Result<()> {
    match (codes, index) {
        (Some(RowCodes::Rabitq), IndexParams::IpNswPlus(_) | IndexParams::MipsAuto(_)) => {
            Err(ServerError::InvalidRequest(format!(
                "{field}: rabitq codes are kept beside an HNSW graph's links; {} searches (or \
                 may choose) ip_nsw_plus's two graphs and keeps none (use hnsw or ip_nsw, or \
                 scalar or binary)",
                index.kind().name()
            )))
        }
        (None, _)
        | (
            Some(_),
            IndexParams::Hnsw(_)
            | IndexParams::IpNsw(_)
            | IndexParams::IpNswPlus(_)
            | IndexParams::MipsAuto(_),
        ) => Ok(()),
        (
            Some(codes),
            IndexParams::Flat
            | IndexParams::SimpleLsh(_)
            | IndexParams::RangeLsh(_)
            | IndexParams::Quantized(_)
            | IndexParams::NormScan(_),
        ) => Err(ServerError::InvalidRequest(format!(
            "{field}: {} quantization speeds up graph search; the {} index keeps no codes (use \
             hnsw, ip_nsw, ip_nsw_plus or mips_auto)",
            codes.name(),
            index.kind().name()
        ))),
    }
}

/// The Qdrant-shaped `quantization_config` to report for row codes, every default filled in.
pub fn codes_json(codes: RowCodes) -> serde_json::Value {
    match codes {
        RowCodes::Int8 { quantile } => json!({
            "scalar": {"type": "int8", "quantile": quantile, "always_ram": true}
        }),
        RowCodes::Rabitq => json!({"rabitq": {"always_ram": true}}),
        RowCodes::Binary => json!({
            "binary": {"always_ram": true, "encoding": "one_bit", "query_encoding": "default"}
        }),
    }
}

/// Why an update may not change an index parameter.
const REBUILD: &str = "would need the index rebuilt, which an update does not do in Cairn; \
                       create a new collection and switch an alias to it";

/// A space's HNSW settings as an update compares them (Qdrant's names).
fn hnsw_json(space: DenseSpace<'_>, full_scan_threshold: usize) -> serde_json::Value {
    let (_, hnsw) = index_config(space.index);
    json!({
        "m": hnsw.m,
        "ef_construct": hnsw.ef_construction,
        "ef_search": hnsw.ef_search,
        "full_scan_threshold": full_scan_threshold,
        "on_disk": false,
    })
}

/// Checks that every key of `given` (an object) is in `current` with the same value; `what`
/// says why a different one is refused. An `hnsw_config`'s `max_indexing_threads` changes no
/// answer and is taken as given.
fn same_as(
    field: &str,
    given: &serde_json::Value,
    current: &serde_json::Value,
    what: &str,
) -> Result<()> {
    let Some(given) = given.as_object() else {
        return Err(ServerError::InvalidRequest(format!("{field}: an object")));
    };
    for (key, value) in given {
        if value.is_null() || (key == "max_indexing_threads" && field.ends_with("hnsw_config")) {
            continue;
        }
        match (current.get(key), value) {
            (Some(now), value) if value.is_object() && now.is_object() => {
                same_as(&format!("{field}.{key}"), value, now, what)?
            }
            (Some(now), value) if same_number(now, value) => {}
            (Some(now), value) => {
                return Err(ServerError::InvalidRequest(format!(
                    "{field}.{key}: {value} differs from the collection's {now}, and changing it \
                     {what}"
                )))
            }
            (None, _) => {
                return Err(ServerError::InvalidRequest(format!(
                    "{field}.{key}: not a setting Cairn can update"
                )))
            }
        }
    }
    Ok(())
}

/// JSON values equal, numbers by value (`32` and `32.0` alike).
fn same_number(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

/// Most bytes in a vector's name.
const MAX_VECTOR_NAME: usize = 255;

/// The vector spaces of a create request: the main one (and its name if it came in map
/// form), then the others by name. The main vector is the first name in byte order.
type Spaces<'a> = (
    Option<String>,
    &'a VectorParams,
    Vec<(&'a String, &'a VectorParams)>,
);

fn spaces(vectors: &VectorsConfig) -> Result<Spaces<'_>> {
    let named = match vectors {
        VectorsConfig::Single(params) => return Ok((None, params, Vec::new())),
        VectorsConfig::Named(named) => named,
    };
    if let Some(name) = named.keys().find(|name| name.len() > MAX_VECTOR_NAME) {
        return Err(ServerError::InvalidRequest(format!(
            "vectors: a vector name is at most {MAX_VECTOR_NAME} bytes (`{}…` is {})",
            name.chars().take(16).collect::<String>(),
            name.len()
        )));
    }
    if named.len() > MAX_DENSE_VECTORS {
        return Err(ServerError::LimitExceeded(format!(
            "vectors: {} named vectors is above the maximum of {MAX_DENSE_VECTORS}",
            named.len()
        )));
    }
    let mut entries = named.iter();
    let Some((main_name, main)) = entries.next() else {
        return Err(ServerError::InvalidRequest(
            "vectors: at least one vector is needed (collections of sparse vectors only are not \
             supported)"
                .into(),
        ));
    };
    Ok((Some(main_name.clone()), main, entries.collect()))
}

/// Checks one dense vector space's size and distance; `field` names it in messages.
fn check_space(v: &VectorParams, limits: &Limits, field: &str) -> Result<()> {
    if v.size == 0 {
        return Err(ServerError::InvalidRequest(format!(
            "{field}.size must be at least 1"
        )));
    }
    if v.size > limits.max_dim {
        return Err(ServerError::LimitExceeded(format!(
            "{field}.size {} is above the maximum of {}",
            v.size, limits.max_dim
        )));
    }
    if v.distance == Distance::Manhattan {
        return Err(ServerError::InvalidRequest(format!(
            "{field}.distance Manhattan is not supported; use Cosine, Euclid or Dot"
        )));
    }
    Ok(())
}

/// The HNSW parameters of a vector space: its own `hnsw_config`, else the collection's.
fn hnsw_params(diff: HnswConfigDiff) -> HnswParams {
    let defaults = HnswParams::default();
    let ef_construction = diff.ef_construct.unwrap_or(defaults.ef_construction);
    HnswParams {
        m: diff.m.unwrap_or(defaults.m),
        ef_construction,
        // Qdrant searches with ef = ef_construct unless told otherwise; so do we.
        ef_search: diff.ef_search.unwrap_or(ef_construction),
        seed: defaults.seed,
    }
}

/// The index a space asks for (`index`), or its distance's default: the automatic choice
/// between ip-NSW+ and ip-NSW for `Dot`, HNSW otherwise.
fn index_or_default(index: Option<IndexConfig>, distance: Distance) -> IndexConfig {
    index.unwrap_or(if distance == Distance::Dot {
        IndexConfig::MipsAuto(IpNswPlusConfig::default())
    } else {
        IndexConfig::Hnsw
    })
}

/// ip-NSW+'s parameters as asked for, every unset one at its default.
fn ip_nsw_plus_params(c: IpNswPlusConfig) -> Result<IpNswPlusParams> {
    let d = IpNswPlusParams::default();
    let p = IpNswPlusParams {
        m: c.m.unwrap_or(d.m),
        ef_construction: c.ef_construction.unwrap_or(d.ef_construction),
        ef_search: c.ef_search.unwrap_or(d.ef_search),
        cos_m: c.cos_m.unwrap_or(d.cos_m),
        cos_ef_construction: c.cos_ef_construction.unwrap_or(d.cos_ef_construction),
        cos_ef_search: c.cos_ef_search.unwrap_or(d.cos_ef_search),
        seed: d.seed,
    };
    p.validate()
        .map_err(|e| ServerError::InvalidRequest(format!("index: {e}")))?;
    Ok(p)
}

/// ip-NSW+'s parameters as collection info reports them: every one filled in.
fn ip_nsw_plus_config(p: IpNswPlusParams) -> IpNswPlusConfig {
    IpNswPlusConfig {
        m: Some(p.m),
        ef_construction: Some(p.ef_construction),
        ef_search: Some(p.ef_search),
        cos_m: Some(p.cos_m),
        cos_ef_construction: Some(p.cos_ef_construction),
        cos_ef_search: Some(p.cos_ef_search),
    }
}

/// Checks an index's parameters against the space's metric (LSH ranges, `Dot`-only kinds).
fn check_index(index: &IndexParams, metric: Metric, field: &str) -> Result<()> {
    if let IndexParams::SimpleLsh(p) | IndexParams::RangeLsh(p) = index {
        p.validate()
            .and_then(|()| index.check_lsh_ranges())
            .map_err(|e| ServerError::InvalidRequest(format!("{field}: {e}")))?;
    }
    if let IndexParams::NormScan(p) = index {
        p.validate()
            .map_err(|e| ServerError::InvalidRequest(format!("{field}: {e}")))?;
    }
    index
        .check_metric(metric)
        .map_err(|e| ServerError::InvalidRequest(format!("{field}: {e}")))
}

/// The effective index choice and HNSW parameters of an index, as collection info reports
/// them (every default filled in; a quantized index scans its codes: `flat`).
pub fn index_config(index: &IndexParams) -> (IndexConfig, HnswParams) {
    let no_hnsw = HnswParams::default();
    match *index {
        IndexParams::Quantized(_) | IndexParams::Flat => (IndexConfig::Flat, no_hnsw),
        IndexParams::Hnsw(p) => (IndexConfig::Hnsw, p),
        IndexParams::IpNsw(p) => (IndexConfig::IpNsw, p),
        IndexParams::IpNswPlus(p) => (IndexConfig::IpNswPlus(ip_nsw_plus_config(p)), no_hnsw),
        IndexParams::MipsAuto(p) => (IndexConfig::MipsAuto(ip_nsw_plus_config(p)), no_hnsw),
        IndexParams::SimpleLsh(p) => (
            IndexConfig::SimpleLsh {
                bits: Some(p.bits),
                probe_items: Some(p.probe_items),
            },
            no_hnsw,
        ),
        IndexParams::RangeLsh(p) => (
            IndexConfig::RangeLsh {
                bits: Some(p.bits),
                ranges: Some(p.ranges),
                shift: Some(p.shift),
                probe_items: Some(p.probe_items),
            },
            no_hnsw,
        ),
        IndexParams::NormScan(p) => (
            IndexConfig::NormScan {
                share: Some(p.share),
                oversampling: Some(p.oversampling),
            },
            no_hnsw,
        ),
    }
}

impl CollectionSettings {
    /// Validates a create request.
    pub fn from_request(req: &CreateCollection, limits: &Limits) -> Result<Self> {
        let (vector_name, v, others) = spaces(&req.vectors)?;
        let main_field = match &vector_name {
            Some(name) if !others.is_empty() => format!("vectors.{name}"),
            Some(_) | None => "vectors".to_owned(),
        };
        check_space(v, limits, &main_field)?;
        refuse_unsupported(req)?;
        let diff = v.hnsw_config.or(req.hnsw_config).unwrap_or_default();
        let hnsw = hnsw_params(diff);
        let hnsw_checked = |hnsw: HnswParams, field: &str| {
            hnsw.validate()
                .map_err(|e| ServerError::InvalidRequest(format!("{field}hnsw_config: {e}")))
                .map(|()| hnsw)
        };
        let asked = match (req.index, v.index) {
            (Some(a), Some(b)) if a != b => {
                return Err(ServerError::InvalidRequest(format!(
                    "index and {main_field}.index ask for different indexes for the same vector; \
                     give one"
                )))
            }
            (a, b) => a.or(b),
        };
        let quantized = quantized_index(req, asked)?;
        let index = match (quantized, index_or_default(asked, v.distance)) {
            (Some(q), _) => IndexParams::Quantized(q),
            (None, index) => Self::index_params(index, || hnsw_checked(hnsw, ""))?,
        };
        check_index(&index, metric_of(v.distance), "index")?;
        // Qdrant's collection-wide quantization applies to every dense vector; a vector's own
        // overrides it.
        let shared_codes = row_codes(req.quantization_config.as_ref(), "quantization_config")?;
        let codes = match vector_codes(
            v.quantization_config.as_ref(),
            &format!("{main_field}.quantization_config"),
        )? {
            Some(own) => Some(own),
            None => shared_codes,
        };
        check_codes(codes, &index, "quantization_config")?;
        let on_disk = v.wants_on_disk();
        check_on_disk(on_disk, &index, &format!("{main_field}.on_disk"))?;
        let mut extra_vectors = BTreeMap::new();
        for (name, params) in others {
            let field = format!("vectors.{name}");
            check_space(params, limits, &field)?;
            let own = hnsw_params(params.hnsw_config.or(req.hnsw_config).unwrap_or_default());
            let index =
                Self::index_params(index_or_default(params.index, params.distance), || {
                    hnsw_checked(own, &format!("{field}."))
                })?;
            check_index(
                &index,
                metric_of(params.distance),
                &format!("{field}.index"),
            )?;
            let codes_field = format!("{field}.quantization_config");
            let codes =
                vector_codes(params.quantization_config.as_ref(), &codes_field)?.or(shared_codes);
            check_codes(codes, &index, &codes_field)?;
            let on_disk = params.wants_on_disk();
            check_on_disk(on_disk, &index, &format!("{field}.on_disk"))?;
            extra_vectors.insert(
                name.clone(),
                ExtraVector {
                    dim: params.size,
                    distance: params.distance,
                    index,
                    codes,
                    on_disk,
                },
            );
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
            if Some(name) == vector_name.as_ref() || extra_vectors.contains_key(name) {
                return Err(ServerError::InvalidRequest(format!(
                    "sparse_vectors: `{name}` is already a dense vector's name"
                )));
            }
        }
        Ok(Self {
            vector_name,
            sparse_vectors,
            extra_vectors,
            routing,
            replication_factor: req.replication_factor.unwrap_or(1) as usize,
            write_consistency_factor: req.write_consistency_factor.unwrap_or(1) as usize,
            dim: v.size,
            distance: v.distance,
            index,
            codes,
            shared_codes,
            on_disk,
            full_scan_threshold: diff
                .full_scan_threshold
                .unwrap_or(DEFAULT_FULL_SCAN_THRESHOLD),
        })
    }

    /// Checks a `PATCH /collections/{c}` against the collection: Cairn rebuilds nothing on an
    /// update, so each parameter given must already be the collection's (Qdrant's optimizer
    /// knobs, which change no answer, are accepted). Refused fields were checked before.
    pub fn check_update(&self, req: &UpdateCollection) -> Result<()> {
        if let Some(params) = &req.params {
            let current = json!({
                "replication_factor": self.replication_factor,
                "write_consistency_factor": self.write_consistency_factor,
                "on_disk_payload": false,
            });
            same_as("params", params, &current, "is fixed at creation")?;
        }
        if let Some(hnsw) = &req.hnsw_config {
            let current = hnsw_json(self.main_space(), self.full_scan_threshold);
            same_as("hnsw_config", hnsw, &current, REBUILD)?;
        }
        let Some(vectors) = &req.vectors else {
            return Ok(());
        };
        let Some(vectors) = vectors.as_object() else {
            return Err(ServerError::InvalidRequest(
                "vectors: an object of vector names".into(),
            ));
        };
        for (name, diff) in vectors {
            let field = format!("vectors.{name}");
            let space = self.space(name, &field)?;
            let hnsw = hnsw_json(space, self.full_scan_threshold);
            let current = json!({"hnsw_config": hnsw, "on_disk": space.on_disk});
            same_as(&field, &memory_as_on_disk(diff, &field)?, &current, REBUILD)?;
        }
        Ok(())
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
            IndexConfig::IpNswPlus(c) => IndexParams::IpNswPlus(ip_nsw_plus_params(c)?),
            IndexConfig::MipsAuto(c) => IndexParams::MipsAuto(ip_nsw_plus_params(c)?),
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
            IndexConfig::NormScan {
                share,
                oversampling,
            } => {
                let d = NormScanParams::default();
                IndexParams::NormScan(NormScanParams {
                    share: share.unwrap_or(d.share),
                    oversampling: oversampling.unwrap_or(d.oversampling),
                })
            }
        })
    }

    /// The vector's name (`""`: unnamed).
    pub fn vector_name(&self) -> &str {
        self.vector_name.as_deref().unwrap_or("")
    }

    /// `vectors` as created: one unnamed vector space, or the map naming them (each beside
    /// the main one with its HNSW parameters, if it has a graph).
    pub fn vectors_config(&self) -> VectorsConfig {
        // A vector's own quantization is reported where it differs from the collection's.
        let own_codes = |codes: Option<RowCodes>| {
            (codes != self.shared_codes)
                .then(|| codes.map(codes_json))
                .flatten()
        };
        let on_disk = |on_disk: bool| on_disk.then_some(json!(true));
        let mut params = VectorParams::new(self.dim, self.distance);
        params.quantization_config = own_codes(self.codes);
        params.on_disk = on_disk(self.on_disk);
        let Some(name) = &self.vector_name else {
            return params.into();
        };
        let mut named = BTreeMap::from([(name.clone(), params)]);
        for (name, extra) in &self.extra_vectors {
            let mut params = VectorParams::new(extra.dim, extra.distance);
            params.quantization_config = own_codes(extra.codes);
            params.on_disk = on_disk(extra.on_disk);
            if let IndexParams::Hnsw(p) | IndexParams::IpNsw(p) = extra.index {
                params.hnsw_config = Some(HnswConfigDiff {
                    m: Some(p.m),
                    ef_construct: Some(p.ef_construction),
                    ..HnswConfigDiff::default()
                });
            }
            named.insert(name.clone(), params);
        }
        VectorsConfig::Named(named)
    }

    /// The main vector's space.
    pub fn main_space(&self) -> DenseSpace<'_> {
        DenseSpace {
            name: self.vector_name(),
            extra: None,
            dim: self.dim,
            distance: self.distance,
            index: &self.index,
            codes: self.codes,
            on_disk: self.on_disk,
        }
    }

    /// The dense vector space called `name` (`""`: the unnamed vector), if there is one.
    pub fn dense_space(&self, name: &str) -> Option<DenseSpace<'_>> {
        if name == self.vector_name() {
            return Some(self.main_space());
        }
        let (position, (name, extra)) = self
            .extra_vectors
            .iter()
            .enumerate()
            .find(|(_, (n, _))| n.as_str() == name)?;
        Some(DenseSpace {
            name,
            extra: Some(position),
            dim: extra.dim,
            distance: extra.distance,
            index: &extra.index,
            codes: extra.codes,
            on_disk: extra.on_disk,
        })
    }

    /// The dense vector space a search plan's `using` names (`None`: the main vector; a
    /// plan's name was checked when it was planned).
    pub fn searched_space(&self, using: Option<&str>) -> DenseSpace<'_> {
        using
            .and_then(|name| self.dense_space(name))
            .unwrap_or_else(|| self.main_space())
    }

    /// The dense vector spaces: the main one, then the others in name order.
    pub fn dense_spaces(&self) -> impl Iterator<Item = DenseSpace<'_>> {
        std::iter::once(self.main_space()).chain(self.extra_vectors.iter().enumerate().map(
            |(position, (name, extra))| DenseSpace {
                name,
                extra: Some(position),
                dim: extra.dim,
                distance: extra.distance,
                index: &extra.index,
                codes: extra.codes,
                on_disk: extra.on_disk,
            },
        ))
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

    /// The dense vector space `name` names (`using`, or a named vector sent; absent: `""`),
    /// or an error saying which the collection has.
    pub fn space(&self, name: &str, field: &str) -> Result<DenseSpace<'_>> {
        if let Some(space) = self.dense_space(name) {
            return Ok(space);
        }
        Err(ServerError::InvalidRequest(
            match (self.vector_name(), self.extra_vectors.is_empty()) {
                ("", true) => format!(
                    "{field}: the collection has one unnamed vector, not `{name}` (leave the name \
                     out or use \"\")"
                ),
                (own, true) => {
                    format!("{field}: the collection's vector is named `{own}`, not `{name}`")
                }
                (_, false) => format!(
                    "{field}: the collection has no dense vector `{name}`; it has {}",
                    self.dense_spaces()
                        .map(|s| format!("`{}`", s.name))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            },
        ))
    }

    /// Whether `with_vector` asks for any vector; a name the collection lacks is an error.
    pub fn wants_vector(&self, with_vector: Option<&WithVector>, field: &str) -> Result<bool> {
        let Some(with_vector) = with_vector else {
            return Ok(false);
        };
        if let WithVector::Names(names) = with_vector {
            for name in names {
                if !self.sparse_vectors.contains_key(name) {
                    self.space(name, &format!("{field}with_vector"))?;
                }
            }
        }
        Ok(self.dense_spaces().any(|s| with_vector.includes(s.name))
            || self
                .sparse_vectors
                .keys()
                .any(|name| with_vector.includes(name)))
    }

    /// A point's vectors as results return them: the main one under the collection's vector
    /// name, the others and the sparse ones by name.
    pub fn vectors_output(
        &self,
        dense: Vec<f32>,
        sparse: &BTreeMap<String, SparseVector>,
        extra: BTreeMap<String, Vec<f32>>,
    ) -> VectorOutput {
        if sparse.is_empty() && extra.is_empty() {
            return self.vector_output(dense);
        }
        let mut named: BTreeMap<String, VectorValue> = sparse
            .iter()
            .map(|(name, v)| (name.clone(), VectorValue::Sparse(v.clone())))
            .collect();
        named.extend(
            extra
                .into_iter()
                .map(|(name, v)| (name, VectorValue::Dense(v))),
        );
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

    /// The main vector's index metric.
    pub fn metric(&self) -> Metric {
        metric_of(self.distance)
    }
}
