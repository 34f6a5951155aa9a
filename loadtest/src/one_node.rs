//! `one-node`: how many vectors one node holds and serves (issue #25, point 6).
//!
//! One server, one collection, `--n` seeded synthetic vectors sent through REST (Qdrant's
//! batch upserts, `wait=true`, `--concurrency` requests in flight), with the vectors in memory
//! or on disk (`--on-disk`) and optional row codes (`--quantization int8|binary`). Reported:
//!
//! - **ingest**: points per second over the whole load, and in each tenth of it;
//! - **memory**: the server's resident set (`VmRSS`), split into anonymous memory (`RssAnon`,
//!   what the kernel cannot take back without swap) and mapped files (`RssFile`, page cache
//!   the kernel may drop), sampled every second: its peak (up to the end of the clean stop,
//!   whose drain writes the largest index file) and its value once the load is done, per
//!   vector; the index's own count (`cairn_index_memory_bytes`); the disk the load took;
//! - **queries**: one client, one query at a time, recall@10 against exact ground truth (an
//!   exact scan of the regenerated set in this process, while the server is idle) and QPS per
//!   `ef`, the median of `--rounds` rounds;
//! - **restart**: SIGTERM (the drain writes the index file), then a start timed until the
//!   server is ready, its memory again, and the queries again at the `ef` that first reached
//!   recall 0.95;
//! - **the largest collection that fits**: `(memory − the server's resident set before the
//!   load) ÷ peak anonymous bytes per vector`, and the disk's free space over the disk bytes
//!   per vector — extrapolations from this run, printed as such.
//!
//! The set is generated chunk by chunk from one seed (the clusters of `standalone`'s hard
//! set: 100 clusters, spread 1.0, 24 intrinsic dimensions), so neither the set nor its
//! request bodies are ever whole in this process.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use cairn_index::dataset::{clustered_with_structure, recall_at_k, ClusterSpec, Vectors};
use cairn_index::{Metric, Neighbor, VectorStore};
use cairn_testkit::CairnProcess;
use parking_lot::Mutex;
use serde::Serialize;
use serde_json::{json, Value};

use crate::stats::{emit_json, median};

/// Options of `cairn-loadtest one-node`.
#[derive(clap::Args)]
pub struct Args {
    /// Vectors in the collection.
    #[arg(long, default_value_t = 10_000_000)]
    n: usize,
    /// Dimension.
    #[arg(long, default_value_t = 128)]
    dim: usize,
    /// Queries measured (their ground truth is an exact scan here).
    #[arg(long, default_value_t = 200)]
    queries: usize,
    /// Points per upsert request.
    #[arg(long, default_value_t = 1_000)]
    batch: usize,
    /// Upsert requests in flight.
    #[arg(long, default_value_t = 2)]
    concurrency: usize,
    /// HNSW links per node.
    #[arg(long, default_value_t = 16)]
    m: usize,
    /// HNSW construction candidate list (Qdrant's default, 100).
    #[arg(long, default_value_t = 100)]
    ef_construction: usize,
    /// Keep the vectors on disk (`on_disk: true`).
    #[arg(long)]
    on_disk: bool,
    /// Row codes the graph walks: `none`, `int8` or `binary`.
    #[arg(long, default_value = "none")]
    quantization: String,
    /// Search `ef` values, cheapest first.
    #[arg(long, value_delimiter = ',', default_value = "64,96,128,192,256,384")]
    ef: Vec<usize>,
    /// Rounds of the query sweep (QPS is the median round's).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Memory the largest-collection figure is computed for, in GiB.
    #[arg(long, default_value_t = 24.0)]
    memory_gib: f64,
    /// How long a restart may take before it counts as failed, in seconds.
    #[arg(long, default_value_t = 1_800)]
    start_timeout_secs: u64,
    /// The `cairn` binary (default: beside this one).
    #[arg(long)]
    cairn: Option<PathBuf>,
    /// Write the report as JSON here too.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// Points generated (and scanned for ground truth) at a time.
const CHUNK: usize = 100_000;

/// The set: `n` vectors of `dim` around the clusters of `standalone`'s hard set (seed 42).
#[derive(Clone, Copy)]
struct Set {
    n: usize,
    dim: usize,
}

impl Set {
    fn spec(self, n: usize, seed: u64) -> ClusterSpec {
        ClusterSpec {
            n,
            dim: self.dim,
            clusters: 100,
            spread: 1.0,
            intrinsic_dim: Some(24),
            seed,
        }
    }

