//! What a write by selection does to each point it selects: Qdrant's payload updates and
//! vector deletions, as data a node can send the collection's writer and as the pure change
//! of one stored point. Validation (paths, limits) happens before a change is built.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::NewPoint;
use crate::{Filter, Payload, PointId};

/// The points a write by selection touches: by id, or every point matching a filter (matched
/// again where each point is changed, so a point that stopped matching is left alone).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Selection {
    /// These ids.
    Ids(Vec<PointId>),
    /// Every point matching this (validated) filter.
    Filter(Filter),
}

/// A change to each selected point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum PointChange {
    /// Its payload changes.
    Payload(PayloadChange),
    /// It loses these named vectors (beside the main one, or sparse; checked).
    DeleteVectors(Vec<String>),
}

impl PointChange {
    /// Changes `point`; false when the change leaves it as it was (a vector deletion of
    /// vectors it does not have), so that it need not be written again.
    pub fn apply(&self, point: &mut NewPoint) -> bool {
        match self {
            PointChange::Payload(change) => {
                point.payload = change.apply(point.payload.take());
                true
            }
            PointChange::DeleteVectors(names) => names.iter().fold(false, |changed, name| {
                let extra = point.extra.remove(name).is_some();
                let sparse = point.sparse.remove(name).is_some();
                changed | extra | sparse
            }),
        }
    }
}

/// A change to a payload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum PayloadChange {
    /// Merge these keys into the object at `path` (the payload itself when empty).
    Set {
        /// Where.
        path: Vec<String>,
        /// The keys.
        payload: Payload,
    },
    /// Replace the object at `path` (the whole payload when empty) with this one.
    Overwrite {
        /// Where.
        path: Vec<String>,
        /// The new object.
        payload: Payload,
    },
    /// Remove the keys at these paths.
    Delete {
        /// Each a path of keys.
        keys: Vec<Vec<String>>,
    },
    /// Remove the whole payload.
    Clear,
}

impl PayloadChange {
    /// The payload after the change (`None`: no payload).
    pub fn apply(&self, payload: Option<Payload>) -> Option<Payload> {
        let mut payload = payload.unwrap_or_default();
        match self {
            PayloadChange::Clear => return None,
            PayloadChange::Set { path, payload: set } => {
                at_path(&mut payload, path, |object| object.extend(set.clone()));
            }
            PayloadChange::Overwrite { path, payload: new } => {
                at_path(&mut payload, path, |object| *object = new.clone());
            }
            PayloadChange::Delete { keys } => {
                for key in keys {
                    remove(&mut payload, key);
                }
            }
        }
        Some(payload)
    }
}

/// Applies `change` to the object at `path`, made (replacing whatever else was there) where
/// it is missing.
fn at_path(payload: &mut Payload, path: &[String], change: impl FnOnce(&mut Payload)) {
    match path.split_first() {
        None => change(payload),
        Some((first, rest)) => {
            let mut inner = match payload.remove(first) {
                Some(Value::Object(map)) => map,
                _ => Payload::new(),
            };
            at_path(&mut inner, rest, change);
            payload.insert(first.clone(), Value::Object(inner));
        }
    }
}

/// Removes the key at `path`, if every step is an object that has it.
fn remove(payload: &mut Payload, path: &[String]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut current = payload;
    for part in parents {
        match current.get_mut(part) {
            Some(Value::Object(map)) => current = map,
            _ => return,
        }
    }
    current.remove(last);
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn payload(v: Value) -> Payload {
        v.as_object().cloned().unwrap()
    }

    fn path(key: &str) -> Vec<String> {
        key.split('.').map(str::to_owned).collect()
    }

    #[test]
    fn changes_follow_qdrant() {
        let before = Some(payload(json!({"a": 1, "m": {"x": 1, "y": 2}, "s": "t"})));
        let set = PayloadChange::Set {
            path: vec![],
            payload: payload(json!({"a": 2, "b": 3})),
        };
        assert_eq!(
            set.apply(before.clone()),
            Some(payload(
                json!({"a": 2, "b": 3, "m": {"x": 1, "y": 2}, "s": "t"})
            ))
        );
        let nested = PayloadChange::Set {
            path: path("m"),
            payload: payload(json!({"x": 9})),
        };
        assert_eq!(
            nested.apply(before.clone()),
            Some(payload(json!({"a": 1, "m": {"x": 9, "y": 2}, "s": "t"})))
        );
        let deeper = PayloadChange::Set {
            path: path("s.k"),
            payload: payload(json!({"z": true})),
        };
        assert_eq!(
            deeper.apply(None),
            Some(payload(json!({"s": {"k": {"z": true}}})))
        );
        let overwrite = PayloadChange::Overwrite {
            path: vec![],
            payload: payload(json!({"only": 1})),
        };
        assert_eq!(
            overwrite.apply(before.clone()),
            Some(payload(json!({"only": 1})))
        );
        let overwrite_at = PayloadChange::Overwrite {
            path: path("m"),
            payload: payload(json!({"z": 0})),
        };
        assert_eq!(
            overwrite_at.apply(before.clone()),
            Some(payload(json!({"a": 1, "m": {"z": 0}, "s": "t"})))
        );
        let delete = PayloadChange::Delete {
            keys: vec![path("a"), path("m.y"), path("missing.q"), path("s.t")],
        };
        assert_eq!(
            delete.apply(before.clone()),
            Some(payload(json!({"m": {"x": 1}, "s": "t"})))
        );
        assert_eq!(PayloadChange::Clear.apply(before), None);
    }
}
