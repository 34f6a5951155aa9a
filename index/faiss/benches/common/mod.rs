//! What the benches comparing Cairn with FAISS share: data sets with ground truth computed in
//! the same run, one `Side` interface over both libraries, and `ef` calibration against a
//! recall target. Each bench uses a subset, hence the `dead_code` allowance.
#![allow(dead_code)]

use std::cell::{Cell, RefCell};
use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use cairn_faiss::baseline::FaissIndex;
use cairn_index::dataset::{
    clustered_gaussian, clustered_with_structure, ground_truth, load_dataset, long_tailed_norms,
    long_tailed_with_bias, recall_at_k, shared_data_dir, ClusterSpec, Vectors,
};
use cairn_index::{Metric, SearchParams, VectorIndex};

/// Results per query, and the k of every recall figure.
pub const K: usize = 10;

/// `ef` values of the recall curves, smallest first (calibration uses [`fine_ladder`]).
pub const EF_LADDER: &[usize] = &[
    10, 12, 16, 20, 24, 32, 40, 48, 64, 80, 96, 128, 160, 192, 256, 320, 384, 512, 768, 1024,
];

/// A data set with its exact top-`K` under the metric it is searched by.
pub struct Set {
    pub name: String,
    pub metric: Metric,
    pub base: Vectors,
    pub queries: Vectors,
    pub truth: Vec<Vec<u32>>,
}

impl Set {
    /// A set whose ground truth is computed here, by brute force, for `metric`.
    pub fn new(name: String, metric: Metric, base: Vectors, queries: Vectors) -> Self {
        let truth = ground_truth(&base, &queries, metric, K);
        Self {
            name,
            metric,
            base,
            queries,
            truth,
        }
    }
}

/// One of `../shared/data`'s sets searched by `metric` (its shipped ground truth may be for
/// another metric, so truth is recomputed); `None`, with a note, when it is not there.
pub fn shared(name: &str, metric: Metric) -> Option<Set> {
    match load_dataset(&shared_data_dir().join(name)) {
        Ok(d) => Some(Set::new(name.to_owned(), metric, d.base, d.queries)),
        Err(e) => {
            eprintln!("skipping {name}: {e}");
            None
        }
    }
}

/// Overlapping clusters confined to 24-dimensional subspaces, `size_var` (default 200,000) ×
/// 128, seed 42 (see BENCHMARKS.md): hard enough that recall@10 = 0.95 needs ef ≥ 64, unlike
/// well-separated isotropic clusters. The HNSW and Pyramid benches use this one definition.
pub fn hard_synthetic(size_var: &str) -> Option<Set> {
    let n = env_usize(size_var, 200_000);
    if n == 0 {
        return None;
    }
    let spec = ClusterSpec {
        n,
        dim: 128,
        clusters: 100,
        spread: 1.0,
        intrinsic_dim: Some(24),
        seed: 42,
    };
    let queries = clustered_with_structure(
        ClusterSpec {
            n: 500,
            seed: 4242,
            ..spec
        },
        42,
    );
    Some(Set::new(
        format!("synthetic{}k", n / 1000),
        Metric::L2,
        clustered_gaussian(spec),
        queries,
    ))
}

/// The MIPS benches' sets, searched by inner product:
/// - `movielens-mips`;
/// - a synthetic long-tailed set of `CAIRN_BENCH_MIPS_N` (default 200,000) × 64: uniform
///   directions, log-normal norms with σ = 0.8 (the spread of movielens-mips' norms), seed
///   42, 500 unit-norm queries (seed 4242) — its norm bias is 1.0;
/// - the same directions and queries with the σ that gives each norm bias of
///   `CAIRN_BENCH_MIPS_BIAS` (default `0.65,0.85`; see `long_tailed_with_bias`), named
///   `longtail200k-b0.65` and so on;
/// - `siftsmall` and `glove50-5k-angular` (GloVe as published, unnormalised).
///
/// `CAIRN_BENCH_MIPS_SETS` (comma-separated name prefixes) keeps only the sets named.
pub fn mips_sets() -> Vec<Set> {
    let n = env_usize("CAIRN_BENCH_MIPS_N", 200_000);
    let wanted = |name: &str| match std::env::var("CAIRN_BENCH_MIPS_SETS") {
        Ok(list) => list
            .split(',')
            .any(|prefix| name.starts_with(prefix.trim())),
        Err(_) => true,
    };
    let queries = long_tailed_norms(500, 64, 0.0, 4242);
    let mut sets = Vec::new();
    if let Some(set) = wanted("movielens-mips")
        .then(|| shared("movielens-mips", Metric::InnerProduct))
        .flatten()
    {
        sets.push(set);
    }
    let long = format!("longtail{}k", n / 1000);
    if n > 0 && wanted(&long) {
        sets.push(Set::new(
            long.clone(),
            Metric::InnerProduct,
            long_tailed_norms(n, 64, 0.8, 42),
            queries.clone(),
        ));
    }
    let biases = std::env::var("CAIRN_BENCH_MIPS_BIAS").unwrap_or_else(|_| "0.65,0.85".into());
    for target in biases
        .split(',')
        .filter_map(|b| b.trim().parse::<f64>().ok())
    {
        let name = format!("{long}-b{target}");
        if n == 0 || !wanted(&name) {
            continue;
        }
        let made = long_tailed_with_bias(n, 64, 42, &queries, target);
        eprintln!(
            "{name}: σ {:.4} gives norm bias {:.3} (target {target})",
            made.sigma, made.bias
        );
        sets.push(Set::new(
            name,
            Metric::InnerProduct,
            made.base,
            queries.clone(),
        ));
    }
    for name in ["siftsmall", "glove50-5k-angular"] {
        if let Some(set) = wanted(name)
            .then(|| shared(name, Metric::InnerProduct))
            .flatten()
        {
            sets.push(set);
        }
    }
    sets
}