    /// Chunk `i` of the base vectors: the same clusters, points of a seed of its own.
    fn chunk(self, i: usize) -> Vectors {
        let len = CHUNK.min(self.n - i * CHUNK);
        clustered_with_structure(self.spec(len, 1_000_000 + i as u64), 42)
    }

    fn chunks(self) -> usize {
        self.n.div_ceil(CHUNK)
    }

    /// The queries: the same clusters, seed 4242.
    fn queries(self, n: usize) -> Vectors {
        clustered_with_structure(self.spec(n, 4242), 42)
    }
}

/// One reading of the server's memory, from `/proc/<pid>/status`, in bytes.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Rss {
    total: u64,
    anon: u64,
    file: u64,
}

fn rss(pid: u32) -> Option<Rss> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = status.lines().find(|l| l.starts_with(name))?;
        let kib: u64 = line[name.len()..]
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()?;
        Some(kib * 1024)
    };
    Some(Rss {
        total: field("VmRSS:")?,
        anon: field("RssAnon:")?,
        file: field("RssFile:")?,
    })
}

/// Samples the server's memory every second until dropped; keeps the peak.
struct Sampler {
    stop: Arc<AtomicBool>,
    peak: Arc<Mutex<Rss>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Sampler {
    fn start(pid: u32) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(Mutex::new(Rss::default()));
        let thread = {
            let (stop, peak) = (stop.clone(), peak.clone());
            std::thread::spawn(move || {
                // Sample first, so that a run shorter than the period still has a reading.
                loop {
                    if let Some(now) = rss(pid) {
                        let mut peak = peak.lock();
                        peak.total = peak.total.max(now.total);
                        peak.anon = peak.anon.max(now.anon);
                        peak.file = peak.file.max(now.file);
                    }
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    std::thread::sleep(Duration::from_secs(1));
                }
            })
        };
        Self {
            stop,
            peak,
            thread: Some(thread),
        }
    }

    fn finish(mut self) -> Rss {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        let peak = *self.peak.lock();
        peak
    }
}

/// Bytes free on the file system holding `dir` (`df`'s available column).
fn free_disk(dir: &Path) -> anyhow::Result<u64> {
    let out = std::process::Command::new("df")
        .args(["--output=avail", "-B1"])
        .arg(dir)
        .output()
        .context("running df")?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .nth(1)
        .and_then(|l| l.trim().parse().ok())
        .context("df's available bytes")
}

/// Exact top-10 of every query over the regenerated set, chunk by chunk.
fn ground_truth(set: Set, queries: &Vectors) -> anyhow::Result<Vec<Vec<u32>>> {
    let mut best: Vec<Vec<Neighbor>> = vec![Vec::new(); queries.len()];
    for i in 0..set.chunks() {
        let rows = set.chunk(i);
        let mut store = VectorStore::with_capacity(Metric::L2, set.dim, rows.len());
        store.append(&rows.data)?;
        let offset = (i * CHUNK) as u32;
        std::thread::scope(|s| {
            let half = best.len().div_ceil(2);
            for (part, slice) in best.chunks_mut(half.max(1)).enumerate() {
                let store = &store;
                s.spawn(move || {
                    for (j, kept) in slice.iter_mut().enumerate() {
                        let q = queries.row(part * half + j);
                        let (hits, _) = store.search_exact(q, 10, None).expect("checked dimension");
                        kept.extend(
                            hits.into_iter()
                                .map(|n| Neighbor::new(n.slot + offset, n.key)),
                        );
                        kept.sort_by(|a, b| a.key.total_cmp(&b.key));
                        kept.truncate(10);
                    }
                });
            }
        });
    }
    Ok(best
        .into_iter()
        .map(|hits| hits.into_iter().map(|n| n.slot).collect())
        .collect())
}

