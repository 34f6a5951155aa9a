//! Geo conditions: whether a payload point passes `geo_bounding_box`, `geo_radius` or
//! `geo_polygon` as Qdrant tests them, and the longitude/latitude boxes that cover each, which
//! a geo payload index looks its candidates up by.

use cairn_api::{GeoBoundingBox, GeoLineString, GeoPoint, GeoPolygon, GeoRadius};
use serde_json::Value;

use crate::error::{Result, ServerError};

/// The Earth's mean radius in metres: the sphere `geo_radius` measures distances on (Qdrant's,
/// through the `geo` crate's haversine).
const EARTH_RADIUS_M: f64 = 6_371_008.8;

/// A payload value read as a point: an object with numeric `lon` and `lat` within range. A
/// value out of range is no point at all, with or without an index (Qdrant's index drops
/// such values, so this keeps the answer the same either way).
pub fn point(value: &Value) -> Option<GeoPoint> {
    let object = value.as_object()?;
    let lon = object.get("lon")?.as_f64()?;
    let lat = object.get("lat")?.as_f64()?;
    valid(GeoPoint { lon, lat }).then_some(GeoPoint { lon, lat })
}

fn valid(p: GeoPoint) -> bool {
    (-180.0..=180.0).contains(&p.lon) && (-90.0..=90.0).contains(&p.lat)
}

/// Checks a condition's shape: coordinates in range, a finite radius, closed rings of at least
/// four points. `path` names the condition in errors.
pub fn validate(
    bounding_box: Option<&GeoBoundingBox>,
    radius: Option<&GeoRadius>,
    polygon: Option<&GeoPolygon>,
    path: &str,
) -> Result<()> {
    let bad = |msg: String| Err(ServerError::InvalidRequest(format!("{path}.{msg}")));
    let check = |p: &GeoPoint, at: &str| {
        if valid(*p) {
            Ok(())
        } else {
            bad(format!(
                "{at}: lon must be within -180..180 and lat within -90..90, got lon {} lat {}",
                p.lon, p.lat
            ))
        }
    };
    if let Some(b) = bounding_box {
        check(&b.top_left, "geo_bounding_box.top_left")?;
        check(&b.bottom_right, "geo_bounding_box.bottom_right")?;
    }
    if let Some(r) = radius {
        check(&r.center, "geo_radius.center")?;
        if !r.radius.is_finite() {
            return bad("geo_radius.radius must be a finite number of metres".into());
        }
    }
    if let Some(polygon) = polygon {
        let rings = std::iter::once(("geo_polygon.exterior".to_owned(), &polygon.exterior)).chain(
            polygon
                .interiors
                .iter()
                .flatten()
                .enumerate()
                .map(|(i, ring)| (format!("geo_polygon.interiors[{i}]"), ring)),
        );
        for (at, ring) in rings {
            if ring.points.len() < 4 {
                return bad(format!(
                    "{at}: a ring needs at least 4 points (the last repeating the first), got {}",
                    ring.points.len()
                ));
            }
            if ring.points.first() != ring.points.last() {
                return bad(format!(
                    "{at}: the ring is not closed: its last point must equal its first"
                ));
            }
            for (i, p) in ring.points.iter().enumerate() {
                check(p, &format!("{at}.points[{i}]"))?;
            }
        }
    }
    Ok(())
}

/// Inside the box, edges excluded; across the antimeridian when `top_left` lies east of
/// `bottom_right`.
pub fn in_box(b: &GeoBoundingBox, p: GeoPoint) -> bool {
    let (west, east) = (b.top_left.lon, b.bottom_right.lon);
    let lon = if west > east {
        p.lon > west || p.lon < east
    } else {
        west < p.lon && p.lon < east
    };
    lon && b.bottom_right.lat < p.lat && p.lat < b.top_left.lat
}

/// Closer to the centre than the radius.
pub fn in_circle(c: &GeoRadius, p: GeoPoint) -> bool {
    haversine(c.center, p) < c.radius
}

/// Metres between two points along a sphere of the Earth's mean radius.
pub fn haversine(a: GeoPoint, b: GeoPoint) -> f64 {
    let (lat1, lat2) = (a.lat.to_radians(), b.lat.to_radians());
    let dlat = lat2 - lat1;
    let dlon = (b.lon - a.lon).to_radians();
    let h = (dlat / 2.0).sin().powi(2) + lat1.cos() * lat2.cos() * (dlon / 2.0).sin().powi(2);
    2.0 * EARTH_RADIUS_M * h.sqrt().min(1.0).asin()
}

/// Strictly inside the exterior ring and outside every hole; a point on any ring is outside.
pub fn in_polygon(polygon: &GeoPolygon, p: GeoPoint) -> bool {
    let holes = polygon.interiors.iter().flatten();
    inside_ring(&polygon.exterior, p) == Some(true)
        && holes
            .into_iter()
            .all(|hole| inside_ring(hole, p) == Some(false))
}