/// Writes `set` as `<$CAIRN_BENCH_DUMP>/<name>/{base,queries}.fvecs` and `truth.ivecs` (its
/// exact top-`K`) when that variable names a folder, so that a library outside Rust is
/// measured on the very same arrays (`bench/ann quantizers` reads them for ScaNN).
pub fn dump_set(set: &Set) {
    let Some(root) = std::env::var_os("CAIRN_BENCH_DUMP").map(PathBuf::from) else {
        return;
    };
    let dir = root.join(&set.name);
    std::fs::create_dir_all(&dir).unwrap();
    for (file, vectors) in [("base.fvecs", &set.base), ("queries.fvecs", &set.queries)] {
        let values = vectors.data.iter().map(|x| x.to_le_bytes());
        write_vecs(&dir.join(file), vectors.dim, values);
    }
    let ids = set
        .truth
        .iter()
        .flat_map(|row| row[..K].iter().map(|&id| (id as i32).to_le_bytes()));
    write_vecs(&dir.join("truth.ivecs"), K, ids);
    eprintln!("wrote {}", dir.display());
}

/// The `.fvecs`/`.ivecs` layout: each row of `dim` little-endian words led by `dim` as an i32.
fn write_vecs(path: &std::path::Path, dim: usize, values: impl Iterator<Item = [u8; 4]>) {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    for (i, word) in values.enumerate() {
        if i % dim == 0 {
            out.write_all(&(dim as i32).to_le_bytes()).unwrap();
        }
        out.write_all(&word).unwrap();
    }
    out.flush().unwrap();
}

/// A size knob from the environment (`0` usually means "skip").
pub fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One side of a comparison: search one query at `ef` (for a side without one, its own
/// knob of work per query, with its own ladders).
pub trait Side {
    /// The top-`K` slots, best first, and the distance computations spent when known.
    fn knn(&self, query: &[f32], ef: usize) -> (Vec<u32>, Option<u64>);

    /// The knob values calibration chooses from, smallest first.
    fn ladder(&self) -> Vec<usize> {
        fine_ladder()
    }

    /// The knob values of the recall curves, smallest first.
    fn curve(&self) -> Vec<usize> {
        EF_LADDER.to_vec()
    }

    /// The top-`K` of every query, and the distance computations per query summed when known.
    /// One `knn` per query unless the side has a batch path of its own.
    fn knn_all(&self, queries: &Vectors, ef: usize) -> (Vec<Vec<u32>>, Option<u64>) {
        let mut distances = Some(0u64);
        let found = queries
            .rows()
            .map(|q| {
                let (hits, d) = self.knn(q, ef);
                distances = distances.zip(d).map(|(a, b)| a + b);
                hits
            })
            .collect();
        (found, distances)
    }
}

/// Any Cairn index.
pub struct Cairn<I>(pub I);

impl<I: VectorIndex> Side for Cairn<I> {
    fn knn(&self, query: &[f32], ef: usize) -> (Vec<u32>, Option<u64>) {
        let params = SearchParams {
            ef: Some(ef),
            exact: false,
            ..SearchParams::default()
        };
        let (hits, stats) = self.0.search(query, K, &params, None).unwrap();
        (
            hits.iter().map(|h| h.slot).collect(),
            Some(stats.distance_computations),
        )
    }
}

/// A FAISS index; `ef` is set only when it changes (FAISS keeps it in the index).
pub struct Faiss(RefCell<FaissIndex>, Cell<usize>);

impl Faiss {
    pub fn new(index: FaissIndex) -> Self {
        Self(RefCell::new(index), Cell::new(usize::MAX))
    }
}

impl Faiss {
    fn set_ef(&self, ef: usize) {
        if self.1.get() != ef {
            self.0.borrow_mut().set_ef_search(ef).unwrap();
            self.1.set(ef);
        }
    }
}

impl Side for Faiss {
    fn knn(&self, query: &[f32], ef: usize) -> (Vec<u32>, Option<u64>) {
        self.set_ef(ef);
        let hits = self.0.borrow().search(query, K).unwrap();
        (hits.iter().map(|h| h.slot).collect(), None)
    }
}

/// The same FAISS index searched on its fast path: all queries in one call (one OpenMP region
/// and one visited table per call), on one thread when [`cairn_faiss::set_threads`] says 1.
pub struct FaissBatch<'a>(pub &'a Faiss);

