//! A node's internal API, both ends: the routes on `cluster.internal_addr` that hand peers'
//! Raft messages to this node's groups, serve partition calls from its replicas and take the
//! writes of the partitioned collections this node writes, and the client that carries this node's messages and calls to its peers
//! (`cairn_consensus::Transport`, `node::remote::PartitionCalls`).
//!
//! The internal API has a listener of its own, so the public address never serves it and a
//! firewall can keep it inside the cluster. Every call carries the cluster secret in
//! `x-cairn-cluster-key`, compared in constant time; without it a call gets 401 and reaches no
//! handler. Raft messages are bincode (`application/octet-stream`); partition calls and
//! forwarded writes, and their answers, are MessagePack (`cairn_api::internal::encode`); so
//! vectors travel as raw `f32`s either way. A refusal is the public API's JSON error envelope,
//! so its code survives the hop. The client is async (one pooled connection set, no thread
//! per call).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, Request, State as AxState};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use std::future::Future;
use std::pin::Pin;

use cairn_api::internal::{self, CollectionWrite, PartitionCall, WriteReceipt, WIRE_CONTENT_TYPE};
use cairn_api::ErrorCode;
use cairn_consensus::{Addressee, GroupId, Groups, HandleError, Rpc, Transport, TransportError};
use subtle::ConstantTimeEq;

use super::error::error_response;
use super::searchers::Work;
use crate::catalog::Catalog;
use crate::collection::handle::{encode, serve_call};
use crate::collection::Collection;
use crate::config::ClusterConfig;
use crate::error::ServerError;
use crate::node::remote::PartitionCalls;
use crate::node::{JoinRequest, Node};

/// The header that carries the cluster secret.
pub const SECRET_HEADER: &str = "x-cairn-cluster-key";
/// The header that names the calling node (logs, and per-link fault rules later).
pub const NODE_HEADER: &str = "x-cairn-node";
/// Longest wait for a TCP connection to a peer.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
/// Largest internal body: a snapshot chunk (4 MiB) or a batch of log entries, with room.
const MAX_BODY_BYTES: usize = 64 << 20;

/// Links cut on purpose (`cluster.fault_injection`, **tests only**): this node sends nothing
/// to the nodes named here and refuses everything from them, so telling one end cuts the
/// link both ways, without root or a firewall. A delay slows every partition call this node
/// serves (a straggler on demand); Raft messages are not delayed.
#[derive(Default)]
pub struct Faults {
    enabled: bool,
    cut: parking_lot::RwLock<std::collections::BTreeSet<u64>>,
    delay_ms: std::sync::atomic::AtomicU64,
}

impl Faults {
    /// Faults that `PUT /internal/faults` may set when `enabled`.
    pub fn new(enabled: bool) -> Arc<Self> {
        Arc::new(Self {
            enabled,
            cut: Default::default(),
            delay_ms: Default::default(),
        })
    }

    fn is_cut(&self, node: u64) -> bool {
        self.enabled && self.cut.read().contains(&node)
    }
}

/// `PUT /internal/faults`: the nodes whose links to this one are cut (empty heals), and the
/// delay of every partition call this node serves (absent: none). Each call sets both.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct SetFaults {
    cut: Vec<u64>,
    #[serde(default)]
    delay_ms: u64,
}

/// The catalog, once it has loaded (the internal API starts before it, so the groups can
/// elect while collections load).
pub type CatalogCell = Arc<std::sync::OnceLock<Arc<Catalog>>>;

struct Internal {
    node: Arc<Node>,
    catalog: CatalogCell,
    groups: Arc<Groups>,
    secret: Vec<u8>,
    faults: Arc<Faults>,
    /// The public port's search pool: a node's searches share one line, whichever port
    /// asked for them.
    searchers: super::searchers::Searchers,
}

/// The internal API's routes.
pub fn router(
    node: Arc<Node>,
    catalog: CatalogCell,
    secret: &str,
    faults: Arc<Faults>,
    searchers: super::searchers::Searchers,
) -> Router {
    let enabled = faults.enabled;
    let state = Arc::new(Internal {
        groups: node.groups(),
        node,
        catalog,
        secret: secret.as_bytes().to_vec(),
        faults,
        searchers,
    });
    let mut app = Router::new()
        .route("/internal/raft/{group}/{rpc}", post(raft_message))
        .route("/internal/partition/{group}", post(partition_call))
        .route("/internal/collection/{name}/write", post(collection_write))
        .route("/internal/join", post(join));
    if enabled {
        tracing::warn!("fault injection is on (cluster.fault_injection): for tests only");
        app = app.route("/internal/faults", axum::routing::put(set_faults));
    }
    app.fallback(|uri: axum::http::Uri| async move {
        error_response(ErrorCode::NotFound, format!("no route for {}", uri.path()))
    })
    .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
    .layer(axum::middleware::from_fn_with_state(
        state.clone(),
        require_secret,
    ))
    .with_state(state)
}

