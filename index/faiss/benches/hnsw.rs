//! HNSW search, Cairn against FAISS and `hnsw_rs`: same data, same M and efConstruction, same
//! run. FAISS runs twice over one index: `faiss` calls it once per query, as a server does,
//! and `faiss_batch` passes all queries in one call on one OpenMP thread, its fast path (one
//! visited table and one OpenMP region per call). The ANN harness in `bench/` compares more
//! libraries; this bench stays for regression checks of the engine.
//!
//! For each data set, M and recall target, each side's smallest `ef` (from one ladder) that
//! reaches the target recall@10 is found first, outside the timing, against exact ground
//! truth computed in the same run. Criterion then times one pass over all queries on one
//! thread, so its elements/s is queries per second at that recall. An exact scan by each side
//! is the floor. Builds use both cores (rayon for Cairn and `hnsw_rs`, OpenMP for FAISS) and are
//! timed once; those times, bytes per vector and Cairn's save and load times go to stderr
//! (two-thread search is the `hnsw_threads` bench). With `CAIRN_BENCH_OUT` set, recall/QPS curves of all three
//! sides go there as CSV (`cairn-loadtest plot` draws them).
//!
//! `CAIRN_BENCH_SYNTHETIC_N` sets the synthetic set's size (default 200,000; 0 skips it);
//! `CAIRN_BENCH_HNSW_RS=0` leaves `hnsw_rs` out (its 200k builds take minutes);
//! `CAIRN_BENCH_FLOOR_ONLY=1` runs only the exact scans.
#![allow(missing_docs, clippy::unwrap_used, clippy::print_stderr)]

mod common;

use std::time::{Duration, Instant};

use cairn_faiss::baseline::{BaselineKind, FaissIndex};
use cairn_index::flat::FlatIndex;
use cairn_index::hnsw::{Hnsw, HnswParams};
use cairn_index::persist::{read_file, write_file, FileHeader};
use cairn_index::{Metric, SearchParams, VectorIndex};
use common::{
    calibrate, env_usize, hard_synthetic, pass, shared, time_pass, write_csv, Cairn, Faiss,
    FaissBatch, Set, Side, EF_LADDER, K,
};
use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use hnsw_rs::prelude::{DistL2, Hnsw as HnswRsGraph};

const TARGETS: &[f64] = &[0.95, 0.99];
const EF_CONSTRUCTION: usize = 200;

fn hnsw_vs_baselines(c: &mut Criterion) {
    let sets: Vec<Set> = [
        shared("siftsmall", Metric::L2),
        shared("glove50-5k-angular", Metric::Cosine),
        hard_synthetic("CAIRN_BENCH_SYNTHETIC_N"),
    ]
    .into_iter()
    .flatten()
    .collect();
    let scratch = tempfile::tempdir().unwrap();
    // `CAIRN_BENCH_FLOOR_ONLY=1` times the exact scans alone: minutes instead of half an hour.
    let floor_only = std::env::var_os("CAIRN_BENCH_FLOOR_ONLY").is_some();
    for set in &sets {
        floor(c, set);
        if floor_only {
            continue;
        }
        for m in [16usize, 32] {
            one_setting(c, set, m, scratch.path());
        }
    }
}

