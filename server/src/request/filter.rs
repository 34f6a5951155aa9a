//! Evaluates Qdrant-style payload filters against a point's id and payload.
//!
//! Semantics follow Qdrant: a dotted key walks nested objects, and when the path crosses an
//! array every element is tried, so `{"key": "tags", "match": {"value": "x"}}` matches a point
//! whose `tags` array contains "x". Numbers compare numerically (1 equals 1.0).

use cairn_api::internal::NewPoint;
use cairn_api::{
    Condition, Datetime, FieldCondition, Filter, Match, Payload, PointId, RangeCondition,
    ValuesCount,
};
use serde_json::Value;

use crate::error::{Result, ServerError};
use crate::request::geo;

/// Checks a filter's shape before it runs, so mistakes are a 400 that names the field.
pub fn validate(filter: &Filter, path: &str, max_depth: usize) -> Result<()> {
    validate_at(filter, path, 1, max_depth)
}

fn validate_at(filter: &Filter, path: &str, depth: usize, max_depth: usize) -> Result<()> {
    if depth > max_depth {
        return Err(ServerError::LimitExceeded(format!(
            "{path}: filters nest deeper than the maximum of {max_depth} levels \
             (limits.max_filter_depth)"
        )));
    }
    let min_should = filter.min_should.as_ref().map(|m| &m.conditions);
    for (name, list) in [
        ("must", filter.must.as_ref()),
        ("should", filter.should.as_ref()),
        ("must_not", filter.must_not.as_ref()),
        ("min_should.conditions", min_should),
    ] {
        for (i, condition) in list.into_iter().flatten().enumerate() {
            let here = format!("{path}.{name}[{i}]");
            match condition {
                Condition::Field(field) => validate_field(field, &here)?,
                Condition::Nested(inner) => validate_at(inner, &here, depth + 1, max_depth)?,
                Condition::NestedArray { nested } => {
                    if nested.key.is_empty() {
                        return Err(ServerError::InvalidRequest(format!(
                            "{here}.nested.key must not be empty"
                        )));
                    }
                    let inner = format!("{here}.nested.filter");
                    validate_at(&nested.filter, &inner, depth + 1, max_depth)?
                }
                Condition::HasId { .. }
                | Condition::IsEmpty { .. }
                | Condition::IsNull { .. }
                | Condition::HasVector { .. } => {}
            }
        }
    }
    Ok(())
}

fn validate_field(field: &FieldCondition, path: &str) -> Result<()> {
    let bad = |msg: String| Err(ServerError::InvalidRequest(format!("{path}: {msg}")));
    if field.key.is_empty() {
        return bad("key must not be empty".into());
    }
    let tests = [
        field.r#match.is_some(),
        field.range.is_some(),
        field.values_count.is_some(),
        field.geo_bounding_box.is_some(),
        field.geo_radius.is_some(),
        field.geo_polygon.is_some(),
    ];
    if tests.iter().filter(|&&t| t).count() != 1 {
        return bad(format!(
            "condition on `{}` needs exactly one of `match`, `range`, `values_count`, \
             `geo_bounding_box`, `geo_radius` or `geo_polygon`",
            field.key
        ));
    }
    geo::validate(
        field.geo_bounding_box.as_ref(),
        field.geo_radius.as_ref(),
        field.geo_polygon.as_ref(),
        path,
    )?;
    if let Some(count) = &field.values_count {
        if [count.gt, count.gte, count.lt, count.lte]
            .iter()
            .all(Option::is_none)
        {
            return bad("values_count needs at least one of `gt`, `gte`, `lt`, `lte`".into());
        }
        return Ok(());
    }
    match (&field.r#match, &field.range) {
        (None, None) | (Some(_), Some(_)) => Ok(()),
        (Some(m), None) => {
            let given = [
                m.value.is_some(),
                m.any.is_some(),
                m.except.is_some(),
                m.text.is_some(),
                m.text_any.is_some(),
                m.prefix.is_some(),
            ]
            .iter()
            .filter(|x| **x)
            .count();
            if given != 1 {
                return bad(
                    "match needs exactly one of `value`, `any`, `except`, `text`, \
                     `text_any`, `prefix`"
                        .into(),
                );
            }
            let values = m
                .value
                .iter()
                .chain(m.any.iter().flatten())
                .chain(m.except.iter().flatten());
            for v in values {
                if !matches!(v, Value::String(_) | Value::Number(_) | Value::Bool(_)) {
                    return bad(format!(
                        "match values must be strings, integers or booleans, got {v}"
                    ));
                }
            }
            Ok(())
        }
        (None, Some(r)) => {
            let given = match r {
                RangeCondition::Numbers(r) => [r.gt, r.gte, r.lt, r.lte].map(|b| b.is_some()),
                RangeCondition::Datetimes(r) => [r.gt, r.gte, r.lt, r.lte].map(|b| b.is_some()),
            };
            if !given.contains(&true) {
                return bad("range needs at least one of `gt`, `gte`, `lt`, `lte`".into());
            }
            Ok(())
        }
    }
}

