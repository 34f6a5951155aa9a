//! Index snapshot files: the index bytes plus the slot table (ids and versions; payloads stay
//! in RocksDB), in one checksummed file written atomically by `cairn_index::persist`.
//!
//! Payload layout: `bytes(index)`, `u64 slot count`, then per slot `u8 live` and, when live,
//! `bytes(encoded id)` and `u64 version`.

use cairn_index::persist::codec::{Decoder, Encoder};
use cairn_index::persist::{self, FileHeader};
use cairn_index::IndexError;

use super::live::{LiveIndex, PointTable, SlotEntry};
use super::{keys, paths, Shared};
use crate::error::{Result, ServerError};

/// Writes the current index as of `applied_seq`, then trims the op log behind it.
pub(super) fn write(shared: &Shared, applied_seq: u64) -> Result<()> {
    let started = std::time::Instant::now();
    let live = shared.live();
    let table = live.table.read();
    let mut index_bytes = Vec::new();
    live.index.write_to(&mut index_bytes);
    let mut payload = Vec::with_capacity(index_bytes.len() + table.slots.len() * 20);
    let mut e = Encoder::new(&mut payload);
    e.bytes(&index_bytes);
    e.u64(table.slots.len() as u64);
    for slot in &table.slots {
        match slot {
            None => e.u8(0),
            Some(entry) => {
                e.u8(1);
                e.bytes(&keys::encode(&entry.id));
                e.u64(entry.version);
            }
        }
    }
    let header = FileHeader {
        kind: live.index.kind(),
        metric: live.index.metric(),
        dim: shared.settings.dim as u64,
        count: live.index.len() as u64,
        applied_seq,
    };
    drop(table);
    persist::write_file(&paths::snapshot(&shared.dir), &header, &payload)?;
    let keep_from = applied_seq.saturating_sub(shared.storage.oplog_retention_ops);
    if keep_from > 0 {
        shared.store.trim_oplog_below(keep_from)?;
    }
    tracing::debug!(collection = %shared.name, applied_seq, bytes = payload.len(), ms = started.elapsed().as_millis() as u64, "snapshot written");
    Ok(())
}

/// A snapshot as read back: index and table (payloads not yet attached).
pub(super) struct Loaded {
    pub(super) live: LiveIndex,
    pub(super) applied_seq: u64,
}

/// Reads and verifies the snapshot in `dir`, if there is one.
pub(super) fn read(
    dir: &std::path::Path,
    dim: usize,
    trainers: &cairn_index::Trainers,
) -> Result<Option<Loaded>> {
    let path = paths::snapshot(dir);
    if !path.is_file() {
        return Ok(None);
    }
    let (header, bytes) = persist::read_file(&path)?;
    if header.dim != dim as u64 {
        return Err(corrupt(
            &path,
            format!("dimension {} but the collection has {dim}", header.dim),
        ));
    }
    let mut d = Decoder::new(&bytes);
    let index = cairn_index::read_index(header.kind, d.bytes()?, trainers)?;
    let slots = d.usize()?;
    if slots != index.len() {
        return Err(corrupt(
            &path,
            format!("{slots} table slots for {} index slots", index.len()),
        ));
    }
    let mut table = PointTable::default();
    table.slots.reserve(slots);
    for slot in 0..slots {
        if d.u8()? == 0 {
            table.slots.push(None);
            table.dead += 1;
            continue;
        }
        let id = keys::decode(d.bytes()?)
            .ok_or_else(|| corrupt(&path, format!("bad id at slot {slot}")))?;
        let version = d.u64()?;
        table.publish(
            slot as u32,
            SlotEntry {
                id,
                version,
                // Both come from the store once the table is up (`recovery`).
                payload: None,
                sparse: Default::default(),
            },
        );
    }
    d.finish()?;
    Ok(Some(Loaded {
        live: LiveIndex {
            index,
            table: table.into(),
        },
        applied_seq: header.applied_seq,
    }))
}

fn corrupt(path: &std::path::Path, comment: String) -> ServerError {
    ServerError::Index(IndexError::Corrupt {
        path: path.to_path_buf(),
        comment,
    })
}
