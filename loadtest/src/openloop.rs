//! Open-loop load: queries are issued on a fixed schedule, whatever the server does.
//!
//! A closed-loop client (send, wait, send) slows down with the server and so never sees the
//! queue a slow server builds up: coordinated omission. Here query i is *due* at
//! `start + i / rate`; it is sent at that time whether or not earlier ones came back, and its
//! latency is measured from when it was due, so time spent waiting for a free connection or a
//! late timer counts against the server, as it would for a real user.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cairn_client::QueryPoints;
use indicatif::{ProgressBar, ProgressStyle};

use crate::raw_wire::{self, RawWire};
use crate::stats::{answer_ids, recall_of, PhaseStats, Summary};
use crate::target::Target;
use crate::workload::Workload;

/// Connections the lean sender opens before the run.
const WARM_CONNECTIONS: usize = 256;

/// Which phase the run is in, moved on by whoever drives the scenario (a timer for `load`,
/// the fault steps for `chaos`, so that "during" lasts until a repair has *completed*). Each
/// query counts in the phase current when it was due.
pub struct Phases {
    current: AtomicUsize,
    done: AtomicBool,
    /// When each phase began.
    began: Mutex<Vec<Instant>>,
    count: usize,
}

impl Phases {
    /// `count` phases; the first begins when the run starts.
    pub fn new(count: usize) -> Arc<Self> {
        Arc::new(Self {
            current: AtomicUsize::new(0),
            done: AtomicBool::new(false),
            began: Mutex::new(Vec::with_capacity(count)),
            count,
        })
    }