async fn set_faults(AxState(state): AxState<Arc<Internal>>, body: Bytes) -> Response {
    match serde_json::from_slice::<SetFaults>(&body) {
        Ok(faults) => {
            tracing::warn!(cut = ?faults.cut, delay_ms = faults.delay_ms, "fault injected: links cut, calls delayed");
            *state.faults.cut.write() = faults.cut.into_iter().collect();
            state
                .faults
                .delay_ms
                .store(faults.delay_ms, std::sync::atomic::Ordering::Relaxed);
            super::ok(true, std::time::Instant::now()).into_response()
        }
        Err(e) => error_response(ErrorCode::InvalidRequest, format!("faults: {e}")),
    }
}

/// 401 unless the call carries the cluster secret; 503 from a node whose link is cut.
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
    let from = request
        .headers()
        .get(NODE_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if from.is_some_and(|node| state.faults.is_cut(node)) {
        return error_response(ErrorCode::Unavailable, "link cut (fault injection)".into());
    }
    if bool::from(presented.ct_eq(&state.secret)) {
        next.run(request).await
    } else {
        error_response(
            ErrorCode::Unauthorized,
            format!("the internal API needs the cluster secret in {SECRET_HEADER}"),
        )
    }
}

/// The query of a Raft message: the replica it is for (see [`cairn_consensus::Addressee`]).
/// Both ends use it: [`PeerClient`] writes it (nothing when `None`), [`raft_message`] reads it.
#[derive(serde::Serialize, serde::Deserialize)]
struct RaftQuery {
    replica: Option<u64>,
}

async fn raft_message(
    AxState(state): AxState<Arc<Internal>>,
    Path((group, rpc)): Path<(String, String)>,
    query: Result<Query<RaftQuery>, QueryRejection>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (group, rpc) = match (group.parse::<GroupId>(), rpc.parse::<Rpc>()) {
        (Ok(group), Ok(rpc)) => (group, rpc),
        (Err(problem), _) | (_, Err(problem)) => {
            return error_response(ErrorCode::InvalidRequest, problem)
        }
    };
    let replica = match query {
        Ok(Query(query)) => query.replica,
        Err(problem) => return error_response(ErrorCode::InvalidRequest, problem.body_text()),
    };
    match state.groups.handle(group, replica, rpc, &body).await {
        Ok(answer) => (
            StatusCode::OK,
            [(axum::http::header::CONTENT_TYPE, "application/octet-stream")],
            answer,
        )
            .into_response(),
        Err(error @ (HandleError::UnknownGroup(_) | HandleError::OtherReplica { .. })) => {
            let from = headers
                .get(NODE_HEADER)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("?");
            tracing::debug!(%from, %error, "a message for a group or replica not hosted here");
            error_response(ErrorCode::NotFound, error.to_string())
        }
        Err(error @ HandleError::BadMessage { .. }) => {
            error_response(ErrorCode::InvalidRequest, error.to_string())
        }
    }
}

/// `POST /internal/join`: a node asks to join the cluster (`cluster.join`). Answers every
/// node's internal address, for the newcomer's address book.
async fn join(AxState(state): AxState<Arc<Internal>>, body: Bytes) -> Response {
    let started = std::time::Instant::now();
    let request: JoinRequest = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(e) => {
            return error_response(ErrorCode::InvalidRequest, format!("join: {e}"));
        }
    };
    match state
        .node
        .admit(request.node_id, request.internal_uri, request.api_uri)
        .await
    {
        Ok(addresses) => super::ok(addresses, started).into_response(),
        Err(error) => error.into_response(),
    }
}

