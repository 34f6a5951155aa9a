//! `filtered`: filtered search with a payload index, against the same collection without one
//! and against the unfiltered search (issue #24's first performance goal).
//!
//! One standalone server holds two collections of the same points: `indexed`, with an
//! integer payload index on `bucket`, and `plain`, without. Each point's `bucket` is drawn
//! uniformly from 0..10,000 (seed 7), independent of its vector, so `bucket < b` passes
//! `b / 10,000` of the points whatever the query: the filter cuts across the graph's
//! neighbourhoods. In rounds whose order rotates, one client sends the same queries one
//! after another to each variant: unfiltered, then per selectivity the indexed and the plain
//! collection. Per round and variant: queries per second; reported as medians over rounds,
//! with each round's ratios (indexed over plain, indexed over unfiltered) and recall@k
//! against exact filtered ground truth computed here.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use cairn_client::api::{Condition, Filter, HnswConfigDiff, PayloadSchemaType, Range};
use cairn_client::{ChunkedUpsert, Client, CreateCollectionBuilder, Point, QueryPoints};
use cairn_index::dataset::Vectors;
use cairn_testkit::CairnProcess;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::stats::{median, recall_of};
use crate::workload::{metric, Source, Workload};

/// Buckets a point's payload draws from.
const BUCKETS: u64 = 10_000;

/// Options of `filtered`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Dataset folder or generator (see `recall --help`); Euclidean.
    #[arg(long, default_value = "hard:100000:128:42")]
    dataset: Source,
    /// Queries used (each round sends every one to every variant).
    #[arg(long, default_value_t = 200)]
    queries: usize,
    /// Results per query.
    #[arg(long, default_value_t = 10)]
    k: usize,
    /// `params.hnsw_ef` of every query (the filtered graph search widens it by the filter's
    /// selectivity, up to 8×).
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
    /// `unfiltered`, or `indexed` / `plain` at a selectivity.
    pub name: String,
    /// Share of points the filter passes (1 unfiltered).
    pub selectivity: f64,
    /// Median over rounds of the round's queries per second (one client, in sequence).
    pub qps: f64,
    /// Recall@k against the exact filtered top k, over every query of every round.
    pub recall: f64,
    /// Median of the rounds' QPS over the plain collection's at the same selectivity.
    pub over_plain: Option<f64>,
    /// Median of the rounds' QPS over the unfiltered search's.
    pub over_unfiltered: f64,
}

/// The JSON report of `filtered`.
#[derive(Debug, Serialize)]
pub struct Report {
    /// Dataset name.
    pub dataset: String,
    /// Points.
    pub points: usize,
    /// `hnsw_ef` of the queries.
    pub ef: usize,
    /// Rounds measured.
    pub rounds: usize,
    /// Queries per variant per round.
    pub queries: usize,
    /// Every variant.
    pub variants: Vec<Variant>,
}

/// What a variant queries: a collection, and the bucket bound of its filter (none: no filter).
struct Setup {
    name: String,
    collection: &'static str,
    below: Option<u64>,
}

async fn load(
    client: &Client,
    name: &str,
    workload: &Workload,
    buckets: &[u64],
    indexed: bool,
) -> anyhow::Result<()> {
    let create = CreateCollectionBuilder::new(name, workload.dim(), workload_distance()).hnsw(
        HnswConfigDiff {
            m: Some(16),
            ef_construct: Some(200),
            ..HnswConfigDiff::default()
        },
    );
    client.create_collection(create).await?;
    if indexed {
        client
            .create_payload_index(name, "bucket", PayloadSchemaType::Integer)
            .await?;
    }
    let points = workload.base.rows().enumerate().map(|(i, row)| {
        let mut payload = serde_json::Map::new();
        payload.insert("bucket".into(), buckets[i].into());
        Point::new(i as u64, row.to_vec()).payload_json(payload)
    });
    let options = ChunkedUpsert {
        chunk_size: 1000,
        concurrency: 2,
        wait: true,
    };
    client.upsert_chunked(name, points, options, |_| {}).await?;
    Ok(())
}

fn workload_distance() -> cairn_client::api::Distance {
    cairn_client::api::Distance::Euclid
}

/// The exact filtered top `k` of each query (ids are rows).
fn filtered_truth(
    workload: &Workload,
    queries: &Vectors,
    buckets: &[u64],
    below: u64,
    k: usize,
) -> Vec<Vec<u32>> {
    let key = metric(workload_distance()).key_fn();
    queries
        .rows()
        .map(|q| {
            let mut scored: Vec<(f32, u32)> = workload
                .base
                .rows()
                .enumerate()
                .filter(|(i, _)| buckets[*i] < below)
                .map(|(i, v)| (key(q, v), i as u32))
                .collect();
            scored.sort_by(|a, b| a.0.total_cmp(&b.0));
            scored.into_iter().take(k).map(|(_, i)| i).collect()
        })
        .collect()
}

