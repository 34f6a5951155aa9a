//! Configuration: one tree, loaded in layers, validated once at start-up.
//!
//! Precedence (lowest first): the embedded default (`configs/standalone.toml`, compiled in),
//! a `--config` file, `CAIRN__SECTION__KEY` environment variables, command-line flags.
//! Every struct denies unknown fields, so a misspelt key stops the server instead of being
//! ignored.

use std::net::SocketAddr;
use std::path::PathBuf;

use figment::providers::{Env, Format, Serialized, Toml};
use figment::Figment;
use serde::{Deserialize, Serialize};

/// The embedded default configuration.
pub const DEFAULT_TOML: &str = include_str!("../../configs/standalone.toml");

/// The whole configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// This node.
    pub node: NodeConfig,
    /// The REST API.
    pub http: HttpConfig,
    /// Request limits.
    pub limits: Limits,
    /// Durability and background maintenance.
    pub storage: StorageConfig,
    /// Logging.
    pub log: LogConfig,
    /// The role of this process and, for a node, its cluster.
    pub cluster: ClusterConfig,
}

/// What a `cairn` process runs (`cluster.role`; see `crate::roles`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Every partition of every collection in this process.
    Standalone,
    /// A peer of a Raft-replicated cluster: cluster metadata in a Raft group over every
    /// node's internal port, each partition's replicas a Raft group of their own; every node
    /// serves the whole API.
    Node,
}

impl Role {
    /// The role's name in configuration and logs.
    pub fn name(self) -> &'static str {
        match self {
            Role::Standalone => "standalone",
            Role::Node => "node",
        }
    }
}

/// The role of this process in a cluster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// `standalone` (every partition here, no cluster) or `node` (a peer of a cluster).
    pub role: Role,
    /// Node: milliseconds a read that a query waits on may take, every replica tried and
    /// hedge included, before the query answers without that partition.
    pub request_timeout_ms: u64,
    /// Node, **tests only**: serve `PUT /internal/faults` on the internal port, to cut this
    /// node's links to chosen nodes and slow the partition calls it serves. Off by default;
    /// never turn it on in production.
    pub fault_injection: bool,
    /// Node: this node's id (at least 1), stable for the life of its data directory.
    pub node_id: u64,
    /// Node: every first voter of the cluster's metadata group as `ID=INTERNAL_URL`, this node
    /// included; the same list on every node.
    pub peers: Vec<String>,
    /// Node: listen address of the internal API (Raft messages between nodes), which the
    /// public address never serves.
    pub internal_addr: String,
    /// Node: the secret every node presents to another's internal API (required; the same on
    /// every node). Never logged.
    pub secret: Secret,
    /// Node: create the metadata group with `peers` as its voters if this node's group has
    /// never been initialized. Set it on one node, for the cluster's first start only.
    pub bootstrap: bool,
    /// Node: the internal URL of any node of a running cluster, to join it at this node's
    /// first start (empty: none). `peers` then lists only this node; the cluster learns its
    /// address from the join and makes it a member.
    pub join: String,
    /// Node: the public URL other nodes record for this one (`GET /cluster` shows it); empty
    /// for `http://` and `http.addr`, which is wrong whenever the API listens on `0.0.0.0` or
    /// behind a published port (Docker).
    pub api_url: String,
    /// Node: a Raft group snapshots its state after this many log entries.
    pub snapshot_every_entries: u64,
    /// Node: log entries a group keeps behind its latest snapshot, for replicas that were
    /// briefly away; one further behind receives the snapshot instead.
    pub log_keep_entries: u64,
    /// Node: seconds a node may stay silent (no answer to the metadata leader's messages)
    /// before the rebalancer re-creates its replicas on the other nodes.
    pub dead_after_secs: u64,
    /// Node: partition calls and forwarded writes this node may have in flight to one peer;
    /// one more is refused at once (the read tries another replica, the client gets a 429),
    /// so a slow or overloaded peer cannot pile up work. Raft messages are not counted.
    pub max_calls_per_peer: usize,
    /// Node: PEM certificate chain of this node's internal API: with `internal_tls_key_file`
    /// it speaks HTTPS only, and every peer URL must be `https://` (empty: HTTP).
    pub internal_tls_cert_file: String,
    /// Node: PEM private key of `internal_tls_cert_file`'s certificate.
    pub internal_tls_key_file: String,
    /// Node: PEM certificates trusted for the peers' internal APIs (the cluster's CA, or the
    /// one certificate every node shares); empty: the system's roots.
    pub internal_tls_ca_file: String,
}

