//! openraft's log storage over the partition's `log` families (`cairn-storage`).
//!
//! Records kept beside the entries (in `log_state`): `vote` (synced on every change, as Raft
//! requires) and `purged` (the last log id removed, written in the same batch as the removal).
//! `committed` is not kept: the state machine's applied id is stored atomically with the state
//! it describes, so after a restart a replica re-learns the commit point from the leader and
//! never serves state the log does not back; saving it would cost one more fsync per commit.

use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use cairn_storage::PartitionStore;
use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{Entry, ErrorSubject, ErrorVerb, LogId, RaftLogId, RaftLogReader, Vote};

use crate::error::{blocking, decode, encode, RaftResult};
use crate::{PartTypes, ReplicaId};

const VOTE: &str = "vote";
const PURGED: &str = "purged";

/// A replica's Raft log: cheap to clone (every clone reads and writes the same store).
#[derive(Clone)]
pub struct LogStore {
    store: Arc<PartitionStore>,
}

impl LogStore {
    /// The log of the partition whose store is `store` (opened with `replicated`).
    pub fn new(store: Arc<PartitionStore>) -> Self {
        Self { store }
    }

    async fn record<T: serde::de::DeserializeOwned>(
        &self,
        name: &'static str,
        subject: ErrorSubject<ReplicaId>,
    ) -> RaftResult<Option<T>> {
        let store = self.store.clone();
        let bytes = blocking(subject.clone(), ErrorVerb::Read, move || {
            store.log_record(name)
        })
        .await?;
        bytes.map(|b| decode(subject, &b)).transpose()
    }
}

impl RaftLogReader<PartTypes> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> RaftResult<Vec<Entry<PartTypes>>> {
        let start = match range.start_bound() {
            Bound::Included(i) => *i,
            Bound::Excluded(i) => i.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(i) => i.saturating_add(1),
            Bound::Excluded(i) => *i,
            Bound::Unbounded => u64::MAX,
        };
        let store = self.store.clone();
        let raw = blocking(ErrorSubject::Logs, ErrorVerb::Read, move || {
            store.log_range(start, end)
        })
        .await?;
        raw.iter()
            .map(|(index, bytes)| decode(ErrorSubject::LogIndex(*index), bytes))
            .collect()
    }
}

impl RaftLogStorage<PartTypes> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> RaftResult<LogState<PartTypes>> {
        let last_purged_log_id: Option<LogId<ReplicaId>> =
            self.record(PURGED, ErrorSubject::Logs).await?;
        let store = self.store.clone();
        let last = blocking(ErrorSubject::Logs, ErrorVerb::Read, move || {
            store.log_last()
        })
        .await?;
        let last_log_id = match last {
            Some((index, bytes)) => {
                let entry: Entry<PartTypes> = decode(ErrorSubject::LogIndex(index), &bytes)?;
                Some(*entry.get_log_id())
            }
            None => last_purged_log_id,
        };
        Ok(LogState {
            last_purged_log_id,
            last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<ReplicaId>) -> RaftResult<()> {
        let store = self.store.clone();
        let bytes = encode(vote);
        blocking(ErrorSubject::Vote, ErrorVerb::Write, move || {
            store.put_log_record(VOTE, Some(&bytes))
        })
        .await
    }

    async fn read_vote(&mut self) -> RaftResult<Option<Vote<ReplicaId>>> {
        self.record(VOTE, ErrorSubject::Vote).await
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<PartTypes>) -> RaftResult<()>
    where
        I: IntoIterator<Item = Entry<PartTypes>> + Send,
        I::IntoIter: Send,
    {
        let encoded: Vec<(u64, Vec<u8>)> = entries
            .into_iter()
            .map(|entry| (entry.get_log_id().index, encode(&entry)))
            .collect();
        let store = self.store.clone();
        // The append is synced before the callback: openraft counts this replica towards a
        // quorum only once the entries would survive a crash.
        let result = blocking(ErrorSubject::Logs, ErrorVerb::Write, move || {
            store.log_append(&encoded)
        })
        .await;
        match &result {
            Ok(()) => callback.log_io_completed(Ok(())),
            Err(error) => callback.log_io_completed(Err(std::io::Error::other(error.to_string()))),
        }
        result
    }

    async fn truncate(&mut self, log_id: LogId<ReplicaId>) -> RaftResult<()> {
        let store = self.store.clone();
        blocking(ErrorSubject::Logs, ErrorVerb::Delete, move || {
            store.log_truncate_from(log_id.index)
        })
        .await
    }

    async fn purge(&mut self, log_id: LogId<ReplicaId>) -> RaftResult<()> {
        let store = self.store.clone();
        let record = encode(&log_id);
        blocking(ErrorSubject::Logs, ErrorVerb::Delete, move || {
            store.log_purge_through(log_id.index, (PURGED, &record))
        })
        .await
    }
}
