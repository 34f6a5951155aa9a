use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{json, Value};

use crate::unsupported::{refuse_other_than, refuse_set, refuse_within};
use crate::{RefuseUnsupported, Unsupported};

/// Similarity of a collection, as Qdrant names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub enum Distance {
    /// Cosine similarity (vectors normalised at insert).
    Cosine,
    /// Euclidean distance.
    Euclid,
    /// Inner product.
    Dot,
    /// Accepted by the parser so the error can say it is unsupported.
    Manhattan,
}

/// HNSW knobs as Qdrant names them; all optional at creation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, utoipa::ToSchema)]
pub struct HnswConfigDiff {
    /// Links per node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub m: Option<usize>,
    /// Candidate list size during construction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ef_construct: Option<usize>,
    /// Below this many matching points a filtered query scans exactly instead of using the graph.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub full_scan_threshold: Option<usize>,
    /// Default search `ef` (a Cairn addition; Qdrant uses `ef_construct`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ef_search: Option<usize>,
}

/// The vector space of a collection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct VectorParams {
    /// Dimension.
    pub size: usize,
    /// Similarity.
    pub distance: Distance,
    /// Per-vector HNSW overrides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hnsw_config: Option<HnswConfigDiff>,
    /// This vector's index (a Cairn addition): as the collection's `index`, for one named
    /// vector. Absent: the collection's `index` for the main vector, and for the others
    /// `ip_nsw_plus` when their distance is `Dot`, `hnsw` otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<IndexConfig>,
    /// Qdrant's per-vector quantization, `scalar` or `binary`, over the collection's (Cairn's
    /// `neq` and `pq` are the collection's `quantization_config` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub quantization_config: Option<Value>,
    /// Qdrant's storage element type: only `float32`, what Cairn stores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(ignore)]
    pub datatype: Option<Value>,
    /// Qdrant's vectors kept on disk: `true` keeps the index's copy of the vectors in a
    /// memory-mapped file, which the kernel pages in as searches read it (with row codes, only
    /// the re-scored candidates) and may page out; `false` (the default) keeps them in RAM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<bool>)]
    pub on_disk: Option<Value>,
    /// Qdrant's newer spelling of `on_disk`: `cold` is `on_disk: true`; `cached` and `pinned`
    /// keep the vectors in RAM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(ignore)]
    pub memory: Option<Value>,
    /// Qdrant's several vectors per point: refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(ignore)]
    pub multivector_config: Option<Value>,
}

impl VectorParams {
    /// `size`-dimensional vectors compared by `distance`, with every option at its default.
    pub fn new(size: usize, distance: Distance) -> Self {
        Self {
            size,
            distance,
            hnsw_config: None,
            index: None,
            quantization_config: None,
            datatype: None,
            on_disk: None,
            memory: None,
            multivector_config: None,
        }
    }
}

impl RefuseUnsupported for VectorParams {
    fn refuse_unsupported(&self) -> Result<(), Unsupported> {
        refuse_set(&[("multivector_config", &self.multivector_config)])?;
        refuse_other_than(
            "datatype",
            &self.datatype,
            &[json!("float32")],
            "vectors are stored as float32",
        )?;
        refuse_other_than(
            "on_disk",
            &self.on_disk,
            &[json!(false), json!(true)],
            "on_disk is true or false",
        )?;
        refuse_other_than(
            "memory",
            &self.memory,
            &[json!("cached"), json!("pinned"), json!("cold")],
            "memory is cached, pinned or cold",
        )?;
        // Both given must agree: `cold` is on disk, the other two in RAM.
        match (&self.on_disk, &self.memory) {
            (Some(on_disk), Some(memory)) if (*memory == "cold") != (*on_disk == true) => {
                Err(Unsupported {
                    field: "memory".into(),
                    value: Some(memory.to_string()),
                    note: Some("it contradicts on_disk; give one of the two"),
                })
            }
            _ => Ok(()),
        }
    }
}

impl VectorParams {
    /// Whether the vectors are asked to live on disk (`on_disk: true` or `memory: "cold"`);
    /// call after [`RefuseUnsupported::refuse_unsupported`].
    pub fn wants_on_disk(&self) -> bool {
        self.on_disk == Some(json!(true)) || self.memory == Some(json!("cold"))
    }
}

/// A sparse vector space (an entry of `sparse_vectors`): scored by the exact dot product over
/// the dimensions a point and the query share, through an inverted index.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SparseVectorParams {
    /// `idf` weighs each query dimension by its inverse document frequency among the
    /// partition's points (Qdrant's BM25 formula, `ln((N − n + 0.5) / (n + 0.5) + 1)`);
    /// `none` (the default) scores the plain dot product.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modifier: Option<Modifier>,
    /// Index options, in Qdrant's shape.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<SparseIndexParams>,
}

