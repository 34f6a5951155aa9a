//! Norm-explicit quantization against plain VQ at equal bytes (issue #5; `PAPERS.md` §3).
//!
//! For each set, codebook count M ∈ {4, 8} and vector quantizer (PQ, OPQ, RQ, trained by FAISS):
//! plain VQ with M codebooks and NEQ with M − 1 direction codebooks plus one byte of relative
//! norm — the same M bytes per item — its directions trained alike (`neq-…`) or weighted by
//! ‖x‖² for inner product (`neq-ip-…`, issue #26). Every item is scored against every query by
//! lookup tables (asymmetric distance), items are ranked by that estimate, and the reported
//! figure is the papers': recall@10 within the top T, T = 16…1024 — the share of the exact top-10 that a
//! re-rank of T candidates with full vectors would find.
//!
//! Sets and sizes as in the `mips` bench (`CAIRN_BENCH_MIPS_N`, default 200,000 long-tailed
//! items). Codebooks train on at most `CAIRN_BENCH_NEQ_TRAIN` items (default 50,000; the
//! authors used the first 100,000) — the first rows, as theirs. CSV (one curve per quantizer,
//! recall against T) goes to `$CAIRN_BENCH_OUT/neq-<set>-m<M>.csv` when set; with
//! `CAIRN_BENCH_DUMP` the sets are written out first for ScaNN's quantizer (`bench/ann
//! quantizers`). One more row per M, `rq<M>-refit`, is plain RQ given NEQ-IP's codebook refit:
//! what the refit alone is worth.
#![allow(missing_docs, clippy::unwrap_used, clippy::print_stderr)]

mod common;

use std::time::Instant;

use cairn_faiss::codec::FaissTrainer;
use cairn_index::quant::{CodebookTrainer, MipsCodec, Quantizer, VqKind};
use common::{dump_set, env_usize, mips_sets, write_csv, Set, K};
use rayon::prelude::*;

const T: &[usize] = &[16, 32, 64, 128, 256, 512, 1024];

/// Recall@K within the top T by the codec's estimate, for every T.
fn recall_at_t(codec: &MipsCodec, codes: &[u8], set: &Set) -> Vec<f64> {
    recall_by(codec.code_size(), codes, set, |q| {
        let tables = codec.tables(q);
        move |c: &[u8]| codec.score(&tables, c)
    })
}

/// Recall@K within the top T when `scorer(q)` scores a code against query `q`.
fn recall_by<F, S>(m: usize, codes: &[u8], set: &Set, scorer: S) -> Vec<f64>
where
    S: Fn(&[f32]) -> F + Sync,
    F: Fn(&[u8]) -> f32,
{
    let t_max = *T.last().unwrap_or(&1024);
    let hits: Vec<Vec<usize>> = set
        .queries
        .rows()
        .collect::<Vec<_>>()
        .par_iter()
        .zip(&set.truth)
        .map(|(q, truth)| {
            let score = scorer(q);
            let mut scored: Vec<(f32, u32)> = codes
                .chunks_exact(m)
                .enumerate()
                .map(|(i, c)| (-score(c), i as u32))
                .collect();
            let t_max = t_max.min(scored.len());
            scored.select_nth_unstable_by(t_max - 1, |a, b| a.0.total_cmp(&b.0));
            let mut top = scored[..t_max].to_vec();
            top.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
            T.iter()
                .map(|&t| {
                    let head = &top[..t.min(top.len())];
                    truth[..K]
                        .iter()
                        .filter(|id| head.iter().any(|(_, i)| i == *id))
                        .count()
                })
                .collect()
        })
        .collect();
    (0..T.len())
        .map(|j| hits.iter().map(|h| h[j]).sum::<usize>() as f64 / (set.queries.len() * K) as f64)
        .collect()
}

fn main() {
    // `cargo bench` passes `--bench`; this harness takes no options.
    let train_cap = env_usize("CAIRN_BENCH_NEQ_TRAIN", 50_000);
    let sets = mips_sets();
    cairn_faiss::set_threads(2);
    sets.iter().for_each(dump_set);
    for set in &sets {
        let dim = set.base.dim;
        let train = &set.base.data[..set.base.len().min(train_cap) * dim];
        for m in [4usize, 8] {
            let header = T
                .iter()
                .map(|t| format!("T={t}"))
                .collect::<Vec<_>>()
                .join(" | ");
            eprintln!(
                "\n{} M={m}: recall@{K} within the top T | {header}",
                set.name
            );
            let mut rows = Vec::new();
            for kind in [VqKind::Pq, VqKind::Opq, VqKind::Rq] {
                for quantizer in [
                    Quantizer::Plain { kind, m },
                    Quantizer::Neq { kind, m },
                    Quantizer::NeqIp { kind, m },
                ] {
                    let t = Instant::now();
                    let codec = match MipsCodec::train(quantizer, dim, train, &FaissTrainer) {
                        Ok(c) => c,
                        Err(e) => {
                            eprintln!("{}: {} not trained: {e}", set.name, quantizer.label());
                            continue;
                        }
                    };
                    let codes = codec.encode(&set.base.data);
                    let secs = t.elapsed().as_secs_f64();
                    let recalls = recall_at_t(&codec, &codes, set);
                    let cells: Vec<String> = recalls.iter().map(|r| format!("{r:.3}")).collect();
                    eprintln!(
                        "| {} | {} | (train+encode {secs:.1}s)",
                        quantizer.label(),
                        cells.join(" | ")
                    );
                    for (t, r) in T.iter().zip(&recalls) {
                        rows.push(format!("{},T={t},{r:.4},,{t}", quantizer.label()));
                    }
                }
                if kind == VqKind::Rq {
                    let label = format!("rq{m}-refit");
                    let recalls = plain_rq_refit(m, train, set);
                    let cells: Vec<String> = recalls.iter().map(|r| format!("{r:.3}")).collect();
                    eprintln!("| {label} | {} |", cells.join(" | "));
                    for (t, r) in T.iter().zip(&recalls) {
                        rows.push(format!("{label},T={t},{r:.4},,{t}"));
                    }
                }
            }
            write_csv(
                &format!("neq-{}-m{m}", set.name),
                "series,label,recall,qps,distance_computations",
                &rows,
            );
        }
    }
}

/// Plain RQ given NEQ-IP's codebook refit (`AdditiveCodebooks::refine`, the same rounds with
/// its own objective), to show what the refit alone is worth: NEQ-IP is measured
/// against plain RQ as FAISS trains it, and this row says how much of its lead is the refit.
fn plain_rq_refit(m: usize, train: &[f32], set: &Set) -> Vec<f64> {
    let dim = set.base.dim;
    let mut books = FaissTrainer.train(VqKind::Rq, dim, m, train).unwrap();
    let rounds = books.refine(train, 2);
    eprintln!("(plain rq{m}: {rounds} refit rounds kept)");
    let codes: Vec<u8> = set
        .base
        .data
        .par_chunks_exact(dim)
        .flat_map_iter(|x| {
            let mut code = vec![0u8; m];
            books.encode(x, &mut code);
            code
        })
        .collect();
    recall_by(m, &codes, set, |q| {
        let lut = books.lut(q);
        move |c: &[u8]| lut.score(c)
    })
}
