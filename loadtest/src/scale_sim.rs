//! `scale-sim`: the model behind `docs/scale.md` — a billion vectors on a hundred nodes — in
//! two parts, both printed by one command so the document cites one run.
//!
//! 1. **Arithmetic**: memory per node with and without quantization, partitions and replicas
//!    per node, Raft groups each node leads and the heartbeats they cost.
//! 2. **A discrete-event simulation of the query path**: Poisson arrivals; each query fans out
//!    to the partitions its routing picks (uniformly at random here: the worst case for load
//!    balance); each leg goes to the replica whose node has the fewest searches queued or
//!    running (Cairn's replica choice); each node runs `cores` searches at once, first come
//!    first served; a search takes a log-normal time, and a small share of searches stall
//!    (a pause, a noisy neighbour) for ten times as long. With hedging on, a leg still running
//!    after the hedge delay is sent to a second replica too, and the first answer counts (the
//!    other still occupies its core, as it would). A query ends when its last leg does.
//!
//! What it leaves out: network queueing beyond a fixed round trip, the merge, and skew in which
//! partitions queries touch (routing follows the data; a hot partition is a placement matter,
//! answered by more replicas of it).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Exp, LogNormal};

/// Options of `cairn-loadtest scale-sim`.
#[derive(clap::Args)]
pub struct Args {
    /// Vectors in the collection.
    #[arg(long, default_value_t = 1_000_000_000)]
    vectors: u64,
    /// Dimension.
    #[arg(long, default_value_t = 768)]
    dim: u64,
    /// Nodes.
    #[arg(long, default_value_t = 100)]
    nodes: usize,
    /// Copies of every partition.
    #[arg(long, default_value_t = 3)]
    replicas: usize,
    /// Vectors per partition.
    #[arg(long, default_value_t = 10_000_000)]
    partition_vectors: u64,
    /// HNSW links per node (M); the graph costs about 2·M·4 bytes a vector.
    #[arg(long, default_value_t = 16)]
    m: u64,
    /// Bytes of a quantized vector's code kept in memory (full vectors go to disk, read only
    /// to re-rank): 96 is PQ with 96 one-byte codes at 768-d, 32× smaller than the floats.
    #[arg(long, default_value_t = 96)]
    code_bytes: u64,
    /// A partition group's heartbeat interval (ms).
    #[arg(long, default_value_t = 250)]
    heartbeat_ms: u64,
    /// Cores per node serving searches.
    #[arg(long, default_value_t = 16)]
    cores: usize,
    /// Queries per second, cluster-wide.
    #[arg(long, default_value_t = 10_000.0)]
    qps: f64,
    /// Median time of one partition search (ms): what one search of a 10M×768 partition at
    /// ef 64 costs (about 4,000 distances at about 0.4 µs each at 768-d; see docs/scale.md).
    #[arg(long, default_value_t = 2.0)]
    search_ms: f64,
    /// Spread of the search time (σ of its logarithm).
    #[arg(long, default_value_t = 0.3)]
    sigma: f64,
    /// Share of searches that stall, and by what factor.
    #[arg(long, default_value_t = 0.01)]
    stall_share: f64,
    /// How much longer a stalled search takes.
    #[arg(long, default_value_t = 10.0)]
    stall_factor: f64,
    /// Network round trip per leg (ms).
    #[arg(long, default_value_t = 0.2)]
    rtt_ms: f64,
    /// Hedge delay (ms): a leg still running after this also goes to a second replica.
    #[arg(long, default_value_t = 6.0)]
    hedge_ms: f64,
    /// Simulated seconds per setting.
    #[arg(long, default_value_t = 20.0)]
    seconds: f64,
    /// Partitions a query touches; one simulation per value, each with and without hedging.
    #[arg(long, value_delimiter = ',', default_value = "4,8,16")]
    touched: Vec<usize>,
    /// Seed of the simulation.
    #[arg(long, default_value_t = 7)]
    seed: u64,
}

