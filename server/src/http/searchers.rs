//! Where searches run, and the line they wait in.
//!
//! A search is CPU-bound work of 50 µs to a few milliseconds. Run on the async worker that
//! read its request it costs nothing extra, and at low load that is what happens. But a worker
//! that is searching reads no request: under overload every worker searches, new requests wait
//! unread in their sockets, and no count of requests already read ever sees that line (issue
//! #23's first trials, in BENCHMARKS.md). A worker cannot see that line either — it only ever
//! looks when it is between two searches — but it can see that it is never idle: tokio counts
//! each worker's busy time. So once the workers are busy more than [`SATURATED`] of the time,
//! or the pool has work, searches go to a pool of `http.search_threads` threads at a lower
//! CPU priority (`http.search_nice`), and the async workers keep reading: every request is
//! read soon after it arrives, and the line is here, in one queue, where it can be bounded.
//! A search that finds `http.search_queue_per_thread` per thread already waiting is refused at
//! once with a 429 — the queued ones will be served within a few searches' time, and a longer
//! line would only make every answer late. What this achieves and what it costs (about 9–17%
//! of the throughput at saturation, where every search pays the hand-off) is measured in
//! BENCHMARKS.md's "Overload".
//!
//! A search whose client has gone while it waited is dropped before it runs.

use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use tokio::sync::oneshot;

use crate::error::{Result, ServerError};

/// Share of the time the async workers may be busy and still search in place.
const SATURATED: f64 = 0.8;
/// How often the workers' busy share is measured (on the next search after this long).
const BUSY_WINDOW: Duration = Duration::from_millis(10);

/// Indices of [`Searchers::counts`].
const IN_PLACE: usize = 0;
const POOL: usize = 1;
const REFUSED: usize = 2;

/// What a search will do, as its caller knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Work {
    /// CPU work bounded to about 500 µs (see [`crate::collection::Collection::is_short`]):
    /// may run on the async worker.
    Short,
    /// Longer CPU work: always on the search threads.
    Long,
    /// Waits on other nodes (remote partitions, a read index, a replica catching up): it
    /// would hold a search thread idle, so it runs under `block_in_place` on the worker, as
    /// tokio's blocking work does, bounded by the request limits rather than this line.
    MayWait,
}

/// One search, boxed for the queue.
type Job = Box<dyn FnOnce() + Send>;

/// The pool and its line (a handle: clones share them).
#[derive(Clone)]
pub struct Searchers {
    shared: Arc<Shared>,
}

struct Shared {
    queue: Mutex<VecDeque<Job>>,
    wake: Condvar,
    /// Jobs waiting (the queue's length, kept beside it so the idle check takes no lock).
    queued: AtomicUsize,
    /// Jobs the pool's threads are running.
    running: AtomicUsize,
    threads: usize,
    max_queued: usize,
    per_thread: usize,
    /// Searches run on the async workers, run on the pool, and refused, since start.
    counts: [AtomicU64; 3],
    /// The async workers were busy more than [`SATURATED`] of the last window.
    saturated: AtomicBool,
    /// When the workers' busy time was last read, and its total then.
    busy: Mutex<(Instant, Duration)>,
}

impl Searchers {
    /// Starts, from within the tokio runtime, `threads` search threads at CPU priority `nice`
    /// (0: the server's own; higher is lower, up to 19) with `per_thread` searches each
    /// waiting at most.
    pub fn start(threads: usize, nice: i32, per_thread: usize) -> Result<Self> {
        let shared = Arc::new(Shared {
            queue: Mutex::new(VecDeque::with_capacity(threads * per_thread)),
            wake: Condvar::new(),
            queued: AtomicUsize::new(0),
            running: AtomicUsize::new(0),
            threads,
            max_queued: threads * per_thread,
            per_thread,
            counts: Default::default(),
            saturated: AtomicBool::new(false),
            busy: Mutex::new((Instant::now(), Duration::ZERO)),
        });
        // Searches of replicated partitions wait on the runtime (`Handle::current().block_on`
        // for a read index or a catch-up), as on tokio's blocking pool: the threads enter it.
        let runtime = tokio::runtime::Handle::current();
        for i in 0..threads {
            let (shared, runtime) = (Arc::clone(&shared), runtime.clone());
            std::thread::Builder::new()
                .name(format!("cairn-search-{i}"))
                .spawn(move || {
                    let _entered = runtime.enter();
                    lower_priority(nice);
                    shared.work();
                })
                .map_err(|e| ServerError::Internal(format!("cannot start a search thread: {e}")))?;
        }
        Ok(Self { shared })
    }

