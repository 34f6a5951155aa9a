//! Starts a real `cairn serve` on port 0 over a temporary data folder.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

/// A `cairn` process that is killed when dropped.
pub struct CairnProcess {
    child: Child,
    /// Bound address.
    pub addr: String,
    _dir: tempfile::TempDir,
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
        let ready = dir.path().join("ready");
        let log = std::fs::File::create(dir.path().join("cairn.log"))?;
        let child = Command::new(binary)
            .args(["serve", "--http-addr", "127.0.0.1:0"])
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .arg("--ready-file")
            .arg(&ready)
            .env("RUST_LOG", "warn")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .with_context(|| format!("cannot start {}", binary.display()))?;
        let started = Instant::now();
        while !ready.is_file() {
            if started.elapsed() > Duration::from_secs(60) {
                bail!("cairn did not become ready within 60 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let addr = std::fs::read_to_string(&ready)?.trim().to_owned();
        Ok(Self {
            child,
            addr,
            _dir: dir,
        })
    }

    /// `http://addr/path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }
}

impl Drop for CairnProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
