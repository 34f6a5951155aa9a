//! Service endpoints: `/`, health, readiness, metrics, and the JSON fallbacks.

use std::time::Instant;

use axum::extract::State as AxState;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use cairn_api::{ErrorCode, ServerInfo};

use super::error::error_response;
use super::{ok, State};

#[utoipa::path(get, path = "/", tag = "service", security(()), responses((status = 200, description = "Who answers: the Qdrant REST version Cairn follows (`version`, what Qdrant's clients check) and Cairn's own (`cairn_version`); no envelope, as in Qdrant.", body = ServerInfo)))]
pub(super) async fn root() -> impl IntoResponse {
    axum::Json(ServerInfo {
        title: "cairn - vector search engine".into(),
        version: cairn_api::QDRANT_API_VERSION.into(),
        cairn_version: env!("CARGO_PKG_VERSION").into(),
    })
}

/// Liveness: the process answers.
#[utoipa::path(get, path = "/healthz", tag = "service", security(()), responses((status = 200, description = "The process answers (never needs a key).", body = cairn_api::Response<String>)))]
pub(super) async fn healthz() -> impl IntoResponse {
    ok("healthz check passed", Instant::now())
}

/// Readiness: 503 until every collection is loaded.
#[utoipa::path(get, path = "/readyz", tag = "service", security(()), responses((status = 200, description = "Every collection is loaded (never needs a key); 503 until then.", body = cairn_api::Response<String>)))]
pub(super) async fn readyz(AxState(state): AxState<State>) -> Response {
    if state.is_ready() {
        ok("all collections are loaded", Instant::now()).into_response()
    } else {
        error_response(
            ErrorCode::Unavailable,
            "server is loading collections".into(),
        )
    }
}

/// `GET /cluster`: the metadata group on a peer node (`crate::node`); `disabled` otherwise, as
/// Qdrant answers when it runs without consensus.
#[utoipa::path(get, path = "/cluster", tag = "cluster", responses((status = 200, description = "The metadata group on a peer node (its leader, term, peers); `{\"status\": \"disabled\"}` standalone.", body = cairn_api::Response<Object>)))]
pub(super) async fn cluster(AxState(state): AxState<State>) -> Response {
    let started = Instant::now();
    match &state.node {
        Some(node) => ok(node.status(), started).into_response(),
        None => ok(serde_json::json!({ "status": "disabled" }), started).into_response(),
    }
}

/// `DELETE /cluster/peer/{id}` (Qdrant's node removal): the node's replicas move to other
/// nodes, then it leaves the metadata group; `GET /cluster` shows it `removing` until then.
/// Qdrant's `force=true` (remove without moving the replicas, losing them) is refused: Cairn
/// always moves them first.
#[utoipa::path(delete, path = "/cluster/peer/{id}", tag = "cluster", params(("id" = u64, Path, description = "The node to remove."), RemovePeer), responses((status = 200, description = "Removal recorded; the node's replicas move first, then it leaves.", body = cairn_api::Response<bool>)))]
pub(super) async fn remove_peer(
    AxState(state): AxState<State>,
    axum::extract::Path(id): axum::extract::Path<String>,
    super::json::ApiQuery(query): super::json::ApiQuery<RemovePeer>,
) -> crate::error::Result<Response> {
    let started = Instant::now();
    let id: u64 = id.parse().map_err(|_| {
        crate::error::ServerError::InvalidRequest(format!(
            "node id must be an unsigned integer, got {id:?}"
        ))
    })?;
    let node = state.node.clone().ok_or_else(|| {
        crate::error::ServerError::InvalidRequest(
            "removing a node needs a peer node (`cluster.role = \"node\"`)".into(),
        )
    })?;
    if query.force {
        return Err(crate::error::ServerError::InvalidRequest(
            "force=true (dropping the node's replicas without moving them) is not supported: \
             without it, the node's replicas move to other nodes first"
                .into(),
        ));
    }
    node.remove_node(id).await?;
    Ok(ok(true, started).into_response())
}

/// Query parameters of `DELETE /cluster/peer/{id}`.
#[derive(serde::Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(super) struct RemovePeer {
    /// Qdrant's removal without moving the node's replicas first: refused (`true` is a 400).
    #[serde(default)]
    force: bool,
    /// Qdrant's wait for the removal, accepted: the removal here is asynchronous either way,
    /// and `GET /cluster` shows when it is done.
    #[serde(default, rename = "timeout")]
    _timeout: Option<u64>,
}

#[utoipa::path(get, path = "/metrics", tag = "service", responses((status = 200, description = "Prometheus text exposition: request counters and latencies, collection and cluster gauges.", body = String, content_type = "text/plain")))]
pub(super) async fn metrics(AxState(state): AxState<State>) -> Response {
    // Clustered collections ask other nodes for counters: off the async workers.
    let body = tokio::task::spawn_blocking(move || {
        state.metrics.render(
            state.catalog().ok().map(|c| c.as_ref()),
            state.searchers.counts(),
        )
    })
    .await
    .unwrap_or_default();
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4",
        )],
        body,
    )
        .into_response()
}

pub(super) async fn not_found(uri: axum::http::Uri) -> Response {
    error_response(ErrorCode::NotFound, format!("no route for {}", uri.path()))
}

pub(super) async fn method_not_allowed(
    method: axum::http::Method,
    uri: axum::http::Uri,
) -> Response {
    let mut response = error_response(
        ErrorCode::InvalidRequest,
        format!("method {method} is not allowed on {}", uri.path()),
    );
    *response.status_mut() = StatusCode::METHOD_NOT_ALLOWED;
    response
}

pub(super) fn panic_response(_: Box<dyn std::any::Any + Send + 'static>) -> Response {
    tracing::error!("request handler panicked");
    error_response(
        ErrorCode::Internal,
        "internal error: request handler panicked".into(),
    )
}
