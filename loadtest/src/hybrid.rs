//! `hybrid`: a hybrid query (a dense and a sparse prefetch fused by RRF) against the two
//! searches it combines, end to end over REST (issue #24's second performance goal).
//!
//! One standalone server holds the dense set with a sparse vector per point: 20 terms drawn
//! from a Zipf law (s = 1.1) over a 50,000-term vocabulary, values uniform in (0.1, 2), the
//! shape of a bag of words (seed 11). Each query pairs a dense query of the set with 4 terms
//! drawn the same way. In rounds whose order rotates, one keep-alive connection sends every
//! query as the dense search, as the sparse search and as the hybrid query (both as
//! prefetches with the same `limit`, then `{"fusion": "rrf"}`). Per round and variant: the
//! median latency; reported as medians over rounds, with each round's hybrid latency over
//! the dense one's and over the sum of the two.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{ensure, Context};
use cairn_testkit::CairnProcess;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use serde_json::{json, Value};

use crate::raw_http::RawClient;
use crate::stats::{median, quantile};
use crate::workload::{Source, Workload};

const VOCABULARY: usize = 50_000;
const DOC_TERMS: usize = 20;
const QUERY_TERMS: usize = 4;

/// Options of `hybrid`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Dataset folder or generator (see `recall --help`) for the dense vectors; Euclidean.
    #[arg(long, default_value = "hard:100000:128:42")]
    dataset: Source,
    /// Queries used (each round sends every one as each variant).
    #[arg(long, default_value_t = 200)]
    queries: usize,
    /// Results per query (and per prefetch).
    #[arg(long, default_value_t = 10)]
    k: usize,
    /// `params.hnsw_ef` of the dense search.
    #[arg(long, default_value_t = 64)]
    ef: usize,
    /// Rounds.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Write the JSON report here (it is always printed).
    #[arg(long)]
    json: Option<PathBuf>,
}

/// One variant's figures.
#[derive(Debug, Serialize)]
pub struct Variant {
    /// `dense`, `sparse` or `hybrid`.
    pub name: &'static str,
    /// Median over rounds of the round's median latency, ms.
    pub p50_ms: f64,
    /// Median over rounds of the round's p99 latency, ms.
    pub p99_ms: f64,
}

/// The JSON report of `hybrid`.
#[derive(Debug, Serialize)]
pub struct Report {
    /// Dataset name.
    pub dataset: String,
    /// Points.
    pub points: usize,
    /// Rounds measured.
    pub rounds: usize,
    /// Queries per variant per round.
    pub queries: usize,
    /// Dense, sparse, hybrid.
    pub variants: Vec<Variant>,
    /// Median of the rounds' hybrid p50 over the dense search's.
    pub hybrid_over_dense: f64,
    /// Median of the rounds' hybrid p50 over the sum of the dense and the sparse p50.
    pub hybrid_over_both: f64,
}

/// Term ids drawn from a Zipf law over the vocabulary (inverse CDF over precomputed weights).
struct Zipf {
    cumulative: Vec<f64>,
}

impl Zipf {
    fn new(n: usize, s: f64) -> Self {
        let mut total = 0.0;
        let cumulative = (1..=n)
            .map(|rank| {
                total += 1.0 / (rank as f64).powf(s);
                total
            })
            .collect();
        Self { cumulative }
    }

    fn sample(&self, rng: &mut StdRng) -> u32 {
        let total = self.cumulative.last().copied().unwrap_or(1.0);
        let u = rng.gen_range(0.0..total);
        self.cumulative.partition_point(|&c| c < u) as u32
    }

    /// A sparse vector of `terms` distinct terms.
    fn vector(&self, rng: &mut StdRng, terms: usize) -> Value {
        let mut picked = std::collections::BTreeMap::new();
        while picked.len() < terms {
            picked.insert(self.sample(rng), rng.gen_range(0.1f32..2.0));
        }
        json!({"indices": picked.keys().collect::<Vec<_>>(),
               "values": picked.values().collect::<Vec<_>>()})
    }
}

fn call(client: &mut RawClient, method: &str, path: &str, body: &Value) -> anyhow::Result<()> {
    let (status, answer) = client.send(method, path, &serde_json::to_vec(body)?)?;
    ensure!(
        status == 200,
        "{method} {path}: {status} {}",
        String::from_utf8_lossy(&answer)
    );
    Ok(())
}