impl RefuseUnsupported for SparseVectorParams {
    fn refuse_unsupported(&self) -> Result<(), Unsupported> {
        refuse_within("index", self.index.as_ref())
    }
}

/// How a sparse vector space scores (Qdrant's `modifier`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Modifier {
    /// The plain dot product.
    #[default]
    None,
    /// Query values weighted by inverse document frequency.
    Idf,
}

/// Qdrant's sparse index options. Cairn's inverted index is always exact and in memory, so
/// `full_scan_threshold` changes nothing and is accepted; what would change results or
/// storage is refused.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SparseIndexParams {
    /// Accepted; every sparse search is exact.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub full_scan_threshold: Option<usize>,
    /// Only `false`: the index lives in memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(ignore)]
    pub on_disk: Option<Value>,
    /// Only `float32`, what Cairn stores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(ignore)]
    pub datatype: Option<Value>,
}

impl RefuseUnsupported for SparseIndexParams {
    fn refuse_unsupported(&self) -> Result<(), Unsupported> {
        refuse_other_than(
            "on_disk",
            &self.on_disk,
            &[json!(false)],
            "the sparse index lives in memory",
        )?;
        refuse_other_than(
            "datatype",
            &self.datatype,
            &[json!("float32")],
            "sparse values are stored as float32",
        )
    }
}

/// `vectors` at creation and in collection info: one unnamed vector space, or Qdrant's map of
/// named ones (`{"": {…}}` is the unnamed vector in map form, which LangChain sends).
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum VectorsConfig {
    /// One unnamed vector per point.
    Single(Box<VectorParams>),
    /// Vectors by name.
    Named(BTreeMap<String, VectorParams>),
}

impl<'de> Deserialize<'de> for VectorsConfig {
    /// An object with `size` or `distance` is one vector space; any other object is a map of
    /// named ones. (An untagged enum would only say that neither shape matched.)
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let value = Value::deserialize(d)?;
        let single = value
            .as_object()
            .is_some_and(|o| o.contains_key("size") || o.contains_key("distance"));
        // The path inside `vectors` is lost at this boundary: say it in the message.
        fn within<T: serde::de::DeserializeOwned>(value: Value) -> Result<T, String> {
            serde_path_to_error::deserialize(value).map_err(|e| match e.path().to_string() {
                root if root == "." => e.into_inner().to_string(),
                path => format!("`{path}`: {}", e.into_inner()),
            })
        }
        if single {
            within(value)
                .map(|params| VectorsConfig::Single(Box::new(params)))
                .map_err(D::Error::custom)
        } else {
            within(value)
                .map(VectorsConfig::Named)
                .map_err(|e| D::Error::custom(format!("named vectors: {e}")))
        }
    }
}

impl From<VectorParams> for VectorsConfig {
    fn from(params: VectorParams) -> Self {
        VectorsConfig::Single(Box::new(params))
    }
}

impl RefuseUnsupported for VectorsConfig {
    fn refuse_unsupported(&self) -> Result<(), Unsupported> {
        match self {
            VectorsConfig::Single(params) => params.refuse_unsupported(),
            VectorsConfig::Named(named) => named.iter().try_for_each(|(name, params)| {
                params.refuse_unsupported().map_err(|e| e.within(name))
            }),
        }
    }
}