/// Builds the three graphs at one M, then reports builds, memory, Cairn's reload, the curves
/// and the timed passes at each recall target.
fn one_setting(c: &mut Criterion, set: &Set, m: usize, scratch: &std::path::Path) {
    let dim = set.base.dim;
    let n = set.base.len() as f64;
    let params = HnswParams {
        m,
        ef_construction: EF_CONSTRUCTION,
        ..HnswParams::default()
    };
    let t = Instant::now();
    let cairn = Cairn(Hnsw::build(params, set.metric, dim, &set.base.data).unwrap());
    let cairn_build = t.elapsed().as_secs_f64();

    cairn_faiss::set_threads(2);
    let t = Instant::now();
    let kind = BaselineKind::Hnsw {
        m,
        ef_construction: EF_CONSTRUCTION,
    };
    let faiss = FaissIndex::build(kind, set.metric, dim, &set.base.data).unwrap();
    let faiss_build = t.elapsed().as_secs_f64();
    cairn_faiss::set_threads(1);
    let faiss_bytes = faiss.serialized_bytes(scratch).unwrap();
    let faiss = Faiss::new(faiss);
    let faiss_batch = FaissBatch(&faiss);

    let hnsw_rs = (env_usize("CAIRN_BENCH_HNSW_RS", 1) != 0).then(|| {
        let t = Instant::now();
        let graph = HnswRs::build(set, m);
        (graph, t.elapsed().as_secs_f64())
    });
    eprintln!(
        "{} M={m}: build with 2 threads cairn {cairn_build:.2}s faiss {faiss_build:.2}s (ratio {:.2}){}; bytes/vector cairn {:.0} faiss {:.0}",
        set.name,
        cairn_build / faiss_build,
        hnsw_rs
            .as_ref()
            .map(|(_, s)| format!(" hnsw_rs {s:.2}s"))
            .unwrap_or_default(),
        cairn.0.memory_bytes() as f64 / n,
        faiss_bytes as f64 / n,
    );
    reload(&cairn.0, set, m, cairn_build, scratch);

    let mut sides: Vec<(&str, &dyn Side)> = vec![
        ("cairn", &cairn),
        ("faiss", &faiss),
        ("faiss_batch", &faiss_batch),
    ];
    if let Some((graph, _)) = &hnsw_rs {
        sides.push(("hnsw_rs", graph));
    }
    curves(set, m, &sides);
    for &target in TARGETS {
        let mut group = c.benchmark_group(format!("hnsw_search/{}/M{m}/recall{target}", set.name));
        group
            .throughput(Throughput::Elements(set.queries.len() as u64))
            .sample_size(20)
            .warm_up_time(Duration::from_secs(1))
            .measurement_time(Duration::from_secs(4));
        let mut calibrated = Vec::new();
        for &(name, side) in &sides {
            let Some((ef, recall)) = calibrate(side, set, target) else {
                eprintln!("{}: {name} M={m} never reaches {target}", set.name);
                continue;
            };
            let id = BenchmarkId::new(name, format!("ef{ef}_recall{recall:.4}"));
            time_pass(&mut group, id, side, set, ef);
            calibrated.push((name, side, ef));
        }
        group.finish();
        interleaved(set, m, target, &calibrated);
    }
}

/// The same comparison timed the other way: seven rounds, each timing one pass of every side
/// in turn (the order rotating), and each side's median pass. Criterion times the sides one
/// after another, so a noisy neighbour busy during one side's few seconds skews the ratio;
/// alternating spreads such spells over all sides.
fn interleaved(set: &Set, m: usize, target: f64, sides: &[(&str, &dyn Side, usize)]) {
    let mut times = vec![Vec::new(); sides.len()];
    for round in 0..7 {
        for i in 0..sides.len() {
            let at = (i + round) % sides.len();
            let (_, side, ef) = sides[at];
            times[at].push(1.0 / pass(side, set, ef).qps);
        }
    }
    let qps: Vec<f64> = times
        .iter_mut()
        .map(|t| {
            t.sort_by(f64::total_cmp);
            1.0 / t[t.len() / 2]
        })
        .collect();
    let list: Vec<String> = sides
        .iter()
        .zip(&qps)
        .map(|((name, _, ef), q)| format!("{name} (ef {ef}) {q:.0}"))
        .collect();
    let of = |name: &str| {
        sides
            .iter()
            .position(|side| side.0 == name)
            .map_or(f64::NAN, |i| qps[i])
    };
    eprintln!(
        "{} M={m} recall {target}: interleaved median QPS {}; cairn / faiss {:.2}, cairn / faiss_batch {:.2}",
        set.name,
        list.join(", "),
        of("cairn") / of("faiss"),
        of("cairn") / of("faiss_batch")
    );
}

/// Saves Cairn's graph as the server does (header, checksum, fsync, rename) and loads it back;
/// the issue asks loading to be ≥ 10× faster than rebuilding.
fn reload(index: &Hnsw, set: &Set, m: usize, build_secs: f64, scratch: &std::path::Path) {
    let path = scratch.join(format!("{}-M{m}.idx", set.name));
    let t = Instant::now();
    let mut payload = Vec::new();
    index.write_to(&mut payload);
    let header = FileHeader {
        kind: index.kind(),
        metric: index.metric(),
        dim: index.dim() as u64,
        count: index.len() as u64,
        applied_seq: 0,
    };
    write_file(&path, &header, &payload).unwrap();
    let save = t.elapsed().as_secs_f64();
    drop(payload);
    let t = Instant::now();
    let (_, payload) = read_file(&path).unwrap();
    let loaded = Hnsw::read_from(&payload).unwrap();
    let load = t.elapsed().as_secs_f64();
    assert_eq!(loaded.len(), index.len());
    eprintln!(
        "{} M={m}: cairn save {save:.3}s, load {load:.3}s; rebuild / load = {:.0}×",
        set.name,
        build_secs / load
    );
    std::fs::remove_file(&path).unwrap();
}

