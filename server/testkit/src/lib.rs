//! cairn-testkit: real `cairn serve` processes for tests and measurements, and the Python
//! virtualenvs of the tests that run real client packages.
//!
//! Every test that needs a server runs the release binary the workspace built, on port 0 over
//! a temporary data folder, and learns the bound address from the server's `--ready-file`:
//! nothing is mocked, and tests never race for a fixed port. A [`CairnProcess`] is killed
//! when dropped, so a failing test leaves no server behind.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a server may take to load its collections before start-up counts as failed.
const START_TIMEOUT: Duration = Duration::from_secs(180);

/// What can go wrong starting or stopping a server.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No `cairn` binary where it was looked for.
    #[error(
        "no cairn binary at {0}; build the workspace first (cargo build --release --workspace)"
    )]
    NoBinary(PathBuf),
    /// An I/O error on a file or process.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The server exited before it was ready, or did not stop cleanly.
    #[error("cairn {what}; log tail:\n{log}")]
    Server {
        /// What happened.
        what: String,
        /// The last lines of the server's log.
        log: String,
    },
}

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, Error>;

fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let context = context.into();
    move |source| Error::Io { context, source }
}

/// The `cairn` binary of the target directory this executable was built into.
///
/// Binaries live in `target/<profile>/`, test executables in `target/<profile>/deps/`, so the
/// server is looked for beside this executable and one folder up.
pub fn find_binary() -> Result<PathBuf> {
    let me = std::env::current_exe().map_err(io("cannot locate the current executable"))?;
    let dir = me.parent().unwrap_or(Path::new("."));
    let candidates = [dir.join("cairn"), dir.join("../cairn")];
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .ok_or_else(|| Error::NoBinary(candidates[0].clone()))
}

/// A running `cairn serve`, killed when dropped. Its data folder outlives restarts.
pub struct CairnProcess {
    child: Option<Child>,
    binary: PathBuf,
    env: Vec<(String, String)>,
    addr: String,
    dir: tempfile::TempDir,
    starts: u32,
    /// How long a start may take before it counts as failed.
    start_timeout: Duration,
}

impl CairnProcess {
    /// Starts the workspace's server (see [`find_binary`]) with extra `CAIRN__…` settings and
    /// waits until it is ready.
    pub fn start(env: &[(&str, &str)]) -> Result<Self> {
        Self::start_binary(&find_binary()?, env)
    }

    /// Starts a given `cairn` binary with extra `CAIRN__…` settings and waits until it is ready.
    pub fn start_binary(binary: &Path, env: &[(&str, &str)]) -> Result<Self> {
        let dir = tempfile::tempdir().map_err(io("cannot make a temporary folder"))?;
        let mut process = Self {
            child: None,
            binary: binary.to_path_buf(),
            env: env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            addr: String::new(),
            dir,
            starts: 0,
            start_timeout: START_TIMEOUT,
        };
        process.spawn(None)?;
        Ok(process)
    }

    /// How long later starts may take before they count as failed (a server loading an index
    /// of millions of vectors needs longer than the default three minutes).
    pub fn set_start_timeout(&mut self, timeout: Duration) {
        self.start_timeout = timeout;
    }

