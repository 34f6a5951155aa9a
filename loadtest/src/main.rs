//! `cairn-loadtest`: measurements that produce the figures in BENCHMARKS.md.
//!
//! Every comparison runs its baseline in the same process and the same run, and reports
//! ratios, because the machines are shared and absolute times drift.
#![allow(clippy::print_stdout)]

mod raw_http;
mod server;
mod standalone;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "cairn-loadtest", about = "Measure Cairn against its baselines")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// REST ingest vs in-process HNSW build, and REST query vs in-process search, on a seeded
    /// synthetic set (issue: standalone server performance).
    Standalone(standalone::Args),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Standalone(args) => standalone::run(&args),
    }
}