/// Joins the cluster through the node at `url` (`cluster.join`), in the background, retrying
/// until a member admits this node; then the metadata group's leader adds it as a member and
/// it receives the metadata. A node that is a member already (a restart) skips it.
pub fn spawn_join(peers: Arc<PeerClient>, node: Arc<Node>, url: String, api_uri: String) {
    tokio::spawn(async move {
        let request = JoinRequest {
            node_id: node.id(),
            internal_uri: node.internal_uri().to_owned(),
            api_uri,
        };
        while !node.is_member() {
            match peers.join(&url, &request).await {
                Ok(addresses) => {
                    tracing::info!(via = url, "admitted into the cluster");
                    peers.learn(&addresses);
                    return;
                }
                Err(e) => {
                    tracing::warn!(via = url, error = %e, "cannot join the cluster yet; retrying");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    });
}

/// `?floor=N` of a partition call: serve it only once the replica has applied the
/// partition's log up to position N.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct CallQuery {
    #[serde(default)]
    floor: u64,
}

/// A call for a partition replica on this node, from a node without one (`node::remote`).
/// Answered in the public API's envelope, so a refusal keeps its code. A replica still behind
/// the call's floor after a short wait answers 503, and the caller asks another.
async fn partition_call(
    AxState(state): AxState<Arc<Internal>>,
    Path(group): Path<String>,
    axum::extract::Query(CallQuery { floor }): axum::extract::Query<CallQuery>,
    body: Bytes,
) -> Response {
    let group = match group.parse::<GroupId>() {
        Ok(group) => group,
        Err(problem) => return error_response(ErrorCode::InvalidRequest, problem),
    };
    let call: PartitionCall = match internal::decode(&body) {
        Ok(call) => call,
        Err(e) => {
            return error_response(
                ErrorCode::InvalidRequest,
                format!("a partition call that does not parse: {e}"),
            )
        }
    };
    // A replica missing here is this node's state (not yet opened, or dropped), not the
    // request's fault: 503, and the caller tries another replica.
    let Some(replica) = state.node.replica(group) else {
        return ServerError::Unavailable(format!("no replica of {group} on this node"))
            .into_response();
    };
    if state.faults.enabled {
        let delay = state
            .faults
            .delay_ms
            .load(std::sync::atomic::Ordering::Relaxed);
        if delay > 0 {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
    }
    // Reads go where the public API's searches go ([`super::searchers`]): a short one on this
    // worker while the node is quiet, a long one to the search threads, one that may wait for
    // this replica to catch up to a floor under `block_in_place`; writes, which wait for the
    // group and the index, to the blocking pool.
    let work = if floor > 0 {
        Work::MayWait
    } else if matches!(&call, PartitionCall::Query { plan } if replica.is_short(plan)) {
        Work::Short
    } else {
        Work::Long
    };
    let read = call.is_latency_sensitive();
    let serve = move || serve_call(replica.at_least(floor)?.as_ref(), call);
    let answer = if read {
        state.searchers.run(work, serve).await
    } else {
        super::blocking(serve).await
    };
    match answer {
        Ok(answer) => encoded(answer),
        Err(error) => error.into_response(),
    }
}

/// A successful internal answer: its MessagePack bytes.
fn encoded(answer: Vec<u8>) -> Response {
    (
        StatusCode::OK,
        [(axum::http::header::CONTENT_TYPE, WIRE_CONTENT_TYPE)],
        answer,
    )
        .into_response()
}

/// A write to a partitioned collection this node writes, from a node that does not
/// (`Collection::write_here`). Answers once the write is searchable on this node's replicas.
async fn collection_write(
    AxState(state): AxState<Arc<Internal>>,
    Path(name): Path<String>,
    body: Bytes,
) -> Response {
    let write: CollectionWrite = match internal::decode(&body) {
        Ok(write) => write,
        Err(e) => {
            return error_response(
                ErrorCode::InvalidRequest,
                format!("a collection write that does not parse: {e}"),
            )
        }
    };
    let Some(catalog) = state.catalog.get().cloned() else {
        return ServerError::Unavailable("this node is still loading its collections".into())
            .into_response();
    };
    let answer = async {
        // The sender has it open, so the metadata holds it: this node opens it on its next
        // pass over the metadata (a write right after the create), and the sender retries.
        let collection = catalog.get(&name).map_err(|_| {
            ServerError::Unavailable(format!("collection `{name}` is not open here yet"))
        })?;
        let c = collection.clone();
        let ticket = super::blocking(move || c.write_here(write)).await?;
        collection.wait_applied(&ticket).await?;
        encode(&Collection::receipt(&ticket))
    };
    match answer.await {
        Ok(receipt) => encoded(receipt),
        Err(error) => error.into_response(),
    }
}

/// This node's client of its peers' internal APIs.
pub struct PeerClient {
    http: reqwest::Client,
    /// Internal URL of every peer, by node id: `cluster.peers`, then what the metadata records
    /// (nodes that joined), learned as it is applied (`roles::sync`).
    peers: parking_lot::RwLock<BTreeMap<u64, String>>,
    secret: String,
    from: String,
    faults: Arc<Faults>,
    /// When each peer last answered a message (any answer: a refusal is an answer too).
    heard: parking_lot::RwLock<BTreeMap<u64, std::time::Instant>>,
    /// Partition calls and forwarded writes in flight, per peer (`cluster.max_calls_per_peer`).
    in_flight: parking_lot::Mutex<BTreeMap<u64, Arc<tokio::sync::Semaphore>>>,
    max_calls_per_peer: usize,
    /// How long a read a query waits on may take, attempts and hedges included
    /// (`cluster.request_timeout_ms`).
    read_deadline: Duration,
}

impl PeerClient {
    /// A client for the peers of `cluster.peers`, presenting `cluster.secret`.
    pub fn new(cluster: &ClusterConfig, faults: Arc<Faults>) -> Result<Self, ServerError> {
        let peers = cluster
            .peer_list()
            .map_err(ServerError::InvalidRequest)?
            .into_iter()
            .collect();
        let mut http = reqwest::Client::builder().connect_timeout(CONNECT_TIMEOUT);
        if !cluster.internal_tls_ca_file.is_empty() {
            let path = &cluster.internal_tls_ca_file;
            let pem = fs_err::read(path).map_err(|e| ServerError::InvalidRequest(e.to_string()))?;
            let roots = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| {
                ServerError::InvalidRequest(format!("cluster.internal_tls_ca_file {path}: {e}"))
            })?;
            if roots.is_empty() {
                return Err(ServerError::InvalidRequest(format!(
                    "cluster.internal_tls_ca_file {path} holds no certificate"
                )));
            }
            // Only the cluster's own roots: a peer's certificate from any public CA is not
            // a peer.
            http = http.tls_built_in_root_certs(false);
            for root in roots {
                http = http.add_root_certificate(root);
            }
        }
        if cluster.internal_tls() {
            // Never the secret in the clear to a peer that was listed as http:// by mistake.
            http = http.https_only(true);
        }
        let http = http
            .build()
            .map_err(|e| ServerError::Internal(format!("http client: {e}")))?;
        Ok(Self {
            http,
            peers: parking_lot::RwLock::new(peers),
            secret: cluster.secret.expose().to_owned(),
            from: cluster.node_id.to_string(),
            faults,
            heard: Default::default(),
            in_flight: Default::default(),
            max_calls_per_peer: cluster.max_calls_per_peer,
            read_deadline: Duration::from_millis(cluster.request_timeout_ms),
        })
    }
}

impl PeerClient {
    /// Adds or updates peers' internal addresses.
    pub fn learn(&self, addresses: &BTreeMap<u64, String>) {
        let mut peers = self.peers.write();
        for (id, uri) in addresses {
            if peers.get(id) != Some(uri) {
                tracing::info!(node = id, uri, "peer address learned");
                peers.insert(*id, uri.clone());
            }
        }
    }

    fn address(&self, node: u64) -> Option<String> {
        self.peers.read().get(&node).cloned()
    }

    /// Asks the node at `url` to admit this one; answers every node's internal address.
    pub async fn join(
        &self,
        url: &str,
        request: &JoinRequest,
    ) -> Result<BTreeMap<u64, String>, ServerError> {
        let unavailable = |e: reqwest::Error| ServerError::Unavailable(format!("{url}: {e}"));
        let answer = self
            .http
            .post(format!("{}/internal/join", url.trim_end_matches('/')))
            .header(SECRET_HEADER, &self.secret)
            .header(NODE_HEADER, &self.from)
            .timeout(PARTITION_CALL_TIMEOUT)
            .json(request)
            .send()
            .await
            .map_err(unavailable)?;
        let status = answer.status();
        let mut body: serde_json::Value = answer.json().await.map_err(unavailable)?;
        if !status.is_success() {
            return Err(ServerError::Unavailable(format!(
                "{url} refused to admit this node: {status} {}",
                body["status"]["error"]
            )));
        }
        serde_json::from_value(body["result"].take())
            .map_err(|e| ServerError::Internal(format!("{url} answered a join with {e}")))
    }
}

impl Transport for PeerClient {
    async fn call(
        &self,
        to: Addressee,
        rpc: Rpc,
        body: Vec<u8>,
        timeout: Duration,
    ) -> Result<Vec<u8>, TransportError> {
        let Addressee {
            node,
            group,
            replica,
        } = to;
        if self.faults.is_cut(node) {
            return Err(TransportError::Unreachable {
                node,
                reason: "link cut (fault injection)".into(),
            });
        }
        let base = self.address(node).ok_or(TransportError::Unreachable {
            node,
            reason: "no address known for this node".into(),
        })?;
        let answer = self
            .http
            .post(format!("{base}/internal/raft/{group}/{}", rpc.name()))
            .query(&RaftQuery { replica })
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
        self.heard.write().insert(node, std::time::Instant::now());
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

impl crate::node::rebalance::Liveness for PeerClient {
    fn silent_for(&self, node: u64) -> Option<Duration> {
        self.heard
            .read()
            .get(&node)
            .map(std::time::Instant::elapsed)
    }
}

/// Longest wait for a partition call on another node: a write waits for its group (an
/// election included) and for the index there.
const PARTITION_CALL_TIMEOUT: Duration = Duration::from_secs(30);

impl PeerClient {
    /// Posts `body`, encoded for the wire, to `path` on node `node`'s internal API; the
    /// answer's bytes. A node's own trouble (unreachable, overloaded, no replica, a failure)
    /// is `Unavailable`, so the caller may ask another; any other refusal is the request's,
    /// as every node would say.
    async fn post<B: serde::Serialize + ?Sized>(
        &self,
        node: u64,
        path: &str,
        body: &B,
    ) -> Result<Vec<u8>, ServerError> {
        if self.faults.is_cut(node) {
            return Err(ServerError::Unavailable(format!(
                "node {node}: link cut (fault injection)"
            )));
        }
        let slots = self
            .in_flight
            .lock()
            .entry(node)
            .or_insert_with(|| Arc::new(tokio::sync::Semaphore::new(self.max_calls_per_peer)))
            .clone();
        // Refused at once rather than queued: a queue would only hide the overload, and the
        // caller can try another replica's node.
        let Ok(_slot) = slots.try_acquire() else {
            return Err(ServerError::Overloaded(format!(
                "node {node} already has {} calls in flight from this node \
                 (cluster.max_calls_per_peer); retry later",
                self.max_calls_per_peer
            )));
        };
        let base = self
            .address(node)
            .ok_or_else(|| ServerError::Unavailable(format!("no address known for node {node}")))?;
        let unavailable = |e: reqwest::Error| ServerError::Unavailable(format!("node {node}: {e}"));
        let body = internal::encode(body).map_err(|e| ServerError::Internal(e.to_string()))?;
        let answer = self
            .http
            .post(format!("{base}{path}"))
            .header(SECRET_HEADER, &self.secret)
            .header(NODE_HEADER, &self.from)
            .header(reqwest::header::CONTENT_TYPE, WIRE_CONTENT_TYPE)
            .timeout(PARTITION_CALL_TIMEOUT)
            .body(body)
            .send()
            .await
            .map_err(unavailable)?;
        let status = answer.status();
        let bytes = answer.bytes().await.map_err(unavailable)?;
        if status.is_success() {
            return Ok(bytes.to_vec());
        }
        let body: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
        let code = serde_json::from_value::<ErrorCode>(body["status"]["code"].clone())
            .unwrap_or(ErrorCode::Internal);
        let message = body["status"]["error"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        // A write that committed but is under-replicated is known to be applied: asking
        // another replica's node would only write it again.
        if code != ErrorCode::UnderReplicated
            && (status.is_server_error()
                || matches!(code, ErrorCode::RateLimited | ErrorCode::Unavailable))
        {
            Err(ServerError::Unavailable(format!("node {node}: {message}")))
        } else {
            Err(ServerError::Relayed { code, message })
        }
    }
}

impl PartitionCalls for PeerClient {
    fn call<'a>(
        &'a self,
        node: u64,
        group: GroupId,
        floor: u64,
        call: &'a PartitionCall,
    ) -> Pin<Box<dyn Future<Output = Result<Vec<u8>, ServerError>> + Send + 'a>> {
        Box::pin(async move {
            let path = if floor == 0 {
                format!("/internal/partition/{group}")
            } else {
                format!("/internal/partition/{group}?floor={floor}")
            };
            self.post(node, &path, call).await
        })
    }

    fn write<'a>(
        &'a self,
        node: u64,
        collection: &'a str,
        write: &'a CollectionWrite,
    ) -> Pin<Box<dyn Future<Output = Result<WriteReceipt, ServerError>> + Send + 'a>> {
        Box::pin(async move {
            let answer = self
                .post(
                    node,
                    &format!("/internal/collection/{collection}/write"),
                    write,
                )
                .await?;
            internal::decode(&answer)
                .map_err(|e| ServerError::Internal(format!("node {node}'s answer to a write {e}")))
        })
    }

    fn read_deadline(&self) -> Duration {
        self.read_deadline
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
