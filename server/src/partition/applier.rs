//! The applier thread: the only code that mutates a collection's index. It applies committed
//! ops in sequence order, publishes `applied_seq`, writes snapshots and runs vacuums.

use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::table::{LiveIndex, SlotEntry};
use super::{snapshot, ApplyJob, ApplyOp, Shared};

/// How often an idle applier wakes to check the snapshot timer.
const IDLE_TICK: Duration = Duration::from_millis(500);

pub(super) fn run(
    shared: &Arc<Shared>,
    queue: &Receiver<ApplyJob>,
    mut applied: u64,
    mut snapshot_seq: u64,
) {
    let mut last_snapshot = Instant::now();
    loop {
        let closing = match queue.recv_timeout(IDLE_TICK) {
            Ok(job) => {
                apply(shared, job.seq, job.op);
                applied = job.seq;
                shared.applied.send_replace(applied);
                false
            }
            Err(RecvTimeoutError::Timeout) => false,
            Err(RecvTimeoutError::Disconnected) => true,
        };
        let pending = applied - snapshot_seq;
        let due = pending >= shared.storage.snapshot_every_ops
            || (pending > 0
                && last_snapshot.elapsed()
                    >= Duration::from_secs(shared.storage.snapshot_every_secs));
        let vacuumed = vacuum_due(shared) && vacuum(shared);
        if due || vacuumed || (closing && pending > 0) {
            match snapshot::write(shared, applied) {
                Ok(()) => snapshot_seq = applied,
                Err(e) => {
                    tracing::error!(collection = %shared.name, error = %e, "snapshot failed; will retry")
                }
            }
            last_snapshot = Instant::now();
        }
        if closing {
            return;
        }
    }
}

fn apply(shared: &Shared, seq: u64, op: ApplyOp) {
    let live = shared.live();
    match op {
        ApplyOp::Upsert(points) => publish(&live, seq, points),
        ApplyOp::Delete(ids) => {
            let mut table = live.table.write();
            for id in &ids {
                table.remove(id);
            }
        }
    }
}

/// Adds vectors to the index, then makes them visible in the table.
pub(super) fn publish(live: &LiveIndex, version: u64, points: Vec<super::NewPoint>) {
    if points.is_empty() {
        return;
    }
    let vectors: Vec<f32> = points
        .iter()
        .flat_map(|p| p.vector.iter().copied())
        .collect();
    let first = match live.index.add(&vectors) {
        Ok(first) => first,
        Err(e) => {
            // Inputs are validated before they are committed, so this is a bug; the points
            // stay durable in RocksDB and come back on the next restart's rebuild.
            tracing::error!(error = %e, "index rejected validated points");
            return;
        }
    };
    let mut table = live.table.write();
    for (offset, p) in points.into_iter().enumerate() {
        table.publish(
            first + offset as u32,
            SlotEntry {
                id: p.id,
                version,
                payload: p.payload,
            },
        );
    }
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
    let (entries, vectors): (Vec<SlotEntry>, Vec<f32>) = {
        let table = old.table.read();
        let mut vectors = Vec::with_capacity(table.live() * shared.settings.dim);
        let mut entries = Vec::with_capacity(table.live());
        for &slot in table.by_id.values() {
            if let (Some(entry), Some(v)) = (table.entry(slot), old.index.vector(slot)) {
                entries.push(entry.clone());
                vectors.extend_from_slice(&v);
            }
        }
        (entries, vectors)
    };
    let dead = old.table.read().dead;
    match super::recovery::build_live(&shared.settings, entries, &vectors) {
        Ok(fresh) => {
            *shared.live.write() = Arc::new(fresh);
            tracing::info!(collection = %shared.name, reclaimed_slots = dead, ms = started.elapsed().as_millis() as u64, "vacuum rebuilt the index");
            true
        }
        Err(e) => {
            tracing::error!(collection = %shared.name, error = %e, "vacuum failed; keeping the old index");
            false
        }
    }
}
