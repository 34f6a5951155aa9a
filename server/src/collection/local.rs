//! Partitions in this process: [`PartitionHandle`] for [`Partition`], and [`LocalHost`],
//! which keeps a collection's partitions in folders under the collection's own.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cairn_api::internal::{NewPoint, PartitionState, PayloadSelection, ScrollPlan, SearchPlan};
use cairn_api::{Filter, PayloadIndexInfo, PayloadSchemaType, PointId, QueryResponse, Record};
use cairn_index::Trainers;

use super::handle::{HandleFuture, PartitionHandle, ReadTrace};
use super::host::{MetaStore, Opened, PartitionHost};
use crate::config::StorageConfig;
use crate::error::{Result, ServerError};
use crate::partition::export::PartitionFiles;
use crate::partition::Partition;
use crate::request::CollectionSettings;

impl PartitionHandle for Partition {
    /// Built before this returns.
    fn set_payload_index(&self, key: &str, kind: Option<PayloadSchemaType>) -> Result<u64> {
        match kind {
            Some(kind) => self.create_payload_index(key, kind)?,
            None => self.delete_payload_index(key)?,
        }
        Ok(0)
    }

    fn payload_indexes(&self) -> Result<BTreeMap<String, PayloadIndexInfo>> {
        Ok(Partition::payload_indexes(self))
    }

    fn payload_index_type(&self, key: &str) -> Result<Option<PayloadSchemaType>> {
        Ok(Partition::payload_index_type(self, key))
    }

    fn facet(
        &self,
        key: &str,
        filter: Option<&Filter>,
    ) -> Result<Vec<(serde_json::Value, Vec<PointId>)>> {
        self.facet_blocking(key, filter)
    }

    fn upsert(&self, points: Vec<NewPoint>, _fence: u64) -> Result<u64> {
        self.upsert_blocking(points)
    }

    fn delete(&self, ids: Vec<PointId>, _fence: u64) -> Result<u64> {
        self.delete_blocking(ids)
    }

    fn delete_present(&self, ids: &[PointId], _fence: u64) -> Result<Option<u64>> {
        self.delete_present_blocking(ids)
    }

    fn holds(&self, ids: &[PointId]) -> Result<Vec<bool>> {
        Partition::holds(self, ids)
    }

    fn stored(&self, ids: &[PointId]) -> Result<Vec<Option<NewPoint>>> {
        Partition::stored(self, ids)
    }

    fn stored_versions(&self, ids: &[PointId]) -> Result<Vec<Option<(u64, NewPoint)>>> {
        Partition::stored_versions(self, ids)
    }

    fn upsert_if(&self, points: Vec<NewPoint>, expect: Vec<(PointId, u64)>) -> Result<Option<u64>> {
        Partition::upsert_if(self, points, &expect)
    }

    fn stored_ids(&self) -> Result<Vec<PointId>> {
        Partition::stored_ids(self)
    }

    fn sample(&self, n: usize, seed: u64) -> Result<Vec<f32>> {
        Partition::sample(self, n, seed)
    }

    fn last_seq(&self) -> u64 {
        Partition::last_seq(self)
    }

    fn wait_applied_blocking(&self, seq: u64) -> Result<()> {
        Partition::wait_applied_blocking(self, seq)
    }

