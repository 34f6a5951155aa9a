//! A minimal blocking HTTP/1.1 keep-alive client: one connection, `Content-Length` bodies
//! only. It exists to measure what the *server* costs per request. A full client (reqwest)
//! adds its own tens of microseconds, and the benchmark reports both.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;

use anyhow::{bail, Context};

/// One keep-alive connection.
pub struct RawClient {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    host: String,
    request: Vec<u8>,
}

impl RawClient {
    /// Connects to `host:port` with Nagle off.
    pub fn connect(addr: &str) -> anyhow::Result<Self> {
        let stream = TcpStream::connect(addr).with_context(|| format!("connect {addr}"))?;
        stream.set_nodelay(true)?;
        let writer = stream.try_clone()?;
        Ok(Self {
            reader: BufReader::new(stream),
            writer,
            host: addr.to_owned(),
            request: Vec::new(),
        })
    }

    /// Sends one request and returns the status and body.
    pub fn send(
        &mut self,
        method: &str,
        path: &str,
        body: &[u8],
    ) -> anyhow::Result<(u16, Vec<u8>)> {
        self.request.clear();
        write!(
            self.request,
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            self.host,
            body.len()
        )?;
        self.request.extend_from_slice(body);
        self.writer.write_all(&self.request)?;

        let mut line = String::new();
        self.reader.read_line(&mut line)?;
        let status: u16 = line
            .split_whitespace()
            .nth(1)
            .context("no status line")?
            .parse()?;
        let mut length = None;
        loop {
            line.clear();
            if self.reader.read_line(&mut line)? == 0 {
                bail!("connection closed in the headers");
            }
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = Some(value.trim().parse::<usize>()?);
                }
            }
        }
        let mut response = vec![0; length.context("response without Content-Length")?];
        self.reader.read_exact(&mut response)?;
        Ok((status, response))
    }
}
