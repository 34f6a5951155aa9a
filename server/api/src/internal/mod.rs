//! The internal wire: what a node sends a partition replica on another node (`POST
//! /internal/partition/{group}` on its internal port). These shapes are Cairn's own, not Qdrant's,
//! and no client outside a cluster sends them; they live here, beside the public shapes, so
//! that the server's layers below HTTP share one vocabulary with the wire without naming an
//! HTTP type.
//!
//! Bodies on the internal port are MessagePack ([`encode`], [`decode`]), not JSON.
//!
//! A partition answers *plans*: requests already validated against the collection's settings
//! (dimension checked, vector preprocessed for the metric, limits applied). Nothing here is
//! validated again on the receiving side.

use serde::{Deserialize, Serialize};

use std::collections::BTreeMap;

mod change;

pub use change::{PayloadChange, PointChange, Selection};

use crate::{Filter, Payload, PointId, SparseVector, WithPayload};

/// A point ready to be written: validated, its vector preprocessed for the metric.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewPoint {
    /// Its id.
    pub id: PointId,
    /// Its vector (unit length for cosine).
    pub vector: Vec<f32>,
    /// Its payload.
    pub payload: Option<Payload>,
    /// Its sparse vectors by name, each sorted by index ([`SparseVector::checked`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sparse: BTreeMap<String, SparseVector>,
    /// Its dense vectors beside the main one (`vector`), by name, each checked and
    /// preprocessed for its own distance.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, Vec<f32>>,
}

/// A write to a partitioned collection that a peer node sends the collection's writer (the
/// one node that writes it at a time).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum CollectionWrite {
    /// Upsert these points (validated, vectors preprocessed).
    Upsert {
        /// The points.
        points: Vec<NewPoint>,
    },
    /// Delete these ids.
    Delete {
        /// The ids.
        ids: Vec<PointId>,
    },
    /// Delete every point passing this filter (validated), matched by the writer under its
    /// write lock, so a point being moved between partitions meanwhile is not missed.
    DeleteMatching {
        /// The filter.
        filter: Filter,
    },
    /// Change the selected points' payloads or remove some of their vectors, read and
    /// written back under the write lock (a filter matched there).
    Update {
        /// Which points.
        selection: Selection,
        /// What happens to each.
        change: PointChange,
    },
    /// Give existing points new vectors, keeping the rest of each (checked, preprocessed);
    /// with `only_where`, only the stored points passing it.
    UpdateVectors {
        /// The points, each with the vectors it gets.
        points: Vec<NewPoint>,
        /// Qdrant's `update_filter`.
        only_where: Option<Filter>,
    },
    /// Upsert, replacing a stored point only if it passes `filter` (Qdrant's
    /// `update_filter`).
    UpsertWhere {
        /// The points.
        points: Vec<NewPoint>,
        /// Which stored points may be replaced.
        filter: Filter,
    },
}

/// What the writer made of a [`CollectionWrite`]: the operation id the client gets, and the
/// log position each partition it touched reached.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct WriteReceipt {
    /// The write's operation id.
    pub operation_id: u64,
    /// (partition, log position) for each partition written.
    pub waits: Vec<(u32, u64)>,
}

/// A validated k-NN search of one partition.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SearchPlan {
    /// What to search near (already checked and preprocessed), or a point whose vector to use.
    pub target: QueryTarget,
    /// The named dense vector beside the main one that a `Vector` or `Point` target is
    /// scored against; `None`: the main vector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub using: Option<String>,
    /// Only points passing this filter.
    pub filter: Option<Filter>,
    /// Results to return.
    pub limit: usize,
    /// Results to skip.
    pub offset: usize,
    /// Graph candidate list size.
    pub ef: Option<usize>,
    /// Scan exactly.
    pub exact: bool,
    /// Quantized collections: candidates re-ranked per result wanted.
    pub oversampling: Option<f32>,
    /// Quantized collections: re-rank candidates with full vectors.
    pub rescore: Option<bool>,
    /// Collections with row codes (Qdrant's scalar or binary quantization): traverse by the
    /// full vectors instead (`quantization.ignore`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ignore_quantization: bool,
    /// Drop results scoring worse.
    pub score_threshold: Option<f32>,
    /// Payload in results.
    pub with_payload: PayloadSelection,
    /// Vector in results.
    pub with_vector: bool,
    /// Report how the query ran.
    pub explain: bool,
    /// Score only these points, sorted and without duplicates (a query re-scoring its
    /// prefetches' candidates): each is scored exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub among: Option<Vec<PointId>>,
}