/// How `match.text` reads a key: by words where a text index covers it, as a substring
/// elsewhere (Qdrant's rule). Answers whether `key` has a text index.
pub type TextKeys<'a> = &'a dyn Fn(&str) -> bool;

/// Which named vectors a point holds (`has_vector`): answers whether it has the one of that
/// name (`""`: the unnamed vector).
pub type HasVector<'a> = &'a dyn Fn(&str) -> bool;

/// A point that holds no vector a `has_vector` condition could name (tests of payload
/// conditions).
pub fn no_vectors(_: &str) -> bool {
    false
}

/// No key has a text index.
pub fn no_text_keys(_: &str) -> bool {
    false
}

/// Whether a point as stored (or about to be) passes `filter`: it holds its main vector
/// (named `main`) and those in its maps; `text` says which keys have a text index.
pub fn point_matches(filter: &Filter, point: &NewPoint, main: &str, text: TextKeys) -> bool {
    let holds = |name: &str| {
        name == main || point.extra.contains_key(name) || point.sparse.contains_key(name)
    };
    matches(filter, &point.id, point.payload.as_ref(), text, &holds)
}

/// Whether a point passes the filter. As in Qdrant, an empty `should` list passes nothing
/// (none of its conditions holds): LlamaIndex deletes nodes by a `should` of their ids, and an
/// empty list there must delete nothing rather than everything.
pub fn matches(
    filter: &Filter,
    id: &PointId,
    payload: Option<&Payload>,
    text: TextKeys,
    vectors: HasVector,
) -> bool {
    let holds = |c: &Condition| condition(c, id, payload, text, vectors);
    filter.must.as_ref().is_none_or(|all| all.iter().all(holds))
        && filter
            .should
            .as_ref()
            .is_none_or(|any| any.iter().any(holds))
        && filter
            .must_not
            .as_ref()
            .is_none_or(|none| !none.iter().any(holds))
        && filter
            .min_should
            .as_ref()
            .is_none_or(|m| m.conditions.iter().filter(|c| holds(c)).count() >= m.min_count)
}

