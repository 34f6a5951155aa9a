//! Point endpoints: upsert, get, delete, scroll, count, payload updates (set, overwrite,
//! delete keys, clear), vector updates, and batches of writes. Every write route is one
//! [`UpdateOperation`] through [`apply`], so a batch applies each exactly as its route does.

use std::collections::HashMap;
use std::time::Instant;

use axum::extract::{Path, State as AxState};
use axum::response::IntoResponse;
use cairn_api::internal::PayloadSelection;
use cairn_api::{
    CountRequest, CountResult, DeletePayloadRequest, DeletePointsRequest, DeleteVectorsRequest,
    FacetRequest, FacetResponse, GetPointsRequest, Payload, PayloadSchemaType, PointId, ReadQuery,
    Record, RefuseUnsupported, ScrollRequest, ScrollResult, SetPayloadRequest, UpdateBatchRequest,
    UpdateOperation, UpdateResult, UpdateStatus, UpdateVectorsRequest, UpsertRequest, WithVector,
    WriteQuery,
};

use super::json::{ApiJson, ApiQuery, OptionalJson};
use super::{blocking, ok, read_consistency, State};
use crate::collection::{Collection, WriteTicket};
use crate::error::{Result, ServerError};
use crate::request::filter::validate;
use crate::request::payload::{key_path, selection, PayloadChange, PointChange, Selection};
use crate::request::query::scroll_plan;
use crate::request::{
    check_vector_deletion, prepare_delete_ids, prepare_points, prepare_vector_updates,
};

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
    write(&state, &name, &params, UpdateOperation::Upsert(request)).await
}

#[utoipa::path(post, path = "/collections/{collection}/points/delete", operation_id = "delete_points", tag = "points", params(("collection" = String, Path, description = "Collection name."), WriteQuery), request_body = DeletePointsRequest, responses((status = 200, description = "Durable (and, with `wait=true`, applied).", body = cairn_api::Response<UpdateResult>)))]
pub(super) async fn delete(
    AxState(state): AxState<State>,
    Path(name): Path<String>,
    ApiQuery(params): ApiQuery<HashMap<String, String>>,
    ApiJson(request): ApiJson<DeletePointsRequest>,
) -> Result<impl IntoResponse> {
    write(&state, &name, &params, UpdateOperation::Delete(request)).await
}

#[utoipa::path(post, path = "/collections/{collection}/points/payload", tag = "points", params(("collection" = String, Path, description = "Collection name."), WriteQuery), request_body = SetPayloadRequest, responses((status = 200, description = "The keys are set on every selected point (merged in; with `key`, into the object at that path).", body = cairn_api::Response<UpdateResult>)))]
pub(super) async fn set_payload(
    AxState(state): AxState<State>,
    Path(name): Path<String>,
    ApiQuery(params): ApiQuery<HashMap<String, String>>,
    ApiJson(request): ApiJson<SetPayloadRequest>,
) -> Result<impl IntoResponse> {
    write(&state, &name, &params, UpdateOperation::SetPayload(request)).await
}

#[utoipa::path(put, path = "/collections/{collection}/points/payload", tag = "points", params(("collection" = String, Path, description = "Collection name."), WriteQuery), request_body = SetPayloadRequest, responses((status = 200, description = "Every selected point's payload is replaced (with `key`, the object at that path).", body = cairn_api::Response<UpdateResult>)))]
pub(super) async fn overwrite_payload(
    AxState(state): AxState<State>,
    Path(name): Path<String>,
    ApiQuery(params): ApiQuery<HashMap<String, String>>,
    ApiJson(request): ApiJson<SetPayloadRequest>,
) -> Result<impl IntoResponse> {
    write(
        &state,
        &name,
        &params,
        UpdateOperation::OverwritePayload(request),
    )
    .await
}

