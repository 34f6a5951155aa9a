//! The REST API: Qdrant-shaped routes over the catalog — and the only layer that names
//! HTTP: axum for the server side, reqwest for the client side of the internal wire
//! (`peer.rs`). Everything below takes and returns plain values.
//!
//! One file per API area (`collections.rs`, `points.rs`, `query.rs`, `service.rs`); request
//! bodies go through [`json::ApiJson`] so that malformed JSON and wrong types come back as a
//! 400 naming the field. Searches run where [`searchers`] puts them (on the async worker while
//! the node is quiet, on a bounded pool once they overlap); blocking work (RocksDB commits)
//! runs on tokio's blocking pool, never on the async workers.

pub mod admission;
pub mod auth;
mod collections;
pub mod deadline;
pub mod error;
mod json;
pub mod key_rates;
pub mod metrics;
mod openapi;
pub mod peer;
mod points;
mod query;
pub mod searchers;
mod service;
mod snapshots;
pub mod tls;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use axum::extract::DefaultBodyLimit;
use axum::Router;
use cairn_api::Response;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::catalog::Catalog;
use crate::config::Limits;
use crate::error::{Result, ServerError};

/// State shared by every handler.
pub struct AppState {
    catalog: OnceLock<Arc<Catalog>>,
    ready: AtomicBool,
    /// Request limits.
    pub limits: Limits,
    /// Largest body in bytes.
    pub max_body_bytes: usize,
    /// Request counters for `/metrics`.
    pub metrics: metrics::Metrics,
    /// A peer node's own state (`cluster.role = "node"`), for `GET /cluster`.
    pub node: Option<Arc<crate::node::Node>>,
    /// The API keys requests must present (`None`: the API is open).
    pub api_keys: Option<auth::ApiKeys>,
    /// Per-key rate limits (`None`: none).
    pub key_rates: Option<key_rates::KeyRates>,
    /// Requests in flight and waiting, and their limits.
    pub admission: admission::Admission,
    /// Where searches run, and their line.
    pub searchers: searchers::Searchers,
}

impl AppState {
    /// State of a server that is still loading.
    pub fn new(
        limits: Limits,
        max_body_bytes: usize,
        admission: admission::Admission,
        searchers: searchers::Searchers,
    ) -> Self {
        Self {
            catalog: OnceLock::new(),
            ready: AtomicBool::new(false),
            limits,
            max_body_bytes,
            metrics: Default::default(),
            node: None,
            api_keys: None,
            key_rates: None,
            admission,
            searchers,
        }
    }

    /// Installs the loaded catalog and turns `/readyz` green.
    pub fn set_ready(&self, catalog: Arc<Catalog>) {
        let _ = self.catalog.set(catalog);
        self.ready.store(true, Ordering::Release);
    }

    /// Whether collections are loaded.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// The catalog, or 503 while loading.
    pub fn catalog(&self) -> Result<&Arc<Catalog>> {
        self.catalog
            .get()
            .ok_or_else(|| ServerError::Unavailable("server is loading collections".into()))
    }
}

/// Shared state handle.
pub type State = Arc<AppState>;

/// Wraps a result in the success envelope with the elapsed time.
pub(crate) fn ok<T>(result: T, started: Instant) -> json::Body<Response<T>> {
    json::Body(Response::ok(result, started.elapsed().as_secs_f64()))
}

/// The consistency a read's query string asks for (`?consistency=`, `?read_after=`); a value
/// it cannot mean is a 400 naming the parameter.
pub(crate) fn read_consistency(read: &cairn_api::ReadQuery) -> Result<cairn_api::ReadConsistency> {
    read.consistency().map_err(ServerError::InvalidRequest)
}

/// Runs blocking work (RocksDB commits, collection creation) on tokio's blocking pool.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ServerError::Internal(format!("worker failed: {e}")))?
}

/// Every public route with its OpenAPI description: the one list both the router and
/// `GET /openapi.json` are made from ([`openapi`]). Routes at one path share a `routes!`.
pub(crate) fn api_routes() -> OpenApiRouter<State> {
    OpenApiRouter::with_openapi(openapi::ApiDoc::openapi())
        .routes(routes!(service::root))
        .routes(routes!(service::healthz))
        .routes(routes!(service::readyz))
        .routes(routes!(service::metrics))
        .routes(routes!(openapi::document))
        .routes(routes!(service::cluster))
        .routes(routes!(service::remove_peer))
        .routes(routes!(collections::list))
        .routes(routes!(
            collections::info,
            collections::create,
            collections::update,
            collections::delete
        ))
        .routes(routes!(collections::exists))
        .routes(routes!(collections::create_index))
        .routes(routes!(collections::change_aliases))
        .routes(routes!(collections::list_aliases))
        .routes(routes!(collections::collection_aliases))
        .routes(routes!(collections::delete_index))
        .routes(routes!(
            collections::cluster_info,
            collections::cluster_update
        ))
        .routes(routes!(points::upsert, points::get_many))
        .routes(routes!(points::get_one))
        .routes(routes!(points::delete))
        .routes(routes!(points::set_payload, points::overwrite_payload))
        .routes(routes!(points::delete_payload))
        .routes(routes!(points::clear_payload))
        .routes(routes!(points::update_vectors))
        .routes(routes!(points::delete_vectors))
        .routes(routes!(points::batch))
        .routes(routes!(points::scroll))
        .routes(routes!(points::count))
        .routes(routes!(points::facet))
        .routes(routes!(query::query))
        .routes(routes!(query::query_batch))
        .routes(routes!(query::query_groups))
        .routes(routes!(query::search))
        .routes(routes!(query::search_batch))
        .routes(routes!(snapshots::create, snapshots::list))
        .routes(routes!(snapshots::download, snapshots::delete))
        .routes(routes!(snapshots::recover))
        .routes(routes!(snapshots::upload))
        .routes(routes!(snapshots::create_full, snapshots::list_full))
        .routes(routes!(snapshots::download_full, snapshots::delete_full))
}

/// The router with every route and layer.
pub fn router(state: State) -> Router {
    let body_limit = state.max_body_bytes;
    let (routes, _) = api_routes().split_for_parts();
    routes
        .fallback(service::not_found)
        .method_not_allowed_fallback(service::method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            admission::admit,
        ))
        // Outside admission, so that the wait for a turn counts toward the deadline.
        .layer(axum::middleware::from_fn(deadline::deadline))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::require_key,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            metrics::track,
        ))
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(
            service::panic_response,
        ))
        .with_state(state)
}
