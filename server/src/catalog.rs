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

use cairn_api::{AliasDescription, AliasOperation, CreateCollection, SnapshotDescription};
use cairn_index::Trainers;
use parking_lot::{Mutex, RwLock};

use crate::collection::{Collection, PartitionHost};
use crate::config::Limits;
use crate::error::{Result, ServerError};
use crate::request::CollectionSettings;
use crate::snapshots::{self, Snapshots};

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
    /// Alias → collection name, as last read from or stored in `book`.
    aliases: RwLock<BTreeMap<String, String>>,
    book: Arc<dyn AliasBook>,
    /// Serialises create, delete, recovery and alias changes (reads never take it).
    admin: Mutex<()>,
    /// The snapshots folder.
    snapshots: Snapshots,
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

/// Where the aliases are kept: a file of this node's (standalone), or the cluster's metadata,
/// which every node follows (wired by `roles`). A change is a compare-and-set on the book's
/// version, so changes made through two nodes at once never lose one another.
pub trait AliasBook: Send + Sync {
    /// The aliases and the book's version.
    fn load(&self) -> Result<(u64, BTreeMap<String, String>)>;

    /// Stores `aliases` durably if the book is still at `version`; false, nothing stored,
    /// when another change came first.
    fn store(&self, version: u64, aliases: &BTreeMap<String, String>) -> Result<bool>;
}

/// How many times an alias change reads the book again after another change came first.
const ALIAS_ATTEMPTS: usize = 16;

/// A standalone server's aliases: one file, changed only under the catalog's admin lock (so
/// its version never moves).
struct AliasFile(PathBuf);

impl AliasBook for AliasFile {
    fn load(&self) -> Result<(u64, BTreeMap<String, String>)> {
        Ok((0, read_aliases(&self.0)?))
    }

    fn store(&self, _version: u64, aliases: &BTreeMap<String, String>) -> Result<bool> {
        write_aliases(&self.0, aliases)?;
        Ok(true)
    }
}

/// Where a standalone node keeps its aliases, beside `collections/` (a hidden file inside it
/// would be taken for a leftover and removed at start-up).
const ALIASES_FILE: &str = "aliases.json";

