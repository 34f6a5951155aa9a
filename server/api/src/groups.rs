//! `POST /collections/{c}/points/query/groups`: a query's hits grouped by a payload value
//! (Qdrant's `QueryGroupsRequest`), e.g. the best chunks of the best documents.

use serde::{Deserialize, Serialize};

use crate::unsupported::{RefuseUnsupported, Unsupported};
use crate::{PointId, QueryRequest, Record, ScoredPoint, WithPayload};

/// A grouped query: the query's fields, `limit` counting groups.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct QueryGroupsRequest {
    /// The query (its `limit` is the number of groups, default 10; `offset` is refused).
    #[serde(flatten)]
    pub query: QueryRequest,
    /// The payload key whose value names a hit's group: strings and integers (a point with
    /// an array there joins the group of each element; one without the key joins none).
    pub group_by: String,
    /// Hits per group (default 3).
    #[serde(default)]
    pub group_size: Option<usize>,
    /// Each group's point of the same id in another collection.
    #[serde(default)]
    pub with_lookup: Option<WithLookup>,
}

impl RefuseUnsupported for QueryGroupsRequest {
    fn refuse_unsupported(&self) -> Result<(), Unsupported> {
        self.query.refuse_unsupported()
    }
}

/// Where to look a group's id up: a collection name, or with what to return.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum WithLookup {
    /// The collection; its point comes with its payload, without its vector.
    Collection(String),
    /// The collection and what to return.
    Options {
        /// The collection.
        collection: String,
        /// Payload selection (default: all).
        #[serde(default)]
        with_payload: Option<WithPayload>,
        /// Whether to return the vector (default: no).
        #[serde(default)]
        with_vectors: Option<bool>,
    },
}

/// One group's key: a payload value.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum GroupId {
    /// An integer value.
    Integer(i64),
    /// A string value.
    String(String),
}

impl GroupId {
    /// The point id a lookup reads for this group: an unsigned integer, or a UUID string.
    pub fn point_id(&self) -> Option<PointId> {
        match self {
            GroupId::Integer(n) => u64::try_from(*n).ok().map(PointId::Num),
            GroupId::String(s) => uuid::Uuid::parse_str(s).ok().map(PointId::Uuid),
        }
    }
}

/// One group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PointGroup {
    /// The payload value the group's hits share.
    pub id: GroupId,
    /// Its hits, best first.
    pub hits: Vec<ScoredPoint>,
    /// The point of the same id in the `with_lookup` collection, when asked and found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lookup: Option<Record>,
}

/// The answer: groups ordered by their best hit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct GroupsResult {
    /// The groups.
    pub groups: Vec<PointGroup>,
}
