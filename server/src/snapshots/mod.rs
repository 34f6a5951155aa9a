//! Snapshots: a collection as of one moment in one checksummed file, to back it up, move it
//! to another server, or recover it (Qdrant's `/collections/{c}/snapshots…` routes); and a
//! full-storage snapshot holding every collection and the aliases (`/snapshots…`).
//!
//! A collection snapshot is a tar archive (`archive`): `manifest.json` (the collection's
//! settings, and per partition its files) and one folder `p{i}/` per partition holding the
//! partition's state as RocksDB table files with their CRCs (the files a Raft snapshot moves
//! between replicas) and its index file ([`crate::partition::export`]). Recovery ingests the
//! table files and loads the index file, as a restart would, so it costs a copy of the data,
//! not an index build. Beside each file lies `<name>.checksum`, its SHA-256.
//!
//! Layout under the snapshots folder (`node.snapshots_dir`):
//! `collections/<collection>/<collection>-<UTC time>.snapshot` (+ `.checksum`), and
//! `full/full-<UTC time>.snapshot`. Files being written or received have hidden names
//! (`.`-prefixed), are never listed, and are removed at start-up.

pub mod archive;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use cairn_api::SnapshotDescription;
use serde::{Deserialize, Serialize};

use crate::collection::Collection;
use crate::error::{Result, ServerError};
use crate::partition::export::{is_plain_name, PartitionFiles};
use crate::request::CollectionSettings;

/// The archive format this server writes and reads.
const FORMAT: u32 = 1;

/// Extension of snapshot files.
const EXTENSION: &str = "snapshot";

/// What a collection snapshot holds (its `manifest.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// The archive format ([`FORMAT`]); any other is refused.
    pub format: u32,
    /// Always `collection`.
    pub kind: String,
    /// The collection it was taken of (a recovery may give it another name).
    pub collection: String,
    /// The Cairn version that wrote it.
    pub cairn_version: String,
    /// The collection's settings.
    pub settings: CollectionSettings,
    /// Per partition, in order: what its folder `p{i}/` holds.
    pub partitions: Vec<PartitionFiles>,
}

/// What a full-storage snapshot holds (its `manifest.json`): one collection snapshot per
/// collection, `collections/<name>.snapshot`, and the aliases.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FullManifest {
    /// The archive format ([`FORMAT`]).
    pub format: u32,
    /// Always `full`.
    pub kind: String,
    /// The Cairn version that wrote it.
    pub cairn_version: String,
    /// Every collection, by name.
    pub collections: Vec<String>,
    /// Alias → collection.
    pub aliases: std::collections::BTreeMap<String, String>,
}

/// The snapshots folder of a node.
pub struct Snapshots {
    root: PathBuf,
    nonce: AtomicU64,
    /// Held while a finished archive picks its name and takes it, so two snapshots taken in
    /// the same second get two names.
    naming: parking_lot::Mutex<()>,
}

/// Seconds since the epoch as Qdrant shows a snapshot's time: `YYYY-MM-DDTHH:MM:SS`, UTC.
pub fn utc_time(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rest = secs % 86_400;
    // Days to a civil date (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}",
        rest / 3_600,
        rest % 3_600 / 60,
        rest % 60
    )
}

