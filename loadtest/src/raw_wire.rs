//! A lean open-loop sender: kept-alive HTTP/1.1 connections on tokio, each request's bytes
//! encoded once before the run, responses read by `Content-Length`.
//!
//! The SDK (reqwest, JSON encoding per call) costs tens of microseconds of the generator's CPU
//! per query. At three times the capacity of a 100 µs query, a generator that shares the
//! machine with the server would then take the very CPU whose overload it means to measure,
//! and its own lateness would be counted as the server's. This sender does one write and one
//! or two reads per query, so the measured line is the server's. It speaks plain HTTP only.

use std::io;
use std::sync::Arc;

use anyhow::Context;
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Connections and the encoded requests.
pub struct RawWire {
    addr: String,
    /// One request per query, ready to write.
    requests: Vec<Vec<u8>>,
    idle: Mutex<Vec<Connection>>,
}

/// One kept-alive connection and its read buffer.
struct Connection {
    stream: TcpStream,
    buffer: Vec<u8>,
}

/// The server's answer to one query.
pub struct Answer {
    /// HTTP status.
    pub status: u16,
    /// The response body.
    pub body: Vec<u8>,
}

impl RawWire {
    /// Encodes one `POST /collections/{collection}/points/query` per query vector for the
    /// server at `base_url` (`http://host:port`).
    pub fn new(
        base_url: &str,
        collection: &str,
        api_key: Option<&str>,
        queries: &cairn_index::dataset::Vectors,
        k: usize,
        ef: Option<usize>,
    ) -> anyhow::Result<Self> {
        let addr = base_url
            .strip_prefix("http://")
            .context("the lean sender speaks plain HTTP only (use the SDK for https)")?
            .trim_end_matches('/')
            .to_owned();
        let requests = queries
            .rows()
            .map(|row| {
                let mut body = serde_json::json!({"query": row, "limit": k});
                if let Some(ef) = ef {
                    body["params"] = serde_json::json!({"hnsw_ef": ef});
                }
                let body = serde_json::to_vec(&body)?;
                let key = api_key
                    .map(|key| format!("api-key: {key}\r\n"))
                    .unwrap_or_default();
                let mut request = format!(
                    "POST /collections/{collection}/points/query HTTP/1.1\r\nHost: {addr}\r\n\
                     Content-Type: application/json\r\n{key}Content-Length: {}\r\n\r\n",
                    body.len()
                )
                .into_bytes();
                request.extend_from_slice(&body);
                Ok(request)
            })
            .collect::<anyhow::Result<_>>()?;
        Ok(Self {
            addr,
            requests,
            idle: Mutex::new(Vec::new()),
        })
    }

    /// Opens `count` connections ahead of the run, so the first queries do not pay for them.
    pub async fn warm(&self, count: usize) -> io::Result<()> {
        for _ in 0..count {
            let connection = Connection::open(&self.addr).await?;
            self.idle.lock().push(connection);
        }
        Ok(())
    }

    /// Sends query `q` on an idle connection (or a new one); `sent` is called once its bytes
    /// are written.
    pub async fn query(self: &Arc<Self>, q: usize, sent: impl FnOnce()) -> io::Result<Answer> {
        let idle = self.idle.lock().pop();
        let mut connection = match idle {
            Some(connection) => connection,
            None => Connection::open(&self.addr).await?,
        };
        connection
            .stream
            .write_all(&self.requests[q % self.requests.len()])
            .await?;
        sent();
        let answer = connection.read_answer().await?;
        self.idle.lock().push(connection);
        Ok(answer)
    }
}

impl Connection {
    async fn open(addr: &str) -> io::Result<Self> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(Self {
            stream,
            buffer: Vec::with_capacity(4096),
        })
    }

    /// Reads one response: the head up to the blank line, then `Content-Length` bytes.
    async fn read_answer(&mut self) -> io::Result<Answer> {
        let invalid = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_owned());
        self.buffer.clear();
        let head_end = loop {
            if let Some(end) = find(&self.buffer, b"\r\n\r\n") {
                break end + 4;
            }
            self.fill().await?;
        };
        let head = std::str::from_utf8(&self.buffer[..head_end])
            .map_err(|_| invalid("response head is not UTF-8"))?;
        let mut lines = head.split("\r\n");
        let status: u16 = lines
            .next()
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| invalid("no status line"))?;
        let length: usize = lines
            .filter_map(|l| l.split_once(':'))
            .find(|(name, _)| name.eq_ignore_ascii_case("content-length"))
            .and_then(|(_, v)| v.trim().parse().ok())
            .ok_or_else(|| invalid("response without Content-Length"))?;
        while self.buffer.len() < head_end + length {
            self.fill().await?;
        }
        Ok(Answer {
            status,
            body: self.buffer[head_end..head_end + length].to_vec(),
        })
    }

    async fn fill(&mut self) -> io::Result<()> {
        let mut chunk = [0u8; 8192];
        let n = self.stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the server closed the connection",
            ));
        }
        self.buffer.extend_from_slice(&chunk[..n]);
        Ok(())
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The numeric ids of a `points/query` response's hits, best first.
pub fn answer_ids(body: &[u8]) -> Vec<u32> {
    #[derive(serde::Deserialize)]
    struct Envelope {
        result: Hits,
    }
    #[derive(serde::Deserialize)]
    struct Hits {
        points: Vec<Hit>,
    }
    #[derive(serde::Deserialize)]
    struct Hit {
        id: serde_json::Value,
    }
    serde_json::from_slice::<Envelope>(body)
        .map(|e| {
            e.result
                .points
                .iter()
                .filter_map(|h| h.id.as_u64().and_then(|n| u32::try_from(n).ok()))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_read_from_the_envelope() {
        let body = br#"{"result":{"points":[{"id":7,"score":0.5},{"id":"a-uuid"},{"id":3}]},"status":"ok","time":0.1}"#;
        assert_eq!(answer_ids(body), vec![7, 3]);
        assert!(answer_ids(b"not json").is_empty());
    }
}
