//! `cairn-loadtest`: the tool behind every figure in BENCHMARKS.md.
//!
//! - `recall`: load a dataset through the SDK, sweep query settings, report recall@k against
//!   exact ground truth with QPS and latency (table, CSV, JSON, SVG plot).
//! - `load`: open-loop queries at a target rate with HdrHistogram percentiles.
//! - `chaos`: steady load while a fault is injected and repaired; before/during/after.
//! - `overload`: half the node's capacity, then several times it, then half again.
//! - `auth-cost`: the same queries to a plain, a keyed and an HTTPS-and-keyed server.
//! - `filtered`: filtered search with a payload index against none and against unfiltered.
//! - `hybrid`: dense + sparse prefetches fused by RRF against the two searches alone.
//! - `standalone`: REST against in-process, the standalone server's overhead goals.
//! - `cluster-ingest`, `internal-read`: a peer cluster's ingest against standalone, and what
//!   one partition read over the internal API adds to a query.
//! - `routed-cluster`: a content-routed collection on peer nodes against one unpartitioned
//!   node and against its own broadcast, at equal recall.
//! - `socket-gap`: the in-process search after a socket round trip and an idle wait, which is
//!   what makes a server's search slower than a back-to-back loop.
//!
//! Every comparison runs its baseline in the same process and the same run, and reports
//! ratios, because the machines are shared and absolute times drift.
#![allow(clippy::print_stdout)]

mod auth_cost;
mod chaos;
mod cluster_ingest;
mod echo;
mod filtered;
mod hybrid;
mod internal_read;
mod load;
mod one_node;
mod openloop;
mod overload;
mod plot;
mod raw_http;
mod raw_wire;
mod recall;
mod routed_cluster;
mod scale_sim;
mod snapshot;
mod socket_gap;
mod standalone;
mod stats;
mod target;
mod workload;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "cairn-loadtest", about = "Measure Cairn against its baselines")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Recall@k, QPS and latency per query setting, against exact ground truth.
    Recall(recall::Args),
    /// Open-loop load at a fixed rate: latency percentiles, errors by kind, recall.
    Load(load::Args),
    /// Load while a fault is injected and repaired: failures, recall, latency per phase.
    Chaos(chaos::Args),
    /// What API keys and HTTPS add to a query: plain, key and TLS + key servers with the
    /// same data, in rotating rounds.
    AuthCost(auth_cost::Args),
    /// Filtered search with a payload index against the same collection without one and
    /// against the unfiltered search, at selectivities 50% to 0.05%, in rounds.
    Filtered(filtered::Args),
    /// A hybrid query (dense and sparse prefetches fused by RRF) against the two searches it
    /// combines, end to end, in rounds.
    Hybrid(hybrid::Args),
    /// Taking and recovering a collection snapshot against loading the collection again
    /// through REST, in rounds; the copies must answer exactly as the original.
    Snapshot(snapshot::Args),
    /// Open-loop load at half the node's capacity, then several times it, then half again:
    /// refusals, accepted latency, memory and recovery.
    Overload(overload::Args),
    /// One node at scale (10M×128 by default): REST ingest rate, memory per vector, queries
    /// at recall@10 against exact ground truth, restart time, and the largest collection that
    /// fits in the machine's memory.
    OneNode(one_node::Args),
    /// REST ingest vs in-process HNSW build, and REST query vs in-process search, on a seeded
    /// synthetic set (the standalone server's performance goals).
    Standalone(standalone::Args),
    /// REST ingest through a peer cluster (R = nodes) against a standalone server, in rounds.
    ClusterIngest(cluster_ingest::Args),
    /// What one internal partition read adds: the same queries to the node holding the replica
    /// and to a node that forwards them, in rounds.
    InternalRead(internal_read::Args),
    /// A content-routed collection on peer nodes against one unpartitioned node and against
    /// its own broadcast: QPS and distance computations at equal recall.
    RoutedCluster(routed_cluster::Args),
    /// The model of docs/scale.md: memory, groups and heartbeats of a large cluster, and a
    /// discrete-event simulation of its query path (fan-out, replica choice, hedging).
    ScaleSim(scale_sim::Args),
    /// In-process search after JSON work, a loopback round trip, and a round trip plus an idle
    /// wait: what between-request work does to the next search.
    SocketGap(socket_gap::Args),
    /// Draws recall curves from a CSV that a bench wrote (`CAIRN_BENCH_OUT`), as SVG.
    Plot(plot::Args),
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let command = Cli::parse().command;
    match &command {
        Command::Standalone(args) => return standalone::run(args),
        Command::Hybrid(args) => return hybrid::run(args).map(drop),
        Command::ClusterIngest(args) => return cluster_ingest::run(args),
        Command::InternalRead(args) => return internal_read::run(args),
        Command::ScaleSim(args) => return scale_sim::run(args),
        Command::SocketGap(args) => return socket_gap::run(args),
        Command::Plot(args) => return plot::run(args),
        Command::Recall(_)
        | Command::Load(_)
        | Command::Chaos(_)
        | Command::Overload(_)
        | Command::AuthCost(_)
        | Command::Filtered(_)
        | Command::Snapshot(_)
        | Command::RoutedCluster(_)
        | Command::OneNode(_) => {}
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        match command {
            Command::Recall(args) => recall::run(&args).await.map(drop),
            Command::Load(args) => load::run(&args).await.map(drop),
            Command::Chaos(args) => chaos::run(&args).await.map(drop),
            Command::Overload(args) => overload::run(&args).await.map(drop),
            Command::AuthCost(args) => auth_cost::run(&args).await.map(drop),
            Command::Filtered(args) => filtered::run(&args).await.map(drop),
            Command::Snapshot(args) => snapshot::run(&args).await.map(drop),
            Command::RoutedCluster(args) => routed_cluster::run(&args).await,
            Command::OneNode(args) => one_node::run(&args).await.map(drop),
            Command::Standalone(_)
            | Command::Hybrid(_)
            | Command::ClusterIngest(_)
            | Command::InternalRead(_)
            | Command::ScaleSim(_)
            | Command::SocketGap(_)
            | Command::Plot(_) => {
                unreachable!("handled above")
            }
        }
    })
}
