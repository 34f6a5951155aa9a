//! Partitioner and meta-index tests. The routing figures are printed (`--nocapture`) because
//! they are what BENCHMARKS.md and the issue ask to report.
#![allow(clippy::print_stderr)]

use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use super::balance::partition;
use super::*;
use crate::dataset::{load_dataset, shared_data_dir, Dataset};

/// An `side × side` grid, 4-connected.
fn grid(side: usize) -> Vec<Vec<u32>> {
    let id = |r: usize, c: usize| (r * side + c) as u32;
    let mut adj = vec![Vec::new(); side * side];
    for r in 0..side {
        for c in 0..side {
            let v = id(r, c) as usize;
            if r > 0 {
                adj[v].push(id(r - 1, c));
            }
            if r + 1 < side {
                adj[v].push(id(r + 1, c));
            }
            if c > 0 {
                adj[v].push(id(r, c - 1));
            }
            if c + 1 < side {
                adj[v].push(id(r, c + 1));
            }
        }
    }
    adj
}

fn cut_of(adj: &[Vec<u32>], part: &[u32]) -> usize {
    adj.iter()
        .enumerate()
        .flat_map(|(v, ns)| ns.iter().map(move |&u| (v, u as usize)))
        .filter(|&(v, u)| u > v && part[u] != part[v])
        .count()
}

#[test]
fn grid_splits_into_balanced_blobs() {
    let adj = grid(32);
    let weights = vec![1.0; adj.len()];
    let p = partition(&adj, &weights, 4, 0.03, 8, 7);
    assert!(p.imbalance() <= 0.03 + 1e-9, "loads {:?}", p.loads);
    assert_eq!(p.cut, cut_of(&adj, &p.part));
    // Four quadrants cut 64 edges and four strips 96; a random 4-way split cuts ~1,490.
    assert!(p.cut <= 128, "cut {}", p.cut);
    assert!(p.loads.iter().all(|&l| l > 0.0));
}

#[test]
fn weighted_geometric_graph_beats_a_random_split() {
    let mut rng = StdRng::seed_from_u64(3);
    let n = 600;
    let points: Vec<(f64, f64)> = (0..n).map(|_| (rng.gen(), rng.gen())).collect();
    let mut adj = vec![Vec::new(); n];
    for v in 0..n {
        for u in 0..n {
            let (dx, dy) = (points[v].0 - points[u].0, points[v].1 - points[u].1);
            if u != v && dx * dx + dy * dy < 0.004 {
                adj[v].push(u as u32);
            }
        }
    }
    let weights: Vec<f64> = (0..n).map(|_| rng.gen_range(1..10) as f64).collect();
    let p = partition(&adj, &weights, 8, 0.03, 8, 11);
    let mean = weights.iter().sum::<f64>() / 8.0;
    assert!(
        p.imbalance() <= 0.03 + 1e-9,
        "loads {:?} mean {mean}",
        p.loads
    );
    // Balanced both ways: no part is left light either (vertex weights ≤ 9 leave the slack
    // of 3% of ~600 reachable).
    assert!(
        p.loads.iter().all(|&l| l >= 0.97 * mean - 1e-9),
        "loads {:?} mean {mean}",
        p.loads
    );
    let mut random: Vec<u32> = (0..n).map(|v| (v % 8) as u32).collect();
    random.shuffle(&mut rng);
    let random_cut = cut_of(&adj, &random);
    assert!(
        p.cut * 4 < random_cut,
        "cut {} vs random {random_cut}",
        p.cut
    );
}

#[test]
fn a_heavy_vertex_relaxes_the_capacity_to_what_is_possible() {
    // One vertex weighs a third of everything: no split into 4 can be within 3%.
    let adj = grid(4);
    let mut weights = vec![1.0; 16];
    weights[5] = 8.0;
    let p = partition(&adj, &weights, 4, 0.03, 8, 1);
    let mean = weights.iter().sum::<f64>() / 4.0;
    assert!(p.loads.iter().all(|&l| l <= mean + 8.0));
    assert!(p.loads.iter().all(|&l| l > 0.0), "{:?}", p.loads);
}