    /// Runs `f`, a search doing `work`: on this worker when it is short, the pool idle and the
    /// workers not saturated; under `block_in_place` when it may wait on other nodes; else on
    /// the pool — or refuses it with [`ServerError::Overloaded`] when the pool's line is full.
    pub async fn run<T: Send + 'static>(
        &self,
        work: Work,
        f: impl FnOnce() -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let shared = &self.shared;
        if work == Work::MayWait {
            return tokio::task::block_in_place(f);
        }
        // At most one search per worker runs in place: it holds the worker until it is done.
        if work == Work::Short && shared.is_idle() && !shared.workers_saturated() {
            shared.counts[IN_PLACE].fetch_add(1, Ordering::Relaxed);
            return f();
        }
        let (tx, rx) = oneshot::channel();
        let job: Job = Box::new(move || {
            if tx.is_closed() {
                return;
            }
            let answer = std::panic::catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|panic| {
                let message = panic
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                tracing::error!(%message, "a search panicked");
                Err(ServerError::Internal(format!(
                    "the search panicked: {message}"
                )))
            });
            let _ = tx.send(answer);
        });
        {
            let mut queue = shared.queue.lock();
            if queue.len() >= shared.max_queued {
                return Err(self.full());
            }
            shared.counts[POOL].fetch_add(1, Ordering::Relaxed);
            queue.push_back(job);
            shared.queued.fetch_add(1, Ordering::AcqRel);
        }
        shared.wake.notify_one();
        rx.await
            .map_err(|_| ServerError::Internal("a search thread stopped".into()))?
    }

    /// Whether a search sent to the pool now would be refused: the admission layer then
    /// refuses a search request before reading its body, the cheapest refusal there is.
    pub fn is_full(&self) -> bool {
        self.shared.queued.load(Ordering::Acquire) >= self.shared.max_queued
    }

    /// Searches run on the async workers, run on the search threads, and refused for a full
    /// line, since start (`/metrics`).
    pub fn counts(&self) -> [u64; 3] {
        self.shared
            .counts
            .each_ref()
            .map(|c| c.load(Ordering::Relaxed))
    }

    /// The refusal of a search that finds the line full (counted).
    pub fn full(&self) -> ServerError {
        self.shared.counts[REFUSED].fetch_add(1, Ordering::Relaxed);
        ServerError::Overloaded(format!(
            "this node's {} search threads each have {} searches waiting \
             (http.search_threads, http.search_queue_per_thread); retry later",
            self.shared.threads, self.shared.per_thread
        ))
    }
}

impl Shared {
    /// No search waits or runs on the pool.
    fn is_idle(&self) -> bool {
        self.queued.load(Ordering::Acquire) == 0 && self.running.load(Ordering::Acquire) == 0
    }

    /// Whether the async workers were busy more than [`SATURATED`] of the last window; read
    /// again from tokio's counters once the window has passed (by whichever search gets the
    /// lock; the others use the last answer).
    fn workers_saturated(&self) -> bool {
        if let Some(mut busy) = self.busy.try_lock() {
            let now = Instant::now();
            let elapsed = now.duration_since(busy.0);
            if elapsed >= BUSY_WINDOW {
                let metrics = tokio::runtime::Handle::current().metrics();
                let workers = metrics.num_workers();
                let total: Duration = (0..workers)
                    .map(|w| metrics.worker_total_busy_duration(w))
                    .sum();
                let share = total.saturating_sub(busy.1).as_secs_f64()
                    / (elapsed.as_secs_f64() * workers.max(1) as f64);
                tracing::trace!(share, "async workers' busy share");
                self.saturated.store(share > SATURATED, Ordering::Release);
                *busy = (now, total);
            }
        }
        self.saturated.load(Ordering::Acquire)
    }

    /// A search thread's loop: the next job, oldest first.
    fn work(&self) {
        loop {
            let job = {
                let mut queue = self.queue.lock();
                loop {
                    if let Some(job) = queue.pop_front() {
                        // Running before no longer queued, so the pool never looks idle
                        // while it has work.
                        self.running.fetch_add(1, Ordering::AcqRel);
                        self.queued.fetch_sub(1, Ordering::AcqRel);
                        break job;
                    }
                    self.wake.wait(&mut queue);
                }
            };
            job();
            self.running.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Lowers the calling thread's CPU priority to `nice` (Linux sets it per thread), so that when
/// the CPU is short the async workers, which read requests and refuse the excess, go first.
fn lower_priority(nice: i32) {
    if nice == 0 {
        return;
    }
    #[cfg(target_os = "linux")]
    {
        // SAFETY: setpriority takes plain integers; `gettid` names this thread only.
        let done =
            unsafe { libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, nice) };
        if done != 0 {
            tracing::warn!(nice, error = %std::io::Error::last_os_error(), "cannot lower the search threads' priority");
        }
    }
}
