//! Pyramid's routing against broadcast, in one process (issue #6; `PAPERS.md` §1).
//!
//! Both sides split a set into `w` partitions (default 8) with one HNSW each (M = 16,
//! efConstruction = 200; ip-NSW+ with its defaults for `Dot`) and merge the partitions'
//! top-10s:
//!
//! - **routed**: FAISS k-means on a sample (up to 50,000 items) to 32·w centres, the meta-HNSW,
//!   a balanced partition of its bottom layer; a query visits the partitions owning its top-K
//!   centres;
//! - **broadcast**: items dealt to partitions by id (what hash sharding does); a query visits
//!   all `w`.
//!
//! Per side and setting (K and ef for routed, ef for broadcast): recall@10 against exact ground
//! truth, partitions touched per query, distance computations per query (meta-HNSW included)
//! and single-thread QPS with the partitions searched one after another — total work, which
//! is what bounds a loaded cluster's throughput. The cheapest setting per side reaching
//! recall@10 = 0.9 and 0.95 is then timed by criterion side by side. Curves go to
//! `$CAIRN_BENCH_OUT/pyramid-<set>.csv` when that is set.
//!
//! Sets: `siftsmall`, a seeded `CAIRN_BENCH_PYRAMID_N` (default 200,000) × 128 set of 100
//! overlapping Gaussian clusters in 24-dimensional subspaces (the HNSW bench's hard set), and
//! `movielens-mips` by inner product (direction routing, top-5% norms in every partition).
#![allow(missing_docs, clippy::unwrap_used, clippy::print_stderr)]

mod common;

use std::cell::Cell;
use std::time::Duration;

use cairn_faiss::FaissTrainer;
use cairn_index::hnsw::{Hnsw, HnswParams};
use cairn_index::ipnsw::{IpNswPlus, IpNswPlusParams};
use cairn_index::pyramid::{Assignment, MetaIndex, PyramidParams};
use cairn_index::{Metric, SearchParams, VectorIndex};
use common::{
    env_usize, hard_synthetic, pass, shared, time_pass, write_csv, Set, Side, EF_LADDER, K,
};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

const TARGETS: &[f64] = &[0.9, 0.95];
const BRANCHING: &[usize] = &[1, 2, 3, 4, 6, 8, 12, 16, 24, 32];

/// Items of one partition: their global ids and the index over them.
struct Partition {
    ids: Vec<u32>,
    index: Box<dyn VectorIndex>,
}

fn build_partition(set: &Set, ids: Vec<u32>) -> Partition {
    let dim = set.base.dim;
    let vectors: Vec<f32> = ids
        .iter()
        .flat_map(|&i| set.base.row(i as usize))
        .copied()
        .collect();
    let index: Box<dyn VectorIndex> = match set.metric {
        Metric::InnerProduct => {
            let index = IpNswPlus::new(IpNswPlusParams::default(), dim).unwrap();
            index.add(&vectors).unwrap();
            Box::new(index)
        }
        metric @ (Metric::L2 | Metric::Cosine) => {
            let params = HnswParams {
                m: 16,
                ef_construction: 200,
                ..HnswParams::default()
            };
            Box::new(Hnsw::build(params, metric, dim, &vectors).unwrap())
        }
    };
    Partition { ids, index }
}

/// Partitions plus, for the routed side, the meta-index and K; `touched` counts partitions visited.
struct Cluster {
    partitions: Vec<Partition>,
    meta_index: Option<MetaIndex>,
    branching: Cell<usize>,
    touched: Cell<usize>,
}

impl Side for Cluster {
    fn knn(&self, query: &[f32], ef: usize) -> (Vec<u32>, Option<u64>) {
        let (visit, mut distances) = match &self.meta_index {
            Some(meta_index) => {
                let (parts, stats) = meta_index
                    .route(query, Some(self.branching.get()), None)
                    .unwrap();
                (parts, stats.distance_computations)
            }
            None => ((0..self.partitions.len() as u32).collect(), 0),
        };
        self.touched.set(self.touched.get() + visit.len());
        let params = SearchParams {
            ef: Some(ef),
            ..SearchParams::default()
        };
        let mut hits: Vec<(f32, u32)> = Vec::with_capacity(K * visit.len());
        for p in visit {
            let part = &self.partitions[p as usize];
            let (found, stats) = part.index.search(query, K, &params, None).unwrap();
            distances += stats.distance_computations;
            hits.extend(found.iter().map(|n| (n.key, part.ids[n.slot as usize])));
        }
        // Replicated (large-norm) items can come back from several partitions.
        hits.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        hits.dedup_by_key(|h| h.1);
        (hits.iter().take(K).map(|h| h.1).collect(), Some(distances))
    }
}

