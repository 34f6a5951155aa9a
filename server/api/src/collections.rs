use serde::{Deserialize, Serialize};

/// Similarity of a collection, as Qdrant names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct VectorParams {
    /// Dimension.
    pub size: usize,
    /// Similarity.
    pub distance: Distance,
    /// Per-vector HNSW overrides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hnsw_config: Option<HnswConfigDiff>,
}

/// Which index a collection uses (a Cairn addition; default `hnsw`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum IndexConfig {
    /// Exact search only.
    Flat,
    /// HNSW with the collection's `hnsw_config`.
    Hnsw,
}

/// `PUT /collections/{c}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CreateCollection {
    /// The vector space.
    pub vectors: VectorParams,
    /// Collection-wide HNSW settings (overridden by `vectors.hnsw_config`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hnsw_config: Option<HnswConfigDiff>,
    /// Index choice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<IndexConfig>,
    /// Partitions of the collection (Qdrant's name; the server refuses values it cannot honour).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard_number: Option<u32>,
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
    pub quantization_config: Option<serde_json::Value>,
}

impl CreateCollection {
    /// A request with only the vector space set; every other option at its default.
    pub fn new(size: usize, distance: Distance) -> Self {
        Self {
            vectors: VectorParams {
                size,
                distance,
                hnsw_config: None,
            },
            hnsw_config: None,
            index: None,
            shard_number: None,
            replication_factor: None,
            write_consistency_factor: None,
            quantization_config: None,
        }
    }
}

/// Effective HNSW settings of a collection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CollectionParams {
    /// The vector space.
    pub vectors: VectorParams,
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WalConfig {
    /// Nominal WAL size.
    pub wal_capacity_mb: usize,
    /// Not used.
    pub wal_segments_ahead: usize,
}

/// Full configuration of a collection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CollectionConfig {
    /// Parameters.
    pub params: CollectionParams,
    /// HNSW settings.
    pub hnsw_config: HnswConfig,
    /// Optimizer settings.
    pub optimizer_config: OptimizersConfig,
    /// WAL settings.
    pub wal_config: WalConfig,
    /// Quantization (none yet).
    pub quantization_config: Option<serde_json::Value>,
    /// Cairn's index choice.
    pub index: IndexConfig,
}

/// `GET /collections/{c}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    /// Payload indexes (none; filters run on in-memory payloads).
    pub payload_schema: serde_json::Map<String, serde_json::Value>,
}

/// One entry of `GET /collections`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CollectionDescription {
    /// Collection name.
    pub name: String,
}

/// `GET /collections`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CollectionsList {
    /// All collections, by name.
    pub collections: Vec<CollectionDescription>,
}

/// `GET /collections/{c}/exists`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CollectionExists {
    /// Whether it exists.
    pub exists: bool,
}