/// Whether `p` is inside the ring (even-odd rule), `None` when it lies on it.
fn inside_ring(ring: &GeoLineString, p: GeoPoint) -> Option<bool> {
    let mut inside = false;
    for edge in ring.points.windows(2) {
        let (a, b) = (edge[0], edge[1]);
        let cross = (b.lon - a.lon) * (p.lat - a.lat) - (b.lat - a.lat) * (p.lon - a.lon);
        let within = a.lon.min(b.lon) <= p.lon
            && p.lon <= a.lon.max(b.lon)
            && a.lat.min(b.lat) <= p.lat
            && p.lat <= a.lat.max(b.lat);
        if cross == 0.0 && within {
            return None;
        }
        if (a.lat > p.lat) != (b.lat > p.lat) {
            let lon_at = a.lon + (b.lon - a.lon) * (p.lat - a.lat) / (b.lat - a.lat);
            if p.lon < lon_at {
                inside = !inside;
            }
        }
    }
    Some(inside)
}

/// A closed longitude/latitude box that does not cross the antimeridian (`west <= east`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CoverBox {
    /// Southern latitude.
    pub south: f64,
    /// Northern latitude.
    pub north: f64,
    /// Western longitude.
    pub west: f64,
    /// Eastern longitude.
    pub east: f64,
}

/// Boxes that hold every valid point passing the condition (more, near the edges): what a geo
/// index looks up. One box, or two when the region crosses the antimeridian.
pub fn cover(
    bounding_box: Option<&GeoBoundingBox>,
    radius: Option<&GeoRadius>,
    polygon: Option<&GeoPolygon>,
) -> Option<Vec<CoverBox>> {
    if let Some(b) = bounding_box {
        let (south, north) = (b.bottom_right.lat, b.top_left.lat);
        let (west, east) = (b.top_left.lon, b.bottom_right.lon);
        return Some(wrap(south, north, west, east));
    }
    if let Some(c) = radius {
        return Some(circle_cover(c));
    }
    let polygon = polygon?;
    let points = &polygon.exterior.points;
    let fold = |f: fn(f64, f64) -> f64, start: f64, get: fn(&GeoPoint) -> f64| {
        points.iter().map(get).fold(start, f)
    };
    Some(vec![CoverBox {
        south: fold(f64::min, f64::INFINITY, |p| p.lat),
        north: fold(f64::max, f64::NEG_INFINITY, |p| p.lat),
        west: fold(f64::min, f64::INFINITY, |p| p.lon),
        east: fold(f64::max, f64::NEG_INFINITY, |p| p.lon),
    }])
}

/// A box from `west` eastwards to `east`, split at the antimeridian when `west > east`.
fn wrap(south: f64, north: f64, west: f64, east: f64) -> Vec<CoverBox> {
    let band = |west, east| CoverBox {
        south,
        north,
        west,
        east,
    };
    if west > east {
        vec![band(west, 180.0), band(-180.0, east)]
    } else {
        vec![band(west, east)]
    }
}