fn read_aliases(path: &Path) -> Result<BTreeMap<String, String>> {
    match fs_err::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map_err(|e| ServerError::Internal(format!("{} does not parse: {e}", path.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
        Err(e) => Err(ServerError::Internal(e.to_string())),
    }
}

/// Writes the aliases whole: a synced temporary file renamed over the old one, then the
/// folder synced, so a crash leaves the old set or the new one.
fn write_aliases(path: &Path, aliases: &BTreeMap<String, String>) -> Result<()> {
    let io = |e: std::io::Error| ServerError::Internal(e.to_string());
    let bytes =
        serde_json::to_vec_pretty(aliases).map_err(|e| ServerError::Internal(e.to_string()))?;
    let staging = path.with_extension("json.tmp");
    let mut file = fs_err::File::create(&staging).map_err(io)?;
    std::io::Write::write_all(&mut file, &bytes).map_err(io)?;
    file.sync_all().map_err(io)?;
    fs_err::rename(&staging, path).map_err(io)?;
    if let Some(folder) = path.parent() {
        fs_err::File::open(folder)
            .and_then(|d| d.sync_all())
            .map_err(io)?;
    }
    Ok(())
}

/// A recovery's swap of a collection folder, crash-safe in both directions. A marker file
/// `.recovering-<nonce>-<name>` is written (synced) before anything moves and removed only
/// once the new collection has opened; the collection it replaces waits beside it as
/// `.replaced-<nonce>-<name>` until then. Start-up rolls back every swap whose marker is
/// still there ([`Swap::roll_back_all`]): the unconfirmed folder goes, the replaced one comes
/// back. The nonce comes first in both names, so the name (which may hold `-`) is the rest.
struct Swap {
    marker: PathBuf,
    dir: PathBuf,
    aside: PathBuf,
    root: PathBuf,
    /// Whether a collection of that name was there (the marker holds `1` or `0`): rolling
    /// back then removes the folder at the name only once the old one is safely aside.
    had_previous: bool,
}

impl Swap {
    fn new(root: &Path, name: &str, nonce: u128, had_previous: bool) -> Self {
        Self {
            marker: root.join(format!(".recovering-{nonce}-{name}")),
            dir: root.join(name),
            aside: root.join(format!(".replaced-{nonce}-{name}")),
            root: root.to_path_buf(),
            had_previous,
        }
    }

    fn sync_root(&self) -> Result<()> {
        fs_err::File::open(&self.root)
            .and_then(|d| d.sync_all())
            .map_err(internal)
    }

    /// Marks the swap, sets the current folder aside and moves `staging` into its place.
    fn forward(&self, staging: &Path) -> Result<()> {
        let mut marker = fs_err::File::create(&self.marker).map_err(internal)?;
        std::io::Write::write_all(&mut marker, if self.had_previous { b"1" } else { b"0" })
            .and_then(|()| marker.sync_all())
            .map_err(internal)?;
        self.sync_root()?;
        if self.dir.is_dir() {
            fs_err::rename(&self.dir, &self.aside).map_err(internal)?;
        }
        fs_err::rename(staging, &self.dir).map_err(internal)?;
        self.sync_root()
    }

    /// The new folder opened: the marker goes first (from then on start-up keeps it), then the
    /// replaced folder.
    fn confirm(&self) -> Result<()> {
        fs_err::remove_file(&self.marker).map_err(internal)?;
        self.sync_root()?;
        if self.aside.is_dir() {
            fs_err::remove_dir_all(&self.aside).map_err(internal)?;
        }
        Ok(())
    }

    /// Undoes the swap: the unconfirmed folder is removed, the replaced one put back.
    fn roll_back(&self) -> Result<()> {
        // With a previous collection not yet set aside, the folder at the name is still it.
        let unconfirmed = self.dir.is_dir() && (!self.had_previous || self.aside.is_dir());
        if unconfirmed {
            let trash = self.root.join(format!(".deleted-recovery-{}", nanos()));
            fs_err::rename(&self.dir, &trash).map_err(internal)?;
            fs_err::remove_dir_all(&trash).map_err(internal)?;
        }
        if self.aside.is_dir() {
            fs_err::rename(&self.aside, &self.dir).map_err(internal)?;
        }
        match fs_err::remove_file(&self.marker) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(internal(e)),
            _ => {}
        }
        self.sync_root()
    }

    /// Start-up: rolls back every recovery a crash cut short (its marker is still there).
    fn roll_back_all(root: &Path) -> Result<()> {
        for entry in fs_err::read_dir(root).map_err(internal)? {
            let path = entry.map_err(internal)?.path();
            let file_name = path.file_name().map(|n| n.to_string_lossy().into_owned());
            let Some((nonce, name)) = file_name
                .as_deref()
                .and_then(|n| n.strip_prefix(".recovering-"))
                .and_then(|rest| rest.split_once('-'))
            else {
                continue;
            };
            let (Ok(nonce), Ok(())) = (nonce.parse::<u128>(), validate_name(name)) else {
                continue;
            };
            let had_previous = fs_err::read(&path).map_err(internal)? != b"0";
            tracing::warn!(collection = %name, "a recovery from a snapshot was cut short: the collection is put back as it was");
            Swap::new(root, name, nonce, had_previous).roll_back()?;
        }
        Ok(())
    }
}

fn internal(e: std::io::Error) -> ServerError {
    ServerError::Internal(e.to_string())
}

fn nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// Refuses `name` for a new alias when an alias or a collection has it.
fn name_free(
    aliases: &BTreeMap<String, String>,
    is_collection: &impl Fn(&str) -> bool,
    name: &str,
) -> Result<()> {
    if aliases.contains_key(name) {
        return Err(ServerError::NameTaken(format!(
            "alias `{name}` already exists"
        )));
    }
    if is_collection(name) {
        return Err(ServerError::NameTaken(format!(
            "`{name}` is a collection; an alias needs a name of its own"
        )));
    }
    Ok(())
}

impl Catalog {
    /// Opens every collection under `data_dir` (blocking; builds or loads indexes).
    pub fn open(
        data_dir: &Path,
        snapshots_dir: &Path,
        limits: Limits,
        trainers: Trainers,
        host: Arc<dyn PartitionHost>,
        book: Option<Arc<dyn AliasBook>>,
    ) -> Result<Self> {
        let root = data_dir.join("collections");
        fs_err::create_dir_all(&root).map_err(|e| ServerError::Internal(e.to_string()))?;
        Swap::roll_back_all(&root)?;
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
        let book = book.unwrap_or_else(|| Arc::new(AliasFile(data_dir.join(ALIASES_FILE))));
        let (_, aliases) = book.load()?;
        Ok(Self {
            root,
            limits,
            trainers,
            host,
            collections: RwLock::new(collections),
            aliases: RwLock::new(aliases),
            book,
            admin: Mutex::new(()),
            snapshots: Snapshots::open(snapshots_dir)?,
        })
    }

    /// A collection by name, or by one of its aliases (a collection's own name wins).
    pub fn get(&self, name: &str) -> Result<Arc<Collection>> {
        let collections = self.collections.read();
        if let Some(collection) = collections.get(name) {
            return Ok(collection.clone());
        }
        self.aliases
            .read()
            .get(name)
            .and_then(|target| collections.get(target))
            .cloned()
            .ok_or_else(|| ServerError::CollectionNotFound(name.to_owned()))
    }

    /// Every alias, by name; with `collection`, only those naming it (an alias of it is
    /// resolved first, so a collection can be asked about by an alias too).
    pub fn aliases(&self, collection: Option<&str>) -> Result<Vec<AliasDescription>> {
        let target = match collection {
            Some(name) => Some(self.get(name)?.name().to_owned()),
            None => None,
        };
        Ok(self
            .aliases
            .read()
            .iter()
            .filter(|(_, c)| target.as_ref().is_none_or(|t| t == *c))
            .map(|(alias, c)| AliasDescription {
                alias_name: alias.clone(),
                collection_name: c.clone(),
            })
            .collect())
    }

    /// Applies alias changes in order, all or none, and stores the result (synced) before
    /// any request sees it.
    pub fn change_aliases(&self, actions: &[AliasOperation]) -> Result<()> {
        let _admin = self.admin.lock();
        let collections = self.collections.read().keys().cloned().collect::<Vec<_>>();
        let is_collection = |name: &str| collections.iter().any(|c| c == name);
        self.edit_aliases(|aliases| {
            for action in actions {
                match action {
                    AliasOperation::CreateAlias(c) => {
                        validate_name(&c.alias_name)?;
                        if !is_collection(&c.collection_name) {
                            return Err(ServerError::CollectionNotFound(c.collection_name.clone()));
                        }
                        name_free(aliases, &is_collection, &c.alias_name)?;
                        aliases.insert(c.alias_name.clone(), c.collection_name.clone());
                    }
                    AliasOperation::DeleteAlias(d) => {
                        aliases
                            .remove(&d.alias_name)
                            .ok_or_else(|| ServerError::AliasNotFound(d.alias_name.clone()))?;
                    }
                    AliasOperation::RenameAlias(r) => {
                        validate_name(&r.new_alias_name)?;
                        let target = aliases
                            .remove(&r.old_alias_name)
                            .ok_or_else(|| ServerError::AliasNotFound(r.old_alias_name.clone()))?;
                        name_free(aliases, &is_collection, &r.new_alias_name)?;
                        aliases.insert(r.new_alias_name.clone(), target);
                    }
                }
            }
            Ok(())
        })
    }

    /// Reads the aliases from the book, lets `edit` change them and stores the result, again
    /// from a fresh read whenever another change came first (another node's). Callers hold
    /// the admin lock.
    fn edit_aliases(
        &self,
        edit: impl Fn(&mut BTreeMap<String, String>) -> Result<()>,
    ) -> Result<()> {
        for _ in 0..ALIAS_ATTEMPTS {
            let (version, mut aliases) = self.book.load()?;
            let before = aliases.clone();
            edit(&mut aliases)?;
            if aliases == before || self.book.store(version, &aliases)? {
                *self.aliases.write() = aliases;
                return Ok(());
            }
        }
        Err(ServerError::Unavailable(format!(
            "other alias changes kept coming first ({ALIAS_ATTEMPTS} attempts); retry"
        )))
    }

    /// Reads the aliases again from the book: a cluster's node follows the changes made
    /// through the others. Skipped while a change is being made here (it holds the admin
    /// lock, and will leave the map it stored): a read from before it must not replace that.
    pub fn follow_aliases(&self) -> Result<()> {
        let Some(_admin) = self.admin.try_lock() else {
            return Ok(());
        };
        let (_, aliases) = self.book.load()?;
        *self.aliases.write() = aliases;
        Ok(())
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
        if self.aliases.read().contains_key(name) {
            return Err(ServerError::NameTaken(format!(
                "`{name}` is an alias; delete it first to use the name for a collection"
            )));
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
        // Its aliases go with it, as in Qdrant (on a cluster, every node's delete tries; the
        // first removes them, the others find nothing to remove).
        self.edit_aliases(|aliases| {
            aliases.retain(|_, target| target != name);
            Ok(())
        })?;
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

    /// The snapshots folder.
    pub fn snapshots(&self) -> &Snapshots {
        &self.snapshots
    }

    /// Takes a full-storage snapshot: every collection and the aliases (blocking).
    pub fn create_full_snapshot(&self) -> Result<SnapshotDescription> {
        let aliases = self.aliases.read().clone();
        self.snapshots.create_full(&self.all(), aliases)
    }

    /// Recovers collection `name` from the collection snapshot in `file` (blocking): the
    /// snapshot is unpacked and checked, its partitions restored into a staging folder, and
    /// the result takes the place of the collection of that name, if there is one. A snapshot
    /// that does not unpack, restore or open leaves everything as it was.
    pub fn recover(&self, name: &str, file: &Path) -> Result<()> {
        validate_name(name)?;
        let nonce = nanos();
        let unpacked = self.root.join(format!(".unpacking-{nonce}"));
        let staging = self.root.join(format!(".restoring-{nonce}"));
        let result = self.recover_via(name, file, &unpacked, &staging, nonce);
        for leftover in [&unpacked, &staging] {
            if leftover.is_dir() {
                let _ = fs_err::remove_dir_all(leftover);
            }
        }
        result
    }

    fn recover_via(
        &self,
        name: &str,
        file: &Path,
        unpacked: &Path,
        staging: &Path,
        nonce: u128,
    ) -> Result<()> {
        let io = |e: std::io::Error| ServerError::Internal(e.to_string());
        let started = std::time::Instant::now();
        let manifest = snapshots::unpack(file, unpacked)?;
        self.host.check(&manifest.settings)?;
        fs_err::create_dir_all(staging).map_err(io)?;
        let restored = self.host.restore(staging, unpacked, &manifest.partitions);
        // A table file that fails its CRC, or that RocksDB will not ingest, is the snapshot's
        // fault, not this server's.
        if let Err(ServerError::Storage(
            e @ (cairn_storage::StorageError::Corrupt { .. }
            | cairn_storage::StorageError::Rocks { .. }),
        )) = &restored
        {
            return Err(ServerError::InvalidRequest(format!(
                "the snapshot cannot be recovered: {e}"
            )));
        }
        restored?;
        let _admin = self.admin.lock();
        if self.aliases.read().contains_key(name) {
            return Err(ServerError::NameTaken(format!(
                "`{name}` is an alias; recover into the collection's own name"
            )));
        }
        let previous = self.collections.write().remove(name);
        if let Some(held) = &previous {
            // Requests that hold it finish first (a snapshot being taken of it included): its
            // stores must be closed before the folder's new stores open at the same path.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            while Arc::strong_count(held) > 1 && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            if Arc::strong_count(held) > 1 {
                self.collections
                    .write()
                    .insert(name.to_owned(), held.clone());
                return Err(ServerError::Unavailable(format!(
                    "collection `{name}` stayed busy for 30 s (a snapshot or long request holds \
                     it); retry the recovery"
                )));
            }
        }
        let had_previous = previous.is_some();
        drop(previous);
        let swap = Swap::new(&self.root, name, nonce, had_previous);
        let opened = swap.forward(staging).and_then(|()| {
            self.host
                .open(name, &swap.dir)
                .and_then(|opened| Collection::open(name, opened, self.trainers.clone()))
        });
        match opened {
            Ok(collection) => {
                self.collections.write().insert(name.to_owned(), collection);
                swap.confirm()?;
                tracing::info!(collection = name, from = %manifest.collection,
                    ms = started.elapsed().as_millis() as u64, "collection recovered from a snapshot");
                Ok(())
            }
            Err(e) => {
                // Put the previous collection back as it was.
                swap.roll_back()?;
                if had_previous {
                    let previous = Collection::open(
                        name,
                        self.host.open(name, &swap.dir)?,
                        self.trainers.clone(),
                    )?;
                    self.collections.write().insert(name.to_owned(), previous);
                }
                Err(ServerError::InvalidRequest(format!(
                    "the snapshot cannot be recovered: it does not open: {e}"
                )))
            }
        }
    }

    /// Recovers every collection and the aliases of a full-storage snapshot (blocking;
    /// `cairn serve --storage-snapshot`): each collection replaces the one of its name, and the
    /// snapshot's aliases are added to those there are.
    pub fn recover_full(&self, file: &Path) -> Result<()> {
        let unpacked = self.root.join(format!(".unpacking-{}", nanos()));
        let result = (|| {
            let manifest = snapshots::unpack_full(file, &unpacked)?;
            for name in &manifest.collections {
                let archive = unpacked
                    .join("collections")
                    .join(format!("{name}.snapshot"));
                self.recover(name, &archive)?;
            }
            let actions: Vec<AliasOperation> = manifest
                .aliases
                .into_iter()
                .filter(|(alias, _)| !self.aliases.read().contains_key(alias))
                .map(|(alias_name, collection_name)| {
                    AliasOperation::CreateAlias(cairn_api::CreateAlias {
                        alias_name,
                        collection_name,
                    })
                })
                .collect();
            self.change_aliases(&actions)
        })();
        if unpacked.is_dir() {
            let _ = fs_err::remove_dir_all(&unpacked);
        }
        result
    }

    /// Stops every applier after a final snapshot (graceful shutdown).
    pub fn close_all(&self) {
        for collection in self.all() {
            collection.close();
        }
    }
}
