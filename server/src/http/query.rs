//! Query and search endpoints (the universal `query` API and the older `search` API).

use std::time::Instant;

use axum::extract::{Path, State as AxState};
use axum::response::IntoResponse;
use cairn_api::{
    NearestTarget, QueryBatchRequest, QueryInput, QueryRequest, QueryResponse, ReadQuery,
    RefuseUnsupported, SearchBatchRequest, SearchRequest,
};

use super::json::{ApiJson, ApiQuery};
use super::{ok, search_in_place, State};
use crate::collection::Collection;
use crate::config::Limits;
use crate::error::{Result, ServerError};
use crate::partition::filter::validate;
use crate::partition::query::QueryTarget;
use crate::partition::{PayloadSelection, QueryPlan};

/// Default number of results, as in Qdrant.
const DEFAULT_LIMIT: usize = 10;
/// Largest `params.probe` and `params.branching` (a router has at most 65,536 centres; a
/// query looking up more than a few thousand is a broadcast in disguise).
const MAX_BRANCHING: usize = 4096;

/// Validates a query against the collection and the limits; `field` prefixes error paths.
fn plan(
    collection: &Collection,
    request: QueryRequest,
    limits: &Limits,
    field: &str,
) -> Result<QueryPlan> {
    if request
        .using
        .as_deref()
        .is_some_and(|name| !name.is_empty())
    {
        return Err(ServerError::InvalidRequest(format!(
            "{field}using: named vectors are not supported; collections have one unnamed vector"
        )));
    }
    let limit = request.limit.unwrap_or(DEFAULT_LIMIT);
    let offset = request.offset.unwrap_or(0);
    if limit.saturating_add(offset) > limits.max_limit {
        return Err(ServerError::LimitExceeded(format!(
            "{field}limit + offset = {} is above the maximum of {}",
            limit.saturating_add(offset),
            limits.max_limit
        )));
    }
    let params = request.params.unwrap_or_default();
    if let Some(ef) = params.hnsw_ef {
        if ef > limits.max_ef {
            return Err(ServerError::LimitExceeded(format!(
                "{field}params.hnsw_ef {ef} is above the maximum of {}",
                limits.max_ef
            )));
        }
        if ef == 0 {
            return Err(ServerError::InvalidRequest(format!(
                "{field}params.hnsw_ef must be at least 1"
            )));
        }
    }
    let partitioned = collection.settings().partitions() > 1;
    for (knob, value) in [("probe", params.probe), ("branching", params.branching)] {
        match value {
            None => {}
            Some(_) if !partitioned => {
                return Err(ServerError::InvalidRequest(format!(
                    "{field}params.{knob}: this collection is not partitioned, so there is \
                     nothing to route; leave {knob} out"
                )))
            }
            Some(0) => {
                return Err(ServerError::InvalidRequest(format!(
                    "{field}params.{knob} must be at least 1"
                )))
            }
            Some(n) if n > MAX_BRANCHING => {
                return Err(ServerError::LimitExceeded(format!(
                    "{field}params.{knob} {n} is above the maximum of {MAX_BRANCHING}"
                )))
            }
            Some(_) => {}
        }
    }
    if let Some(oversampling) = params.quantization.and_then(|q| q.oversampling) {
        if !(oversampling.is_finite() && oversampling >= 1.0) {
            return Err(ServerError::InvalidRequest(format!(
                "{field}params.quantization.oversampling must be a finite number of at least 1, \
                 not {oversampling}"
            )));
        }
    }
    if let Some(filter) = &request.filter {
        validate(filter, &format!("{field}filter"))?;
    }
    if request.score_threshold.is_some_and(|t| !t.is_finite()) {
        return Err(ServerError::InvalidRequest(format!(
            "{field}score_threshold must be finite"
        )));
    }
    let vector_field = format!("{field}query");
    let target = match request.query {
        Some(QueryInput::Vector(v) | QueryInput::Nearest { nearest: NearestTarget::Vector(v) }) => {
            QueryTarget::Vector(crate::partition::input_check_vector(collection.settings(), v, &vector_field)?)
        }
        Some(QueryInput::Point(id) | QueryInput::Nearest { nearest: NearestTarget::Point(id) }) => QueryTarget::Point(id),
        None => {
            return Err(ServerError::InvalidRequest(format!(
                "{vector_field} is required: a vector, a point id or {{\"nearest\": …}} (list points with /points/scroll)"
            )))
        }
    };
    let quantization = params.quantization.unwrap_or_default();
    // `ignore` means "search the full vectors": on a quantized collection that is the exact
    // scan; elsewhere there are no codes to ignore (Qdrant's reading too).
    let quantized = matches!(
        collection.settings().index,
        cairn_index::IndexParams::Quantized(_)
    );
    let ignore_codes = quantized && quantization.ignore == Some(true);
    Ok(QueryPlan {
        target,
        filter: request.filter,
        limit,
        offset,
        ef: params.hnsw_ef,
        exact: params.exact.unwrap_or(false) || ignore_codes,
        oversampling: quantization.oversampling.map(|o| o as f32),
        rescore: quantization.rescore,
        score_threshold: request.score_threshold,
        with_payload: PayloadSelection::from_wire(request.with_payload, false),
        with_vector: request.with_vector.is_some_and(|w| w.enabled()),
        explain: request.explain.unwrap_or(false),
        branching: params.branching,
        probe: params.probe,
        allow_partial: params.allow_partial.unwrap_or(true),
        hedge: params.hedge.unwrap_or(true),
    })
}

