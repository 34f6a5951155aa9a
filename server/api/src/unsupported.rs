//! Qdrant request fields that Cairn does not implement and that would change an answer if they
//! were ignored: what is matched, written, returned or stored.
//!
//! Unknown fields are otherwise ignored, so that Qdrant clients sending harmless extras keep
//! working (README, "Qdrant fields Cairn refuses, and those it ignores", lists both groups).
//! Each request type captures its refused fields as `Option<serde_json::Value>` (skipped when
//! serializing, so the Rust client never sends them) and reports the first one set through
//! [`RefuseUnsupported`]. A JSON `null` deserializes to `None`: clients send nulls for fields
//! they leave unset.

use std::fmt;

use serde_json::Value;

/// A refused request field, named by its path in the request body or query string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsupported {
    /// Dotted path (`filter.must[0].geo_radius`, `searches[2].prefetch`, `consistency`).
    pub field: String,
    /// The value sent, when the field is refused for some values only (`"insert_only"`).
    pub value: Option<String>,
    /// What Cairn does instead, when that helps the caller.
    pub note: Option<&'static str>,
}

impl Unsupported {
    /// `field` is refused whatever its value.
    pub fn field(field: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            value: None,
            note: None,
        }
    }

    /// The same field, seen from `parent` (`must[0].x` within `filter` is `filter.must[0].x`).
    pub fn within(mut self, parent: &str) -> Self {
        self.field = format!("{parent}.{}", self.field);
        self
    }
}

impl fmt::Display for Unsupported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.value {
            Some(value) => write!(f, "{}: {value} is not supported by Cairn", self.field)?,
            None => write!(f, "{}: not supported by Cairn", self.field)?,
        }
        match self.note {
            Some(note) => write!(f, "; {note}"),
            None => Ok(()),
        }
    }
}

impl std::error::Error for Unsupported {}

/// A request that may carry Qdrant fields Cairn refuses.
pub trait RefuseUnsupported {
    /// The first refused field that is set, if any.
    fn refuse_unsupported(&self) -> Result<(), Unsupported>;
}

impl<T: RefuseUnsupported + ?Sized> RefuseUnsupported for &T {
    fn refuse_unsupported(&self) -> Result<(), Unsupported> {
        (**self).refuse_unsupported()
    }
}

/// A read's query string and body together, so a handler checks both in one call.
impl<A: RefuseUnsupported, B: RefuseUnsupported> RefuseUnsupported for (A, B) {
    fn refuse_unsupported(&self) -> Result<(), Unsupported> {
        self.0.refuse_unsupported()?;
        self.1.refuse_unsupported()
    }
}

/// The first of `fields` that is set (non-null), refused whatever its value.
pub(crate) fn refuse_set(fields: &[(&str, &Option<Value>)]) -> Result<(), Unsupported> {
    match fields.iter().find(|(_, value)| value.is_some()) {
        Some((name, _)) => Err(Unsupported::field(*name)),
        None => Ok(()),
    }
}

/// `field` is refused unless its value is one of `accepted` (the behaviour Cairn has).
pub(crate) fn refuse_other_than(
    field: &str,
    value: &Option<Value>,
    accepted: &[Value],
    note: &'static str,
) -> Result<(), Unsupported> {
    match value {
        Some(v) if !accepted.contains(v) => Err(Unsupported {
            field: field.to_owned(),
            value: Some(v.to_string()),
            note: Some(note),
        }),
        _ => Ok(()),
    }
}

/// Checks an optional part of a request, naming paths from `parent`.
pub(crate) fn refuse_within<T: RefuseUnsupported>(
    parent: &str,
    part: Option<&T>,
) -> Result<(), Unsupported> {
    part.map_or(Ok(()), |p| {
        p.refuse_unsupported().map_err(|e| e.within(parent))
    })
}

/// Checks every element of a list, naming paths as `parent[i]`.
pub(crate) fn refuse_each<T: RefuseUnsupported>(
    parent: &str,
    items: &[T],
) -> Result<(), Unsupported> {
    // The path is built only for a refusal: this runs on every request, for every condition.
    for (i, item) in items.iter().enumerate() {
        item.refuse_unsupported()
            .map_err(|e| e.within(&format!("{parent}[{i}]")))?;
    }
    Ok(())
}

/// Tests: the path of the first refused field of a request given as JSON, if any.
#[cfg(test)]
pub(crate) fn refused_path<T>(json: &str) -> Option<String>
where
    T: serde::de::DeserializeOwned + RefuseUnsupported,
{
    let request: T = serde_json::from_str(json).expect("the test request parses");
    request.refuse_unsupported().err().map(|e| e.field)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn messages_name_the_path_and_the_value() {
        let e = Unsupported::field("min_should").within("filter");
        assert_eq!(e.to_string(), "filter.min_should: not supported by Cairn");
        let e = refuse_other_than(
            "update_mode",
            &Some(json!("insert_only")),
            &[json!("upsert")],
            "upserts replace",
        )
        .unwrap_err()
        .within("searches[1]");
        assert_eq!(
            e.to_string(),
            "searches[1].update_mode: \"insert_only\" is not supported by Cairn; upserts replace"
        );
    }

    #[test]
    fn accepted_values_and_unset_fields_pass() {
        assert!(refuse_other_than("m", &None, &[json!(1)], "").is_ok());
        assert!(refuse_other_than("m", &Some(json!(1)), &[json!(1)], "").is_ok());
        assert!(refuse_set(&[("a", &None), ("b", &None)]).is_ok());
        assert_eq!(
            refuse_set(&[("a", &None), ("b", &Some(json!({})))]).unwrap_err(),
            Unsupported::field("b")
        );
    }
}