fn condition(
    c: &Condition,
    id: &PointId,
    payload: Option<&Payload>,
    text: TextKeys,
    vectors: HasVector,
) -> bool {
    match c {
        Condition::Field(field) => {
            // The inner loop of every unindexed filter: values visited in place, no list built.
            let mut any = |f: &mut dyn FnMut(&Value) -> bool| any_value(payload, &field.key, f);
            match (&field.r#match, &field.range) {
                (
                    Some(Match {
                        text: Some(query), ..
                    }),
                    _,
                ) => {
                    let by_words = text(&field.key);
                    any(&mut |v| v.as_str().is_some_and(|v| text_matches(v, query, by_words)))
                }
                (
                    Some(Match {
                        text_any: Some(query),
                        ..
                    }),
                    _,
                ) => {
                    let by_words = text(&field.key);
                    any(&mut |v| {
                        v.as_str()
                            .is_some_and(|v| text_any_matches(v, query, by_words))
                    })
                }
                (
                    Some(Match {
                        prefix: Some(prefix),
                        ..
                    }),
                    _,
                ) => any(&mut |v| v.as_str().is_some_and(|v| v.starts_with(prefix.as_str()))),
                (Some(m), _) => match_values(m, &mut any),
                (None, Some(r)) => any(&mut |v| in_range(r, v)),
                (None, None) => match &field.values_count {
                    Some(count) => values_count_holds(payload, &field.key, *count),
                    None => any(&mut |v| {
                        geo::point(v).is_some_and(|p| {
                            field.geo_bounding_box.is_some_and(|b| geo::in_box(&b, p))
                                || field.geo_radius.is_some_and(|c| geo::in_circle(&c, p))
                                || field
                                    .geo_polygon
                                    .as_ref()
                                    .is_some_and(|polygon| geo::in_polygon(polygon, p))
                        })
                    }),
                },
            }
        }
        Condition::HasId { has_id } => has_id.contains(id),
        Condition::IsEmpty { is_empty } => {
            lookup(payload, &is_empty.key).iter().all(|v| v.is_null())
        }
        Condition::IsNull { is_null } => {
            let values = lookup(payload, &is_null.key);
            !values.is_empty() && values.iter().all(|v| v.is_null())
        }
        Condition::HasVector { has_vector } => vectors(has_vector),
        // Each element on its own: its keys relative to it, text indexes by their full path.
        Condition::NestedArray { nested } => {
            let text_within = |key: &str| text(&format!("{}.{key}", nested.key));
            lookup(payload, &nested.key).into_iter().any(|element| {
                element.as_object().is_some_and(|object| {
                    matches(&nested.filter, id, Some(object), &text_within, vectors)
                })
            })
        }
        Condition::Nested(inner) => matches(inner, id, payload, text, vectors),
    }
}

/// The words of a text, as text indexes hold them: lower-cased runs of letters and digits.
pub fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
}

/// `match.text`: every word of `query` among the value's words, or `query` a substring.
fn text_matches(value: &str, query: &str, by_words: bool) -> bool {
    if !by_words {
        return value.contains(query);
    }
    let held: std::collections::HashSet<String> = words(value).collect();
    words(query).all(|w| held.contains(&w))
}

/// `match.text_any`: some word of `query` among the value's words, or some whitespace-separated
/// piece of it a substring.
fn text_any_matches(value: &str, query: &str, by_words: bool) -> bool {
    if !by_words {
        return query.split_whitespace().any(|piece| value.contains(piece));
    }
    let held: std::collections::HashSet<String> = words(value).collect();
    words(query).any(|w| held.contains(&w))
}

/// Answers whether some value at a condition's key passes a test.
type AnyValue<'f> = dyn FnMut(&mut dyn FnMut(&Value) -> bool) -> bool + 'f;

fn match_values(m: &Match, any: &mut AnyValue) -> bool {
    if let Some(want) = &m.value {
        return any(&mut |v| same(v, want));
    }
    if let Some(values) = &m.any {
        return any(&mut |v| values.iter().any(|w| same(v, w)));
    }
    if let Some(except) = &m.except {
        return any(&mut |_| true) && !any(&mut |v| except.iter().any(|w| same(v, w)));
    }
    false
}

fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

/// A number within numeric bounds, or a string that reads as a datetime within datetime ones.
fn in_range(r: &RangeCondition, v: &Value) -> bool {
    match r {
        RangeCondition::Numbers(r) => v.as_f64().is_some_and(|x| r.holds(x)),
        RangeCondition::Datetimes(r) => datetime(v).is_some_and(|t| r.holds(t)),
    }
}

/// A payload value read as a datetime: a string in one of the spellings Qdrant accepts.
pub fn datetime(v: &Value) -> Option<Datetime> {
    v.as_str()?.parse().ok()
}

