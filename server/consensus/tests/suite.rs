//! openraft's own storage test suite, run against the partition's log and state machine on a
//! real RocksDB: vote, log append/read/truncate/purge, applied state, membership, and a
//! snapshot built on one replica and installed on another.

use std::sync::Arc;

use cairn_consensus::{LogStore, PartTypes, ReplicaId, StateMachine};
use cairn_storage::{PartitionStore, StoreOptions};
use openraft::testing::{StoreBuilder, Suite};
use openraft::StorageError;
use tempfile::TempDir;

struct Builder;

impl StoreBuilder<PartTypes, LogStore, StateMachine<()>, TempDir> for Builder {
    async fn build(
        &self,
    ) -> Result<(TempDir, LogStore, StateMachine<()>), StorageError<ReplicaId>> {
        let dir = TempDir::new().expect("a temporary directory");
        let options = StoreOptions {
            replicated: true,
            ..StoreOptions::default()
        };
        let store =
            Arc::new(PartitionStore::open(&dir.path().join("db"), options).expect("a store"));
        let state = StateMachine::open(store.clone(), dir.path(), ()).expect("a state machine");
        Ok((dir, LogStore::new(store), state))
    }
}

#[test]
fn the_partition_store_passes_openrafts_suite() {
    if let Err(error) = Suite::test_all(Builder) {
        panic!("openraft's storage suite failed: {error}");
    }
}