    /// Starts the next phase (the last one stays current if called too often).
    pub fn advance(&self) {
        let mut began = lock(&self.began);
        if self.current.load(Ordering::Relaxed) + 1 < self.count {
            began.push(Instant::now());
            self.current.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The phase the run is in.
    pub fn current(&self) -> usize {
        self.current.load(Ordering::Relaxed)
    }

    /// Ends the run: no query is issued after this.
    pub fn finish(&self) {
        self.done.store(true, Ordering::Relaxed);
    }

    fn begin(&self, at: Instant) {
        lock(&self.began).insert(0, at);
    }

    /// Seconds each phase lasted, the last one up to `end`.
    fn lengths(&self, end: Instant) -> Vec<f64> {
        let began = lock(&self.began);
        (0..self.count)
            .map(|i| match (began.get(i), began.get(i + 1)) {
                (Some(a), Some(b)) => b.duration_since(*a).as_secs_f64(),
                (Some(a), None) => end.duration_since(*a).as_secs_f64(),
                (None, _) => 0.0,
            })
            .collect()
    }
}

/// What to send and how fast.
#[derive(Debug, Clone)]
pub struct Schedule {
    /// Queries per second.
    pub rate: f64,
    /// Queries per second in each phase, overriding `rate` (empty: `rate` throughout).
    pub phase_rates: Vec<f64>,
    /// Results per query (recall@k is measured at this k).
    pub k: usize,
    /// `params.hnsw_ef`, when set.
    pub ef: Option<usize>,
    /// Queries in flight at most; a query due while this many are pending fails as
    /// `overload` rather than silently waiting (which would hide the overload).
    pub max_in_flight: usize,
    /// Send through [`crate::raw_wire`] instead of the SDK: plain HTTP, much less of the
    /// generator's CPU per query (its send lag is then counted when the bytes are written).
    pub lean: bool,
}

/// Runs the schedule until `phases` is finished and returns one summary per phase.
///
/// The schedule is kept by a dedicated thread sleeping with the OS timer (tens of
/// microseconds of slack) rather than by tokio's timer wheel, whose millisecond ticks would
/// add up to a millisecond of generator lateness to every latency — more than the server
/// spends on a query. How late each query still went out is reported as `send_lag`.
pub async fn run(
    target: &Target,
    workload: &Workload,
    schedule: &Schedule,
    phases: &Arc<Phases>,
) -> anyhow::Result<Vec<Summary>> {
    anyhow::ensure!(
        schedule.rate > 0.0 && schedule.phase_rates.iter().all(|r| *r > 0.0),
        "rates must be positive"
    );
    anyhow::ensure!(!workload.queries.is_empty(), "the workload has no queries");
    let stats: Arc<Vec<Mutex<PhaseStats>>> = Arc::new(
        (0..phases.count)
            .map(|_| Mutex::new(PhaseStats::default()))
            .collect(),
    );
    let raw = if schedule.lean {
        let wire = RawWire::new(
            &target.url,
            &target.collection,
            target.api_key.as_deref(),
            &workload.queries,
            schedule.k,
            schedule.ef,
        )?;
        wire.warm(schedule.max_in_flight.min(WARM_CONNECTIONS))
            .await?;
        Some(Arc::new(wire))
    } else {
        None
    };
    let dispatcher = Dispatcher {
        runtime: tokio::runtime::Handle::current(),
        client: target.client.clone(),
        raw,
        collection: target.collection.clone(),
        queries: Arc::new(workload.queries.clone()),
        truth: Arc::new(workload.truth.clone()),
        schedule: schedule.clone(),
        phases: Arc::clone(phases),
        stats: Arc::clone(&stats),
    };
    let (pending, end) = tokio::task::spawn_blocking(move || dispatcher.run()).await?;
    for query in pending {
        query.await?;
    }
    Ok(stats
        .iter()
        .zip(phases.lengths(end))
        .map(|(s, secs)| lock(s).summary(secs))
        .collect())
}

/// Everything the scheduling thread needs, owned.
struct Dispatcher {
    runtime: tokio::runtime::Handle,
    client: cairn_client::Client,
    raw: Option<Arc<RawWire>>,
    collection: String,
    queries: Arc<cairn_index::dataset::Vectors>,
    truth: Arc<Vec<Vec<u32>>>,
    schedule: Schedule,
    phases: Arc<Phases>,
    stats: Arc<Vec<Mutex<PhaseStats>>>,
}

impl Dispatcher {
    /// Issues query i at `start + i / rate` until the run is finished; returns the queries
    /// still pending and when issuing stopped.
    fn run(self) -> (Vec<tokio::task::JoinHandle<()>>, Instant) {
        let bar = ProgressBar::new_spinner().with_style(
            ProgressStyle::with_template("{elapsed_precise} {spinner} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        let interval = |phase: usize| {
            let rate = self
                .schedule
                .phase_rates
                .get(phase)
                .copied()
                .unwrap_or(self.schedule.rate);
            Duration::from_secs_f64(1.0 / rate)
        };
        let in_flight = Arc::new(AtomicUsize::new(0));
        let mut pending: Vec<tokio::task::JoinHandle<()>> = Vec::new();
        let start = Instant::now();
        self.phases.begin(start);
        // Each query is due one interval of the current phase's rate after the one before.
        let mut due = start;
        for i in 0u64.. {
            if i > 0 {
                due += interval(self.phases.current());
            }
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            if self.phases.done.load(Ordering::Relaxed) {
                break;
            }
            let phase = self.phases.current();
            if self.raw.is_none() {
                lock(&self.stats[phase]).sent(due.elapsed());
            }
            if i % 64 == 0 {
                let (ok, failed) = totals(&self.stats);
                bar.set_message(format!("phase {phase}: {ok} ok, {failed} failed"));
                bar.tick();
                pending.retain(|q| !q.is_finished());
            }
            if in_flight.load(Ordering::Relaxed) >= self.schedule.max_in_flight {
                lock(&self.stats[phase]).error("overload");
                continue;
            }
            let q = (i as usize) % self.queries.len();
            let send = self.send(q, phase, due);
            let (stats, truth, k) = (
                Arc::clone(&self.stats),
                Arc::clone(&self.truth),
                self.schedule.k,
            );
            let in_flight = Arc::clone(&in_flight);
            in_flight.fetch_add(1, Ordering::Relaxed);
            pending.push(self.runtime.spawn(async move {
                let outcome = send.await;
                let latency = due.elapsed();
                in_flight.fetch_sub(1, Ordering::Relaxed);
                let mut phase_stats = lock(&stats[phase]);
                match outcome {
                    Outcome::Answered(ids) => {
                        phase_stats.ok(latency, recall_of(&ids, &truth[q], k));
                    }
                    Outcome::Refused => phase_stats.refused(latency),
                    Outcome::Failed(kind) => phase_stats.error(&kind),
                }
            }));
        }
        bar.finish_and_clear();
        (pending, Instant::now())
    }
}

/// What became of one query.
enum Outcome {
    /// Answered: the hits' ids, best first.
    Answered(Vec<u32>),
    /// Refused with a 429.
    Refused,
    /// Failed, by kind.
    Failed(String),
}

impl Dispatcher {
    /// Query `q`, due at `due` in `phase`, through the lean sender or the SDK.
    fn send(
        &self,
        q: usize,
        phase: usize,
        due: Instant,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Outcome> + Send>> {
        if let Some(raw) = &self.raw {
            let (raw, stats) = (Arc::clone(raw), Arc::clone(&self.stats));
            return Box::pin(async move {
                let sent = || lock(&stats[phase]).sent(due.elapsed());
                match raw.query(q, sent).await {
                    Ok(answer) if answer.status == 200 => {
                        Outcome::Answered(raw_wire::answer_ids(&answer.body))
                    }
                    Ok(answer) if answer.status == 429 => Outcome::Refused,
                    Ok(answer) => Outcome::Failed(format!("http_{}", answer.status)),
                    Err(_) => Outcome::Failed("connection".into()),
                }
            });
        }
        let mut query = QueryPoints::new(&self.collection)
            .vector(self.queries.row(q).to_vec())
            .limit(self.schedule.k);
        if let Some(ef) = self.schedule.ef {
            query = query.ef(ef);
        }
        let client = self.client.clone();
        Box::pin(async move {
            match client.query(query).await {
                Ok(answer) => Outcome::Answered(answer_ids(&answer)),
                Err(cairn_client::Error::RateLimited { .. }) => Outcome::Refused,
                Err(e) => Outcome::Failed(e.kind().to_owned()),
            }
        })
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn totals(stats: &[Mutex<PhaseStats>]) -> (u64, u64) {
    stats.iter().fold((0, 0), |(ok, failed), s| {
        let s = lock(s);
        (ok + s.ok_count(), failed + s.error_count())
    })
}
