use std::fmt;

use serde::de::{Error as _, MapAccess, SeqAccess, Unexpected, Visitor};
use serde::{Deserialize, Deserializer, Serialize};

use crate::points::{dense, dense_opt, dense_vec, PointIdVisitor};
use crate::sparse::sparse_after_key;
use crate::unsupported::{refuse_each, refuse_set, refuse_within};
use crate::{
    Filter, Payload, PointId, RefuseUnsupported, SparseVector, Unsupported, VectorOutput,
    WithPayload, WithVector,
};

/// Per-query search knobs (`params`).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SearchParams {
    /// HNSW candidate list size for this query.
    #[serde(default)]
    pub hnsw_ef: Option<usize>,
    /// Exact brute-force search instead of the index.
    #[serde(default)]
    pub exact: Option<bool>,
    /// How a quantized collection uses its codes (Qdrant's shape). A collection without
    /// quantization ignores it, as Qdrant does, so one client can query both kinds.
    #[serde(default)]
    pub quantization: Option<QuantizationSearchParams>,
    /// Partitioned collections: visit at most this many partitions (the best-ranked ones).
    /// A collection that is not partitioned refuses it.
    #[serde(default)]
    pub probe: Option<usize>,
    /// Partitioned collections: router centres looked up (Pyramid's branching factor K); the
    /// query visits the partitions owning them. More centres, more partitions, higher recall.
    #[serde(default)]
    pub branching: Option<usize>,
    /// Cluster: when a partition has no live replica, answer from the others with a
    /// `warning` and `explain.partitions.coverage` below 1 (the default), or fail with 503
    /// (`false`).
    #[serde(default)]
    pub allow_partial: Option<bool>,
    /// Cluster: straggler mitigation for a partition read through another node — a read
    /// still unanswered after the recent p95 is hedged to a second replica's node, within a
    /// budget (the default); `false` sends no hedge but still picks replicas by requests in
    /// flight and recent latency (to measure what hedging buys).
    #[serde(default)]
    pub hedge: Option<bool>,
}

/// Per-query knobs of quantized search (`params.quantization`).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, utoipa::ToSchema)]
pub struct QuantizationSearchParams {
    /// Search full vectors only, ignoring the codes.
    #[serde(default)]
    pub ignore: Option<bool>,
    /// Re-score the candidates found by codes with full vectors.
    #[serde(default)]
    pub rescore: Option<bool>,
    /// Candidates fetched by codes per result wanted, before re-scoring (at least 1).
    #[serde(default)]
    pub oversampling: Option<f64>,
}

/// What a query asks for: points near a vector, a stored point's vector or a sparse vector
/// (also as `{"nearest": …}`), or the fusion of its `prefetch` results.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum QueryInput {
    /// A raw dense vector.
    Vector(Vec<f32>),
    /// The vector of the point with this id.
    Point(PointId),
    /// A sparse vector (`using` names the sparse vector space).
    Sparse(SparseVector),
    /// `{"nearest": vector | id | sparse vector}`, optionally re-ranked for diversity (`mmr`).
    Nearest {
        /// The target.
        nearest: NearestTarget,
        /// Maximal marginal relevance: pick each next result by relevance minus its similarity
        /// to the results already picked.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mmr: Option<Mmr>,
    },
    /// `{"fusion": "rrf" | "dbsf"}`: merge the `prefetch` results.
    Fusion {
        /// How.
        fusion: Fusion,
    },
    /// `{"rrf": {"k", "weights"}}`: reciprocal rank fusion with its parameters.
    Rrf {
        /// The parameters.
        rrf: Rrf,
    },
    /// `{"recommend": {"positive", "negative", "strategy"}}`: points like the positive
    /// examples and unlike the negative ones; the examples given by id are left out of the
    /// results.
    Recommend {
        /// The examples.
        recommend: RecommendInput,
    },
    /// `{"discover": {"target", "context"}}`: points near the target within the zones the
    /// context pairs mark out (nearer each pair's positive than its negative).
    Discover {
        /// The target and the pairs.
        discover: DiscoverInput,
    },
    /// `{"context": [{"positive", "negative"}]}`: points within the zones the pairs mark out,
    /// scored by how far outside them they lie (0 inside every one).
    Context {
        /// The pairs (one, or a list).
        #[schema(value_type = Vec<ContextPair>)]
        context: ContextInput,
    },
}

