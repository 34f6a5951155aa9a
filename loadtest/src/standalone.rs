//! Standalone-server performance, ours against in-process baselines in one run:
//!
//! 1. **Ingest**: REST upserts in batches (`wait=true`, so each batch is durable *and*
//!    searchable before the next is sent) against building the same HNSW in-process with the
//!    same parameters and all cores, in `--rounds` rounds that alternate the two sides; the
//!    median round is reported.
//! 2. **Query**: a single client sending one query at a time over REST against single-thread
//!    in-process search at the same `ef` **on the same graph** (the server's snapshot file,
//!    loaded here); recall@10 against exact ground truth for both. The queries run in paired
//!    blocks (see [`paired_sweep`]) and are read three ways: the server's REST+JSON work (its
//!    `/metrics` route time − its own index search time, same requests), the route time against
//!    the in-process search, and end to end through a minimal HTTP client, reqwest, and
//!    `/points/query/batch`.
//!
//! Request bodies are serialised before the clock starts: the client's JSON encoding is not
//! the server's cost.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use cairn_index::dataset::{
    clustered_gaussian, clustered_with_structure, ground_truth, recall_at_k, ClusterSpec, Vectors,
};
use cairn_index::hnsw::{Hnsw, HnswParams};
use cairn_index::persist::codec::Decoder;
use cairn_index::persist::read_file;
use cairn_index::{read_index, Metric, Placement, SearchParams, Trainers, VectorIndex};
use hdrhistogram::Histogram;
use serde_json::json;

use crate::echo::Echo;
use crate::raw_http::RawClient;
use cairn_testkit::CairnProcess;

/// The seeded synthetic data set of `standalone` and `socket-gap`.
#[derive(clap::Args)]
pub struct SetArgs {
    /// Vectors in the collection.
    #[arg(long, default_value_t = 100_000)]
    pub n: usize,
    /// Dimension.
    #[arg(long, default_value_t = 128)]
    pub dim: usize,
    /// Queries measured per setting.
    #[arg(long, default_value_t = 1000)]
    pub queries: usize,
    /// Clusters of the synthetic set and the spread of points around them (1.0 = heavily
    /// overlapping, which makes the set hard enough for recall to depend on `ef`).
    #[arg(long, default_value_t = 100)]
    pub clusters: usize,
    /// Spread of points around their cluster centre.
    #[arg(long, default_value_t = 1.0)]
    pub spread: f32,
    /// Dimensions each cluster really varies in (0: all of them, isotropic).
    #[arg(long, default_value_t = 24)]
    pub intrinsic_dim: usize,
}

impl SetArgs {
    /// The base set's generator settings (seed 42).
    pub fn spec(&self) -> ClusterSpec {
        ClusterSpec {
            n: self.n,
            dim: self.dim,
            clusters: self.clusters,
            spread: self.spread,
            intrinsic_dim: (self.intrinsic_dim > 0).then_some(self.intrinsic_dim),
            seed: 42,
        }
    }

    /// The base vectors and the queries, drawn from the same clusters (seed 4242).
    pub fn generate(&self) -> (Vectors, Vectors) {
        let spec = self.spec();
        let base = clustered_gaussian(spec);
        let queries = clustered_with_structure(
            ClusterSpec {
                n: self.queries,
                seed: 4242,
                ..spec
            },
            spec.seed,
        );
        (base, queries)
    }
}

/// Options of `cairn-loadtest standalone`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    set: SetArgs,
    /// Points per upsert request.
    #[arg(long, default_value_t = 256)]
    batch: usize,
    /// HNSW links per node.
    #[arg(long, default_value_t = 16)]
    m: usize,
    /// HNSW construction candidate list.
    #[arg(long, default_value_t = 100)]
    ef_construction: usize,
    /// Search `ef` values to sweep.
    #[arg(long, value_delimiter = ',', default_value = "32,48,64,96,128")]
    ef: Vec<usize>,
    /// The `cairn` binary (default: beside this one).
    #[arg(long)]
    cairn: Option<PathBuf>,
    /// Rounds of each comparison. Ingest: the two sides alternate and the median round's
    /// ratio is reported. Queries: every block of `--block` queries runs once per round on
    /// each side (in-process, REST, in-process after a socket round trip), and ratios are
    /// medians over all blocks.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Queries per block of the paired query comparison. Each side of a block takes ~10 ms,
    /// shorter than the noisy spells of a shared VM, so a spell spoils a few pairs instead of
    /// one side of the comparison.
    #[arg(long, default_value_t = 100)]
    block: usize,
    /// For the query phase only, give each side a core of its own: every server thread on
    /// CPU 0 and this process's query thread on CPU 1 (with `taskset`). Unpinned, the
    /// scheduler moves the server's search between cores, and on the quiet VM of
    /// BENCHMARKS.md it ran 16–61% slower than the same in-process search; pinned, 7–26%.
    /// The ingest is never pinned.
    #[arg(long)]
    pin: bool,
}

