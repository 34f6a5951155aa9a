//! `snapshot`: taking and recovering a collection snapshot against rebuilding the collection
//! from its points (issue #24's third performance goal).
//!
//! One standalone server loads the set through REST (the rebuild: what a user without a
//! snapshot does, upserting every point again until the index has them all), then sits idle
//! for one index-file period so the partition's index file is current, as on any collection
//! that is not being written. Then, in rounds: a snapshot is taken (`POST …/snapshots`), and
//! recovered into a new collection from its file (`PUT …/snapshots/recover`, `file://`);
//! the copy answers the same queries, which must come back identical to the original's, and is
//! dropped with its snapshot. Reported: the rebuild's time, and per round the create and
//! recover times, as medians with their spread, and their ratios to the rebuild.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use cairn_client::api::HnswConfigDiff;
use cairn_client::{ChunkedUpsert, Client, CreateCollectionBuilder, Point, QueryPoints};
use cairn_testkit::CairnProcess;
use serde::Serialize;
use serde_json::{json, Value};

use crate::stats::{answer_ids, median, recall_of};
use crate::workload::{Source, Workload};

/// Options of `snapshot`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Dataset folder or generator (see `recall --help`); Euclidean.
    #[arg(long, default_value = "hard:1000000:128:42")]
    dataset: Source,
    /// Queries each copy answers (compared with the original's answers).
    #[arg(long, default_value_t = 100)]
    queries: usize,
    /// Results per query.
    #[arg(long, default_value_t = 10)]
    k: usize,
    /// `params.hnsw_ef` of the queries.
    #[arg(long, default_value_t = 64)]
    ef: usize,
    /// Rounds of create + recover.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Seconds to sit idle after loading, so the index file is written (the server's
    /// `storage.snapshot_every_secs` is 30).
    #[arg(long, default_value_t = 35)]
    settle_secs: u64,
    /// Write the JSON report here (it is always printed).
    #[arg(long)]
    json: Option<PathBuf>,
}

/// One round.
#[derive(Debug, Serialize)]
pub struct Round {
    /// Seconds to take the snapshot.
    pub create_secs: f64,
    /// Seconds to recover it into a new collection (answering queries when it returns).
    pub recover_secs: f64,
    /// Size of the snapshot file.
    pub bytes: u64,
    /// How the copy's index came back (`snapshot`: loaded from the file; `rebuilt`).
    pub index_source: String,
    /// Whether the copy answered every query exactly as the original.
    pub identical_answers: bool,
}

/// The JSON report of `snapshot`.
#[derive(Debug, Serialize)]
pub struct Report {
    /// Dataset name.
    pub dataset: String,
    /// Points.
    pub points: usize,
    /// Dimension.
    pub dim: usize,
    /// Seconds to load every point through REST until searchable (the rebuild).
    pub rebuild_secs: f64,
    /// Recall@k of the original at `ef`, against exact ground truth.
    pub recall: f64,
    /// Every round.
    pub rounds: Vec<Round>,
    /// Median create time over the rebuild's.
    pub create_over_rebuild: f64,
    /// Median recover time over the rebuild's.
    pub recover_over_rebuild: f64,
}

async fn answers(
    client: &Client,
    collection: &str,
    workload: &Workload,
    k: usize,
    ef: usize,
) -> anyhow::Result<Vec<Vec<u32>>> {
    let mut out = Vec::with_capacity(workload.queries.len());
    for q in workload.queries.rows() {
        let query = QueryPoints::new(collection)
            .vector(q.to_vec())
            .limit(k)
            .ef(ef);
        out.push(answer_ids(&client.query(query).await?));
    }
    Ok(out)
}

/// A call that must succeed; its `result`.
async fn call(
    http: &reqwest::Client,
    method: reqwest::Method,
    url: String,
    body: Option<Value>,
) -> anyhow::Result<Value> {
    let mut request = http.request(method.clone(), &url);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await?;
    let status = response.status();
    let value: Value = response.json().await?;
    anyhow::ensure!(status.is_success(), "{method} {url}: {status} {value}");
    Ok(value["result"].clone())
}

