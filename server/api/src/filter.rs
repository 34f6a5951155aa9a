//! Payload filters in Qdrant's shape: `must` / `should` / `must_not` over conditions.
//!
//! As in Qdrant, a filter refuses keys it does not know; here its conditions, `match` and
//! `range` do too, since a misspelt or unimplemented test would otherwise match more points
//! than asked (a filter of only `min_should` would match every point). Qdrant's tests that
//! Cairn does not implement are parsed and refused by [`RefuseUnsupported`].

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::unsupported::{refuse_each, refuse_set, refuse_within};
use crate::{
    DatetimeRange, GeoBoundingBox, GeoPoint, GeoPolygon, GeoRadius, PointId, RefuseUnsupported,
    Unsupported,
};

/// A boolean combination of conditions. `must`: all hold; `should`: at least one holds (when
/// any are given); `must_not`: none holds. Each accepts one condition or a list, as Qdrant does.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Filter {
    /// All of these.
    #[serde(
        default,
        deserialize_with = "one_or_many",
        skip_serializing_if = "Option::is_none"
    )]
    pub must: Option<Vec<Condition>>,
    /// At least one of these.
    #[serde(
        default,
        deserialize_with = "one_or_many",
        skip_serializing_if = "Option::is_none"
    )]
    pub should: Option<Vec<Condition>>,
    /// None of these.
    #[serde(
        default,
        deserialize_with = "one_or_many",
        skip_serializing_if = "Option::is_none"
    )]
    pub must_not: Option<Vec<Condition>>,
    /// At least `min_count` of these.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_should: Option<MinShould>,
}

/// `min_should`: at least `min_count` of the conditions hold.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MinShould {
    /// The conditions.
    #[schema(no_recursion)]
    pub conditions: Vec<Condition>,
    /// How many must hold.
    pub min_count: usize,
}

fn one_or_many<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<Condition>>, D::Error> {
    // An untagged enum would hide the inner error; decode through Value to keep the message.
    let value = Option::<Value>::deserialize(d)?;
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(items)) => items
            .into_iter()
            .map(|v| serde_json::from_value(v).map_err(serde::de::Error::custom))
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        Some(other) => serde_json::from_value::<Condition>(other)
            .map(|c| Some(vec![c]))
            .map_err(serde::de::Error::custom),
    }
}

/// One filter condition.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum Condition {
    /// A test on a payload key (boxed: it holds every Qdrant field test, refused ones too).
    Field(Box<FieldCondition>),
    /// The point's id is one of these.
    HasId {
        /// Accepted ids.
        has_id: Vec<PointId>,
    },
    /// The key is missing, null or an empty array.
    IsEmpty {
        /// `{"key": …}`.
        is_empty: KeyRef,
    },
    /// The key is present with a null value.
    IsNull {
        /// `{"key": …}`.
        is_null: KeyRef,
    },
    /// Some element of the array at `key` passes `filter` alone (every condition on that one
    /// element, its keys relative to it).
    NestedArray {
        /// `{"key", "filter"}`.
        nested: Box<NestedCondition>,
    },
    /// The point holds the named vector (`""`: the unnamed one), dense or sparse.
    HasVector {
        /// The vector's name.
        has_vector: String,
    },
    /// A nested filter.
    #[schema(no_recursion)]
    Nested(Box<Filter>),
}

/// `nested`: a filter that one element of an array of objects must pass on its own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NestedCondition {
    /// Dotted path of the array (`a[]` and `a` alike).
    pub key: String,
    /// The filter each element is tried against.
    #[schema(no_recursion)]
    pub filter: Filter,
}

/// `{"key": "a.b"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct KeyRef {
    /// Dotted payload path.
    pub key: String,
}

