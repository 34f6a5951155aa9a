//! `internal-read`: what one internal partition read adds to a query (issue #22's goal: at most
//! 50 µs over the partition's own search, 128-d query, k = 10, loopback).
//!
//! Three peer nodes hold a collection of one partition with one replica (`replication_factor`
//! 1), so exactly one node holds it. The same queries go, one at a time, to that node (the
//! search runs where the request lands) and to a node without a replica (the request crosses
//! the internal API to the holder: the call, its JSON bodies, the holder's handler, the
//! answer). Both sides pay the same public request and the same search, so the difference of
//! the two medians is the internal read's cost. Rounds alternate which side goes first; the
//! median round's difference is reported, beside the median of an empty `GET /healthz` to the
//! holder: one bare loopback HTTP round trip, which any internal call over HTTP pays.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use serde_json::{json, Value};

use crate::cluster_ingest::{create_ready, upload, wait_members};
use crate::standalone::{upsert_bodies, SetArgs};
use crate::stats::quantile;
use cairn_testkit::CairnProcess;

/// Options of `cairn-loadtest internal-read`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    set: SetArgs,
    /// Graph candidate list of every query.
    #[arg(long, default_value_t = 64)]
    ef: usize,
    /// Results per query.
    #[arg(long, default_value_t = 10)]
    limit: usize,
    /// Rounds; each sends every query to both nodes.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
}

/// Runs the comparison and prints its table.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let (base, queries) = args.set.generate();
    let bodies: Arc<Vec<Vec<u8>>> = upsert_bodies(&base, 256)?.into();
    let quiet = [("CAIRN__STORAGE__SNAPSHOT_EVERY_SECS", "86400")];
    let peers = cairn_testkit::start_peers(3, &quiet)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let client = reqwest::Client::new();
    let (holder, other) = runtime.block_on(async {
        wait_members(&client, &peers[0], peers.len()).await?;
        let create = json!({"vectors": {"size": args.set.dim, "distance": "Euclid"},
            "replication_factor": 1});
        create_ready(&client, &peers[0], "ir", &create).await?;
        upload(&client, &peers[0], "ir", &bodies, 1).await?;
        holder_and_other(&client, &peers).await
    })?;
    let query_bodies: Vec<Vec<u8>> = queries
        .data
        .chunks(queries.dim)
        .map(|q| {
            serde_json::to_vec(&json!({"query": q, "limit": args.limit,
                "params": {"hnsw_ef": args.ef}}))
        })
        .collect::<Result<_, _>>()?;
    println!(
        "# internal-read: n={} dim={} queries={} k={} ef={}; holder node {}, forwarding node {}",
        args.set.n,
        args.set.dim,
        query_bodies.len(),
        args.limit,
        args.ef,
        holder + 1,
        other + 1
    );
    println!(
        "\n| round | local median µs | forwarded median µs | added µs | bare round trip µs | added beyond it µs | local p90 µs | forwarded p90 µs |\n|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    let health = vec![Vec::new(); query_bodies.len()];
    // Warm both paths (connections, caches) before timing.
    for side in [holder, other] {
        runtime.block_on(latencies(
            &client,
            &peers[side],
            &query_bodies[..200.min(query_bodies.len())],
        ))?;
    }
    let (mut added, mut beyond) = (Vec::new(), Vec::new());
    for round in 1..=args.rounds.max(1) {
        let order = if round % 2 == 1 {
            [holder, other]
        } else {
            [other, holder]
        };
        let mut by_side = [Vec::new(), Vec::new()];
        for side in order {
            let slot = usize::from(side == other);
            by_side[slot] = runtime.block_on(latencies(&client, &peers[side], &query_bodies))?;
        }
        let [local, forwarded] = by_side.map(|mut l| {
            l.sort_by(f64::total_cmp);
            l
        });
        let mut bare = runtime.block_on(latencies(&client, &peers[holder], &health))?;
        bare.sort_by(f64::total_cmp);
        let (lm, fm, rt) = (
            quantile(&local, 0.5),
            quantile(&forwarded, 0.5),
            quantile(&bare, 0.5),
        );
        added.push(fm - lm);
        beyond.push(fm - lm - rt);
        println!(
            "| {round} | {lm:.0} | {fm:.0} | {:.0} | {rt:.0} | {:.0} | {:.0} | {:.0} |",
            fm - lm,
            fm - lm - rt,
            quantile(&local, 0.9),
            quantile(&forwarded, 0.9)
        );
    }
    added.sort_by(f64::total_cmp);
    beyond.sort_by(f64::total_cmp);
    println!(
        "\nMedian added by the internal read: **{:.0} µs**, of which beyond a bare round trip: **{:.0} µs**",
        added[added.len() / 2],
        beyond[beyond.len() / 2]
    );
    Ok(())
}

/// The node holding the collection's one replica, and another node (indexes into `peers`).
async fn holder_and_other(
    client: &reqwest::Client,
    peers: &[CairnProcess],
) -> anyhow::Result<(usize, usize)> {
    let started = Instant::now();
    loop {
        let cluster: Value = client
            .get(peers[0].url("/collections/ir/cluster"))
            .send()
            .await?
            .json()
            .await?;
        let node = cluster["result"]["replicas"][0]["replicas"][0]["peer_id"].as_u64();
        if let Some(node) = node {
            let holder = usize::try_from(node)? - 1;
            let other = (0..peers.len())
                .find(|i| *i != holder)
                .context("a node without the replica")?;
            return Ok((holder, other));
        }
        ensure!(
            started.elapsed() < Duration::from_secs(30),
            "no replica placed: {cluster}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Each query's latency in µs, sent one at a time to `server`; an empty body is an empty
/// `GET /healthz` instead.
async fn latencies(
    client: &reqwest::Client,
    server: &CairnProcess,
    bodies: &[Vec<u8>],
) -> anyhow::Result<Vec<f64>> {
    let (query, health) = (
        server.url("/collections/ir/points/query"),
        server.url("/healthz"),
    );
    let mut out = Vec::with_capacity(bodies.len());
    for body in bodies {
        let t = Instant::now();
        let request = if body.is_empty() {
            client.get(&health)
        } else {
            client
                .post(&query)
                .header("content-type", "application/json")
                .body(body.clone())
        };
        let r = request.send().await?;
        ensure!(r.status().is_success(), "query failed: {}", r.text().await?);
        r.bytes().await?;
        out.push(t.elapsed().as_secs_f64() * 1e6);
    }
    Ok(out)
}