impl ClusterConfig {
    /// Whether the internal API speaks HTTPS.
    pub fn internal_tls(&self) -> bool {
        !self.internal_tls_cert_file.is_empty() && !self.internal_tls_key_file.is_empty()
    }

    /// When the node's Raft groups compact their logs.
    pub fn log_policy(&self) -> cairn_consensus::LogPolicy {
        cairn_consensus::LogPolicy {
            snapshot_every: self.snapshot_every_entries,
            keep: self.log_keep_entries,
        }
    }

    /// `peers` as `(id, internal URL)` pairs, or why they do not parse.
    pub fn peer_list(&self) -> Result<Vec<(u64, String)>, String> {
        self.peers
            .iter()
            .map(|peer| {
                let (id, url) = peer
                    .split_once('=')
                    .ok_or_else(|| format!("cluster.peers entry {peer:?} is not ID=URL"))?;
                let id: u64 = id.trim().parse().map_err(|_| {
                    format!("cluster.peers entry {peer:?}: {id:?} is not a node id")
                })?;
                if id == 0 || !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(format!(
                        "cluster.peers entry {peer:?} needs an id of at least 1 and an http(s) URL"
                    ));
                }
                Ok((id, url.trim_end_matches('/').to_owned()))
            })
            .collect()
    }
}

/// A secret from the configuration. Its `Debug` form is `"***"`, so printing the
/// configuration (a log line, an error) never shows it.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// The secret itself, for the one place that presents or compares it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// `***` in its place (empty stays empty), for printing a configuration.
    pub fn masked(&self) -> Self {
        Self(if self.0.is_empty() {
            String::new()
        } else {
            "***".into()
        })
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_empty() { "\"\"" } else { "\"***\"" })
    }
}

/// This node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeConfig {
    /// Folder holding every collection.
    pub data_dir: PathBuf,
    /// Folder of snapshots; empty: `<data_dir>/snapshots` (see [`Self::snapshots`]).
    pub snapshots_dir: PathBuf,
}

impl NodeConfig {
    /// Where snapshots are kept.
    pub fn snapshots(&self) -> PathBuf {
        if self.snapshots_dir.as_os_str().is_empty() {
            self.data_dir.join("snapshots")
        } else {
            self.snapshots_dir.clone()
        }
    }
}

/// The REST API.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpConfig {
    /// Listen address.
    pub addr: String,
    /// Largest request body, in bytes.
    pub max_body_bytes: usize,
    /// File written with the bound address once ready; empty for none.
    pub ready_file: String,
    /// The API key that may read and write (`api-key` header or `Authorization: Bearer`);
    /// empty for none. With either key set, every route but `/healthz` and `/readyz` needs
    /// one. Never logged.
    pub api_key: Secret,
    /// The API key that may only read (gets, scroll, count, queries); empty for none.
    pub read_only_api_key: Secret,
    /// Also accept JWTs signed with `api_key` (HS256) whose `access` claim scopes them to
    /// collections, read or read-write, with an optional expiry (Qdrant's `jwt_rbac`).
    pub jwt_rbac: bool,
    /// Requests per second each key or token may make, in bursts of one second's worth; one
    /// more is a 429 (0: no limit).
    pub rate_limit_per_key: f64,
    /// Requests served at once; more wait in line (`max_queued_requests`).
    pub max_requests_in_flight: usize,
    /// Requests waiting for a turn at most; one more is refused at once with a 429 and
    /// `Retry-After`, before any of its work is done.
    pub max_queued_requests: usize,
    /// Threads that run searches once they overlap (0: one per core the server may use).
    pub search_threads: usize,
    /// CPU priority of the search threads, as `nice` (0–19: higher runs later), so that
    /// reading requests and refusing the excess go first when the CPU is short.
    pub search_nice: i32,
    /// Searches waiting per search thread at most; one more is refused at once with a 429.
    pub search_queue_per_thread: usize,
    /// PEM certificate chain: with `tls_key_file`, the API speaks HTTPS only (empty: HTTP).
    pub tls_cert_file: String,
    /// PEM private key of `tls_cert_file`'s certificate.
    pub tls_key_file: String,
}