impl<'de> Deserialize<'de> for Condition {
    /// Dispatches on which key is present, so errors name the real problem instead of serde's
    /// "data did not match any variant".
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let value = Value::deserialize(d)?;
        let Value::Object(map) = &value else {
            return Err(D::Error::custom("a filter condition must be a JSON object"));
        };
        fn from<T: serde::de::DeserializeOwned, E: serde::de::Error>(v: Value) -> Result<T, E> {
            serde_json::from_value(v).map_err(E::custom)
        }
        // `has_id`, `is_empty` and `is_null` conditions hold that one key and nothing else.
        let alone = |name: &str| match map.keys().find(|k| *k != name) {
            Some(other) => Err(D::Error::custom(format!(
                "unknown field `{other}` in a `{name}` condition"
            ))),
            None => Ok(()),
        };
        if map.contains_key("key") {
            Ok(Condition::Field(Box::new(from::<_, D::Error>(value)?)))
        } else if let Some(ids) = map.get("has_id") {
            alone("has_id")?;
            Ok(Condition::HasId {
                has_id: from::<_, D::Error>(ids.clone())?,
            })
        } else if let Some(key) = map.get("is_empty") {
            alone("is_empty")?;
            Ok(Condition::IsEmpty {
                is_empty: from::<_, D::Error>(key.clone())?,
            })
        } else if let Some(key) = map.get("is_null") {
            alone("is_null")?;
            Ok(Condition::IsNull {
                is_null: from::<_, D::Error>(key.clone())?,
            })
        } else if let Some(nested) = map.get("nested") {
            alone("nested")?;
            Ok(Condition::NestedArray {
                nested: from::<_, D::Error>(nested.clone())?,
            })
        } else if let Some(name) = map.get("has_vector") {
            alone("has_vector")?;
            Ok(Condition::HasVector {
                has_vector: from::<_, D::Error>(name.clone())?,
            })
        } else if ["must", "should", "must_not", "min_should"]
            .iter()
            .any(|k| map.contains_key(*k))
        {
            let mut nested: Filter = from::<_, D::Error>(value)?;
            if nested.must.is_none() && nested.should.is_none() && nested.must_not.is_none() {
                // `{"must": null}`: no condition, which holds. Kept as an empty `must` so it
                // is written back as a nested filter, not as `{}` (the internal wire carries
                // filters to other nodes).
                nested.must = Some(Vec::new());
            }
            Ok(Condition::Nested(Box::new(nested)))
        } else if let Some(qdrant_only) = ["slice"].into_iter().find(|k| map.contains_key(*k)) {
            Err(D::Error::custom(Unsupported::field(qdrant_only)))
        } else {
            let keys: Vec<String> = map.keys().map(|k| format!("`{k}`")).collect();
            Err(D::Error::custom(format!(
                "unknown filter condition {{{}}}: expected one of `key`, `has_id`, `is_empty`, \
                 `is_null`, `has_vector`, `nested` or a nested `must`/`should`/`must_not`",
                keys.join(", ")
            )))
        }
    }
}

/// A test on one payload key: exactly one of `match`, `range`, `values_count` or a geo test.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FieldCondition {
    /// Dotted payload path; arrays on the path match when any element matches.
    pub key: String,
    /// Equality tests.
    #[serde(default, rename = "match", skip_serializing_if = "Option::is_none")]
    pub r#match: Option<Match>,
    /// Numeric or datetime bounds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub range: Option<RangeCondition>,
    /// Inside a longitude/latitude box.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub geo_bounding_box: Option<GeoBoundingBox>,
    /// Within a distance of a point.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub geo_radius: Option<GeoRadius>,
    /// Inside a polygon.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub geo_polygon: Option<GeoPolygon>,
    /// Bounds on how many values the key holds (an array's elements each count; a missing
    /// key or a null holds none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub values_count: Option<ValuesCount>,
    /// Refused (use the `{"is_empty": {"key": …}}` condition).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(ignore)]
    pub is_empty: Option<Value>,
    /// Refused (use the `{"is_null": {"key": …}}` condition).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(ignore)]
    pub is_null: Option<Value>,
}