/// Prints the arithmetic, then one row per simulated setting.
pub fn run(args: &Args) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.nodes >= args.replicas && args.replicas >= 1,
        "need at least as many nodes as replicas"
    );
    arithmetic(args);
    println!(
        "\n## Query path ({} QPS, {} cores a node, search median {} ms σ {}, {}% stalled ×{}, RTT {} ms)\n",
        args.qps,
        args.cores,
        args.search_ms,
        args.sigma,
        args.stall_share * 100.0,
        args.stall_factor,
        args.rtt_ms
    );
    println!("| partitions touched | hedging | node utilisation | legs/s a node | p50 ms | p99 ms | p99.9 ms | hedges/query |");
    println!("|---:|---|---:|---:|---:|---:|---:|---:|");
    let partitions = args.vectors.div_ceil(args.partition_vectors) as usize;
    for &touched in &args.touched {
        for hedge in [false, true] {
            let r = simulate(args, partitions, touched.min(partitions), hedge);
            println!(
                "| {touched} | {} | {:.0}% | {:.0} | {:.2} | {:.2} | {:.2} | {:.3} |",
                if hedge {
                    format!("after {} ms", args.hedge_ms)
                } else {
                    "off".into()
                },
                r.utilisation * 100.0,
                r.legs_per_node_second,
                r.p50,
                r.p99,
                r.p999,
                r.hedges_per_query
            );
        }
    }
    Ok(())
}

const GB: f64 = 1e9;

fn arithmetic(args: &Args) {
    let (n, d, r, nodes) = (
        args.vectors as f64,
        args.dim as f64,
        args.replicas as f64,
        args.nodes as f64,
    );
    let partitions = args.vectors.div_ceil(args.partition_vectors);
    let graph = 2.0 * args.m as f64 * 4.0 * 1.07; // layer 0, plus ~7% for the upper layers
    let floats = d * 4.0;
    let copies = n * r / nodes;
    println!(
        "# scale-sim: {} vectors × {}-d, {} nodes, R = {}, {} vectors a partition",
        args.vectors, args.dim, args.nodes, args.replicas, args.partition_vectors
    );
    println!("\n## Memory and groups\n");
    println!("| figure | value |\n|---|---:|");
    println!("| raw vectors, one copy | {:.0} GB |", n * floats / GB);
    println!("| partitions | {partitions} |");
    println!("| replicas a node | {:.1} |", partitions as f64 * r / nodes);
    println!("| vectors a node (all copies) | {:.0} M |", copies / 1e6);
    println!(
        "| memory a node, float32 + graph | {:.0} GB |",
        copies * (floats + graph) / GB
    );
    println!(
        "| memory a node, {}-byte codes + graph (floats on disk) | {:.1} GB (+ {:.0} GB of disk) |",
        args.code_bytes,
        copies * (args.code_bytes as f64 + graph) / GB,
        copies * floats / GB
    );
    let led = partitions as f64 / nodes;
    let beats = led * (r - 1.0) * 1000.0 / args.heartbeat_ms as f64;
    println!("| partition groups a node leads | {led:.1} |");
    println!("| heartbeats a node sends a second (partition groups) | {beats:.0} |");
    println!(
        "| heartbeats the metadata leader sends a second (every node a member, 200 ms) | {:.0} |",
        (nodes - 1.0) * 5.0
    );
}

/// What one simulated setting measured.
struct Outcome {
    utilisation: f64,
    legs_per_node_second: f64,
    p50: f64,
    p99: f64,
    p999: f64,
    hedges_per_query: f64,
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// A query arrives.
    Arrive,
    /// A search (of query `q`, leg `leg`) finishes on `node`.
    Done { node: usize, q: usize, leg: usize },
    /// Leg `leg` of query `q` is due a hedge if still running.
    Hedge { q: usize, leg: usize },
}

struct Search {
    q: usize,
    leg: usize,
    took: u64,
}

struct Query {
    arrived: u64,
    legs: Vec<usize>,
    done: Vec<bool>,
    sent_to: Vec<usize>,
    left: usize,
}

/// Nanoseconds from milliseconds.
fn ns(ms: f64) -> u64 {
    (ms * 1e6) as u64
}

/// The simulated nodes and the event queue.
struct Cluster {
    cores: usize,
    /// Searches running, per node.
    busy: Vec<usize>,
    /// Searches waiting for a core, per node.
    queued: Vec<VecDeque<Search>>,
    /// Core time given out, per node (ns).
    busy_ns: Vec<u64>,
    events: BinaryHeap<Reverse<(u64, u64, Event)>>,
    /// Ties in time are broken in the order events were made.
    seq: u64,
}

impl Cluster {
    fn push(&mut self, at: u64, event: Event) {
        self.seq += 1;
        self.events.push(Reverse((at, self.seq, event)));
    }

    /// Searches and queued on `node`: what the replica choice compares.
    fn load(&self, node: usize) -> usize {
        self.busy[node] + self.queued[node].len()
    }