proptest! {
    #[test]
    fn every_vertex_lands_in_a_part(
        n in 1usize..60,
        parts in 1usize..9,
        edges in prop::collection::vec((0usize..60, 0usize..60), 0..200),
        weights in prop::collection::vec(0.0f64..5.0, 60),
        seed in any::<u64>(),
    ) {
        let mut adj = vec![Vec::new(); n];
        for (a, b) in edges {
            let (a, b) = (a % n, b % n);
            if a != b && !adj[a].contains(&(b as u32)) {
                adj[a].push(b as u32);
                adj[b].push(a as u32);
            }
        }
        let weights = &weights[..n];
        let p = partition(&adj, weights, parts, 0.03, 2, seed);
        prop_assert_eq!(p.part.len(), n);
        prop_assert!(p.part.iter().all(|&q| (q as usize) < parts));
        prop_assert_eq!(p.cut, cut_of(&adj, &p.part));
        let total: f64 = weights.iter().sum();
        prop_assert!((p.loads.iter().sum::<f64>() - total).abs() < 1e-6);
        for q in 0..parts.min(n) {
            prop_assert!(p.part.contains(&(q as u32)), "part {} is empty", q);
        }
    }
}

/// `count` centres drawn from `data` without k-means (FAISS is not linked here; the server's
/// meta-indexes use FAISS's k-means through [`CentroidTrainer`]).
fn sample_centres(data: &[f32], dim: usize, count: usize, seed: u64) -> Vec<f32> {
    let rows = data.len() / dim;
    let mut picks: Vec<usize> = (0..rows).collect();
    picks.shuffle(&mut StdRng::seed_from_u64(seed));
    picks[..count]
        .iter()
        .flat_map(|&i| data[i * dim..(i + 1) * dim].iter().copied())
        .collect()
}

struct Placed {
    /// Partitions holding each item.
    homes: Vec<Vec<u32>>,
    per_partition: Vec<usize>,
}

fn place(meta_index: &MetaIndex, data: &Dataset) -> Placed {
    let w = meta_index.partitions();
    let mut per_partition = vec![0; w];
    let homes = data
        .base
        .rows()
        .map(|v| match meta_index.assign(v).unwrap() {
            Assignment::One(p) => {
                per_partition[p as usize] += 1;
                vec![p]
            }
            Assignment::Two(p, s) => {
                per_partition[p as usize] += 1;
                per_partition[s as usize] += 1;
                vec![p, s]
            }
            Assignment::All => {
                per_partition.iter_mut().for_each(|c| *c += 1);
                (0..w as u32).collect()
            }
        })
        .collect();
    Placed {
        homes,
        per_partition,
    }
}

/// Routing recall@10: the share of true top-10 items stored in a partition the query visits
/// (what exact search inside the visited partitions would find), partitions touched per
/// query, and each partition's share of queries.
fn routed(
    meta_index: &MetaIndex,
    data: &Dataset,
    placed: &Placed,
    branching: usize,
) -> (f64, f64, Vec<usize>) {
    let mut found = 0;
    let mut touched = 0;
    let mut share = vec![0; meta_index.partitions()];
    for (q, truth) in data.queries.rows().zip(&data.ground_truth) {
        let (parts, _) = meta_index.route(q, Some(branching), None).unwrap();
        touched += parts.len();
        parts.iter().for_each(|&p| share[p as usize] += 1);
        found += truth[..10]
            .iter()
            .filter(|&&i| placed.homes[i as usize].iter().any(|h| parts.contains(h)))
            .count();
    }
    let nq = data.queries.len();
    (
        found as f64 / (10 * nq) as f64,
        touched as f64 / nq as f64,
        share,
    )
}