/// `discover`'s target and context.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DiscoverInput {
    /// What to search near: a dense vector or a point id.
    pub target: NearestTarget,
    /// The pairs (one, or a list).
    #[schema(value_type = Vec<ContextPair>)]
    pub context: ContextInput,
}

/// A context pair: the zone nearer `positive` than `negative`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ContextPair {
    /// A dense vector or a point id.
    pub positive: NearestTarget,
    /// A dense vector or a point id.
    pub negative: NearestTarget,
}

/// One context pair or a list of them, as Qdrant accepts either.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ContextInput {
    /// Several pairs.
    Pairs(Vec<ContextPair>),
    /// One pair.
    Pair(ContextPair),
}

impl ContextInput {
    /// The pairs.
    pub fn into_pairs(self) -> Vec<ContextPair> {
        match self {
            ContextInput::Pairs(pairs) => pairs,
            ContextInput::Pair(pair) => vec![pair],
        }
    }
}

/// Examples to recommend from (Qdrant's `RecommendInput`): each a dense vector or a point id.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RecommendInput {
    /// Points the results should be like.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub positive: Option<Vec<NearestTarget>>,
    /// Points the results should be unlike.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub negative: Option<Vec<NearestTarget>>,
    /// How the examples become a ranking (default `average_vector`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<RecommendStrategy>,
}

/// Qdrant's recommendation strategies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RecommendStrategy {
    /// One search near `2·mean(positive) − mean(negative)` (near `mean(positive)` without
    /// negatives).
    AverageVector,
    /// Each point scored by its best positive and best negative similarity.
    BestScore,
    /// Each point scored by its summed positive minus negative similarities.
    SumScores,
}

/// How prefetch results are merged (Qdrant's `Fusion`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Fusion {
    /// Reciprocal rank fusion: each list adds `1 / (k + rank)` (rank from 0, `k` = 2 as in
    /// Qdrant); scores are ignored, only the order counts.
    Rrf,
    /// Distribution-based score fusion: each list's scores are normalised by their mean ± 3
    /// standard deviations to [0, 1], then summed.
    Dbsf,
}

/// Reciprocal rank fusion's parameters.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Rrf {
    /// The rank constant (default 2, Qdrant's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub k: Option<usize>,
    /// One weight per prefetch: a list of weight `w` adds `1 / ((rank + 1) / w + k − 1)`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "dense_opt"
    )]
    pub weights: Option<Vec<f32>>,
}

/// Qdrant's maximal marginal relevance: the `candidates_limit` nearest points are fetched, then
/// results are picked one at a time, each maximising `(1 − diversity) · relevance −
/// diversity · (its highest similarity to a result already picked)`. Scores stay the
/// similarities to the query; the order is the order of picking.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Mmr {
    /// From 0 (relevance only) to 1 (diversity only); default 0.5.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diversity: Option<f32>,
    /// Nearest points to choose from (default: the query's `limit`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidates_limit: Option<usize>,
}

/// Target of a `nearest` query.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum NearestTarget {
    /// A raw dense vector.
    Vector(Vec<f32>),
    /// The vector of the point with this id.
    Point(PointId),
    /// A sparse vector.
    Sparse(SparseVector),
}

// Both targets dispatch on the JSON type instead of deriving `untagged`, which buffers the
// whole value (128 floats) before trying each variant in turn, and whose error only says that
// no variant matched.
impl<'de> Deserialize<'de> for QueryInput {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(TargetVisitor { nearest: true })
    }
}

