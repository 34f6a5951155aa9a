//! Starts a real `cairn serve` on port 0 over a temporary data folder.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};

/// A `cairn` process that is killed when dropped. Its data folder outlives restarts.
pub struct CairnProcess {
    child: Child,
    binary: PathBuf,
    env: Vec<(String, String)>,
    /// Bound address.
    pub addr: String,
    dir: tempfile::TempDir,
}

/// The `cairn` binary: `--cairn` if given, else next to this executable (same target dir).
pub fn find_binary(explicit: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(path) = explicit {
        return Ok(path.to_path_buf());
    }
    let me = std::env::current_exe()?;
    let sibling = me.with_file_name("cairn");
    if sibling.is_file() {
        Ok(sibling)
    } else {
        bail!(
            "no cairn binary beside {}; build the workspace or pass --cairn",
            me.display()
        )
    }
}

impl CairnProcess {
    /// Starts the server with extra `CAIRN__…` settings and waits until it is ready.
    pub fn start(binary: &Path, env: &[(&str, &str)]) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let (child, addr) = spawn(binary, dir.path(), &env)?;
        Ok(Self {
            child,
            binary: binary.to_path_buf(),
            env,
            addr,
            dir,
        })
    }

    /// `http://addr/path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// The server's data folder (`node.data_dir`).
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// SIGTERM (the server drains and writes every index snapshot), then waits for the exit.
    pub fn stop(&mut self) -> anyhow::Result<()> {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .context("cannot run kill")?;
        ensure!(status.success(), "kill -TERM failed");
        let exit = self.child.wait()?;
        ensure!(exit.success(), "cairn exited with {exit} on SIGTERM");
        Ok(())
    }

    /// Starts the server again on the same data folder (after [`CairnProcess::stop`]).
    pub fn restart(&mut self) -> anyhow::Result<()> {
        let (child, addr) = spawn(&self.binary, self.dir.path(), &self.env)?;
        self.child = child;
        self.addr = addr;
        Ok(())
    }
}

/// Spawns `cairn serve` over `dir/data` and waits for its ready file.
fn spawn(binary: &Path, dir: &Path, env: &[(String, String)]) -> anyhow::Result<(Child, String)> {
    let ready = dir.join("ready");
    if ready.is_file() {
        std::fs::remove_file(&ready)?;
    }
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("cairn.log"))?;
    let child = Command::new(binary)
        .args(["serve", "--http-addr", "127.0.0.1:0"])
        .arg("--data-dir")
        .arg(dir.join("data"))
        .arg("--ready-file")
        .arg(&ready)
        .env("RUST_LOG", "warn")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .with_context(|| format!("cannot start {}", binary.display()))?;
    let started = Instant::now();
    while !ready.is_file() {
        if started.elapsed() > Duration::from_secs(120) {
            bail!("cairn did not become ready within 120 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let addr = std::fs::read_to_string(&ready)?.trim().to_owned();
    Ok((child, addr))
}

impl Drop for CairnProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
