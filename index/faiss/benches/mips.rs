//! Maximum inner product search on graphs: ip-NSW+ against ip-NSW, FAISS's HNSW with inner
//! product (one query per call and, its fast path, all queries in one call) and the two
//! trivial baselines any reader would try (issue #26): an exact scan of the largest-norm items
//! and the reduction of MIPS to L2 search by one appended coordinate, on Cairn's own HNSW.
//! Same data, same run (issues #5 and #26; `PAPERS.md` §2).
//!
//! Per data set:
//! 1. The norm-bias statistic of the ip-NSW+ paper: the share of exact top-10 results that
//!    are among the 5% largest-norm items.
//! 2. A curve per method over the `ef` ladder: recall@10, mean distance computations per
//!    query (Cairn's indexes count them; FAISS's does not expose a count here) and QPS of one
//!    single-thread pass — written to `$CAIRN_BENCH_OUT/mips-<set>.csv` when that is set, for
//!    `cairn-loadtest plot`.
//! 3. Criterion times one pass over all queries at each method's smallest `ef` reaching
//!    recall@10 = 0.9, 0.95 and 0.99, so its elements/s is QPS at that recall, side by side.
//!    The norm scan's knob is the number of items it scans (p% of the set: the smallest that
//!    reaches the recall), on its own ladder.
//!
//! Sets (`common::mips_sets`): `movielens-mips` (real, long-tailed norms); a synthetic
//! long-tailed set of `CAIRN_BENCH_MIPS_N` (default 200,000) × 64 vectors — uniform
//! directions, log-normal norms with σ = 0.8, the spread of movielens-mips' norms (its
//! log-norm IQR gives σ ≈ 0.73 and its p10–p90 range σ ≈ 0.85), fixed seed — whose norm bias
//! is 1.0, and the same directions with the σ of each norm bias of `CAIRN_BENCH_MIPS_BIAS`;
//! `siftsmall` and `glove50-5k-angular` (GloVe as published, unnormalised), searched by inner
//! product. `CAIRN_BENCH_MIPS_LSH=0` skips step 4.
//!
//! Every graph uses M = 32 (64 links on layer 0, FAISS included) and efConstruction = 200;
//! ip-NSW+'s angular graph uses the authors' cos_M = 10, cos_efC = 100, cos_ef = 1.
//!
//! 4. Hashing at 32 bits per item: SimpleLSH (32 hash bits) against Range-LSH (32 ranges,
//!    27 hash bits, shift 0.4), recall@10 among T probed items for T = 2⁶…2¹⁷ — the papers'
//!    measure, work rather than time — written to `$CAIRN_BENCH_OUT/lsh-<set>.csv` with
//!    the probed items as its `distance_computations` column.
#![allow(missing_docs, clippy::unwrap_used, clippy::print_stderr)]

mod common;

use std::cell::RefCell;
use std::time::{Duration, Instant};

use cairn_faiss::baseline::{BaselineKind, FaissIndex};
use cairn_index::dataset::norm_bias;
use cairn_index::flat::FlatIndex;
use cairn_index::hnsw::{Hnsw, HnswParams};
use cairn_index::ipnsw::{IpNswPlus, IpNswPlusParams};
use cairn_index::lsh::{LshParams, RangeLsh};
use cairn_index::mips_auto::{norm_spread, Choice};
use cairn_index::norm_scan::{NormScan as NormScanIndex, NormScanParams};
use cairn_index::{Metric, SearchParams, VectorIndex};
use common::{
    calibrate, env_usize, mips_sets, pass, time_pass, write_csv, Cairn, Faiss, FaissBatch, Set,
    Side, K,
};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

const TARGETS: &[f64] = &[0.9, 0.95, 0.99];
const M: usize = 32;
const EF_CONSTRUCTION: usize = 200;

/// The first trivial baseline: an exact scan of the `t` largest-norm items, `t` being its knob
/// (its ladder runs from 10 items to all of them in steps of ~8%). At norm bias 1.0 the top
/// 5% hold every answer, and this scan is hard to beat.
struct NormScan {
    /// Item ids by norm, largest first.
    order: Vec<u32>,
    /// Their rows, in that order.
    rows: Vec<f32>,
    dim: usize,
    /// The flat index over the first `t` rows, for the last `t` asked (a pass asks one).
    scan: RefCell<Option<(usize, FlatIndex)>>,
}

impl NormScan {
    fn new(set: &Set) -> Self {
        let dim = set.base.dim;
        let norm = |i: u32| set.base.row(i as usize).iter().map(|x| x * x).sum::<f32>();
        let mut order: Vec<u32> = (0..set.base.len() as u32).collect();
        order.sort_by(|&a, &b| norm(b).total_cmp(&norm(a)).then(a.cmp(&b)));
        let rows = order
            .iter()
            .flat_map(|&i| set.base.row(i as usize).iter().copied())
            .collect();
        Self {
            order,
            rows,
            dim,
            scan: RefCell::new(None),
        }
    }
}

