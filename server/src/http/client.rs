//! The client side of the internal wire over HTTP: how a router reaches its shard nodes
//! (`cluster::transport::Transport`). One JSON call per partition operation, posted to
//! `/internal/partitions/{name}`, and answered in the public API's envelope (the shard's
//! side is `internal.rs`).

use std::time::Duration;

use cairn_api::internal::PartitionCall;
use cairn_api::ErrorCode;
use reqwest::blocking::Client;
use reqwest::{Method, StatusCode};

use crate::cluster::transport::{CallError, Transport};
use crate::error::ServerError;
use crate::request::CollectionSettings;

/// Longest wait for a TCP connection to a node.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
/// Longest wait for a readiness probe.
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);

/// Blocking HTTP client for partition calls (used from blocking threads only).
pub struct HttpTransport {
    http: Client,
    /// Timeout of writes, bulk reads and partition creation (work that is slow by nature).
    slow_timeout: Duration,
}

impl HttpTransport {
    /// A client whose latency-sensitive calls time out after `request_timeout`, and the
    /// others after `slow_timeout`.
    pub fn new(request_timeout: Duration, slow_timeout: Duration) -> Result<Self, ServerError> {
        let http = Client::builder()
            .timeout(request_timeout)
            .connect_timeout(CONNECT_TIMEOUT)
            .build()
            .map_err(|e| ServerError::Internal(format!("http client: {e}")))?;
        Ok(Self { http, slow_timeout })
    }

    /// Creates (`PUT`) or drops (`DELETE`) a partition on a node. `missing_ok`: a 404 counts
    /// as done (dropping what is not there); creating on a node that answers 404 is not.
    fn admin(
        &self,
        node: &str,
        method: Method,
        partition: &str,
        body: Option<&CollectionSettings>,
        missing_ok: bool,
    ) -> Result<(), ServerError> {
        let url = format!("{node}/internal/partitions/{partition}");
        let mut request = self.http.request(method, &url).timeout(self.slow_timeout);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request
            .send()
            .map_err(|e| ServerError::Unavailable(format!("{url}: {e}")))?;
        let status = response.status();
        if status.is_success() || (missing_ok && status == StatusCode::NOT_FOUND) {
            Ok(())
        } else {
            Err(ServerError::Unavailable(format!(
                "{url}: {status} {}",
                response.text().unwrap_or_default()
            )))
        }
    }
}

impl Transport for HttpTransport {
    fn call(
        &self,
        node: &str,
        partition: &str,
        call: &PartitionCall,
    ) -> Result<serde_json::Value, CallError> {
        let url = format!("{node}/internal/partitions/{partition}");
        let mut request = self.http.post(&url).json(call);
        if !call.is_latency_sensitive() {
            request = request.timeout(self.slow_timeout);
        }
        let response = request
            .send()
            .map_err(|e| CallError::Replica(format!("{url}: {e}")))?;
        let status = response.status();
        let mut body: serde_json::Value = response
            .json()
            .map_err(|e| CallError::Replica(format!("{url}: unreadable answer: {e}")))?;
        if status.is_success() {
            return Ok(body["result"].take());
        }
        // The node's own limits (body size, rate) and failures are the node's fault: another
        // replica may take the call. Any other refusal is the request's, and every replica
        // would refuse it alike.
        let code = serde_json::from_value::<ErrorCode>(body["status"]["code"].clone())
            .unwrap_or(ErrorCode::Internal);
        let node_fault = status.is_server_error()
            || matches!(
                code,
                ErrorCode::PayloadTooLarge | ErrorCode::RateLimited | ErrorCode::Unavailable
            );
        if node_fault || !status.is_client_error() {
            return Err(CallError::Replica(format!("{url}: {status} {body}")));
        }
        let message = body["status"]["error"]
            .as_str()
            .unwrap_or("shard refused the request")
            .to_owned();
        Err(CallError::Request(ServerError::Relayed { code, message }))
    }

    fn create(
        &self,
        node: &str,
        partition: &str,
        settings: &CollectionSettings,
    ) -> Result<(), ServerError> {
        self.admin(node, Method::PUT, partition, Some(settings), false)
    }

    fn drop_partition(&self, node: &str, partition: &str) -> Result<(), ServerError> {
        self.admin(node, Method::DELETE, partition, None, true)
    }

    fn is_ready(&self, node: &str) -> bool {
        self.http
            .get(format!("{node}/readyz"))
            .timeout(PROBE_TIMEOUT)
            .send()
            .is_ok_and(|r| r.status().is_success())
    }
}