/// `values_count` as Qdrant reads it: each value found at the path counts its elements (an
/// array its length, nulls included; a null none; anything else one), and the condition holds
/// when any of them is within the bounds; a missing key counts none.
fn values_count_holds(payload: Option<&Payload>, key: &str, count: ValuesCount) -> bool {
    let found = at_path(payload, key);
    if found.is_empty() {
        return count.holds(0);
    }
    found.iter().any(|v| {
        count.holds(match v {
            Value::Array(items) => items.len(),
            Value::Null => 0,
            Value::Bool(_) | Value::Number(_) | Value::String(_) | Value::Object(_) => 1,
        })
    })
}

/// Whether `f` holds for some value at a dotted path, arrays flattened as [`lookup`] flattens
/// them, visiting the values in place and stopping at the first that passes.
pub fn any_value<'a>(
    payload: Option<&'a Payload>,
    key: &str,
    f: &mut dyn FnMut(&'a Value) -> bool,
) -> bool {
    let mut parts = key.split('.');
    let (Some(payload), Some(first)) = (payload, parts.next()) else {
        return false;
    };
    payload
        .get(first.strip_suffix("[]").unwrap_or(first))
        .is_some_and(|v| descend(v, parts, f))
}

/// [`any_value`] below `value`, with the path's `rest` still to walk.
fn descend<'a>(
    value: &'a Value,
    mut rest: std::str::Split<'_, char>,
    f: &mut dyn FnMut(&'a Value) -> bool,
) -> bool {
    let Some(part) = rest.next() else {
        return match value {
            Value::Array(items) => items.iter().any(&mut *f),
            other @ (Value::Null
            | Value::Bool(_)
            | Value::Number(_)
            | Value::String(_)
            | Value::Object(_)) => f(other),
        };
    };
    let part = part.strip_suffix("[]").unwrap_or(part);
    match value {
        Value::Array(items) => items
            .iter()
            .filter_map(|item| item.get(part))
            .any(|v| descend(v, rest.clone(), f)),
        other @ (Value::Null
        | Value::Bool(_)
        | Value::Number(_)
        | Value::String(_)
        | Value::Object(_)) => other.get(part).is_some_and(|v| descend(v, rest, f)),
    }
}

/// Every value at a dotted path, arrays flattened (an empty vector when the key is missing).
/// Qdrant's `a[].b` spelling reads as `a.b`: arrays on the path are crossed either way.
pub fn lookup<'a>(payload: Option<&'a Payload>, key: &str) -> Vec<&'a Value> {
    at_path(payload, key)
        .into_iter()
        .flat_map(|v| match v {
            Value::Array(items) => items.iter().collect::<Vec<_>>(),
            other @ (Value::Null
            | Value::Bool(_)
            | Value::Number(_)
            | Value::String(_)
            | Value::Object(_)) => vec![other],
        })
        .collect()
}

