//! How a point is encoded in RocksDB. Ids are keys, order-preserving, so a key scan is an
//! id-ordered scroll: `0x00 ‖ u64 BE` for numbers, `0x01 ‖ 16 UUID bytes` for UUIDs (numbers
//! sort first, as in Qdrant). Payloads are stored as JSON text, sparse vectors and the dense
//! vectors beside the main one next to them.

use std::collections::BTreeMap;

use cairn_api::{Payload, PointId, SparseVector};
use cairn_storage::{StoredDense, StoredSparse};

use crate::error::{Result, ServerError};

/// A payload as RocksDB stores it (JSON text) back to a map.
pub fn parse_payload(text: Option<String>) -> Result<Option<Payload>> {
    text.map(|t| {
        serde_json::from_str(&t)
            .map_err(|e| ServerError::Internal(format!("stored payload does not parse: {e}")))
    })
    .transpose()
}

/// A point's sparse vectors as the store keeps them.
pub fn sparse_to_stored(sparse: &BTreeMap<String, SparseVector>) -> Vec<StoredSparse> {
    sparse
        .iter()
        .map(|(name, v)| StoredSparse {
            name: name.clone(),
            indices: v.indices.clone(),
            values: v.values.clone(),
        })
        .collect()
}

/// Stored sparse vectors back by name.
pub fn sparse_from_stored(stored: Vec<StoredSparse>) -> BTreeMap<String, SparseVector> {
    stored
        .into_iter()
        .map(|s| {
            (
                s.name,
                SparseVector {
                    indices: s.indices,
                    values: s.values,
                },
            )
        })
        .collect()
}

/// A point's dense vectors beside its main one as the store keeps them.
pub fn extra_to_stored(extra: &BTreeMap<String, Vec<f32>>) -> Vec<StoredDense> {
    extra
        .iter()
        .map(|(name, values)| StoredDense {
            name: name.clone(),
            values: values.clone(),
        })
        .collect()
}

/// Stored dense vectors beside the main one back by name.
pub fn extra_from_stored(stored: Vec<StoredDense>) -> BTreeMap<String, Vec<f32>> {
    stored.into_iter().map(|d| (d.name, d.values)).collect()
}

/// Encodes an id.
pub fn encode(id: &PointId) -> Vec<u8> {
    match id {
        PointId::Num(n) => {
            let mut key = Vec::with_capacity(9);
            key.push(0);
            key.extend_from_slice(&n.to_be_bytes());
            key
        }
        PointId::Uuid(u) => {
            let mut key = Vec::with_capacity(17);
            key.push(1);
            key.extend_from_slice(u.as_bytes());
            key
        }
    }
}

/// Decodes a key written by [`encode`].
pub fn decode(key: &[u8]) -> Option<PointId> {
    match key.split_first()? {
        (0, rest) => Some(PointId::Num(u64::from_be_bytes(rest.try_into().ok()?))),
        (1, rest) => Some(PointId::Uuid(uuid::Uuid::from_bytes(rest.try_into().ok()?))),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_preserves_order() {
        let ids = [
            PointId::Num(0),
            PointId::Num(255),
            PointId::Num(256),
            PointId::Num(u64::MAX),
            PointId::Uuid(uuid::Uuid::nil()),
            PointId::Uuid(uuid::Uuid::max()),
        ];
        for pair in ids.windows(2) {
            assert!(encode(&pair[0]) < encode(&pair[1]));
            assert!(pair[0] < pair[1]);
        }
        for id in ids {
            assert_eq!(decode(&encode(&id)), Some(id));
        }
        assert_eq!(decode(&[2, 0]), None);
    }
}