#[utoipa::path(post, path = "/collections/{collection}/points/payload/delete", tag = "points", params(("collection" = String, Path, description = "Collection name."), WriteQuery), request_body = DeletePayloadRequest, responses((status = 200, description = "The keys are removed from every selected point.", body = cairn_api::Response<UpdateResult>)))]
pub(super) async fn delete_payload(
    AxState(state): AxState<State>,
    Path(name): Path<String>,
    ApiQuery(params): ApiQuery<HashMap<String, String>>,
    ApiJson(request): ApiJson<DeletePayloadRequest>,
) -> Result<impl IntoResponse> {
    write(
        &state,
        &name,
        &params,
        UpdateOperation::DeletePayload(request),
    )
    .await
}

#[utoipa::path(post, path = "/collections/{collection}/points/payload/clear", tag = "points", params(("collection" = String, Path, description = "Collection name."), WriteQuery), request_body = DeletePointsRequest, responses((status = 200, description = "Every selected point keeps its vector and loses its payload.", body = cairn_api::Response<UpdateResult>)))]
pub(super) async fn clear_payload(
    AxState(state): AxState<State>,
    Path(name): Path<String>,
    ApiQuery(params): ApiQuery<HashMap<String, String>>,
    ApiJson(request): ApiJson<DeletePointsRequest>,
) -> Result<impl IntoResponse> {
    write(
        &state,
        &name,
        &params,
        UpdateOperation::ClearPayload(request),
    )
    .await
}

#[utoipa::path(put, path = "/collections/{collection}/points/vectors", tag = "points", params(("collection" = String, Path, description = "Collection name."), WriteQuery), request_body = UpdateVectorsRequest, responses((status = 200, description = "Every point has its new vector and keeps its payload; an id the collection lacks is a 404 and nothing is written.", body = cairn_api::Response<UpdateResult>)))]
pub(super) async fn update_vectors(
    AxState(state): AxState<State>,
    Path(name): Path<String>,
    ApiQuery(params): ApiQuery<HashMap<String, String>>,
    ApiJson(request): ApiJson<UpdateVectorsRequest>,
) -> Result<impl IntoResponse> {
    write(
        &state,
        &name,
        &params,
        UpdateOperation::UpdateVectors(request),
    )
    .await
}

#[utoipa::path(post, path = "/collections/{collection}/points/vectors/delete", tag = "points", params(("collection" = String, Path, description = "Collection name."), WriteQuery), request_body = DeleteVectorsRequest, responses((status = 200, description = "Every selected point loses the named vectors it has (the main vector cannot be deleted: every point carries it).", body = cairn_api::Response<UpdateResult>)))]
pub(super) async fn delete_vectors(
    AxState(state): AxState<State>,
    Path(name): Path<String>,
    ApiQuery(params): ApiQuery<HashMap<String, String>>,
    ApiJson(request): ApiJson<DeleteVectorsRequest>,
) -> Result<impl IntoResponse> {
    write(
        &state,
        &name,
        &params,
        UpdateOperation::DeleteVectors(request),
    )
    .await
}

#[utoipa::path(post, path = "/collections/{collection}/points/batch", tag = "points", params(("collection" = String, Path, description = "Collection name."), WriteQuery), request_body = UpdateBatchRequest, responses((status = 200, description = "Each write's result, in order. The writes are applied one after another, not as one transaction: a failing one (its index is in the error) leaves those before it applied.", body = cairn_api::Response<Vec<UpdateResult>>)))]
pub(super) async fn batch(
    AxState(state): AxState<State>,
    Path(name): Path<String>,
    ApiQuery(params): ApiQuery<HashMap<String, String>>,
    ApiJson(request): ApiJson<UpdateBatchRequest>,
) -> Result<impl IntoResponse> {
    let t = Instant::now();
    // Every operation is checked for refused fields before any is applied.
    request.refuse_unsupported()?;
    let wait = wait_flag(&params)?;
    if request.operations.len() > state.limits.max_batch_queries {
        return Err(ServerError::LimitExceeded(format!(
            "operations: {} writes is above the maximum of {} per batch",
            request.operations.len(),
            state.limits.max_batch_queries
        )));
    }
    let mut results = Vec::with_capacity(request.operations.len());
    for (i, operation) in request.operations.into_iter().enumerate() {
        // Each waits for its own durability (and, with `wait`, its application) before the
        // next begins, so a later write of the batch is ordered after an earlier one.
        let part = format!("operations[{i}].{}", operation.name());
        let result = apply(&state, &name, operation, wait)
            .await
            .map_err(|e| e.within(&part))?;
        results.push(result);
    }
    Ok(ok(results, t))
}

