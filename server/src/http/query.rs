//! Query and search endpoints (the universal `query` API and the older `search` API).

use std::time::Instant;

use axum::extract::{Path, State as AxState};
use axum::response::IntoResponse;
use cairn_api::{
    QueryBatchRequest, QueryRequest, QueryResponse, ReadQuery, RefuseUnsupported, ScoredPoint,
    SearchBatchRequest, SearchRequest,
};

use super::json::{ApiJson, ApiQuery};
use super::searchers::Work;
use super::{ok, read_consistency, State};
use crate::error::{Result, ServerError};
use crate::request::hybrid::plan_tree;
use crate::request::query::{check_batch, plan};
use crate::request::QueryTree;

async fn run(
    state: &State,
    name: &str,
    requests: Vec<QueryRequest>,
    batched: bool,
    read: &ReadQuery,
) -> Result<Vec<QueryResponse>> {
    let consistency = read_consistency(read)?;
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
            plan_tree(collection.settings(), r, &state.limits, &field)
        })
        .collect::<Result<Vec<_>>>()?;
    let work = if collection.may_wait(&consistency) {
        Work::MayWait
    } else if let [QueryTree::Search(only)] = plans.as_slice() {
        if collection.is_short(only, &consistency) {
            Work::Short
        } else {
            Work::Long
        }
    } else {
        Work::Long
    };
    state
        .searchers
        .run(work, move || {
            plans
                .iter()
                .map(|p| collection.query_tree_blocking(p, &consistency))
                .collect()
        })
        .await
}

/// A query of a collection whose one partition lives on other nodes, awaited on the runtime
/// (`None`: any other query, run by [`run`]).
async fn over_the_network(
    state: &State,
    name: &str,
    request: &QueryRequest,
    read: &ReadQuery,
) -> Result<Option<QueryResponse>> {
    let collection = state.catalog()?.get(name)?;
    let hybrid = request.prefetch.as_ref().is_some_and(|p| !p.is_empty());
    if hybrid || !collection.queries_remotely(&read_consistency(read)?) {
        return Ok(None);
    }
    let plan = plan(collection.settings(), request.clone(), &state.limits, "")?;
    if plan.examples.is_some() {
        // Its examples are read first, on a blocking thread.
        return Ok(None);
    }
    let answer = collection.query_async(&plan).await?;
    Ok(Some(plan.finish(answer, collection.settings())))
}

#[utoipa::path(post, path = "/collections/{collection}/points/query", tag = "search", params(("collection" = String, Path, description = "Collection name."), ReadQuery), request_body = QueryRequest, responses((status = 200, description = "Hits, best first, and how the query ran when `explain` was asked.", body = cairn_api::Response<QueryResponse>)))]
pub(super) async fn query(
    AxState(state): AxState<State>,
    Path(name): Path<String>,
    ApiQuery(read): ApiQuery<ReadQuery>,
    ApiJson(request): ApiJson<QueryRequest>,
) -> Result<impl IntoResponse> {
    let t = Instant::now();
    request.refuse_unsupported()?;
    if let Some(response) = over_the_network(&state, &name, &request, &read).await? {
        return Ok(ok(response, t));
    }
    let mut responses = run(&state, &name, vec![request], false, &read).await?;
    let response = responses
        .pop()
        .ok_or_else(|| ServerError::Internal("query produced no response".into()))?;
    Ok(ok(response, t))
}

#[utoipa::path(post, path = "/collections/{collection}/points/query/batch", tag = "search", params(("collection" = String, Path, description = "Collection name."), ReadQuery), request_body = QueryBatchRequest, responses((status = 200, description = "One answer per query, in order.", body = cairn_api::Response<Vec<QueryResponse>>)))]
pub(super) async fn query_batch(
    AxState(state): AxState<State>,
    Path(name): Path<String>,
    ApiQuery(read): ApiQuery<ReadQuery>,
    ApiJson(request): ApiJson<QueryBatchRequest>,
) -> Result<impl IntoResponse> {
    let t = Instant::now();
    request.refuse_unsupported()?;
    check_batch(
        request.searches.iter().map(|s| (s.limit, s.offset)),
        &state.limits,
    )?;
    Ok(ok(
        run(&state, &name, request.searches, true, &read).await?,
        t,
    ))
}

#[utoipa::path(post, path = "/collections/{collection}/points/search", tag = "search", params(("collection" = String, Path, description = "Collection name."), ReadQuery), request_body = SearchRequest, responses((status = 200, description = "Hits, best first.", body = cairn_api::Response<Vec<ScoredPoint>>)))]
pub(super) async fn search(
    AxState(state): AxState<State>,
    Path(name): Path<String>,
    ApiQuery(read): ApiQuery<ReadQuery>,
    ApiJson(request): ApiJson<SearchRequest>,
) -> Result<impl IntoResponse> {
    let t = Instant::now();
    request.refuse_unsupported()?;
    let mut responses = run(&state, &name, vec![request.into()], false, &read).await?;
    let points = responses.pop().map(|r| r.points).unwrap_or_default();
    Ok(ok(points, t))
}

#[utoipa::path(post, path = "/collections/{collection}/points/search/batch", tag = "search", params(("collection" = String, Path, description = "Collection name."), ReadQuery), request_body = SearchBatchRequest, responses((status = 200, description = "One list of hits per search, in order.", body = cairn_api::Response<Vec<Vec<ScoredPoint>>>)))]
pub(super) async fn search_batch(
    AxState(state): AxState<State>,
    Path(name): Path<String>,
    ApiQuery(read): ApiQuery<ReadQuery>,
    ApiJson(request): ApiJson<SearchBatchRequest>,
) -> Result<impl IntoResponse> {
    let t = Instant::now();
    request.refuse_unsupported()?;
    check_batch(
        request.searches.iter().map(|s| (Some(s.limit), s.offset)),
        &state.limits,
    )?;
    let requests = request
        .searches
        .into_iter()
        .map(QueryRequest::from)
        .collect();
    let responses = run(&state, &name, requests, true, &read).await?;
    Ok(ok(
        responses.into_iter().map(|r| r.points).collect::<Vec<_>>(),
        t,
    ))
}