/// Which index a collection uses (a Cairn addition). Absent at creation: `mips_auto` for
/// `Dot` collections, `hnsw` otherwise. Reported with every parameter filled in.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum IndexConfig {
    /// Exact search only.
    Flat,
    /// HNSW with the collection's `hnsw_config`.
    Hnsw,
    /// ip-NSW: HNSW built and searched on the negated inner product, with the collection's
    /// `hnsw_config` (`Dot` only). What other databases do for `Dot`; kept as a baseline.
    IpNsw,
    /// ip-NSW+ (`Dot` only): an angular HNSW finds the query's direction, then a single-layer
    /// inner-product graph is searched from there. Unset parameters take their defaults.
    IpNswPlus(IpNswPlusConfig),
    /// The default for `Dot`: an exact scan until 1,024 points, then, where the norms spread
    /// (95th percentile ≥ 1.25 × the median), the norm scan (`norm_scan`'s defaults), grown
    /// into ip-NSW+ once its codes pass 64 MiB or row codes are asked for; where they do not
    /// spread, the norm scan reading every point up to 6,000 points, then ip-NSW.
    /// The graphs take these parameters (ip-NSW its `m`,
    /// `ef_construction` and `ef_search`). `explain` says which was chosen and why, and
    /// `params.hnsw_ef` is the norm scan's items read or a graph's candidate list.
    MipsAuto(IpNswPlusConfig),
    /// SimpleLSH (`Dot` only): sign random projections of items scaled by the global maximum
    /// norm. A query probes buckets until `probe_items` items, then re-ranks them exactly;
    /// `params.hnsw_ef` overrides that budget per query. Kept as Range-LSH's baseline.
    SimpleLsh {
        /// Hash bits (default 32).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        bits: Option<u32>,
        /// Items probed per query by default (default 1024).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        probe_items: Option<usize>,
    },
    /// Norm-ranging LSH (`Dot` only): SimpleLSH per norm range, buckets ranked across ranges.
    RangeLsh {
        /// Code length including the range id (default 32: 27 hash bits for 32 ranges).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        bits: Option<u32>,
        /// Norm ranges, a power of two ≥ 2 (default 32).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ranges: Option<usize>,
        /// Shift `a` of the bucket-ranking estimate p′ = a + (1 − a)·l/L (default 0.4).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        shift: Option<f32>,
        /// Items probed per query by default (default 1024).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        probe_items: Option<usize>,
    },
    /// The norm-ordered scan (`Dot` only): the items of largest norm read first, as one byte
    /// per coordinate, and the best `limit × oversampling` re-ranked by their vectors. For
    /// sets whose answers lean on the norms (recommendation factors); its cost grows with
    /// the collection. A query scans `params.hnsw_ef` items, or `share` of them by default;
    /// `params.quantization.oversampling` and `rescore` apply per query.
    NormScan {
        /// Share of the points, largest norms first, a query scans by default (0 < share ≤ 1,
        /// default 0.25).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        share: Option<f32>,
        /// Candidates re-ranked per result wanted (≥ 1, default 2).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        oversampling: Option<f32>,
    },
}

/// The parameters of ip-NSW+'s two graphs (`ip_nsw_plus`, and `mips_auto` whichever graph
/// it builds or grows into). Unset ones take their defaults.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct IpNswPlusConfig {
    /// Out-degree of the inner-product graph (default 32; lists hold up to `2·m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub m: Option<usize>,
    /// Candidate list of the inner-product insert (default 200).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ef_construction: Option<usize>,
    /// Default search `ef` (default 64).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ef_search: Option<usize>,
    /// Links per node of the angular graph (default 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cos_m: Option<usize>,
    /// Candidate list of the angular insert (default 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cos_ef_construction: Option<usize>,
    /// Angular neighbours that seed a search (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cos_ef_search: Option<usize>,
}

/// `PUT /collections/{c}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CreateCollection {
    /// The vector spaces: one unnamed, or a map of named ones. With several, the first name
    /// in byte order is the collection's **main** vector, which every point must carry and
    /// partitions are routed by; a point may leave the others out.
    pub vectors: VectorsConfig,
    /// Collection-wide HNSW settings (overridden by `vectors.hnsw_config`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hnsw_config: Option<HnswConfigDiff>,
    /// Index choice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<IndexConfig>,
    /// Partitions of the collection (Pyramid's w; also accepted as `partitions`). Points are
    /// placed by content and queries routed to the few partitions near them.
    #[serde(default, skip_serializing_if = "Option::is_none", alias = "partitions")]
    pub shard_number: Option<u32>,
    /// Partitioned collections only (a Cairn extension): the share of points, those nearest a
    /// partition boundary, also stored in the partition across it, from 0 to 1 (default 1 for
    /// Euclid and Cosine: up to twice the memory, and queries visit fewer partitions at equal
    /// recall, BENCHMARKS.md; default 0 for Dot).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spill: Option<f64>,
    /// Copies of each partition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replication_factor: Option<u32>,
    /// Replicas that must acknowledge a write before it is acknowledged to the client.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_consistency_factor: Option<u32>,
    /// Vector quantization, in Qdrant's shape (`{"product": …}`, `{"scalar": …}`) or Cairn's
    /// (`{"neq": …}`); kept untyped until the server implements one, so that a request the
    /// server cannot honour reaches it and is refused with a message, not a parse error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub quantization_config: Option<serde_json::Value>,
    /// Qdrant's `auto` or `custom` (by shard key) sharding: only `auto`; Cairn places points
    /// itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(ignore)]
    pub sharding_method: Option<Value>,
    /// Sparse vector spaces by name, beside the dense vector (hybrid search).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sparse_vectors: Option<BTreeMap<String, SparseVectorParams>>,
    /// Qdrant's per-collection request limits (strict mode): refused, as requests it would
    /// refuse would be served.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(ignore)]
    pub strict_mode_config: Option<Value>,
    /// Qdrant's user metadata stored with the collection: refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(ignore)]
    pub metadata: Option<Value>,
    /// Qdrant's (older) copy of another collection's points into the new one: refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(ignore)]
    pub init_from: Option<Value>,
}

