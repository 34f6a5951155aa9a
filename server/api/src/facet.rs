//! `POST /collections/{c}/facet`: how many points hold each value of an indexed payload key
//! (Qdrant's facet counts), e.g. the categories beside a result list.

use serde::{Deserialize, Serialize};

use crate::Filter;

/// A facet request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FacetRequest {
    /// The payload key; it needs a keyword, integer, bool or uuid payload index.
    pub key: String,
    /// Most values returned, the most frequent first (default 10).
    #[serde(default)]
    pub limit: Option<usize>,
    /// Count only the points matching this filter.
    #[serde(default)]
    pub filter: Option<Filter>,
    /// Qdrant lets counts be approximate when `false`; Cairn's are always exact.
    #[serde(default)]
    pub exact: Option<bool>,
}

/// One value and its count.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FacetHit {
    /// The value: a string, an integer or a boolean.
    #[schema(value_type = Object)]
    pub value: serde_json::Value,
    /// Points holding it (a point with the value twice in an array counts once).
    pub count: u64,
}

/// The answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FacetResponse {
    /// Values by count, most first; ties by value.
    pub hits: Vec<FacetHit>,
}