impl<'de> Deserialize<'de> for NearestTarget {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match d.deserialize_any(TargetVisitor { nearest: false })? {
            QueryInput::Vector(v) => Ok(NearestTarget::Vector(v)),
            QueryInput::Point(id) => Ok(NearestTarget::Point(id)),
            QueryInput::Sparse(v) => Ok(NearestTarget::Sparse(v)),
            QueryInput::Nearest { nearest, mmr: None } => Ok(nearest),
            QueryInput::Nearest { mmr: Some(_), .. }
            | QueryInput::Fusion { .. }
            | QueryInput::Rrf { .. }
            | QueryInput::Recommend { .. }
            | QueryInput::Discover { .. }
            | QueryInput::Context { .. } => Err(D::Error::invalid_type(
                Unexpected::Map,
                &"a vector, a sparse vector or a point id",
            )),
        }
    }
}

/// Reads a query target; `nearest` also accepts `{"nearest": …}` and the fusions.
struct TargetVisitor {
    nearest: bool,
}

impl<'de> Visitor<'de> for TargetVisitor {
    type Value = QueryInput;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of numbers (a vector), a sparse vector or a point id")?;
        if self.nearest {
            f.write_str(", or {\"nearest\": …}, {\"recommend\": …} or {\"fusion\": …}")?;
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<QueryInput, A::Error> {
        dense(seq).map(QueryInput::Vector)
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<QueryInput, E> {
        PointIdVisitor.visit_u64(v).map(QueryInput::Point)
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<QueryInput, E> {
        PointIdVisitor.visit_i64(v).map(QueryInput::Point)
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<QueryInput, E> {
        PointIdVisitor.visit_str(v).map(QueryInput::Point)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<QueryInput, A::Error> {
        let Some(first) = map.next_key::<String>()? else {
            return Err(A::Error::custom("an empty object is not a query"));
        };
        match first.as_str() {
            "indices" | "values" => {
                return sparse_after_key(&first, map).map(QueryInput::Sparse);
            }
            _ if !self.nearest => return Err(A::Error::invalid_type(Unexpected::Map, &self)),
            "fusion" => {
                let fusion = map.next_value()?;
                return only(map, "fusion").map(|()| QueryInput::Fusion { fusion });
            }
            "rrf" => {
                let rrf = map.next_value()?;
                return only(map, "rrf").map(|()| QueryInput::Rrf { rrf });
            }
            "recommend" => {
                let recommend = map.next_value()?;
                return only(map, "recommend").map(|()| QueryInput::Recommend { recommend });
            }
            "discover" => {
                let discover = map.next_value()?;
                return only(map, "discover").map(|()| QueryInput::Discover { discover });
            }
            "context" => {
                let context = map.next_value()?;
                return only(map, "context").map(|()| QueryInput::Context { context });
            }
            _ => {}
        }
        let (mut nearest, mut mmr) = (None, None);
        let mut key = Some(first);
        while let Some(k) = key {
            match k.as_str() {
                "nearest" if nearest.is_none() => nearest = Some(map.next_value()?),
                "nearest" => return Err(A::Error::duplicate_field("nearest")),
                // Null means unset, as clients send it.
                "mmr" if mmr.is_none() => mmr = map.next_value::<Option<Mmr>>()?,
                "mmr" => return Err(A::Error::duplicate_field("mmr")),
                other => {
                    return Err(A::Error::custom(format!(
                        "unsupported query `{other}`: Cairn answers a vector, a sparse vector, \
                         a point id, {{\"nearest\": …}}, {{\"recommend\": …}}, \
                         {{\"discover\": …}}, {{\"context\": …}}, {{\"fusion\": …}} or \
                         {{\"rrf\": …}}"
                    )))
                }
            }
            key = map.next_key()?;
        }
        nearest
            .map(|nearest| QueryInput::Nearest { nearest, mmr })
            .ok_or_else(|| A::Error::missing_field("nearest"))
    }
}

/// Fails if `map` holds another key after `field`'s.
fn only<'de, A: MapAccess<'de>>(mut map: A, field: &str) -> Result<(), A::Error> {
    match map.next_key::<String>()? {
        None => Ok(()),
        Some(other) => Err(A::Error::custom(format!(
            "`{other}` beside `{field}`: a {field} query has no other field"
        ))),
    }
}

/// A sub-query whose results the query above it fuses or re-scores (Qdrant's `prefetch`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(no_recursion)]
pub struct Prefetch {
    /// Its own sub-queries.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "one_or_many"
    )]
    pub prefetch: Option<Vec<Prefetch>>,
    /// What it searches near (a fusion when it has sub-queries of its own).
    #[serde(default)]
    pub query: Option<QueryInput>,
    /// Vector name.
    #[serde(default)]
    pub using: Option<String>,
    /// Only points matching this filter (and the query's own filter, which applies to every
    /// prefetch, as in Qdrant).
    #[serde(default)]
    pub filter: Option<Filter>,
    /// Search knobs.
    #[serde(default)]
    pub params: Option<SearchParams>,
    /// Drop results scoring worse than this.
    #[serde(default)]
    pub score_threshold: Option<f32>,
    /// Candidates it passes up (default 10).
    #[serde(default)]
    pub limit: Option<usize>,
    /// Qdrant's "take the query vector from another collection": refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(ignore)]
    pub lookup_from: Option<serde_json::Value>,
}

impl RefuseUnsupported for Prefetch {
    fn refuse_unsupported(&self) -> Result<(), Unsupported> {
        refuse_set(&[("lookup_from", &self.lookup_from)])?;
        refuse_within("filter", self.filter.as_ref())?;
        refuse_each("prefetch", self.prefetch.as_deref().unwrap_or_default())
    }
}

/// `prefetch` is one sub-query or a list of them, as in Qdrant.
fn one_or_many<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<Prefetch>>, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Option<Vec<Prefetch>>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a prefetch object or a list of them")
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
            Vec::deserialize(serde::de::value::SeqAccessDeserializer::new(seq)).map(Some)
        }
        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
            Prefetch::deserialize(serde::de::value::MapAccessDeserializer::new(map))
                .map(|p| Some(vec![p]))
        }
    }
    d.deserialize_any(V)
}

