//! Snapshot endpoints, in Qdrant's shape: `/collections/{c}/snapshots…` (create, list,
//! download, delete, recover from a location, upload and recover) and the full-storage
//! `/snapshots…` (create, list, download, delete; restored offline by `cairn restore`).
//!
//! Files move as streams: a download is read from disk in chunks, an upload or a URL's body is
//! written to a hidden file in the snapshots folder as it arrives (neither is held in memory,
//! and neither is bound by `http.max_body_bytes`), then recovered from there.

use std::path::{Path as FsPath, PathBuf};
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::extract::{Path, Request, State as AxState};
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use cairn_api::{
    SnapshotDescription, SnapshotRecover, SnapshotUploadForm, SnapshotUploadQuery, WriteQuery,
};
use futures_util::StreamExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::json::{ApiJson, ApiQuery};
use super::{blocking, ok, State};
use crate::catalog::{validate_name, Catalog};
use crate::error::{Result, ServerError};
use crate::snapshots::check_sha256;

fn io(e: std::io::Error) -> ServerError {
    ServerError::Internal(e.to_string())
}

/// The collection whose snapshots a route names: the collection (an alias resolved), or, for
/// one that no longer exists, the name itself, so that its snapshots can still be listed,
/// fetched and recovered.
fn owner(catalog: &Catalog, name: &str) -> Result<String> {
    match catalog.get(name) {
        Ok(collection) => Ok(collection.name().to_owned()),
        Err(ServerError::CollectionNotFound(_)) => {
            validate_name(name)?;
            Ok(name.to_owned())
        }
        Err(other) => Err(other),
    }
}

#[utoipa::path(post, path = "/collections/{collection}/snapshots", operation_id = "create_snapshot", tag = "snapshots", params(("collection" = String, Path, description = "Collection name."), WriteQuery), responses((status = 200, description = "Taken: the collection as of one moment, in one file beside its SHA-256 (the answer always waits for it).", body = cairn_api::Response<SnapshotDescription>)))]
pub(super) async fn create(
    AxState(state): AxState<State>,
    Path(name): Path<String>,
    ApiQuery(_wait): ApiQuery<WriteQuery>,
) -> Result<impl IntoResponse> {
    let t = Instant::now();
    let catalog = state.catalog()?.clone();
    let collection = catalog.get(&name)?;
    let description = blocking(move || catalog.snapshots().create(&collection)).await?;
    Ok(ok(description, t))
}

#[utoipa::path(get, path = "/collections/{collection}/snapshots", operation_id = "list_snapshots", tag = "snapshots", params(("collection" = String, Path, description = "Collection name.")), responses((status = 200, description = "The collection's snapshots, by name.", body = cairn_api::Response<Vec<SnapshotDescription>>)))]
pub(super) async fn list(
    AxState(state): AxState<State>,
    Path(name): Path<String>,
) -> Result<impl IntoResponse> {
    let t = Instant::now();
    let catalog = state.catalog()?.clone();
    let owner = owner(&catalog, &name)?;
    // Reads the folder and each checksum file: off the async workers.
    let list = blocking(move || catalog.snapshots().list(Some(&owner))).await?;
    Ok(ok(list, t))
}

#[utoipa::path(get, path = "/collections/{collection}/snapshots/{snapshot_name}", operation_id = "get_snapshot", tag = "snapshots", params(("collection" = String, Path, description = "Collection name."), ("snapshot_name" = String, Path, description = "The snapshot's file name.")), responses((status = 200, description = "The snapshot file.", body = Vec<u8>, content_type = "application/octet-stream")))]
pub(super) async fn download(
    AxState(state): AxState<State>,
    Path((name, snapshot)): Path<(String, String)>,
) -> Result<Response> {
    let catalog = state.catalog()?;
    let owner = owner(catalog, &name)?;
    let path = catalog.snapshots().file(Some(&owner), &snapshot)?;
    stream_file(&path, &snapshot).await
}

#[utoipa::path(delete, path = "/collections/{collection}/snapshots/{snapshot_name}", operation_id = "delete_snapshot", tag = "snapshots", params(("collection" = String, Path, description = "Collection name."), ("snapshot_name" = String, Path, description = "The snapshot's file name."), WriteQuery), responses((status = 200, description = "Deleted, with its checksum file.", body = cairn_api::Response<bool>)))]
pub(super) async fn delete(
    AxState(state): AxState<State>,
    Path((name, snapshot)): Path<(String, String)>,
    ApiQuery(_wait): ApiQuery<WriteQuery>,
) -> Result<impl IntoResponse> {
    let t = Instant::now();
    let catalog = state.catalog()?.clone();
    let owner = owner(&catalog, &name)?;
    blocking(move || catalog.snapshots().delete(Some(&owner), &snapshot)).await?;
    Ok(ok(true, t))
}