impl CreateCollection {
    /// A request with only the vector space set; every other option at its default.
    pub fn new(size: usize, distance: Distance) -> Self {
        Self {
            vectors: VectorParams::new(size, distance).into(),
            hnsw_config: None,
            index: None,
            shard_number: None,
            spill: None,
            replication_factor: None,
            write_consistency_factor: None,
            quantization_config: None,
            sharding_method: None,
            sparse_vectors: None,
            strict_mode_config: None,
            metadata: None,
            init_from: None,
        }
    }
}

impl RefuseUnsupported for CreateCollection {
    fn refuse_unsupported(&self) -> Result<(), Unsupported> {
        refuse_within("vectors", Some(&self.vectors))?;
        refuse_other_than(
            "sharding_method",
            &self.sharding_method,
            &[json!("auto")],
            "Cairn places points by content",
        )?;
        for (name, params) in self.sparse_vectors.iter().flatten() {
            refuse_within(&format!("sparse_vectors.{name}"), Some(params))?;
        }
        refuse_set(&[
            ("strict_mode_config", &self.strict_mode_config),
            ("metadata", &self.metadata),
            ("init_from", &self.init_from),
        ])
    }
}

/// `PATCH /collections/{c}`: Qdrant's collection update. Cairn changes nothing that would
/// need its indexes rebuilt: a parameter given must equal the collection's, except Qdrant's
/// optimizer knobs, which change no answer (every point is indexed on arrival).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateCollection {
    /// Qdrant's optimizer knobs (`indexing_threshold`, `deleted_threshold`, …): accepted
    /// without effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub optimizers_config: Option<OptimizersConfigDiff>,
    /// Collection parameters (`replication_factor`, `write_consistency_factor`,
    /// `on_disk_payload`): each given must equal the collection's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub params: Option<Value>,
    /// The main vector's HNSW settings: each given must equal the collection's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub hnsw_config: Option<Value>,
    /// Per named vector: `hnsw_config` and `on_disk` (or `memory`), each equal to its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub vectors: Option<Value>,
    /// Refused: a new quantization needs the index rebuilt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(ignore)]
    pub quantization_config: Option<Value>,
    /// Refused: sparse vector spaces are fixed at creation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(ignore)]
    pub sparse_vectors: Option<Value>,
    /// Refused, as at creation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(ignore)]
    pub strict_mode_config: Option<Value>,
    /// Refused, as at creation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(ignore)]
    pub metadata: Option<Value>,
}

impl RefuseUnsupported for UpdateCollection {
    fn refuse_unsupported(&self) -> Result<(), Unsupported> {
        refuse_set(&[
            ("quantization_config", &self.quantization_config),
            ("sparse_vectors", &self.sparse_vectors),
            ("strict_mode_config", &self.strict_mode_config),
            ("metadata", &self.metadata),
        ])
    }
}

/// Qdrant's optimizer knobs in an update. Cairn indexes every point on arrival and vacuums
/// by its node's `storage` settings, so none of them changes an answer.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OptimizersConfigDiff {
    /// Share of deleted points that triggers a vacuum.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deleted_threshold: Option<f64>,
    /// Fewest points before a vacuum.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vacuum_min_vector_number: Option<usize>,
    /// Segments per shard.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_segment_number: Option<usize>,
    /// Largest segment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_segment_size: Option<usize>,
    /// Segment size above which vectors are memory-mapped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memmap_threshold: Option<usize>,
    /// Points below which a segment is not indexed (0 turns indexing off in Qdrant, a bulk
    /// load's usual step; Cairn indexes on arrival whatever it says).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub indexing_threshold: Option<usize>,
    /// Seconds between flushes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flush_interval_sec: Option<u64>,
    /// Optimization threads (a number, or `"auto"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub max_optimization_threads: Option<Value>,
}

/// What a payload index indexes a key as (Qdrant's names).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum PayloadSchemaType {
    /// Strings, matched exactly (`match.value`, `match.any`).
    Keyword,
    /// Integers (`match`, `range`).
    Integer,
    /// Numbers (`range`).
    Float,
    /// Booleans (`match.value`).
    Bool,
    /// UUID strings, in any case or with or without hyphens (`match`).
    Uuid,
    /// Text split into lower-cased words (`match.text`: every word of the query).
    Text,
    /// Datetime strings, to the microsecond (`range` with datetime bounds).
    Datetime,
    /// `{"lon", "lat"}` points (`geo_bounding_box`, `geo_radius`, `geo_polygon`).
    Geo,
}