#[test]
fn siftsmall_routes_to_few_balanced_partitions() {
    let data = load_dataset(&shared_data_dir().join("siftsmall")).unwrap();
    let dim = data.base.dim;
    // Unspilled: the partitioner's balance and the hot-norm copies alone.
    let params = PyramidParams {
        spill: 0.0,
        ..PyramidParams::new(4)
    };
    let sample: Vec<f32> = data.base.rows().step_by(2).flatten().copied().collect();
    let centres = sample_centres(&sample, dim, params.centres, 1);
    let meta_index = MetaIndex::build(params, Metric::L2, dim, &sample, &centres, 1).unwrap();
    assert!(meta_index.hot_norm().is_none());
    let placed = place(&meta_index, &data);
    let mean = data.base.len() as f64 / 4.0;
    let max = *placed.per_partition.iter().max().unwrap() as f64;
    eprintln!(
        "siftsmall w=4: items per partition {:?}, sample loads {:?}, meta cut {}",
        placed.per_partition,
        meta_index.loads(),
        meta_index.cut()
    );
    assert!(max / mean <= 1.15, "{:?}", placed.per_partition);
    let (recall, touched, _) = routed(&meta_index, &data, &placed, 8);
    eprintln!("siftsmall w=4 K=8: routed recall@10 {recall:.3}, partitions touched {touched:.2}");
    assert!(recall >= 0.95, "routed recall {recall}");
    assert!(touched < 3.0, "touched {touched} of 4");
    // A wider look finds more in more partitions; K = 1 touches exactly one.
    let (narrow, one, _) = routed(&meta_index, &data, &placed, 1);
    assert!(
        (one - 1.0).abs() < 1e-9 && narrow < recall,
        "{narrow} {one}"
    );
}

#[test]
fn movielens_routes_by_direction_without_a_hot_partition() {
    let data = load_dataset(&shared_data_dir().join("movielens-mips")).unwrap();
    let dim = data.base.dim;
    // Unspilled: the partitioner's balance and the hot-norm copies alone.
    let params = PyramidParams {
        spill: 0.0,
        ..PyramidParams::new(4)
    };
    let all: Vec<f32> = data.base.rows().flatten().copied().collect();
    let mut unit = all.clone();
    unit.chunks_exact_mut(dim).for_each(normalize);
    let centres = sample_centres(&unit, dim, params.centres, 2);
    let meta_index =
        MetaIndex::build(params, Metric::InnerProduct, dim, &all, &centres, 1).unwrap();
    assert!(meta_index.hot_norm().is_some());
    let placed = place(&meta_index, &data);
    let replicated = placed.homes.iter().filter(|h| h.len() > 1).count();
    let (recall, touched, share) = routed(&meta_index, &data, &placed, 8);
    let mean = share.iter().sum::<usize>() as f64 / share.len() as f64;
    let skew = *share.iter().max().unwrap() as f64 / mean;
    eprintln!(
        "movielens w=4 K=8: routed recall@10 {recall:.3}, touched {touched:.2}, query share {share:?} \
         (max/mean {skew:.2}), {replicated} items in every partition"
    );
    assert!(recall >= 0.95, "routed recall {recall}");
    assert!(skew <= 1.5, "query share {share:?}");
    assert!(replicated * 20 <= data.base.len() + 20);

    // The norm-blind meta-index a MIPS system gets by reusing Euclidean machinery: k-means on the
    // raw vectors, every item in its nearest centre's partition, queries sent to the partitions
    // of the 8 centres with the largest inner product. Those centres are the long ones, so the
    // partitions holding them take most queries.
    let mut blind_params = params;
    blind_params.replicate_top_norms = 0.0;
    let raw_centres = sample_centres(&all, dim, params.centres, 2);
    let blind = MetaIndex::build(blind_params, Metric::L2, dim, &all, &raw_centres, 1).unwrap();
    let blind_placed = place(&blind, &data);
    let centre_part: Vec<u32> = raw_centres
        .chunks_exact(dim)
        .map(|c| match blind.assign(c).unwrap() {
            // A centre sits on itself, so it is never spilled.
            Assignment::One(p) | Assignment::Two(p, _) => p,
            Assignment::All => unreachable!("no replication asked for"),
        })
        .collect();
    for k in [2, 8] {
        let mut blind_share = vec![0usize; 4];
        let mut blind_found = 0;
        for (q, truth) in data.queries.rows().zip(&data.ground_truth) {
            let mut by_ip: Vec<(f32, u32)> = raw_centres
                .chunks_exact(dim)
                .zip(&centre_part)
                .map(|(c, &p)| (c.iter().zip(q).map(|(a, b)| a * b).sum(), p))
                .collect();
            by_ip.sort_by(|a, b| b.0.total_cmp(&a.0));
            let mut parts: Vec<u32> = by_ip[..k].iter().map(|&(_, p)| p).collect();
            parts.sort_unstable();
            parts.dedup();
            parts.iter().for_each(|&p| blind_share[p as usize] += 1);
            blind_found += truth[..10]
                .iter()
                .filter(|&&i| {
                    blind_placed.homes[i as usize]
                        .iter()
                        .any(|h| parts.contains(h))
                })
                .count();
        }
        let blind_mean = blind_share.iter().sum::<usize>() as f64 / 4.0;
        let blind_skew = *blind_share.iter().max().unwrap() as f64 / blind_mean;
        let blind_recall = blind_found as f64 / (10 * data.queries.len()) as f64;
        let (recall, _, share) = routed(&meta_index, &data, &placed, k);
        let skew = *share.iter().max().unwrap() as f64
            / (share.iter().sum::<usize>() as f64 / share.len() as f64);
        eprintln!(
            "movielens w=4 K={k}: direction routing recall@10 {recall:.3}, share {share:?} \
             (max/mean {skew:.2}); norm-blind (raw k-means, inner product to centres) recall@10 \
             {blind_recall:.3}, share {blind_share:?} (max/mean {blind_skew:.2})"
        );
    }
}