fn io(e: std::io::Error) -> ServerError {
    ServerError::Internal(e.to_string())
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A refused archive as a server error: the client's fault (400) or this machine's (500).
fn refused(e: archive::Refused) -> ServerError {
    match e {
        archive::Refused::Invalid(m) => {
            ServerError::InvalidRequest(format!("the snapshot cannot be recovered: {m}"))
        }
        archive::Refused::Io(e) => io(e),
    }
}

/// Refuses a file whose SHA-256 is not `expected` (hex, any case).
pub fn check_sha256(path: &Path, expected: &str) -> Result<()> {
    let got = archive::sha256(path).map_err(io)?;
    if got.eq_ignore_ascii_case(expected.trim()) {
        Ok(())
    } else {
        Err(ServerError::InvalidRequest(format!(
            "checksum: the snapshot's SHA-256 is {got}, not {expected}"
        )))
    }
}

impl Snapshots {
    /// The snapshots folder `root`, with what an interrupted write or receive left removed.
    pub fn open(root: &Path) -> Result<Self> {
        let this = Self {
            root: root.to_path_buf(),
            nonce: AtomicU64::new(
                SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as u64),
            ),
            naming: parking_lot::Mutex::new(()),
        };
        fs_err::create_dir_all(this.collections_dir()).map_err(io)?;
        fs_err::create_dir_all(this.full_dir()).map_err(io)?;
        let mut folders = vec![this.full_dir()];
        for entry in fs_err::read_dir(this.collections_dir()).map_err(io)? {
            folders.push(entry.map_err(io)?.path());
        }
        for folder in folders.iter().filter(|f| f.is_dir()) {
            for entry in fs_err::read_dir(folder).map_err(io)? {
                let path = entry.map_err(io)?.path();
                if path
                    .file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with('.'))
                {
                    tracing::info!(path = %path.display(), "removing a snapshot left unfinished");
                    let removed = match path.is_dir() {
                        true => fs_err::remove_dir_all(&path),
                        false => fs_err::remove_file(&path),
                    };
                    removed.map_err(io)?;
                }
            }
        }
        Ok(this)
    }

    fn collections_dir(&self) -> PathBuf {
        self.root.join("collections")
    }

    fn full_dir(&self) -> PathBuf {
        self.root.join("full")
    }

    /// The folder of `collection`'s snapshots (a validated collection name).
    fn folder(&self, collection: Option<&str>) -> PathBuf {
        match collection {
            Some(name) => self.collections_dir().join(name),
            None => self.full_dir(),
        }
    }

    /// A fresh hidden path in `collection`'s folder (full snapshots: `None`), created empty
    /// for a file being received or built; start-up removes it if it is left behind.
    pub fn scratch(&self, collection: Option<&str>, what: &str) -> Result<PathBuf> {
        let folder = self.folder(collection);
        fs_err::create_dir_all(&folder).map_err(io)?;
        let nonce = self.nonce.fetch_add(1, Ordering::Relaxed);
        Ok(folder.join(format!(".{what}-{nonce}")))
    }

    /// Takes a snapshot of `collection` (blocking): its partitions' moment, written into one
    /// archive beside its checksum.
    pub fn create(&self, collection: &Collection) -> Result<SnapshotDescription> {
        let build = self.scratch(Some(collection.name()), "building")?;
        let result = self.create_in(collection, &build);
        if build.is_dir() {
            let _ = fs_err::remove_dir_all(&build);
        }
        result
    }

    fn create_in(&self, collection: &Collection, build: &Path) -> Result<SnapshotDescription> {
        let started = std::time::Instant::now();
        let partitions = collection.export(build)?;
        let manifest = Manifest {
            format: FORMAT,
            kind: "collection".into(),
            collection: collection.name().to_owned(),
            cairn_version: env!("CARGO_PKG_VERSION").to_owned(),
            settings: collection.settings().clone(),
            partitions,
        };
        let mut files = Vec::new();
        for (i, part) in manifest.partitions.iter().enumerate() {
            let folder = format!("p{i}");
            let names = part.state.iter().map(|f| &f.name).chain(part.index.iter());
            for name in names {
                files.push((format!("{folder}/{name}"), build.join(&folder).join(name)));
            }
        }
        let bytes = serde_json::to_vec_pretty(&manifest)
            .map_err(|e| ServerError::Internal(e.to_string()))?;
        let description = self.seal(Some(collection.name()), &bytes, &files)?;
        tracing::info!(collection = collection.name(), snapshot = %description.name,
            bytes = description.size, ms = started.elapsed().as_millis() as u64, "snapshot taken");
        Ok(description)
    }

    /// Writes an archive of `manifest` and `files` under a new name in `collection`'s folder
    /// (full snapshots: `None`), its checksum file first, then the archive renamed into place.
    fn seal(
        &self,
        collection: Option<&str>,
        manifest: &[u8],
        files: &[(String, PathBuf)],
    ) -> Result<SnapshotDescription> {
        let folder = self.folder(collection);
        let part = self.scratch(collection, "part")?;
        let (size, checksum) = match archive::write(&part, manifest, files) {
            Ok(written) => written,
            Err(e) => {
                let _ = fs_err::remove_file(&part);
                return Err(io(e));
            }
        };
        let _naming = self.naming.lock();
        let stem = collection.unwrap_or("full");
        let time = utc_time(now_secs());
        let stamp = time.replace([':', 'T'], "-");
        let mut name = format!("{stem}-{stamp}.{EXTENSION}");
        let mut n = 2;
        while folder.join(&name).try_exists().map_err(io)? {
            name = format!("{stem}-{stamp}-{n}.{EXTENSION}");
            n += 1;
        }
        let sum = folder.join(format!("{name}.checksum"));
        let sealed = fs_err::File::create(&sum)
            .and_then(|mut file| {
                std::io::Write::write_all(&mut file, checksum.as_bytes())?;
                file.sync_all()
            })
            .and_then(|()| fs_err::rename(&part, folder.join(&name)));
        if let Err(e) = sealed {
            let _ = fs_err::remove_file(&part);
            let _ = fs_err::remove_file(&sum);
            return Err(io(e));
        }
        fs_err::File::open(&folder)
            .and_then(|d| d.sync_all())
            .map_err(io)?;
        Ok(SnapshotDescription {
            name,
            creation_time: Some(time),
            size,
            checksum: Some(checksum),
        })
    }

    /// Every snapshot of `collection` (full snapshots: `None`), by name.
    pub fn list(&self, collection: Option<&str>) -> Result<Vec<SnapshotDescription>> {
        let folder = self.folder(collection);
        let mut out = Vec::new();
        let entries = match fs_err::read_dir(&folder) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(io(e)),
        };
        for entry in entries {
            let entry = entry.map_err(io)?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') || !name.ends_with(&format!(".{EXTENSION}")) {
                continue;
            }
            out.push(self.describe(&folder, &name)?);
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    fn describe(&self, folder: &Path, name: &str) -> Result<SnapshotDescription> {
        let meta = fs_err::metadata(folder.join(name)).map_err(io)?;
        let created = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map(|d| utc_time(d.as_secs()));
        let checksum = fs_err::read_to_string(folder.join(format!("{name}.checksum")))
            .ok()
            .map(|s| s.trim().to_owned());
        Ok(SnapshotDescription {
            name: name.to_owned(),
            creation_time: created,
            size: meta.len(),
            checksum,
        })
    }

    /// The file of snapshot `name` of `collection` (full snapshots: `None`), or a 404.
    pub fn file(&self, collection: Option<&str>, name: &str) -> Result<PathBuf> {
        let path = self.folder(collection).join(name);
        let plain = is_plain_name(name)
            && !name.starts_with('.')
            && name.ends_with(&format!(".{EXTENSION}"));
        if plain && path.is_file() {
            Ok(path)
        } else {
            Err(ServerError::SnapshotNotFound(name.to_owned()))
        }
    }

    /// Deletes snapshot `name` and its checksum file.
    pub fn delete(&self, collection: Option<&str>, name: &str) -> Result<()> {
        let path = self.file(collection, name)?;
        fs_err::remove_file(&path).map_err(io)?;
        let sum = path.with_file_name(format!("{name}.checksum"));
        match fs_err::remove_file(&sum) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io(e)),
            _ => Ok(()),
        }
    }

    /// The file a `file://` location names, which must be a snapshot inside this folder (a
    /// request may not have the server read its other files).
    pub fn local_file(&self, location: &str) -> Result<PathBuf> {
        let path = location.strip_prefix("file://").unwrap_or(location);
        let outside = || {
            ServerError::InvalidRequest(format!(
                "location: {location} is not a snapshot file inside the server's snapshots \
                 folder (node.snapshots_dir); upload the file instead, or give a URL"
            ))
        };
        let file = std::fs::canonicalize(path).map_err(|_| outside())?;
        let root = std::fs::canonicalize(&self.root).map_err(io)?;
        // A finished snapshot only: not a file being received or written, nor a checksum.
        let finished = file.file_name().is_some_and(|n| {
            let n = n.to_string_lossy();
            !n.starts_with('.') && n.ends_with(&format!(".{EXTENSION}"))
        });
        if file.starts_with(&root) && file.is_file() && finished {
            Ok(file)
        } else {
            Err(outside())
        }
    }

    /// Takes a full-storage snapshot: a snapshot of each of `collections` and the aliases, in
    /// one archive.
    pub fn create_full(
        &self,
        collections: &[std::sync::Arc<Collection>],
        aliases: std::collections::BTreeMap<String, String>,
    ) -> Result<SnapshotDescription> {
        let build = self.scratch(None, "building")?;
        let result = (|| {
            fs_err::create_dir_all(&build).map_err(io)?;
            let mut files = Vec::new();
            let mut names = Vec::new();
            for collection in collections {
                let taken = self.create(collection)?;
                let path = self.file(Some(collection.name()), &taken.name)?;
                // The collection's own snapshot moves into the full one: it was taken for it.
                let moved = build.join(format!("{}.{EXTENSION}", collection.name()));
                fs_err::rename(&path, &moved).map_err(io)?;
                self.delete_checksum(Some(collection.name()), &taken.name);
                files.push((
                    format!("collections/{}.{EXTENSION}", collection.name()),
                    moved,
                ));
                names.push(collection.name().to_owned());
            }
            let manifest = FullManifest {
                format: FORMAT,
                kind: "full".into(),
                cairn_version: env!("CARGO_PKG_VERSION").to_owned(),
                collections: names,
                aliases,
            };
            let bytes = serde_json::to_vec_pretty(&manifest)
                .map_err(|e| ServerError::Internal(e.to_string()))?;
            self.seal(None, &bytes, &files)
        })();
        if build.is_dir() {
            let _ = fs_err::remove_dir_all(&build);
        }
        result
    }

    fn delete_checksum(&self, collection: Option<&str>, name: &str) {
        let _ = fs_err::remove_file(self.folder(collection).join(format!("{name}.checksum")));
    }
}