impl PayloadSchemaType {
    /// The name Qdrant gives it.
    pub fn name(self) -> &'static str {
        match self {
            PayloadSchemaType::Keyword => "keyword",
            PayloadSchemaType::Integer => "integer",
            PayloadSchemaType::Float => "float",
            PayloadSchemaType::Bool => "bool",
            PayloadSchemaType::Uuid => "uuid",
            PayloadSchemaType::Text => "text",
            PayloadSchemaType::Datetime => "datetime",
            PayloadSchemaType::Geo => "geo",
        }
    }
}

/// `field_schema`: a type name, or Qdrant's object of the type and its options.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum PayloadFieldSchema {
    /// `"keyword"`, `"integer"`, …
    Type(PayloadSchemaType),
    /// `{"type": "text", "tokenizer": "word", …}`.
    Params(Box<PayloadSchemaParams>),
}

/// A payload index's type with Qdrant's options. Options that only say where or how the index
/// is kept (`on_disk`, `is_tenant`, `is_principal`, `lookup`, `range`) are accepted: Cairn
/// keeps every payload index in memory and serves both lookups and ranges from it. Options
/// that would change what a text condition matches are refused unless they are Cairn's
/// behaviour (`tokenizer: word`, `lowercase: true`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PayloadSchemaParams {
    /// The index type.
    #[serde(rename = "type")]
    pub kind: PayloadSchemaType,
    /// Text only: how values split into words; only `word`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub tokenizer: Option<Value>,
    /// Text only: only `true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<bool>)]
    pub lowercase: Option<Value>,
    /// Refused: token lengths, phrases, stop words, stemming and ASCII folding change what a
    /// text condition matches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(ignore)]
    pub min_token_len: Option<Value>,
    /// Refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(ignore)]
    pub max_token_len: Option<Value>,
    /// Refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(ignore)]
    pub phrase_matching: Option<Value>,
    /// Refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(ignore)]
    pub stopwords: Option<Value>,
    /// Refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(ignore)]
    pub stemmer: Option<Value>,
    /// Refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(ignore)]
    pub ascii_folding: Option<Value>,
}

impl PayloadFieldSchema {
    /// The index type.
    pub fn kind(&self) -> PayloadSchemaType {
        match self {
            PayloadFieldSchema::Type(kind) => *kind,
            PayloadFieldSchema::Params(params) => params.kind,
        }
    }
}

impl RefuseUnsupported for PayloadFieldSchema {
    fn refuse_unsupported(&self) -> Result<(), Unsupported> {
        let PayloadFieldSchema::Params(p) = self else {
            return Ok(());
        };
        refuse_other_than(
            "tokenizer",
            &p.tokenizer,
            &[json!("word")],
            "text indexes split on non-alphanumeric characters (`word`)",
        )?;
        refuse_other_than(
            "lowercase",
            &p.lowercase,
            &[json!(true)],
            "text indexes lower-case every word",
        )?;
        refuse_set(&[
            ("min_token_len", &p.min_token_len),
            ("max_token_len", &p.max_token_len),
            ("phrase_matching", &p.phrase_matching),
            ("stopwords", &p.stopwords),
            ("stemmer", &p.stemmer),
            ("ascii_folding", &p.ascii_folding),
        ])
    }
}

/// `PUT /collections/{c}/index`: index a payload key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CreateFieldIndex {
    /// The key (dotted paths and `a[].b` reach into objects and arrays).
    pub field_name: String,
    /// What to index it as; required (Qdrant infers it from existing data, which would make
    /// the index depend on whichever points happen to be there).
    #[serde(default)]
    pub field_schema: Option<PayloadFieldSchema>,
}

impl RefuseUnsupported for CreateFieldIndex {
    fn refuse_unsupported(&self) -> Result<(), Unsupported> {
        refuse_within("field_schema", self.field_schema.as_ref())
    }
}

/// One payload index, as `payload_schema` in collection info reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PayloadIndexInfo {
    /// What the key is indexed as.
    pub data_type: PayloadSchemaType,
    /// Points with at least one indexed value at the key.
    pub points: u64,
}

/// `POST /collections/aliases`: alias changes, applied together or not at all.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ChangeAliases {
    /// In order; a later one sees the earlier ones (delete then create switches an alias).
    pub actions: Vec<AliasOperation>,
}

/// One alias change, in Qdrant's shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum AliasOperation {
    /// A new alias of a collection (an alias or collection of that name is a 409).
    CreateAlias(CreateAlias),
    /// Removes an alias (an unknown one is a 404).
    DeleteAlias(DeleteAlias),
    /// Gives an alias another name.
    RenameAlias(RenameAlias),
}

