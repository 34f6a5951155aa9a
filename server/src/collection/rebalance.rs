//! The rebalancer: one background thread per partitioned collection that trains the meta-index
//! when the collection is big enough, retrains it when the collection has outgrown it, and
//! re-homes points after each training (see the collection's module docs).
//!
//! It holds only a weak reference, so dropping the collection is never blocked by it; it
//! checks every [`POLL`] and stops between batches when asked. In a cluster it acts only on
//! the node that writes the collection, and stops as soon as another node does.

use std::sync::mpsc::{channel, RecvTimeoutError, Sender};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cairn_index::pyramid::{Assignment, MetaIndex, PyramidParams};

use super::routing::{self, Phase, Routing};
use super::{Collection, MetaStore};
use crate::error::{Result, ServerError};

/// How often the thread looks at the collection.
const POLL: Duration = Duration::from_millis(200);
/// Points re-homed per batch; the collection's writes wait at most one batch.
const MOVE_BATCH: usize = 256;
/// The meta-index is retrained whenever the collection has grown this many times over…
const RETRAIN_GROWTH: u64 = 4;
/// …until it is this large: beyond, a sample of the same size would describe the data no
/// better, and re-homing every point would cost more than it returns.
const RETRAIN_UP_TO: u64 = 1 << 20;
/// Sample items per k-means centre (FAISS's own cap is 256).
const SAMPLE_PER_CENTRE: usize = 256;
/// Points held apart from the training sample to tune the default branching on.
const TUNE_QUERIES: usize = 1000;
/// How long a cluster's writer waits between storing a new routing and writing by it: five
/// passes of the other nodes over the metadata (`roles::sync`, every 200 ms).
const FOLLOW_GRACE: Duration = Duration::from_secs(1);

/// The running thread.
pub struct Handle {
    stop: Sender<()>,
    thread: JoinHandle<()>,
}

impl Handle {
    /// Asks the thread to stop and waits for it (unless called from the thread itself, which
    /// happens when it held the last reference to the collection).
    pub fn stop(self) {
        let _ = self.stop.send(());
        if self.thread.thread().id() != std::thread::current().id() && self.thread.join().is_err() {
            tracing::error!("rebalancer thread panicked");
        }
    }
}

/// Starts the thread for `collection`.
pub fn spawn(collection: &Arc<Collection>) -> Result<Handle> {
    let weak = Arc::downgrade(collection);
    let (stop, stopped) = channel::<()>();
    // Replicated partitions and the cluster's records block on the runtime's futures: the
    // thread enters the runtime that opened the collection, if one did.
    let runtime = tokio::runtime::Handle::try_current().ok();
    let thread = std::thread::Builder::new()
        .name(format!("rebalance-{}", collection.name()))
        .spawn(move || loop {
            let _entered = runtime.as_ref().map(tokio::runtime::Handle::enter);
            match stopped.recv_timeout(POLL) {
                Err(RecvTimeoutError::Timeout) => {}
                Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
            }
            let should_stop = || {
                !matches!(
                    stopped.try_recv(),
                    Err(std::sync::mpsc::TryRecvError::Empty)
                )
            };
            if let Err(e) = step(&weak, &should_stop) {
                tracing::error!(error = %e, "rebalancing failed; retrying");
            }
        })
        .map_err(|e| ServerError::Internal(format!("cannot start rebalancer: {e}")))?;
    Ok(Handle { stop, thread })
}

/// One look at the collection: train, retrain or finish a migration when due.
fn step(weak: &Weak<Collection>, should_stop: &dyn Fn() -> bool) -> Result<()> {
    let Some(collection) = weak.upgrade() else {
        return Ok(());
    };
    let routing = collection.routing();
    let Some(params) = collection.settings.routing else {
        return Ok(());
    };
    if collection.lead()?.is_none() {
        return Ok(());
    }
    let points = stored_points(&collection);
    if training_due(&routing, &params, points) {
        train(&collection, points)?;
    }
    if collection.routing().phase == Phase::Migrating {
        migrate(&collection, should_stop)?;
    }
    Ok(())
}

/// Points stored over all partitions (a replicated point counts in each): the measure of
/// growth the training schedule uses.
pub fn stored_points(collection: &Collection) -> u64 {
    collection
        .partitions
        .iter()
        .map(|p| p.points() as u64)
        .sum()
}