/// A query's target.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum QueryTarget {
    /// A vector.
    Vector(Vec<f32>),
    /// The stored vector of a point.
    Point(PointId),
    /// A sparse vector (sorted by index), scored against the collection's sparse vectors of
    /// this name.
    Sparse {
        /// The sparse vector space.
        name: String,
        /// The query.
        vector: SparseVector,
    },
}

/// A validated scroll.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ScrollPlan {
    /// First id (inclusive).
    pub offset: Option<PointId>,
    /// Page size.
    pub limit: usize,
    /// Only points passing this filter.
    pub filter: Option<Filter>,
    /// Payload in results.
    pub with_payload: PayloadSelection,
    /// Vector in results.
    pub with_vector: bool,
    /// In the order of a payload key's index instead of by id (`offset` is then unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order_by: Option<OrderPlan>,
}

/// A scroll's order by a numeric payload index.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OrderPlan {
    /// The indexed payload key.
    pub key: String,
    /// Largest first.
    pub descending: bool,
    /// The first value, inclusive, in the order's direction.
    pub start_from: Option<f64>,
}

/// Which payload keys a response carries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum PayloadSelection {
    /// No payload.
    None,
    /// The whole payload.
    All,
    /// Only these keys / all but these keys.
    Keys {
        /// Keys to keep (all when `None`).
        include: Option<Vec<String>>,
        /// Keys to drop.
        exclude: Vec<String>,
    },
}

impl PayloadSelection {
    /// From the wire selector, with the endpoint's default when absent.
    pub fn from_wire(selector: Option<WithPayload>, default_all: bool) -> Self {
        match selector {
            None if default_all => PayloadSelection::All,
            None | Some(WithPayload::Enable(false)) => PayloadSelection::None,
            Some(WithPayload::Enable(true)) => PayloadSelection::All,
            Some(WithPayload::Fields(include)) => PayloadSelection::Keys {
                include: Some(include),
                exclude: Vec::new(),
            },
            Some(WithPayload::Selector { include, exclude }) => PayloadSelection::Keys {
                include,
                exclude: exclude.unwrap_or_default(),
            },
        }
    }

    /// Applies the selection to a stored payload.
    pub fn apply(&self, payload: Option<&Payload>) -> Option<Payload> {
        match self {
            PayloadSelection::None => None,
            PayloadSelection::All => Some(payload.cloned().unwrap_or_default()),
            PayloadSelection::Keys { include, exclude } => {
                let payload = payload.cloned().unwrap_or_default();
                Some(
                    payload
                        .into_iter()
                        .filter(|(k, _)| {
                            include.as_ref().is_none_or(|inc| inc.contains(k))
                                && !exclude.contains(k)
                        })
                        .collect(),
                )
            }
        }
    }
}