    /// Starts `search` on `node` at `now`, or queues it behind the running ones.
    fn run(&mut self, node: usize, search: Search, now: u64) {
        if self.busy[node] < self.cores {
            self.busy[node] += 1;
            self.busy_ns[node] += search.took;
            let done = Event::Done {
                node,
                q: search.q,
                leg: search.leg,
            };
            self.push(now + search.took, done);
        } else {
            self.queued[node].push_back(search);
        }
    }
}

fn simulate(args: &Args, partitions: usize, touched: usize, hedge: bool) -> Outcome {
    let mut rng = StdRng::seed_from_u64(args.seed);
    let gaps = Exp::new(args.qps / 1e9).expect("a positive rate");
    let lognormal =
        LogNormal::new((ns(args.search_ms) as f64).ln(), args.sigma).expect("a valid spread");
    let end = ns(args.seconds * 1000.0);
    let rtt = ns(args.rtt_ms);
    // Replica k of partition p lives on node (p·R + k) mod nodes: every node holds as many.
    let replicas_of = |p: usize| -> Vec<usize> {
        (0..args.replicas)
            .map(|k| (p * args.replicas + k) % args.nodes)
            .collect()
    };
    let took = |rng: &mut StdRng| -> u64 {
        let t = lognormal.sample(rng);
        let stalled = rng.gen_bool(args.stall_share);
        (if stalled { t * args.stall_factor } else { t }) as u64
    };
    let mut cluster = Cluster {
        cores: args.cores,
        busy: vec![0; args.nodes],
        queued: (0..args.nodes).map(|_| VecDeque::new()).collect(),
        busy_ns: vec![0; args.nodes],
        events: BinaryHeap::new(),
        seq: 0,
    };
    let mut queries: Vec<Query> = Vec::new();
    let mut latencies: Vec<f64> = Vec::new();
    let (mut legs, mut hedges) = (0u64, 0u64);
    cluster.push(0, Event::Arrive);
    while let Some(Reverse((now, _, event))) = cluster.events.pop() {
        match event {
            Event::Arrive => {
                if now < end {
                    cluster.push(now + gaps.sample(&mut rng) as u64, Event::Arrive);
                }
                let mut chosen: Vec<usize> = Vec::with_capacity(touched);
                while chosen.len() < touched {
                    let p = rng.gen_range(0..partitions);
                    if !chosen.contains(&p) {
                        chosen.push(p);
                    }
                }
                let q = queries.len();
                let mut sent_to = Vec::with_capacity(touched);
                for (leg, &p) in chosen.iter().enumerate() {
                    let node = replicas_of(p)
                        .into_iter()
                        .min_by_key(|n| cluster.load(*n))
                        .expect("a replica");
                    sent_to.push(node);
                    legs += 1;
                    let search = Search {
                        q,
                        leg,
                        took: took(&mut rng),
                    };
                    cluster.run(node, search, now + rtt / 2);
                    if hedge {
                        cluster.push(now + ns(args.hedge_ms), Event::Hedge { q, leg });
                    }
                }
                queries.push(Query {
                    arrived: now,
                    legs: chosen,
                    done: vec![false; touched],
                    sent_to,
                    left: touched,
                });
            }
            Event::Done { node, q, leg } => {
                cluster.busy[node] -= 1;
                if let Some(next) = cluster.queued[node].pop_front() {
                    cluster.run(node, next, now);
                }
                let query = &mut queries[q];
                if !query.done[leg] {
                    query.done[leg] = true;
                    query.left -= 1;
                    if query.left == 0 {
                        latencies.push((now + rtt / 2 - query.arrived) as f64 / 1e6);
                    }
                }
            }
            Event::Hedge { q, leg } => {
                let query = &queries[q];
                if query.done[leg] {
                    continue;
                }
                let first = query.sent_to[leg];
                let Some(node) = replicas_of(query.legs[leg])
                    .into_iter()
                    .filter(|n| *n != first)
                    .min_by_key(|n| cluster.load(*n))
                else {
                    continue;
                };
                hedges += 1;
                let search = Search {
                    q,
                    leg,
                    took: took(&mut rng),
                };
                cluster.run(node, search, now + rtt / 2);
            }
        }
    }
    latencies.sort_by(f64::total_cmp);
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize];
    let horizon = end as f64;
    Outcome {
        utilisation: cluster.busy_ns.iter().sum::<u64>() as f64
            / (horizon * args.nodes as f64 * args.cores as f64),
        legs_per_node_second: legs as f64 / args.nodes as f64 / args.seconds,
        p50: at(0.5),
        p99: at(0.99),
        p999: at(0.999),
        hedges_per_query: hedges as f64 / queries.len() as f64,
    }
}