/// Unpacks a collection snapshot into `into` and reads its manifest, refusing anything that
/// is not one this server wrote in a format it reads.
pub fn unpack(archive_file: &Path, into: &Path) -> Result<Manifest> {
    let partition_file = |parts: &[&str]| match parts {
        [only] => *only == archive::MANIFEST,
        [folder, name] => {
            folder.strip_prefix('p').is_some_and(|n| {
                !n.is_empty() && n.len() <= 6 && n.bytes().all(|b| b.is_ascii_digit())
            }) && is_plain_name(name)
        }
        _ => false,
    };
    let bytes = archive::unpack(archive_file, into, partition_file).map_err(refused)?;
    let manifest: Manifest = serde_json::from_slice(&bytes).map_err(|e| {
        ServerError::InvalidRequest(format!(
            "the snapshot cannot be recovered: its manifest does not parse: {e}"
        ))
    })?;
    let invalid =
        |m: String| ServerError::InvalidRequest(format!("the snapshot cannot be recovered: {m}"));
    if manifest.format != FORMAT || manifest.kind != "collection" {
        return Err(invalid(format!(
            "it is a `{}` snapshot of format {}; this server reads collection snapshots of \
             format {FORMAT}",
            manifest.kind, manifest.format
        )));
    }
    if manifest.partitions.len() != manifest.settings.partitions() {
        return Err(invalid(format!(
            "its settings have {} partitions and it holds {}",
            manifest.settings.partitions(),
            manifest.partitions.len()
        )));
    }
    for (i, part) in manifest.partitions.iter().enumerate() {
        let names = part.state.iter().map(|f| &f.name).chain(part.index.iter());
        for name in names {
            if !is_plain_name(name) || !into.join(format!("p{i}")).join(name).is_file() {
                return Err(invalid(format!("p{i}/{name} is listed and missing")));
            }
        }
    }
    Ok(manifest)
}