#[test]
fn survives_a_round_trip() {
    let data = load_dataset(&shared_data_dir().join("glove50-5k-angular")).unwrap();
    let dim = data.base.dim;
    let mut params = PyramidParams::new(3);
    params.centres = 48;
    let all: Vec<f32> = data.base.rows().flatten().copied().collect();
    let centres = sample_centres(&all, dim, params.centres, 3);
    let meta_index = MetaIndex::build(params, Metric::Cosine, dim, &all, &centres, 7).unwrap();
    let mut bytes = Vec::new();
    meta_index.write_to(&mut bytes);
    let back = MetaIndex::read_from(&bytes).unwrap();
    assert_eq!(back.version(), 7);
    assert_eq!(back.params(), meta_index.params());
    assert_eq!(back.cut(), meta_index.cut());
    for q in data.queries.rows().take(50) {
        assert_eq!(
            back.route(q, None, None).unwrap().0,
            meta_index.route(q, None, None).unwrap().0
        );
        assert_eq!(back.assign(q).unwrap(), meta_index.assign(q).unwrap());
    }
    let (two, _) = meta_index
        .route(data.queries.row(0), Some(48), Some(2))
        .unwrap();
    assert_eq!(two.len(), 2);
    assert!(MetaIndex::read_from(&bytes[..bytes.len() - 3]).is_err());
}

