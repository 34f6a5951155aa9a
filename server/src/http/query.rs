//! Query and search endpoints (the universal `query` API and the older `search` API).

use std::time::Instant;

use axum::extract::{Path, State as AxState};
use axum::response::IntoResponse;
use axum::Extension;
use std::collections::HashMap;

use cairn_api::internal::PayloadSelection;
use cairn_api::{
    GroupsResult, PointId, QueryBatchRequest, QueryGroupsRequest, QueryRequest, QueryResponse,
    ReadConsistency, ReadQuery, Record, RefuseUnsupported, ScoredPoint, SearchBatchRequest,
    SearchRequest, WithLookup,
};

use super::auth::Reach;
use super::json::{ApiJson, ApiQuery};
use super::searchers::Work;
use super::{ok, read_consistency, State};
use crate::error::{Result, ServerError};
use crate::request::groups::groups_plan;
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
        // A recommendation reads its examples before it searches: never on an async worker.
        if only.examples.is_none() && collection.is_short(only, &consistency) {
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

/// `POST /collections/{c}/points/query/groups`: the query's hits grouped by a payload value,
/// and each group's point in the `with_lookup` collection.
#[utoipa::path(post, path = "/collections/{collection}/points/query/groups", tag = "search", params(("collection" = String, Path, description = "Collection name."), ReadQuery), request_body = QueryGroupsRequest, responses((status = 200, description = "Groups, ordered by their best hit, each with its best `group_size` hits.", body = cairn_api::Response<GroupsResult>)))]
pub(super) async fn query_groups(
    AxState(state): AxState<State>,
    Path(name): Path<String>,
    ApiQuery(read): ApiQuery<ReadQuery>,
    reach: Option<Extension<Reach>>,
    ApiJson(request): ApiJson<QueryGroupsRequest>,
) -> Result<impl IntoResponse> {
    let t = Instant::now();
    request.refuse_unsupported()?;
    let consistency = read_consistency(&read)?;
    let catalog = state.catalog()?.clone();
    let collection = catalog.get(&name)?;
    let with_lookup = request.with_lookup.clone();
    if let (Some(lookup), Some(Extension(reach))) = (&with_lookup, &reach) {
        let other = match lookup {
            WithLookup::Collection(c) | WithLookup::Options { collection: c, .. } => c,
        };
        if !reach.reads(other) {
            return Err(ServerError::Forbidden(format!(
                "with_lookup: this token grants no access to collection `{other}`"
            )));
        }
    }
    let plan = groups_plan(collection.settings(), request, &state.limits)?;
    let groups = state
        .searchers
        .run(Work::Long, move || {
            let mut groups = collection.query_groups_blocking(&plan, &consistency)?;
            if let Some(lookup) = with_lookup {
                let (other, payload, vectors) = match lookup {
                    WithLookup::Collection(c) => (c, None, false),
                    WithLookup::Options {
                        collection,
                        with_payload,
                        with_vectors,
                    } => (collection, with_payload, with_vectors.unwrap_or(false)),
                };
                let other = catalog.get(&other)?;
                let ids: Vec<PointId> = groups.iter().filter_map(|g| g.id.point_id()).collect();
                let selection = PayloadSelection::from_wire(payload, true);
                // A read token names positions of the queried collection, not of this one.
                let lookup_consistency = match &consistency {
                    ReadConsistency::After(_) => ReadConsistency::Any,
                    ReadConsistency::Any | ReadConsistency::Linearizable => consistency.clone(),
                };
                let found: HashMap<PointId, Record> = other
                    .get_points(&ids, &selection, vectors, &lookup_consistency)?
                    .into_iter()
                    .map(|r| (r.id, r))
                    .collect();
                for group in &mut groups {
                    group.lookup = group.id.point_id().and_then(|id| found.get(&id).cloned());
                }
            }
            Ok(groups)
        })
        .await?;
    Ok(ok(GroupsResult { groups }, t))
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