    fn wait_applied(&self, seq: u64) -> HandleFuture<'_, ()> {
        Box::pin(Partition::wait_applied(self, seq))
    }

    fn state(&self) -> Result<PartitionState> {
        Ok(Partition::state(self))
    }

    /// The one copy holds every acknowledged write: its last one.
    fn read_index(&self) -> Result<u64> {
        Ok(Partition::last_seq(self))
    }

    /// Waits for the index to have applied `floor` (a write answered with `wait=false` is
    /// durable before it is searchable). A floor past the last write is not from this
    /// partition's history.
    fn at_least(self: Arc<Self>, floor: u64) -> Result<Arc<dyn PartitionHandle>> {
        let last = Partition::last_seq(&self);
        if floor > last {
            return Err(ServerError::InvalidRequest(format!(
                "read_after asks for position {floor} of {}, which has written only up to {last}: \
                 the token is from another collection",
                self.name()
            )));
        }
        if floor > 0 {
            Partition::wait_applied_blocking(&self, floor)?;
        }
        Ok(self)
    }

    fn points(&self) -> usize {
        Partition::points(self)
    }

    fn search(
        &self,
        plan: &SearchPlan,
        _hedge: bool,
    ) -> Result<(QueryResponse, Option<ReadTrace>)> {
        Ok((self.query_blocking(plan)?, None))
    }

    fn scroll(&self, plan: &ScrollPlan) -> Result<(Vec<Record>, Option<PointId>)> {
        self.scroll_blocking(plan)
    }

    fn count(&self, filter: Option<&Filter>) -> Result<u64> {
        Ok(self.count_blocking(filter))
    }

    fn matching_ids(&self, filter: Option<&Filter>) -> Result<Vec<PointId>> {
        Ok(Partition::matching_ids(self, filter))
    }

    fn get_points(
        &self,
        ids: &[PointId],
        with_payload: &PayloadSelection,
        with_vector: bool,
    ) -> Result<Vec<Record>> {
        Ok(Partition::get_points(self, ids, with_payload, with_vector))
    }

    fn local(&self) -> Option<&Partition> {
        Some(self)
    }
}

/// Folder of partition `i` inside a collection folder.
pub fn partition_dir(collection_dir: &Path, i: usize) -> PathBuf {
    collection_dir.join("partitions").join(i.to_string())
}

/// Keeps every partition of a collection in this process, in
/// `<collection>/partitions/<i>/`; the routing and moves records live in partition 0.
pub struct LocalHost {
    /// How partitions write.
    pub storage: StorageConfig,
    /// What their indexes train with.
    pub trainers: Trainers,
}

impl PartitionHost for LocalHost {
    fn check(&self, settings: &CollectionSettings) -> Result<()> {
        if settings.replication_factor > 1 {
            return Err(ServerError::InvalidRequest(format!(
                "replication_factor {} is not supported by a standalone server: every partition \
                 has one copy here (replicas need a cluster of peer nodes)",
                settings.replication_factor
            )));
        }
        if settings.write_consistency_factor > 1 {
            return Err(ServerError::InvalidRequest(format!(
                "write_consistency_factor {} is not supported by a standalone server: a write \
                 is acknowledged once its one copy is durable",
                settings.write_consistency_factor
            )));
        }
        Ok(())
    }

    fn create(&self, _name: &str, dir: &Path, settings: &CollectionSettings) -> Result<()> {
        for i in 0..settings.partitions() {
            Partition::initialise(&partition_dir(dir, i), settings, self.storage)?;
        }
        Ok(())
    }

    fn open(&self, name: &str, dir: &Path) -> Result<Opened> {
        let first = Arc::new(Partition::open(
            name,
            &partition_dir(dir, 0),
            self.storage,
            &self.trainers,
        )?);
        let settings = first.settings().clone();
        let mut partitions: Vec<Arc<dyn PartitionHandle>> = vec![first.clone()];
        for i in 1..settings.partitions() {
            let label = format!("{name}/p{i}");
            partitions.push(Arc::new(Partition::open(
                &label,
                &partition_dir(dir, i),
                self.storage,
                &self.trainers,
            )?));
        }
        Ok(Opened {
            settings,
            partitions,
            meta: MetaStore::Partition(first),
        })
    }

    fn restore(&self, dir: &Path, from: &Path, partitions: &[PartitionFiles]) -> Result<()> {
        for (i, files) in partitions.iter().enumerate() {
            Partition::restore(
                &partition_dir(dir, i),
                &from.join(format!("p{i}")),
                files,
                self.storage,
            )?;
        }
        Ok(())
    }

    fn release(&self, _name: &str, _settings: &CollectionSettings) {}
}
