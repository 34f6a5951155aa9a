//! The catalog: every collection of this node, by name, and their life cycle on disk.
//!
//! Layout: `<data_dir>/collections/<name>/partitions/<i>/{db/, index.cidx}`, one folder per
//! partition (a collection that is not partitioned has only `0`). Creation builds the
//! folder under a hidden `.creating-*` name and renames it into place; deletion renames it to
//! a hidden `.deleted-*` name before removing it. Either way a crash leaves a complete
//! collection or a hidden leftover that the next start removes — never half a collection.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cairn_api::CreateCollection;
use cairn_index::Trainers;
use parking_lot::{Mutex, RwLock};

use crate::collection::{Collection, PartitionHost};
use crate::config::Limits;
use crate::error::{Result, ServerError};
use crate::request::CollectionSettings;

/// Longest collection name.
const MAX_NAME: usize = 255;

/// All collections of a node.
pub struct Catalog {
    root: PathBuf,
    limits: Limits,
    /// Trains the k-means centres of partitioned collections' meta-indexes (FAISS in the
    /// binary).
    trainers: Trainers,
    /// Where partitions live: this process, or a cluster's nodes.
    host: Arc<dyn PartitionHost>,
    collections: RwLock<BTreeMap<String, Arc<Collection>>>,
    /// Serialises create and delete (reads never take it).
    admin: Mutex<()>,
}

/// Names are path components: letters, digits, `-`, `_`, `.`, not starting with a dot.
pub fn validate_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(ServerError::InvalidRequest(format!(
            "collection name {name:?} must be 1-{MAX_NAME} characters of letters, digits, '-', '_' or '.', not starting with '.'"
        )))
    }
}

impl Catalog {
    /// Opens every collection under `data_dir` (blocking; builds or loads indexes).
    pub fn open(
        data_dir: &Path,
        limits: Limits,
        trainers: Trainers,
        host: Arc<dyn PartitionHost>,
    ) -> Result<Self> {
        let root = data_dir.join("collections");
        fs_err::create_dir_all(&root).map_err(|e| ServerError::Internal(e.to_string()))?;
        let mut collections = BTreeMap::new();
        for entry in fs_err::read_dir(&root).map_err(|e| ServerError::Internal(e.to_string()))? {
            let entry = entry.map_err(|e| ServerError::Internal(e.to_string()))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = entry.path();
            if name.starts_with('.') {
                tracing::info!(path = %path.display(), "removing leftover of an interrupted create or delete");
                fs_err::remove_dir_all(&path).map_err(|e| ServerError::Internal(e.to_string()))?;
                continue;
            }
            let Some(opened) = host.open_at_start(&name, &path)? else {
                tracing::warn!(collection = %name, "not opened: its host does not serve it now");
                continue;
            };
            let collection = Collection::open(&name, opened, trainers.clone())?;
            collections.insert(name, collection);
        }
        Ok(Self {
            root,
            limits,
            trainers,
            host,
            collections: RwLock::new(collections),
            admin: Mutex::new(()),
        })
    }

    /// A collection by name.
    pub fn get(&self, name: &str) -> Result<Arc<Collection>> {
        self.collections
            .read()
            .get(name)
            .cloned()
            .ok_or_else(|| ServerError::CollectionNotFound(name.to_owned()))
    }

    /// Names of all collections, sorted.
    pub fn names(&self) -> Vec<String> {
        self.collections.read().keys().cloned().collect()
    }

    /// All collections.
    pub fn all(&self) -> Vec<Arc<Collection>> {
        self.collections.read().values().cloned().collect()
    }

    /// Creates a collection (blocking).
    pub fn create(&self, name: &str, request: &CreateCollection) -> Result<()> {
        let settings = CollectionSettings::from_request(request, &self.limits)?;
        self.host.check(&settings)?;
        self.create_with(name, &settings)
    }

    /// Creates a collection with validated settings.
    fn create_with(&self, name: &str, settings: &CollectionSettings) -> Result<()> {
        validate_name(name)?;
        let _admin = self.admin.lock();
        if self.collections.read().contains_key(name) {
            return Err(ServerError::CollectionExists(name.to_owned()));
        }
        let staging = self.root.join(format!(".creating-{name}"));
        let io = |e: std::io::Error| ServerError::Internal(e.to_string());
        if staging.is_dir() {
            fs_err::remove_dir_all(&staging).map_err(io)?;
        }
        fs_err::create_dir_all(&staging).map_err(io)?;
        self.host.create(name, &staging, settings)?;
        let dir = self.root.join(name);
        fs_err::rename(&staging, &dir).map_err(io)?;
        fs_err::File::open(&self.root)
            .and_then(|d| d.sync_all())
            .map_err(io)?;
        let collection =
            Collection::open(name, self.host.open(name, &dir)?, self.trainers.clone())?;
        self.collections.write().insert(name.to_owned(), collection);
        tracing::info!(collection = name, dim = settings.dim, distance = ?settings.distance,
            partitions = settings.partitions(), "collection created");
        Ok(())
    }

    /// Opens a collection whose settings were decided elsewhere (a peer node following the
    /// cluster's metadata): from its folder if one is here, otherwise created as by
    /// [`Self::create_with`]. A collection already open is left as it is.
    pub fn adopt(&self, name: &str, settings: &CollectionSettings) -> Result<()> {
        validate_name(name)?;
        {
            let _admin = self.admin.lock();
            if self.collections.read().contains_key(name) {
                return Ok(());
            }
            let dir = self.root.join(name);
            if dir.is_dir() {
                let collection =
                    Collection::open(name, self.host.open(name, &dir)?, self.trainers.clone())?;
                self.collections.write().insert(name.to_owned(), collection);
                tracing::info!(collection = name, "collection adopted from its folder");
                return Ok(());
            }
        }
        match self.create_with(name, settings) {
            Err(ServerError::CollectionExists(_)) => Ok(()),
            other => other,
        }
    }

    /// Deletes a collection and its files (blocking).
    pub fn delete(&self, name: &str) -> Result<()> {
        let _admin = self.admin.lock();
        let collection = self
            .collections
            .write()
            .remove(name)
            .ok_or_else(|| ServerError::CollectionNotFound(name.to_owned()))?;
        collection.close();
        self.host.release(name, collection.settings());
        let io = |e: std::io::Error| ServerError::Internal(e.to_string());
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let trash = self.root.join(format!(".deleted-{name}-{nanos}"));
        fs_err::rename(self.root.join(name), &trash).map_err(io)?;
        fs_err::remove_dir_all(&trash).map_err(io)?;
        tracing::info!(collection = name, "collection deleted");
        Ok(())
    }

    /// Stops every applier after a final snapshot (graceful shutdown).
    pub fn close_all(&self) {
        for collection in self.all() {
            collection.close();
        }
    }
}
