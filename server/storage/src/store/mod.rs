use std::path::{Path, PathBuf};

use rocksdb::{
    ColumnFamily, ColumnFamilyDescriptor, Direction, IteratorMode, Options, WriteBatch,
    WriteOptions, DB,
};
use serde::{Deserialize, Serialize};

use crate::{Result, StorageError};

pub(crate) mod replication;
pub(crate) mod transfer;

const CF_POINTS: &str = "points";
const CF_VECTORS: &str = "vectors";
const CF_OPLOG: &str = "oplog";
const CF_META: &str = "meta";
const LAST_SEQ: &[u8] = b"last_seq";
/// The families that make up a partition's state: what a snapshot carries and an install
/// replaces. The replicated log's own families (`replication`) are never part of it.
const STATE_FAMILIES: [&str; 4] = [CF_POINTS, CF_VECTORS, CF_OPLOG, CF_META];

/// How the store commits.
#[derive(Debug, Clone, Copy)]
pub struct StoreOptions {
    /// fsync the WAL before a write returns. Only tests of throughput turn this off; with it
    /// off an acknowledged write can be lost on power failure (not on a process crash).
    pub sync_writes: bool,
    /// Whether the partition is a replica in a cluster: its writes arrive through a replicated
    /// log, kept in two more families of the same database (see `replication`). A standalone
    /// partition leaves this off and never creates them, so it pays nothing for consensus.
    pub replicated: bool,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            sync_writes: true,
            replicated: false,
        }
    }
}

/// One point as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredPoint {
    /// Sequence number of the write that produced this value.
    pub version: u64,
    /// The vector, after metric preprocessing.
    pub vector: Vec<f32>,
    /// The payload as JSON text (RocksDB values are bytes; JSON keeps them self-describing).
    pub payload: Option<String>,
    /// Sparse vectors by name (empty for most collections).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sparse: Vec<StoredSparse>,
    /// Dense vectors beside the main one, by name (empty for most collections).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra: Vec<StoredDense>,
}

/// One named dense vector of a point beside its main one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredDense {
    /// The vector's name.
    pub name: String,
    /// Its values, after its metric's preprocessing.
    pub values: Vec<f32>,
}

/// One named sparse vector of a point, sorted by index.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredSparse {
    /// The sparse vector space's name.
    pub name: String,
    /// Dimensions, ascending.
    pub indices: Vec<u32>,
    /// One value per dimension.
    pub values: Vec<f32>,
}

/// Whether an op-log entry wrote or removed its points.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum OpKind {
    /// Points were inserted or replaced.
    Upsert,
    /// Points were removed.
    Delete,
}

/// What one sequence number did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpLogEntry {
    /// Upsert or delete.
    pub kind: OpKind,
    /// Encoded ids of the points it touched.
    pub keys: Vec<Vec<u8>>,
}

/// One point without its main vector: what the `points` family holds (its sparse vectors and
/// the dense ones beside the main one included).
#[derive(Debug, Clone, PartialEq)]
pub struct MetaRecord {
    /// The encoded id.
    pub key: Vec<u8>,
    /// Sequence number of the write that produced it.
    pub version: u64,
    /// The payload as JSON text.
    pub payload: Option<String>,
    /// Sparse vectors by name.
    pub sparse: Vec<StoredSparse>,
    /// Dense vectors beside the main one, by name.
    pub extra: Vec<StoredDense>,
}

/// A batch to commit under one sequence number.
#[derive(Debug, Clone, PartialEq)]
pub enum WriteOp {
    /// Insert or replace these points (key, value).
    Upsert(Vec<(Vec<u8>, StoredPoint)>),
    /// Remove these keys (absent keys are fine).
    Delete(Vec<Vec<u8>>),
}

/// The durable store of one partition. Thread-safe: RocksDB serialises writers internally and
/// groups concurrent synced writes into one fsync.
pub struct PartitionStore {
    db: DB,
    path: PathBuf,
    write_options: WriteOptions,
}

