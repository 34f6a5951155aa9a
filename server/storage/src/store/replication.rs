//! A replica's replicated log, kept in the partition's own database.
//!
//! In a cluster a partition's writes arrive as entries of a consensus log. Keeping that log in
//! two more families of the same RocksDB, rather than in a database of its own, means one WAL:
//! the fsync that makes appended entries durable also covers every earlier (unsynced) batch that
//! applied entries to the state families, so applying needs no fsync of its own.
//!
//! | family      | key                     | value                                   |
//! |-------------|-------------------------|-----------------------------------------|
//! | `log`       | log index, u64 BE       | one entry, encoded by the caller        |
//! | `log_state` | UTF-8 name              | small records: vote, committed, purged  |
//!
//! This crate stores bytes; the consensus layer (`cairn-consensus`) owns their encoding, so
//! nothing here names the consensus library.

use rocksdb::{Direction, IteratorMode, WriteBatch, WriteOptions};

use super::PartitionStore;
use crate::Result;

pub(super) const CF_LOG: &str = "log";
pub(super) const CF_LOG_STATE: &str = "log_state";
/// The families a replicated partition adds.
pub(super) const FAMILIES: [&str; 2] = [CF_LOG, CF_LOG_STATE];

impl PartitionStore {
    fn synced() -> WriteOptions {
        let mut options = WriteOptions::default();
        options.set_sync(true);
        options
    }

    fn log_cf(&self, name: &str) -> Result<&rocksdb::ColumnFamily> {
        self.db.cf_handle(name).ok_or_else(|| {
            self.corrupt(format!(
                "family `{name}` is missing: the partition was not opened as a replica"
            ))
        })
    }

    /// Appends `(index, entry)` pairs to the log in one synced batch. Entries at those indexes
    /// are replaced (a new leader's entries overwrite a follower's unacknowledged ones).
    pub fn log_append(&self, entries: &[(u64, Vec<u8>)]) -> Result<()> {
        let cf = self.log_cf(CF_LOG)?;
        let mut batch = WriteBatch::default();
        for (index, entry) in entries {
            batch.put_cf(cf, index.to_be_bytes(), entry);
        }
        self.db
            .write_opt(batch, &Self::synced())
            .map_err(|e| self.rocks(e))
    }

    /// Entries with `start <= index < end`, in order.
    pub fn log_range(&self, start: u64, end: u64) -> Result<Vec<(u64, Vec<u8>)>> {
        let cf = self.log_cf(CF_LOG)?;
        let from = start.to_be_bytes();
        let mut out = Vec::new();
        for item in self
            .db
            .iterator_cf(cf, IteratorMode::From(&from, Direction::Forward))
        {
            let (key, value) = item.map_err(|e| self.rocks(e))?;
            let index = self.log_index(&key)?;
            if index >= end {
                break;
            }
            out.push((index, value.to_vec()));
        }
        Ok(out)
    }

    /// The last entry of the log, if it holds any.
    pub fn log_last(&self) -> Result<Option<(u64, Vec<u8>)>> {
        let cf = self.log_cf(CF_LOG)?;
        match self.db.iterator_cf(cf, IteratorMode::End).next() {
            None => Ok(None),
            Some(item) => {
                let (key, value) = item.map_err(|e| self.rocks(e))?;
                Ok(Some((self.log_index(&key)?, value.to_vec())))
            }
        }
    }

    /// Removes the entries at `index` and after (a follower's entries that a new leader
    /// overrides), durably.
    pub fn log_truncate_from(&self, index: u64) -> Result<()> {
        let cf = self.log_cf(CF_LOG)?;
        let mut batch = WriteBatch::default();
        batch.delete_range_cf(cf, index.to_be_bytes(), u64::MAX.to_be_bytes());
        batch.delete_cf(cf, u64::MAX.to_be_bytes());
        self.db
            .write_opt(batch, &Self::synced())
            .map_err(|e| self.rocks(e))
    }

    /// Removes the entries at `index` and before, and records `(name, value)` (what was purged)
    /// in the same synced batch, so the record and the log never disagree.
    pub fn log_purge_through(&self, index: u64, record: (&str, &[u8])) -> Result<()> {
        let cf = self.log_cf(CF_LOG)?;
        let mut batch = WriteBatch::default();
        batch.put_cf(self.log_cf(CF_LOG_STATE)?, record.0.as_bytes(), record.1);
        batch.delete_range_cf(
            cf,
            0u64.to_be_bytes(),
            index.saturating_add(1).to_be_bytes(),
        );
        if index == u64::MAX {
            batch.delete_cf(cf, u64::MAX.to_be_bytes());
        }
        self.db
            .write_opt(batch, &Self::synced())
            .map_err(|e| self.rocks(e))
    }

    /// A small record of the log's own (vote, committed, purged).
    pub fn log_record(&self, name: &str) -> Result<Option<Vec<u8>>> {
        self.db
            .get_cf(self.log_cf(CF_LOG_STATE)?, name.as_bytes())
            .map_err(|e| self.rocks(e))
    }

    /// Stores a record of the log's own durably (`Some`) or removes it (`None`).
    pub fn put_log_record(&self, name: &str, value: Option<&[u8]>) -> Result<()> {
        let cf = self.log_cf(CF_LOG_STATE)?;
        let mut batch = WriteBatch::default();
        match value {
            Some(value) => batch.put_cf(cf, name.as_bytes(), value),
            None => batch.delete_cf(cf, name.as_bytes()),
        }
        self.db
            .write_opt(batch, &Self::synced())
            .map_err(|e| self.rocks(e))
    }

    fn log_index(&self, key: &[u8]) -> Result<u64> {
        let array: [u8; 8] = key
            .try_into()
            .map_err(|_| self.corrupt("log key is not 8 bytes".into()))?;
        Ok(u64::from_be_bytes(array))
    }
}