/// Equality tests: exactly one of `value`, `any`, `except`, `text`, `text_any`, `prefix`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Match {
    /// Equal to this keyword, integer or boolean.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
    /// Equal to any of these.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub any: Option<Vec<Value>>,
    /// Equal to none of these.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub except: Option<Vec<Value>>,
    /// Every word of this text, where a text index covers the key (words: lower-cased runs of
    /// letters and digits); elsewhere this exact substring (Qdrant's rule for keys without a
    /// full-text index).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Any word of this text, where a text index covers the key; elsewhere any of its
    /// whitespace-separated pieces as a substring (Qdrant's rule). A text of no words matches
    /// nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text_any: Option<String>,
    /// Refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(ignore)]
    pub phrase: Option<Value>,
    /// A string value starting with this (case and all), whatever index the key has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
}

/// Numeric bounds; absent bounds are open.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Range {
    /// Greater than.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gt: Option<f64>,
    /// Greater than or equal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gte: Option<f64>,
    /// Less than.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lt: Option<f64>,
    /// Less than or equal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lte: Option<f64>,
}

/// A `range`: numeric bounds, or datetime bounds when any bound is a string (Qdrant's rule);
/// a range never mixes the two.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum RangeCondition {
    /// Numeric bounds.
    Numbers(Range),
    /// Datetime bounds (payload strings read as datetimes).
    Datetimes(DatetimeRange),
}

impl<'de> Deserialize<'de> for RangeCondition {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let value = Value::deserialize(d)?;
        let bounds = value.as_object().map(|map| {
            ["gt", "gte", "lt", "lte"]
                .iter()
                .filter_map(|k| map.get(*k))
                .filter(|v| !v.is_null())
                .collect::<Vec<_>>()
        });
        let strings = bounds.iter().flatten().filter(|v| v.is_string()).count();
        if strings == 0 {
            return serde_json::from_value(value)
                .map(RangeCondition::Numbers)
                .map_err(D::Error::custom);
        }
        if bounds.is_some_and(|b| b.len() != strings) {
            return Err(D::Error::custom(
                "range bounds are either all numbers or all datetime strings",
            ));
        }
        serde_json::from_value(value)
            .map(RangeCondition::Datetimes)
            .map_err(D::Error::custom)
    }
}

impl From<Range> for RangeCondition {
    fn from(r: Range) -> Self {
        RangeCondition::Numbers(r)
    }
}

impl From<DatetimeRange> for RangeCondition {
    fn from(r: DatetimeRange) -> Self {
        RangeCondition::Datetimes(r)
    }
}

/// `values_count` bounds; at least one given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ValuesCount {
    /// More than this many.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gt: Option<usize>,
    /// At least this many.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gte: Option<usize>,
    /// Fewer than this many.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lt: Option<usize>,
    /// At most this many.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lte: Option<usize>,
}

impl ValuesCount {
    /// Whether `n` values are within the bounds.
    pub fn holds(&self, n: usize) -> bool {
        within([self.gt, self.gte, self.lt, self.lte], n)
    }
}

impl Range {
    /// Whether `x` is within the bounds.
    pub fn holds(&self, x: f64) -> bool {
        within([self.gt, self.gte, self.lt, self.lte], x)
    }
}

/// Whether `x` is within the bounds `[gt, gte, lt, lte]` (an absent one is open).
pub(crate) fn within<T: PartialOrd + Copy>([gt, gte, lt, lte]: [Option<T>; 4], x: T) -> bool {
    gt.is_none_or(|b| x > b)
        && gte.is_none_or(|b| x >= b)
        && lt.is_none_or(|b| x < b)
        && lte.is_none_or(|b| x <= b)
}

impl Filter {
    /// Every condition must hold.
    pub fn must(conditions: impl IntoIterator<Item = Condition>) -> Self {
        Self {
            must: Some(conditions.into_iter().collect()),
            ..Self::default()
        }
    }

    /// At least one condition must hold.
    pub fn should(conditions: impl IntoIterator<Item = Condition>) -> Self {
        Self {
            should: Some(conditions.into_iter().collect()),
            ..Self::default()
        }
    }

    /// No condition may hold.
    pub fn must_not(conditions: impl IntoIterator<Item = Condition>) -> Self {
        Self {
            must_not: Some(conditions.into_iter().collect()),
            ..Self::default()
        }
    }
}