/// Runs the comparison and prints its report.
pub fn run(args: &Args) -> anyhow::Result<Report> {
    let workload = Workload::load(
        &args.dataset,
        cairn_client::api::Distance::Euclid,
        Some(args.queries),
    )?;
    let process = CairnProcess::start(&[]).context("cannot start a standalone server")?;
    let mut client = RawClient::connect(process.addr())?;
    let zipf = Zipf::new(VOCABULARY, 1.1);
    let mut rng = StdRng::seed_from_u64(11);
    call(
        &mut client,
        "PUT",
        "/collections/h",
        &json!({"vectors": {"": {"size": workload.dim(), "distance": "Euclid"}},
                "hnsw_config": {"m": 16, "ef_construct": 200},
                "sparse_vectors": {"words": {}}}),
    )?;
    let started = Instant::now();
    let rows: Vec<&[f32]> = workload.base.rows().collect();
    for (b, chunk) in rows.chunks(1000).enumerate() {
        let points: Vec<Value> = chunk
            .iter()
            .enumerate()
            .map(|(i, row)| {
                json!({"id": b * 1000 + i,
                       "vector": {"": row, "words": zipf.vector(&mut rng, DOC_TERMS)}})
            })
            .collect();
        call(
            &mut client,
            "PUT",
            "/collections/h/points?wait=true",
            &json!({ "points": points }),
        )?;
    }
    tracing::info!(
        points = rows.len(),
        secs = started.elapsed().as_secs_f64(),
        "loaded"
    );
    let k = args.k;
    let bodies: Vec<[Vec<u8>; 3]> = workload
        .queries
        .rows()
        .map(|q| {
            let dense = json!({"query": q, "limit": k, "params": {"hnsw_ef": args.ef}});
            let sparse = json!({"query": zipf.vector(&mut rng, QUERY_TERMS), "using": "words",
                                "limit": k});
            let hybrid = json!({"prefetch": [dense.clone(), sparse.clone()],
                                "query": {"fusion": "rrf"}, "limit": k});
            [&dense, &sparse, &hybrid].map(|b| serde_json::to_vec(b).unwrap_or_default())
        })
        .collect();
    let names = ["dense", "sparse", "hybrid"];
    let mut pass = |v: usize| -> anyhow::Result<Vec<f64>> {
        let mut latencies = Vec::with_capacity(bodies.len());
        for body in &bodies {
            let t = Instant::now();
            let (status, answer) = client.send("POST", "/collections/h/points/query", &body[v])?;
            latencies.push(t.elapsed().as_secs_f64() * 1e3);
            ensure!(
                status == 200,
                "{}: {status} {}",
                names[v],
                String::from_utf8_lossy(&answer)
            );
        }
        latencies.sort_by(f64::total_cmp);
        Ok(latencies)
    };
    for v in 0..names.len() {
        pass(v)?;
    }
    // [round][variant] = (p50, p99)
    let mut rounds = vec![[(0.0, 0.0); 3]; args.rounds];
    for (r, round) in rounds.iter_mut().enumerate() {
        for j in 0..names.len() {
            let v = (r + j) % names.len();
            let latencies = pass(v)?;
            round[v] = (quantile(&latencies, 0.5), quantile(&latencies, 0.99));
        }
    }
    let variants = names
        .iter()
        .enumerate()
        .map(|(v, &name)| Variant {
            name,
            p50_ms: median(rounds.iter().map(|r| r[v].0).collect()),
            p99_ms: median(rounds.iter().map(|r| r[v].1).collect()),
        })
        .collect();
    let report = Report {
        dataset: workload.name.clone(),
        points: rows.len(),
        rounds: args.rounds,
        queries: bodies.len(),
        variants,
        hybrid_over_dense: median(rounds.iter().map(|r| r[2].0 / r[0].0).collect()),
        hybrid_over_both: median(rounds.iter().map(|r| r[2].0 / (r[0].0 + r[1].0)).collect()),
    };
    crate::stats::emit_json(&report, args.json.as_deref())?;
    drop(process);
    Ok(report)
}