fn routed(set: &Set, w: usize) -> Cluster {
    let dim = set.base.dim;
    let n = set.base.len();
    let stride = n.div_ceil(50_000);
    let sample: Vec<f32> = set.base.rows().step_by(stride).flatten().copied().collect();
    let meta_index = MetaIndex::train(
        PyramidParams::new(w),
        set.metric,
        dim,
        &sample,
        &FaissTrainer,
        1,
    )
    .unwrap();
    let mut members = vec![Vec::new(); w];
    for (i, v) in set.base.rows().enumerate() {
        match meta_index.assign(v).unwrap() {
            Assignment::One(p) => members[p as usize].push(i as u32),
            Assignment::Two(p, s) => {
                members[p as usize].push(i as u32);
                members[s as usize].push(i as u32);
            }
            Assignment::All => members.iter_mut().for_each(|m| m.push(i as u32)),
        }
    }
    let sizes: Vec<usize> = members.iter().map(Vec::len).collect();
    eprintln!(
        "{}: routed partitions hold {sizes:?} items (meta-HNSW cut {}, {} items in all partitions)",
        set.name,
        meta_index.cut(),
        sizes.iter().sum::<usize>() - n
    );
    Cluster {
        partitions: members
            .into_iter()
            .map(|ids| build_partition(set, ids))
            .collect(),
        meta_index: Some(meta_index),
        branching: Cell::new(1),
        touched: Cell::new(0),
    }
}

fn broadcast(set: &Set, w: usize) -> Cluster {
    let mut members = vec![Vec::new(); w];
    for i in 0..set.base.len() {
        members[i % w].push(i as u32);
    }
    Cluster {
        partitions: members
            .into_iter()
            .map(|ids| build_partition(set, ids))
            .collect(),
        meta_index: None,
        branching: Cell::new(0),
        touched: Cell::new(0),
    }
}

/// One measured setting.
#[derive(Clone, Copy)]
struct Point {
    branching: usize,
    ef: usize,
    recall: f64,
    touched: f64,
    distances: f64,
    qps: f64,
}

fn sweep(cluster: &Cluster, set: &Set, branchings: &[usize]) -> Vec<Point> {
    let mut points = Vec::new();
    for &b in branchings {
        cluster.branching.set(b);
        for &ef in EF_LADDER.iter().filter(|&&ef| ef <= 256) {
            cluster.touched.set(0);
            let p = pass(cluster, set, ef);
            let point = Point {
                branching: b,
                ef,
                recall: p.recall,
                touched: cluster.touched.get() as f64 / set.queries.len() as f64,
                distances: p.distances.unwrap_or(0.0),
                qps: p.qps,
            };
            points.push(point);
            if point.recall >= 0.99 {
                break;
            }
        }
    }
    points
}

/// The setting reaching `target` with the fewest distance computations.
fn cheapest(points: &[Point], target: f64) -> Option<Point> {
    points
        .iter()
        .filter(|p| p.recall >= target)
        .min_by(|a, b| a.distances.total_cmp(&b.distances))
        .copied()
}

fn bench(c: &mut Criterion) {
    let w = env_usize("CAIRN_BENCH_PYRAMID_W", 8);
    let sets: Vec<Set> = [
        shared("siftsmall", Metric::L2),
        hard_synthetic("CAIRN_BENCH_PYRAMID_N"),
        shared("movielens-mips", Metric::InnerProduct),
    ]
    .into_iter()
    .flatten()
    .collect();
    for set in &sets {
        let routed = routed(set, w);
        let broadcast = broadcast(set, w);
        let routed_points = sweep(&routed, set, BRANCHING);
        let broadcast_points = sweep(&broadcast, set, &[0]);
        let mut rows = Vec::new();
        for (series, points) in [("routed", &routed_points), ("broadcast", &broadcast_points)] {
            for p in points.iter() {
                // One curve per K, along ef.
                let series = match series {
                    "routed" => format!("routed K={}", p.branching),
                    _ => series.to_owned(),
                };
                rows.push(format!(
                    "{series},ef={},{:.4},{:.1},{:.1},{:.2}",
                    p.ef, p.recall, p.qps, p.distances, p.touched
                ));
            }
        }
        write_csv(
            &format!("pyramid-{}", set.name),
            "series,label,recall,qps,distance_computations,partitions_touched",
            &rows,
        );
        let mut group = c.benchmark_group(format!("pyramid/{}", set.name));
        group.sample_size(10);
        group.measurement_time(Duration::from_secs(5));
        group.throughput(Throughput::Elements(set.queries.len() as u64));
        for &target in TARGETS {
            let r = cheapest(&routed_points, target);
            let b = cheapest(&broadcast_points, target);
            for (name, point) in [("routed", r), ("broadcast", b)] {
                match point {
                    Some(p) => eprintln!(
                        "{} recall≥{target}: {name:9} K={:2} ef={:3} recall {:.3}, {:.2} of {w} partitions, {:.0} distances/query, {:.0} QPS",
                        set.name, p.branching, p.ef, p.recall, p.touched, p.distances, p.qps
                    ),
                    None => eprintln!("{} recall≥{target}: {name} not reached", set.name),
                }
            }
            if let (Some(r), Some(b)) = (r, b) {
                eprintln!(
                    "{} recall≥{target}: routed touches {:.0}% of the partitions, {:.2}× the distance computations, {:.2}× the QPS of broadcast",
                    set.name,
                    100.0 * r.touched / w as f64,
                    r.distances / b.distances,
                    r.qps / b.qps
                );
            }
            for (name, cluster, point) in [("routed", &routed, r), ("broadcast", &broadcast, b)] {
                let Some(p) = point else { continue };
                cluster.branching.set(p.branching);
                let id = BenchmarkId::new(name, format!("recall{target}"));
                time_pass(&mut group, id, cluster, set, p.ef);
            }
        }
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