/// Documented maxima; requests above them get a 400 naming the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Largest `limit + offset`.
    pub max_limit: usize,
    /// Largest `hnsw_ef`.
    pub max_ef: usize,
    /// Most points per write or get request.
    pub max_points_per_request: usize,
    /// Most queries per batch.
    pub max_batch_queries: usize,
    /// Most results a batch asks for in all: the sum of its queries' `limit + offset`.
    pub max_batch_results: usize,
    /// Deepest nesting of a filter (a filter inside a condition inside a filter…): each level
    /// is a recursion in the parser and the matcher.
    pub max_filter_depth: usize,
    /// Largest dimension.
    pub max_dim: usize,
}

/// Durability and background maintenance.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StorageConfig {
    /// fsync the WAL before acknowledging.
    pub sync_writes: bool,
    /// Snapshot the index after this many applied ops.
    pub snapshot_every_ops: u64,
    /// …or after this many seconds with changes.
    pub snapshot_every_secs: u64,
    /// Op-log entries kept behind the snapshot.
    pub oplog_retention_ops: u64,
    /// Dead-slot share that triggers an index rebuild.
    pub vacuum_dead_ratio: f64,
    /// Minimum dead slots before a rebuild.
    pub vacuum_min_dead: usize,
}

/// Logging.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogConfig {
    /// Default filter directive.
    pub level: String,
    /// `text` or `json`.
    pub format: String,
}

/// Overrides from the command line (highest precedence).
#[derive(Debug, Clone, Default, Serialize)]
pub struct CliOverrides {
    /// `--data-dir`.
    pub data_dir: Option<PathBuf>,
    /// `--http-addr`.
    pub http_addr: Option<String>,
    /// `--ready-file`.
    pub ready_file: Option<PathBuf>,
    /// `--role`.
    pub role: Option<String>,
    /// `--join`: a running cluster's internal URL (`cluster.join`).
    pub join: Option<String>,
}

/// Why a configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A layer did not parse or named an unknown key.
    #[error("invalid configuration: {0}")]
    Parse(String),
    /// Values that parse but make no sense; every problem is listed.
    #[error("invalid configuration: {}", .0.join("; "))]
    Invalid(Vec<String>),
}

impl Config {
    /// Loads the layers described in the module docs, then validates.
    pub fn load(file: Option<&std::path::Path>, cli: &CliOverrides) -> Result<Self, ConfigError> {
        let mut figment = Figment::from(Toml::string(DEFAULT_TOML));
        if let Some(path) = file {
            if !path.is_file() {
                return Err(ConfigError::Parse(format!(
                    "config file {} does not exist",
                    path.display()
                )));
            }
            figment = figment.merge(Toml::file(path));
        }
        figment = figment.merge(Env::prefixed("CAIRN__").split("__"));
        if let Some(dir) = &cli.data_dir {
            figment = figment.merge(Serialized::default("node.data_dir", dir));
        }
        if let Some(addr) = &cli.http_addr {
            figment = figment.merge(Serialized::default("http.addr", addr));
        }
        if let Some(join) = &cli.join {
            figment = figment.merge(Serialized::default("cluster.join", join));
        }
        if let Some(role) = &cli.role {
            figment = figment.merge(Serialized::default("cluster.role", role));
        }
        if let Some(file) = &cli.ready_file {
            figment = figment.merge(Serialized::default("http.ready_file", file));
        }
        let config: Config = figment
            .extract()
            .map_err(|e| ConfigError::Parse(flatten(e)))?;
        config.validate()?;
        Ok(config)
    }

