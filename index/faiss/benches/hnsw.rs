//! HNSW search, Cairn against FAISS: same data, same M and efConstruction, same run.
//!
//! For each data set, M and recall target, each side's smallest `ef` (from one ladder) that
//! reaches the target recall@10 is found first, outside the timing, against exact ground
//! truth computed in the same run. Criterion then times one pass over all queries on one
//! thread, so its elements/s is queries per second at that recall. An exact scan by each side
//! is the floor. Builds use both cores (rayon for Cairn, OpenMP for FAISS) and are timed once;
//! those times and bytes per vector go to stderr.
//!
//! `CAIRN_BENCH_SYNTHETIC_N` sets the synthetic set's size (default 200,000; 0 skips it).
#![allow(missing_docs, clippy::unwrap_used, clippy::print_stderr)]

mod common;

use std::time::{Duration, Instant};

use cairn_faiss::baseline::{BaselineKind, FaissIndex};
use cairn_index::flat::FlatIndex;
use cairn_index::hnsw::{Hnsw, HnswParams};
use cairn_index::{Metric, SearchParams, VectorIndex};
use common::{calibrate, hard_synthetic, shared, time_pass, Cairn, Faiss, Set, Side, K};
use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

const TARGETS: &[f64] = &[0.95, 0.99];

fn hnsw_vs_faiss(c: &mut Criterion) {
    let sets: Vec<Set> = [
        shared("siftsmall", Metric::L2),
        shared("glove50-5k-angular", Metric::Cosine),
        hard_synthetic("CAIRN_BENCH_SYNTHETIC_N"),
    ]
    .into_iter()
    .flatten()
    .collect();
    let scratch = tempfile::tempdir().unwrap();
    for set in &sets {
        let dim = set.base.dim;
        let n = set.base.len();
        floor(c, set);
        for m in [16usize, 32] {
            let params = HnswParams {
                m,
                ef_construction: 200,
                ..HnswParams::default()
            };
            let t = Instant::now();
            let cairn = Cairn(Hnsw::build(params, set.metric, dim, &set.base.data).unwrap());
            let cairn_build = t.elapsed();
            cairn_faiss::set_threads(2);
            let t = Instant::now();
            let kind = BaselineKind::Hnsw {
                m,
                ef_construction: 200,
            };
            let faiss = FaissIndex::build(kind, set.metric, dim, &set.base.data).unwrap();
            let faiss_build = t.elapsed();
            cairn_faiss::set_threads(1);
            let faiss_bytes = faiss.serialized_bytes(scratch.path()).unwrap();
            eprintln!(
                "{} M={m}: build with 2 threads cairn {:.2}s faiss {:.2}s (ratio {:.2}); bytes/vector cairn {:.0} faiss {:.0}",
                set.name,
                cairn_build.as_secs_f64(),
                faiss_build.as_secs_f64(),
                cairn_build.as_secs_f64() / faiss_build.as_secs_f64(),
                cairn.0.memory_bytes() as f64 / n as f64,
                faiss_bytes as f64 / n as f64,
            );
            let faiss = Faiss::new(faiss);
            for &target in TARGETS {
                let mut group =
                    c.benchmark_group(format!("hnsw_search/{}/M{m}/recall{target}", set.name));
                group
                    .throughput(Throughput::Elements(set.queries.len() as u64))
                    .sample_size(20)
                    .warm_up_time(Duration::from_secs(1))
                    .measurement_time(Duration::from_secs(4));
                for (name, side) in [
                    ("cairn", &cairn as &dyn Side),
                    ("faiss", &faiss as &dyn Side),
                ] {
                    let Some((ef, recall)) = calibrate(side, set, target) else {
                        eprintln!("{}: {name} M={m} never reaches {target}", set.name);
                        continue;
                    };
                    let id = BenchmarkId::new(name, format!("ef{ef}_recall{recall:.4}"));
                    time_pass(&mut group, id, side, set, ef);
                }
                group.finish();
            }
        }
    }
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

criterion_group!(benches, hnsw_vs_faiss);
criterion_main!(benches);
