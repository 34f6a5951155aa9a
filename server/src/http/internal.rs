//! A shard node's internal API, spoken by its router (`client.rs` on the router's side):
//! create and drop partitions, and one call per partition operation, run by
//! `crate::cluster::shard`. Mounted only with `cluster.role = "shard"`.

use std::time::Instant;

use axum::extract::{Path, State as AxState};
use axum::response::IntoResponse;
use cairn_api::internal::PartitionCall;

use super::json::ApiJson;
use super::{blocking, ok, State};

use crate::cluster::shard::dispatch;
use crate::error::{Result, ServerError};
use crate::request::CollectionSettings;

pub(super) async fn create(
    AxState(state): AxState<State>,
    Path(name): Path<String>,
    ApiJson(settings): ApiJson<CollectionSettings>,
) -> Result<impl IntoResponse> {
    let t = Instant::now();
    let catalog = state.catalog()?.clone();
    blocking(move || {
        // Idempotent: a router retrying a creation finds the partition there.
        if let Ok(existing) = catalog.get(&name) {
            return if existing.settings() == &settings {
                Ok(())
            } else {
                Err(ServerError::CollectionExists(name))
            };
        }
        catalog.create_with(&name, &settings)
    })
    .await?;
    Ok(ok(true, t))
}

pub(super) async fn drop_partition(
    AxState(state): AxState<State>,
    Path(name): Path<String>,
) -> Result<impl IntoResponse> {
    let t = Instant::now();
    let catalog = state.catalog()?.clone();
    blocking(move || catalog.delete(&name)).await?;
    Ok(ok(true, t))
}

pub(super) async fn call(
    AxState(state): AxState<State>,
    Path(name): Path<String>,
    ApiJson(call): ApiJson<PartitionCall>,
) -> Result<impl IntoResponse> {
    let t = Instant::now();
    // A partition missing here is this node's fault (wiped, or never created), not the
    // request's: 503, so the router fails over and marks this replica dead.
    let collection = state
        .catalog()?
        .get(&name)
        .map_err(|_| ServerError::Unavailable(format!("partition {name} is not on this node")))?;
    let answer = blocking(move || {
        let partition = collection
            .partitions()
            .first()
            .and_then(|p| p.local())
            .ok_or_else(|| ServerError::Internal(format!("{name} is not a local partition")))?;
        dispatch(partition, call)
    })
    .await?;
    Ok(ok(answer, t))
}

/// `POST /internal/fault` (tests only): `{"delay_ms": N}` delays every later partition call.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Fault {
    delay_ms: u64,
}

pub(super) async fn fault(
    AxState(state): AxState<State>,
    ApiJson(fault): ApiJson<Fault>,
) -> Result<impl IntoResponse> {
    let t = Instant::now();
    if let Some(delay) = &state.fault_delay_ms {
        delay.store(fault.delay_ms, std::sync::atomic::Ordering::Relaxed);
        tracing::warn!(delay_ms = fault.delay_ms, "fault injected");
    }
    Ok(ok(true, t))
}

/// Middleware of a shard with fault injection on: sleeps before partition calls.
pub(super) async fn delay(
    AxState(state): AxState<State>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let ms = state
        .fault_delay_ms
        .as_ref()
        .map_or(0, |d| d.load(std::sync::atomic::Ordering::Relaxed));
    if ms > 0 && request.uri().path().starts_with("/internal/partitions") {
        tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
    }
    next.run(request).await
}
