//! Sparse vectors (Qdrant's `{"indices": […], "values": […]}`) and the one value a named
//! vector can hold: dense or sparse.

use std::fmt;

use serde::de::{Error as _, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};

use crate::points::{dense, dense_vec, DenseList};

/// A sparse vector: the non-zero dimensions and their values, in any order on the wire.
/// Its score against another is the dot product over the dimensions both hold.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SparseVector {
    /// Dimensions, each at most once.
    pub indices: Vec<u32>,
    /// One value per dimension.
    #[serde(deserialize_with = "dense_vec")]
    pub values: Vec<f32>,
}

impl SparseVector {
    /// Checks the shape: as many values as indices, no index twice, finite values. Returns
    /// the vector sorted by index, the form every index and kernel of Cairn's expects.
    pub fn checked(self) -> Result<Self, String> {
        if self.indices.len() != self.values.len() {
            return Err(format!(
                "{} indices but {} values: a sparse vector needs one value per index",
                self.indices.len(),
                self.values.len()
            ));
        }
        if let Some(i) = self.values.iter().position(|v| !v.is_finite()) {
            return Err(format!(
                "values[{i}] is {}, values must be finite",
                self.values[i]
            ));
        }
        let mut pairs: Vec<(u32, f32)> = self.indices.into_iter().zip(self.values).collect();
        pairs.sort_unstable_by_key(|&(i, _)| i);
        if let Some(w) = pairs.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(format!("index {} appears twice", w[0].0));
        }
        let (indices, values) = pairs.into_iter().unzip();
        Ok(Self { indices, values })
    }

    /// Dot product with `other`; both sorted by index (see [`Self::checked`]).
    pub fn dot(&self, other: &SparseVector) -> f32 {
        let (mut i, mut j, mut sum) = (0, 0, 0.0f32);
        while i < self.indices.len() && j < other.indices.len() {
            match self.indices[i].cmp(&other.indices[j]) {
                std::cmp::Ordering::Less => i += 1,
                std::cmp::Ordering::Greater => j += 1,
                std::cmp::Ordering::Equal => {
                    sum += self.values[i] * other.values[j];
                    i += 1;
                    j += 1;
                }
            }
        }
        sum
    }
}

/// One vector of a point by name: a dense list or a sparse vector.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum VectorValue {
    /// A dense vector.
    Dense(Vec<f32>),
    /// A sparse vector.
    Sparse(SparseVector),
}

impl<'de> Deserialize<'de> for VectorValue {
    /// Dispatches on the JSON type (a list is dense, an object sparse), so that an error names
    /// the element or field at fault rather than "no variant matched".
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(VectorValueVisitor)
    }
}

struct VectorValueVisitor;

impl<'de> Visitor<'de> for VectorValueVisitor {
    type Value = VectorValue;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(
            "a dense vector (an array of numbers) or a sparse one ({\"indices\", \"values\"})",
        )
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<VectorValue, A::Error> {
        dense(seq).map(VectorValue::Dense)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<VectorValue, A::Error> {
        sparse_from_map(map).map(VectorValue::Sparse)
    }
}

/// Reads `{"indices": […], "values": […]}` from a map already opened.
pub(crate) fn sparse_from_map<'de, A: MapAccess<'de>>(map: A) -> Result<SparseVector, A::Error> {
    SparseVector::deserialize(serde::de::value::MapAccessDeserializer::new(map))
}

/// Reads a sparse vector whose first key was already taken from `map` (the query target
/// visitors look at the first key to tell a sparse vector from `{"nearest": …}`).
pub(crate) fn sparse_after_key<'de, A: MapAccess<'de>>(
    first: &str,
    mut map: A,
) -> Result<SparseVector, A::Error> {
    let (mut indices, mut values): (Option<Vec<u32>>, Option<Vec<f32>>) = (None, None);
    let mut key = Some(first.to_owned());
    while let Some(k) = key {
        match k.as_str() {
            "indices" if indices.is_none() => indices = Some(map.next_value()?),
            "values" if values.is_none() => values = Some(map.next_value::<DenseList>()?.0),
            "indices" | "values" => return Err(A::Error::custom(format!("duplicate field `{k}`"))),
            other => {
                return Err(A::Error::custom(format!(
                    "unknown field `{other}` in a sparse vector: expected `indices` and `values`"
                )))
            }
        }
        key = map.next_key()?;
    }
    Ok(SparseVector {
        indices: indices.ok_or_else(|| A::Error::missing_field("indices"))?,
        values: values.ok_or_else(|| A::Error::missing_field("values"))?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checked_sorts_and_refuses_bad_shapes() {
        let v = SparseVector {
            indices: vec![7, 2],
            values: vec![1.0, 2.0],
        };
        assert_eq!(
            v.checked().unwrap(),
            SparseVector {
                indices: vec![2, 7],
                values: vec![2.0, 1.0]
            }
        );
        let twice = SparseVector {
            indices: vec![3, 3],
            values: vec![1.0, 2.0],
        };
        assert_eq!(twice.checked().unwrap_err(), "index 3 appears twice");
        let short = SparseVector {
            indices: vec![1, 2],
            values: vec![1.0],
        };
        assert!(short
            .checked()
            .unwrap_err()
            .contains("2 indices but 1 values"));
    }

    #[test]
    fn dot_counts_shared_dimensions_only() {
        let a = SparseVector {
            indices: vec![1, 4, 9],
            values: vec![1.0, 2.0, 3.0],
        };
        let b = SparseVector {
            indices: vec![4, 5, 9],
            values: vec![10.0, 100.0, 1.0],
        };
        assert_eq!(a.dot(&b), 23.0);
    }

    #[test]
    fn a_value_is_dense_for_a_list_and_sparse_for_an_object() {
        let dense: VectorValue = serde_json::from_str("[1, 2.5]").unwrap();
        assert_eq!(dense, VectorValue::Dense(vec![1.0, 2.5]));
        let sparse: VectorValue =
            serde_json::from_str(r#"{"indices": [3], "values": [0.5]}"#).unwrap();
        assert_eq!(
            sparse,
            VectorValue::Sparse(SparseVector {
                indices: vec![3],
                values: vec![0.5]
            })
        );
        let err = serde_json::from_str::<VectorValue>(r#"{"indices": [3], "weights": [1]}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown field `weights`"), "{err}");
    }
}
