//! Turning request bodies into validated writes. Every rejection names the offending field,
//! and nothing is committed unless the whole request is valid.

use std::collections::BTreeMap;

use cairn_api::internal::NewPoint;
use cairn_api::{
    Payload, PointId, PointVectors, SparseVector, UpsertRequest, VectorInput, VectorValue,
};

use super::CollectionSettings;
use crate::config::Limits;
use crate::error::{Result, ServerError};

/// Checks a vector's dimension and values and preprocesses it for the metric.
pub fn check_vector(
    settings: &CollectionSettings,
    mut vector: Vec<f32>,
    field: &str,
) -> Result<Vec<f32>> {
    if vector.is_empty() {
        return Err(ServerError::InvalidVector(format!("{field} is empty")));
    }
    if vector.len() != settings.dim {
        return Err(ServerError::WrongDimension {
            field: field.to_owned(),
            expected: settings.dim,
            got: vector.len(),
        });
    }
    if let Some(i) = vector.iter().position(|x| !x.is_finite()) {
        return Err(ServerError::InvalidVector(format!(
            "{field}[{i}] is {}, vectors must be finite",
            vector[i]
        )));
    }
    settings.metric().preprocess(&mut vector);
    Ok(vector)
}

/// A point's vectors as sent, split: its dense vector, if given, and its sparse vectors by
/// name, each checked and sorted by index.
type Vectors = (Option<Vec<f32>>, BTreeMap<String, SparseVector>);

/// Splits a point's vectors: a plain list is the unnamed dense vector; a map names the
/// collection's dense vector and any of its sparse vectors.
fn split(settings: &CollectionSettings, input: VectorInput, field: &str) -> Result<Vectors> {
    let named = match input {
        VectorInput::Dense(v) => {
            settings.check_vector_name("", field)?;
            return Ok((Some(v), BTreeMap::new()));
        }
        VectorInput::Named(named) => named,
    };
    let (mut dense, mut sparse) = (None, BTreeMap::new());
    for (name, value) in named {
        match value {
            VectorValue::Dense(v) => {
                settings.check_vector_name(&name, field)?;
                dense = Some(v);
            }
            VectorValue::Sparse(v) => {
                settings.check_sparse_name(&name, field)?;
                let v = v
                    .checked()
                    .map_err(|e| ServerError::InvalidVector(format!("{field}.{name}: {e}")))?;
                sparse.insert(name, v);
            }
        }
    }
    Ok((dense, sparse))
}

/// Turns an upsert's vectors into a point: the dense vector is required (Cairn's indexes and
/// partitions are built on it), sparse vectors are optional.
fn new_point(
    settings: &CollectionSettings,
    id: PointId,
    input: VectorInput,
    payload: Option<Payload>,
    field: &str,
) -> Result<NewPoint> {
    let (dense, sparse) = split(settings, input, field)?;
    let dense = dense.ok_or_else(|| {
        ServerError::InvalidRequest(format!(
            "{field}: the dense vector {} is missing; every point needs it",
            match settings.vector_name() {
                "" => "(unnamed, `\"\"`)".to_owned(),
                name => format!("`{name}`"),
            }
        ))
    })?;
    Ok(NewPoint {
        id,
        vector: check_vector(settings, dense, field)?,
        payload,
        sparse,
    })
}

/// Validates an upsert body (list or column form) into points ready to commit.
pub fn prepare_points(
    settings: &CollectionSettings,
    req: UpsertRequest,
    limits: &Limits,
) -> Result<Vec<NewPoint>> {
    let points: Vec<(PointId, VectorInput, Option<Payload>, String)> = match (req.points, req.batch)
    {
        (Some(points), None) => points
            .into_iter()
            .enumerate()
            .map(|(i, p)| (p.id, p.vector, p.payload, format!("points[{i}].vector")))
            .collect(),
        (None, Some(batch)) => {
            let n = batch.ids.len();
            if batch.vectors.len() != n || batch.payloads.as_ref().is_some_and(|p| p.len() != n) {
                return Err(ServerError::InvalidRequest(format!(
                    "batch: ids ({n}), vectors ({}) and payloads ({}) must have the same length",
                    batch.vectors.len(),
                    batch.payloads.as_ref().map_or(n, Vec::len)
                )));
            }
            let payloads = batch.payloads.unwrap_or_else(|| vec![None; n]);
            batch
                .ids
                .into_iter()
                .zip(batch.vectors)
                .zip(payloads)
                .enumerate()
                .map(|(i, ((id, v), p))| {
                    (id, VectorInput::Dense(v), p, format!("batch.vectors[{i}]"))
                })
                .collect()
        }
        (Some(_), Some(_)) => {
            return Err(ServerError::InvalidRequest(
                "give either `points` or `batch`, not both".into(),
            ))
        }
        (None, None) => {
            return Err(ServerError::InvalidRequest(
                "body needs `points` or `batch`".into(),
            ))
        }
    };
    check_count(points.len(), limits, "points")?;
    points
        .into_iter()
        .map(|(id, vector, payload, field)| new_point(settings, id, vector, payload, &field))
        .collect()
}

/// Validates the new vectors of a vector update: each point gives its dense vector, some of
/// its sparse vectors, or both. A dense vector not given comes back empty, which
/// `Partition::update_vectors` reads as "keep the stored one".
pub fn prepare_vector_updates(
    settings: &CollectionSettings,
    points: Vec<PointVectors>,
    limits: &Limits,
) -> Result<Vec<NewPoint>> {
    check_count(points.len(), limits, "points")?;
    points
        .into_iter()
        .enumerate()
        .map(|(i, p)| {
            let field = format!("points[{i}].vector");
            let (dense, sparse) = split(settings, p.vector, &field)?;
            if dense.is_none() && sparse.is_empty() {
                return Err(ServerError::InvalidRequest(format!(
                    "{field}: no vector given"
                )));
            }
            Ok(NewPoint {
                id: p.id,
                vector: dense
                    .map(|v| check_vector(settings, v, &field))
                    .transpose()?
                    .unwrap_or_default(),
                payload: None,
                sparse,
            })
        })
        .collect()
}

/// Checks an id list against the per-request maximum.
pub fn prepare_delete_ids(ids: Vec<PointId>, limits: &Limits) -> Result<Vec<PointId>> {
    check_count(ids.len(), limits, "points")?;
    Ok(ids)
}

fn check_count(n: usize, limits: &Limits, field: &str) -> Result<()> {
    if n > limits.max_points_per_request {
        return Err(ServerError::LimitExceeded(format!(
            "{field}: {n} items is above the maximum of {} per request",
            limits.max_points_per_request
        )));
    }
    Ok(())
}