struct Latencies {
    hist: Histogram<u64>,
    total_secs: f64,
    count: usize,
    /// Sum of the `time` the server reported (handler time, excluding HTTP and transport).
    server_secs: f64,
}

impl Latencies {
    fn new() -> Self {
        Self {
            hist: Histogram::new(3)
                .unwrap_or_else(|_| unreachable!("3 significant figures is valid")),
            total_secs: 0.0,
            count: 0,
            server_secs: 0.0,
        }
    }
    fn record(&mut self, secs: f64) {
        let _ = self.hist.record((secs * 1e6).max(1.0) as u64);
        self.total_secs += secs;
        self.count += 1;
    }
    fn mean_us(&self) -> f64 {
        self.total_secs / self.count.max(1) as f64 * 1e6
    }
    fn qps(&self) -> f64 {
        self.count as f64 / self.total_secs.max(1e-12)
    }
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    let binary = match &args.cairn {
        Some(path) => path.clone(),
        None => cairn_testkit::find_binary()?,
    };
    let (base, queries) = args.set.generate();
    let truth = ground_truth(&base, &queries, Metric::L2, 10);
    let params = HnswParams {
        m: args.m,
        ef_construction: args.ef_construction,
        ef_search: 64,
        ..HnswParams::default()
    };
    println!(
        "# standalone: n={} dim={} clusters={} spread={} intrinsic_dim={} M={} efC={} batch={}",
        args.set.n,
        args.set.dim,
        args.set.clusters,
        args.set.spread,
        args.set.intrinsic_dim,
        args.m,
        args.ef_construction,
        args.batch
    );

    // Ingest, in rounds: in-process build (baseline), then REST ingest into a fresh
    // collection (ours). The timed index snapshot (every 30 s by default) would otherwise land
    // in the middle of the query sweep and show up as p99 spikes that have nothing to do with
    // queries.
    let mut server =
        CairnProcess::start_binary(&binary, &[("CAIRN__STORAGE__SNAPSHOT_EVERY_SECS", "86400")])?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let client = reqwest::Client::new();
    let mut ingest_rows = Vec::new();
    let mut ingest_ratios = Vec::new();
    for round in 1..=args.rounds.max(1) {
        let t = Instant::now();
        let built = Hnsw::build(params, Metric::L2, args.set.dim, &base.data)?;
        let build_secs = t.elapsed().as_secs_f64();
        drop(built);
        let ingest_secs = runtime.block_on(ingest(&client, &server, &base, args))?;
        ingest_ratios.push(ingest_secs / build_secs);
        ingest_rows.push(format!(
            "| {round} | {build_secs:.2} | {ingest_secs:.2} | {:.2} |",
            ingest_secs / build_secs
        ));
    }
    println!("\n## Ingest\n");
    println!(
        "In-process HNSW build on all cores against REST upserts in batches of {}, wait=true; each round builds, then ingests into a fresh collection.\n",
        args.batch
    );
    println!("| round | in-process build s | REST ingest s | ratio |\n|---:|---:|---:|---:|");
    ingest_rows.iter().for_each(|r| println!("{r}"));
    println!(
        "\nMedian ratio: **{:.2}**",
        Spread::of(ingest_ratios.into_iter()).median
    );