/// Whether the meta-index should be (re)trained now: first at [`routing::train_at`], then each
/// time the collection has grown [`RETRAIN_GROWTH`] times, up to [`RETRAIN_UP_TO`] points.
pub fn training_due(routing: &Routing, params: &PyramidParams, points: u64) -> bool {
    match routing.phase {
        Phase::Migrating => false,
        Phase::Untrained => points >= routing::train_at(params),
        Phase::Routed => {
            points >= RETRAIN_GROWTH * routing.trained_at_points.max(1) && points <= RETRAIN_UP_TO
        }
    }
}

/// Trains a new meta-index on a uniform sample and puts it in force with phase `migrating`.
fn train(collection: &Collection, points: u64) -> Result<()> {
    let started = Instant::now();
    let Some(params) = collection.settings.routing else {
        return Ok(());
    };
    let dim = collection.settings.dim;
    let params = PyramidParams {
        centres: routing::centres_for(&params, points),
        ..params
    };
    let tune = params.route_recall > 0.0;
    let cap = SAMPLE_PER_CENTRE * params.centres + if tune { TUNE_QUERIES } else { 0 };
    // Each partition draws a uniform sample in proportion to its points, so the union is
    // uniform over the collection (a point stored in two partitions or all is seen in each,
    // which weighs boundary points and the largest norms a little more).
    let counts: Vec<u64> = collection
        .partitions
        .iter()
        .map(|p| p.points() as u64)
        .collect();
    let total = counts.iter().sum::<u64>().max(1);
    let mut drawn: Vec<f32> = Vec::with_capacity(cap * dim);
    for (i, (partition, &count)) in collection.partitions.iter().zip(&counts).enumerate() {
        let n = (cap as u64 * count).div_ceil(total) as usize;
        if n > 0 {
            drawn.extend(partition.sample(n, params.seed ^ points ^ i as u64)?);
        }
    }
    let (sample, queries) = if tune {
        hold_apart(&drawn, dim, TUNE_QUERIES, params.seed ^ points)
    } else {
        (drawn, Vec::new())
    };
    let version = collection.routing().version() + 1;
    let mut meta_index = MetaIndex::train(
        params,
        collection.settings.metric(),
        dim,
        &sample,
        collection.trainers.centroids()?.as_ref(),
        version,
    )
    .map_err(|e| ServerError::Internal(format!("meta_index training: {e}")))?;
    if tune && !queries.is_empty() {
        let ladder = meta_index
            .tune_branching(&sample, &queries, params.route_recall)
            .map_err(|e| ServerError::Internal(format!("branching tuning: {e}")))?;
        tracing::info!(
            collection = collection.name(),
            branching = meta_index.params().branching,
            ladder = ?ladder,
            "routing branching tuned on held-apart points"
        );
    }
    let state = Routing {
        phase: Phase::Migrating,
        meta_index: Some(Arc::new(meta_index)),
        trained_at_points: points,
        sample_points: (sample.len() / dim) as u64,
    };
    // Stored before it is used, so a restart finds the meta-index its points were written by.
    {
        let Some(_writer) = collection.lead()? else {
            return Ok(());
        };
        state.store(&collection.meta)?;
        collection.routing_stored()?;
    }
    if matches!(collection.meta, MetaStore::Shared(_)) {
        // The other nodes route queries by the routing they last read, and read the new one
        // on their next pass over the metadata; until then this node's writes keep following
        // the old one, so a node on either routing finds every point (one that has read the
        // new one searches every partition while it is `migrating`).
        std::thread::sleep(FOLLOW_GRACE);
    }
    let Some(_writer) = collection.lead()? else {
        return Ok(());
    };
    *collection.routing.write() = Arc::new(state);
    tracing::info!(
        collection = collection.name(),
        version,
        points,
        sample = sample.len() / dim,
        ms = started.elapsed().as_millis() as u64,
        "meta_index trained; re-homing points"
    );
    Ok(())
}

