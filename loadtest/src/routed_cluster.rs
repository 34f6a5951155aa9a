//! `routed-cluster`: a content-routed collection on a peer cluster against one unpartitioned
//! node, and against its own broadcast, on the same data in one run (issue #22's goal: query
//! throughput and distance computations per query at equal recall@10, 0.9 and 0.95, on the
//! hard 200k × 128 set).
//!
//! The run starts `--nodes` peer nodes and one standalone server on this machine, loads the
//! dataset into an unpartitioned collection on the standalone server and into a collection of
//! `--partitions` on the cluster (which trains its routing and re-homes every point through
//! its writer), then sweeps `ef` on both, the cluster's collection both routed (its default,
//! per-collection branching) and broadcast (`probe` = every partition). Each side is read at
//! its cheapest setting that reaches the target recall; the ratios are printed. All
//! processes share this machine's cores, so the cluster's throughput is not three machines'
//! worth: distance computations per query are the machine-independent figure.

use std::path::PathBuf;

use clap::Parser;

use crate::recall::{self, Row};
use cairn_testkit::CairnProcess;

/// Options of `cairn-loadtest routed-cluster`.
#[derive(clap::Args)]
pub struct Args {
    /// The data (a folder or a generator; see `recall --help`).
    #[arg(long, default_value = "hard:200000:128")]
    dataset: String,
    /// Use only the first N queries.
    #[arg(long)]
    queries: Option<usize>,
    /// Peer nodes.
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// Partitions of the cluster's collection.
    #[arg(long, default_value_t = 8)]
    partitions: u32,
    /// Replicas of each partition (reads use one; more only slow the load down).
    #[arg(long, default_value_t = 1)]
    replication: u32,
    /// `ef` values to sweep on every side.
    #[arg(long, default_value = "10,16,24,32,48,64,96,128")]
    ef: String,
    /// Queries in flight.
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// Passes over the query set per setting.
    #[arg(long, default_value_t = 2)]
    passes: usize,
    /// Recall targets to compare at.
    #[arg(long, value_delimiter = ',', default_value = "0.9,0.95")]
    targets: Vec<f64>,
    /// Folder for each side's recall.csv/json/svg (in `single/` and `cluster/`).
    #[arg(long)]
    out: Option<PathBuf>,
}

/// `recall`'s options, parsed from the arguments this command builds.
#[derive(Parser)]
struct Recall {
    #[command(flatten)]
    args: recall::Args,
}

/// Runs both sides and prints the comparison.
pub async fn run(args: &Args) -> anyhow::Result<()> {
    anyhow::ensure!(args.nodes >= 1, "--nodes must be at least 1");
    // Timed snapshots would land in the middle of a sweep on one side only.
    let quiet = [("CAIRN__STORAGE__SNAPSHOT_EVERY_SECS", "86400")];
    let single = CairnProcess::start(&quiet)?;
    let peers = cairn_testkit::start_peers(args.nodes, &quiet)?;
    let client = reqwest::Client::new();
    crate::cluster_ingest::wait_members(&client, &peers[0], args.nodes).await?;

    let mut common = vec![
        "recall".to_owned(),
        "--dataset".into(),
        args.dataset.clone(),
        "--ef".into(),
        args.ef.clone(),
        "--concurrency".into(),
        args.concurrency.to_string(),
        "--passes".into(),
        args.passes.to_string(),
    ];
    if let Some(q) = args.queries {
        common.extend(["--queries".into(), q.to_string()]);
    }
    let out = |side: &str| -> Vec<String> {
        args.out.as_ref().map_or_else(Vec::new, |dir| {
            vec!["--out".into(), dir.join(side).display().to_string()]
        })
    };
    let mut one = common.clone();
    one.extend([
        "--url".into(),
        single.url(""),
        "--collection".into(),
        "single".into(),
    ]);
    one.extend(out("single"));
    let mut routed = common;
    for node in &peers {
        routed.extend(["--url".into(), node.url("")]);
    }
    routed.extend([
        "--collection".into(),
        "routed".into(),
        "--partitions".into(),
        args.partitions.to_string(),
        "--replication".into(),
        args.replication.to_string(),
        "--probe".into(),
        format!("0,{}", args.partitions),
    ]);
    routed.extend(out("cluster"));

    println!("# one unpartitioned node");
    let single_rows = recall::run(&Recall::try_parse_from(&one)?.args).await?;
    println!(
        "# {} peer nodes, {} partitions × {} replicas (`routed`: default routing; `probe={}`: broadcast)",
        args.nodes, args.partitions, args.replication, args.partitions
    );
    let cluster_rows = recall::run(&Recall::try_parse_from(&routed)?.args).await?;
    let broadcast_series = format!("probe={}", args.partitions);
    let routed_side: Vec<&Row> = cluster_rows
        .iter()
        .filter(|r| r.series == "routed")
        .collect();
    let broadcast: Vec<&Row> = cluster_rows
        .iter()
        .filter(|r| r.series == broadcast_series)
        .collect();
    let single_side: Vec<&Row> = single_rows.iter().collect();

    println!(
        "\n| target | side | cheapest setting (recall) | QPS | dist/q | partitions | QPS ÷ routed | dist/q ÷ routed |"
    );
    println!("|---|---|---|---:|---:|---:|---:|---:|");
    for &target in &args.targets {
        let pick = |rows: &[&Row]| -> Option<Row> {
            rows.iter()
                .filter(|r| r.recall >= target)
                .min_by(|a, b| a.distance_computations.total_cmp(&b.distance_computations))
                .map(|r| (*r).clone())
        };
        let sides = [
            ("routed cluster", pick(&routed_side)),
            ("one node, unpartitioned", pick(&single_side)),
            ("cluster broadcast", pick(&broadcast)),
        ];
        let reference = sides[0].1.clone();
        for (name, row) in &sides {
            match (row, &reference) {
                (Some(r), Some(base)) => println!(
                    "| {target} | {name} | {} ({:.3}) | {:.0} | {:.0} | {:.2} | {:.2} | {:.2} |",
                    r.setting,
                    r.recall,
                    r.qps,
                    r.distance_computations,
                    r.partitions_touched,
                    r.qps / base.qps,
                    r.distance_computations / base.distance_computations
                ),
                (Some(r), None) => println!(
                    "| {target} | {name} | {} ({:.3}) | {:.0} | {:.0} | {:.2} | – | – |",
                    r.setting, r.recall, r.qps, r.distance_computations, r.partitions_touched
                ),
                (None, _) => println!("| {target} | {name} | not reached | – | – | – | – | – |"),
            }
        }
    }
    drop(peers);
    drop(single);
    Ok(())
}
