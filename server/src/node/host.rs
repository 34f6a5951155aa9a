//! Where a node keeps collections: nowhere yet. Collections in the peer cluster come with the
//! partitions' Raft groups (`docs/design/consensus.md` §9, step 6); until then a node refuses
//! to create one, with an error that says so, rather than keep it on one node where no other
//! node can serve or replicate it.

use std::path::Path;

use crate::collection::{Opened, PartitionHost};
use crate::error::{Result, ServerError};
use crate::request::CollectionSettings;

/// The host of a node: refuses collections (see the module docs).
pub struct NodeHost;

fn not_yet() -> ServerError {
    ServerError::InvalidRequest(
        "collections are not yet served by `cluster.role = \"node\"` (the peer cluster of issue \
         #22 is being built); use the standalone role, or the router and shard roles for a \
         replicated cluster"
            .into(),
    )
}

impl PartitionHost for NodeHost {
    fn check(&self, _settings: &CollectionSettings) -> Result<()> {
        Err(not_yet())
    }

    fn create(&self, _name: &str, _dir: &Path, _settings: &CollectionSettings) -> Result<()> {
        Err(not_yet())
    }

    fn open(&self, _name: &str, _dir: &Path) -> Result<Opened> {
        Err(not_yet())
    }

    fn release(&self, _name: &str, _settings: &CollectionSettings) {}
}
