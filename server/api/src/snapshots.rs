//! Snapshots: `/collections/{c}/snapshots…` and the full-storage `/snapshots…`, in Qdrant's
//! shapes.

use serde::{Deserialize, Serialize};

/// One snapshot file (`POST /collections/{c}/snapshots`, and each entry of the lists).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SnapshotDescription {
    /// File name, the `{snapshot_name}` of its download and delete routes.
    pub name: String,
    /// When it was written, UTC, as `YYYY-MM-DDTHH:MM:SS` (Qdrant's form, no zone).
    pub creation_time: Option<String>,
    /// Size in bytes.
    pub size: u64,
    /// SHA-256 of the file, lowercase hex: give it back as `checksum` when recovering, and the
    /// file is checked before anything is replaced.
    pub checksum: Option<String>,
}

/// Whose data wins when a recovered replica meets its peers (Qdrant's `priority`). A
/// standalone collection has no peers, so every value recovers the snapshot's data as it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SnapshotPriority {
    /// Take the snapshot's data without syncing.
    NoSync,
    /// The snapshot's data wins.
    Snapshot,
    /// The peers' data wins.
    Replica,
}

/// `PUT /collections/{c}/snapshots/recover`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SnapshotRecover {
    /// Where the snapshot is: `file:///…` (a file inside the server's snapshots folder) or an
    /// `http://` / `https://` URL the server downloads it from.
    pub location: String,
    /// See [`SnapshotPriority`].
    #[serde(default)]
    pub priority: Option<SnapshotPriority>,
    /// The file's expected SHA-256 (hex): a file that differs is refused before anything
    /// changes.
    #[serde(default)]
    pub checksum: Option<String>,
    /// Sent as the `api-key` header when downloading from a URL (another Cairn or Qdrant that
    /// needs one).
    #[serde(default)]
    pub api_key: Option<String>,
}

/// `POST /collections/{c}/snapshots/upload`'s query string.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct SnapshotUploadQuery {
    /// Answer once recovered (always so: recovery finishes before the answer).
    #[serde(default)]
    pub wait: Option<bool>,
    /// See [`SnapshotPriority`].
    #[serde(default)]
    pub priority: Option<SnapshotPriority>,
    /// The file's expected SHA-256 (hex).
    #[serde(default)]
    pub checksum: Option<String>,
}

/// `POST /collections/{c}/snapshots/upload`'s form (`multipart/form-data`, as Qdrant's
/// clients send it); a body of any other type is taken as the file itself. Described for the
/// OpenAPI document; the server reads the form as a stream.
#[derive(Debug, Clone, PartialEq, Eq, utoipa::ToSchema)]
pub struct SnapshotUploadForm {
    /// The snapshot file.
    #[schema(value_type = String, format = Binary)]
    pub snapshot: Vec<u8>,
}
