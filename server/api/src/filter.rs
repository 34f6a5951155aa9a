//! Payload filters in Qdrant's shape: `must` / `should` / `must_not` over conditions.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::PointId;

/// A boolean combination of conditions. `must`: all hold; `should`: at least one holds (when
/// any are given); `must_not`: none holds. Each accepts one condition or a list, as Qdrant does.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Condition {
    /// A test on a payload key.
    Field(FieldCondition),
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
    /// A nested filter.
    Nested(Box<Filter>),
}

/// `{"key": "a.b"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
        if map.contains_key("key") {
            Ok(Condition::Field(from::<_, D::Error>(value)?))
        } else if let Some(ids) = map.get("has_id") {
            Ok(Condition::HasId {
                has_id: from::<_, D::Error>(ids.clone())?,
            })
        } else if let Some(key) = map.get("is_empty") {
            Ok(Condition::IsEmpty {
                is_empty: from::<_, D::Error>(key.clone())?,
            })
        } else if let Some(key) = map.get("is_null") {
            Ok(Condition::IsNull {
                is_null: from::<_, D::Error>(key.clone())?,
            })
        } else if ["must", "should", "must_not"]
            .iter()
            .any(|k| map.contains_key(*k))
        {
            Ok(Condition::Nested(Box::new(from::<_, D::Error>(value)?)))
        } else {
            Err(D::Error::custom(
                "unknown filter condition: expected one of `key`, `has_id`, `is_empty`, `is_null` or a nested `must`/`should`/`must_not`",
            ))
        }
    }
}

/// A test on one payload key: exactly one of `match` or `range`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FieldCondition {
    /// Dotted payload path; arrays on the path match when any element matches.
    pub key: String,
    /// Equality tests.
    #[serde(default, rename = "match", skip_serializing_if = "Option::is_none")]
    pub r#match: Option<Match>,
    /// Numeric bounds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub range: Option<Range>,
}

/// Equality tests: exactly one of `value`, `any`, `except`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
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
}

/// Numeric bounds; absent bounds are open.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
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
    /// The payload value at `key` equals `value` (a keyword, integer or boolean).
    pub fn matches(key: impl Into<String>, value: impl Into<Value>) -> Self {
        Condition::Field(FieldCondition {
            key: key.into(),
            r#match: Some(Match {
                value: Some(value.into()),
                ..Match::default()
            }),
            range: None,
        })
    }

    /// The payload value at `key` equals one of `values`.
    pub fn matches_any<V: Into<Value>>(
        key: impl Into<String>,
        values: impl IntoIterator<Item = V>,
    ) -> Self {
        Condition::Field(FieldCondition {
            key: key.into(),
            r#match: Some(Match {
                any: Some(values.into_iter().map(Into::into).collect()),
                ..Match::default()
            }),
            range: None,
        })
    }

    /// The number at `key` lies within `range`.
    pub fn range(key: impl Into<String>, range: Range) -> Self {
        Condition::Field(FieldCondition {
            key: key.into(),
            r#match: None,
            range: Some(range),
        })
    }

    /// The point's id is one of `ids`.
    pub fn has_id<I: Into<PointId>>(ids: impl IntoIterator<Item = I>) -> Self {
        Condition::HasId {
            has_id: ids.into_iter().map(Into::into).collect(),
        }
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
            f.should.as_ref().unwrap()[0],
            Condition::Field(FieldCondition { range: Some(_), .. })
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
    fn unknown_condition_says_what_is_expected() {
        let err = serde_json::from_str::<Filter>(r#"{"must":[{"keyy":"x"}]}"#).unwrap_err();
        assert!(
            err.to_string().contains("unknown filter condition"),
            "{err}"
        );
    }
}
