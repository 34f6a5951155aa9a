//! What the work between two queries does to the next search, in-process.
//!
//! A server answers one request at a time with a socket round trip and an idle wait between
//! searches; a benchmark loop runs them back to back. `cairn-loadtest standalone` found the
//! server's search of the same graph 1.2–1.3× slower than the loop. This probe reproduces the
//! gap without a server: the same HNSW (100k × 128, M = 16, ef = 64, the `standalone` data
//! set) searched back to back, after the query's JSON body is decoded and re-encoded, after the
//! body makes a loopback TCP round trip through an echo thread, and after that round trip plus
//! 30 or 60 µs in which the echo thread holds the reply (busy-waiting on its own core, so only
//! the searching thread's core sits idle). The modes take turns over ten rounds of 1,000
//! queries; the first round is a warm-up. Only the search itself is timed.
//!
//! ```sh
//! cargo run --release -p cairn-loadtest --example socket_gap
//! ```

// A measurement tool: its report is its standard output.
#![allow(clippy::print_stdout)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use cairn_index::dataset::{clustered_gaussian, clustered_with_structure, ClusterSpec};
use cairn_index::hnsw::{Hnsw, HnswParams};
use cairn_index::{Metric, SearchParams, VectorIndex};

/// What runs between two searches.
#[derive(Clone, Copy)]
enum Between {
    Nothing,
    /// Decode the query body to a JSON value and encode part of it again.
    Json,
    /// Send the body through the echo and read it back; the echo holds it this long first.
    Socket { idle_us: u8 },
}

const MODES: [(&str, Between); 5] = [
    ("back to back", Between::Nothing),
    ("after JSON decode and encode", Between::Json),
    ("after a socket round trip", Between::Socket { idle_us: 0 }),
    ("after a round trip + 30 µs idle", Between::Socket { idle_us: 30 }),
    ("after a round trip + 60 µs idle", Between::Socket { idle_us: 60 }),
];

const ROUNDS: usize = 10;

fn main() -> anyhow::Result<()> {
    let spec = ClusterSpec {
        n: 100_000,
        dim: 128,
        clusters: 100,
        spread: 1.0,
        intrinsic_dim: Some(24),
        seed: 42,
    };
    let base = clustered_gaussian(spec);
    let queries = clustered_with_structure(
        ClusterSpec {
            n: 1000,
            seed: 4242,
            ..spec
        },
        spec.seed,
    );
    let params = HnswParams {
        m: 16,
        ef_construction: 100,
        ef_search: 64,
        ..HnswParams::default()
    };
    let index = Hnsw::build(params, Metric::L2, spec.dim, &base.data)?;
    let rows: Vec<&[f32]> = queries.rows().collect();
    let bodies = rows
        .iter()
        .map(|q| {
            serde_json::to_vec(
                &serde_json::json!({"query": q, "limit": 10, "params": {"hnsw_ef": 64}}),
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
    let search = SearchParams {
        ef: Some(64),
        ..SearchParams::default()
    };
    let mut echo = Echo::start()?;
    let mut seconds = [0.0f64; MODES.len()];
    for round in 0..ROUNDS {
        for (total, &(_, between)) in seconds.iter_mut().zip(&MODES) {
            let mut spent = 0.0;
            for (query, body) in rows.iter().zip(&bodies) {
                match between {
                    Between::Nothing => {}
                    Between::Json => {
                        let value: serde_json::Value = serde_json::from_slice(body)?;
                        std::hint::black_box(serde_json::to_vec(&value["params"])?);
                    }
                    Between::Socket { idle_us } => echo.round_trip(body, idle_us)?,
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
    let per_query = |s: f64| s / ((ROUNDS - 1) * rows.len()) as f64 * 1e6;
    println!("| search | mean µs | ÷ back to back |\n|---|---:|---:|");
    for (&(name, _), &total) in MODES.iter().zip(&seconds) {
        println!(
            "| {name} | {:.1} | {:.2} |",
            per_query(total),
            total / seconds[0]
        );
    }
    Ok(())
}

/// A loopback TCP echo on a thread of this process. The first byte of each message says how
/// many µs the echo busy-waits before replying.
struct Echo {
    conn: TcpStream,
    buf: Vec<u8>,
}

impl Echo {
    fn start() -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        std::thread::spawn(move || -> std::io::Result<()> {
            let (mut peer, _) = listener.accept()?;
            peer.set_nodelay(true)?;
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let n = peer.read(&mut buf)?;
                if n == 0 {
                    return Ok(());
                }
                let hold = Duration::from_micros(u64::from(buf[0]));
                let t = Instant::now();
                while t.elapsed() < hold {}
                peer.write_all(&buf[..n])?;
            }
        });
        let conn = TcpStream::connect(addr).context("connecting to the echo thread")?;
        conn.set_nodelay(true)?;
        Ok(Self {
            conn,
            buf: vec![0u8; 64 * 1024],
        })
    }

    /// Sends `body` (its first byte replaced by `idle_us`) and reads it back. A body is one
    /// segment on loopback, so the echo reads it whole and its first byte is the hold time.
    fn round_trip(&mut self, body: &[u8], idle_us: u8) -> anyhow::Result<()> {
        let mut message = body.to_vec();
        if let Some(first) = message.first_mut() {
            *first = idle_us;
        }
        self.conn.write_all(&message)?;
        let mut got = 0;
        while got < message.len() {
            let n = self.conn.read(&mut self.buf)?;
            ensure!(n > 0, "the echo thread closed its socket");
            got += n;
        }
        Ok(())
    }
}
