//! The client handle and its builder.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cairn_api::{
    CollectionExists, CollectionInfo, CollectionsList, CountResult, CreateFieldIndex,
    PayloadFieldSchema, PayloadSchemaType, QueryBatchRequest, QueryResponse, ReadConsistency,
    ReadToken, Record, ScrollResult, ServerInfo, UpdateResult, UpsertRequest,
};
use reqwest::Method;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::requests::{
    CountPoints, CreateCollectionBuilder, DeletePoints, GetPoints, QueryPoints, ScrollPoints,
    UpsertPoints,
};
use crate::transport::{Idempotency, RetryPolicy, Transport};

/// Default per-request timeout.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// Configures a [`Client`].
///
/// ```
/// use std::time::Duration;
/// # fn demo() -> Result<(), cairn_client::Error> {
/// let client = cairn_client::Client::builder()
///     .url("http://node-1:6333")
///     .url("http://node-2:6333") // tried when node-1 is down
///     .timeout(Duration::from_secs(5))
///     .api_key("secret")
///     .retries(3)
///     .build()?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct ClientBuilder {
    urls: Vec<String>,
    timeout: Duration,
    connect_timeout: Duration,
    api_key: Option<String>,
    retry: RetryPolicy,
    read_your_writes: bool,
    roots: Vec<Vec<u8>>,
}

impl Default for ClientBuilder {
    fn default() -> Self {
        Self {
            urls: Vec::new(),
            timeout: DEFAULT_TIMEOUT,
            connect_timeout: Duration::from_secs(3),
            api_key: None,
            retry: RetryPolicy {
                max_retries: 3,
                initial_backoff: Duration::from_millis(50),
                max_backoff: Duration::from_secs(2),
            },
            read_your_writes: false,
            roots: Vec::new(),
        }
    }
}

impl ClientBuilder {
    /// Reads see this client's own earlier writes, whichever node serves them: the client
    /// keeps each collection's latest write `read_token` and sends it with every read that
    /// does not ask for a consistency of its own (session consistency; default off, when a
    /// read may trail the latest writes by a moment in a cluster). Clones share the session.
    pub fn read_your_writes(mut self, on: bool) -> Self {
        self.read_your_writes = on;
        self
    }

    /// Adds a base URL (`http://host:port`). With several, requests go to the one that answered
    /// last and move on to the next when it cannot be reached or answers 503.
    pub fn url(mut self, url: impl Into<String>) -> Self {
        self.urls.push(url.into().trim_end_matches('/').to_owned());
        self
    }

    /// Default timeout of one attempt of a request (30 s unless set).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Timeout of establishing a connection (3 s unless set).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Sends this key in the `api-key` header (Qdrant's header) on every request.
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into());
        self
    }

    /// Also trusts this PEM certificate for `https://` URLs, beside the public roots: a
    /// server with a self-signed certificate, or one from a private authority.
    pub fn root_certificate_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.roots.push(pem.into());
        self
    }

    /// Extra attempts after a transient failure (3 unless set; 0 disables retries). Only
    /// requests that are safe to repeat are retried after they may have reached a server.
    pub fn retries(mut self, retries: u32) -> Self {
        self.retry.max_retries = retries;
        self
    }

    /// First retry backoff (doubled per retry, with full jitter) and its cap.
    pub fn backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.retry.initial_backoff = initial;
        self.retry.max_backoff = max.max(initial);
        self
    }

    /// Builds the client (no request is made).
    pub fn build(self) -> Result<Client> {
        if self.urls.is_empty() {
            return Err(Error::InvalidArgument(
                "at least one base URL is needed".into(),
            ));
        }
        for url in &self.urls {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(Error::InvalidArgument(format!(
                    "base URL {url:?} must start with http:// or https://"
                )));
            }
        }
        let mut http = reqwest::Client::builder()
            .connect_timeout(self.connect_timeout)
            .tcp_nodelay(true);
        for pem in &self.roots {
            let root = reqwest::Certificate::from_pem(pem)
                .map_err(|e| Error::InvalidArgument(format!("not a PEM certificate: {e}")))?;
            http = http.add_root_certificate(root);
        }
        let http = http
            .build()
            .map_err(|e| Error::InvalidArgument(format!("cannot build the HTTP client: {e}")))?;
        Ok(Client {
            transport: Arc::new(Transport::new(http, self.urls, self.api_key, self.retry)),
            timeout: self.timeout,
            sessions: self.read_your_writes.then(Default::default),
        })
    }
}

