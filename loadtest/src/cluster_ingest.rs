//! `cluster-ingest`: REST ingest through a peer cluster against a standalone server, in one
//! run (issue #22's goal: 100k×128 through 3 nodes, R = 3, at most 2.5× standalone ingest).
//!
//! Both sides get the same request bodies (batches of `--batch` points, `wait=true`, so each
//! batch is durable on a majority *and* searchable on the node written to before the next is
//! sent), from one client, into a fresh one-partition collection per round; the rounds
//! alternate the sides and the median round's ratio is reported. Every process runs on this
//! machine: a cluster of three holds three copies of every index, so on a 2-core machine its
//! nodes share the cores the standalone server has to itself. The CPU time of the server
//! processes is reported beside the wall time: the cluster's CPU over the standalone's, divided
//! by the replicas, is what replication costs per copy beyond the copy's own index work.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use serde_json::{json, Value};

use crate::standalone::{upsert_bodies, SetArgs};
use cairn_testkit::CairnProcess;

/// Options of `cairn-loadtest cluster-ingest`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    set: SetArgs,
    /// Points per upsert request.
    #[arg(long, default_value_t = 256)]
    batch: usize,
    /// Peer nodes, each holding a replica (`replication_factor` = nodes).
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// HNSW links per node.
    #[arg(long, default_value_t = 16)]
    m: usize,
    /// HNSW construction candidate list.
    #[arg(long, default_value_t = 100)]
    ef_construction: usize,
    /// Rounds; each ingests into the standalone server, then into the cluster.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Upsert requests in flight (the same on both sides; the SDK's chunked upsert sends 2).
    #[arg(long, default_value_t = 1)]
    concurrency: usize,
}

/// Runs the comparison and prints its table.
pub fn run(args: &Args) -> anyhow::Result<()> {
    ensure!(args.nodes >= 1, "--nodes must be at least 1");
    let (base, _) = args.set.generate();
    let bodies: Arc<Vec<Vec<u8>>> = upsert_bodies(&base, args.batch)?.into();
    // Timed snapshots would land in the middle of a round on one side only.
    let quiet = [("CAIRN__STORAGE__SNAPSHOT_EVERY_SECS", "86400")];
    let standalone = CairnProcess::start(&quiet)?;
    let peers = cairn_testkit::start_peers(args.nodes, &quiet)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let client = reqwest::Client::new();
    runtime.block_on(wait_members(&client, &peers[0], args.nodes))?;
    println!(
        "# cluster-ingest: n={} dim={} batch={} M={} efC={}, {} nodes with R = {}",
        args.set.n, args.set.dim, args.batch, args.m, args.ef_construction, args.nodes, args.nodes
    );
    println!(
        "\n| round | standalone s | cluster s | ratio | standalone CPU s | cluster CPU s | CPU ratio ÷ {} |\n|---:|---:|---:|---:|---:|---:|---:|",
        args.nodes
    );
    let mut ratios = Vec::new();
    let peer_refs: Vec<&CairnProcess> = peers.iter().collect();
    for round in 1..=args.rounds.max(1) {
        let name = format!("ingest{round}");
        let cpu = cpu_seconds(&[&standalone])?;
        let alone = runtime.block_on(ingest(&client, &standalone, &name, 1, &bodies, args))?;
        let alone_cpu = cpu_seconds(&[&standalone])? - cpu;
        let cpu = cpu_seconds(&peer_refs)?;
        let cluster =
            runtime.block_on(ingest(&client, &peers[0], &name, args.nodes, &bodies, args))?;
        let cluster_cpu = cpu_seconds(&peer_refs)? - cpu;
        ratios.push(cluster / alone);
        println!(
            "| {round} | {alone:.2} | {cluster:.2} | {:.2} | {alone_cpu:.1} | {cluster_cpu:.1} | {:.2} |",
            cluster / alone,
            cluster_cpu / alone_cpu / args.nodes as f64
        );
        // Free the memory before the next round (not timed).
        for server in [&standalone, &peers[0]] {
            runtime.block_on(
                client
                    .delete(server.url(&format!("/collections/{name}")))
                    .send(),
            )?;
        }
    }
    ratios.sort_by(f64::total_cmp);
    println!("\nMedian ratio: **{:.2}**", ratios[ratios.len() / 2]);
    Ok(())
}