impl PartitionStore {
    /// Opens (creating if needed) the database in `path`.
    pub fn open(path: &Path, options: StoreOptions) -> Result<Self> {
        fs_err::create_dir_all(path)?;
        let mut db_opts = Options::default();
        db_opts.create_if_missing(true);
        db_opts.create_missing_column_families(true);
        db_opts.set_compression_type(rocksdb::DBCompressionType::Lz4);
        db_opts.set_max_background_jobs(2);
        db_opts.set_keep_log_file_num(3);
        let cf = |name: &str| {
            let mut o = Options::default();
            o.set_compression_type(rocksdb::DBCompressionType::Lz4);
            o.set_write_buffer_size(16 << 20);
            ColumnFamilyDescriptor::new(name, o)
        };
        // Every family the database already has must be opened, so a partition that was once
        // replicated still opens when `replicated` is off (and the other way round).
        let mut families: Vec<String> = STATE_FAMILIES.iter().map(|s| (*s).to_owned()).collect();
        if options.replicated {
            families.extend(replication::FAMILIES.iter().map(|s| (*s).to_owned()));
        }
        if let Ok(existing) = DB::list_cf(&db_opts, path) {
            for name in existing {
                if name != rocksdb::DEFAULT_COLUMN_FAMILY_NAME && !families.contains(&name) {
                    families.push(name);
                }
            }
        }
        let db = DB::open_cf_descriptors(&db_opts, path, families.iter().map(|n| cf(n))).map_err(
            |source| StorageError::Rocks {
                path: path.to_path_buf(),
                source,
            },
        )?;
        let mut write_options = WriteOptions::default();
        write_options.set_sync(options.sync_writes);
        Ok(Self {
            db,
            path: path.to_path_buf(),
            write_options,
        })
    }