/// `create_alias`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateAlias {
    /// The collection.
    pub collection_name: String,
    /// The alias.
    pub alias_name: String,
}

/// `delete_alias`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DeleteAlias {
    /// The alias.
    pub alias_name: String,
}

/// `rename_alias`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RenameAlias {
    /// Its name now.
    pub old_alias_name: String,
    /// Its new name.
    pub new_alias_name: String,
}

/// One alias.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AliasDescription {
    /// The alias.
    pub alias_name: String,
    /// The collection it names.
    pub collection_name: String,
}

/// `GET /aliases`, `GET /collections/{c}/aliases`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CollectionsAliases {
    /// The aliases, by name.
    pub aliases: Vec<AliasDescription>,
}

/// Effective HNSW settings of a collection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct HnswConfig {
    /// Links per node.
    pub m: usize,
    /// Construction candidate list size.
    pub ef_construct: usize,
    /// Exact-scan threshold for filtered queries.
    pub full_scan_threshold: usize,
    /// Default search `ef`.
    pub ef_search: usize,
    /// Always 0: Cairn links with all cores.
    pub max_indexing_threads: usize,
    /// Always false: indexes live in memory.
    pub on_disk: bool,
}

/// Collection parameters as reported.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CollectionParams {
    /// The vector space, in the shape it was created with.
    pub vectors: VectorsConfig,
    /// Sparse vector spaces by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sparse_vectors: Option<BTreeMap<String, SparseVectorParams>>,
    /// Partitions of the collection.
    pub shard_number: u32,
    /// Copies of each partition.
    pub replication_factor: u32,
    /// Replicas that must acknowledge a write.
    pub write_consistency_factor: u32,
    /// Payloads live in memory.
    pub on_disk_payload: bool,
}

/// Optimizer settings as Qdrant reports them (Cairn's equivalents, for client compatibility).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct OptimizersConfig {
    /// Share of deleted slots that triggers an index rebuild.
    pub deleted_threshold: f64,
    /// Minimum vectors before a rebuild is considered.
    pub vacuum_min_vector_number: usize,
    /// Always 1.
    pub default_segment_number: usize,
    /// Not used.
    pub max_segment_size: Option<usize>,
    /// Not used.
    pub memmap_threshold: Option<usize>,
    /// Points are indexed on arrival (0 = always).
    pub indexing_threshold: usize,
    /// Seconds between index snapshots.
    pub flush_interval_sec: u64,
    /// Not used.
    pub max_optimization_threads: Option<usize>,
}

/// Write-ahead log settings as Qdrant reports them (RocksDB's WAL here).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WalConfig {
    /// Nominal WAL size.
    pub wal_capacity_mb: usize,
    /// Not used.
    pub wal_segments_ahead: usize,
}

/// Full configuration of a collection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CollectionConfig {
    /// Parameters.
    pub params: CollectionParams,
    /// HNSW settings.
    pub hnsw_config: HnswConfig,
    /// Optimizer settings.
    pub optimizer_config: OptimizersConfig,
    /// WAL settings.
    pub wal_config: WalConfig,
    /// Qdrant's quantization as Cairn implements it, the collection's own (each vector's
    /// own, where it differs, is in `params.vectors`): `scalar` (int8) or `binary` row codes,
    /// every default filled in; null without.
    #[schema(value_type = Option<Object>)]
    pub quantization_config: Option<serde_json::Value>,
    /// Cairn's quantization (`{"neq": …}`, `{"pq": …}` or `{"rabitq": …}`, every default
    /// filled in), apart
    /// from `quantization_config` so that Qdrant's clients, whose models know only Qdrant's
    /// kinds, still read the collection's info.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub cairn_quantization_config: Option<serde_json::Value>,
    /// Cairn's index choice (the main vector's, when there are several).
    pub index: IndexConfig,
    /// The index of each named vector beside the main one (a Cairn addition; absent when
    /// there is none).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub vector_indexes: BTreeMap<String, IndexConfig>,
}

/// `GET /collections/{c}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CollectionInfo {
    /// `green` when loaded.
    pub status: String,
    /// `ok` unless a rebuild failed.
    pub optimizer_status: String,
    /// Live points.
    pub vectors_count: u64,
    /// Points searchable through the index.
    pub indexed_vectors_count: u64,
    /// Live points.
    pub points_count: u64,
    /// Always 1 per partition.
    pub segments_count: u64,
    /// Configuration.
    pub config: CollectionConfig,
    /// Payload indexes by key.
    pub payload_schema: BTreeMap<String, PayloadIndexInfo>,
    /// How a partitioned collection is routed (absent for one partition).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routing: Option<RoutingInfo>,
}