/// Splits `drawn` rows into a training sample and up to `queries` rows held apart from it, by
/// a seeded shuffle; a held-apart row equal to a sample row (a point drawn from two of its
/// partitions) is dropped, since it would find itself.
fn hold_apart(drawn: &[f32], dim: usize, queries: usize, seed: u64) -> (Vec<f32>, Vec<f32>) {
    use rand::seq::SliceRandom;
    use rand::SeedableRng;
    let rows = drawn.len() / dim.max(1);
    // Keep at least most of the draw for training.
    let queries = queries.min(rows / 4);
    let mut order: Vec<usize> = (0..rows).collect();
    order.shuffle(&mut rand::rngs::StdRng::seed_from_u64(seed));
    let row = |i: usize| &drawn[i * dim..(i + 1) * dim];
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<u32>>();
    let (held, kept) = order.split_at(queries);
    let mut sample = Vec::with_capacity(kept.len() * dim);
    let mut seen = std::collections::HashSet::with_capacity(kept.len());
    for &i in kept {
        sample.extend_from_slice(row(i));
        seen.insert(bits(row(i)));
    }
    let mut apart = Vec::with_capacity(held.len() * dim);
    for &i in held {
        if !seen.contains(&bits(row(i))) {
            apart.extend_from_slice(row(i));
        }
    }
    (sample, apart)
}

/// Re-writes every point whose assignment changed under the meta-index in force, then marks the
/// collection `routed`. Returns early (to resume later) when asked to stop.
fn migrate(collection: &Collection, should_stop: &dyn Fn() -> bool) -> Result<()> {
    let started = Instant::now();
    let mut moved = 0usize;
    let w = collection.partitions.len();
    for q in 0..w {
        // From a copy holding every write made so far: a point written under the old routing
        // a moment ago must be moved too.
        let ids = {
            let Some(writer) = collection.lead()? else {
                return Ok(());
            };
            collection.committed(&writer, q)?.stored_ids()?
        };
        for chunk in ids.chunks(MOVE_BATCH) {
            if should_stop() {
                return Ok(());
            }
            let Some(mut writer) = collection.lead()? else {
                return Ok(());
            };
            let routing = collection.routing();
            // Re-read under the lock: points may have been rewritten or deleted.
            let stored: Vec<_> = collection
                .committed(&writer, q)?
                .stored(chunk)?
                .into_iter()
                .flatten()
                .collect();
            let targets = stored
                .iter()
                .map(|p| routing.assign(&p.vector))
                .collect::<crate::error::Result<Vec<_>>>()?;
            // A point of several partitions must be in each: ask each partition once.
            let spread: Vec<_> = stored
                .iter()
                .zip(&targets)
                .filter(|(_, t)| !matches!(t, Assignment::One(_)))
                .map(|(p, t)| (p.id, *t))
                .collect();
            let mut missing = std::collections::HashSet::new();
            if !spread.is_empty() {
                let ids: Vec<_> = spread.iter().map(|(id, _)| *id).collect();
                for r in 0..w {
                    let held = collection.committed(&writer, r)?.holds(&ids)?;
                    for ((id, to), held) in spread.iter().zip(held) {
                        if !held && to.includes(r as u32) {
                            missing.insert(*id);
                        }
                    }
                }
            }
            let batch: Vec<_> = stored
                .into_iter()
                .zip(targets)
                .filter(|(point, to)| !to.includes(q as u32) || missing.contains(&point.id))
                .map(|(point, _)| point)
                .collect();
            moved += batch.len();
            if !batch.is_empty() {
                collection.place_locked(&mut writer, &routing, batch)?;
            }
        }
    }
    let Some(writer) = collection.lead()? else {
        return Ok(());
    };
    // `routed` promises every point searchable where the meta-index says: wait for the moves.
    for (q, p) in collection.partitions.iter().enumerate() {
        let floor = writer.floors.get(q).copied().unwrap_or(0);
        p.wait_applied_blocking(p.last_seq().max(floor))?;
    }
    let current = collection.routing();
    let Some(meta_index_version) = current.meta_index.as_ref().map(|r| r.version()) else {
        return Ok(());
    };
    let done = Routing {
        phase: Phase::Routed,
        meta_index: current.meta_index.clone(),
        trained_at_points: current.trained_at_points,
        sample_points: current.sample_points,
    };
    done.store(&collection.meta)?;
    collection.routing_stored()?;
    *collection.routing.write() = Arc::new(done);
    tracing::info!(
        collection = collection.name(),
        version = meta_index_version,
        moved,
        ms = started.elapsed().as_millis() as u64,
        "points re-homed; routing in force"
    );
    Ok(())
}
