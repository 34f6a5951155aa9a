//! `chaos`: steady open-loop queries while a fault is injected and then repaired, with
//! failed queries, recall and latency reported for before / during / after.
//!
//! Faults are either shell commands, which work against any deployment (`--fault
//! 'docker-compose -f configs/docker-compose.yml kill node-2'`, and `--recover` the same with
//! `start`), or built-ins acting on the standalone server this run started itself (no
//! `--url`): `kill` (SIGKILL) with `restart` (same port, same data), and `pause` (SIGSTOP, a
//! stalled node) with `resume` (SIGCONT).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context};
use cairn_testkit::CairnProcess;
use serde::Serialize;

use crate::openloop::{self, Phases, Schedule};
use crate::stats::Summary;
use crate::target::{Target, TargetArgs};

/// Pause between the start of "during" and the fault (see the fault step).
const FAULT_GRACE: Duration = Duration::from_millis(100);

/// Options of `chaos`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    target: TargetArgs,
    /// Query rate in queries per second.
    #[arg(long, default_value_t = 100.0)]
    rate: f64,
    /// Seconds of healthy load before the fault.
    #[arg(long, default_value_t = 5.0)]
    before_secs: f64,
    /// Seconds from the start of "during" to the repair (the fault comes 0.1 s in).
    #[arg(long, default_value_t = 10.0)]
    during_secs: f64,
    /// Seconds of load after the repair.
    #[arg(long, default_value_t = 10.0)]
    after_secs: f64,
    /// The fault: `kill`, `pause` (built-ins, on a server this run started) or a shell command.
    #[arg(long)]
    fault: String,
    /// The repair: `restart`, `resume` (built-ins) or a shell command.
    #[arg(long)]
    recover: String,
    /// `params.hnsw_ef` of every query.
    #[arg(long)]
    ef: Option<usize>,
    /// Write the JSON summary here (it is always printed).
    #[arg(long)]
    json: Option<PathBuf>,
}

/// The JSON summary of a chaos run.
#[derive(Debug, Serialize)]
pub struct Report {
    /// Dataset name.
    pub dataset: String,
    /// The fault injected.
    pub fault: String,
    /// The repair.
    pub recover: String,
    /// How long the repair step took (a restart: until the server was ready again).
    pub repair_secs: f64,
    /// Healthy load before the fault.
    pub before: Summary,
    /// Load between fault and repair.
    pub during: Summary,
    /// Load after the repair.
    pub after: Summary,
}

/// One fault or repair step.
#[derive(Debug, Clone)]
enum Action {
    Kill,
    Restart,
    Pause,
    Resume,
    Shell(String),
}

impl Action {
    fn parse(s: &str) -> Self {
        match s {
            "kill" => Action::Kill,
            "restart" => Action::Restart,
            "pause" => Action::Pause,
            "resume" => Action::Resume,
            other => Action::Shell(other.to_owned()),
        }
    }

    fn needs_own_server(&self) -> bool {
        !matches!(self, Action::Shell(_))
    }

    /// Runs the step (blocking: restarts wait for the server to be ready again).
    fn apply(&self, server: Option<&Mutex<CairnProcess>>) -> anyhow::Result<()> {
        let own = || -> anyhow::Result<std::sync::MutexGuard<'_, CairnProcess>> {
            let server = server.context("built-in faults act on a server this run started")?;
            Ok(server
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner))
        };
        match self {
            Action::Kill => own()?.kill()?,
            Action::Restart => own()?.restart()?,
            Action::Pause | Action::Resume => {
                let process = own()?;
                let pid = process.pid().context("the server is not running")?;
                let signal = if matches!(self, Action::Pause) {
                    "STOP"
                } else {
                    "CONT"
                };
                cairn_testkit::signal(pid, signal)?;
            }
            Action::Shell(command) => {
                let status = std::process::Command::new("sh")
                    .args(["-c", command])
                    .status()
                    .with_context(|| format!("cannot run {command:?}"))?;
                if !status.success() {
                    bail!("{command:?} exited with {status}");
                }
            }
        }
        Ok(())
    }
}