/// `POST /collections/{c}/points/query` (the universal query API).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, utoipa::ToSchema)]
pub struct QueryRequest {
    /// What to search near; without it, points come back in id order (like scroll).
    #[serde(default)]
    pub query: Option<QueryInput>,
    /// Only points matching this filter.
    #[serde(default)]
    pub filter: Option<Filter>,
    /// Search knobs.
    #[serde(default)]
    pub params: Option<SearchParams>,
    /// Number of results (default 10).
    #[serde(default)]
    pub limit: Option<usize>,
    /// Results to skip.
    #[serde(default)]
    pub offset: Option<usize>,
    /// Payload selection (default: none).
    #[serde(default)]
    pub with_payload: Option<WithPayload>,
    /// Vector selection (default: none).
    #[serde(default)]
    pub with_vector: Option<WithVector>,
    /// Drop results scoring worse than this (for Euclid: farther than this).
    #[serde(default)]
    pub score_threshold: Option<f32>,
    /// Vector name: the collection's dense vector (its name, or none when unnamed) or one of
    /// its sparse vectors.
    #[serde(default)]
    pub using: Option<String>,
    /// Also report how the query was executed (a Cairn addition).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explain: Option<bool>,
    /// Refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(ignore)]
    pub shard_key: Option<serde_json::Value>,
    /// Sub-queries run first, whose results this query fuses (`fusion`, `rrf`) or re-scores
    /// (a vector query then scores only their candidates).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "one_or_many"
    )]
    pub prefetch: Option<Vec<Prefetch>>,
    /// Qdrant's "take the query point's vector from another collection": refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(ignore)]
    pub lookup_from: Option<serde_json::Value>,
}

impl RefuseUnsupported for QueryRequest {
    fn refuse_unsupported(&self) -> Result<(), Unsupported> {
        refuse_set(&[
            ("shard_key", &self.shard_key),
            ("lookup_from", &self.lookup_from),
        ])?;
        refuse_within("filter", self.filter.as_ref())?;
        refuse_each("prefetch", self.prefetch.as_deref().unwrap_or_default())
    }
}