/// An async client of one Cairn deployment. Cheap to clone; clones share the connection pool.
///
/// ```no_run
/// use cairn_client::api::Distance;
/// use cairn_client::{Client, CreateCollectionBuilder, Point, QueryPoints, UpsertPoints};
/// # async fn demo() -> Result<(), cairn_client::Error> {
/// let client = Client::new("http://127.0.0.1:6333")?;
/// client
///     .create_collection(CreateCollectionBuilder::new("docs", 3, Distance::Cosine))
///     .await?;
/// client
///     .upsert(UpsertPoints::new("docs", [Point::new(1, vec![0.1, 0.9, 0.0])]))
///     .await?;
/// let hits = client
///     .query(QueryPoints::new("docs").vector(vec![0.2, 0.8, 0.1]).limit(5))
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Client {
    pub(crate) transport: Arc<Transport>,
    timeout: Duration,
    /// Per collection, where this client's writes left it (read-your-writes; `None`: off).
    sessions: Option<Arc<Mutex<HashMap<String, ReadToken>>>>,
}

impl Client {
    /// The consistency a read of `collection` goes with: the one it asks for, else this
    /// client's session token for the collection, else any replica.
    fn consistency_of(&self, collection: &str, asked: Option<&ReadConsistency>) -> ReadConsistency {
        if let Some(asked) = asked {
            return asked.clone();
        }
        let Some(sessions) = &self.sessions else {
            return ReadConsistency::Any;
        };
        let sessions = sessions.lock().unwrap_or_else(|e| e.into_inner());
        sessions
            .get(collection)
            .map_or(ReadConsistency::Any, |token| {
                ReadConsistency::After(token.clone())
            })
    }

    /// Remembers where a write left `collection`, for later reads (read-your-writes).
    fn remember(&self, collection: &str, result: &UpdateResult) {
        let (Some(sessions), Some(token)) = (&self.sessions, &result.read_token) else {
            return;
        };
        let mut sessions = sessions.lock().unwrap_or_else(|e| e.into_inner());
        let merged = sessions
            .get(collection)
            .map_or_else(|| token.clone(), |held| held.merge(token));
        sessions.insert(collection.to_owned(), merged);
    }

    /// A client of one server with default settings.
    pub fn new(url: impl Into<String>) -> Result<Self> {
        Self::builder().url(url).build()
    }

    /// Configures a client.
    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

    /// The same client with another per-request timeout (sharing connections).
    pub fn with_timeout(&self, timeout: Duration) -> Self {
        Self {
            transport: Arc::clone(&self.transport),
            timeout,
            sessions: self.sessions.clone(),
        }
    }

    async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T> {
        self.transport
            .call(
                Method::GET,
                path,
                None,
                Idempotency::Idempotent,
                self.timeout,
            )
            .await
    }