/// Runs the scenario and prints the per-phase table.
pub async fn run(args: &Args) -> anyhow::Result<Report> {
    let (fault, recover) = (Action::parse(&args.fault), Action::parse(&args.recover));
    if (fault.needs_own_server() || recover.needs_own_server()) && !args.target.urls.is_empty() {
        bail!("kill/restart/pause/resume act on a server this run starts; with --url, pass shell commands");
    }
    let (mut target, workload) = Target::prepare(&args.target).await?;
    let server: Option<Arc<Mutex<CairnProcess>>> =
        target.process.take().map(|p| Arc::new(Mutex::new(p)));
    let secs = |s: f64| Duration::from_secs_f64(s.max(0.0));
    let schedule = Schedule {
        rate: args.rate,
        phase_rates: Vec::new(),
        k: args.target.k,
        ef: args.ef,
        // A stalled server must show up as timeouts and overload, not as unbounded memory.
        max_in_flight: 4096,
        lean: false,
    };
    // "during" lasts from the fault until the repair has *completed* (a restart included),
    // so that "after" measures a repaired system; the repair's own length is reported.
    let phases = Phases::new(3);
    let steps = {
        let (server, phases) = (server.clone(), Arc::clone(&phases));
        let (before, during, after) = (
            secs(args.before_secs),
            secs(args.during_secs),
            secs(args.after_secs),
        );
        tokio::spawn(async move {
            let result = async {
                tokio::time::sleep(before).await;
                phases.advance();
                let started = tokio::time::Instant::now();
                // Let queries already in flight, due in "before", finish against the healthy
                // system first, so that a failure counted in "before" is a real one.
                tokio::time::sleep(FAULT_GRACE).await;
                let s = server.clone();
                tokio::task::spawn_blocking(move || fault.apply(s.as_deref()))
                    .await
                    .context("fault step panicked")??;
                tracing::info!("fault injected");
                tokio::time::sleep_until(started + during).await;
                let repair = tokio::time::Instant::now();
                tokio::task::spawn_blocking(move || recover.apply(server.as_deref()))
                    .await
                    .context("repair step panicked")??;
                let repair_secs = repair.elapsed().as_secs_f64();
                tracing::info!(repair_secs, "repaired");
                phases.advance();
                tokio::time::sleep(after).await;
                anyhow::Ok(repair_secs)
            }
            .await;
            // Stop the load whatever happened, so that a failed step ends the run.
            phases.finish();
            result
        })
    };
    let phases = openloop::run(&target, &workload, &schedule, &phases).await?;
    let repair_secs = steps.await.context("fault steps panicked")??;
    let [before, during, after]: [Summary; 3] = phases
        .try_into()
        .map_err(|_| anyhow::anyhow!("expected three phases"))?;
    let report = Report {
        dataset: workload.name.clone(),
        fault: args.fault.clone(),
        recover: args.recover.clone(),
        repair_secs,
        before,
        during,
        after,
    };
    println!(
        "{:>7} {:>8} {:>7} {:>8} {:>8} {:>8} {:>9}  errors",
        "phase", "queries", "failed", "recall", "p50 ms", "p99 ms", "max ms"
    );
    for (name, s) in [
        ("before", &report.before),
        ("during", &report.during),
        ("after", &report.after),
    ] {
        println!(
            "{:>7} {:>8} {:>7} {:>8.4} {:>8.3} {:>8.3} {:>9.3}  {:?}",
            name, s.queries, s.failed, s.recall, s.p50_ms, s.p99_ms, s.max_ms, s.errors
        );
    }
    crate::stats::emit_json(&report, args.json.as_deref())?;
    drop(server);
    Ok(report)
}