impl Side for NormScan {
    fn knn(&self, query: &[f32], t: usize) -> (Vec<u32>, Option<u64>) {
        let t = t.clamp(1, self.order.len());
        let mut scan = self.scan.borrow_mut();
        if scan.as_ref().is_none_or(|(at, _)| *at != t) {
            let flat = FlatIndex::new(Metric::InnerProduct, self.dim);
            flat.add(&self.rows[..t * self.dim]).unwrap();
            *scan = Some((t, flat));
        }
        let (_, flat) = scan.as_ref().unwrap();
        let (hits, _) = flat
            .search(query, K, &SearchParams::default(), None)
            .unwrap();
        (
            hits.iter().map(|h| self.order[h.slot as usize]).collect(),
            Some(t as u64),
        )
    }

    fn ladder(&self) -> Vec<usize> {
        depth_ladder(self.order.len())
    }

    fn curve(&self) -> Vec<usize> {
        depth_curve(self.order.len())
    }
}

/// The items a norm scan reads, from 10 to all of them in steps of ~8%.
fn depth_ladder(n: usize) -> Vec<usize> {
    let mut ladder = vec![10usize.min(n)];
    while let Some(&last) = ladder.last().filter(|&&t| t < n) {
        ladder.push(((last as f64 * 1.08).round() as usize).max(last + 1).min(n));
    }
    ladder
}

/// A norm scan's recall curve: 0.1% to all of the items.
fn depth_curve(n: usize) -> Vec<usize> {
    [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0]
        .iter()
        .map(|p| ((n as f64 * p).ceil() as usize).max(10))
        .collect()
}

/// Cairn's answer to the first baseline (`index/src/norm_scan`): the same items in the same
/// order, read as byte codes, the `k × oversampling` best re-ranked by their rows; its knob
/// is the same count of items, on the same ladder.
struct CodedNormScan(Cairn<NormScanIndex>);

impl Side for CodedNormScan {
    fn knn(&self, query: &[f32], t: usize) -> (Vec<u32>, Option<u64>) {
        self.0.knn(query, t)
    }

    fn ladder(&self) -> Vec<usize> {
        depth_ladder(self.0 .0.len())
    }

    fn curve(&self) -> Vec<usize> {
        depth_curve(self.0 .0.len())
    }
}

/// The second: the reduction of MIPS to nearest-neighbour search (Bachrach et al., RecSys
/// 2014; SimpleLSH's transform). Every item gets one more coordinate, √(Φ² − |x|²) with Φ
/// the largest norm, so all items have norm Φ and the nearest in L2 to (q, 0) is the largest
/// inner product with q. Cairn's own L2 HNSW searches the result.
struct AppendCoordinate(Cairn<Hnsw>);

impl AppendCoordinate {
    fn build(params: HnswParams, set: &Set) -> Self {
        let dim = set.base.dim;
        let squared: Vec<f64> = set
            .base
            .rows()
            .map(|r| r.iter().map(|&x| f64::from(x) * f64::from(x)).sum())
            .collect();
        let phi_squared = squared.iter().copied().fold(0.0, f64::max);
        let mut rows = Vec::with_capacity(set.base.len() * (dim + 1));
        for (row, s) in set.base.rows().zip(&squared) {
            rows.extend_from_slice(row);
            rows.push((phi_squared - s).max(0.0).sqrt() as f32);
        }
        let index = Hnsw::new(params, Metric::L2, dim + 1).unwrap();
        index.add(&rows).unwrap();
        Self(Cairn(index))
    }
}

impl Side for AppendCoordinate {
    fn knn(&self, query: &[f32], ef: usize) -> (Vec<u32>, Option<u64>) {
        let mut extended = Vec::with_capacity(query.len() + 1);
        extended.extend_from_slice(query);
        extended.push(0.0);
        self.0.knn(&extended, ef)
    }
}

/// Recall@10 among T probed items, SimpleLSH against Range-LSH at 32 bits per item.
fn lsh(set: &Set) {
    let dim = set.base.dim;
    let mut rows = Vec::new();
    let mut needed = Vec::new();
    for (name, params) in [
        ("simple-lsh-32", LshParams::simple(32)),
        ("range-lsh-32x27", LshParams::default()),
    ] {
        let side = Cairn(RangeLsh::build(params, dim, &set.base.data).unwrap());
        let mut first_at_09 = None;
        for t in (6..=17).map(|e| 1usize << e) {
            let p = pass(&side, set, t);
            rows.push(format!("{name},T={t},{:.4},{:.0},{t}", p.recall, p.qps));
            if p.recall >= 0.9 && first_at_09.is_none() {
                first_at_09 = Some(t);
            }
            if p.recall >= 0.999 || t >= 2 * set.base.len() {
                break;
            }
        }
        needed.push((name, first_at_09));
    }
    write_csv(
        &format!("lsh-{}", set.name),
        "series,label,recall,qps,distance_computations",
        &rows,
    );
    for (name, t) in needed {
        let t = t.map_or(String::from("not reached"), |t| t.to_string());
        eprintln!(
            "{}: {name} needs T = {t} probed items for recall@10 ≥ 0.9",
            set.name
        );
    }
}