    /// Reports every invalid value at once.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let mut problems = Vec::new();
        if !self.http.api_key.expose().is_empty()
            && self.http.api_key == self.http.read_only_api_key
        {
            problems.push("http.api_key and http.read_only_api_key must differ".into());
        }
        if self.http.tls_cert_file.is_empty() != self.http.tls_key_file.is_empty() {
            problems.push(
                "http.tls_cert_file and http.tls_key_file go together: set both or neither".into(),
            );
        }
        if self.http.jwt_rbac && self.http.api_key.expose().is_empty() {
            problems.push("http.jwt_rbac needs http.api_key: tokens are signed with it".into());
        }
        if self.node.data_dir.as_os_str().is_empty() {
            problems.push("node.data_dir must not be empty".to_owned());
        }
        if self.http.addr.parse::<SocketAddr>().is_err() {
            problems.push(format!(
                "http.addr must be HOST:PORT with an IP host, got {:?}",
                self.http.addr
            ));
        }
        let positive = [
            ("http.max_body_bytes", self.http.max_body_bytes),
            ("limits.max_limit", self.limits.max_limit),
            ("limits.max_ef", self.limits.max_ef),
            (
                "limits.max_points_per_request",
                self.limits.max_points_per_request,
            ),
            ("limits.max_batch_queries", self.limits.max_batch_queries),
            ("limits.max_batch_results", self.limits.max_batch_results),
            ("limits.max_filter_depth", self.limits.max_filter_depth),
            ("limits.max_dim", self.limits.max_dim),
            (
                "http.max_requests_in_flight",
                self.http.max_requests_in_flight,
            ),
            (
                "http.search_queue_per_thread",
                self.http.search_queue_per_thread,
            ),
        ];
        for (name, value) in positive {
            if value == 0 {
                problems.push(format!("{name} must be at least 1"));
            }
        }
        if self.storage.snapshot_every_ops == 0 || self.storage.snapshot_every_secs == 0 {
            problems.push(
                "storage.snapshot_every_ops and snapshot_every_secs must be at least 1".to_owned(),
            );
        }
        if !(self.http.rate_limit_per_key.is_finite() && self.http.rate_limit_per_key >= 0.0) {
            problems.push(format!(
                "http.rate_limit_per_key must be a number of requests per second, 0 or more, got \
                 {}",
                self.http.rate_limit_per_key
            ));
        }
        if !(0..=19).contains(&self.http.search_nice) {
            problems.push(format!(
                "http.search_nice must be within 0..=19, got {}",
                self.http.search_nice
            ));
        }
        if !(0.0..=1.0).contains(&self.storage.vacuum_dead_ratio) {
            problems.push("storage.vacuum_dead_ratio must be within 0..=1".to_owned());
        }
        if !["text", "json"].contains(&self.log.format.as_str()) {
            problems.push(format!(
                "log.format must be \"text\" or \"json\", got {:?}",
                self.log.format
            ));
        }
        if self.cluster.request_timeout_ms == 0 {
            problems.push("cluster.request_timeout_ms must be at least 1".into());
        }
        if self.cluster.role == Role::Node {
            let c = &self.cluster;
            match c.peer_list() {
                Err(problem) => problems.push(problem),
                Ok(peers) if !peers.iter().any(|(id, _)| *id == c.node_id) => problems.push(
                    format!("cluster.node_id {} is not among cluster.peers", c.node_id),
                ),
                Ok(_) => {}
            }
            if c.snapshot_every_entries == 0 {
                problems.push("cluster.snapshot_every_entries must be at least 1".into());
            }
            if c.dead_after_secs == 0 {
                problems.push("cluster.dead_after_secs must be at least 1".into());
            }
            if c.max_calls_per_peer == 0 {
                problems.push("cluster.max_calls_per_peer must be at least 1".into());
            }
            if !(c.api_url.is_empty()
                || c.api_url.starts_with("http://")
                || c.api_url.starts_with("https://"))
            {
                problems.push(format!(
                    "cluster.api_url must be empty or an http(s) URL, got {:?}",
                    c.api_url
                ));
            }
            if !c.join.is_empty() {
                if !(c.join.starts_with("http://") || c.join.starts_with("https://")) {
                    problems.push(format!(
                        "cluster.join must be an http(s) URL, got {:?}",
                        c.join
                    ));
                }
                if c.bootstrap {
                    problems.push(
                        "cluster.join and cluster.bootstrap exclude each other: a node either \
                         starts a cluster or joins one"
                            .into(),
                    );
                }
            }
            if c.secret.expose().is_empty() {
                problems.push("cluster.secret must be set on a node".into());
            }
            if c.internal_addr.parse::<SocketAddr>().is_err() {
                problems.push(format!(
                    "cluster.internal_addr must be HOST:PORT with an IP host, got {:?}",
                    c.internal_addr
                ));
            }
            if c.internal_tls_cert_file.is_empty() != c.internal_tls_key_file.is_empty() {
                problems.push(
                    "cluster.internal_tls_cert_file and cluster.internal_tls_key_file go \
                     together: set both or neither"
                        .into(),
                );
            }
            if c.internal_tls() {
                let plain = c
                    .peers
                    .iter()
                    .chain(std::iter::once(&c.join))
                    .filter(|url| url.contains("http://"))
                    .cloned()
                    .collect::<Vec<_>>();
                if !plain.is_empty() {
                    problems.push(format!(
                        "the internal API speaks HTTPS (cluster.internal_tls_cert_file): peers \
                         and join must be https:// URLs, got {plain:?}"
                    ));
                }
            }
        }
        if self.log.level.is_empty() {
            problems.push("log.level must not be empty".to_owned());
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ConfigError::Invalid(problems))
        }
    }

    /// The listen address (validated in [`Config::validate`]).
    pub fn http_addr(&self) -> SocketAddr {
        self.http
            .addr
            .parse()
            .unwrap_or_else(|_| SocketAddr::from(([127, 0, 0, 1], 6333)))
    }
}