/// Runs the comparison and prints its report.
pub async fn run(args: &Args) -> anyhow::Result<Report> {
    let workload = Workload::load(
        &args.dataset,
        cairn_client::api::Distance::Euclid,
        Some(args.queries),
    )?;
    let process = tokio::task::block_in_place(|| CairnProcess::start(&[]))
        .context("cannot start a standalone server")?;
    let client = Client::builder().url(process.url("")).build()?;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(3_600))
        .build()?;

    let started = Instant::now();
    let create = CreateCollectionBuilder::new(
        "original",
        workload.dim(),
        cairn_client::api::Distance::Euclid,
    )
    .hnsw(HnswConfigDiff {
        m: Some(16),
        ef_construct: Some(200),
        ..HnswConfigDiff::default()
    });
    client.create_collection(create).await?;
    let points = workload
        .base
        .rows()
        .enumerate()
        .map(|(i, row)| Point::new(i as u64, row.to_vec()));
    let options = ChunkedUpsert {
        chunk_size: 1000,
        concurrency: 2,
        wait: true,
    };
    client
        .upsert_chunked("original", points, options, |_| {})
        .await?;
    let rebuild_secs = started.elapsed().as_secs_f64();
    tracing::info!(points = workload.base.len(), secs = rebuild_secs, "loaded");
    tokio::time::sleep(Duration::from_secs(args.settle_secs)).await;

    let original = answers(&client, "original", &workload, args.k, args.ef).await?;
    let recall = original
        .iter()
        .zip(&workload.truth)
        .map(|(a, t)| recall_of(a, t, args.k))
        .sum::<f64>()
        / original.len() as f64;

    let base = process.url("");
    let mut rounds = Vec::new();
    for r in 0..args.rounds {
        let t = Instant::now();
        let taken = call(
            &http,
            reqwest::Method::POST,
            format!("{base}/collections/original/snapshots?wait=true"),
            None,
        )
        .await?;
        let create_secs = t.elapsed().as_secs_f64();
        let name = taken["name"]
            .as_str()
            .context("the snapshot has no name")?
            .to_owned();
        let file = process
            .data_dir()
            .join("snapshots/collections/original")
            .join(&name);
        let copy = format!("copy{r}");
        let t = Instant::now();
        call(
            &http,
            reqwest::Method::PUT,
            format!("{base}/collections/{copy}/snapshots/recover?wait=true"),
            Some(json!({"location": format!("file://{}", file.display())})),
        )
        .await?;
        let recover_secs = t.elapsed().as_secs_f64();
        let info = call(
            &http,
            reqwest::Method::GET,
            format!("{base}/collections/{copy}"),
            None,
        )
        .await?;
        let answered = answers(&client, &copy, &workload, args.k, args.ef).await?;
        let round = Round {
            create_secs,
            recover_secs,
            bytes: taken["size"].as_u64().unwrap_or(0),
            index_source: info["load"]["index_source"]
                .as_str()
                .unwrap_or("")
                .to_owned(),
            identical_answers: answered == original,
        };
        tracing::info!(?round, "round");
        rounds.push(round);
        call(
            &http,
            reqwest::Method::DELETE,
            format!("{base}/collections/{copy}"),
            None,
        )
        .await?;
        call(
            &http,
            reqwest::Method::DELETE,
            format!("{base}/collections/original/snapshots/{name}"),
            None,
        )
        .await?;
    }
    let report = Report {
        dataset: workload.name.clone(),
        points: workload.base.len(),
        dim: workload.dim(),
        rebuild_secs,
        recall,
        create_over_rebuild: median(rounds.iter().map(|r| r.create_secs).collect()) / rebuild_secs,
        recover_over_rebuild: median(rounds.iter().map(|r| r.recover_secs).collect())
            / rebuild_secs,
        rounds,
    };
    crate::stats::emit_json(&report, args.json.as_deref())?;
    drop(process);
    Ok(report)
}