    // Baseline 2 searches the server's own graph: stop the server (it writes its snapshot),
    // load that file here, start the server again (it loads the same file). A graph built
    // 256 points at a time differs from a one-shot build, and comparing two different graphs
    // would mix graph quality into the REST overhead.
    server.stop()?;
    let index = load_snapshot(&server.data_dir(), args.set.n)?;
    server.restart()?;
    // A fresh client: the restarted server listens on the same port, and the old client's
    // pooled keep-alive connection to the stopped process would fail the next request.
    let client = reqwest::Client::new();
    if args.pin {
        let pid = server.pid().context("the server has no pid")?;
        pin(&["-a", "-p", "-c", "0", &pid.to_string()])?;
        // Without `-a`: only this thread, the one that runs the in-process searches and the
        // query clients. rayon's threads from the in-process build stay unpinned, and idle.
        pin(&["-p", "-c", "1", &std::process::id().to_string()])?;
        println!(
            "\nQuery phase pinned: server threads on CPU 0, this process's query thread on CPU 1."
        );
    }

    let floor = runtime.block_on(transport_floor(&client, &server))?;
    let mut raw = RawClient::connect(server.addr())?;
    let raw_floor = raw_transport_floor(&mut raw)?;
    let mut echo = Echo::start(Duration::ZERO)?;
    let mut server_rows = Vec::new();
    let mut e2e_rows = Vec::new();
    for &ef in &args.ef {
        let sweep = paired_sweep(
            index.as_ref(),
            &mut raw,
            &mut echo,
            &queries,
            &truth,
            ef,
            args.rounds.max(1),
            args.block.max(1),
        )?;
        let PairedSweep {
            local_recall,
            rest_recall,
            local,
            socket,
            minimal,
            pairs,
        } = &sweep;
        let (_, rest) = runtime.block_on(rest_search(&client, &server, &queries, &truth, ef))?;
        let before = ServerClock::read(&mut raw)?;
        let (batch_recall, batch_us) = raw_batch_search(&mut raw, &queries, &truth, ef, BATCH)?;
        // The same searches run back to back inside one request: the server's index time
        // then shows whether a slower in-server search comes from the REST work between
        // single queries or from the process itself.
        let batch_index_us = ServerClock::read(&mut raw)?.index_since(&before)?;
        ensure!(
            (batch_recall - rest_recall).abs() < 1e-9,
            "batch queries found other points than single queries"
        );
        let local_us = local.mean_us();
        let handler_us = minimal.server_secs / minimal.count.max(1) as f64 * 1e6;
        let route_us = mean(pairs.iter().map(|p| p.route_us));
        let index_us = mean(pairs.iter().map(|p| p.index_us));
        let ratio = |us: f64| (us - local_us) / local_us;
        let socket_us = socket.mean_us();
        let gap = Spread::of(pairs.iter().map(|p| p.index_us / p.local_us));
        let socket_gap = Spread::of(pairs.iter().map(|p| p.socket_us / p.local_us));
        let cross = Spread::of(pairs.iter().map(|p| (p.route_us - p.local_us) / p.local_us));
        let work = Spread::of(pairs.iter().map(|p| (p.route_us - p.index_us) / p.local_us));
        let beyond = Spread::of(
            pairs
                .iter()
                .map(|p| (p.route_us - p.socket_us) / p.local_us),
        );
        server_rows.push(format!(
            "| {ef} | {local_recall:.4} | {rest_recall:.4} | {local_us:.1} | {socket_us:.1} | {index_us:.1} | {batch_index_us:.1} | {handler_us:.1} | {route_us:.1} | {socket_gap} | {gap} | {:.1} | {work} | {:.1} | {beyond} | {:.1} | {cross} |",
            route_us - index_us,
            route_us - socket_us,
            route_us - local_us,
        ));
        e2e_rows.push(format!(
            "| {ef} | {:.0} | {:.0} | {:.1} | {} | {} | **{:.2}** | {:.1} | {} | {} | {:.2} | {batch_us:.1} | **{:.2}** |",
            local.qps(),
            minimal.qps(),
            minimal.mean_us(),
            minimal.hist.value_at_quantile(0.5),
            minimal.hist.value_at_quantile(0.99),
            ratio(minimal.mean_us()),
            rest.mean_us(),
            rest.hist.value_at_quantile(0.5),
            rest.hist.value_at_quantile(0.99),
            ratio(rest.mean_us()),
            ratio(batch_us),
        ));
    }
    println!("\n## Query: the server's REST+JSON cost (from its own `/metrics`)\n");
    println!("Route time runs from routing to the encoded response: body read, JSON decode, validation, search, JSON encode. The queries run in blocks of {}, {} rounds of every block; each block runs in-process back to back, then over REST with the server's counters read around it, then in-process again with a loopback TCP round trip of each query's request body before its search (the kernel's socket path, no REST or JSON). A noisy spell on a shared machine then lands on a few block pairs rather than on one side; ratios are the median over the {} pairs, interquartile range in brackets.\n", args.block.max(1), args.rounds.max(1), args.rounds.max(1) * args.set.queries.div_ceil(args.block.max(1)));
    println!("Readings: **REST+JSON work** = route − the server's own index search on the same requests (`cairn_index_search_seconds_sum`), ÷ the in-process search; **cross-process** = route − the in-process search, which also carries the server's search running slower than the back-to-back loop (the search ratio columns show how much of that a bare socket round trip causes); **beyond a socket** = route − the in-process search after a socket round trip, what the server adds to what any socket server pays.\n");
    println!("| ef | in-process recall@10 | REST recall@10 | in-process mean µs | in-process after a socket round trip µs | server index search mean µs | the same, {BATCH} per request µs | server handler mean µs | server route mean µs | after socket ÷ in-process | server search ÷ in-process | REST+JSON work µs | **÷ in-process** | route − in-process after socket µs | beyond a socket ÷ in-process | route − in-process µs | cross-process ÷ in-process |");
    println!(
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    server_rows.iter().for_each(|r| println!("{r}"));
    println!("\n## Query: end to end, one client on loopback\n");
    println!(
        "HTTP round trip of `GET /healthz` (no body, no search): minimal client mean {:.1} µs, reqwest mean {:.1} µs. Batch: `/points/query/batch` with {BATCH} queries per request, mean per query.\n",
        raw_floor.mean_us(),
        floor.mean_us(),
    );
    println!("| ef | in-process QPS | minimal client QPS | mean µs | p50 | p99 | overhead / in-process | reqwest mean µs | p50 | p99 | overhead / in-process | batch mean µs per query | overhead / in-process |");
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    e2e_rows.iter().for_each(|r| println!("{r}"));
    Ok(())
}

/// Runs `taskset` with `args` (util-linux, in every Debian base image).
fn pin(args: &[&str]) -> anyhow::Result<()> {
    let out = std::process::Command::new("taskset")
        .args(args)
        .output()
        .context("running taskset for --pin")?;
    ensure!(
        out.status.success(),
        "taskset {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// Queries per request in the batch measurement.
const BATCH: usize = 32;

/// Unmeasured queries each side runs before a sweep (connection, scratch, caches).
const WARMUP: usize = 20;

/// One block of queries timed on every side, one right after the other.
struct BlockPair {
    /// Mean in-process search, µs.
    local_us: f64,
    /// Mean in-process search when each query first sends its request body through a
    /// loopback socket and reads it back, µs.
    socket_us: f64,
    /// Mean server route time (routing to encoded response), µs.
    route_us: f64,
    /// Mean server index search time, µs.
    index_us: f64,
}

/// Everything one `ef` measured through [`paired_sweep`].
struct PairedSweep {
    local_recall: f64,
    rest_recall: f64,
    /// Every in-process query.
    local: Latencies,
    /// Every in-process query that followed a socket round trip.
    socket: Latencies,
    /// Every REST query through the minimal client.
    minimal: Latencies,
    pairs: Vec<BlockPair>,
}

/// Runs the queries in blocks of `block`, `rounds` times over. Each block runs three times:
/// in-process back to back; in-process with a loopback round trip of the query's request body
/// before each search (`echo`: the kernel's socket path, without REST or JSON); and over REST.
/// Every side is single-threaded and one query at a time; recall comes from the first round
/// (the later ones find the same points).
#[allow(clippy::too_many_arguments)]
fn paired_sweep(
    index: &dyn VectorIndex,
    raw: &mut RawClient,
    echo: &mut Echo,
    queries: &Vectors,
    truth: &[Vec<u32>],
    ef: usize,
    rounds: usize,
    block: usize,
) -> anyhow::Result<PairedSweep> {
    let rows: Vec<&[f32]> = queries.rows().collect();
    let bodies = query_bodies(queries, ef)?;
    let params = SearchParams {
        ef: Some(ef),
        exact: false,
        ..SearchParams::default()
    };
    let mut local = Latencies::new();
    let mut socket = Latencies::new();
    let mut minimal = Latencies::new();
    let (mut local_hits, mut rest_hits) = (Vec::new(), Vec::new());
    let mut pairs = Vec::new();
    for (row, body) in rows.iter().zip(&bodies).take(WARMUP) {
        index.search(row, 10, &params, None)?;
        echo.round_trip(body)?;
        raw.send("POST", "/collections/bench/points/query", body)?;
    }
    for round in 0..rounds {
        for (rows, bodies) in rows.chunks(block).zip(bodies.chunks(block)) {
            let local_secs = local.total_secs;
            for q in rows {
                let t = Instant::now();
                let (hits, _) = index.search(q, 10, &params, None)?;
                local.record(t.elapsed().as_secs_f64());
                if round == 0 {
                    local_hits.push(hits.iter().map(|h| h.slot).collect());
                }
            }
            let before = ServerClock::read(raw)?;
            for body in bodies {
                let t = Instant::now();
                let (status, bytes) = raw.send("POST", "/collections/bench/points/query", body)?;
                minimal.record(t.elapsed().as_secs_f64());
                ensure!(status == 200, "query failed with {status}");
                let (ids, server_secs) = parse_hits(&bytes)?;
                minimal.server_secs += server_secs;
                if round == 0 {
                    rest_hits.push(ids);
                }
            }
            let clock = ServerClock::read(raw)?.since(&before)?;
            let socket_secs = socket.total_secs;
            for (q, body) in rows.iter().zip(bodies) {
                echo.round_trip(body)?;
                let t = Instant::now();
                let (hits, _) = index.search(q, 10, &params, None)?;
                socket.record(t.elapsed().as_secs_f64());
                std::hint::black_box(hits);
            }
            pairs.push(BlockPair {
                local_us: (local.total_secs - local_secs) / rows.len() as f64 * 1e6,
                socket_us: (socket.total_secs - socket_secs) / rows.len() as f64 * 1e6,
                route_us: clock.route_us,
                index_us: clock.index_us,
            });
        }
    }
    Ok(PairedSweep {
        local_recall: recall_at_k(&local_hits, truth, 10),
        rest_recall: recall_at_k(&rest_hits, truth, 10),
        local,
        socket,
        minimal,
        pairs,
    })
}

/// The median of a sample (the upper one of an even count) and its interquartile range,
/// printed as `0.21 [0.17–0.26]`.
struct Spread {
    q1: f64,
    median: f64,
    q3: f64,
}

impl Spread {
    fn of(values: impl Iterator<Item = f64>) -> Self {
        let mut v: Vec<f64> = values.collect();
        v.sort_by(f64::total_cmp);
        let at = |q: f64| {
            v.get(((v.len().saturating_sub(1)) as f64 * q).round() as usize)
                .copied()
                .unwrap_or(f64::NAN)
        };
        Self {
            q1: at(0.25),
            median: at(0.5),
            q3: at(0.75),
        }
    }
}

impl std::fmt::Display for Spread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "**{:.2}** [{:.2}–{:.2}]", self.median, self.q1, self.q3)
    }
}

