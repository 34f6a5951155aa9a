//! The applier thread: the only code that mutates a partition's index. It applies ops in
//! sequence order, publishes `applied_seq`, writes snapshots and runs vacuums.
//!
//! An upsert reaches the applier *while* its RocksDB batch is being written and synced, and
//! the applier links the new vectors into the graph in the meantime, so the fsync and the
//! linking overlap instead of adding up. The new slots stay invisible (no table entry) until
//! the batch is durable; only then are they published. If the write fails they are abandoned
//! as dead slots, which the next vacuum reclaims. Deletes wait for durability before they
//! touch the table. Snapshots are written between jobs, so they never hold an unpublished op.

use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::live::{BuildPoint, LiveIndex};
use super::{snapshot, ApplyJob, ApplyOp, Shared};

/// How often an idle applier wakes to check the snapshot timer.
const IDLE_TICK: Duration = Duration::from_millis(500);

/// After a snapshot that took `d`, the next waits at least this many times `d`.
///
/// Why. Writing a snapshot takes time in proportion to the index (seconds for millions of
/// vectors: the rows and links of a 10M×128 index are 6–7 GB), and the applier applies
/// nothing meanwhile. With the fixed triggers alone (`snapshot_every_ops`, `_secs`) a large
/// index under a steady load would spend most of its applier's time writing snapshots; with
/// this spacing, snapshots take at most a tenth of it. The price is a longer op-log replay
/// after a crash (at most about nine snapshots' time of writes); a clean stop still writes a
/// final snapshot.
const SNAPSHOT_SPACING: u32 = 9;

/// Whether a snapshot is due: `pending` ops since the last, which ended `since` ago and took
/// `took` to write (see [`SNAPSHOT_SPACING`]).
fn snapshot_due(
    storage: &crate::config::StorageConfig,
    pending: u64,
    since: Duration,
    took: Duration,
) -> bool {
    let triggered = pending >= storage.snapshot_every_ops
        || (pending > 0 && since >= Duration::from_secs(storage.snapshot_every_secs));
    triggered && since >= took * SNAPSHOT_SPACING
}

pub(super) fn run(
    shared: &Arc<Shared>,
    queue: &Receiver<ApplyJob>,
    mut applied: u64,
    mut snapshot_seq: u64,
) {
    let mut last_snapshot = Instant::now();
    let mut last_took = Duration::ZERO;
    loop {
        let closing = match queue.recv_timeout(IDLE_TICK) {
            Ok(job) => {
                let seq = job.seq;
                if apply(shared, job) {
                    applied = seq;
                    shared.applied.send_replace(applied);
                }
                false
            }
            Err(RecvTimeoutError::Timeout) => false,
            Err(RecvTimeoutError::Disconnected) => true,
        };
        let pending = applied - snapshot_seq;
        let due = snapshot_due(&shared.storage, pending, last_snapshot.elapsed(), last_took);
        let vacuumed = vacuum_due(shared) && vacuum(shared);
        if due || vacuumed || (closing && pending > 0) {
            let started = Instant::now();
            match snapshot::write(shared, applied) {
                Ok(()) => snapshot_seq = applied,
                Err(e) => {
                    tracing::error!(collection = %shared.name, error = %e, "snapshot failed; will retry")
                }
            }
            last_snapshot = Instant::now();
            last_took = started.elapsed();
        }
        if closing {
            return;
        }
    }
}

/// Applies one job once its write is durable; false if the write failed (nothing applied).
fn apply(shared: &Shared, job: ApplyJob) -> bool {
    let live = shared.live();
    match job.op {
        ApplyOp::Upsert(points) => {
            // Link first, publish once durable (see the module docs).
            let added = live.add(&points);
            if !job.durable.wait() {
                if let Some(added) = added {
                    live.table.write().abandon(added.first(), points.len());
                }
                return false;
            }
            if let Some(added) = added {
                live.publish_slots(added, job.seq, points);
            }
        }
        ApplyOp::Delete(ids) => {
            if !job.durable.wait() {
                return false;
            }
            let mut table = live.table.write();
            for id in &ids {
                table.remove(id);
            }
        }
        ApplyOp::PayloadIndex { key, kind } => {
            // Under the schema's lock, as a local change is: a vacuum swapping tables syncs
            // after it.
            let mut schema = shared.payload_schema.write();
            match kind {
                Some(kind) => schema.insert(key, kind),
                None => schema.remove(&key),
            };
            live.table.write().sync_payload_schema(&schema);
        }
    }
    true
}

fn vacuum_due(shared: &Shared) -> bool {
    let live = shared.live();
    let table = live.table.read();
    let total = table.slots.len().max(1);
    table.dead >= shared.storage.vacuum_min_dead
        && table.dead as f64 / total as f64 >= shared.storage.vacuum_dead_ratio
}

/// Rebuilds the index from live points and swaps it in; searches keep using the old one
/// until the swap. Runs on the applier thread, so no op can slip between copy and swap.
/// Returns whether a new index was swapped in (it then needs a snapshot of its own).
fn vacuum(shared: &Shared) -> bool {
    let started = Instant::now();
    let old = shared.live();
    let dead = old.table.read().dead;
    let schema = shared.payload_schema.read().clone();
    let built = {
        // Streamed from the old index a chunk at a time. Its table stays read-locked through
        // the build, which blocks nobody: only this thread writes it.
        let table = old.table.read();
        let points = table.by_id.values().filter_map(|&slot| {
            let entry = table.entry(slot)?;
            Some(Ok(BuildPoint {
                entry: entry.clone(),
                vector: old.index.vector(slot)?,
                extra: old.extra_vectors(entry),
            }))
        });
        LiveIndex::build(
            &shared.settings,
            &schema,
            &shared.trainers,
            &shared.dir,
            points,
        )
    };
    match built {
        Ok(fresh) => {
            *shared.live.write() = Arc::new(fresh);
            // A payload index created or dropped during the rebuild: the fresh table follows
            // (creating one writes the schema before it indexes the table it then sees).
            shared
                .live()
                .table
                .write()
                .sync_payload_schema(&shared.payload_schema.read());
            tracing::info!(collection = %shared.name, reclaimed_slots = dead, ms = started.elapsed().as_millis() as u64, "vacuum rebuilt the index");
            true
        }
        Err(e) => {
            tracing::error!(collection = %shared.name, error = %e, "vacuum failed; keeping the old index");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::StorageConfig;

    #[test]
    fn snapshots_wait_for_a_trigger_and_nine_times_the_last_ones_length() {
        let storage = StorageConfig {
            sync_writes: true,
            snapshot_every_ops: 2_000,
            snapshot_every_secs: 30,
            oplog_retention_ops: 100_000,
            vacuum_dead_ratio: 0.2,
            vacuum_min_dead: 1_000,
        };
        let secs = Duration::from_secs;
        // A small index (snapshots take milliseconds): the fixed triggers alone decide.
        let quick = Duration::from_millis(5);
        assert!(!snapshot_due(&storage, 0, secs(3_600), quick));
        assert!(!snapshot_due(&storage, 1_999, secs(29), quick));
        assert!(snapshot_due(&storage, 2_000, secs(1), quick));
        assert!(snapshot_due(&storage, 1, secs(30), quick));
        // A large one (20 s a snapshot): not before 180 s, whatever has piled up.
        let slow = secs(20);
        assert!(!snapshot_due(&storage, 50_000, secs(179), slow));
        assert!(snapshot_due(&storage, 50_000, secs(180), slow));
        assert!(!snapshot_due(&storage, 0, secs(600), slow));
    }
}
