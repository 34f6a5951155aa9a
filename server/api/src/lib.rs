//! cairn-api: the JSON shapes of Cairn's REST API and its error codes.
//!
//! The shapes follow Qdrant's REST API (envelope `{"result", "status", "time"}`, collections,
//! points, query/search, filters) so that Qdrant's own REST clients work against Cairn; Cairn's
//! additions live in the same shapes as extra optional fields. Unknown request fields are
//! ignored, as Qdrant ignores them, so newer clients that send extra nulls keep working; but
//! Qdrant fields that Cairn does not implement and that would change an answer if ignored are
//! captured and refused ([`RefuseUnsupported`]), and filters refuse unknown keys.
//!
//! This crate is shared by the server and `cairn-client`; it must stay light (serde, and
//! utoipa's derives for the server's OpenAPI document) so the client never pulls the engine
//! in. Qdrant fields Cairn refuses are `#[schema(ignore)]`: the document describes what Cairn
//! serves.

mod collections;
mod consistency;
mod datetime;
mod error;
mod facet;
mod filter;
mod geo;
mod groups;
pub mod internal;
mod points;
mod search;
mod snapshots;
mod sparse;
mod unsupported;

pub use collections::*;
pub use consistency::{ReadConsistency, ReadQuery, ReadToken};
pub use datetime::{Datetime, DatetimeRange, NotADatetime};
pub use error::{ErrorBody, ErrorCode, ErrorStatus};
pub use facet::{FacetHit, FacetRequest, FacetResponse};
pub use filter::*;
pub use geo::{GeoBoundingBox, GeoLineString, GeoPoint, GeoPolygon, GeoRadius};
pub use groups::{GroupId, GroupsResult, PointGroup, QueryGroupsRequest, WithLookup};
pub use points::*;
pub use search::*;
pub use snapshots::{
    SnapshotDescription, SnapshotPriority, SnapshotRecover, SnapshotUploadForm, SnapshotUploadQuery,
};
pub use sparse::{SparseVector, VectorValue};
pub use unsupported::{RefuseUnsupported, Unsupported};

use serde::{Deserialize, Serialize};

/// The success envelope around every result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Response<T> {
    /// The call's result.
    pub result: T,
    /// Always `"ok"` on success.
    pub status: String,
    /// Seconds the server spent on the call.
    pub time: f64,
}

impl<T> Response<T> {
    /// Wraps a result.
    pub fn ok(result: T, time: f64) -> Self {
        Self {
            result,
            status: "ok".to_owned(),
            time,
        }
    }
}

/// `GET /`: who is answering, in Qdrant's shape (no `result` envelope, as Qdrant's clients
/// read it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ServerInfo {
    /// Server name.
    pub title: String,
    /// The Qdrant REST API version Cairn follows ([`QDRANT_API_VERSION`]): Qdrant's clients
    /// compare it with their own and warn when the minor versions are more than one apart.
    pub version: String,
    /// Cairn's own version.
    pub cairn_version: String,
}

/// The Qdrant REST API version whose shapes Cairn serves, reported as `version` by `GET /`:
/// the version of the official client the compatibility tests pin.
pub const QDRANT_API_VERSION: &str = "1.20.0";