/// The routing state of a partitioned collection, as collection info reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RoutingInfo {
    /// `untrained` (all points in partition 0), `migrating` (points moving to a newly
    /// trained router) or `routed`.
    pub phase: String,
    /// Routing-table version (0 before the first training).
    pub version: u64,
    /// Partitions.
    pub partitions: usize,
    /// k-means centres of the router.
    pub centres: usize,
    /// Centres a query looks up by default (tuned at each training).
    pub branching: usize,
    /// Share of points also stored in a second partition, those nearest a partition boundary.
    #[serde(default)]
    pub spill: f64,
    /// Points at which the router is first trained.
    pub train_at_points: u64,
    /// Points the collection held at the last training (0 before it).
    pub trained_at_points: u64,
    /// Size of the last training sample.
    pub sample_points: u64,
    /// `Dot`: vectors at least this long are stored in every partition.
    pub replicate_from_norm: Option<f32>,
    /// The collection is due a (re)training the background rebalancer has not started yet:
    /// `routed` and not due means the routing is settled.
    pub training_due: bool,
    /// Points stored in each partition (replicated points count in each).
    pub partition_points: Vec<u64>,
    /// On a cluster node: each partition's replicas, as this node sees them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replicas: Vec<Vec<ReplicaInfo>>,
}

/// One replica of a partition, as the answering node sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ReplicaInfo {
    /// The node that holds it, as `node {id}`.
    pub node: String,
    /// `active` (the answering node's own replica, or one the partition's leader knows holds
    /// all it has applied), `lagging` (one the leader knows is behind) or `unknown` (another
    /// node's replica, seen from a node that does not lead the partition: only the leader
    /// knows how far the others are).
    pub state: String,
    /// Its last sequence number (only for the answering node's own replica).
    pub last_seq: Option<u64>,
    /// Its live points (only for the answering node's own replica).
    pub points: Option<u64>,
    /// Peer nodes: the id of the node that holds the replica.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_id: Option<u64>,
    /// Peer nodes: the replica's id in its partition's Raft group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica_id: Option<u64>,
    /// Peer nodes: `Leader`, `Follower`, `Candidate` or `Learner`, as the answering node sees
    /// the group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// Peer nodes: the group's term, as the answering node sees it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub term: Option<u64>,
    /// Peer nodes: the last log index the replica has applied (for another node's replica,
    /// the last one the leader knows it holds; absent when unknown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied: Option<u64>,
    /// Peer nodes, the answering node's own replica: the last log index it has discarded
    /// behind a snapshot (a replica that needs an earlier entry gets the snapshot).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub purged: Option<u64>,
}

/// One entry of `GET /collections`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CollectionDescription {
    /// Collection name.
    pub name: String,
}

/// `GET /collections`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CollectionsList {
    /// All collections, by name.
    pub collections: Vec<CollectionDescription>,
}

