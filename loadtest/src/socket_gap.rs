//! `socket-gap`: what the work between two queries does to the next search, in-process.
//!
//! A server answers one request at a time, with a socket round trip and an idle wait between
//! two searches; a benchmark loop runs them back to back. `standalone` finds the server's
//! search of the same graph 1.2–1.3× slower than the loop on this project's VMs. This command
//! reproduces that without a server, on the same data set and graph parameters: the HNSW is
//! searched back to back; after the query's JSON body is decoded and encoded again; after the
//! body's loopback round trip through an [`Echo`]; and after that round trip plus each
//! `--idle-us` during which the echo holds the reply (busy-waiting on its own core, so only the
//! searching core sits idle). The modes take turns over `--rounds` rounds of the queries; the
//! first round is a warm-up. Only the search itself is timed.

use std::time::{Duration, Instant};

use cairn_index::hnsw::{Hnsw, HnswParams};
use cairn_index::{Metric, SearchParams, VectorIndex};

use crate::echo::Echo;
use crate::standalone::SetArgs;

/// Options of `cairn-loadtest socket-gap`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    set: SetArgs,
    /// HNSW links per node.
    #[arg(long, default_value_t = 16)]
    m: usize,
    /// HNSW construction candidate list.
    #[arg(long, default_value_t = 100)]
    ef_construction: usize,
    /// Search `ef`.
    #[arg(long, default_value_t = 64)]
    ef: usize,
    /// Rounds over the queries; the first is not counted.
    #[arg(long, default_value_t = 10)]
    rounds: usize,
    /// Idle times after the round trip to measure, in µs.
    #[arg(long, value_delimiter = ',', default_value = "30,60")]
    idle_us: Vec<u64>,
}

/// What runs between two searches.
enum Between {
    Nothing,
    /// Decode the query body to a JSON value and encode part of it again.
    Json,
    /// Send the body through this echo and read it back.
    Socket(Echo),
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    let (base, queries) = args.set.generate();
    let params = HnswParams {
        m: args.m,
        ef_construction: args.ef_construction,
        ef_search: args.ef,
        ..HnswParams::default()
    };
    let index = Hnsw::build(params, Metric::L2, args.set.dim, &base.data)?;
    let rows: Vec<&[f32]> = queries.rows().collect();
    let bodies = rows
        .iter()
        .map(|q| {
            serde_json::to_vec(
                &serde_json::json!({"query": q, "limit": 10, "params": {"hnsw_ef": args.ef}}),
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut modes = vec![
        ("back to back".to_owned(), Between::Nothing),
        ("after JSON decode and encode".to_owned(), Between::Json),
        (
            "after a socket round trip".to_owned(),
            Between::Socket(Echo::start(Duration::ZERO)?),
        ),
    ];
    for &us in &args.idle_us {
        modes.push((
            format!("after a round trip + {us} µs idle"),
            Between::Socket(Echo::start(Duration::from_micros(us))?),
        ));
    }
    let search = SearchParams {
        ef: Some(args.ef),
        ..SearchParams::default()
    };
    let rounds = args.rounds.max(2);
    let mut seconds = vec![0.0f64; modes.len()];
    for round in 0..rounds {
        for (total, (_, between)) in seconds.iter_mut().zip(modes.iter_mut()) {
            let mut spent = 0.0;
            for (query, body) in rows.iter().zip(&bodies) {
                match between {
                    Between::Nothing => {}
                    Between::Json => {
                        let value: serde_json::Value = serde_json::from_slice(body)?;
                        std::hint::black_box(serde_json::to_vec(&value["params"])?);
                    }
                    Between::Socket(echo) => echo.round_trip(body)?,
                }
                let t = Instant::now();
                let hits = index.search(query, 10, &search, None)?;
                spent += t.elapsed().as_secs_f64();
                std::hint::black_box(hits);
            }
            if round > 0 {
                *total += spent;
            }
        }
    }
    let per_query = |s: f64| s / ((rounds - 1) * rows.len()) as f64 * 1e6;
    println!(
        "# socket-gap: n={} dim={} M={} efC={} ef={} rounds={rounds}\n",
        args.set.n, args.set.dim, args.m, args.ef_construction, args.ef
    );
    println!("| search | mean µs | ÷ back to back |\n|---|---:|---:|");
    for ((name, _), &total) in modes.iter().zip(&seconds) {
        println!(
            "| {name} | {:.1} | {:.2} |",
            per_query(total),
            total / seconds[0]
        );
    }
    Ok(())
}
