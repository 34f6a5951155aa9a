//! Point endpoints: upsert, get, delete, scroll, count.

use std::collections::HashMap;
use std::time::Instant;

use axum::extract::{Path, State as AxState};
use axum::response::IntoResponse;
use cairn_api::internal::PayloadSelection;
use cairn_api::{
    CountRequest, CountResult, DeletePointsRequest, GetPointsRequest, PointId, ReadQuery, Record,
    RefuseUnsupported, ScrollRequest, ScrollResult, UpdateResult, UpdateStatus, UpsertRequest,
    WriteQuery,
};

use super::json::{ApiJson, ApiQuery, OptionalJson};
use super::{blocking, ok, read_consistency, State};
use crate::collection::{Collection, WriteTicket};
use crate::error::{Result, ServerError};
use crate::request::filter::validate;
use crate::request::query::scroll_plan;
use crate::request::{prepare_delete_ids, prepare_points};

/// `?wait=true|false` (anything else is a 400).
fn wait_flag(params: &HashMap<String, String>) -> Result<bool> {
    match params.get("wait").map(String::as_str) {
        None | Some("false") => Ok(false),
        Some("true" | "") => Ok(true),
        Some(other) => Err(ServerError::InvalidRequest(format!(
            "query parameter wait must be true or false, got {other:?}"
        ))),
    }
}

async fn finish_write(
    collection: &Collection,
    ticket: WriteTicket,
    wait: bool,
) -> Result<UpdateResult> {
    if wait {
        collection.wait_applied(&ticket).await?;
    }
    Ok(UpdateResult {
        operation_id: ticket.operation_id,
        status: if wait {
            UpdateStatus::Completed
        } else {
            UpdateStatus::Acknowledged
        },
        // A write that touched nothing (a delete of absent ids) leaves no position to wait for.
        read_token: Some(ticket.read_token()).filter(|token| !token.0.is_empty()),
    })
}

#[utoipa::path(put, path = "/collections/{collection}/points", tag = "points", params(("collection" = String, Path, description = "Collection name."), WriteQuery), request_body = UpsertRequest, responses((status = 200, description = "Durable (and, with `wait=true`, searchable).", body = cairn_api::Response<UpdateResult>)))]
pub(super) async fn upsert(
    AxState(state): AxState<State>,
    Path(name): Path<String>,
    ApiQuery(params): ApiQuery<HashMap<String, String>>,
    ApiJson(request): ApiJson<UpsertRequest>,
) -> Result<impl IntoResponse> {
    let t = Instant::now();
    request.refuse_unsupported()?;
    let wait = wait_flag(&params)?;
    let collection = state.catalog()?.get(&name)?;
    let limits = state.limits;
    let c = collection.clone();
    let seq = blocking(move || {
        let points = prepare_points(c.settings(), request, &limits)?;
        c.upsert_blocking(points)
    })
    .await?;
    Ok(ok(finish_write(&collection, seq, wait).await?, t))
}

#[utoipa::path(post, path = "/collections/{collection}/points/delete", operation_id = "delete_points", tag = "points", params(("collection" = String, Path, description = "Collection name."), WriteQuery), request_body = DeletePointsRequest, responses((status = 200, description = "Durable (and, with `wait=true`, applied).", body = cairn_api::Response<UpdateResult>)))]
pub(super) async fn delete(
    AxState(state): AxState<State>,
    Path(name): Path<String>,
    ApiQuery(params): ApiQuery<HashMap<String, String>>,
    ApiJson(request): ApiJson<DeletePointsRequest>,
) -> Result<impl IntoResponse> {
    let t = Instant::now();
    request.refuse_unsupported()?;
    let wait = wait_flag(&params)?;
    let collection = state.catalog()?.get(&name)?;
    let limits = state.limits;
    let c = collection.clone();
    let seq = blocking(move || {
        let ids = match (request.points, request.filter) {
            (Some(ids), None) => prepare_delete_ids(ids, &limits)?,
            (None, Some(filter)) => {
                validate(&filter, "filter", limits.max_filter_depth)?;
                // Matched where the delete is made, seeing every write acknowledged before it.
                return c.delete_matching(&filter);
            }
            (Some(_), Some(_)) => {
                return Err(ServerError::InvalidRequest(
                    "give either `points` or `filter`, not both".into(),
                ))
            }
            (None, None) => {
                return Err(ServerError::InvalidRequest(
                    "body needs `points` or `filter`".into(),
                ))
            }
        };
        c.delete_blocking(ids)
    })
    .await?;
    Ok(ok(finish_write(&collection, seq, wait).await?, t))
}