/// Recall@10 against QPS for every side along the `ef` ladder, best of three passes per point
/// after one warm-up pass, up to recall 0.999 or ef 512.
fn curves(set: &Set, m: usize, sides: &[(&str, &dyn Side)]) {
    let mut rows = Vec::new();
    for &(name, side) in sides {
        pass(side, set, EF_LADDER[0]);
        for &ef in EF_LADDER.iter().take_while(|&&ef| ef <= 512) {
            let passes: Vec<_> = (0..3).map(|_| pass(side, set, ef)).collect();
            let best = passes.iter().map(|p| p.qps).fold(0.0, f64::max);
            let first = &passes[0];
            let distances = first.distances.map_or(String::new(), |d| format!("{d:.0}"));
            rows.push(format!(
                "{name},ef={ef},{:.4},{best:.0},{distances}",
                first.recall
            ));
            if first.recall >= 0.999 {
                break;
            }
        }
    }
    write_csv(
        &format!("hnsw-{}-M{m}", set.name),
        "series,label,recall,qps,distance_computations",
        &rows,
    );
}

/// `hnsw_rs` 0.3 (the crate the project first planned to use) as a second baseline, with its
/// AVX2 kernels (`simdeez_f`). Cosine sets are normalised and searched by L2, which ranks
/// identically.
struct HnswRs {
    graph: HnswRsGraph<'static, f32, DistL2>,
    normalise: bool,
}

impl HnswRs {
    fn build(set: &Set, m: usize) -> Self {
        let normalise = set.metric == Metric::Cosine;
        let rows: Vec<Vec<f32>> = set
            .base
            .rows()
            .map(|r| prepare(r, normalise).into_owned())
            .collect();
        let mut graph = HnswRsGraph::new(m, rows.len(), 16, EF_CONSTRUCTION, DistL2 {});
        let refs: Vec<(&Vec<f32>, usize)> = rows.iter().zip(0..).collect();
        graph.parallel_insert(&refs);
        graph.set_searching_mode(true);
        Self { graph, normalise }
    }
}

impl Side for HnswRs {
    fn knn(&self, query: &[f32], ef: usize) -> (Vec<u32>, Option<u64>) {
        let query = prepare(query, self.normalise);
        let hits = self.graph.search(&query, K, ef);
        (hits.iter().map(|h| h.d_id as u32).collect(), None)
    }
}

fn prepare(v: &[f32], normalise: bool) -> std::borrow::Cow<'_, [f32]> {
    if !normalise {
        return v.into();
    }
    let norm = v
        .iter()
        .map(|x| x * x)
        .sum::<f32>()
        .sqrt()
        .max(f32::MIN_POSITIVE);
    v.iter().map(|x| x / norm).collect::<Vec<f32>>().into()
}

/// Exact scans: what the graph buys over reading every vector.
fn floor(c: &mut Criterion, set: &Set) {
    let dim = set.base.dim;
    let cairn = FlatIndex::new(set.metric, dim);
    cairn.add(&set.base.data).unwrap();
    cairn_faiss::set_threads(1);
    let faiss = FaissIndex::build(BaselineKind::Flat, set.metric, dim, &set.base.data).unwrap();
    let mut group = c.benchmark_group(format!("flat_scan/{}", set.name));
    group
        .throughput(Throughput::Elements(set.queries.len() as u64))
        .sample_size(10)
        .measurement_time(Duration::from_secs(4));
    let exact = SearchParams {
        ef: None,
        exact: true,
        ..SearchParams::default()
    };
    group.bench_function("cairn", |b| {
        b.iter(|| {
            for q in set.queries.rows() {
                black_box(cairn.search(black_box(q), K, &exact, None).unwrap());
            }
        })
    });
    group.bench_function("faiss", |b| {
        b.iter(|| {
            for q in set.queries.rows() {
                black_box(faiss.search(black_box(q), K).unwrap());
            }
        })
    });
    group.finish();
}

criterion_group!(benches, hnsw_vs_baselines);
criterion_main!(benches);
