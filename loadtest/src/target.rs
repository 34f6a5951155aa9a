//! The server under test: base URLs given on the command line, or a standalone `cairn`
//! started for the run; and the collection, created and filled through the SDK when needed.

use std::time::{Duration, Instant};

use anyhow::Context;
use cairn_client::api::{Distance, HnswConfigDiff};
use cairn_client::{ChunkedUpsert, Client, CountPoints, CreateCollectionBuilder, Point};
use cairn_testkit::CairnProcess;
use indicatif::{ProgressBar, ProgressStyle};

use crate::workload::{Source, Workload};

/// Command-line options naming the data, the server and the collection (shared by every SDK
/// command).
#[derive(clap::Args, Debug, Clone)]
pub struct TargetArgs {
    /// Dataset folder, or `clustered:N:DIM[:SEED]` / `longtail:N:DIM[:SEED]` /
    /// `hard:N:DIM[:SEED]`.
    #[arg(long)]
    pub dataset: Source,
    /// Use only the first N queries of the dataset.
    #[arg(long)]
    pub queries: Option<usize>,
    /// Results per query; recall@k is measured at this k.
    #[arg(long, default_value_t = 10)]
    pub k: usize,
    /// Base URL of a running server or cluster node (repeat for failover). Without one, a
    /// standalone server is started over a temporary folder for the run.
    #[arg(long = "url")]
    pub urls: Vec<String>,
    /// Collection to query; created and loaded from the dataset unless it already holds as
    /// many points as the dataset.
    #[arg(long, default_value = "loadtest")]
    pub collection: String,
    /// Distance of the collection and of the ground truth: Euclid, Cosine or Dot.
    #[arg(long, default_value = "Euclid", value_parser = crate::workload::parse_distance)]
    pub distance: Distance,
    /// HNSW links per node, when the collection is created.
    #[arg(long, default_value_t = 16)]
    pub m: usize,
    /// HNSW construction candidate list, when the collection is created.
    #[arg(long, default_value_t = 200)]
    pub ef_construct: usize,
    /// Partitions of the collection, when it is created (`> 1`: content-routed; the load
    /// waits until the router is trained and every point re-homed).
    #[arg(long, default_value_t = 1)]
    pub partitions: u32,
    /// Share of points also stored in a second partition, when a partitioned collection is
    /// created (the server's default when left out).
    #[arg(long)]
    pub spill: Option<f64>,
    /// Copies of each partition, when the collection is created (on distinct cluster
    /// nodes).
    #[arg(long, default_value_t = 1)]
    pub replication: u32,
    /// Points per upsert request while loading.
    #[arg(long, default_value_t = 512)]
    pub upsert_chunk: usize,
    /// Per-request timeout in milliseconds.
    #[arg(long, default_value_t = 30_000)]
    pub timeout_ms: u64,
    /// Client retries of a failed query (the SDK's default is 3). Measurements default to 0
    /// so that every query's own outcome is counted; raise it to see what an application
    /// using the SDK's defaults would see.
    #[arg(long, default_value_t = 0)]
    pub retries: u32,
    /// A setting of the server this run starts, as `CAIRN__SECTION__KEY=VALUE` (repeatable;
    /// ignored with `--url`), e.g. `CAIRN__HTTP__MAX_REQUESTS_IN_FLIGHT=8`.
    #[arg(long = "server-env", value_parser = parse_setting)]
    pub server_env: Vec<(String, String)>,
    /// An API key: the client sends it, and a server this run starts requires it.
    #[arg(long)]
    pub api_key: Option<String>,
    /// The server this run starts speaks HTTPS with a self-signed certificate made for the
    /// run, which the client trusts.
    #[arg(long)]
    pub tls: bool,
}

fn parse_setting(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .filter(|(k, _)| k.starts_with("CAIRN__"))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .ok_or_else(|| format!("expected CAIRN__SECTION__KEY=VALUE, got {s:?}"))
}

/// A connected target; holds the server process when this run started one.
pub struct Target {
    /// SDK client of the target.
    pub client: Client,
    /// The collection.
    pub collection: String,
    /// Base URL of the first server (`http://host:port` or `https://…`).
    pub url: String,
    /// The API key the client sends.
    pub api_key: Option<String>,
    /// The server started for this run (dropped, and so killed, at the end).
    pub process: Option<CairnProcess>,
    /// The certificate and key of a server started with `--tls`, kept while it runs.
    _tls: Option<tempfile::TempDir>,
}