/// What `one-node` reports.
#[derive(Debug, Serialize)]
pub struct Report {
    n: usize,
    dim: usize,
    on_disk: bool,
    quantization: String,
    m: usize,
    ef_construction: usize,
    ingest_secs: f64,
    ingest_points_per_sec: f64,
    /// Points per second in each tenth of the load.
    ingest_by_tenth: Vec<f64>,
    rss_before: Rss,
    /// The peak from the first upsert to the end of the clean stop (whose drain writes the
    /// largest index file).
    rss_peak: Rss,
    rss_after_ingest: Rss,
    /// Anonymous memory per vector once the load is done.
    anon_bytes_per_vector: f64,
    /// Anonymous memory per vector at its peak, from the first upsert to the end of the clean
    /// stop (index files are encoded in memory before they are written, so the peak is what
    /// must fit).
    peak_anon_bytes_per_vector: f64,
    total_bytes_per_vector: f64,
    index_memory_bytes: u64,
    /// Disk the load took, by the file system's free space (RocksDB, the index file and the
    /// nameless mapped files alike).
    disk_bytes: u64,
    /// (ef, recall@10, median QPS) before the restart.
    sweep: Vec<(usize, f64, f64)>,
    /// The same with `quantization.ignore` (the graph walked by the full vectors), when the
    /// collection has codes.
    sweep_full: Vec<(usize, f64, f64)>,
    stop_secs: f64,
    restart_secs: f64,
    rss_after_restart: Rss,
    /// (ef, recall@10, median QPS) after the restart, at the first ef that reached 0.95 (or
    /// the ef of the best recall, if none did).
    after_restart: Option<(usize, f64, f64)>,
    /// Vectors that fit in `--memory-gib` by the peak anonymous bytes per vector.
    largest_collection: f64,
    /// Vectors whose files fit on the data folder's disk (its free space before the load
    /// over the disk bytes per vector).
    largest_on_disk: f64,
}