/// One write route: `?wait`, then the write.
async fn write(
    state: &State,
    name: &str,
    params: &HashMap<String, String>,
    operation: UpdateOperation,
) -> Result<axum::response::Response> {
    let t = Instant::now();
    operation.refuse_unsupported()?;
    let wait = wait_flag(params)?;
    Ok(ok(apply(state, name, operation, wait).await?, t).into_response())
}

/// Applies one write (validated here; refused fields were checked by the caller) and answers
/// as its route does.
async fn apply(
    state: &State,
    name: &str,
    operation: UpdateOperation,
    wait: bool,
) -> Result<UpdateResult> {
    let collection = state.catalog()?.get(name)?;
    let limits = state.limits;
    let c = collection.clone();
    let ticket = match operation {
        UpdateOperation::Upsert(mut request) => {
            let only_where = request.update_filter.take();
            if let Some(filter) = &only_where {
                validate(filter, "update_filter", limits.max_filter_depth)?;
            }
            blocking(move || {
                let points = prepare_points(c.settings(), request, &limits)?;
                match &only_where {
                    None => c.upsert_blocking(points),
                    Some(filter) => c.upsert_where(points, filter),
                }
            })
            .await?
        }
        UpdateOperation::Delete(request) => {
            let selected = selection(request.points, request.filter, &limits)?;
            blocking(move || match selected {
                Selection::Ids(ids) => c.delete_blocking(ids),
                // Matched where the delete is made, seeing every write acknowledged before it.
                Selection::Filter(filter) => c.delete_matching(&filter),
            })
            .await?
        }
        UpdateOperation::SetPayload(request) => {
            let (selected, path, payload) = payload_target(request, &limits)?;
            let change = PointChange::Payload(PayloadChange::Set { path, payload });
            blocking(move || c.update_points(&selected, &change)).await?
        }
        UpdateOperation::OverwritePayload(request) => {
            let (selected, path, payload) = payload_target(request, &limits)?;
            let change = PointChange::Payload(PayloadChange::Overwrite { path, payload });
            blocking(move || c.update_points(&selected, &change)).await?
        }
        UpdateOperation::DeletePayload(request) => {
            let keys = request
                .keys
                .iter()
                .enumerate()
                .map(|(i, k)| key_path(k, &format!("keys[{i}]")))
                .collect::<Result<Vec<_>>>()?;
            let selected = selection(request.points, request.filter, &limits)?;
            let change = PointChange::Payload(PayloadChange::Delete { keys });
            blocking(move || c.update_points(&selected, &change)).await?
        }
        UpdateOperation::ClearPayload(request) => {
            let selected = selection(request.points, request.filter, &limits)?;
            let change = PointChange::Payload(PayloadChange::Clear);
            blocking(move || c.update_points(&selected, &change)).await?
        }
        UpdateOperation::UpdateVectors(request) => {
            // Checking and normalising the vectors is work on every float, as for an upsert:
            // off the async workers.
            if let Some(filter) = &request.update_filter {
                validate(filter, "update_filter", limits.max_filter_depth)?;
            }
            blocking(move || {
                let points = prepare_vector_updates(c.settings(), request.points, &limits)?;
                c.update_vectors(points, request.update_filter.as_ref())
            })
            .await?
        }
        UpdateOperation::DeleteVectors(request) => {
            check_vector_deletion(collection.settings(), &request.vector, "vector")?;
            let selected = selection(request.points, request.filter, &limits)?;
            let change = PointChange::DeleteVectors(request.vector);
            blocking(move || c.update_points(&selected, &change)).await?
        }
    };
    finish_write(&collection, ticket, wait).await
}

