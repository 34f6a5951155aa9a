//! cairn-storage: the durable store of one partition, and the only crate that links RocksDB.
//!
//! RocksDB is Cairn's source of truth; in-memory indexes are derived from it and rebuildable.
//! A partition's database has four column families:
//!
//! | family   | key                      | value                                  |
//! |----------|--------------------------|----------------------------------------|
//! | `points` | encoded point id         | version and payload (JSON text)        |
//! | `vectors`| encoded point id         | the vector, f32 little-endian          |
//! | `oplog`  | sequence number, u64 BE  | [`OpLogEntry`] (which ids an op touched) |
//! | `meta`   | UTF-8 name               | small values: collection config, `last_seq` |
//!
//! Every write is one `WriteBatch` holding the point changes, the op-log entry and the new
//! `last_seq`, committed with a synced WAL: when [`PartitionStore::write`] returns, the write
//! survives `kill -9` and power loss, and a crash never leaves half a batch.
//!
//! The op log records *which* points each sequence number touched, not their values: replaying
//! "re-read these ids" against the `points` family converges to the latest state whatever the
//! starting point, which is what index replay after a snapshot and replica catch-up need,
//! without storing every vector twice.
//!
//! Vectors sit apart from payloads so that a restart whose index comes from a snapshot file
//! reads only the small payload records, and fetches vectors just for the ops after the snapshot.
//!
//! A partition that is a replica in a cluster (`StoreOptions::replicated`) adds two families,
//! `log` and `log_state`, holding its replicated log (`store/replication.rs`); its writes are
//! applied from that log with [`PartitionStore::write_many`], unsynced, since the log's own
//! synced appends share the WAL. Its whole state can be exported as table files and swapped in
//! on another replica (`store/transfer.rs`), for replicas the log no longer reaches back to.
//!
//! Keys are opaque bytes; the server owns their encoding (order-preserving, so scans return
//! points in id order).

mod error;
mod store;

pub use error::{Result, StorageError};
pub use store::transfer::{StateExport, StateFile, StateView};
pub use store::{
    MetaRecord, OpKind, OpLogEntry, PartitionStore, StoreOptions, StoredDense, StoredPoint,
    StoredSparse, WriteOp,
};