/// One operation on a partition replica on another node.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "call", rename_all = "snake_case")]
pub enum PartitionCall {
    /// Upsert points; answers the sequence number once searchable.
    Upsert {
        /// The points.
        points: Vec<NewPoint>,
        /// The writer epoch of a partitioned collection's write (0: unfenced).
        #[serde(default, skip_serializing_if = "is_zero")]
        fence: u64,
    },
    /// Delete ids; answers the sequence number once applied.
    Delete {
        /// The ids.
        ids: Vec<PointId>,
        /// The writer epoch (0: unfenced).
        #[serde(default, skip_serializing_if = "is_zero")]
        fence: u64,
    },
    /// Delete the ids the partition holds; answers the sequence number or null.
    DeletePresent {
        /// The ids.
        ids: Vec<PointId>,
        /// The writer epoch (0: unfenced).
        #[serde(default, skip_serializing_if = "is_zero")]
        fence: u64,
    },
    /// Which ids the partition holds.
    Holds {
        /// The ids.
        ids: Vec<PointId>,
    },
    /// Committed values of ids.
    Stored {
        /// The ids.
        ids: Vec<PointId>,
    },
    /// Every id.
    Ids,
    /// A uniform sample of vectors.
    Sample {
        /// How many.
        n: usize,
        /// Sampling seed.
        seed: u64,
    },
    /// Counters.
    State,
    /// A k-NN search.
    Query {
        /// The plan.
        plan: SearchPlan,
    },
    /// A scroll page.
    Scroll {
        /// The plan.
        plan: ScrollPlan,
    },
    /// Points passing a filter.
    Count {
        /// The filter.
        filter: Option<Filter>,
    },
    /// Ids passing a filter.
    Matching {
        /// The filter.
        filter: Option<Filter>,
    },
    /// Points by id.
    Get {
        /// The ids.
        ids: Vec<PointId>,
        /// Payload selection.
        with_payload: PayloadSelection,
        /// Whether to include vectors.
        with_vector: bool,
    },
    /// The position a linearizable read must see applied (Raft's ReadIndex, from the
    /// partition's leader).
    ReadIndex,
    /// Index payload `key` as `kind` (`None`: drop its index); answers the change's sequence
    /// number once applied on the replica that served it.
    PayloadIndex {
        /// The payload key.
        key: String,
        /// The index type, or none to drop it.
        kind: Option<crate::PayloadSchemaType>,
    },
    /// The payload indexes and the live points each holds.
    PayloadIndexes,
    /// The values of a payload index, each with the live points holding it that pass the
    /// filter (the parts of a facet).
    Facet {
        /// The indexed key.
        key: String,
        /// The filter.
        filter: Option<Filter>,
    },
    /// Committed values of ids, each with its version (the sequence number of the write
    /// that made it), for a compare-and-set ([`PartitionCall::UpsertIf`]).
    StoredVersions {
        /// The ids.
        ids: Vec<PointId>,
    },
    /// Upsert points only if every id of `expect` is still at the version given (0: absent)
    /// when the write is applied; answers the sequence number once searchable, or nothing if
    /// another write came between.
    UpsertIf {
        /// The points.
        points: Vec<NewPoint>,
        /// Each id and the version it must be at.
        expect: Vec<(PointId, u64)>,
    },
}

impl PartitionCall {
    /// Whether the call is a short read that a request waits on (served on the receiving
    /// node's async worker), as opposed to work that may block for long (writes wait for the
    /// group and the index; bulk reads of a whole partition), which goes to its blocking pool.
    pub fn is_latency_sensitive(&self) -> bool {
        match self {
            Self::Query { .. }
            | Self::Scroll { .. }
            | Self::Get { .. }
            | Self::Count { .. }
            | Self::Holds { .. }
            | Self::ReadIndex
            | Self::PayloadIndexes
            | Self::Facet { .. }
            | Self::State => true,
            Self::Upsert { .. }
            | Self::Delete { .. }
            | Self::DeletePresent { .. }
            | Self::Stored { .. }
            | Self::StoredVersions { .. }
            | Self::UpsertIf { .. }
            | Self::Ids
            | Self::Sample { .. }
            | Self::Matching { .. }
            | Self::PayloadIndex { .. } => false,
        }
    }
}

/// A partition's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionState {
    /// Last committed sequence number.
    pub last_seq: u64,
    /// Last sequence number searchable.
    pub applied_seq: u64,
    /// Live points.
    pub points: u64,
    /// Index slots, live and dead.
    pub index_slots: u64,
    /// Dead index slots.
    pub dead_slots: u64,
    /// Bytes the index holds.
    pub index_memory_bytes: u64,
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}

/// The `Content-Type` of internal calls and of their answers (a refusal is the public API's
/// JSON error envelope, so its code survives the hop).
pub const WIRE_CONTENT_TYPE: &str = "application/msgpack";

/// A body that does not encode or decode as [`WIRE_CONTENT_TYPE`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireError(pub String);

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for WireError {}

/// Encodes an internal call or answer as MessagePack, structs as maps.
///
/// Why MessagePack and not bincode, which the Raft messages use: a plan carries the public
/// API's own shapes (filters, payloads as JSON values, internally tagged enums), which only a
/// self-describing format decodes. Why not JSON: every `f32` of a query vector or a returned
/// vector stays its four bytes (JSON printed and parsed each one as decimal text, the bulk of
/// an internal read's encoding cost). Structs are maps, so a node may add an optional field
/// and an older peer still reads the call.
pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, WireError> {
    rmp_serde::to_vec_named(value).map_err(|e| WireError(format!("cannot encode: {e}")))
}

