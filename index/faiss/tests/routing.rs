//! Content routing on real embeddings, in one process (issue #22's routing goal): a meta-index
//! trained the way the server trains it (FAISS k-means through `CentroidTrainer`, a sample of
//! the collection, `branching` tuned on points held apart from that sample), then the set's
//! own held-apart queries routed against their exact top-10.
//!
//! Routed recall@10 here is the share of a query's exact top-10 stored in a partition it
//! visits — what exact search inside the visited partitions finds, so broadcast's is 1.0 and
//! the index inside a partition plays no part. Memory is the copies stored over the points.
//!
//! `routing_study` prints the grid behind the defaults (spill share × branching) and asserts the
//! goal at the defaults: recall@10 ≥ 0.95 touching ≤ 35% of 8 partitions, on glove50 (cosine,
//! 50-d) and pypi-minilm (cosine, 384-d sentence embeddings).
#![allow(missing_docs, clippy::unwrap_used, clippy::print_stderr)]

use cairn_faiss::FaissTrainer;
use cairn_index::dataset::{load_dataset, shared_data_dir, Dataset};
use cairn_index::pyramid::{Assignment, MetaIndex, PyramidParams, DEFAULT_SPILL};
use cairn_index::Metric;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;

const PARTITIONS: usize = 8;
/// Points held apart from the training sample to tune branching on (as the server does).
const TUNE_QUERIES: usize = 1000;

struct Measured {
    recall: f64,
    touched: f64,
}

/// Routed recall@10 and partitions touched for the set's queries at `branching`.
fn measure(
    meta_index: &MetaIndex,
    data: &Dataset,
    stored: &[Assignment],
    branching: usize,
) -> Measured {
    measure_by(data, stored, |q| {
        meta_index.route(q, Some(branching), None).unwrap().0
    })
}

/// Routed recall@10 and partitions touched for the set's queries routed by `route`.
fn measure_by(
    data: &Dataset,
    stored: &[Assignment],
    route: impl Fn(&[f32]) -> Vec<u32>,
) -> Measured {
    let (mut found, mut touched) = (0usize, 0usize);
    for (q, truth) in data.queries.rows().zip(&data.ground_truth) {
        let parts = route(q);
        touched += parts.len();
        found += truth[..10]
            .iter()
            .filter(|&&i| parts.iter().any(|&p| stored[i as usize].includes(p)))
            .count();
    }
    let n = data.queries.len();
    Measured {
        recall: found as f64 / (10 * n) as f64,
        touched: touched as f64 / n as f64,
    }
}

/// Trains on the base minus [`TUNE_QUERIES`] held-apart points, tunes branching on those, and
/// places every base point. Returns the meta-index, each point's assignment and the copies
/// stored per point.
fn train(
    data: &Dataset,
    metric: Metric,
    params: PyramidParams,
) -> (MetaIndex, Vec<Assignment>, f64) {
    let dim = data.base.dim;
    let mut order: Vec<usize> = (0..data.base.len()).collect();
    order.shuffle(&mut StdRng::seed_from_u64(22));
    let (held, kept) = order.split_at(TUNE_QUERIES);
    let sample: Vec<f32> = kept
        .iter()
        .flat_map(|&i| data.base.row(i))
        .copied()
        .collect();
    let queries: Vec<f32> = held
        .iter()
        .flat_map(|&i| data.base.row(i))
        .copied()
        .collect();
    let mut meta_index = MetaIndex::train(params, metric, dim, &sample, &FaissTrainer, 1).unwrap();
    if params.route_recall > 0.0 {
        meta_index
            .tune_branching(&sample, &queries, params.route_recall)
            .unwrap();
    }
    let stored: Vec<Assignment> = data
        .base
        .rows()
        .map(|v| meta_index.assign(v).unwrap())
        .collect();
    let copies: usize = stored
        .iter()
        .map(|a| match a {
            Assignment::One(_) => 1,
            Assignment::Two(..) => 2,
            Assignment::All => PARTITIONS,
        })
        .sum();
    (meta_index, stored, copies as f64 / data.base.len() as f64)
}

/// The centres the server trains a collection of `n` points with (`routing::centres_for`).
fn server_centres(n: usize) -> usize {
    (n / 32).clamp(8 * PARTITIONS, 32 * PARTITIONS)
}

#[test]
fn routing_study() {
    let sets = std::env::var("CAIRN_ROUTING_SETS")
        .unwrap_or_else(|_| "glove50-5k-angular,pypi-minilm".into());
    let spills: Vec<f64> = std::env::var("CAIRN_ROUTING_SPILLS")
        .map(|s| s.split(',').map(|x| x.parse().unwrap()).collect())
        .unwrap_or_else(|_| vec![0.0, DEFAULT_SPILL]);
    let mut failures = Vec::new();
    for name in sets.split(',') {
        let data = load_dataset(&shared_data_dir().join(name)).unwrap();
        let n = data.base.len();
        let centres = server_centres(n);
        eprintln!(
            "{name}: {n} points, {} dims, {centres} centres, {PARTITIONS} partitions",
            data.base.dim
        );
        eprintln!(
            "  spill | memory | tuned K | recall@10 | touched | ladder (K: recall / touched)"
        );
        for &spill in &spills {
            let params = PyramidParams {
                centres,
                spill,
                ..PyramidParams::new(PARTITIONS)
            };
            let (meta_index, stored, memory) = train(&data, Metric::Cosine, params);
            let tuned = meta_index.params().branching;
            let at = measure(&meta_index, &data, &stored, tuned);
            let ladder: Vec<String> = [1, 2, 3, 4, 6, 8, 12, 16]
                .iter()
                .map(|&k| {
                    let m = measure(&meta_index, &data, &stored, k);
                    format!("{k}: {:.3}/{:.2}", m.recall, m.touched)
                })
                .collect();
            eprintln!(
                "  {spill:.2} | {memory:.3}× | {tuned} | {:.3} | {:.2} of {PARTITIONS} | {}",
                at.recall,
                at.touched,
                ladder.join(", ")
            );
            if spill == DEFAULT_SPILL && (at.recall < 0.95 || at.touched > 0.35 * PARTITIONS as f64)
            {
                failures.push(format!(
                    "{name}: recall@10 {:.3} touching {:.2} of {PARTITIONS}",
                    at.recall, at.touched
                ));
            }
        }
    }
    assert!(failures.is_empty(), "routing goal missed: {failures:?}");
}