    async fn send<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: &B,
        idempotency: Idempotency,
    ) -> Result<T> {
        let body = serde_json::to_vec(body)
            .map_err(|e| Error::InvalidArgument(format!("request cannot be serialised: {e}")))?;
        self.transport
            .call(method, path, Some(body), idempotency, self.timeout)
            .await
    }

    /// `GET /`: server name, the Qdrant REST version it follows, and Cairn's own version.
    pub async fn server_info(&self) -> Result<ServerInfo> {
        self.transport
            .call_bare(Method::GET, "/", Idempotency::Idempotent, self.timeout)
            .await
    }

    /// Whether the server (or the first reachable node) has loaded its collections and
    /// serves queries (`GET /readyz`).
    pub async fn is_ready(&self) -> Result<bool> {
        match self.get::<serde_json::Value>("/readyz").await {
            Ok(_) => Ok(true),
            Err(Error::Unavailable { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Names of all collections.
    pub async fn list_collections(&self) -> Result<Vec<String>> {
        let list: CollectionsList = self.get("/collections").await?;
        Ok(list.collections.into_iter().map(|c| c.name).collect())
    }

    /// Creates a collection; an [`Error::Api`] with code `already_exists` if the name is taken.
    pub async fn create_collection(&self, builder: CreateCollectionBuilder) -> Result<()> {
        let path = collection_path(&builder.name)?;
        self.send::<_, bool>(Method::PUT, &path, &builder.request, Idempotency::Once)
            .await
            .map(drop)
    }

    /// Deletes a collection and all its points.
    pub async fn delete_collection(&self, name: &str) -> Result<()> {
        let path = collection_path(name)?;
        self.transport
            .call::<bool>(Method::DELETE, &path, None, Idempotency::Once, self.timeout)
            .await
            .map(drop)
    }

    /// Whether a collection exists.
    pub async fn collection_exists(&self, name: &str) -> Result<bool> {
        let path = format!("{}/exists", collection_path(name)?);
        Ok(self.get::<CollectionExists>(&path).await?.exists)
    }

    /// Indexes payload `field` as `schema` in every partition (built from the points already
    /// there before this returns); replaces an index of another type on the same key.
    pub async fn create_payload_index(
        &self,
        collection: &str,
        field: &str,
        schema: PayloadSchemaType,
    ) -> Result<()> {
        let path = format!("{}/index?wait=true", collection_path(collection)?);
        let body = CreateFieldIndex {
            field_name: field.to_owned(),
            field_schema: Some(PayloadFieldSchema::Type(schema)),
        };
        self.send::<_, UpdateResult>(Method::PUT, &path, &body, Idempotency::Idempotent)
            .await
            .map(drop)
    }

    /// A collection's configuration and point counts.
    pub async fn collection_info(&self, name: &str) -> Result<CollectionInfo> {
        self.get(&collection_path(name)?).await
    }

    /// Inserts or replaces points. Idempotent, so retried after transient failures.
    pub async fn upsert(&self, upsert: UpsertPoints) -> Result<UpdateResult> {
        let path = format!(
            "{}/points?wait={}",
            collection_path(&upsert.collection)?,
            upsert.wait
        );
        let body = UpsertRequest {
            points: Some(upsert.points),
            ..UpsertRequest::default()
        };
        let result = self
            .send(Method::PUT, &path, &body, Idempotency::Idempotent)
            .await?;
        self.remember(&upsert.collection, &result);
        Ok(result)
    }

    /// Points by id, in the order found; missing ids are skipped.
    pub async fn get_points(&self, get: GetPoints) -> Result<Vec<Record>> {
        let consistency = self.consistency_of(&get.collection, get.consistency.as_ref());
        let path = read_path(&get.collection, "/points", &consistency)?;
        self.send(Method::POST, &path, &get.request, Idempotency::Idempotent)
            .await
    }

    /// Deletes points by id or by filter. Idempotent, so retried after transient failures.
    pub async fn delete_points(&self, delete: DeletePoints) -> Result<UpdateResult> {
        if delete.request.points.is_none() && delete.request.filter.is_none() {
            return Err(Error::InvalidArgument(
                "say which points to delete with ids(…) or filter(…)".into(),
            ));
        }
        let path = format!(
            "{}/points/delete?wait={}",
            collection_path(&delete.collection)?,
            delete.wait
        );
        let result = self
            .send(
                Method::POST,
                &path,
                &delete.request,
                Idempotency::Idempotent,
            )
            .await?;
        self.remember(&delete.collection, &result);
        Ok(result)
    }

    /// A page of points in id order; pass `next_page_offset` to [`ScrollPoints::offset`] for
    /// the next page.
    pub async fn scroll(&self, scroll: ScrollPoints) -> Result<ScrollResult> {
        let consistency = self.consistency_of(&scroll.collection, scroll.consistency.as_ref());
        let path = read_path(&scroll.collection, "/points/scroll", &consistency)?;
        self.send(
            Method::POST,
            &path,
            &scroll.request,
            Idempotency::Idempotent,
        )
        .await
    }

    /// Number of points (matching a filter, if given); always exact.
    pub async fn count(&self, count: CountPoints) -> Result<u64> {
        let consistency = self.consistency_of(&count.collection, count.consistency.as_ref());
        let path = read_path(&count.collection, "/points/count", &consistency)?;
        let result: CountResult = self
            .send(Method::POST, &path, &count.request, Idempotency::Idempotent)
            .await?;
        Ok(result.count)
    }

    /// The nearest points to a vector or to a stored point, best first.
    pub async fn query(&self, query: QueryPoints) -> Result<QueryResponse> {
        let consistency = self.consistency_of(&query.collection, query.consistency.as_ref());
        let path = read_path(&query.collection, "/points/query", &consistency)?;
        self.send(Method::POST, &path, &query.request, Idempotency::Idempotent)
            .await
    }

    /// Several queries of one collection in one request; answers in the same order.
    pub async fn query_batch(&self, queries: Vec<QueryPoints>) -> Result<Vec<QueryResponse>> {
        let Some(first) = queries.first() else {
            return Ok(Vec::new());
        };
        let collection = first.collection.clone();
        if let Some(other) = queries.iter().find(|q| q.collection != collection) {
            return Err(Error::InvalidArgument(format!(
                "a batch queries one collection; got {collection:?} and {:?}",
                other.collection
            )));
        }
        if let Some(other) = queries.iter().find(|q| q.consistency != first.consistency) {
            return Err(Error::InvalidArgument(format!(
                "a batch is read at one consistency; got {:?} and {:?}",
                first.consistency, other.consistency
            )));
        }
        let consistency = self.consistency_of(&collection, first.consistency.as_ref());
        let path = read_path(&collection, "/points/query/batch", &consistency)?;
        let body = QueryBatchRequest {
            searches: queries.into_iter().map(|q| q.request).collect(),
        };
        self.send(Method::POST, &path, &body, Idempotency::Idempotent)
            .await
    }
}

/// `/collections/{name}{tail}` with the query string of `consistency`.
fn read_path(collection: &str, tail: &str, consistency: &ReadConsistency) -> Result<String> {
    let path = format!("{}{tail}", collection_path(collection)?);
    Ok(match consistency {
        ReadConsistency::Any => path,
        ReadConsistency::Linearizable => format!("{path}?consistency=majority"),
        // A token is digits, ':' and ',', all allowed in a query string as they are.
        ReadConsistency::After(token) => format!("{path}?read_after={token}"),
    })
}

/// `/collections/{name}`, refusing names that would change the path.
fn collection_path(name: &str) -> Result<String> {
    let valid = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if !valid {
        return Err(Error::InvalidArgument(format!(
            "collection name {name:?} must be non-empty ASCII letters, digits, '_', '-' or '.'"
        )));
    }
    Ok(format!("/collections/{name}"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn builder_checks_urls() {
        assert!(Client::builder().build().is_err());
        let err = Client::new("localhost:6333").unwrap_err();
        assert!(err.to_string().contains("http://"), "{err}");
        assert!(Client::new("http://localhost:6333/").is_ok());
    }

    #[test]
    fn collection_names_cannot_escape_the_path() {
        assert!(collection_path("docs_v2.1").is_ok());
        for bad in ["", "a/b", "../x", "a b", "a?b"] {
            assert!(collection_path(bad).is_err(), "{bad}");
        }
    }
}
