//! What a partition's log holds: one write per entry.

use cairn_storage::{StoredDense, StoredPoint, StoredSparse, WriteOp};
use serde::{Deserialize, Serialize};

/// One write, as an entry of the partition's log. Everything in it is already validated and
/// in stored form (encoded keys, preprocessed vectors, payload JSON text), so applying it is
/// deterministic: every replica derives the same state from the same entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum PartitionCommand {
    /// Insert or replace these points.
    Upsert(Vec<Row>),
    /// Remove these keys (absent keys are fine).
    Delete(Vec<Vec<u8>>),
    /// Insert or replace `rows` only if, when the entry is applied, every key of `expect` is
    /// at the version given (0: absent); otherwise the entry changes nothing and answers
    /// [`Applied::held`] false. Compare-and-set, for rows that more than one node edits (a
    /// partition's placement in the cluster's metadata): an edit made from a stale read is
    /// refused instead of undoing the edit it did not see. Decided at apply time, in log
    /// order, so every replica decides the same.
    UpsertIf {
        /// Each key and the version it must be at.
        expect: Vec<(Vec<u8>, u64)>,
        /// What to write if it is.
        rows: Vec<Row>,
    },
    /// `command`, written only if no entry with a higher `epoch` was applied before it
    /// (otherwise it changes nothing and answers [`Applied::held`] false); an entry with a
    /// higher epoch raises the partition's epoch. The fence of a collection whose writes span
    /// partitions: its writer's epoch is the metadata entry that made it the writer, and a
    /// new writer first writes an empty `Fenced` to every partition, so a writer that was
    /// replaced (paused, cut off) can no longer write after that point in any partition's
    /// log. Decided at apply time, like [`PartitionCommand::UpsertIf`]. (Appended last, so
    /// entries logged before it existed decode unchanged.)
    Fenced {
        /// The writer's epoch.
        epoch: u64,
        /// The write.
        command: Box<PartitionCommand>,
    },
    /// Sets (`value`) or removes (`None`) entry `key` of the string map stored as JSON under
    /// the partition's meta key `name`, in the same batch as the entry's position: state kept
    /// beside the points that every replica must change at the same place in the log (a
    /// payload index, which changes what a text condition matches). Decided at apply time
    /// against the stored map, so concurrent edits of different keys both hold. (Appended
    /// last, like `Fenced`.)
    EditMetaMap {
        /// The meta key the map is stored under.
        name: String,
        /// The map's entry.
        key: String,
        /// Its new value, or `None` to remove it.
        value: Option<String>,
    },
    /// Insert or replace these points, each with every vector it has: the main one, its
    /// sparse vectors and the dense ones beside the main one. The entry every upsert writes
    /// now; [`PartitionCommand::Upsert`], which carries the main vector only, stays for the
    /// entries logged before. (Appended last, like `Fenced`: the log's encoding names
    /// variants by position.)
    UpsertPoints(Vec<PointRow>),
    /// [`PartitionCommand::UpsertPoints`] only if, when the entry is applied, every key of
    /// `expect` is at the version given (0: absent), as [`PartitionCommand::UpsertIf`] decides.
    /// The write of a read-modify-write (a payload update, a vector update) on a partition
    /// that more than one node writes: a change computed from a value another write replaced
    /// meanwhile is refused and made again from the new value, so neither write is lost.
    /// (Appended last, like `Fenced`.)
    UpsertPointsIf {
        /// Each key and the version it must be at.
        expect: Vec<(Vec<u8>, u64)>,
        /// What to write if every one is.
        points: Vec<PointRow>,
    },
}

/// One point of an [`PartitionCommand::UpsertPoints`]: a [`Row`] and the vectors beside its
/// main one, in stored form.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PointRow {
    /// The id, the main vector and the payload.
    pub row: Row,
    /// Sparse vectors by name.
    pub sparse: Vec<StoredSparse>,
    /// Dense vectors beside the main one, by name.
    pub extra: Vec<StoredDense>,
}

/// One point of an upsert.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// The encoded point id.
    pub key: Vec<u8>,
    /// The vector, after the metric's preprocessing.
    pub vector: Vec<f32>,
    /// The payload as JSON text.
    pub payload: Option<String>,
}

/// What applying one entry answers: the log index it was applied at, which is the write's
/// sequence number on every replica (`wait=true` waits for the index to reach it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Applied {
    /// The entry's log index.
    pub index: u64,
    /// Whether the entry was written: false only for an [`PartitionCommand::UpsertIf`] or
    /// [`PartitionCommand::UpsertPointsIf`] whose condition did not hold, or a
    /// [`PartitionCommand::Fenced`] below the partition's epoch. A retried attempt whose first
    /// answer was lost may find its own earlier write and answer false; a caller re-reads and
    /// decides again.
    pub held: bool,
}

impl PartitionCommand {
    /// An empty write at `epoch`: raises the partition's epoch and nothing else.
    pub fn fence(epoch: u64) -> Self {
        Self::Fenced {
            epoch,
            command: Box::new(Self::Upsert(Vec::new())),
        }
    }

    /// `self` under the writer epoch `epoch` (0: unfenced, `self` as it is).
    pub fn fenced(self, epoch: u64) -> Self {
        if epoch == 0 {
            self
        } else {
            Self::Fenced {
                epoch,
                command: Box::new(self),
            }
        }
    }

    /// The write itself, without its fence.
    pub fn unfenced(&self) -> &Self {
        match self {
            Self::Fenced { command, .. } => command.unfenced(),
            Self::Upsert(_)
            | Self::UpsertPoints(_)
            | Self::Delete(_)
            | Self::UpsertIf { .. }
            | Self::UpsertPointsIf { .. }
            | Self::EditMetaMap { .. } => self,
        }
    }

    /// The storage batch that applies this entry at `index` (points take the index as their
    /// version).
    pub(crate) fn to_write_op(&self, index: u64) -> WriteOp {
        match self {
            PartitionCommand::Upsert(rows) | PartitionCommand::UpsertIf { rows, .. } => {
                WriteOp::Upsert(
                    rows.iter()
                        .map(|row| {
                            (
                                row.key.clone(),
                                StoredPoint {
                                    version: index,
                                    vector: row.vector.clone(),
                                    payload: row.payload.clone(),
                                    sparse: Vec::new(),
                                    extra: Vec::new(),
                                },
                            )
                        })
                        .collect(),
                )
            }
            PartitionCommand::UpsertPoints(points)
            | PartitionCommand::UpsertPointsIf { points, .. } => WriteOp::Upsert(
                points
                    .iter()
                    .map(|p| {
                        (
                            p.row.key.clone(),
                            StoredPoint {
                                version: index,
                                vector: p.row.vector.clone(),
                                payload: p.row.payload.clone(),
                                sparse: p.sparse.clone(),
                                extra: p.extra.clone(),
                            },
                        )
                    })
                    .collect(),
            ),
            PartitionCommand::Delete(keys) => WriteOp::Delete(keys.clone()),
            PartitionCommand::Fenced { command, .. } => command.to_write_op(index),
            // The map is written with the batch's meta (see `state_machine::apply`); the
            // entry still takes its sequence number, as an empty write.
            PartitionCommand::EditMetaMap { .. } => WriteOp::Upsert(Vec::new()),
        }
    }
}