    /// The database directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn cf(&self, name: &str) -> Result<&ColumnFamily> {
        self.db
            .cf_handle(name)
            .ok_or_else(|| self.corrupt(format!("missing column family {name}")))
    }

    fn rocks(&self, source: rocksdb::Error) -> StorageError {
        StorageError::Rocks {
            path: self.path.clone(),
            source,
        }
    }

    fn corrupt(&self, comment: String) -> StorageError {
        StorageError::Corrupt {
            path: self.path.clone(),
            comment,
        }
    }

    /// The last sequence number committed (0 for a new store).
    pub fn last_seq(&self) -> Result<u64> {
        match self
            .db
            .get_cf(self.cf(CF_META)?, LAST_SEQ)
            .map_err(|e| self.rocks(e))?
        {
            None => Ok(0),
            Some(bytes) => {
                let array: [u8; 8] = bytes
                    .as_slice()
                    .try_into()
                    .map_err(|_| self.corrupt("last_seq is not 8 bytes".into()))?;
                Ok(u64::from_be_bytes(array))
            }
        }
    }

    /// Commits `op` as sequence number `seq` (must exceed [`Self::last_seq`]) atomically and,
    /// with `sync_writes`, durably.
    pub fn write(&self, seq: u64, op: &WriteOp) -> Result<()> {
        let last = self.last_seq()?;
        if seq <= last {
            return Err(StorageError::OutOfOrder { last, got: seq });
        }
        let mut batch = WriteBatch::default();
        self.stage(&mut batch, seq, op)?;
        self.db
            .write_opt(batch, &self.write_options)
            .map_err(|e| self.rocks(e))
    }

    /// Commits several ops, each under its own sequence number (increasing, above
    /// [`Self::last_seq`], not necessarily contiguous), and the small named `meta` values, in one
    /// atomic batch. `sync` says whether the WAL is fsynced before returning: a replica's ops are
    /// already durable in its replicated log, so it applies them without a sync of its own and,
    /// after a crash, applies them again from the log.
    pub fn write_many(
        &self,
        ops: &[(u64, &WriteOp)],
        meta: &[(&str, &[u8])],
        sync: bool,
    ) -> Result<()> {
        let mut last = self.last_seq()?;
        let mut batch = WriteBatch::default();
        for (seq, op) in ops {
            if *seq <= last {
                return Err(StorageError::OutOfOrder { last, got: *seq });
            }
            self.stage(&mut batch, *seq, op)?;
            last = *seq;
        }
        let meta_cf = self.cf(CF_META)?;
        for (name, value) in meta {
            batch.put_cf(meta_cf, name.as_bytes(), value);
        }
        let mut options = WriteOptions::default();
        options.set_sync(sync);
        self.db
            .write_opt(batch, &options)
            .map_err(|e| self.rocks(e))
    }

    /// Adds `op`'s point changes, its op-log entry and the new `last_seq` to `batch`.
    fn stage(&self, batch: &mut WriteBatch, seq: u64, op: &WriteOp) -> Result<()> {
        let points = self.cf(CF_POINTS)?;
        let vectors = self.cf(CF_VECTORS)?;
        let entry = match op {
            WriteOp::Upsert(items) => {
                for (key, point) in items {
                    batch.put_cf(points, key, encode_meta(point));
                    batch.put_cf(vectors, key, vector_bytes(&point.vector));
                }
                OpLogEntry {
                    kind: OpKind::Upsert,
                    keys: items.iter().map(|(k, _)| k.clone()).collect(),
                }
            }
            WriteOp::Delete(keys) => {
                for key in keys {
                    batch.delete_cf(points, key);
                    batch.delete_cf(vectors, key);
                }
                OpLogEntry {
                    kind: OpKind::Delete,
                    keys: keys.clone(),
                }
            }
        };
        batch.put_cf(self.cf(CF_OPLOG)?, seq.to_be_bytes(), encode(&entry));
        batch.put_cf(self.cf(CF_META)?, LAST_SEQ, seq.to_be_bytes());
        Ok(())
    }

    /// One point by key.
    pub fn get(&self, key: &[u8]) -> Result<Option<StoredPoint>> {
        let Some(meta) = self
            .db
            .get_cf(self.cf(CF_POINTS)?, key)
            .map_err(|e| self.rocks(e))?
        else {
            return Ok(None);
        };
        let meta = decode_meta(&meta).map_err(|c| self.corrupt(c))?;
        let vector = self
            .get_vector(key)?
            .ok_or_else(|| self.corrupt("point without a vector".into()))?;
        Ok(Some(StoredPoint {
            version: meta.version,
            vector,
            payload: meta.payload,
            sparse: meta.sparse,
            extra: meta.extra,
        }))
    }

    /// The vector of one point.
    pub fn get_vector(&self, key: &[u8]) -> Result<Option<Vec<f32>>> {
        match self
            .db
            .get_cf(self.cf(CF_VECTORS)?, key)
            .map_err(|e| self.rocks(e))?
        {
            None => Ok(None),
            Some(bytes) => vector_from_bytes(&bytes)
                .map(Some)
                .map_err(|c| self.corrupt(c)),
        }
    }

    /// Every point's record in key order, without reading the main vectors (the `vectors`
    /// family): what a restart needs when the index itself comes from a snapshot file.
    pub fn scan_meta(&self) -> Result<impl Iterator<Item = Result<MetaRecord>> + '_> {
        let iter = self
            .db
            .iterator_cf(self.cf(CF_POINTS)?, IteratorMode::Start);
        Ok(iter.map(move |item| {
            let (k, v) = item.map_err(|e| self.rocks(e))?;
            let meta = decode_meta(&v).map_err(|c| self.corrupt(c))?;
            Ok(MetaRecord {
                key: k.to_vec(),
                version: meta.version,
                payload: meta.payload,
                sparse: meta.sparse,
                extra: meta.extra,
            })
        }))
    }

    /// Every point in key order, vectors included. Errors are yielded, not swallowed.
    pub fn scan_points(&self) -> Result<impl Iterator<Item = Result<(Vec<u8>, StoredPoint)>> + '_> {
        let metas = self.scan_meta()?;
        let mut vectors = self
            .db
            .iterator_cf(self.cf(CF_VECTORS)?, IteratorMode::Start);
        Ok(metas.map(move |item| {
            let MetaRecord {
                key,
                version,
                payload,
                sparse,
                extra,
            } = item?;
            // Both families hold exactly the same keys (written in one batch), so the two
            // key-ordered iterators advance in lockstep.
            let (vkey, vbytes) = vectors
                .next()
                .ok_or_else(|| self.corrupt("vector family is shorter than points".into()))?
                .map_err(|e| self.rocks(e))?;
            if *vkey != *key {
                return Err(self.corrupt("vector and point families disagree on keys".into()));
            }
            let vector = vector_from_bytes(&vbytes).map_err(|c| self.corrupt(c))?;
            Ok((
                key,
                StoredPoint {
                    version,
                    vector,
                    payload,
                    sparse,
                    extra,
                },
            ))
        }))
    }

    /// Op-log entries with sequence number greater than `after`, in order.
    pub fn oplog_after(
        &self,
        after: u64,
    ) -> Result<impl Iterator<Item = Result<(u64, OpLogEntry)>> + '_> {
        let start = after.saturating_add(1).to_be_bytes();
        let iter = self.db.iterator_cf(
            self.cf(CF_OPLOG)?,
            IteratorMode::From(&start, Direction::Forward),
        );
        Ok(iter.map(move |item| {
            let (k, v) = item.map_err(|e| self.rocks(e))?;
            let array: [u8; 8] = k
                .as_ref()
                .try_into()
                .map_err(|_| self.corrupt("op-log key is not 8 bytes".into()))?;
            let entry = decode(&v).map_err(|c| self.corrupt(c))?;
            Ok((u64::from_be_bytes(array), entry))
        }))
    }

    /// The lowest sequence number still in the op log, if any.
    pub fn oplog_first(&self) -> Result<Option<u64>> {
        match self.oplog_after(0)?.next() {
            None => Ok(None),
            Some(item) => item.map(|(seq, _)| Some(seq)),
        }
    }

    /// Drops op-log entries below `seq`: they are reflected in a persisted index and no
    /// replica needs them any more. Space comes back at RocksDB's next compaction.
    pub fn trim_oplog_below(&self, seq: u64) -> Result<()> {
        let cf = self.cf(CF_OPLOG)?;
        self.db
            .delete_range_cf(cf, 0u64.to_be_bytes(), seq.to_be_bytes())
            .map_err(|e| self.rocks(e))
    }

    /// A small named value (collection config, routing tables).
    pub fn get_meta(&self, name: &str) -> Result<Option<Vec<u8>>> {
        self.db
            .get_cf(self.cf(CF_META)?, name.as_bytes())
            .map_err(|e| self.rocks(e))
    }

    /// Stores a small named value durably.
    pub fn put_meta(&self, name: &str, value: &[u8]) -> Result<()> {
        let mut batch = WriteBatch::default();
        batch.put_cf(self.cf(CF_META)?, name.as_bytes(), value);
        let mut sync = WriteOptions::default();
        sync.set_sync(true);
        self.db.write_opt(batch, &sync).map_err(|e| self.rocks(e))
    }

    /// Number of points (RocksDB's estimate; exact after compaction). For metrics only.
    pub fn estimated_points(&self) -> u64 {
        self.cf(CF_POINTS)
            .ok()
            .and_then(|cf| {
                self.db
                    .property_int_value_cf(cf, "rocksdb.estimate-num-keys")
                    .ok()
                    .flatten()
            })
            .unwrap_or(0)
    }
}