impl Condition {
    /// A test on `key`: a `match` or a `range`.
    fn field(key: String, r#match: Option<Match>, range: Option<RangeCondition>) -> Self {
        Condition::Field(Box::new(FieldCondition {
            key,
            r#match,
            range,
            ..FieldCondition::default()
        }))
    }

    /// The payload value at `key` equals `value` (a keyword, integer or boolean).
    pub fn matches(key: impl Into<String>, value: impl Into<Value>) -> Self {
        let value = Match {
            value: Some(value.into()),
            ..Match::default()
        };
        Self::field(key.into(), Some(value), None)
    }

    /// The payload value at `key` equals one of `values`.
    pub fn matches_any<V: Into<Value>>(
        key: impl Into<String>,
        values: impl IntoIterator<Item = V>,
    ) -> Self {
        let any = Match {
            any: Some(values.into_iter().map(Into::into).collect()),
            ..Match::default()
        };
        Self::field(key.into(), Some(any), None)
    }

    /// The number at `key` lies within `range` (a [`Range`]), or the datetime there within a
    /// [`DatetimeRange`].
    pub fn range(key: impl Into<String>, range: impl Into<RangeCondition>) -> Self {
        Self::field(key.into(), None, Some(range.into()))
    }

    /// A point at `key` lies within `radius` metres of `center`.
    pub fn geo_radius(key: impl Into<String>, center: GeoPoint, radius: f64) -> Self {
        Condition::Field(Box::new(FieldCondition {
            key: key.into(),
            geo_radius: Some(GeoRadius { center, radius }),
            ..FieldCondition::default()
        }))
    }

    /// A point at `key` lies inside the box.
    pub fn geo_bounding_box(
        key: impl Into<String>,
        top_left: GeoPoint,
        bottom_right: GeoPoint,
    ) -> Self {
        Condition::Field(Box::new(FieldCondition {
            key: key.into(),
            geo_bounding_box: Some(GeoBoundingBox {
                top_left,
                bottom_right,
            }),
            ..FieldCondition::default()
        }))
    }

    /// A point at `key` lies inside the polygon.
    pub fn geo_polygon(key: impl Into<String>, polygon: GeoPolygon) -> Self {
        Condition::Field(Box::new(FieldCondition {
            key: key.into(),
            geo_polygon: Some(polygon),
            ..FieldCondition::default()
        }))
    }

    /// The point's id is one of `ids`.
    pub fn has_id<I: Into<PointId>>(ids: impl IntoIterator<Item = I>) -> Self {
        Condition::HasId {
            has_id: ids.into_iter().map(Into::into).collect(),
        }
    }
}

impl RefuseUnsupported for Filter {
    fn refuse_unsupported(&self) -> Result<(), Unsupported> {
        for (name, list) in [
            ("must", &self.must),
            ("should", &self.should),
            ("must_not", &self.must_not),
        ] {
            refuse_each(name, list.as_deref().unwrap_or_default())?;
        }
        if let Some(min) = &self.min_should {
            refuse_each("conditions", &min.conditions).map_err(|e| e.within("min_should"))?;
        }
        Ok(())
    }
}

impl RefuseUnsupported for Condition {
    fn refuse_unsupported(&self) -> Result<(), Unsupported> {
        match self {
            Condition::Field(field) => field.refuse_unsupported(),
            Condition::Nested(filter) => filter.refuse_unsupported(),
            Condition::NestedArray { nested } => nested
                .filter
                .refuse_unsupported()
                .map_err(|e| e.within("nested.filter")),
            Condition::HasId { .. }
            | Condition::IsEmpty { .. }
            | Condition::IsNull { .. }
            | Condition::HasVector { .. } => Ok(()),
        }
    }
}

