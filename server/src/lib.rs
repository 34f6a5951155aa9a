//! cairn-server: the `cairn` binary's library — configuration, the REST API, collections and
//! their durability, the peer cluster, and the roles a process can run.
//!
//! Layering, imports pointing one way (checked by `tests/layering.rs`):
//!
//! ```text
//!   roles ──▶ http ──▶ catalog ──▶ collection ──▶ PartitionHandle ──▶ partition
//!               │         │            ▲      (the seam)
//!               │         └──▶ snapshots (files of a collection's moment, read by recovery)
//!               └──▶ node ─────────────┘  implements the seam for replicated partitions
//!   request (the request vocabulary), config and error sit below them all.
//! ```
//!
//! Only `http` names HTTP types (axum for the API, reqwest for the internal wire's client);
//! nothing in `cairn-index` knows about RocksDB or tokio.

pub mod catalog;
pub mod collection;
pub mod config;
pub mod error;
pub mod http;
pub mod node;
pub mod partition;
pub mod request;
pub mod roles;
pub mod snapshots;