/// The values at a dotted path, arrays on the way crossed but the last ones not flattened.
fn at_path<'a>(payload: Option<&'a Payload>, key: &str) -> Vec<&'a Value> {
    let Some(payload) = payload else {
        return Vec::new();
    };
    let mut parts = key
        .split('.')
        .map(|part| part.strip_suffix("[]").unwrap_or(part));
    let Some(first) = parts.next() else {
        return Vec::new();
    };
    let mut current: Vec<&Value> = payload.get(first).into_iter().collect();
    for part in parts {
        current = current
            .into_iter()
            .flat_map(|v| match v {
                Value::Array(items) => items.iter().filter_map(|i| i.get(part)).collect::<Vec<_>>(),
                other @ (Value::Null
                | Value::Bool(_)
                | Value::Number(_)
                | Value::String(_)
                | Value::Object(_)) => other.get(part).into_iter().collect(),
            })
            .collect();
    }
    current
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn payload(json: &str) -> Payload {
        serde_json::from_str(json).unwrap()
    }

    fn filter(json: &str) -> Filter {
        let f: Filter = serde_json::from_str(json).unwrap();
        validate(&f, "filter", 16).unwrap();
        f
    }

    #[test]
    fn match_range_and_boolean_structure() {
        let p = payload(r#"{"city":"London","n":3,"tags":["a","b"],"addr":{"zip":[{"code":7}]}}"#);
        let id = PointId::Num(1);
        let vectors = |name: &str| name == "image";
        let yes = |f: &str| {
            assert!(
                matches(&filter(f), &id, Some(&p), &no_text_keys, &vectors),
                "{f}"
            )
        };
        let no = |f: &str| {
            assert!(
                !matches(&filter(f), &id, Some(&p), &no_text_keys, &vectors),
                "{f}"
            )
        };
        yes(r#"{"must":[{"key":"city","match":{"value":"London"}}]}"#);
        no(r#"{"must":[{"key":"city","match":{"value":"Paris"}}]}"#);
        yes(r#"{"must":[{"key":"tags","match":{"value":"b"}}]}"#);
        yes(r#"{"must":[{"key":"tags","match":{"any":["z","a"]}}]}"#);
        no(r#"{"must":[{"key":"tags","match":{"except":["a"]}}]}"#);
        yes(r#"{"must":[{"key":"n","range":{"gt":2.5,"lte":3}}]}"#);
        no(r#"{"must":[{"key":"n","range":{"gt":3}}]}"#);
        yes(r#"{"must":[{"key":"n","match":{"value":3}}]}"#);
        yes(r#"{"must":[{"key":"addr.zip.code","match":{"value":7}}]}"#);
        yes(r#"{"should":[{"key":"city","match":{"value":"Paris"}},{"has_id":[1]}]}"#);
        no(r#"{"should":[{"key":"city","match":{"value":"Paris"}},{"has_id":[2]}]}"#);
        no(r#"{"must_not":[{"key":"city","match":{"value":"London"}}]}"#);
        yes(r#"{"must":[{"is_empty":{"key":"missing"}}]}"#);
        yes(r#"{"must":[{"must_not":[{"key":"n","range":{"lt":0}}]}]}"#);
        // Qdrant's reading: an empty `should` passes nothing, an empty filter everything.
        no(r#"{"should":[]}"#);
        yes(r#"{}"#);
        yes(r#"{"must":[]}"#);
        assert!(!matches(
            &filter(r#"{"must":[{"key":"n","range":{"gte":0}}]}"#),
            &id,
            None,
            &no_text_keys,
            &no_vectors
        ));
        yes(r#"{"must":[{"key":"addr[].zip[].code","match":{"value":7}}]}"#);
        yes(r#"{"must":[{"has_vector":"image"}]}"#);
        // `nested`: one element must pass the whole filter; across elements, plain keys do.
        let p2 = payload(r#"{"items":[{"a":1,"b":"x"},{"a":2,"b":"y"}]}"#);
        let holds = |f: &str| matches(&filter(f), &id, Some(&p2), &no_text_keys, &vectors);
        assert!(holds(
            r#"{"must":[{"nested":{"key":"items","filter":{"must":[{"key":"a","match":{"value":1}},{"key":"b","match":{"value":"x"}}]}}}]}"#
        ));
        assert!(!holds(
            r#"{"must":[{"nested":{"key":"items[]","filter":{"must":[{"key":"a","match":{"value":1}},{"key":"b","match":{"value":"y"}}]}}}]}"#
        ));
        assert!(holds(
            r#"{"must":[{"key":"items[].a","match":{"value":1}},{"key":"items[].b","match":{"value":"y"}}]}"#
        ));
        assert!(!holds(
            r#"{"must":[{"nested":{"key":"missing","filter":{}}}]}"#
        ));
        yes(r#"{"must":[{"key":"tags","values_count":{"gte":2,"lt":3}}]}"#);
        no(r#"{"must":[{"key":"tags","values_count":{"gt":2}}]}"#);
        yes(r#"{"must":[{"key":"missing","values_count":{"lt":1}}]}"#);
        yes(r#"{"must":[{"key":"city","values_count":{"lte":1}}]}"#);
        // Per value found, as Qdrant counts: `addr.zip` is one array of one object.
        yes(r#"{"must":[{"key":"addr.zip","values_count":{"gte":1,"lt":2}}]}"#);
        yes(
            r#"{"min_should":{"min_count":2,"conditions":[{"has_id":[1]},{"key":"n","match":{"value":3}},{"key":"city","match":{"value":"Paris"}}]}}"#,
        );
        no(
            r#"{"min_should":{"min_count":3,"conditions":[{"has_id":[1]},{"key":"n","match":{"value":3}},{"key":"city","match":{"value":"Paris"}}]}}"#,
        );
        yes(r#"{"min_should":{"min_count":0,"conditions":[]}}"#);
        no(r#"{"must":[{"has_vector":"text"}]}"#);
        yes(r#"{"must_not":[{"has_vector":"text"}]}"#);
    }

    #[test]
    fn datetime_ranges_and_geo_conditions() {
        let p = payload(
            r#"{"t":["2023-02-08T10:49:00Z","not a date"],"n":5,
                "at":{"lon":13.404954,"lat":52.520008},"stops":[{"lon":2.35,"lat":48.86},{"lon":200,"lat":0}]}"#,
        );
        let id = PointId::Num(1);
        let holds = |f: &str| matches(&filter(f), &id, Some(&p), &no_text_keys, &no_vectors);
        assert!(holds(
            r#"{"must":{"key":"t","range":{"gte":"2023-02-08","lt":"2023-02-09"}}}"#
        ));
        assert!(holds(
            r#"{"must":{"key":"t","range":{"gt":"2023-02-08T11:48:59+01:00"}}}"#
        ));
        assert!(!holds(
            r#"{"must":{"key":"t","range":{"gt":"2023-02-08T11:49:00+01:00"}}}"#
        ));
        assert!(
            !holds(r#"{"must":{"key":"n","range":{"gte":"1970-01-01"}}}"#),
            "a number is no datetime"
        );
        assert!(
            !holds(r#"{"must":{"key":"t","range":{"gte":0}}}"#),
            "nor a string a number"
        );
        // Berlin is 877 km from Paris.
        assert!(holds(
            r#"{"must":{"key":"at","geo_radius":{"center":{"lon":2.35,"lat":48.86},"radius":880000}}}"#
        ));
        assert!(!holds(
            r#"{"must":{"key":"at","geo_radius":{"center":{"lon":2.35,"lat":48.86},"radius":870000}}}"#
        ));
        assert!(holds(
            r#"{"must":{"key":"stops","geo_bounding_box":{"top_left":{"lon":2,"lat":49},"bottom_right":{"lon":3,"lat":48}}}}"#
        ));
        // Across the antimeridian, where lon 200 would pass if it were read as a point.
        assert!(
            !holds(
                r#"{"must":{"key":"stops","geo_bounding_box":{"top_left":{"lon":179,"lat":1},"bottom_right":{"lon":-179,"lat":-1}}}}"#
            ),
            "lon 200 is no point"
        );
        assert!(holds(
            r#"{"must":{"key":"at","geo_polygon":{"exterior":{"points":[{"lon":13,"lat":52},{"lon":14,"lat":52},{"lon":14,"lat":53},{"lon":13,"lat":53},{"lon":13,"lat":52}]}}}}"#
        ));
        assert!(!holds(
            r#"{"must":{"key":"at","geo_polygon":{"exterior":{"points":[{"lon":13,"lat":52},{"lon":14,"lat":52},{"lon":14,"lat":53},{"lon":13,"lat":53},{"lon":13,"lat":52}]},"interiors":[{"points":[{"lon":13.3,"lat":52.4},{"lon":13.5,"lat":52.4},{"lon":13.5,"lat":52.6},{"lon":13.3,"lat":52.6},{"lon":13.3,"lat":52.4}]}]}}}"#
        ));
        let two: Filter = serde_json::from_str(
            r#"{"must":{"key":"at","range":{"gte":1},"geo_radius":{"center":{"lon":0,"lat":0},"radius":1}}}"#,
        )
        .unwrap();
        let err = validate(&two, "filter", 16).unwrap_err().to_string();
        assert!(err.contains("exactly one of"), "{err}");
    }

    /// `match.text` compares words where a text index covers the key, substrings elsewhere.
    #[test]
    fn text_matches_words_with_a_text_index_and_substrings_without() {
        let p = payload(r#"{"body":"The Quick-brown fox, 2 dogs"}"#);
        let id = PointId::Num(1);
        let text_keys = |key: &str| key == "body";
        let check = |query: &str, indexed: bool| {
            let f = filter(&format!(
                r#"{{"must":[{{"key":"body","match":{{"text":"{query}"}}}}]}}"#
            ));
            match indexed {
                true => matches(&f, &id, Some(&p), &text_keys, &no_vectors),
                false => matches(&f, &id, Some(&p), &no_text_keys, &no_vectors),
            }
        };
        assert!(check("quick FOX", true));
        assert!(check("dogs quick", true));
        assert!(!check("quick cat", true));
        assert!(!check("qui", true), "words, not prefixes");
        assert!(check("Quick-brown", false));
        assert!(check("uick-br", false));
        assert!(!check("quick fox", false), "a substring, case and all");
        // `text_any`: one word (or, without an index, one whitespace-separated piece) will do.
        let any = |query: &str, by_words: bool| {
            let f = filter(&format!(
                r#"{{"must":[{{"key":"body","match":{{"text_any":"{query}"}}}}]}}"#
            ));
            let keys = move |key: &str| by_words && key == "body";
            matches(&f, &id, Some(&p), &keys, &no_vectors)
        };
        assert!(any("cat QUICK", true));
        assert!(!any("cat qui", true), "words, not prefixes");
        assert!(!any("", true), "no word matches nothing");
        assert!(any("cat uick-b", false));
        assert!(!any("cat QUICK", false));
        assert!(!any("  ", false));
        // `prefix`: the whole string's start, case and all, with or without a text index.
        for by_words in [true, false] {
            let keys = move |key: &str| by_words && key == "body";
            let starts = |prefix: &str| {
                let f = filter(&format!(
                    r#"{{"must":[{{"key":"body","match":{{"prefix":"{prefix}"}}}}]}}"#
                ));
                matches(&f, &id, Some(&p), &keys, &no_vectors)
            };
            assert!(starts("The Qu"));
            assert!(!starts("the"));
            assert!(!starts("Quick"));
        }
    }

    /// The walk in place visits exactly the values [`lookup`] lists.
    #[test]
    fn any_value_visits_what_lookup_lists() {
        let p = payload(
            r#"{"a":[{"b":[1,2]},{"b":3},{"c":4},[{"b":5}]],"d":{"e":[[6],7]},"f":null,"g":[]}"#,
        );
        for key in [
            "a", "a.b", "a[].b", "a.c", "a.b.x", "d.e", "d", "f", "g", "missing", "",
        ] {
            let mut seen = Vec::new();
            let found = any_value(Some(&p), key, &mut |v| {
                seen.push(v.clone());
                false
            });
            let listed: Vec<Value> = lookup(Some(&p), key).into_iter().cloned().collect();
            assert!(!found);
            assert_eq!(seen, listed, "{key}");
        }
    }

    #[test]
    fn invalid_shapes_name_the_field() {
        let f: Filter = serde_json::from_str(r#"{"must":[{"key":"a"}]}"#).unwrap();
        let err = validate(&f, "filter", 16).unwrap_err().to_string();
        assert!(err.contains("filter.must[0]"), "{err}");
        let f: Filter =
            serde_json::from_str(r#"{"must":[{"key":"a","match":{"value":{"x":1}}}]}"#).unwrap();
        assert!(validate(&f, "filter", 16).is_err());
    }

    #[test]
    fn filters_nest_at_most_max_depth_levels() {
        // `depth` filters, each the only condition of the one around it.
        let nested = |depth: usize| -> Filter {
            let mut json = r#"{"must":[{"has_id":[1]}]}"#.to_owned();
            for _ in 1..depth {
                json = format!(r#"{{"must":[{json}]}}"#);
            }
            serde_json::from_str(&json).unwrap()
        };
        assert!(validate(&nested(16), "filter", 16).is_ok());
        let err = validate(&nested(17), "filter", 16).unwrap_err();
        assert!(matches!(err, ServerError::LimitExceeded(_)), "{err}");
        assert!(err.to_string().contains("limits.max_filter_depth"), "{err}");
    }
}
