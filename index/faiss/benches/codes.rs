//! What row codes buy a graph search (Qdrant's scalar and binary quantization, issue #24, and
//! vectors on disk, issue #25): one HNSW graph searched five ways — by its full rows, by int8
//! codes and by binary codes, both re-ranked by the full rows, and the same two with the full
//! rows in a memory-mapped file (`on_disk`) — at the same recall@10 against exact ground truth.
//!
//! One graph is built per set (M = 16, efConstruction = 200, both cores) and written to bytes;
//! the copies read back from them keep int8 or binary codes, so every side walks the same
//! links. The full-row side is the int8 copy searched with `ignore_quantization`. The mapped
//! sides' rows stay in the page cache here (the machine has RAM to spare): they measure the
//! cost of the mapping and the resident bytes, not reads from disk. For
//! each recall target each side's smallest `ef` reaching it is found first (the fine ladder,
//! outside the timing); then `CAIRN_BENCH_ROUNDS` (default 7) rounds each time one pass per
//! side over the queries on one thread, the sides' order rotating by round. Reported: median
//! QPS per side, the spread (min–max), the ratio to the full-row side, and bytes per vector.
//!
//! Sets: the hard synthetic 200k × 128 (`CAIRN_BENCH_SYNTHETIC_N`, L2; recall 0.95 needs
//! FAISS ef ≈ 64 at M = 16) and `pypi-minilm` (50k × 384 real sentence embeddings, cosine).
#![allow(
    missing_docs,
    clippy::unwrap_used,
    clippy::print_stderr,
    clippy::print_stdout
)]

mod common;

use std::time::Instant;

use cairn_index::hnsw::{Hnsw, HnswParams};
use cairn_index::{Metric, Placement, RowCodes, SearchParams, VectorIndex};
use common::{calibrate, env_usize, hard_synthetic, shared, Set, Side, K};

const TARGETS: &[f64] = &[0.9, 0.95, 0.99];

/// One way of searching a graph: the index and the per-query knobs.
struct Searched {
    name: &'static str,
    index: Hnsw,
    params: SearchParams,
}

impl Side for Searched {
    fn knn(&self, query: &[f32], ef: usize) -> (Vec<u32>, Option<u64>) {
        let params = SearchParams {
            ef: Some(ef),
            ..self.params
        };
        let (hits, stats) = self.index.search(query, K, &params, None).unwrap();
        (
            hits.iter().map(|h| h.slot).collect(),
            Some(stats.distance_computations),
        )
    }
}

fn main() {
    let sets: Vec<Set> = [
        hard_synthetic("CAIRN_BENCH_SYNTHETIC_N"),
        shared("pypi-minilm", Metric::Cosine),
    ]
    .into_iter()
    .flatten()
    .collect();
    let rounds = env_usize("CAIRN_BENCH_ROUNDS", 7);
    println!("set,target,side,ef,recall,qps_median,qps_min,qps_max,ratio_to_full,bytes_per_vector");
    for set in &sets {
        let params = HnswParams {
            m: 16,
            ef_construction: 200,
            ..HnswParams::default()
        };
        let t = Instant::now();
        let graph = Hnsw::build(params, set.metric, set.base.dim, &set.base.data).unwrap();
        eprintln!("{}: built in {:.1} s", set.name, t.elapsed().as_secs_f64());
        let mut bytes = Vec::new();
        graph.write_to(&mut bytes);
        drop(graph);
        let scratch = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let on_disk = Placement::Mapped(scratch.path().to_path_buf());
        let placed = |codes: RowCodes, placement: &Placement| {
            let index = Hnsw::read_placed(&bytes, placement).unwrap();
            let t = Instant::now();
            index.set_codes(Some(codes)).unwrap();
            eprintln!(
                "{}: {} codes in {:.2} s",
                set.name,
                codes.name(),
                t.elapsed().as_secs_f64()
            );
            index
        };
        let copy = |codes: RowCodes| placed(codes, &Placement::Memory);
        let int8 = RowCodes::Int8 {
            quantile: RowCodes::DEFAULT_QUANTILE,
        };
        let sides = [
            Searched {
                name: "full",
                index: copy(int8),
                params: SearchParams {
                    ignore_quantization: true,
                    ..SearchParams::default()
                },
            },
            Searched {
                name: "int8",
                index: copy(int8),
                params: SearchParams::default(),
            },
            Searched {
                name: "binary",
                index: copy(RowCodes::Binary),
                params: SearchParams::default(),
            },
            Searched {
                name: "int8-on-disk",
                index: placed(int8, &on_disk),
                params: SearchParams::default(),
            },
            Searched {
                name: "binary-on-disk",
                index: placed(RowCodes::Binary, &on_disk),
                params: SearchParams::default(),
            },
        ];
        let n = set.base.len();
        // The full side's copy holds int8 codes it does not use: its figure is a copy's without.
        let full_bytes = Hnsw::read_from(&bytes).unwrap().memory_bytes();
        for &target in TARGETS {
            let efs: Vec<Option<(usize, f64)>> =
                sides.iter().map(|s| calibrate(s, set, target)).collect();
            let mut qps: Vec<Vec<f64>> = vec![Vec::new(); sides.len()];
            for round in 0..rounds {
                for i in 0..sides.len() {
                    let s = (i + round) % sides.len();
                    let Some((ef, _)) = efs[s] else { continue };
                    let start = Instant::now();
                    for q in set.queries.rows() {
                        std::hint::black_box(sides[s].knn(q, ef));
                    }
                    qps[s].push(set.queries.len() as f64 / start.elapsed().as_secs_f64());
                }
            }
            let median = |v: &mut Vec<f64>| {
                v.sort_by(f64::total_cmp);
                v.get(v.len() / 2).copied()
            };
            let medians: Vec<Option<f64>> = qps.iter_mut().map(median).collect();
            for (s, side) in sides.iter().enumerate() {
                let (Some((ef, recall)), Some(m)) = (efs[s], medians[s]) else {
                    println!("{},{target},{},,,,,,,", set.name, side.name);
                    continue;
                };
                let ratio = medians[0].map_or(f64::NAN, |full| m / full);
                let bytes = if s == 0 {
                    full_bytes
                } else {
                    side.index.memory_bytes()
                };
                println!(
                    "{},{target},{},{ef},{recall:.3},{m:.0},{:.0},{:.0},{ratio:.2},{:.0}",
                    set.name,
                    side.name,
                    qps[s][0],
                    qps[s][qps[s].len() - 1],
                    bytes as f64 / n as f64,
                );
            }
        }
    }
}