/// The latitude band of a circle, and the longitudes of its widest point
/// (<http://janmatuschek.de/LatitudeLongitudeBoundingCoordinates>), widened by a hair so
/// rounding never leaves a passing point out; the whole band of longitudes when the circle
/// holds a pole.
fn circle_cover(c: &GeoRadius) -> Vec<CoverBox> {
    // A slightly smaller sphere gives a slightly larger angle: a margin, not an error.
    let angle = (c.radius.max(0.0) / (EARTH_RADIUS_M * (1.0 - 1e-9))).to_degrees() + 1e-9;
    let (south, north) = (c.center.lat - angle, c.center.lat + angle);
    if south <= -90.0 || north >= 90.0 || angle >= 180.0 {
        return vec![CoverBox {
            south: south.max(-90.0),
            north: north.min(90.0),
            west: -180.0,
            east: 180.0,
        }];
    }
    let spread = (angle.to_radians().sin() / c.center.lat.to_radians().cos()).asin();
    let spread = spread.to_degrees() + 1e-9;
    if spread.is_nan() || spread >= 180.0 {
        return vec![CoverBox {
            south,
            north,
            west: -180.0,
            east: 180.0,
        }];
    }
    let (west, east) = (c.center.lon - spread, c.center.lon + spread);
    match (west < -180.0, east > 180.0) {
        (false, false) => wrap(south, north, west, east),
        (true, _) => wrap(south, north, west + 360.0, east.min(180.0)),
        (false, true) => wrap(south, north, west, east - 360.0),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn at(lon: f64, lat: f64) -> GeoPoint {
        GeoPoint { lon, lat }
    }

    fn ring(points: &[(f64, f64)]) -> GeoLineString {
        GeoLineString {
            points: points.iter().map(|&(lon, lat)| at(lon, lat)).collect(),
        }
    }

    fn covered(boxes: &[CoverBox], p: GeoPoint) -> bool {
        boxes
            .iter()
            .any(|b| b.south <= p.lat && p.lat <= b.north && b.west <= p.lon && p.lon <= b.east)
    }

    #[test]
    fn haversine_matches_known_distances() {
        // Berlin to Paris on the mean sphere (computed independently: 877,459.9 m).
        let d = haversine(at(13.404954, 52.520008), at(2.352222, 48.856613));
        assert!((d - 877_459.9).abs() < 0.1, "{d}");
        let quarter = haversine(at(0.0, 0.0), at(90.0, 0.0));
        assert!((quarter - EARTH_RADIUS_M * std::f64::consts::FRAC_PI_2).abs() < 1e-6);
    }

    #[test]
    fn boxes_exclude_edges_and_cross_the_antimeridian() {
        let b = GeoBoundingBox {
            top_left: at(10.0, 20.0),
            bottom_right: at(20.0, 10.0),
        };
        assert!(in_box(&b, at(15.0, 15.0)));
        assert!(!in_box(&b, at(10.0, 15.0)), "edges are out");
        assert!(!in_box(&b, at(25.0, 15.0)));
        let across = GeoBoundingBox {
            top_left: at(170.0, 10.0),
            bottom_right: at(-170.0, -10.0),
        };
        assert!(in_box(&across, at(179.0, 0.0)));
        assert!(in_box(&across, at(-179.0, 0.0)));
        assert!(!in_box(&across, at(0.0, 0.0)));
        assert_eq!(cover(Some(&across), None, None).unwrap().len(), 2);
    }

    #[test]
    fn polygons_exclude_their_rings_and_holes() {
        let square = ring(&[
            (0.0, 0.0),
            (10.0, 0.0),
            (10.0, 10.0),
            (0.0, 10.0),
            (0.0, 0.0),
        ]);
        let hole = ring(&[(4.0, 4.0), (6.0, 4.0), (6.0, 6.0), (4.0, 6.0), (4.0, 4.0)]);
        let polygon = GeoPolygon {
            exterior: square,
            interiors: Some(vec![hole]),
        };
        assert!(in_polygon(&polygon, at(1.0, 1.0)));
        assert!(in_polygon(&polygon, at(9.9, 5.0)));
        assert!(!in_polygon(&polygon, at(5.0, 5.0)), "in the hole");
        assert!(!in_polygon(&polygon, at(4.0, 5.0)), "on the hole's ring");
        assert!(!in_polygon(&polygon, at(0.0, 5.0)), "on the exterior");
        assert!(!in_polygon(&polygon, at(10.0, 10.0)), "a corner");
        assert!(!in_polygon(&polygon, at(11.0, 5.0)));
    }

    #[test]
    fn covers_hold_every_passing_point() {
        // Circles of many sizes and places, near the poles and the antimeridian too: every
        // point that passes lies in a cover box.
        let mut seed = 7u64;
        let mut next = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 11) as f64 / (1u64 << 53) as f64
        };
        for _ in 0..300 {
            let c = GeoRadius {
                center: at(next() * 360.0 - 180.0, next() * 180.0 - 90.0),
                radius: 10f64.powf(next() * 7.0),
            };
            let boxes = cover(None, Some(&c), None).unwrap();
            for _ in 0..300 {
                // Points near the centre, so many pass.
                let spread = (c.radius / 111_000.0).min(180.0) * 1.5;
                let lon = (c.center.lon + (next() * 2.0 - 1.0) * spread + 540.0) % 360.0 - 180.0;
                let lat = (c.center.lat + (next() * 2.0 - 1.0) * spread).clamp(-90.0, 90.0);
                let p = at(lon, lat);
                if in_circle(&c, p) {
                    assert!(covered(&boxes, p), "{c:?} {p:?} {boxes:?}");
                }
            }
        }
    }

    #[test]
    fn payload_points_and_shapes_are_checked() {
        assert_eq!(point(&json!({"lon": 1, "lat": 2.5})), Some(at(1.0, 2.5)));
        assert_eq!(point(&json!({"lon": 181, "lat": 0})), None);
        assert_eq!(point(&json!({"lon": "1", "lat": 0})), None);
        assert_eq!(point(&json!([1, 2])), None);
        let open = GeoPolygon {
            exterior: ring(&[(0.0, 0.0), (1.0, 0.0), (1.0, 1.0), (0.0, 1.0)]),
            interiors: None,
        };
        let err = validate(None, None, Some(&open), "filter.must[0]")
            .unwrap_err()
            .to_string();
        assert!(err.contains("filter.must[0].geo_polygon.exterior"), "{err}");
        let far = GeoRadius {
            center: at(0.0, 91.0),
            radius: 1.0,
        };
        let err = validate(None, Some(&far), None, "f")
            .unwrap_err()
            .to_string();
        assert!(err.contains("f.geo_radius.center"), "{err}");
    }
}