impl RefuseUnsupported for FieldCondition {
    fn refuse_unsupported(&self) -> Result<(), Unsupported> {
        refuse_set(&[("is_empty", &self.is_empty), ("is_null", &self.is_null)])?;
        refuse_within("match", self.r#match.as_ref())
    }
}

impl RefuseUnsupported for Match {
    fn refuse_unsupported(&self) -> Result<(), Unsupported> {
        refuse_set(&[("phrase", &self.phrase)])
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn parses_qdrant_shapes() {
        let f: Filter = serde_json::from_str(
            r#"{"must":[{"key":"city","match":{"value":"London"}},{"has_id":[1,"a3bb189e-8bf9-3888-9912-ace4e6543002"]}],
                "should":{"key":"n","range":{"gte":1.5,"lt":3}},
                "must_not":[{"must":[{"is_empty":{"key":"tags"}}]}]}"#,
        )
        .unwrap();
        assert_eq!(f.must.as_ref().unwrap().len(), 2);
        assert!(matches!(
            &f.should.as_ref().unwrap()[0],
            Condition::Field(field) if field.range.is_some()
        ));
        assert!(matches!(
            f.must_not.as_ref().unwrap()[0],
            Condition::Nested(_)
        ));
    }

    #[test]
    fn constructors_write_the_wire_shape() {
        let f = Filter::must([
            Condition::matches("city", "London"),
            Condition::range(
                "n",
                Range {
                    gte: Some(1.5),
                    ..Range::default()
                },
            ),
            Condition::has_id([7u64]),
        ]);
        assert_eq!(
            serde_json::to_value(&f).unwrap(),
            serde_json::json!({"must": [
                {"key": "city", "match": {"value": "London"}},
                {"key": "n", "range": {"gte": 1.5}},
                {"has_id": [7]}
            ]})
        );
        let back: Filter = serde_json::from_value(serde_json::to_value(&f).unwrap()).unwrap();
        assert_eq!(back, f);
    }