/// Response of a query.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct QueryResponse {
    /// Hits, best first.
    pub points: Vec<ScoredPoint>,
    /// How the query ran, when `explain` was asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explain: Option<QueryExplain>,
    /// Set when the answer is partial (a partition of a cluster had no live replica).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
}

/// How one query was executed: what a user needs to understand a slow or surprising answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct QueryExplain {
    /// The index kind that answered (`hnsw`, `flat`, …).
    pub index: String,
    /// How an index that chooses its structure from the data chose (`mips_auto`: the graph
    /// it built and the norm spread that decided, or that it still scans exactly; over
    /// partitions, each distinct choice, separated by `; `); absent for every other kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index_choice: Option<String>,
    /// Whether every candidate vector was scanned (asked for, a `flat` index, or a selective
    /// filter).
    pub exact: bool,
    /// The graph candidate list size used, when a graph was searched.
    pub ef: Option<usize>,
    /// Estimated share of points passing the filter, when there is one.
    pub filter_selectivity: Option<f64>,
    /// A filtered graph search found fewer than `limit + offset` hits and was redone exactly.
    pub exact_fallback: bool,
    /// Points the payload indexes (and `has_id`) left as candidates for the filter, or the
    /// prefetched points a re-scoring query scores, summed over partitions; absent when no
    /// index could narrow the filter. Below the collection's
    /// `full_scan_threshold` only these are scored, exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload_index_candidates: Option<u64>,
    /// Query-to-vector distance evaluations, summed over every search the query ran
    /// (the router's included).
    pub distance_computations: u64,
    /// The row codes a graph search traversed by (`int8` or `binary`, Qdrant's scalar and
    /// binary quantization), re-ranking by the full vectors unless `rescore` was off; absent
    /// when it scored the vectors themselves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantization: Option<String>,
    /// How a partitioned collection routed the query.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partitions: Option<PartitionsExplain>,
}

/// The routing of one query over a partitioned collection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PartitionsExplain {
    /// `routed` (the router chose), `broadcast` (every partition: an exact or filtered query,
    /// or `probe` ≥ partitions), `untrained` (too few points to train the router yet: all
    /// points are in partition 0) or `migrating` (points are moving to a new routing table,
    /// so every partition is visited).
    pub routing: String,
    /// Partitions searched, best-ranked first.
    pub touched: Vec<u32>,
    /// Partitions of the collection.
    pub total: usize,
    /// Version of the routing table used (0 before the first training).
    pub routing_version: u64,
    /// Distance evaluations spent in the router's meta-HNSW.
    pub routing_distance_computations: u64,
    /// Share of the partitions that should have been searched that answered (1 in one
    /// process; below 1 when a cluster partition has no live replica).
    pub coverage: f64,
    /// Cluster: for each touched partition read through another node, the node that
    /// answered (`node {id}`); partitions this node read from its own replica are not listed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replicas: Vec<String>,
    /// Cluster: reads through another node that were hedged to a second replica's node.
    #[serde(default)]
    pub hedges: u32,
}

/// `POST …/points/query/batch`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct QueryBatchRequest {
    /// The queries.
    pub searches: Vec<QueryRequest>,
}

impl RefuseUnsupported for QueryBatchRequest {
    fn refuse_unsupported(&self) -> Result<(), Unsupported> {
        refuse_each("searches", &self.searches)
    }
}

/// A named vector in the legacy search API: `{"name": "…", "vector": […]}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct NamedVector {
    /// Vector name.
    pub name: String,
    /// The vector.
    #[serde(deserialize_with = "dense_vec")]
    pub vector: Vec<f32>,
}

/// The legacy search target: a plain vector, or a named one.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum SearchVector {
    /// Plain vector.
    Plain(Vec<f32>),
    /// Named vector.
    Named(NamedVector),
}