/// The points a set or overwrite selects, the path of its `key`, and its payload.
fn payload_target(
    request: SetPayloadRequest,
    limits: &crate::config::Limits,
) -> Result<(Selection, Vec<String>, Payload)> {
    let path = request
        .key
        .as_deref()
        .map_or(Ok(Vec::new()), |k| key_path(k, "key"))?;
    let selected = selection(request.points, request.filter, limits)?;
    Ok((selected, path, request.payload))
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
    let c = collection.clone();
    let mut records =
        blocking(move || c.get_points(&ids, &with_payload, with_vector, &consistency)).await?;
    keep_named_vectors(&collection, &mut records, request.with_vector.as_ref());
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
    let names = request.with_vector.clone();
    let plan = scroll_plan(collection.settings(), request, &state.limits)?;
    let c = collection.clone();
    let (mut points, next_page_offset) = blocking(move || {
        if let Some(order) = &plan.order_by {
            // As in Qdrant: an order needs an index that holds the key's values in order. (A
            // clustered collection's partition may be asked on another node: blocking.)
            let ordered = matches!(
                c.payload_index_type(&order.key)?,
                Some(
                    PayloadSchemaType::Integer
                        | PayloadSchemaType::Float
                        | PayloadSchemaType::Datetime
                )
            );
            if !ordered {
                return Err(ServerError::InvalidRequest(format!(
                    "order_by.key: `{}` has no integer, float or datetime payload index; \
                     create one (PUT /collections/{{c}}/index) to order by it",
                    order.key
                )));
            }
        }
        c.scroll_blocking(&plan, &consistency)
    })
    .await?;
    keep_named_vectors(&collection, &mut points, names.as_ref());
    Ok(ok(
        ScrollResult {
            points,
            next_page_offset,
        },
        t,
    ))
}

/// Partitions return all of a point's vectors; a `with_vector` list of names keeps those.
fn keep_named_vectors(collection: &Collection, records: &mut [Record], names: Option<&WithVector>) {
    let Some(names @ WithVector::Names(_)) = names else {
        return;
    };
    for record in records {
        record.vector = record
            .vector
            .take()
            .and_then(|v| collection.settings().pick_vectors(v, names));
    }
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

/// `POST /collections/{c}/facet`: counts of the values of an indexed payload key, over every
/// partition wherever it lives.
#[utoipa::path(post, path = "/collections/{collection}/facet", tag = "points", params(("collection" = String, Path, description = "Collection name."), ReadQuery), request_body = FacetRequest, responses((status = 200, description = "The most frequent values, each with its exact count.", body = cairn_api::Response<FacetResponse>)))]
pub(super) async fn facet(
    AxState(state): AxState<State>,
    Path(name): Path<String>,
    ApiQuery(read): ApiQuery<ReadQuery>,
    ApiJson(request): ApiJson<FacetRequest>,
) -> Result<impl IntoResponse> {
    let t = Instant::now();
    read_consistency(&read)?;
    let collection = state.catalog()?.get(&name)?;
    if let Some(f) = &request.filter {
        validate(f, "filter", state.limits.max_filter_depth)?;
    }
    let limit = request.limit.unwrap_or(10);
    if limit == 0 || limit > state.limits.max_limit {
        return Err(ServerError::LimitExceeded(format!(
            "limit must be from 1 to {}, not {limit}",
            state.limits.max_limit
        )));
    }
    let hits =
        blocking(move || collection.facet(&request.key, request.filter.as_ref(), limit)).await?;
    Ok(ok(FacetResponse { hits }, t))
}
