//! Turning request bodies into validated writes. Every rejection names the offending field,
//! and nothing is committed unless the whole request is valid.

use cairn_api::internal::NewPoint;
use cairn_api::{Payload, PointId, UpsertRequest, VectorInput};

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

/// The point's vector: a plain list (the unnamed vector), or a map holding exactly the
/// collection's vector by its name.
fn dense(settings: &CollectionSettings, input: VectorInput, field: &str) -> Result<Vec<f32>> {
    match input {
        VectorInput::Dense(v) => {
            settings.check_vector_name("", field)?;
            Ok(v)
        }
        VectorInput::Named(named) => {
            let mut entries = named.into_iter();
            match (entries.next(), entries.next()) {
                (Some((name, v)), None) => {
                    settings.check_vector_name(&name, field)?;
                    Ok(v)
                }
                (None, _) => Err(ServerError::InvalidRequest(format!(
                    "{field}: no vector given (an empty map of named vectors)"
                ))),
                (Some(_), Some(_)) => Err(ServerError::InvalidRequest(format!(
                    "{field}: several named vectors given; the collection has one, `{}`",
                    settings.vector_name()
                ))),
            }
        }
    }
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
        .map(|(id, vector, payload, field)| {
            let vector = check_vector(settings, dense(settings, vector, &field)?, &field)?;
            Ok(NewPoint {
                id,
                vector,
                payload,
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