#[utoipa::path(get, path = "/collections/{collection}/points/{id}", tag = "points", params(("collection" = String, Path, description = "Collection name."), ("id" = String, Path, description = "An unsigned integer or a UUID."), ReadQuery), responses((status = 200, description = "The point with its payload and vector.", body = cairn_api::Response<Record>)))]
pub(super) async fn get_one(
    AxState(state): AxState<State>,
    Path((name, id)): Path<(String, String)>,
    ApiQuery(read): ApiQuery<ReadQuery>,
) -> Result<impl IntoResponse> {
    let t = Instant::now();
    let consistency = read_consistency(&read)?;
    let id: PointId = id.parse().map_err(ServerError::InvalidRequest)?;
    let collection = state.catalog()?.get(&name)?;
    let record = blocking(move || {
        collection
            .get_points(&[id], &PayloadSelection::All, true, &consistency)?
            .pop()
            .ok_or(ServerError::PointNotFound(id))
    })
    .await?;
    Ok(ok(record, t))
}

#[utoipa::path(post, path = "/collections/{collection}/points", tag = "points", params(("collection" = String, Path, description = "Collection name."), ReadQuery), request_body = GetPointsRequest, responses((status = 200, description = "The points found, in the order asked; missing ids are skipped.", body = cairn_api::Response<Vec<Record>>)))]
pub(super) async fn get_many(
    AxState(state): AxState<State>,
    Path(name): Path<String>,
    ApiQuery(read): ApiQuery<ReadQuery>,
    ApiJson(request): ApiJson<GetPointsRequest>,
) -> Result<impl IntoResponse> {
    let t = Instant::now();
    request.refuse_unsupported()?;
    let consistency = read_consistency(&read)?;
    let collection = state.catalog()?.get(&name)?;
    let ids = prepare_delete_ids(request.ids, &state.limits)?;
    let with_payload = PayloadSelection::from_wire(request.with_payload, true);
    let with_vector = collection
        .settings()
        .wants_vector(request.with_vector.as_ref(), "")?;
    // A cluster's collection may ask other nodes: off the async workers.
    let records =
        blocking(move || collection.get_points(&ids, &with_payload, with_vector, &consistency))
            .await?;
    Ok(ok(records, t))
}

#[utoipa::path(post, path = "/collections/{collection}/points/scroll", tag = "points", params(("collection" = String, Path, description = "Collection name."), ReadQuery), request_body(content = Option<ScrollRequest>, description = "Optional: an empty body scrolls from the start."), responses((status = 200, description = "A page of points in id order.", body = cairn_api::Response<ScrollResult>)))]
pub(super) async fn scroll(
    AxState(state): AxState<State>,
    Path(name): Path<String>,
    ApiQuery(read): ApiQuery<ReadQuery>,
    OptionalJson(request): OptionalJson<ScrollRequest>,
) -> Result<impl IntoResponse> {
    let t = Instant::now();
    request.refuse_unsupported()?;
    let consistency = read_consistency(&read)?;
    let collection = state.catalog()?.get(&name)?;
    let plan = scroll_plan(collection.settings(), request, &state.limits)?;
    let (points, next_page_offset) =
        blocking(move || collection.scroll_blocking(&plan, &consistency)).await?;
    Ok(ok(
        ScrollResult {
            points,
            next_page_offset,
        },
        t,
    ))
}

#[utoipa::path(post, path = "/collections/{collection}/points/count", tag = "points", params(("collection" = String, Path, description = "Collection name."), ReadQuery), request_body(content = Option<CountRequest>, description = "Optional: an empty body counts every point."), responses((status = 200, description = "The exact count.", body = cairn_api::Response<CountResult>)))]
pub(super) async fn count(
    AxState(state): AxState<State>,
    Path(name): Path<String>,
    ApiQuery(read): ApiQuery<ReadQuery>,
    OptionalJson(request): OptionalJson<CountRequest>,
) -> Result<impl IntoResponse> {
    let t = Instant::now();
    request.refuse_unsupported()?;
    let consistency = read_consistency(&read)?;
    let collection = state.catalog()?.get(&name)?;
    if let Some(f) = &request.filter {
        validate(f, "filter", state.limits.max_filter_depth)?;
    }
    let count =
        blocking(move || collection.count_blocking(request.filter.as_ref(), &consistency)).await?;
    Ok(ok(CountResult { count }, t))
}