/// `PUT /collections/{c}/snapshots/recover`: the collection (created, or replaced whole) from
/// the snapshot at `location`. Reading the server's files or fetching a URL is not a
/// collection's business, so a token scoped to collections may not ask it (`auth.rs`).
#[utoipa::path(put, path = "/collections/{collection}/snapshots/recover", operation_id = "recover_from_snapshot", tag = "snapshots", params(("collection" = String, Path, description = "The collection to create or replace."), WriteQuery), request_body = SnapshotRecover, responses((status = 200, description = "Recovered: the collection is the snapshot's and serves requests.", body = cairn_api::Response<bool>)))]
pub(super) async fn recover(
    AxState(state): AxState<State>,
    Path(name): Path<String>,
    ApiQuery(_wait): ApiQuery<WriteQuery>,
    ApiJson(request): ApiJson<SnapshotRecover>,
) -> Result<impl IntoResponse> {
    let t = Instant::now();
    validate_name(&name)?;
    let catalog = state.catalog()?.clone();
    let location = request.location.trim();
    if location.starts_with("http://") || location.starts_with("https://") {
        let scratch = Scratch(catalog.snapshots().scratch(Some(&name), "download")?);
        fetch(location, request.api_key.as_deref(), &scratch.0).await?;
        recover_file(catalog, name, Source::Received(scratch), request.checksum).await?;
    } else if location.starts_with("file://") {
        let path = catalog.snapshots().local_file(location)?;
        recover_file(catalog, name, Source::Kept(path), request.checksum).await?;
    } else {
        return Err(ServerError::InvalidRequest(format!(
            "location: {location:?} is neither a file:// path nor an http(s):// URL"
        )));
    }
    Ok(ok(true, t))
}

#[utoipa::path(post, path = "/collections/{collection}/snapshots/upload", operation_id = "recover_from_uploaded_snapshot", tag = "snapshots", params(("collection" = String, Path, description = "The collection to create or replace."), SnapshotUploadQuery), request_body(content = SnapshotUploadForm, content_type = "multipart/form-data", description = "The snapshot file as the form's `snapshot` field (or, with any other content type, as the whole body)."), responses((status = 200, description = "Recovered: the collection is the snapshot's and serves requests.", body = cairn_api::Response<bool>)))]
pub(super) async fn upload(
    AxState(state): AxState<State>,
    Path(name): Path<String>,
    ApiQuery(query): ApiQuery<SnapshotUploadQuery>,
    request: Request,
) -> Result<impl IntoResponse> {
    let t = Instant::now();
    validate_name(&name)?;
    let catalog = state.catalog()?.clone();
    let scratch = Scratch(catalog.snapshots().scratch(Some(&name), "upload")?);
    receive(request, &scratch.0).await?;
    recover_file(catalog, name, Source::Received(scratch), query.checksum).await?;
    Ok(ok(true, t))
}

#[utoipa::path(post, path = "/snapshots", operation_id = "create_full_snapshot", tag = "snapshots", params(WriteQuery), responses((status = 200, description = "Taken: a snapshot of every collection and the aliases, in one file (restored with `cairn restore`).", body = cairn_api::Response<SnapshotDescription>)))]
pub(super) async fn create_full(
    AxState(state): AxState<State>,
    ApiQuery(_wait): ApiQuery<WriteQuery>,
) -> Result<impl IntoResponse> {
    let t = Instant::now();
    let catalog = state.catalog()?.clone();
    let description = blocking(move || catalog.create_full_snapshot()).await?;
    Ok(ok(description, t))
}

#[utoipa::path(get, path = "/snapshots", operation_id = "list_full_snapshots", tag = "snapshots", responses((status = 200, description = "The full-storage snapshots, by name.", body = cairn_api::Response<Vec<SnapshotDescription>>)))]
pub(super) async fn list_full(AxState(state): AxState<State>) -> Result<impl IntoResponse> {
    let t = Instant::now();
    let catalog = state.catalog()?.clone();
    let list = blocking(move || catalog.snapshots().list(None)).await?;
    Ok(ok(list, t))
}

#[utoipa::path(get, path = "/snapshots/{snapshot_name}", operation_id = "get_full_snapshot", tag = "snapshots", params(("snapshot_name" = String, Path, description = "The snapshot's file name.")), responses((status = 200, description = "The snapshot file.", body = Vec<u8>, content_type = "application/octet-stream")))]
pub(super) async fn download_full(
    AxState(state): AxState<State>,
    Path(snapshot): Path<String>,
) -> Result<Response> {
    let path = state.catalog()?.snapshots().file(None, &snapshot)?;
    stream_file(&path, &snapshot).await
}

#[utoipa::path(delete, path = "/snapshots/{snapshot_name}", operation_id = "delete_full_snapshot", tag = "snapshots", params(("snapshot_name" = String, Path, description = "The snapshot's file name."), WriteQuery), responses((status = 200, description = "Deleted, with its checksum file.", body = cairn_api::Response<bool>)))]
pub(super) async fn delete_full(
    AxState(state): AxState<State>,
    Path(snapshot): Path<String>,
    ApiQuery(_wait): ApiQuery<WriteQuery>,
) -> Result<impl IntoResponse> {
    let t = Instant::now();
    let catalog = state.catalog()?.clone();
    blocking(move || catalog.snapshots().delete(None, &snapshot)).await?;
    Ok(ok(true, t))
}