pub async fn run(args: &Args) -> anyhow::Result<Report> {
    ensure!(
        ["none", "int8", "binary"].contains(&args.quantization.as_str()),
        "--quantization is none, int8 or binary"
    );
    let binary = match &args.cairn {
        Some(path) => path.clone(),
        None => cairn_testkit::find_binary()?,
    };
    let mut server = CairnProcess::start_binary(&binary, &[])?;
    server.set_start_timeout(Duration::from_secs(args.start_timeout_secs));
    let pid = server.pid().context("the server runs")?;
    let client = reqwest::Client::new();
    let mut vectors = json!({"size": args.dim, "distance": "Euclid"});
    if args.on_disk {
        vectors["on_disk"] = json!(true);
    }
    let mut create = json!({"vectors": vectors,
        "hnsw_config": {"m": args.m, "ef_construct": args.ef_construction}});
    match args.quantization.as_str() {
        "int8" => create["quantization_config"] = json!({"scalar": {"type": "int8"}}),
        "binary" => create["quantization_config"] = json!({"binary": {}}),
        _ => {}
    }
    let r = client
        .put(server.url("/collections/big"))
        .json(&create)
        .send()
        .await?;
    ensure!(r.status().is_success(), "create: {}", r.text().await?);
    let rss_before = rss(pid).context("reading the server's memory")?;
    let free_before = free_disk(&server.data_dir())?;
    println!(
        "# one-node: n={} dim={} on_disk={} quantization={} M={} efC={} batch={} concurrency={}",
        args.n,
        args.dim,
        args.on_disk,
        args.quantization,
        args.m,
        args.ef_construction,
        args.batch,
        args.concurrency
    );

    // Ingest: chunks generated on a blocking thread, bodies sent `concurrency` at a time.
    let sampler = Sampler::start(pid);
    let url = server.url("/collections/big/points?wait=true");
    let started = Instant::now();
    let mut tenths = Vec::new();
    let mut last_tenth = (Instant::now(), 0usize);
    let set = Set {
        n: args.n,
        dim: args.dim,
    };
    let (tx, mut rx) = tokio::sync::mpsc::channel::<(usize, Vectors)>(2);
    let generator = tokio::task::spawn_blocking(move || {
        for i in 0..set.chunks() {
            if tx.blocking_send((i, set.chunk(i))).is_err() {
                break;
            }
        }
    });
    let mut sent = 0usize;
    let mut in_flight = tokio::task::JoinSet::new();
    while let Some((i, rows)) = rx.recv().await {
        for (b, part) in rows.data.chunks(args.dim * args.batch).enumerate() {
            let first = i * CHUNK + b * args.batch;
            let ids: Vec<usize> = (first..first + part.len() / args.dim).collect();
            let points: Vec<&[f32]> = part.chunks(args.dim).collect();
            let body = serde_json::to_vec(&json!({"batch": {"ids": ids, "vectors": points}}))?;
            while in_flight.len() >= args.concurrency {
                in_flight
                    .join_next()
                    .await
                    .context("a request in flight")???;
            }
            let (client, url) = (client.clone(), url.clone());
            in_flight.spawn(async move {
                let r = client
                    .put(&url)
                    .header("content-type", "application/json")
                    .body(body)
                    .send()
                    .await?;
                ensure!(r.status().is_success(), "upsert: {}", r.text().await?);
                Ok::<_, anyhow::Error>(())
            });
            sent += ids.len();
            let tenth = args.n.div_ceil(10).max(1);
            if sent / tenth > tenths.len() && tenths.len() < 10 {
                let (at, count) = last_tenth;
                tenths.push((sent - count) as f64 / at.elapsed().as_secs_f64());
                last_tenth = (Instant::now(), sent);
                println!(
                    "# {sent} points in {:.0} s, anonymous memory {:.2} GiB",
                    started.elapsed().as_secs_f64(),
                    rss(pid).map_or(0.0, |r| r.anon as f64 / (1u64 << 30) as f64)
                );
            }
        }
    }
    while let Some(done) = in_flight.join_next().await {
        done??;
    }
    generator.await?;
    let ingest_secs = started.elapsed().as_secs_f64();
    let rss_after = rss(pid).context("reading the server's memory")?;
    let index_memory_bytes = index_memory(&client, &server).await?;
    let disk = free_before.saturating_sub(free_disk(&server.data_dir())?);
    println!(
        "ingest: {:.0} s, {:.0} points/s; RSS {:.2} GiB (anon {:.2}, file {:.2}); index {:.2} GiB; disk {:.2} GiB",
        ingest_secs,
        args.n as f64 / ingest_secs,
        gib(rss_after.total),
        gib(rss_after.anon),
        gib(rss_after.file),
        gib(index_memory_bytes),
        gib(disk)
    );

    // Ground truth while the server idles, then the sweep.
    let queries = set.queries(args.queries);
    let t = Instant::now();
    // Seconds of scanning on this thread: the runtime's other workers keep serving meanwhile.
    let truth = tokio::task::block_in_place(|| ground_truth(set, &queries))?;
    println!("# ground truth in {:.0} s", t.elapsed().as_secs_f64());
    let mut sweep = Vec::new();
    let mut sweep_full = Vec::new();
    for &ef in &args.ef {
        let params = json!({"hnsw_ef": ef});
        let (recall, qps) =
            measure(&client, &server, &queries, &truth, &params, args.rounds).await?;
        println!("ef {ef}: recall@10 {recall:.3}, {qps:.0} QPS");
        sweep.push((ef, recall, qps));
        if args.quantization != "none" {
            // The same graph walked by the full vectors: what the codes cost in recall.
            let params = json!({"hnsw_ef": ef, "quantization": {"ignore": true}});
            let (recall, qps) =
                measure(&client, &server, &queries, &truth, &params, args.rounds).await?;
            println!("ef {ef}, full vectors: recall@10 {recall:.3}, {qps:.0} QPS");
            sweep_full.push((ef, recall, qps));
        }
    }

    // Restart: a clean stop writes the index file; the start is timed until ready.
    let t = Instant::now();
    tokio::task::block_in_place(|| server.stop())?;
    let stop_secs = t.elapsed().as_secs_f64();
    let mut rss_peak = sampler.finish();
    // The readings taken here count too (a short run may fall between two samples).
    rss_peak.total = rss_peak.total.max(rss_after.total);
    rss_peak.anon = rss_peak.anon.max(rss_after.anon);
    rss_peak.file = rss_peak.file.max(rss_after.file);
    let t = Instant::now();
    tokio::task::block_in_place(|| server.restart())?;
    let restart_secs = t.elapsed().as_secs_f64();
    let pid = server.pid().context("the server runs")?;
    let rss_after_restart = rss(pid).context("reading the server's memory")?;
    // The cheapest ef that reached 0.95, or else the one with the best recall.
    let at = sweep
        .iter()
        .find(|(_, recall, _)| *recall >= 0.95)
        .or_else(|| sweep.iter().max_by(|a, b| a.1.total_cmp(&b.1)))
        .map(|s| s.0);
    let after_restart = match at {
        Some(ef) => {
            let params = json!({"hnsw_ef": ef});
            let (recall, qps) =
                measure(&client, &server, &queries, &truth, &params, args.rounds).await?;
            Some((ef, recall, qps))
        }
        None => None,
    };
    println!(
        "restart: stop {stop_secs:.1} s, start {restart_secs:.1} s; RSS {:.2} GiB (anon {:.2}); after: {after_restart:?}",
        gib(rss_after_restart.total),
        gib(rss_after_restart.anon)
    );
    let per_vector = |bytes: u64| bytes.saturating_sub(rss_before.anon) as f64 / args.n as f64;
    let anon_per_vector = per_vector(rss_after.anon);
    let peak_per_vector = per_vector(rss_peak.anon);
    let room = args.memory_gib * (1u64 << 30) as f64 - rss_before.total as f64;
    let report = Report {
        n: args.n,
        dim: args.dim,
        on_disk: args.on_disk,
        quantization: args.quantization.clone(),
        m: args.m,
        ef_construction: args.ef_construction,
        ingest_secs,
        ingest_points_per_sec: args.n as f64 / ingest_secs,
        ingest_by_tenth: tenths.clone(),
        rss_before,
        rss_peak,
        rss_after_ingest: rss_after,
        anon_bytes_per_vector: anon_per_vector,
        peak_anon_bytes_per_vector: peak_per_vector,
        total_bytes_per_vector: rss_after.total.saturating_sub(rss_before.total) as f64
            / args.n as f64,
        index_memory_bytes,
        disk_bytes: disk,
        sweep,
        sweep_full,
        stop_secs,
        restart_secs,
        rss_after_restart,
        after_restart,
        largest_collection: room / peak_per_vector.max(1.0),
        largest_on_disk: free_before as f64 / (disk as f64 / args.n as f64).max(1.0),
    };
    println!(
        "bytes per vector: {:.0} anonymous ({:.0} at the peak), {:.0} resident, {:.0} on disk; largest collection (extrapolated): {:.1} M vectors in {} GiB by the peak, {:.1} M by the disk",
        report.anon_bytes_per_vector,
        report.peak_anon_bytes_per_vector,
        report.total_bytes_per_vector,
        disk as f64 / args.n as f64,
        report.largest_collection / 1e6,
        args.memory_gib,
        report.largest_on_disk / 1e6
    );
    emit_json(&report, args.json.as_deref())?;
    tokio::task::block_in_place(|| server.stop())?;
    Ok(report)
}

