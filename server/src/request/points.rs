//! Turning request bodies into validated writes. Every rejection names the offending field,
//! and nothing is committed unless the whole request is valid.

use std::collections::BTreeMap;

use cairn_api::internal::NewPoint;
use cairn_api::{
    Payload, PointId, PointVectors, SparseVector, UpsertRequest, VectorInput, VectorValue,
};

use super::settings::DenseSpace;
use super::CollectionSettings;
use crate::config::Limits;
use crate::error::{Result, ServerError};

/// Checks a vector's dimension and values and preprocesses it for its space's metric.
pub fn check_vector(space: DenseSpace<'_>, mut vector: Vec<f32>, field: &str) -> Result<Vec<f32>> {
    if vector.is_empty() {
        return Err(ServerError::InvalidVector(format!("{field} is empty")));
    }
    if vector.len() != space.dim {
        return Err(ServerError::WrongDimension {
            field: field.to_owned(),
            expected: space.dim,
            got: vector.len(),
        });
    }
    if let Some(i) = vector.iter().position(|x| !x.is_finite()) {
        return Err(ServerError::InvalidVector(format!(
            "{field}[{i}] is {}, vectors must be finite",
            vector[i]
        )));
    }
    space.metric().preprocess(&mut vector);
    Ok(vector)
}

/// A point's vectors as sent, split and checked: its main vector, if given, the other dense
/// ones and the sparse ones by name (each sparse one sorted by index).
#[derive(Default)]
struct Vectors {
    main: Option<Vec<f32>>,
    extra: BTreeMap<String, Vec<f32>>,
    sparse: BTreeMap<String, SparseVector>,
}

/// Splits a point's vectors: a plain list is the unnamed main vector; a map names any of the
/// collection's dense and sparse vectors.
fn split(settings: &CollectionSettings, input: VectorInput, field: &str) -> Result<Vectors> {
    let named = match input {
        VectorInput::Dense(v) => {
            let space = settings.space("", field)?;
            return Ok(Vectors {
                main: Some(check_vector(space, v, field)?),
                ..Vectors::default()
            });
        }
        VectorInput::Named(named) => named,
    };
    let mut vectors = Vectors::default();
    for (name, value) in named {
        match value {
            VectorValue::Dense(v) => {
                let space = settings.space(&name, field)?;
                let v = check_vector(space, v, &format!("{field}.{name}"))?;
                match space.extra {
                    None => vectors.main = Some(v),
                    Some(_) => {
                        vectors.extra.insert(name, v);
                    }
                }
            }
            VectorValue::Sparse(v) => {
                settings.check_sparse_name(&name, field)?;
                let v = v
                    .checked()
                    .map_err(|e| ServerError::InvalidVector(format!("{field}.{name}: {e}")))?;
                vectors.sparse.insert(name, v);
            }
        }
    }
    Ok(vectors)
}

/// Turns an upsert's vectors into a point: the main vector is required (Cairn's partitions
/// are routed by it and its index holds every point), the others are optional.
fn new_point(
    settings: &CollectionSettings,
    id: PointId,
    input: VectorInput,
    payload: Option<Payload>,
    field: &str,
) -> Result<NewPoint> {
    let Vectors {
        main,
        extra,
        sparse,
    } = split(settings, input, field)?;
    let vector = main.ok_or_else(|| {
        ServerError::InvalidRequest(format!(
            "{field}: the {} {} is missing; every point needs it",
            if settings.extra_vectors.is_empty() {
                "dense vector"
            } else {
                "main vector"
            },
            match settings.vector_name() {
                "" => "(unnamed, `\"\"`)".to_owned(),
                name => format!("`{name}`"),
            }
        ))
    })?;
    Ok(NewPoint {
        id,
        vector,
        payload,
        sparse,
        extra,
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

/// Validates the new vectors of a vector update: each point gives some of its vectors. A main
/// vector not given comes back empty, which [`merge_vectors`] reads as "keep the stored one".
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
            let Vectors {
                main,
                extra,
                sparse,
            } = split(settings, p.vector, &field)?;
            if main.is_none() && extra.is_empty() && sparse.is_empty() {
                return Err(ServerError::InvalidRequest(format!(
                    "{field}: no vector given"
                )));
            }
            Ok(NewPoint {
                id: p.id,
                vector: main.unwrap_or_default(),
                payload: None,
                sparse,
                extra,
            })
        })
        .collect()
}

/// Gives a stored point the vectors of an update (from [`prepare_vector_updates`]), keeping
/// those the update leaves out.
pub fn merge_vectors(stored: &mut NewPoint, update: NewPoint) {
    if !update.vector.is_empty() {
        stored.vector = update.vector;
    }
    stored.sparse.extend(update.sparse);
    stored.extra.extend(update.extra);
}

/// Checks the vector names of a vector deletion: named vectors beside the main one, or sparse
/// ones. The main vector cannot be deleted: every point carries it.
pub fn check_vector_deletion(
    settings: &CollectionSettings,
    names: &[String],
    field: &str,
) -> Result<()> {
    if names.is_empty() {
        return Err(ServerError::InvalidRequest(format!(
            "{field}: name at least one vector"
        )));
    }
    for name in names {
        if settings.sparse_vectors.contains_key(name) {
            continue;
        }
        let Some(space) = settings.dense_space(name) else {
            let deletable: Vec<String> = settings
                .extra_vectors
                .keys()
                .chain(settings.sparse_vectors.keys())
                .map(|n| format!("`{n}`"))
                .collect();
            return Err(ServerError::InvalidRequest(format!(
                "{field}: the collection has no vector `{name}`; {}",
                match deletable.as_slice() {
                    [] => "it has no vector a point may lose (only the main one)".to_owned(),
                    names => format!("a point may lose {}", names.join(", ")),
                }
            )));
        };
        if space.extra.is_none() {
            return Err(ServerError::InvalidRequest(format!(
                "{field}: `{name}` is the collection's main vector, which every point carries \
                 (partitions are routed by it); delete the point, or give it a new vector"
            )));
        }
    }
    Ok(())
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