    /// `host:port` the server listens on.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// `http://host:port` plus `path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// The server's data folder (`node.data_dir`).
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Process id of the running server, if one runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The server's log so far (stderr of every start, appended).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("cairn.log")).unwrap_or_default()
    }

    /// SIGTERM (the server drains and writes every index snapshot), then waits for the exit,
    /// which must be clean.
    pub fn stop(&mut self) -> Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        signal(child.id(), "TERM")?;
        let exit = child.wait().map_err(io("cannot wait for cairn"))?;
        if !exit.success() {
            return Err(self.failure(format!("exited with {exit} on SIGTERM")));
        }
        Ok(())
    }

    /// SIGKILL: no drain, no snapshot; what was acknowledged must still be there on restart.
    pub fn kill(&mut self) -> Result<()> {
        if let Some(mut child) = self.child.take() {
            child.kill().map_err(io("cannot kill cairn"))?;
            child.wait().map_err(io("cannot wait for cairn"))?;
        }
        Ok(())
    }

    /// Starts the server again on the same data folder and, so that clients holding the old
    /// address reconnect, on the same port.
    pub fn restart(&mut self) -> Result<()> {
        let addr = self.addr.clone();
        self.kill()?;
        self.spawn(Some(&addr))
    }

    fn spawn(&mut self, addr: Option<&str>) -> Result<()> {
        self.starts += 1;
        let ready = self.dir.path().join(format!("ready-{}", self.starts));
        let log_path = self.dir.path().join("cairn.log");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(io(format!("cannot open {}", log_path.display())))?;
        let child = Command::new(&self.binary)
            .arg("serve")
            .arg("--http-addr")
            .arg(addr.unwrap_or("127.0.0.1:0"))
            .arg("--data-dir")
            .arg(self.data_dir())
            .arg("--ready-file")
            .arg(&ready)
            .env("RUST_LOG", "warn")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(io(format!("cannot start {}", self.binary.display())))?;
        let child = self.child.insert(child);
        let started = Instant::now();
        loop {
            if let Ok(addr) = std::fs::read_to_string(&ready) {
                self.addr = addr.trim().to_owned();
                return Ok(());
            }
            if let Ok(Some(status)) = child.try_wait() {
                self.child = None;
                return Err(self.failure(format!("exited with {status} before it was ready")));
            }
            if started.elapsed() > self.start_timeout {
                let timeout = self.start_timeout;
                return Err(self.failure(format!("was not ready within {timeout:?}")));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn failure(&self, what: String) -> Error {
        let log = self.log();
        let tail: Vec<&str> = log.lines().rev().take(40).collect();
        Error::Server {
            what,
            log: tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
        }
    }
}

/// The cluster secret of peer clusters started here.
pub const TEST_SECRET: &str = "cairn-testkit-secret";

/// A free TCP port on loopback for a server that must know its port before it starts (a peer
/// node's internal address is in every peer's configuration). Picked below the kernel's
/// ephemeral range, from a counter shared by the whole test process: a port taken from the
/// ephemeral range could be handed to another test's server binding port 0 in the moment
/// between this check and the server's own bind.
pub fn free_port() -> Result<u16> {
    use std::sync::atomic::{AtomicU16, Ordering};
    /// Where this process starts picking: spread by process id, so test binaries running at
    /// once rarely pick the same ports (a port in use is skipped anyway).
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let _ = NEXT.compare_exchange(
        0,
        20_000 + (std::process::id() % 500) as u16 * 20,
        Ordering::Relaxed,
        Ordering::Relaxed,
    );
    for _ in 0..2_000 {
        let port = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = if port >= 32_000 {
            NEXT.store(20_000, Ordering::Relaxed);
            20_000
        } else {
            port
        };
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    Err(io("cannot pick a free port")(std::io::Error::other(
        "no free port between 20000 and 32000",
    )))
}

/// Starts `n` peer nodes (`cluster.role = "node"`) that form one cluster, node 1 bootstrapping
/// it, each with `extra` settings besides. Their internal ports are picked free here; each
/// returns once it is ready (serving, its metadata group joined or forming).
pub fn start_peers(n: usize, extra: &[(&str, &str)]) -> Result<Vec<CairnProcess>> {
    let ports = (0..n).map(|_| free_port()).collect::<Result<Vec<u16>>>()?;
    let peers = format!(
        "[{}]",
        ports
            .iter()
            .enumerate()
            .map(|(i, port)| format!("\"{}=http://127.0.0.1:{port}\"", i + 1))
            .collect::<Vec<_>>()
            .join(",")
    );
    (0..n)
        .map(|i| {
            let id = (i + 1).to_string();
            let internal = format!("127.0.0.1:{}", ports[i]);
            let mut env = vec![
                ("CAIRN__CLUSTER__ROLE", "node"),
                ("CAIRN__CLUSTER__NODE_ID", id.as_str()),
                ("CAIRN__CLUSTER__PEERS", peers.as_str()),
                ("CAIRN__CLUSTER__INTERNAL_ADDR", internal.as_str()),
                ("CAIRN__CLUSTER__SECRET", TEST_SECRET),
                (
                    "CAIRN__CLUSTER__BOOTSTRAP",
                    if i == 0 { "true" } else { "false" },
                ),
            ];
            env.extend_from_slice(extra);
            CairnProcess::start(&env)
        })
        .collect()
}

/// Sends a signal by name (`TERM`, `STOP`, `CONT`, …) to a process.
pub fn signal(pid: u32, name: &str) -> Result<()> {
    let status = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .status()
        .map_err(io("cannot run kill"))?;
    if !status.success() {
        return Err(Error::Io {
            context: format!("kill -{name} {pid}"),
            source: std::io::Error::other(format!("exited with {status}")),
        });
    }
    if name == "STOP" {
        wait_until_stopped(pid)?;
    }
    Ok(())
}

/// `kill` returns once SIGSTOP is queued, but each thread stops only when the kernel next
/// handles signals for it: a request sent in between can still be answered. Waits until every
/// thread of `pid` shows state `T` (stopped) in `/proc`, so "paused" means paused.
fn wait_until_stopped(pid: u32) -> Result<()> {
    let tasks = PathBuf::from(format!("/proc/{pid}/task"));
    let started = Instant::now();
    loop {
        let threads =
            std::fs::read_dir(&tasks).map_err(io(format!("cannot list {}", tasks.display())))?;
        let all_stopped = threads.flatten().all(|t| {
            std::fs::read_to_string(t.path().join("stat")).is_ok_and(|stat| {
                // The state follows the parenthesised command name, which may hold spaces.
                stat.rsplit_once(") ")
                    .is_some_and(|(_, rest)| rest.starts_with('T') || rest.starts_with('t'))
            })
        });
        if all_stopped {
            return Ok(());
        }
        if started.elapsed() > Duration::from_secs(5) {
            return Err(Error::Io {
                context: format!("waiting for {pid} to stop"),
                source: std::io::Error::other("not every thread stopped within 5 s"),
            });
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

impl Drop for CairnProcess {
    fn drop(&mut self) {
        let _ = self.kill();
    }
}

/// A self-signed certificate for `localhost` and 127.0.0.1 and its private key, written as
/// `cert.pem` and `key.pem` in `dir`, for a server that speaks HTTPS
/// (`CAIRN__HTTP__TLS_CERT_FILE`, `CAIRN__HTTP__TLS_KEY_FILE`) and the client that trusts it:
/// the two paths.
pub fn self_signed_certificate(dir: &Path) -> Result<(PathBuf, PathBuf)> {
    let made = rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()])
        .map_err(|e| io("cannot make a certificate")(std::io::Error::other(e)))?;
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert, made.cert.pem())
        .map_err(io(format!("cannot write {}", cert.display())))?;
    std::fs::write(&key, made.key_pair.serialize_pem())
        .map_err(io(format!("cannot write {}", key.display())))?;
    Ok((cert, key))
}

/// The python of a virtualenv named `name` under `dir` (a test's target directory) with
/// `requirements` installed from PyPI, made on first use and kept between runs (a marker names
/// what was installed, so a new pin rebuilds it). Tests run in parallel: one makes it, the
/// others wait.
pub fn venv(dir: &Path, name: &str, requirements: &[&str]) -> Result<PathBuf> {
    static MAKING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = MAKING.lock().unwrap_or_else(|e| e.into_inner());
    let venv = dir.join(name);
    let python = venv.join("bin/python");
    let marker = venv.join(format!(".installed-{}", requirements.join("+")));
    if marker.is_file() {
        return Ok(python);
    }
    let _ = std::fs::remove_dir_all(&venv);
    let made = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .status()
        .map_err(io("python3 -m venv"))?;
    if !made.success() {
        return Err(Error::Io {
            context: "python3 -m venv".into(),
            source: std::io::Error::other(
                "cannot create a virtualenv (is python3-venv installed?)",
            ),
        });
    }
    pip_install(&python, requirements, |_| {})?;
    std::fs::write(&marker, "").map_err(io(marker.display().to_string()))?;
    Ok(python)
}

/// `pip install` of `what` (requirements or paths) into the virtualenv of `python`, quietly;
/// `configure` adds options or environment to the command.
pub fn pip_install<S: AsRef<std::ffi::OsStr> + std::fmt::Debug>(
    python: &Path,
    what: &[S],
    configure: impl FnOnce(&mut Command),
) -> Result<()> {
    let mut command = Command::new(python);
    command.args([
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
    ]);
    configure(&mut command);
    let installed = command.args(what).status().map_err(io("pip install"))?;
    if installed.success() {
        Ok(())
    } else {
        Err(Error::Io {
            context: format!("pip install {what:?}"),
            source: std::io::Error::other("pip failed"),
        })
    }
}

/// The target directory tests build into: `CARGO_TARGET_DIR`, else `target/` beside the
/// workspace root of the crate at `manifest_dir`.
pub fn target_dir(manifest_dir: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || {
            manifest_dir
                .ancestors()
                .find(|dir| dir.join("Cargo.lock").is_file())
                .unwrap_or(manifest_dir)
                .join("target")
        },
        PathBuf::from,
    )
}