/// Decodes what [`encode`] wrote.
pub fn decode<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, WireError> {
    rmp_serde::from_slice(bytes).map_err(|e| WireError(format!("does not decode: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{QueryResponse, ScoredPoint};

    fn round_trip<T: Serialize + for<'a> Deserialize<'a>>(value: &T) -> T {
        let bytes = encode(value).expect("encodes");
        decode(&bytes).expect("decodes")
    }

    #[test]
    fn a_search_plan_with_a_filter_survives_the_wire() {
        let filter: Filter = serde_json::from_value(serde_json::json!({
            "must": [{"key": "city", "match": {"value": "Paris"}},
                     {"key": "price", "range": {"gte": 1.5}},
                     {"has_id": [7, "5c56c793-69f3-4fbf-87e6-c4bf54c28c26"]}]
        }))
        .expect("a valid filter");
        let call = PartitionCall::Query {
            plan: SearchPlan {
                target: QueryTarget::Vector(vec![0.25, -1.0e-7, f32::MAX, 3.0]),
                using: Some("image".into()),
                filter: Some(filter.clone()),
                limit: 10,
                offset: 2,
                ef: Some(64),
                exact: false,
                oversampling: None,
                rescore: Some(true),
                ignore_quantization: false,
                score_threshold: Some(0.5),
                with_payload: PayloadSelection::Keys {
                    include: Some(vec!["city".into()]),
                    exclude: vec![],
                },
                with_vector: true,
                explain: false,
                among: Some(vec![PointId::Num(3), PointId::Num(9)]),
            },
        };
        let PartitionCall::Query { plan } = round_trip(&call) else {
            panic!("the call changed kind on the wire");
        };
        let QueryTarget::Vector(vector) = plan.target else {
            panic!("the target changed kind on the wire");
        };
        assert_eq!(vector, vec![0.25, -1.0e-7, f32::MAX, 3.0]);
        assert_eq!(
            serde_json::to_value(plan.filter).expect("encodes"),
            serde_json::to_value(Some(filter)).expect("encodes")
        );
        assert_eq!((plan.limit, plan.offset, plan.ef), (10, 2, Some(64)));
        assert_eq!(plan.among, Some(vec![PointId::Num(3), PointId::Num(9)]));
        assert_eq!(plan.using.as_deref(), Some("image"));
    }

    #[test]
    fn hits_with_payloads_and_uuids_survive_the_wire() {
        let payload: crate::Payload = serde_json::from_value(serde_json::json!({
            "n": 1, "big": u64::MAX, "neg": -3, "x": 0.1, "tags": ["a", null, true], "o": {"k": {}}
        }))
        .expect("a payload");
        let answer = QueryResponse {
            points: vec![
                ScoredPoint {
                    id: PointId::Num(3),
                    version: 9,
                    score: 0.75,
                    payload: Some(payload.clone()),
                    vector: Some(crate::VectorOutput::Dense(vec![1.0, 2.0])),
                },
                ScoredPoint {
                    id: PointId::Uuid(
                        "5c56c793-69f3-4fbf-87e6-c4bf54c28c26"
                            .parse()
                            .expect("a uuid"),
                    ),
                    version: 1,
                    score: -0.5,
                    payload: None,
                    vector: None,
                },
            ],
            explain: None,
            warning: Some("partial".into()),
        };
        assert_eq!(round_trip(&answer), answer);
    }

    #[test]
    fn a_write_and_a_fence_survive_the_wire() {
        let call = PartitionCall::Upsert {
            points: vec![NewPoint {
                id: PointId::Num(1),
                vector: vec![0.5; 3],
                payload: None,
                sparse: BTreeMap::from([(
                    "w".to_owned(),
                    SparseVector {
                        indices: vec![2],
                        values: vec![1.0],
                    },
                )]),
                extra: BTreeMap::from([("image".to_owned(), vec![0.25; 2])]),
            }],
            fence: 12,
        };
        let PartitionCall::Upsert { points, fence } = round_trip(&call) else {
            panic!("the call changed kind on the wire");
        };
        assert_eq!((points.len(), fence), (1, 12));
        assert_eq!(points[0].sparse["w"].indices, [2]);
        assert_eq!(points[0].extra["image"], [0.25; 2]);
        let write = CollectionWrite::Delete {
            ids: vec![PointId::Num(4)],
        };
        assert!(
            matches!(round_trip(&write), CollectionWrite::Delete { ids } if ids == vec![PointId::Num(4)])
        );
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(decode::<PartitionCall>(b"\xc1\x00garbage").is_err());
        assert!(decode::<PartitionCall>(&[]).is_err());
    }
}