impl<'de> Deserialize<'de> for SearchVector {
    /// A list is the plain vector, an object the named one; each element is read as the
    /// query targets' are (finite, named by its index when wrong).
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct SearchVectorVisitor;
        impl<'de> Visitor<'de> for SearchVectorVisitor {
            type Value = SearchVector;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a vector (an array of numbers) or {\"name\", \"vector\"}")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<SearchVector, A::Error> {
                dense(seq).map(SearchVector::Plain)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<SearchVector, A::Error> {
                NamedVector::deserialize(serde::de::value::MapAccessDeserializer::new(map))
                    .map(SearchVector::Named)
            }
        }
        d.deserialize_any(SearchVectorVisitor)
    }
}

/// `POST /collections/{c}/points/search` (Qdrant's older search API).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SearchRequest {
    /// Search near this vector.
    pub vector: SearchVector,
    /// Only points matching this filter.
    #[serde(default)]
    pub filter: Option<Filter>,
    /// Search knobs.
    #[serde(default)]
    pub params: Option<SearchParams>,
    /// Number of results.
    pub limit: usize,
    /// Results to skip.
    #[serde(default)]
    pub offset: Option<usize>,
    /// Payload selection (default: none).
    #[serde(default)]
    pub with_payload: Option<WithPayload>,
    /// Vector selection (default: none).
    #[serde(default)]
    pub with_vector: Option<WithVector>,
    /// Drop results scoring worse than this.
    #[serde(default)]
    pub score_threshold: Option<f32>,
    /// Refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(ignore)]
    pub shard_key: Option<serde_json::Value>,
}

impl RefuseUnsupported for SearchRequest {
    fn refuse_unsupported(&self) -> Result<(), Unsupported> {
        refuse_set(&[("shard_key", &self.shard_key)])?;
        refuse_within("filter", self.filter.as_ref())
    }
}

/// `POST …/points/search/batch`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SearchBatchRequest {
    /// The searches.
    pub searches: Vec<SearchRequest>,
}

impl RefuseUnsupported for SearchBatchRequest {
    fn refuse_unsupported(&self) -> Result<(), Unsupported> {
        refuse_each("searches", &self.searches)
    }
}

/// One hit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ScoredPoint {
    /// Point id.
    pub id: PointId,
    /// Sequence number of the write that produced the point's current value.
    pub version: u64,
    /// Score as Qdrant defines it: cosine, dot product, or Euclidean distance.
    pub score: f32,
    /// Payload, when requested.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub payload: Option<Payload>,
    /// Vector, when requested.
    #[serde(default)]
    pub vector: Option<VectorOutput>,
}