fn mips(c: &mut Criterion) {
    let sets = mips_sets();
    for set in &sets {
        let dim = set.base.dim;
        eprintln!(
            "{}: {} × {dim}; share of top-10 results among the top-5% norms: {:.3}",
            set.name,
            set.base.len(),
            norm_bias(&set.base, &set.truth)
        );
        // What the `Dot` default (`mips_auto`) would build here: the norm scan or ip-NSW below
        // (every set here is within the norm scan's bound, `mips_auto::scan_rows`).
        let spread = norm_spread(&[&set.base.data[..]], dim);
        eprintln!(
            "{}: mips_auto would build {}",
            set.name,
            Choice::of(spread, set.base.len()).describe()
        );
        if env_usize("CAIRN_BENCH_MIPS_LSH", 1) != 0 {
            lsh(set);
        }
        let hnsw_params = HnswParams {
            m: M,
            ef_construction: EF_CONSTRUCTION,
            ..HnswParams::default()
        };
        let plus_params = IpNswPlusParams {
            m: M,
            ef_construction: EF_CONSTRUCTION,
            ..IpNswPlusParams::default()
        };
        let timed = |name: &str, build: &dyn Fn() -> Box<dyn Side>| {
            let t = Instant::now();
            let side = build();
            eprintln!(
                "{}: {name} built with 2 threads in {:.2}s",
                set.name,
                t.elapsed().as_secs_f64()
            );
            side
        };
        let plus = timed("ip-nsw+", &|| {
            Box::new(Cairn(
                IpNswPlus::build(plus_params, dim, &set.base.data).unwrap(),
            ))
        });
        let ip_nsw = timed("ip-nsw", &|| {
            let index = Hnsw::new_ip_nsw(hnsw_params, dim).unwrap();
            index.add(&set.base.data).unwrap();
            Box::new(Cairn(index))
        });
        let t = Instant::now();
        let faiss = {
            cairn_faiss::set_threads(2);
            let kind = BaselineKind::Hnsw {
                m: M,
                ef_construction: EF_CONSTRUCTION,
            };
            let index = FaissIndex::build(kind, Metric::InnerProduct, dim, &set.base.data).unwrap();
            cairn_faiss::set_threads(1);
            Faiss::new(index)
        };
        eprintln!(
            "{}: faiss-hnsw-ip built with 2 threads in {:.2}s",
            set.name,
            t.elapsed().as_secs_f64()
        );
        let reduced = timed("l2-reduction-hnsw", &|| {
            Box::new(AppendCoordinate::build(hnsw_params, set))
        });
        let scan = NormScan::new(set);
        let coded_scan = timed("cairn-norm-scan", &|| {
            let index =
                NormScanIndex::placed(NormScanParams::default(), dim, &Default::default()).unwrap();
            index.add(&set.base.data).unwrap();
            Box::new(CodedNormScan(Cairn(index)))
        });
        let faiss_batch = FaissBatch(&faiss);
        let sides: [(&str, &dyn Side); 7] = [
            ("ip-nsw+", plus.as_ref()),
            ("ip-nsw", ip_nsw.as_ref()),
            ("faiss-hnsw-ip", &faiss),
            ("faiss-hnsw-ip-batch", &faiss_batch),
            ("l2-reduction-hnsw", reduced.as_ref()),
            ("norm-scan", &scan),
            ("cairn-norm-scan", coded_scan.as_ref()),
        ];

        let mut rows = Vec::new();
        for (name, side) in sides {
            for ef in side.curve() {
                let p = pass(side, set, ef);
                let distances = p.distances.map_or(String::new(), |d| format!("{d:.0}"));
                rows.push(format!(
                    "{name},ef={ef},{:.4},{:.0},{distances}",
                    p.recall, p.qps
                ));
                if p.recall >= 0.999 {
                    break;
                }
            }
        }
        write_csv(
            &format!("mips-{}", set.name),
            "series,label,recall,qps,distance_computations",
            &rows,
        );

        for &target in TARGETS {
            let mut group = c.benchmark_group(format!("mips/{}/recall{target}", set.name));
            group
                .throughput(Throughput::Elements(set.queries.len() as u64))
                .sample_size(10)
                .warm_up_time(Duration::from_secs(1))
                .measurement_time(Duration::from_secs(3));
            for (name, side) in sides {
                let Some((ef, recall)) = calibrate(side, set, target) else {
                    eprintln!("{}: {name} never reaches {target}", set.name);
                    continue;
                };
                let distances = pass(side, set, ef)
                    .distances
                    .map_or(String::from("n/a"), |d| format!("{d:.0}"));
                eprintln!(
                    "{}: {name} reaches {target} at ef={ef} (recall {recall:.4}, {distances} distances/query)",
                    set.name
                );
                let id = BenchmarkId::new(name, format!("ef{ef}_recall{recall:.4}"));
                time_pass(&mut group, id, side, set, ef);
            }
            group.finish();
        }
    }
}

criterion_group!(benches, mips);
criterion_main!(benches);