fn check_batch(n: usize, limits: &Limits) -> Result<()> {
    if n > limits.max_batch_queries {
        return Err(ServerError::LimitExceeded(format!(
            "searches: {n} queries is above the maximum of {} per batch",
            limits.max_batch_queries
        )));
    }
    Ok(())
}

fn run(
    state: &State,
    name: &str,
    requests: Vec<QueryRequest>,
    batched: bool,
) -> Result<Vec<QueryResponse>> {
    let collection = state.catalog()?.get(name)?;
    let plans = requests
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            let field = if batched {
                format!("searches[{i}].")
            } else {
                String::new()
            };
            plan(&collection, r, &state.limits, &field)
        })
        .collect::<Result<Vec<_>>>()?;
    let short = plans.len() == 1 && collection.is_short(&plans[0]);
    search_in_place(short, move || {
        plans.iter().map(|p| collection.query_blocking(p)).collect()
    })
}

pub(super) async fn query(
    AxState(state): AxState<State>,
    Path(name): Path<String>,
    ApiQuery(read): ApiQuery<ReadQuery>,
    ApiJson(request): ApiJson<QueryRequest>,
) -> Result<impl IntoResponse> {
    let t = Instant::now();
    (read, &request).refuse_unsupported()?;
    let mut responses = run(&state, &name, vec![request], false)?;
    let response = responses
        .pop()
        .ok_or_else(|| ServerError::Internal("query produced no response".into()))?;
    Ok(ok(response, t))
}

pub(super) async fn query_batch(
    AxState(state): AxState<State>,
    Path(name): Path<String>,
    ApiQuery(read): ApiQuery<ReadQuery>,
    ApiJson(request): ApiJson<QueryBatchRequest>,
) -> Result<impl IntoResponse> {
    let t = Instant::now();
    (read, &request).refuse_unsupported()?;
    check_batch(request.searches.len(), &state.limits)?;
    Ok(ok(run(&state, &name, request.searches, true)?, t))
}

pub(super) async fn search(
    AxState(state): AxState<State>,
    Path(name): Path<String>,
    ApiQuery(read): ApiQuery<ReadQuery>,
    ApiJson(request): ApiJson<SearchRequest>,
) -> Result<impl IntoResponse> {
    let t = Instant::now();
    (read, &request).refuse_unsupported()?;
    let mut responses = run(&state, &name, vec![request.into()], false)?;
    let points = responses.pop().map(|r| r.points).unwrap_or_default();
    Ok(ok(points, t))
}

pub(super) async fn search_batch(
    AxState(state): AxState<State>,
    Path(name): Path<String>,
    ApiQuery(read): ApiQuery<ReadQuery>,
    ApiJson(request): ApiJson<SearchBatchRequest>,
) -> Result<impl IntoResponse> {
    let t = Instant::now();
    (read, &request).refuse_unsupported()?;
    check_batch(request.searches.len(), &state.limits)?;
    let requests = request
        .searches
        .into_iter()
        .map(QueryRequest::from)
        .collect();
    let responses = run(&state, &name, requests, true)?;
    Ok(ok(
        responses.into_iter().map(|r| r.points).collect::<Vec<_>>(),
        t,
    ))
}