impl Target {
    /// Loads the workload, connects (or starts a server) and makes sure the collection holds
    /// the workload.
    pub async fn prepare(args: &TargetArgs) -> anyhow::Result<(Self, Workload)> {
        let workload = Workload::load(&args.dataset, args.distance, args.queries)?;
        let mut env: Vec<(String, String)> = args.server_env.clone();
        if let Some(key) = &args.api_key {
            env.push(("CAIRN__HTTP__API_KEY".into(), key.clone()));
        }
        let tls = match (args.tls, args.urls.is_empty()) {
            (true, true) => Some(self_signed()?),
            (true, false) => anyhow::bail!("--tls makes the server this run starts: no --url"),
            (false, _) => None,
        };
        if let Some((dir, _)) = &tls {
            for (key, file) in [
                ("CAIRN__HTTP__TLS_CERT_FILE", "cert.pem"),
                ("CAIRN__HTTP__TLS_KEY_FILE", "key.pem"),
            ] {
                env.push((key.into(), dir.path().join(file).display().to_string()));
            }
        }
        let (urls, process) = if args.urls.is_empty() {
            let env: Vec<(&str, &str)> =
                env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let process = tokio::task::block_in_place(|| CairnProcess::start(&env))
                .context("cannot start a standalone server (or pass --url)")?;
            let url = match tls {
                Some(_) => format!("https://{}", process.addr()),
                None => process.url(""),
            };
            (vec![url], Some(process))
        } else {
            (args.urls.clone(), None)
        };
        let mut builder = Client::builder()
            .timeout(Duration::from_millis(args.timeout_ms))
            .retries(args.retries);
        for url in &urls {
            builder = builder.url(url.clone());
        }
        if let Some(key) = &args.api_key {
            builder = builder.api_key(key.clone());
        }
        if let Some((_, cert)) = &tls {
            builder = builder.root_certificate_pem(cert.clone());
        }
        let target = Target {
            client: builder.build()?,
            collection: args.collection.clone(),
            url: urls.first().cloned().context("no server URL")?,
            api_key: args.api_key.clone(),
            process,
            _tls: tls.map(|(dir, _)| dir),
        };
        target.load(args, &workload).await?;
        Ok((target, workload))
    }

    async fn load(&self, args: &TargetArgs, workload: &Workload) -> anyhow::Result<()> {
        let client = &self.client;
        let n = workload.base.len();
        if client.collection_exists(&self.collection).await? {
            let count = client.count(CountPoints::new(&self.collection)).await?;
            if count == n as u64 {
                tracing::info!(collection = %self.collection, count, "reusing the loaded collection");
                return Ok(());
            }
            client.delete_collection(&self.collection).await?;
        }
        let mut create =
            CreateCollectionBuilder::new(&self.collection, workload.dim(), args.distance)
                .hnsw(HnswConfigDiff {
                    m: Some(args.m),
                    ef_construct: Some(args.ef_construct),
                    ..HnswConfigDiff::default()
                })
                .partitions(args.partitions)
                .replication_factor(args.replication);
        if let Some(spill) = args.spill {
            create = create.spill(spill);
        }
        client.create_collection(create).await?;
        let bar = ProgressBar::new(n as u64).with_style(
            ProgressStyle::with_template(
                "loading {bar:40} {pos}/{len} points ({per_sec}, eta {eta})",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        let started = Instant::now();
        let points = workload
            .base
            .rows()
            .enumerate()
            .map(|(i, row)| Point::new(i as u64, row.to_vec()));
        client
            .upsert_chunked(
                &self.collection,
                points,
                ChunkedUpsert {
                    chunk_size: args.upsert_chunk,
                    concurrency: 2,
                    wait: true,
                },
                |p| bar.set_position(p.done as u64),
            )
            .await?;
        bar.finish_and_clear();
        tracing::info!(points = n, secs = started.elapsed().as_secs_f64(), "loaded");
        self.wait_routed().await
    }

    /// Waits until a partitioned collection's routing is settled (router trained, every point
    /// where it says, no retraining due); returns at once for one partition.
    async fn wait_routed(&self) -> anyhow::Result<()> {
        let started = Instant::now();
        loop {
            let info = self.client.collection_info(&self.collection).await?;
            let Some(routing) = info.routing else {
                return Ok(());
            };
            if routing.phase == "routed" && !routing.training_due {
                tracing::info!(partitions = ?routing.partition_points, version = routing.version,
                    centres = routing.centres, branching = routing.branching, spill = routing.spill,
                    secs = started.elapsed().as_secs_f64(), "routed");
                return Ok(());
            }
            anyhow::ensure!(
                started.elapsed() < Duration::from_secs(600),
                "collection still {} after 10 minutes",
                routing.phase
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// A self-signed certificate for 127.0.0.1 and `localhost`, written with its key in a new
/// temporary folder; the folder and the certificate.
fn self_signed() -> anyhow::Result<(tempfile::TempDir, Vec<u8>)> {
    let dir = tempfile::tempdir()?;
    let (cert, _) = cairn_testkit::self_signed_certificate(dir.path())?;
    let cert = std::fs::read(cert)?;
    Ok((dir, cert))
}