impl Side for FaissBatch<'_> {
    fn knn(&self, query: &[f32], ef: usize) -> (Vec<u32>, Option<u64>) {
        self.0.knn(query, ef)
    }

    fn knn_all(&self, queries: &Vectors, ef: usize) -> (Vec<Vec<u32>>, Option<u64>) {
        self.0.set_ef(ef);
        let hits = self.0 .0.borrow().search_batch(&queries.data, K).unwrap();
        let found = hits
            .iter()
            .map(|row| row.iter().map(|h| h.slot).collect())
            .collect();
        (found, None)
    }
}

/// One pass over the set's queries at `ef`: recall@K, mean distance computations (when the
/// side counts them) and queries per second of that single, untimed-by-criterion pass.
pub struct Pass {
    pub recall: f64,
    pub distances: Option<f64>,
    pub qps: f64,
}

pub fn pass(side: &dyn Side, set: &Set, ef: usize) -> Pass {
    let start = Instant::now();
    let (found, distances) = side.knn_all(&set.queries, ef);
    let secs = start.elapsed().as_secs_f64();
    let n = set.queries.len() as f64;
    Pass {
        recall: recall_at_k(&found, &set.truth, K),
        distances: distances.map(|d| d as f64 / n),
        qps: n / secs,
    }
}

/// Criterion times one pass over the set's queries at `ef` under `id`, so the group's
/// elements/s (throughput set to the query count) is single-thread QPS at that setting.
pub fn time_pass(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    id: criterion::BenchmarkId,
    side: &dyn Side,
    set: &Set,
    ef: usize,
) {
    group.bench_function(id, |b| {
        b.iter(|| std::hint::black_box(side.knn_all(std::hint::black_box(&set.queries), ef)))
    });
}

/// The `ef` values calibration chooses from: every integer step of ~8% from 10 to 1024. A
/// coarse ladder quantises "the cheapest ef reaching the target" so much that one side can
/// land just under a rung (recall 0.948 at ef 64) and pay the next rung's 25% more work, while
/// the other lands just over; rungs this fine bound that error to one step for every side.
pub fn fine_ladder() -> Vec<usize> {
    let mut ladder = vec![10usize];
    while let Some(&last) = ladder.last().filter(|&&ef| ef < 1024) {
        ladder.push(((last as f64 * 1.08).round() as usize).max(last + 1));
    }
    ladder
}

/// The smallest `ef` of the side's ladder ([`fine_ladder`] for a graph) reaching `target`, with the recall it reached, found
/// by binary search (recall grows with `ef`; a dip of a query or two between neighbouring
/// rungs can only make the answer one rung more expensive).
pub fn calibrate(side: &dyn Side, set: &Set, target: f64) -> Option<(usize, f64)> {
    let ladder = side.ladder();
    let top = pass(side, set, ladder[ladder.len() - 1]);
    if top.recall < target {
        return None;
    }
    let (mut lo, mut hi, mut at_hi) = (0usize, ladder.len() - 1, top.recall);
    while lo < hi {
        let mid = (lo + hi) / 2;
        let p = pass(side, set, ladder[mid]);
        if p.recall >= target {
            (hi, at_hi) = (mid, p.recall);
        } else {
            lo = mid + 1;
        }
    }
    Some((ladder[hi], at_hi))
}

/// Where a bench writes its CSV curves: `CAIRN_BENCH_OUT`, when set.
pub fn out_dir() -> Option<PathBuf> {
    let dir = PathBuf::from(std::env::var_os("CAIRN_BENCH_OUT")?);
    std::fs::create_dir_all(&dir).unwrap();
    Some(dir)
}

/// Writes `rows` under `header` to `<CAIRN_BENCH_OUT>/<name>.csv` when an output folder is set.
pub fn write_csv(name: &str, header: &str, rows: &[String]) {
    let Some(dir) = out_dir() else {
        return;
    };
    let path = dir.join(format!("{name}.csv"));
    let mut file = std::fs::File::create(&path).unwrap();
    writeln!(file, "{header}").unwrap();
    for row in rows {
        writeln!(file, "{row}").unwrap();
    }
    eprintln!("wrote {}", path.display());
}
