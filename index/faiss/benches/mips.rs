//! Maximum inner product search on graphs: ip-NSW+ against ip-NSW and FAISS's HNSW with inner
//! product, same data, same run (issue #5; `PAPERS.md` §2).
//!
//! Per data set:
//! 1. The norm-bias statistic of the ip-NSW+ paper: the share of exact top-10 results that
//!    are among the 5% largest-norm items.
//! 2. A curve per method over the `ef` ladder: recall@10, mean distance computations per
//!    query (Cairn's indexes count them; FAISS's does not expose a count here) and QPS of one
//!    single-thread pass — written to `$CAIRN_BENCH_OUT/mips-<set>.csv` when that is set, for
//!    `cairn-loadtest plot`.
//! 3. Criterion times one pass over all queries at each method's smallest `ef` reaching
//!    recall@10 = 0.9 and 0.95, so its elements/s is QPS at that recall, side by side.
//!
//! Sets: `movielens-mips` (real, long-tailed norms); a synthetic long-tailed set of
//! `CAIRN_BENCH_MIPS_N` (default 200,000) × 64 vectors — uniform directions, log-normal
//! norms with σ = 0.8, the spread of movielens-mips' norms (its log-norm IQR gives σ ≈ 0.73
//! and its p10–p90 range σ ≈ 0.85), fixed seed; and `siftsmall` and `glove50-5k-angular`
//! searched by inner product as controls whose norms are not long-tailed.
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

use std::time::{Duration, Instant};

use cairn_faiss::baseline::{BaselineKind, FaissIndex};
use cairn_index::hnsw::{Hnsw, HnswParams};
use cairn_index::ipnsw::{IpNswPlus, IpNswPlusParams};
use cairn_index::lsh::{LshParams, RangeLsh};
use cairn_index::{Metric, VectorIndex};
use common::{
    calibrate, mips_sets, pass, time_pass, write_csv, Cairn, Faiss, Set, Side, EF_LADDER,
};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

const TARGETS: &[f64] = &[0.9, 0.95];
const M: usize = 32;
const EF_CONSTRUCTION: usize = 200;

/// Share of the exact top-10 results that lie among the top 5% of items by norm.
fn norm_bias(set: &Set) -> f64 {
    let norms: Vec<f32> = set
        .base
        .rows()
        .map(|r| r.iter().map(|x| x * x).sum::<f32>().sqrt())
        .collect();
    let mut sorted = norms.clone();
    sorted.sort_unstable_by(|a, b| b.total_cmp(a));
    let cut = sorted[(sorted.len() / 20).saturating_sub(1)];
    let (mut inside, mut all) = (0usize, 0usize);
    for truth in &set.truth {
        for &slot in truth {
            all += 1;
            inside += usize::from(norms[slot as usize] >= cut);
        }
    }
    inside as f64 / all as f64
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
            norm_bias(set)
        );
        lsh(set);
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
        let faiss = timed("faiss-hnsw-ip", &|| {
            cairn_faiss::set_threads(2);
            let kind = BaselineKind::Hnsw {
                m: M,
                ef_construction: EF_CONSTRUCTION,
            };
            let index = FaissIndex::build(kind, Metric::InnerProduct, dim, &set.base.data).unwrap();
            cairn_faiss::set_threads(1);
            Box::new(Faiss::new(index))
        });
        let sides: [(&str, &dyn Side); 3] = [
            ("ip-nsw+", plus.as_ref()),
            ("ip-nsw", ip_nsw.as_ref()),
            ("faiss-hnsw-ip", faiss.as_ref()),
        ];

        let mut rows = Vec::new();
        for (name, side) in sides {
            for &ef in EF_LADDER {
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
