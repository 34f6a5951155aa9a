//! cairn-server: the `cairn` binary's library — configuration, the REST API, collections and
//! their durability, and the roles a process can run.
//!
//! Layering: `http` → `catalog` → `collection` → (`cairn-storage`, `cairn-index`). Nothing
//! below `http` knows about HTTP; nothing in `cairn-index` knows about RocksDB or tokio.

pub mod catalog;
pub mod cluster;
pub mod collection;
pub mod config;
pub mod error;
pub mod http;
pub mod partition;
pub mod roles;