fn flatten(error: figment::Error) -> String {
    error
        .into_iter()
        .map(|e| e.to_string())
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::result_large_err)]
    use super::*;

    #[test]
    fn embedded_default_is_valid_and_standalone() {
        figment::Jail::expect_with(|_| {
            let c = Config::load(None, &CliOverrides::default()).unwrap();
            assert_eq!(c.http.addr, "127.0.0.1:6333");
            assert_eq!(c.node.data_dir, PathBuf::from("./data"));
            Ok(())
        });
    }

    #[test]
    fn layers_apply_in_order() {
        figment::Jail::expect_with(|jail| {
            jail.create_file(
                "c.toml",
                "[http]\naddr = \"127.0.0.1:7000\"\n[limits]\nmax_limit = 5\n",
            )?;
            jail.set_env("CAIRN__LIMITS__MAX_LIMIT", "7");
            jail.set_env("CAIRN__STORAGE__SYNC_WRITES", "false");
            let cli = CliOverrides {
                data_dir: Some("/tmp/x".into()),
                ..Default::default()
            };
            let c = Config::load(Some(std::path::Path::new("c.toml")), &cli).unwrap();
            assert_eq!(c.http.addr, "127.0.0.1:7000");
            assert_eq!(c.limits.max_limit, 7);
            assert!(!c.storage.sync_writes);
            assert_eq!(c.node.data_dir, PathBuf::from("/tmp/x"));
            Ok(())
        });
    }

    #[test]
    fn unknown_keys_are_errors() {
        figment::Jail::expect_with(|jail| {
            jail.create_file("c.toml", "[http]\nadress = \"x\"\n")?;
            let err = Config::load(
                Some(std::path::Path::new("c.toml")),
                &CliOverrides::default(),
            )
            .unwrap_err();
            assert!(err.to_string().contains("adress"), "{err}");
            Ok(())
        });
        figment::Jail::expect_with(|jail| {
            jail.set_env("CAIRN__HTTP__TYPO", "1");
            assert!(Config::load(None, &CliOverrides::default()).is_err());
            Ok(())
        });
    }

    #[test]
    fn a_node_needs_its_id_among_the_peers_a_secret_and_an_internal_address() {
        figment::Jail::expect_with(|jail| {
            jail.set_env("CAIRN__CLUSTER__ROLE", "node");
            jail.set_env("CAIRN__CLUSTER__NODE_ID", "4");
            jail.set_env("CAIRN__CLUSTER__PEERS", "[\"1=http://10.0.0.1:6335\"]");
            jail.set_env("CAIRN__CLUSTER__INTERNAL_ADDR", "nowhere");
            jail.set_env("CAIRN__CLUSTER__API_URL", "node-4:6333");
            let err = Config::load(None, &CliOverrides::default())
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("cluster.api_url must be empty or an http(s) URL"),
                "{err}"
            );
            jail.set_env("CAIRN__CLUSTER__API_URL", "http://node-4:6333");
            assert!(err.contains("node_id 4 is not among"), "{err}");
            assert!(err.contains("cluster.secret"), "{err}");
            assert!(err.contains("cluster.internal_addr"), "{err}");
            jail.set_env("CAIRN__CLUSTER__NODE_ID", "1");
            jail.set_env("CAIRN__CLUSTER__SECRET", "s3cret");
            jail.set_env("CAIRN__CLUSTER__INTERNAL_ADDR", "127.0.0.1:6335");
            let config = Config::load(None, &CliOverrides::default()).unwrap();
            assert!(!format!("{config:?}").contains("s3cret"));
            jail.set_env("CAIRN__CLUSTER__PEERS", "[\"one=http://x\"]");
            let err = Config::load(None, &CliOverrides::default()).unwrap_err();
            assert!(err.to_string().contains("not a node id"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn every_invalid_value_is_reported() {
        figment::Jail::expect_with(|jail| {
            jail.set_env("CAIRN__HTTP__ADDR", "");
            jail.set_env("CAIRN__LIMITS__MAX_EF", "0");
            let err = Config::load(None, &CliOverrides::default())
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("http.addr") && err.contains("limits.max_ef"),
                "{err}"
            );
            Ok(())
        });
    }
}