/// Waits until `server` lists `nodes` members with their records (a collection needing that
/// many replicas is refused before).
pub(crate) async fn wait_members(
    client: &reqwest::Client,
    server: &CairnProcess,
    nodes: usize,
) -> anyhow::Result<()> {
    let started = Instant::now();
    loop {
        let cluster: Value = client
            .get(server.url("/cluster"))
            .send()
            .await?
            .json()
            .await?;
        let recorded = cluster["result"]["peers"].as_object().map_or(0, |peers| {
            peers.values().filter(|p| p["api_uri"].is_string()).count()
        });
        if recorded >= nodes {
            return Ok(());
        }
        ensure!(
            started.elapsed() < Duration::from_secs(60),
            "the cluster has {recorded} of {nodes} members after 60 s: {cluster}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// CPU seconds (user + system) the processes have used so far, from `/proc/<pid>/stat`.
fn cpu_seconds(processes: &[&CairnProcess]) -> anyhow::Result<f64> {
    // Clock ticks per second: 100 on every Linux this runs on (`getconf CLK_TCK`).
    const TICKS: f64 = 100.0;
    let mut ticks = 0u64;
    for process in processes {
        let pid = process.pid().context("the server is not running")?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
        // Fields after the command name (in parentheses, which may hold spaces): utime and
        // stime are the 12th and 13th.
        let after = stat.rsplit_once(')').context("a /proc stat line")?.1;
        let fields: Vec<&str> = after.split_whitespace().collect();
        for i in [11, 12] {
            ticks += fields.get(i).context("utime, stime")?.parse::<u64>()?;
        }
    }
    Ok(ticks as f64 / TICKS)
}

/// Creates collection `name` with `replicas` copies through `server`, waits until every replica
/// serves, then times the upserts.
async fn ingest(
    client: &reqwest::Client,
    server: &CairnProcess,
    name: &str,
    replicas: usize,
    bodies: &Arc<Vec<Vec<u8>>>,
    args: &Args,
) -> anyhow::Result<f64> {
    let mut create = json!({"vectors": {"size": args.set.dim, "distance": "Euclid"},
        "hnsw_config": {"m": args.m, "ef_construct": args.ef_construction}});
    if replicas > 1 {
        create["replication_factor"] = json!(replicas);
    }
    create_ready(client, server, name, &create).await?;
    let t = Instant::now();
    upload(client, server, name, bodies, args.concurrency).await?;
    Ok(t.elapsed().as_secs_f64())
}

/// Creates collection `name` through `server` from the `create` body and waits until it is
/// green (every replica serves).
pub(crate) async fn create_ready(
    client: &reqwest::Client,
    server: &CairnProcess,
    name: &str,
    create: &Value,
) -> anyhow::Result<()> {
    let r = client
        .put(server.url(&format!("/collections/{name}")))
        .json(create)
        .send()
        .await?;
    ensure!(
        r.status().is_success(),
        "create failed: {}",
        r.text().await?
    );
    let ready = Instant::now();
    loop {
        let info: Value = client
            .get(server.url(&format!("/collections/{name}")))
            .send()
            .await?
            .json()
            .await?;
        if info["result"]["status"] == "green" {
            return Ok(());
        }
        ensure!(
            ready.elapsed() < Duration::from_secs(60),
            "collection {name} not green after 60 s: {info}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Sends the upsert `bodies` (`wait=true`) to collection `name` through `server`,
/// `concurrency` at a time.
pub(crate) async fn upload(
    client: &reqwest::Client,
    server: &CairnProcess,
    name: &str,
    bodies: &Arc<Vec<Vec<u8>>>,
    concurrency: usize,
) -> anyhow::Result<()> {
    let url = server.url(&format!("/collections/{name}/points?wait=true"));
    let next = Arc::new(AtomicUsize::new(0));
    let mut senders = tokio::task::JoinSet::new();
    for _ in 0..concurrency.max(1) {
        let (client, url, bodies, next) =
            (client.clone(), url.clone(), bodies.clone(), next.clone());
        senders.spawn(async move {
            while let Some(body) = bodies.get(next.fetch_add(1, Ordering::Relaxed)) {
                let r = client
                    .put(&url)
                    .header("content-type", "application/json")
                    .body(body.clone())
                    .send()
                    .await
                    .context("upsert")?;
                ensure!(
                    r.status().is_success(),
                    "upsert failed: {}",
                    r.text().await?
                );
            }
            Ok(())
        });
    }
    while let Some(sent) = senders.join_next().await {
        sent??;
    }
    Ok(())
}