/// What the `points` family holds for a point without sparse vectors: everything but the
/// dense vector. The format of every store written before sparse vectors existed.
#[derive(Serialize, Deserialize)]
struct PointMeta {
    version: u64,
    payload: Option<String>,
}

/// What the `points` family holds for a point with sparse vectors. Its bincode begins as
/// [`PointMeta`]'s does and goes on, so a `PointMeta` record never decodes as one (it ends
/// where the sparse list's length would be), which is how [`decode_meta`] tells them apart.
#[derive(Serialize, Deserialize)]
struct PointMetaSparse {
    version: u64,
    payload: Option<String>,
    sparse: Vec<StoredSparse>,
}

/// What the `points` family holds for a point with dense vectors beside its main one: a
/// [`PointMetaSparse`] (its sparse list perhaps empty) that goes on with them, told apart the
/// same way.
#[derive(Serialize, Deserialize)]
struct PointMetaFull {
    version: u64,
    payload: Option<String>,
    sparse: Vec<StoredSparse>,
    extra: Vec<StoredDense>,
}

/// A point's `points` record in the shortest format that holds it, so a store of dense
/// points stays byte for byte what earlier versions wrote and read.
fn encode_meta(point: &StoredPoint) -> Vec<u8> {
    match (point.sparse.is_empty(), point.extra.is_empty()) {
        (true, true) => encode(&PointMeta {
            version: point.version,
            payload: point.payload.clone(),
        }),
        (false, true) => encode(&PointMetaSparse {
            version: point.version,
            payload: point.payload.clone(),
            sparse: point.sparse.clone(),
        }),
        (_, false) => encode(&PointMetaFull {
            version: point.version,
            payload: point.payload.clone(),
            sparse: point.sparse.clone(),
            extra: point.extra.clone(),
        }),
    }
}

fn decode_meta(bytes: &[u8]) -> std::result::Result<PointMetaFull, String> {
    // Every record begins as a `PointMeta` (bincode ignores what follows). A dense point's
    // record ends there: one decode, no failed attempt (this runs for every point a restart
    // or a move reads). Only a longer record is read again, as each longer format in turn.
    let meta: PointMeta = decode(bytes)?;
    if encoded_len(&meta)? == bytes.len() as u64 {
        return Ok(PointMetaFull {
            version: meta.version,
            payload: meta.payload,
            sparse: Vec::new(),
            extra: Vec::new(),
        });
    }
    let meta: PointMetaSparse = decode(bytes)?;
    if encoded_len(&meta)? == bytes.len() as u64 {
        return Ok(PointMetaFull {
            version: meta.version,
            payload: meta.payload,
            sparse: meta.sparse,
            extra: Vec::new(),
        });
    }
    decode(bytes)
}

fn encoded_len<T: Serialize>(value: &T) -> std::result::Result<u64, String> {
    bincode::serialized_size(value).map_err(|e| e.to_string())
}

fn vector_bytes(vector: &[f32]) -> Vec<u8> {
    vector.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn vector_from_bytes(bytes: &[u8]) -> std::result::Result<Vec<f32>, String> {
    if !bytes.len().is_multiple_of(4) {
        return Err(format!("vector of {} bytes", bytes.len()));
    }
    Ok(bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    // bincode cannot fail on these plain structs (no maps with non-string keys, no `any`).
    bincode::serialize(value).unwrap_or_else(|e| unreachable!("bincode on a plain struct: {e}"))
}

fn decode<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> std::result::Result<T, String> {
    bincode::deserialize(bytes).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests;