/// Unpacks a full-storage snapshot into `into`: its manifest, and the collection snapshots at
/// `into/collections/<name>.snapshot`.
pub fn unpack_full(archive_file: &Path, into: &Path) -> Result<FullManifest> {
    let entry = |parts: &[&str]| match parts {
        [only] => *only == archive::MANIFEST,
        ["collections", name] => is_plain_name(name) && name.ends_with(&format!(".{EXTENSION}")),
        _ => false,
    };
    let bytes = archive::unpack(archive_file, into, entry).map_err(refused)?;
    let manifest: FullManifest = serde_json::from_slice(&bytes).map_err(|e| {
        ServerError::InvalidRequest(format!("the full snapshot's manifest does not parse: {e}"))
    })?;
    if manifest.format != FORMAT || manifest.kind != "full" {
        return Err(ServerError::InvalidRequest(format!(
            "a `{}` snapshot of format {} is not a full snapshot of format {FORMAT}",
            manifest.kind, manifest.format
        )));
    }
    Ok(manifest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_as_utc_calendar_dates() {
        assert_eq!(utc_time(0), "1970-01-01T00:00:00");
        assert_eq!(utc_time(951_782_400), "2000-02-29T00:00:00");
        assert_eq!(utc_time(1_795_648_761), "2026-11-25T23:19:21");
    }
}
