//! A partitioned collection's shared records on a peer node: its routing and moves records
//! in the cluster's metadata (`record/{key}/{name}`), and its one writer (`writer/{name}`).
//!
//! The writer is the metadata group's leader. Raft has already chosen exactly one node there
//! and every node can find it, so there is no second election to run and no lease to time
//! out; the cost is that the writes of every partitioned collection pass through that node.
//! A leader that finds the writer row naming another node, or itself at an epoch it does not
//! hold (it restarted), takes the row over by compare-and-set; the entry's log index is its
//! epoch, which fences every partition write of the writer before it
//! (`cairn_consensus::PartitionCommand::Fenced`). Records are stored only under the epoch
//! that still holds the row, so a replaced writer can no longer move the routing or clear a
//! moves record its successor is finishing.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_api::internal::{CollectionWrite, WriteReceipt};

use super::remote::PartitionCalls;
use super::Node;
use crate::collection::SharedRecords;
use crate::error::{Result, ServerError};

/// How long a write waits for a writer to be found and to answer (an election included)
/// before it fails.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(20);
/// The pause before asking again while the metadata group has no leader, or the node asked
/// no longer writes the collection.
const FORWARD_RETRY: Duration = Duration::from_millis(100);

/// The shared records of collection `name` as node `node` reads and writes them.
pub struct NodeRecords {
    node: Arc<Node>,
    name: String,
    calls: Arc<dyn PartitionCalls>,
    /// The writer epoch this node last took (0: none), under which it stores records.
    epoch: AtomicU64,
}

impl NodeRecords {
    /// The records of collection `name`, written through `node`, forwarded over `calls`.
    pub fn new(node: Arc<Node>, name: &str, calls: Arc<dyn PartitionCalls>) -> Self {
        Self {
            node,
            name: name.to_owned(),
            calls,
            epoch: AtomicU64::new(0),
        }
    }
}

/// Runs the node's async metadata calls from the blocking threads the collection calls on.
fn block_on<T>(work: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Handle::current().block_on(work)
}

impl SharedRecords for NodeRecords {
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        Ok(self.node.record(&self.name, key)?.map(|(_, value)| value))
    }

    fn put(&self, key: &str, value: &[u8]) -> Result<()> {
        let epoch = self.epoch.load(Ordering::Acquire);
        block_on(self.node.put_record(&self.name, key, value, epoch))
    }

    fn stamp(&self, key: &str) -> Result<u64> {
        self.node.record_version(&self.name, key)
    }

    fn writer(&self, known: u64) -> Result<Option<u64>> {
        let epoch = block_on(self.node.claim_writer(&self.name, known))?;
        if let Some(epoch) = epoch {
            self.epoch.store(epoch, Ordering::Release);
        }
        Ok(epoch)
    }

    /// To the metadata leader; while there is none, or the node asked has just stopped
    /// leading, asked again until [`FORWARD_TIMEOUT`]. A write that reached a writer which
    /// then failed may have been made: it is sent again, which is harmless (upserts and
    /// deletes are idempotent).
    fn forward(&self, write: &CollectionWrite) -> Result<WriteReceipt> {
        let deadline = Instant::now() + FORWARD_TIMEOUT;
        loop {
            let attempt = match self.node.meta_leader() {
                Some(leader) => block_on(self.calls.write(leader, &self.name, write)),
                None => Err(ServerError::Unavailable(
                    "the cluster's metadata group has no leader".into(),
                )),
            };
            match attempt {
                Err(ServerError::Unavailable(why)) if Instant::now() < deadline => {
                    tracing::debug!(
                        collection = self.name,
                        why,
                        "no writer answered; asking again"
                    );
                    std::thread::sleep(FORWARD_RETRY);
                }
                Err(ServerError::Unavailable(why)) => {
                    return Err(ServerError::Unavailable(format!(
                        "no node wrote collection `{}` within {} s: {why}",
                        self.name,
                        FORWARD_TIMEOUT.as_secs()
                    )))
                }
                other => return other,
            }
        }
    }
}