/// A file received for a recovery, removed when dropped: when the recovery is done, and when
/// the request is given up half-way (a client gone, a `timeout`), so none is left behind.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Where a recovery reads its snapshot: a file kept in the snapshots folder, or one received
/// for it.
enum Source {
    Kept(PathBuf),
    Received(Scratch),
}

/// Checks the file's SHA-256 when one was given, then recovers the collection from it (a
/// received file goes with the blocking task, which removes it when done).
async fn recover_file(
    catalog: std::sync::Arc<Catalog>,
    name: String,
    source: Source,
    checksum: Option<String>,
) -> Result<()> {
    blocking(move || {
        let path = match &source {
            Source::Kept(path) | Source::Received(Scratch(path)) => path,
        };
        if let Some(expected) = &checksum {
            check_sha256(path, expected)?;
        }
        catalog.recover(&name, path)
    })
    .await
}

/// A file as a streamed `application/octet-stream` response.
async fn stream_file(path: &FsPath, name: &str) -> Result<Response> {
    let file = tokio::fs::File::open(path).await.map_err(io)?;
    let length = file.metadata().await.map_err(io)?.len();
    let chunks = futures_util::stream::unfold(Some(file), |file| async move {
        let mut file = file?;
        let mut buffer = vec![0u8; 1 << 16];
        match file.read(&mut buffer).await {
            Ok(0) => None,
            Ok(n) => {
                buffer.truncate(n);
                Some((Ok(Bytes::from(buffer)), Some(file)))
            }
            // The error ends the stream (the client sees a cut-short body).
            Err(e) => Some((Err(e), None)),
        }
    });
    let disposition = HeaderValue::from_str(&format!("attachment; filename=\"{name}\""))
        .map_err(|e| ServerError::Internal(e.to_string()))?;
    Ok((
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/octet-stream"),
            ),
            (header::CONTENT_LENGTH, HeaderValue::from(length)),
            (header::CONTENT_DISPOSITION, disposition),
        ],
        Body::from_stream(chunks),
    )
        .into_response())
}

/// Writes an upload's file to `path`: the `snapshot` field of a multipart form, or the whole
/// body of any other request.
async fn receive(request: Request, path: &FsPath) -> Result<()> {
    let content_type = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = request.into_body().into_data_stream();
    let mut file = tokio::fs::File::create(path).await.map_err(io)?;
    let boundary = content_type
        .as_deref()
        .and_then(|ct| multer::parse_boundary(ct).ok());
    match boundary {
        Some(boundary) => {
            let mut form = multer::Multipart::new(body, boundary);
            let invalid = |e: multer::Error| {
                ServerError::InvalidRequest(format!("the upload's form does not read: {e}"))
            };
            let mut found = false;
            while let Some(mut field) = form.next_field().await.map_err(invalid)? {
                if field.name() != Some("snapshot") || found {
                    continue;
                }
                found = true;
                while let Some(chunk) = field.chunk().await.map_err(invalid)? {
                    file.write_all(&chunk).await.map_err(io)?;
                }
            }
            if !found {
                return Err(ServerError::InvalidRequest(
                    "the upload's form has no `snapshot` field".into(),
                ));
            }
        }
        None => {
            let mut body = body;
            while let Some(chunk) = body.next().await {
                let chunk = chunk.map_err(|e| {
                    ServerError::InvalidRequest(format!("cannot read request body: {e}"))
                })?;
                file.write_all(&chunk).await.map_err(io)?;
            }
        }
    }
    file.sync_all().await.map_err(io)?;
    Ok(())
}

/// Downloads `url` into `path` (sending `api_key` as the `api-key` header).
async fn fetch(url: &str, api_key: Option<&str>, path: &FsPath) -> Result<()> {
    let failed = |e: reqwest::Error| {
        ServerError::InvalidRequest(format!("location: cannot download {url}: {e}"))
    };
    let client = reqwest::Client::builder()
        .connect_timeout(std::time::Duration::from_secs(10))
        .read_timeout(std::time::Duration::from_secs(60))
        .build()
        .map_err(|e| ServerError::Internal(e.to_string()))?;
    let mut request = client.get(url);
    if let Some(key) = api_key {
        request = request.header(super::auth::API_KEY_HEADER, key);
    }
    let mut response = request.send().await.map_err(failed)?;
    if !response.status().is_success() {
        return Err(ServerError::InvalidRequest(format!(
            "location: {url} answered {}",
            response.status()
        )));
    }
    let mut file = tokio::fs::File::create(path).await.map_err(io)?;
    while let Some(chunk) = response.chunk().await.map_err(failed)? {
        file.write_all(&chunk).await.map_err(io)?;
    }
    file.sync_all().await.map_err(io)?;
    Ok(())
}