    #[test]
    fn datetime_and_geo_conditions_parse_and_write_back() {
        let f: Filter = serde_json::from_str(
            r#"{"must": [
                {"key": "t", "range": {"gte": "2023-02-08", "lt": "2023-02-09T00:00:00Z", "gt": null}},
                {"key": "at", "geo_radius": {"center": {"lon": 13.4, "lat": 52.5}, "radius": 1000.0}},
                {"key": "at", "geo_bounding_box": {"top_left": {"lon": 13, "lat": 53}, "bottom_right": {"lon": 14, "lat": 52}}},
                {"key": "at", "geo_polygon": {"exterior": {"points": [{"lon": 0, "lat": 0}, {"lon": 1, "lat": 0}, {"lon": 0, "lat": 1}, {"lon": 0, "lat": 0}]}}}
            ]}"#,
        )
        .unwrap();
        let must = f.must.as_ref().unwrap();
        assert!(matches!(
            &must[0],
            Condition::Field(c) if matches!(c.range, Some(RangeCondition::Datetimes(_)))
        ));
        let wire = serde_json::to_string(&f).unwrap();
        assert_eq!(serde_json::from_str::<Filter>(&wire).unwrap(), f, "{wire}");
        assert_eq!(refused(&wire), None);
        for (json, needle) in [
            (
                r#"{"must": {"key": "t", "range": {"gte": "2023-02-08", "lt": 5}}}"#,
                "all numbers or all datetime strings",
            ),
            (
                r#"{"must": {"key": "t", "range": {"gte": "last week"}}}"#,
                "'last week' is not a datetime",
            ),
            (
                r#"{"must": {"key": "at", "geo_radius": {"center": {"lon": 1, "lat": 2, "alt": 3}, "radius": 1}}}"#,
                "unknown field `alt`",
            ),
        ] {
            let err = serde_json::from_str::<Filter>(json)
                .unwrap_err()
                .to_string();
            assert!(err.contains(needle), "{json}: {err}");
        }
    }

    #[test]
    fn unknown_condition_says_what_is_expected() {
        let err = serde_json::from_str::<Filter>(r#"{"must":[{"keyy":"x"}]}"#).unwrap_err();
        assert!(
            err.to_string()
                .contains("unknown filter condition {`keyy`}"),
            "{err}"
        );
    }

    fn refused(json: &str) -> Option<String> {
        crate::unsupported::refused_path::<Filter>(json)
    }

    #[test]
    fn qdrant_tests_cairn_lacks_are_refused_with_their_path() {
        let cases = [
            (
                r#"{"min_should": {"conditions": [{"key": "a", "match": {"phrase": "x"}}], "min_count": 1}}"#,
                "min_should.conditions[0].match.phrase",
            ),
            (
                r#"{"must_not": {"key": "a", "is_null": true}}"#,
                "must_not[0].is_null",
            ),
            (
                r#"{"must": [{"key": "a", "is_empty": true}]}"#,
                "must[0].is_empty",
            ),
            (
                r#"{"must": [{"key": "a", "is_null": false}]}"#,
                "must[0].is_null",
            ),
            (
                r#"{"should": [{"has_id": [1]}, {"key": "a", "match": {"phrase": "x"}}]}"#,
                "should[1].match.phrase",
            ),
            (
                r#"{"must": {"key": "a", "match": {"phrase": "x y"}}}"#,
                "must[0].match.phrase",
            ),
        ];
        for (json, path) in cases {
            assert_eq!(refused(json).as_deref(), Some(path), "{json}");
        }
    }

    #[test]
    fn nulls_are_unset_and_implemented_filters_pass() {
        for json in [
            r#"{"min_should": null, "must": null}"#,
            r#"{"must": [{"key": "a", "match": {"value": 1, "text": null}, "range": null, "geo_radius": null, "is_empty": null}]}"#,
            r#"{"must": [{"key": "a", "range": {"gte": 1, "lt": null}}], "should": {"is_empty": {"key": "b"}}, "must_not": [{"is_null": {"key": "c"}}, {"has_id": [1]}]}"#,
        ] {
            assert_eq!(refused(json), None, "{json}");
            // The SDK sends filters as JSON, and nodes pass them on in partition calls
            // through the same serde impls: what a filter writes must parse back.
            let filter: Filter = serde_json::from_str(json).unwrap();
            let wire = serde_json::to_string(&filter).unwrap();
            assert_eq!(
                serde_json::from_str::<Filter>(&wire).unwrap(),
                filter,
                "{wire}"
            );
        }
    }

    #[test]
    fn unknown_keys_anywhere_in_a_filter_are_parse_errors_naming_them() {
        let cases = [
            (r#"{"must": [], "mustt": []}"#, "unknown field `mustt`"),
            (
                r#"{"must": [{"key": "a", "match": {"value": 1}, "mach": {}}]}"#,
                "unknown field `mach`",
            ),
            (
                r#"{"must": [{"key": "a", "match": {"value": 1, "values": [2]}}]}"#,
                "unknown field `values`",
            ),
            (
                r#"{"must": [{"key": "a", "range": {"gt": 1, "gtee": 2}}]}"#,
                "unknown field `gtee`",
            ),
            (
                r#"{"must": [{"is_empty": {"key": "a", "x": 1}}]}"#,
                "unknown field `x`",
            ),
            (
                r#"{"must": [{"has_id": [1], "x": 1}]}"#,
                "unknown field `x` in a `has_id` condition",
            ),
            (
                r#"{"must": [{"nested": {"key": "a", "filter": {}, "x": 1}}]}"#,
                "unknown field `x`",
            ),
            (
                r#"{"must": [{"has_vector": "image", "x": 1}]}"#,
                "unknown field `x` in a `has_vector` condition",
            ),
            (
                r#"{"must": [{"slice": {}}]}"#,
                "slice: not supported by Cairn",
            ),
        ];
        for (json, needle) in cases {
            let err = serde_json::from_str::<Filter>(json)
                .unwrap_err()
                .to_string();
            assert!(err.contains(needle), "{json}: {err}");
        }
    }

    #[test]
    fn constructors_never_write_refused_fields() {
        let f = Filter::should([Condition::matches_any("a", [1, 2])]);
        assert_eq!(
            serde_json::to_value(&f).unwrap(),
            serde_json::json!({"should": [{"key": "a", "match": {"any": [1, 2]}}]})
        );
    }
}
