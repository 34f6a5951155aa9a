//! Geo conditions in Qdrant's shape: a payload value `{"lon": …, "lat": …}` (degrees, WGS 84)
//! tested against a bounding box, a circle or a polygon. The shapes are checked by the server
//! before a filter runs (coordinates in range, polygons closed), so the paths in its errors are
//! the request's own.

use serde::{Deserialize, Serialize};

/// A point on the globe, in degrees: longitude −180…180, latitude −90…90.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GeoPoint {
    /// Longitude.
    pub lon: f64,
    /// Latitude.
    pub lat: f64,
}

/// The points east of `top_left.lon` and west of `bottom_right.lon` (across the antimeridian
/// when the first is the larger) between the two latitudes, edges excluded, as Qdrant tests.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GeoBoundingBox {
    /// North-west corner.
    pub top_left: GeoPoint,
    /// South-east corner.
    pub bottom_right: GeoPoint,
}

/// The points closer than `radius` metres to `center` along the surface (the haversine
/// distance on a sphere of the Earth's mean radius, 6,371,008.8 m).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GeoRadius {
    /// The circle's centre.
    pub center: GeoPoint,
    /// Metres.
    pub radius: f64,
}

/// A closed ring: at least four points, the last equal to the first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GeoLineString {
    /// The ring's points, in order.
    pub points: Vec<GeoPoint>,
}

/// The points strictly inside `exterior` and outside every ring of `interiors` (its holes);
/// a point on a ring is outside, as Qdrant tests. Edges are straight in longitude and
/// latitude, not great circles.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GeoPolygon {
    /// The outer ring.
    pub exterior: GeoLineString,
    /// Holes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interiors: Option<Vec<GeoLineString>>,
}
