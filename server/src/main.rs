//! `cairn`: the Cairn vector search server.
//!
//! `cairn serve` runs the standalone server on its embedded default configuration (data in
//! `./data`, HTTP on 127.0.0.1:6333); see `configs/standalone.toml` for every setting.

use std::path::PathBuf;

use anyhow::Context;
use cairn_server::config::{CliOverrides, Config};
use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;

#[derive(Parser)]
#[command(
    name = "cairn",
    version,
    about = "Cairn: distributed vector similarity search"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the server.
    Serve {
        /// TOML file overriding the embedded defaults.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Data folder (`node.data_dir`).
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// Listen address, HOST:PORT (`http.addr`); port 0 picks a free one.
        #[arg(long)]
        http_addr: Option<String>,
        /// Write the bound address to this file once ready (`http.ready_file`).
        #[arg(long)]
        ready_file: Option<PathBuf>,
        /// standalone or node (`cluster.role`).
        #[arg(long)]
        role: Option<String>,
        /// Join the cluster of the node at this internal URL on first start (`cluster.join`).
        #[arg(long)]
        join: Option<String>,
    },
    /// Restore every collection and alias of a full-storage snapshot (`POST /snapshots`) into
    /// the data folder of a standalone server that is not running, then exit.
    Restore {
        /// The full-storage snapshot file.
        #[arg(long)]
        snapshot: PathBuf,
        /// TOML file overriding the embedded defaults.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Data folder (`node.data_dir`).
        #[arg(long)]
        data_dir: Option<PathBuf>,
    },
    /// Exit 0 when `GET <url>` answers 200 (container health checks: the runtime image has
    /// no curl).
    Health {
        /// What to probe.
        #[arg(long, default_value = "http://127.0.0.1:6333/readyz")]
        url: String,
    },
    /// Print the effective configuration (defaults, file, environment and flags merged).
    Config {
        /// TOML file overriding the embedded defaults.
        #[arg(long)]
        config: Option<PathBuf>,
    },
}

fn init_logging(config: &Config) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(&config.log.level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if config.log.format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve {
            config,
            data_dir,
            http_addr,
            ready_file,
            role,
            join,
        } => {
            let overrides = CliOverrides {
                data_dir,
                http_addr,
                ready_file,
                role,
                join,
            };
            let config = Config::load(config.as_deref(), &overrides)?;
            init_logging(&config);
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .context("cannot start tokio")?;
            runtime.block_on(cairn_server::roles::run(config))
        }
        Command::Restore {
            snapshot,
            config,
            data_dir,
        } => {
            let overrides = CliOverrides {
                data_dir,
                ..CliOverrides::default()
            };
            let config = Config::load(config.as_deref(), &overrides)?;
            init_logging(&config);
            cairn_server::roles::restore_storage(&config, &snapshot)
        }
        Command::Health { url } => health(&url),
        Command::Config { config } => {
            let config = Config::load(config.as_deref(), &CliOverrides::default())?;
            let text = toml_text(&config)?;
            std::io::Write::write_all(&mut std::io::stdout(), text.as_bytes())?;
            Ok(())
        }
    }
}

/// The configuration as TOML, its secrets masked.
fn toml_text(config: &Config) -> anyhow::Result<String> {
    let mut shown = config.clone();
    shown.http.api_key = shown.http.api_key.masked();
    shown.http.read_only_api_key = shown.http.read_only_api_key.masked();
    shown.cluster.secret = shown.cluster.secret.masked();
    Ok(
        figment::Figment::from(figment::providers::Serialized::defaults(&shown))
            .extract::<toml::Value>()
            .map(|v| v.to_string())?,
    )
}

/// A one-shot HTTP/1.0 GET over a plain TCP connection, enough for a health probe.
fn health(url: &str) -> anyhow::Result<()> {
    use std::io::{Read, Write};
    let rest = url
        .strip_prefix("http://")
        .context("only http:// URLs can be probed")?;
    let (host, path) = rest
        .split_once('/')
        .map_or((rest, "/".to_owned()), |(h, p)| (h, format!("/{p}")));
    let timeout = std::time::Duration::from_secs(3);
    let addr = std::net::ToSocketAddrs::to_socket_addrs(host)?
        .next()
        .with_context(|| format!("{host} does not resolve"))?;
    let mut stream = std::net::TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n")?;
    let mut head = [0u8; 12];
    stream.read_exact(&mut head)?;
    let status = String::from_utf8_lossy(&head[9..12]).into_owned();
    anyhow::ensure!(status == "200", "{url} answered {status}");
    Ok(())
}