fn mean(values: impl Iterator<Item = f64>) -> f64 {
    let (sum, n) = values.fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    sum / n.max(1) as f64
}

/// Loads the index snapshot the server wrote for the `bench` collection.
fn load_snapshot(data_dir: &Path, n: usize) -> anyhow::Result<Box<dyn VectorIndex>> {
    let path = data_dir.join("collections/bench/partitions/0/index.cidx");
    let (header, payload) = read_file(&path)?;
    // The collection's snapshot payload starts with the index bytes; the slot table follows.
    let index = read_index(
        header.kind,
        Decoder::new(&payload).bytes()?,
        &Trainers::default(),
        &Placement::Memory,
    )?;
    // Points were sent in id order into an empty collection, so slot i holds id i and the
    // ground truth's base ids are slots.
    ensure!(
        index.len() == n,
        "snapshot holds {} slots, not {n}",
        index.len()
    );
    Ok(index)
}

/// Sends the queries `batch` at a time through `/points/query/batch`: (recall, mean µs per
/// query). The clock also covers parsing each response into JSON values (the single-query
/// path stops before parsing), so the batch figure errs on the slow side.
fn raw_batch_search(
    raw: &mut RawClient,
    queries: &Vectors,
    truth: &[Vec<u32>],
    ef: usize,
    batch: usize,
) -> anyhow::Result<(f64, f64)> {
    let rows: Vec<&[f32]> = queries.rows().collect();
    let bodies = rows
        .chunks(batch)
        .map(|chunk| {
            let searches: Vec<_> = chunk
                .iter()
                .map(|q| json!({"query": q, "limit": 10, "params": {"hnsw_ef": ef}}))
                .collect();
            serde_json::to_vec(&json!({ "searches": searches }))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let path = "/collections/bench/points/query/batch";
    if let Some(first) = bodies.first() {
        raw.send("POST", path, first)?;
    }
    let mut results = Vec::with_capacity(rows.len());
    let t = Instant::now();
    for body in &bodies {
        let (status, bytes) = raw.send("POST", path, body)?;
        ensure!(status == 200, "batch query failed with {status}");
        let v: serde_json::Value = serde_json::from_slice(&bytes)?;
        for response in v["result"].as_array().context("no batch result")? {
            results.push(hit_ids(&response["points"])?);
        }
    }
    let secs = t.elapsed().as_secs_f64();
    Ok((
        recall_at_k(&results, truth, 10),
        secs / rows.len() as f64 * 1e6,
    ))
}

/// The server's own account of the query route from `/metrics`: counters read before and
/// after a sweep.
struct ServerClock {
    /// `/points/query` requests answered with 200, and their seconds from routing to the
    /// encoded response (body read, JSON decode, handler, JSON encode: everything but the
    /// socket and hyper's header handling).
    route: (f64, f64),
    /// Index searches of the `bench` collection and their seconds.
    index: (f64, f64),
}

/// Mean route and index-search time per query over a sweep.
struct SweepClock {
    route_us: f64,
    index_us: f64,
}

impl ServerClock {
    fn read(raw: &mut RawClient) -> anyhow::Result<Self> {
        let (status, body) = raw.send("GET", "/metrics", b"")?;
        ensure!(status == 200, "metrics failed with {status}");
        let text = String::from_utf8(body)?;
        let value = |name: &str, labels: &str| -> f64 {
            text.lines()
                .find_map(|l| {
                    l.strip_prefix(name)?
                        .strip_prefix(labels)?
                        .trim()
                        .parse()
                        .ok()
                })
                .unwrap_or(0.0)
        };
        let route =
            r#"{method="POST",route="/collections/{collection}/points/query",status="200"}"#;
        let bench = r#"{collection="bench"}"#;
        Ok(Self {
            route: (
                value("cairn_http_request_seconds_sum", route),
                value("cairn_http_requests_total", route),
            ),
            index: (
                value("cairn_index_search_seconds_sum", bench),
                value("cairn_index_searches_total", bench),
            ),
        })
    }

    /// Means over the sweep since `before`; an error if either counter did not move (a
    /// renamed series would otherwise read as zero and yield a meaningless ratio).
    fn since(&self, before: &Self) -> anyhow::Result<SweepClock> {
        Ok(SweepClock {
            route_us: mean_us_since(self.route, before.route, "query route")?,
            index_us: self.index_since(before)?,
        })
    }

    /// Mean index-search time per query since `before`, whatever route asked for it.
    fn index_since(&self, before: &Self) -> anyhow::Result<f64> {
        mean_us_since(self.index, before.index, "index search")
    }
}

/// Mean µs per event between two `(seconds, count)` readings of a counter pair.
fn mean_us_since((s1, n1): (f64, f64), (s0, n0): (f64, f64), what: &str) -> anyhow::Result<f64> {
    ensure!(
        n1 > n0,
        "the server's {what} counter did not move during the sweep"
    );
    Ok((s1 - s0) / (n1 - n0) * 1e6)
}

fn raw_transport_floor(raw: &mut RawClient) -> anyhow::Result<Latencies> {
    let mut lat = Latencies::new();
    for i in 0..1200 {
        let t = Instant::now();
        raw.send("GET", "/healthz", b"")?;
        if i >= 200 {
            lat.record(t.elapsed().as_secs_f64());
        }
    }
    Ok(lat)
}

fn query_bodies(queries: &Vectors, ef: usize) -> anyhow::Result<Vec<Vec<u8>>> {
    Ok(queries
        .rows()
        .map(|q| serde_json::to_vec(&json!({"query": q, "limit": 10, "params": {"hnsw_ef": ef}})))
        .collect::<Result<_, _>>()?)
}

/// Hit ids and the server's reported handler time of one query response.
fn parse_hits(bytes: &[u8]) -> anyhow::Result<(Vec<u32>, f64)> {
    let v: serde_json::Value =
        serde_json::from_slice(bytes).context("query response is not JSON")?;
    Ok((
        hit_ids(&v["result"]["points"])?,
        v["time"].as_f64().unwrap_or(0.0),
    ))
}

/// The ids of a `points` list of a query response.
fn hit_ids(points: &serde_json::Value) -> anyhow::Result<Vec<u32>> {
    let points = points.as_array().context("no points in response")?;
    Ok(points
        .iter()
        .filter_map(|p| p["id"].as_u64())
        .map(|id| id as u32)
        .collect())
}

async fn ingest(
    client: &reqwest::Client,
    server: &CairnProcess,
    base: &Vectors,
    args: &Args,
) -> anyhow::Result<f64> {
    // A fresh collection each round (deleting one that is not there is a 404, ignored).
    client
        .delete(server.url("/collections/bench"))
        .send()
        .await?;
    let create = json!({"vectors": {"size": args.set.dim, "distance": "Euclid"}, "hnsw_config": {"m": args.m, "ef_construct": args.ef_construction}});
    let r = client
        .put(server.url("/collections/bench"))
        .json(&create)
        .send()
        .await?;
    ensure!(
        r.status().is_success(),
        "create failed: {}",
        r.text().await?
    );
    let bodies = upsert_bodies(base, args.batch)?;
    let url = server.url("/collections/bench/points?wait=true");
    let t = Instant::now();
    for body in bodies {
        let r = client
            .put(&url)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await?;
        ensure!(
            r.status().is_success(),
            "upsert failed: {}",
            r.text().await?
        );
    }
    Ok(t.elapsed().as_secs_f64())
}

/// The upsert request bodies of `base`, `batch` points each with ids from 0 (Qdrant's batch
/// shape), serialised once so that the client's JSON encoding is not timed.
pub fn upsert_bodies(base: &Vectors, batch: usize) -> anyhow::Result<Vec<Vec<u8>>> {
    let dim = base.dim;
    base.data
        .chunks(dim * batch)
        .enumerate()
        .map(|(b, chunk)| {
            let ids: Vec<usize> = (b * batch..b * batch + chunk.len() / dim).collect();
            let vectors: Vec<&[f32]> = chunk.chunks(dim).collect();
            Ok(serde_json::to_vec(
                &json!({"batch": {"ids": ids, "vectors": vectors}}),
            )?)
        })
        .collect()
}

/// Latency of the cheapest request: what HTTP on loopback costs before any search.
async fn transport_floor(
    client: &reqwest::Client,
    server: &CairnProcess,
) -> anyhow::Result<Latencies> {
    let url = server.url("/healthz");
    let mut lat = Latencies::new();
    for i in 0..1200 {
        let t = Instant::now();
        client.get(&url).send().await?.bytes().await?;
        if i >= 200 {
            lat.record(t.elapsed().as_secs_f64());
        }
    }
    Ok(lat)
}

async fn rest_search(
    client: &reqwest::Client,
    server: &CairnProcess,
    queries: &Vectors,
    truth: &[Vec<u32>],
    ef: usize,
) -> anyhow::Result<(f64, Latencies)> {
    let url = server.url("/collections/bench/points/query");
    let bodies = query_bodies(queries, ef)?;
    // Warm the connection and the server's thread-local scratch.
    for body in bodies.iter().take(20) {
        client
            .post(&url)
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await?
            .bytes()
            .await?;
    }
    let mut lat = Latencies::new();
    let mut results = Vec::with_capacity(bodies.len());
    for body in bodies {
        let t = Instant::now();
        let bytes = client
            .post(&url)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await?
            .bytes()
            .await?;
        lat.record(t.elapsed().as_secs_f64());
        let (ids, server_secs) = parse_hits(&bytes)?;
        lat.server_secs += server_secs;
        results.push(ids);
    }
    Ok((recall_at_k(&results, truth, 10), lat))
}