/// `GET /collections/{c}/exists`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CollectionExists {
    /// Whether it exists.
    pub exists: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The refusal message of a create request: `vectors` and `extra` merged into
    /// `{"vectors": {"size": 4, "distance": "Dot"}}`.
    fn refused(vectors: Value, extra: Value) -> Option<String> {
        let mut request = json!({"vectors": {"size": 4, "distance": "Dot"}});
        request["vectors"]
            .as_object_mut()
            .unwrap()
            .extend(vectors.as_object().unwrap().clone());
        request
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let request: CreateCollection = serde_json::from_value(request).unwrap();
        request.refuse_unsupported().err().map(|e| e.to_string())
    }

    #[test]
    fn create_refuses_what_would_change_what_is_stored() {
        let none = json!({});
        let cases = [
            (
                json!({"datatype": "float16"}),
                &none,
                r#"vectors.datatype: "float16" is not supported"#,
            ),
            (
                json!({"on_disk": "yes"}),
                &none,
                r#"vectors.on_disk: "yes" is not supported"#,
            ),
            (
                json!({"memory": "frozen"}),
                &none,
                r#"vectors.memory: "frozen" is not supported"#,
            ),
            (
                json!({"on_disk": true, "memory": "pinned"}),
                &none,
                r#"vectors.memory: "pinned" is not supported"#,
            ),
            (
                json!({"multivector_config": {"comparator": "max_sim"}}),
                &none,
                "vectors.multivector_config: not supported",
            ),
            (
                json!({}),
                &json!({"sharding_method": "custom"}),
                r#"sharding_method: "custom" is not supported"#,
            ),
            (
                json!({}),
                &json!({"sparse_vectors": {"text": {"index": {"on_disk": true}}}}),
                "sparse_vectors.text.index.on_disk: true is not supported",
            ),
            (
                json!({}),
                &json!({"strict_mode_config": {"enabled": true}}),
                "strict_mode_config: not supported",
            ),
            (
                json!({}),
                &json!({"metadata": {"team": "search"}}),
                "metadata: not supported",
            ),
            (
                json!({}),
                &json!({"init_from": {"collection": "old"}}),
                "init_from: not supported",
            ),
        ];
        for (vectors, extra, needle) in cases {
            let message = refused(vectors.clone(), extra.clone()).unwrap_or_default();
            assert!(
                message.starts_with(needle),
                "{vectors} {extra}: {message:?}"
            );
        }
    }

    #[test]
    fn create_accepts_cairns_own_behaviour_nulls_and_tuning_knobs() {
        let vectors = json!({"datatype": "float32", "on_disk": false, "memory": "cached",
            "quantization_config": null, "hnsw_config": {"m": 8, "on_disk": true, "payload_m": 4}});
        let extra = json!({"sharding_method": "auto", "sparse_vectors": {}, "metadata": null,
            "on_disk_payload": true, "wal_config": {"wal_capacity_mb": 64},
            "optimizers_config": {"indexing_threshold": 0}, "payload": {"memory": "cold"},
            "id_tracker": {"memory": "cold"}});
        assert_eq!(refused(vectors, extra), None);
    }

    /// LangChain's shape (`{"": {…}}`) and a named vector parse as a map; what a named vector
    /// refuses is named by its path.
    #[test]
    fn vectors_come_unnamed_or_as_a_map_of_named_ones() {
        let parse = |v: Value| serde_json::from_value::<VectorsConfig>(v);
        let unnamed = parse(json!({"size": 4, "distance": "Cosine"})).unwrap();
        assert_eq!(unnamed, VectorParams::new(4, Distance::Cosine).into());
        let named = parse(json!({"": {"size": 4, "distance": "Cosine"}})).unwrap();
        assert_eq!(
            named,
            VectorsConfig::Named(BTreeMap::from([(
                String::new(),
                VectorParams::new(4, Distance::Cosine)
            )]))
        );
        let err = parse(json!({"dense": {"size": 4}}))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("named vectors") && err.contains("distance"),
            "{err}"
        );
        let refused = parse(json!({"dense": {"size": 4, "distance": "Dot", "on_disk": 1}}))
            .unwrap()
            .refuse_unsupported()
            .unwrap_err();
        assert_eq!(refused.field, "dense.on_disk");
        // A map round-trips in its own shape: collection info reports what was created.
        assert_eq!(
            serde_json::to_value(&named).unwrap(),
            json!({"": {"size": 4, "distance": "Cosine"}})
        );
    }

    #[test]
    fn the_rust_client_never_sends_refused_fields() {
        assert_eq!(
            serde_json::to_value(CreateCollection::new(4, Distance::Cosine)).unwrap(),
            json!({"vectors": {"size": 4, "distance": "Cosine"}})
        );
    }
}

/// `POST /collections/{c}/cluster`: one change to where a partition's replicas are (Qdrant's
/// cluster operations; its `shard_id` is Cairn's partition). The change is recorded at once
/// and carried out in the background; `GET /collections/{c}/cluster` shows it under way in
/// `shard_transfers`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum ClusterOperation {
    /// Add a replica on `to_peer_id`, then remove the one on `from_peer_id`.
    MoveShard(ShardTransfer),
    /// Add a replica on `to_peer_id`.
    ReplicateShard(ShardTransfer),
    /// Remove the replica on `peer_id`.
    DropReplica(DropReplica),
    /// Call off a move or replication still under way: the replica on `to_peer_id` goes, the
    /// one on `from_peer_id` stays.
    AbortTransfer(AbortTransfer),
}

/// A move to call off (Qdrant's `AbortShardTransfer`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AbortTransfer {
    /// The partition.
    pub shard_id: u32,
    /// The node the replica was leaving (or copied from).
    pub from_peer_id: u64,
    /// The node the replica was going to.
    pub to_peer_id: u64,
}

/// A partition's replica going from one node to another.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ShardTransfer {
    /// The partition.
    pub shard_id: u32,
    /// The node giving a replica up (a move), or the one copied from (a replication: any
    /// replica serves the copy here, so it only has to hold one).
    pub from_peer_id: u64,
    /// The node receiving a replica.
    pub to_peer_id: u64,
    /// Qdrant's transfer method (`stream_records`, `snapshot`, `wal_delta`): accepted and not
    /// used. A new replica here always gets the partition's Raft log, or a snapshot when the
    /// log no longer reaches back; the result is the same replica either way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
}

/// A replica to remove.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DropReplica {
    /// The partition.
    pub shard_id: u32,
    /// The node whose replica goes.
    pub peer_id: u64,
}
