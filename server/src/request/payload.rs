//! Payload updates (Qdrant's set, overwrite, delete-keys and clear) and vector deletions,
//! validated into a change ([`PointChange`], in `cairn_api::internal`: a cluster's nodes
//! send it to the collection's writer) that is applied to each selected point's stored value
//! under a write lock or a compare-and-set.

pub use cairn_api::internal::{PayloadChange, PointChange, Selection};
use cairn_api::{Filter, PointId};

use super::filter::validate;
use super::points::prepare_delete_ids;
use crate::config::Limits;
use crate::error::{Result, ServerError};

/// Checks `points` / `filter` of a request: exactly one, within the limits.
pub fn selection(
    points: Option<Vec<PointId>>,
    filter: Option<Filter>,
    limits: &Limits,
) -> Result<Selection> {
    match (points, filter) {
        (Some(ids), None) => Ok(Selection::Ids(prepare_delete_ids(ids, limits)?)),
        (None, Some(filter)) => {
            validate(&filter, "filter", limits.max_filter_depth)?;
            Ok(Selection::Filter(filter))
        }
        (Some(_), Some(_)) => Err(ServerError::InvalidRequest(
            "give either `points` or `filter`, not both".into(),
        )),
        (None, None) => Err(ServerError::InvalidRequest(
            "body needs `points` or `filter`".into(),
        )),
    }
}

/// Splits a dotted key into its parts; array steps (`a[]`, `a[0]`) are refused, since a change
/// must name one place.
pub fn key_path(key: &str, field: &str) -> Result<Vec<String>> {
    let parts: Vec<String> = key.split('.').map(str::to_owned).collect();
    if parts
        .iter()
        .any(|p| p.is_empty() || p.contains('[') || p.contains(']'))
    {
        return Err(ServerError::InvalidRequest(format!(
            "{field}: {key:?} must be a dotted path of object keys (no empty parts or array steps)"
        )));
    }
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(key: &str) -> Vec<String> {
        key_path(key, "key").unwrap()
    }

    #[test]
    fn paths_name_one_place() {
        assert_eq!(path("a.b"), ["a", "b"]);
        for bad in ["", "a..b", "a[].b", "a[0]"] {
            let err = key_path(bad, "key").unwrap_err().to_string();
            assert!(err.contains("dotted path"), "{bad}: {err}");
        }
    }
}