impl From<SearchRequest> for QueryRequest {
    fn from(s: SearchRequest) -> Self {
        let (vector, using) = match s.vector {
            SearchVector::Plain(v) => (v, None),
            SearchVector::Named(n) => (n.vector, Some(n.name)),
        };
        QueryRequest {
            query: Some(QueryInput::Vector(vector)),
            filter: s.filter,
            params: s.params,
            limit: Some(s.limit),
            offset: s.offset,
            with_payload: s.with_payload,
            with_vector: s.with_vector,
            score_threshold: s.score_threshold,
            using,
            shard_key: s.shard_key,
            ..QueryRequest::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::unsupported::refused_path;

    fn parse(json: &str) -> Result<QueryInput, String> {
        serde_json::from_str(json).map_err(|e| e.to_string())
    }

    #[test]
    fn query_targets_dispatch_on_the_json_type() {
        assert_eq!(
            parse("[1, 0.5]").unwrap(),
            QueryInput::Vector(vec![1.0, 0.5])
        );
        assert_eq!(parse("7").unwrap(), QueryInput::Point(PointId::Num(7)));
        let uuid = "5c56c793-69f3-4fbf-87e6-c4bf54c28c26";
        assert_eq!(
            parse(&format!("\"{uuid}\"")).unwrap(),
            QueryInput::Point(PointId::Uuid(uuid.parse().unwrap()))
        );
        assert_eq!(
            parse(r#"{"nearest": [2, 3]}"#).unwrap(),
            QueryInput::Nearest {
                nearest: NearestTarget::Vector(vec![2.0, 3.0]),
                mmr: None,
            }
        );
        assert_eq!(
            parse(r#"{"nearest": 9}"#).unwrap(),
            QueryInput::Nearest {
                nearest: NearestTarget::Point(PointId::Num(9)),
                mmr: None,
            }
        );
    }

    #[test]
    fn query_target_errors_say_what_was_wrong() {
        let err = parse(r#"[1, "x"]"#).unwrap_err();
        assert!(err.contains("vector element 1"), "{err}");
        let err = parse("-3").unwrap_err();
        assert!(err.contains("unsigned integer"), "{err}");
        let err = parse(r#"{"discover": {"target": [1]}}"#).unwrap_err();
        assert!(err.contains("context"), "{err}");
        let err = parse(r#"{"discovery": {"target": [1]}}"#).unwrap_err();
        assert!(err.contains("unsupported query `discovery`"), "{err}");
        assert!(matches!(
            parse(r#"{"context": {"positive": 1, "negative": [0.5]}}"#).unwrap(),
            QueryInput::Context {
                context: ContextInput::Pair(_)
            }
        ));
        assert_eq!(
            parse(r#"{"recommend": {"positive": [1, [0.5]], "strategy": "average_vector"}}"#)
                .unwrap(),
            QueryInput::Recommend {
                recommend: RecommendInput {
                    positive: Some(vec![
                        NearestTarget::Point(PointId::Num(1)),
                        NearestTarget::Vector(vec![0.5])
                    ]),
                    negative: None,
                    strategy: Some(RecommendStrategy::AverageVector),
                }
            }
        );
        let err = parse(r#"{"nearest": {"nearest": [1]}}"#).unwrap_err();
        assert!(err.contains("a point id"), "{err}");
        let err = parse("{}").unwrap_err();
        assert!(err.contains("empty object"), "{err}");
        let err = parse(r#"{"fusion": "rrf", "nearest": [1]}"#).unwrap_err();
        assert!(err.contains("`nearest` beside `fusion`"), "{err}");
        let err = parse(r#"{"fusion": "max"}"#).unwrap_err();
        assert!(err.contains("unknown variant `max`"), "{err}");
        let err = parse(r#"{"indices": [1], "values": [1], "nearest": [2]}"#).unwrap_err();
        assert!(
            err.contains("unknown field `nearest` in a sparse vector"),
            "{err}"
        );
        assert!(parse("true").is_err());
    }

    /// Qdrant's hybrid shape: a prefetch object or list, nested, with sparse and dense
    /// targets, under a fusion.
    #[test]
    fn prefetches_parse_one_or_many_and_nested() {
        let request: QueryRequest = serde_json::from_str(
            r#"{"prefetch": [{"query": [1, 2], "limit": 5},
                {"prefetch": {"query": {"indices": [4], "values": [1]}, "using": "w"},
                 "query": {"fusion": "rrf"}}],
                "query": {"fusion": "dbsf"}, "limit": 3}"#,
        )
        .unwrap();
        let prefetch = request.prefetch.unwrap();
        assert_eq!(prefetch.len(), 2);
        assert_eq!(prefetch[0].limit, Some(5));
        let inner = prefetch[1].prefetch.as_ref().unwrap();
        assert_eq!(inner[0].using.as_deref(), Some("w"));
        assert_eq!(
            inner[0].query,
            Some(QueryInput::Sparse(SparseVector {
                indices: vec![4],
                values: vec![1.0]
            }))
        );
        assert_eq!(
            request.query,
            Some(QueryInput::Fusion {
                fusion: Fusion::Dbsf
            })
        );
    }

    #[test]
    fn mmr_parses_and_null_is_unset() {
        let mmr = Mmr {
            diversity: Some(0.3),
            candidates_limit: Some(40),
        };
        assert_eq!(
            parse(r#"{"nearest": [1, 2], "mmr": {"diversity": 0.3, "candidates_limit": 40}}"#)
                .unwrap(),
            QueryInput::Nearest {
                nearest: NearestTarget::Vector(vec![1.0, 2.0]),
                mmr: Some(mmr),
            }
        );
        assert_eq!(
            parse(r#"{"nearest": [1, 2], "mmr": null}"#).unwrap(),
            QueryInput::Nearest {
                nearest: NearestTarget::Vector(vec![1.0, 2.0]),
                mmr: None,
            }
        );
        let err = parse(r#"{"nearest": [1], "mmr": {"lambda": 0.5}}"#).unwrap_err();
        assert!(err.contains("unknown field `lambda`"), "{err}");
    }

    #[test]
    fn queries_refuse_what_would_change_their_answer() {
        let query = refused_path::<QueryRequest>;
        assert_eq!(
            query(r#"{"query": [1], "shard_key": "eu"}"#).as_deref(),
            Some("shard_key")
        );
        assert_eq!(
            query(
                r#"{"prefetch": {"query": [1], "lookup_from": {"collection": "o"}}, "query": [1]}"#
            )
            .as_deref(),
            Some("prefetch[0].lookup_from")
        );
        assert_eq!(
            query(r#"{"query": 7, "lookup_from": {"collection": "other"}}"#).as_deref(),
            Some("lookup_from")
        );
        assert_eq!(
            query(r#"{"query": [1], "filter": {"must": {"key": "a", "match": {"phrase": "x"}}}}"#)
                .as_deref(),
            Some("filter.must[0].match.phrase")
        );
        // Search knobs that change only speed are accepted.
        assert_eq!(
            query(
                r#"{"query": [1], "params": {"indexed_only": true, "acorn": {"enable": true}}, "prefetch": null, "lookup_from": null}"#
            ),
            None
        );
        assert_eq!(
            refused_path::<QueryBatchRequest>(
                r#"{"searches": [{"query": [1], "prefetch": []}, {"query": [1], "prefetch": [{"prefetch": {"filter": {"must": {"key": "a", "match": {"phrase": "x"}}}}}]}]}"#
            )
            .as_deref(),
            Some("searches[1].prefetch[0].prefetch[0].filter.must[0].match.phrase")
        );
        assert_eq!(
            refused_path::<SearchRequest>(r#"{"vector": [1], "limit": 1, "shard_key": 1}"#)
                .as_deref(),
            Some("shard_key")
        );
        assert_eq!(
            refused_path::<SearchBatchRequest>(
                r#"{"searches": [{"vector": [1], "limit": 1, "filter": {"must_not": {"key": "a", "match": {"phrase": "x"}}}}]}"#
            )
            .as_deref(),
            Some("searches[0].filter.must_not[0].match.phrase")
        );
    }

    #[test]
    fn a_search_keeps_its_shard_key_when_converted_to_a_query() {
        let search: SearchRequest =
            serde_json::from_str(r#"{"vector": [1], "limit": 1, "shard_key": "eu"}"#).unwrap();
        let query = QueryRequest::from(search);
        assert_eq!(query.refuse_unsupported().unwrap_err().field, "shard_key");
    }

    #[test]
    fn query_targets_round_trip() {
        for input in [
            QueryInput::Vector(vec![1.5, -2.0]),
            QueryInput::Point(PointId::Num(4)),
            QueryInput::Nearest {
                nearest: NearestTarget::Point(PointId::Num(5)),
                mmr: Some(Mmr {
                    diversity: Some(0.5),
                    candidates_limit: None,
                }),
            },
            QueryInput::Sparse(SparseVector {
                indices: vec![3, 1],
                values: vec![0.5, 2.0],
            }),
            QueryInput::Nearest {
                nearest: NearestTarget::Sparse(SparseVector {
                    indices: vec![3],
                    values: vec![1.0],
                }),
                mmr: None,
            },
            QueryInput::Fusion {
                fusion: Fusion::Dbsf,
            },
            QueryInput::Rrf {
                rrf: Rrf {
                    k: Some(60),
                    weights: Some(vec![1.0, 3.0]),
                },
            },
        ] {
            let json = serde_json::to_string(&input).unwrap();
            assert_eq!(parse(&json).unwrap(), input, "{json}");
        }
    }
}
