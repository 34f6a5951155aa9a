//! A node's internal API, both ends: the routes on `cluster.internal_addr` that hand peers'
//! Raft messages to this node's groups, and the client that carries this node's messages to
//! its peers (`cairn_consensus::Transport`).
//!
//! The internal API has a listener of its own, so the public address never serves it and a
//! firewall can keep it inside the cluster. Every call carries the cluster secret in
//! `x-cairn-cluster-key`, compared in constant time; without it a call gets 401 and reaches no
//! handler. Bodies are bincode (`application/octet-stream`), so vectors travel as raw `f32`s.
//! The client is async (one pooled connection set, no thread per call).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, Request, State as AxState};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use cairn_api::ErrorCode;
use cairn_consensus::{GroupId, Groups, HandleError, Rpc, Transport, TransportError};
use subtle::ConstantTimeEq;

use super::error::error_response;
use crate::config::ClusterConfig;
use crate::error::ServerError;

/// The header that carries the cluster secret.
pub const SECRET_HEADER: &str = "x-cairn-cluster-key";
/// The header that names the calling node (logs, and per-link fault rules later).
pub const NODE_HEADER: &str = "x-cairn-node";
/// Longest wait for a TCP connection to a peer.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
/// Largest internal body: a snapshot chunk (4 MiB) or a batch of log entries, with room.
const MAX_BODY_BYTES: usize = 64 << 20;

struct Internal {
    groups: Arc<Groups>,
    secret: Vec<u8>,
}

/// The internal API's routes.
pub fn router(groups: Arc<Groups>, secret: &str) -> Router {
    let state = Arc::new(Internal {
        groups,
        secret: secret.as_bytes().to_vec(),
    });
    Router::new()
        .route("/internal/raft/{group}/{rpc}", post(raft_message))
        .fallback(|uri: axum::http::Uri| async move {
            error_response(ErrorCode::NotFound, format!("no route for {}", uri.path()))
        })
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            require_secret,
        ))
        .with_state(state)
}

/// 401 unless the call carries the cluster secret.
async fn require_secret(
    AxState(state): AxState<Arc<Internal>>,
    request: Request,
    next: Next,
) -> Response {
    let presented = request
        .headers()
        .get(SECRET_HEADER)
        .map(HeaderValue::as_bytes)
        .unwrap_or_default();
    if bool::from(presented.ct_eq(&state.secret)) {
        next.run(request).await
    } else {
        error_response(
            ErrorCode::Unauthorized,
            format!("the internal API needs the cluster secret in {SECRET_HEADER}"),
        )
    }
}

async fn raft_message(
    AxState(state): AxState<Arc<Internal>>,
    Path((group, rpc)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (group, rpc) = match (group.parse::<GroupId>(), rpc.parse::<Rpc>()) {
        (Ok(group), Ok(rpc)) => (group, rpc),
        (Err(problem), _) | (_, Err(problem)) => {
            return error_response(ErrorCode::InvalidRequest, problem)
        }
    };
    match state.groups.handle(group, rpc, &body).await {
        Ok(answer) => (
            StatusCode::OK,
            [(axum::http::header::CONTENT_TYPE, "application/octet-stream")],
            answer,
        )
            .into_response(),
        Err(error @ HandleError::UnknownGroup(_)) => {
            let from = headers
                .get(NODE_HEADER)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("?");
            tracing::debug!(%from, %error, "a message for a group not hosted here");
            error_response(ErrorCode::NotFound, error.to_string())
        }
        Err(error @ HandleError::BadMessage { .. }) => {
            error_response(ErrorCode::InvalidRequest, error.to_string())
        }
    }
}

/// This node's client of its peers' internal APIs.
pub struct PeerClient {
    http: reqwest::Client,
    /// Internal URL of every peer, by node id.
    peers: BTreeMap<u64, String>,
    secret: String,
    from: String,
}

impl PeerClient {
    /// A client for the peers of `cluster.peers`, presenting `cluster.secret`.
    pub fn new(cluster: &ClusterConfig) -> Result<Self, ServerError> {
        let peers = cluster
            .peer_list()
            .map_err(ServerError::InvalidRequest)?
            .into_iter()
            .collect();
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .build()
            .map_err(|e| ServerError::Internal(format!("http client: {e}")))?;
        Ok(Self {
            http,
            peers,
            secret: cluster.secret.expose().to_owned(),
            from: cluster.node_id.to_string(),
        })
    }
}

impl Transport for PeerClient {
    async fn call(
        &self,
        node: u64,
        group: GroupId,
        rpc: Rpc,
        body: Vec<u8>,
        timeout: Duration,
    ) -> Result<Vec<u8>, TransportError> {
        let base = self.peers.get(&node).ok_or(TransportError::Unreachable {
            node,
            reason: "no address known for this node".into(),
        })?;
        let answer = self
            .http
            .post(format!("{base}/internal/raft/{group}/{}", rpc.name()))
            .header(SECRET_HEADER, &self.secret)
            .header(NODE_HEADER, &self.from)
            .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
            .timeout(timeout)
            .body(body)
            .send()
            .await
            .map_err(|e| failed(node, &e))?;
        let status = answer.status();
        let bytes = answer.bytes().await.map_err(|e| failed(node, &e))?;
        if status.is_success() {
            Ok(bytes.to_vec())
        } else {
            Err(TransportError::Refused {
                node,
                reason: format!("{status}: {}", String::from_utf8_lossy(&bytes)),
            })
        }
    }
}

fn failed(node: u64, error: &reqwest::Error) -> TransportError {
    if error.is_timeout() {
        TransportError::TimedOut { node }
    } else {
        TransportError::Unreachable {
            node,
            reason: error.to_string(),
        }
    }
}