fn gib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 30) as f64
}

async fn index_memory(client: &reqwest::Client, server: &CairnProcess) -> anyhow::Result<u64> {
    let text = client
        .get(server.url("/metrics"))
        .send()
        .await?
        .text()
        .await?;
    let prefix = "cairn_index_memory_bytes{collection=\"big\"} ";
    text.lines()
        .find_map(|l| l.strip_prefix(prefix))
        .context("no cairn_index_memory_bytes for the collection")?
        .trim()
        .parse()
        .context("a byte count")
}

/// Recall@10 and the median round's QPS with the search `params`, one query at a time.
async fn measure(
    client: &reqwest::Client,
    server: &CairnProcess,
    queries: &Vectors,
    truth: &[Vec<u32>],
    params: &Value,
    rounds: usize,
) -> anyhow::Result<(f64, f64)> {
    let url = server.url("/collections/big/points/query");
    let bodies: Vec<Vec<u8>> = queries
        .rows()
        .map(|q| serde_json::to_vec(&json!({"query": q, "limit": 10, "params": params})))
        .collect::<Result<_, _>>()?;
    let mut qps = Vec::new();
    let mut found = Vec::new();
    for _ in 0..rounds.max(1) {
        found.clear();
        let t = Instant::now();
        for body in &bodies {
            let r = client
                .post(&url)
                .header("content-type", "application/json")
                .body(body.clone())
                .send()
                .await?;
            ensure!(r.status().is_success(), "query: {}", r.text().await?);
            let answer: Value = r.json().await?;
            let ids: Vec<u32> = answer["result"]["points"]
                .as_array()
                .context("points in the answer")?
                .iter()
                .filter_map(|p| p["id"].as_u64().map(|id| id as u32))
                .collect();
            found.push(ids);
        }
        qps.push(bodies.len() as f64 / t.elapsed().as_secs_f64());
    }
    Ok((recall_at_k(&found, truth, 10), median(qps)))
}
