//! A loopback TCP echo served by a thread of this process: a query's request body sent through
//! it and read back puts the kernel's socket path (two syscalls, a wake-up, softirq work)
//! before an in-process search, as it is before every search a server answers, without REST
//! or JSON. `standalone` uses it as its third side; `socket-gap` also makes it hold each reply.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};

/// The client end of an echo thread.
pub struct Echo {
    conn: TcpStream,
    buf: Vec<u8>,
}

impl Echo {
    /// Starts an echo thread that busy-waits `hold` before each reply: the caller's core then
    /// sits idle that long, as a server's does while its client handles the previous answer,
    /// and the echo's own core stays busy, so only the caller's waits.
    pub fn start(hold: Duration) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        std::thread::Builder::new()
            .name("echo".into())
            .spawn(move || -> std::io::Result<()> {
                let (mut peer, _) = listener.accept()?;
                peer.set_nodelay(true)?;
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    let n = peer.read(&mut buf)?;
                    if n == 0 {
                        return Ok(());
                    }
                    let t = Instant::now();
                    while t.elapsed() < hold {}
                    peer.write_all(&buf[..n])?;
                }
            })?;
        let conn = TcpStream::connect(addr).context("connecting to the echo thread")?;
        conn.set_nodelay(true)?;
        Ok(Self {
            conn,
            buf: vec![0u8; 64 * 1024],
        })
    }

    /// Sends `body` and reads it back.
    pub fn round_trip(&mut self, body: &[u8]) -> anyhow::Result<()> {
        self.conn.write_all(body)?;
        let mut got = 0;
        while got < body.len() {
            let n = self.conn.read(&mut self.buf)?;
            ensure!(n > 0, "the echo thread closed its socket");
            got += n;
        }
        Ok(())
    }
}