/// A meta-index written in layout 1 (before spilling and tuning) reads as unspilled, with its
/// branching as it was.
#[test]
fn reads_the_layout_before_spilling() {
    let data = load_dataset(&shared_data_dir().join("glove50-5k-angular")).unwrap();
    let dim = data.base.dim;
    let params = PyramidParams {
        centres: 48,
        spill: 0.0,
        route_recall: 0.0,
        ..PyramidParams::new(3)
    };
    let all: Vec<f32> = data.base.rows().flatten().copied().collect();
    let centres = sample_centres(&all, dim, params.centres, 3);
    let meta_index = MetaIndex::build(params, Metric::Cosine, dim, &all, &centres, 7).unwrap();
    let mut v2 = Vec::new();
    meta_index.write_to(&mut v2);
    // Layout 1 is layout 2 without the two f64s and the f32 after the seed, and format 1.
    let seed_end = 8 * 9 + 1;
    let mut v1 = 1u64.to_le_bytes().to_vec();
    v1.extend_from_slice(&v2[8..seed_end]);
    v1.extend_from_slice(&v2[seed_end + 20..]);
    let back = MetaIndex::read_from(&v1).unwrap();
    assert_eq!(back.params(), meta_index.params());
    assert_eq!(back.spill_ratio(), None);
    for q in data.queries.rows().take(20) {
        assert_eq!(back.assign(q).unwrap(), meta_index.assign(q).unwrap());
    }
}

/// Spilling stores about the asked share of items twice, in two different partitions, and
/// the share of true top-10s found at a given branching does not fall; tuning picks the
/// fewest centres reaching its target on held-apart items.
#[test]
fn spilled_items_sit_in_two_partitions_and_tuning_meets_its_target() {
    let data = load_dataset(&shared_data_dir().join("glove50-5k-angular")).unwrap();
    let dim = data.base.dim;
    let all: Vec<f32> = data.base.rows().flatten().copied().collect();
    let (held, sample) = all.split_at(500 * dim);
    let base = PyramidParams {
        centres: 64,
        route_recall: 0.0,
        ..PyramidParams::new(4)
    };
    let centres = sample_centres(sample, dim, base.centres, 5);
    let mut found = Vec::new();
    for spill in [0.0, 0.3] {
        let params = PyramidParams { spill, ..base };
        let meta_index =
            MetaIndex::build(params, Metric::Cosine, dim, sample, &centres, 1).unwrap();
        let placed = place(&meta_index, &data);
        let twice = placed.homes.iter().filter(|h| h.len() == 2).count();
        let share = twice as f64 / data.base.len() as f64;
        assert!(
            (share - spill).abs() <= 0.05,
            "spill {spill}: {share:.3} of items stored twice"
        );
        assert!(placed
            .homes
            .iter()
            .all(|h| h.len() == 1 || (h.len() == 2 && h[0] != h[1])));
        found.push(routed(&meta_index, &data, &placed, 2).0);
    }
    assert!(found[1] > found[0], "routed recall@10 at K = 2: {found:?}");

    let params = PyramidParams { spill: 0.3, ..base };
    let mut meta_index =
        MetaIndex::build(params, Metric::Cosine, dim, sample, &centres, 1).unwrap();
    let ladder = meta_index.tune_branching(sample, held, 0.9).unwrap();
    let chosen = ladder.last().unwrap();
    assert!(chosen.recall >= 0.9, "{ladder:?}");
    assert!(ladder[..ladder.len() - 1].iter().all(|p| p.recall < 0.9));
    assert_eq!(meta_index.params().branching, chosen.branching);
    assert!(ladder.windows(2).all(|w| w[0].touched <= w[1].touched));
}

#[test]
fn parameters_are_checked() {
    let data = vec![0.5; 40];
    let mut p = PyramidParams::new(2);
    p.centres = 4;
    assert!(MetaIndex::build(p, Metric::L2, 4, &data, &data[..12], 1).is_err());
    p.centres = 20;
    assert!(
        MetaIndex::build(p, Metric::L2, 4, &data, &data, 1).is_err(),
        "more centres than items"
    );
    p.centres = 1;
    assert!(p.validate().is_err(), "fewer centres than partitions");
    let mut p = PyramidParams::new(2);
    p.replicate_top_norms = 0.7;
    assert!(p.validate().is_err());
}