/// Queries per second of one pass over `queries`, and the ids each answered.
async fn pass(
    client: &Client,
    setup: &Setup,
    queries: &Vectors,
    k: usize,
    ef: usize,
) -> anyhow::Result<(f64, Vec<Vec<u32>>)> {
    let mut answers = Vec::with_capacity(queries.len());
    let started = Instant::now();
    for q in queries.rows() {
        let mut query = QueryPoints::new(setup.collection)
            .vector(q.to_vec())
            .limit(k)
            .ef(ef);
        if let Some(below) = setup.below {
            query = query.filter(Filter::must([Condition::range(
                "bucket",
                Range {
                    lt: Some(below as f64),
                    ..Range::default()
                },
            )]));
        }
        let response = client.query(query).await?;
        answers.push(
            response
                .points
                .iter()
                .map(|p| match p.id {
                    cairn_client::api::PointId::Num(n) => n as u32,
                    cairn_client::api::PointId::Uuid(_) => u32::MAX,
                })
                .collect(),
        );
    }
    Ok((
        queries.len() as f64 / started.elapsed().as_secs_f64(),
        answers,
    ))
}

/// Runs the comparison and prints its report.
pub async fn run(args: &Args) -> anyhow::Result<Report> {
    let workload = Workload::load(&args.dataset, workload_distance(), Some(args.queries))?;
    let queries = &workload.queries;
    let mut rng = StdRng::seed_from_u64(7);
    let buckets: Vec<u64> = (0..workload.base.len())
        .map(|_| rng.gen_range(0..BUCKETS))
        .collect();
    let process = tokio::task::block_in_place(|| CairnProcess::start(&[]))
        .context("cannot start a standalone server")?;
    let client = Client::builder().url(process.url("")).build()?;
    for (name, indexed) in [("indexed", true), ("plain", false)] {
        let started = Instant::now();
        load(&client, name, &workload, &buckets, indexed).await?;
        tracing::info!(
            collection = name,
            points = workload.base.len(),
            secs = started.elapsed().as_secs_f64(),
            "loaded"
        );
    }
    let selectivities = [(0.5, 5000u64), (0.05, 500), (0.005, 50), (0.0005, 5)];
    let mut setups = vec![Setup {
        name: "unfiltered".into(),
        collection: "indexed",
        below: None,
    }];
    let mut truths = vec![workload.truth.clone()];
    for (s, below) in selectivities {
        let truth = filtered_truth(&workload, queries, &buckets, below, args.k);
        for collection in ["indexed", "plain"] {
            setups.push(Setup {
                name: format!("{collection} {:.2}%", s * 100.0),
                collection,
                below: Some(below),
            });
            truths.push(truth.clone());
        }
    }
    // Warm-up: one pass of each.
    for setup in &setups {
        pass(&client, setup, queries, args.k, args.ef).await?;
    }
    // [round][variant] = qps; recall hits summed.
    let mut qps = vec![vec![0.0; setups.len()]; args.rounds];
    let mut recall_sum = vec![0.0; setups.len()];
    for (r, round) in qps.iter_mut().enumerate() {
        for j in 0..setups.len() {
            let v = (r + j) % setups.len();
            let (rate, answers) = pass(&client, &setups[v], queries, args.k, args.ef).await?;
            round[v] = rate;
            recall_sum[v] += answers
                .iter()
                .zip(&truths[v])
                .map(|(a, t)| recall_of(a, t, args.k))
                .sum::<f64>()
                / answers.len() as f64;
        }
    }
    let variants = setups
        .iter()
        .enumerate()
        .map(|(v, setup)| {
            let selectivity = setup.below.map_or(1.0, |b| b as f64 / BUCKETS as f64);
            // The plain collection at the same selectivity is the next variant.
            let over_plain = (setup.collection == "indexed" && setup.below.is_some())
                .then(|| median(qps.iter().map(|r| r[v] / r[v + 1]).collect()));
            Variant {
                name: setup.name.clone(),
                selectivity,
                qps: median(qps.iter().map(|r| r[v]).collect()),
                recall: recall_sum[v] / args.rounds as f64,
                over_plain,
                over_unfiltered: median(qps.iter().map(|r| r[v] / r[0]).collect()),
            }
        })
        .collect();
    let report = Report {
        dataset: workload.name.clone(),
        points: workload.base.len(),
        ef: args.ef,
        rounds: args.rounds,
        queries: queries.len(),
        variants,
    };
    crate::stats::emit_json(&report, args.json.as_deref())?;
    drop(process);
    Ok(report)
}
