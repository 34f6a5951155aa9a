//! Chunked upsert: streams a large iterator of points in bounded, concurrent requests.

use cairn_api::PointStruct;
use tokio::task::JoinSet;

use crate::error::{Error, Result};
use crate::requests::UpsertPoints;
use crate::Client;

/// How [`Client::upsert_chunked`] splits and sends.
#[derive(Debug, Clone, Copy)]
pub struct ChunkedUpsert {
    /// Points per request.
    pub chunk_size: usize,
    /// Requests in flight at once.
    pub concurrency: usize,
    /// Wait until each chunk is searchable (`?wait=true`) before counting it as done.
    pub wait: bool,
}

impl Default for ChunkedUpsert {
    /// 256 points per request, 4 in flight, waiting for each to be searchable.
    fn default() -> Self {
        Self {
            chunk_size: 256,
            concurrency: 4,
            wait: true,
        }
    }
}

/// Progress of a chunked upsert, passed to the callback after every finished chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UpsertProgress {
    /// Points the server has acknowledged so far.
    pub done: usize,
    /// Points handed to requests so far (acknowledged or in flight).
    pub sent: usize,
    /// The iterator's size hint, when exact.
    pub total: Option<usize>,
}

impl Client {
    /// Upserts every point of `points` in chunks of `options.chunk_size`, at most
    /// `options.concurrency` requests in flight, calling `progress` after each acknowledged
    /// chunk. Returns the number of points upserted.
    ///
    /// Points are pulled from the iterator only as requests free up, so memory stays bounded
    /// by `chunk_size × concurrency` however large the input. On the first failed chunk (after
    /// the client's retries) no new chunk is started, the ones in flight are awaited, and the
    /// error is returned: chunks before it are stored, and because upserts are idempotent the
    /// whole call can simply be repeated.
    ///
    /// ```no_run
    /// use cairn_client::{ChunkedUpsert, Client, Point};
    /// # async fn demo(client: Client) -> Result<(), cairn_client::Error> {
    /// let points = (0..100_000u64).map(|i| Point::new(i, vec![i as f32, 1.0]));
    /// let n = client
    ///     .upsert_chunked("docs", points, ChunkedUpsert::default(), |p| {
    ///         eprintln!("{} / {:?}", p.done, p.total);
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn upsert_chunked<P, I>(
        &self,
        collection: &str,
        points: I,
        options: ChunkedUpsert,
        mut progress: impl FnMut(UpsertProgress),
    ) -> Result<usize>
    where
        P: Into<PointStruct>,
        I: IntoIterator<Item = P>,
    {
        if options.chunk_size == 0 || options.concurrency == 0 {
            return Err(Error::InvalidArgument(
                "chunk_size and concurrency must be at least 1".into(),
            ));
        }
        let mut points = points.into_iter().map(Into::into);
        let total = match points.size_hint() {
            (lo, Some(hi)) if lo == hi => Some(lo),
            _ => None,
        };
        let mut in_flight = JoinSet::new();
        let (mut sent, mut done) = (0usize, 0usize);
        let mut failure = None;
        loop {
            while failure.is_none() && in_flight.len() < options.concurrency {
                let chunk: Vec<PointStruct> = points.by_ref().take(options.chunk_size).collect();
                if chunk.is_empty() {
                    break;
                }
                sent += chunk.len();
                let n = chunk.len();
                let client = self.clone();
                let upsert = UpsertPoints::new(collection, chunk).wait(options.wait);
                in_flight.spawn(async move { client.upsert(upsert).await.map(|_| n) });
            }
            let Some(joined) = in_flight.join_next().await else {
                break;
            };
            match joined {
                Ok(Ok(n)) => {
                    done += n;
                    progress(UpsertProgress { done, sent, total });
                }
                Ok(Err(e)) => {
                    failure.get_or_insert(e);
                }
                Err(join) => {
                    failure.get_or_insert(Error::InvalidArgument(format!(
                        "an upsert task failed: {join}"
                    )));
                }
            }
        }
        match failure {
            Some(e) => Err(e),
            None => Ok(done),
        }
    }
}
