//! cairn-client: the async Rust client of the [Cairn](https://github.com/cairn-db/cairn) vector
//! search server.
//!
//! - **Builders mirror the REST API**: [`CreateCollectionBuilder`], [`UpsertPoints`],
//!   [`GetPoints`], [`DeletePoints`], [`ScrollPoints`], [`CountPoints`], [`QueryPoints`] —
//!   one per call, required arguments up front, options chained.
//! - **Typed payloads**: [`Point::payload`] takes any `Serialize` struct,
//!   [`PayloadExt::payload_as`] reads one back.
//! - **Typed errors** ([`Error`]): the server's HTTP status, Cairn error code and message;
//!   rate limits with their `Retry-After`; unavailability, timeouts, connection failures.
//! - **Failover and retries**: several base URLs (a cluster's nodes) with failover; transient
//!   failures retried with jittered exponential backoff, but only for requests that are safe
//!   to repeat.
//! - **Bulk loading**: [`Client::upsert_chunked`] streams any iterator in bounded concurrent
//!   chunks with a progress callback.
//!
//! The client depends on `cairn-api` for the wire types (re-exported as [`api`]), never on
//! the engine.
//!
//! ```no_run
//! use cairn_client::api::{Condition, Distance, Filter};
//! use cairn_client::{Client, CreateCollectionBuilder, PayloadExt, Point, QueryPoints, UpsertPoints};
//!
//! #[derive(serde::Serialize, serde::Deserialize)]
//! struct Doc { lang: String }
//!
//! # async fn demo() -> Result<(), cairn_client::Error> {
//! let client = Client::new("http://127.0.0.1:6333")?;
//! client.create_collection(CreateCollectionBuilder::new("docs", 2, Distance::Cosine)).await?;
//! client
//!     .upsert(UpsertPoints::new("docs", [
//!         Point::new(1, vec![1.0, 0.0]).payload(&Doc { lang: "en".into() })?,
//!         Point::new(2, vec![0.0, 1.0]).payload(&Doc { lang: "fr".into() })?,
//!     ]))
//!     .await?;
//! let response = client
//!     .query(
//!         QueryPoints::new("docs")
//!             .vector(vec![0.9, 0.1])
//!             .filter(Filter::must([Condition::matches("lang", "en")]))
//!             .with_payload(true)
//!             .limit(3),
//!     )
//!     .await?;
//! for hit in &response.points {
//!     let doc: Doc = hit.payload_as()?;
//!     println!("{} {} {}", hit.id, hit.score, doc.lang);
//! }
//! # Ok(()) }
//! ```

mod client;
mod error;
mod points;
mod requests;
mod transport;
mod upsert;

/// The wire types shared with the server (`cairn-api`).
pub use cairn_api as api;
pub use client::{Client, ClientBuilder};
pub use error::{Error, Result};
pub use points::{to_payload, PayloadExt, Point};
pub use requests::{
    CountPoints, CreateCollectionBuilder, DeletePoints, GetPoints, QueryPoints, ScrollPoints,
    UpsertPoints,
};
pub use upsert::{ChunkedUpsert, UpsertProgress};
