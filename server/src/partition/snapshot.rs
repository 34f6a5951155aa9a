//! Index snapshot files: the index bytes plus the slot table (ids and versions; payloads stay
//! in RocksDB), in one checksummed file written atomically by `cairn_index::persist`.
//!
//! Payload layout: `bytes(index)`, `u64 slot count`, then per slot `u8 live` and, when live,
//! `bytes(encoded id)` and `u64 version`. A collection with dense vectors beside the main one
//! goes on, for each in its `extra_vectors` order, with `bytes(name)`, `bytes(index)` and the
//! main slot owning each of that index's slots (`u32s`, `u32::MAX` for none); without such
//! vectors the file ends after the table, as it always has.

use cairn_index::persist::codec::{Decoder, Encoder};
use cairn_index::persist::{self, FileHeader};
use cairn_index::IndexError;

use super::live::{LiveIndex, PointTable, SlotEntry, NO_SLOT};
use super::{keys, paths, Shared};
use crate::error::{Result, ServerError};
use crate::request::CollectionSettings;

/// Writes the current index as of `applied_seq`, then trims the op log behind it.
///
/// The file is streamed as it is encoded, so a snapshot costs no memory beyond a write
/// buffer. Locks are held for the whole write, but only the applier (this thread) changes
/// the index and the table, and searches only read them.
pub(super) fn write(shared: &Shared, applied_seq: u64) -> Result<()> {
    let started = std::time::Instant::now();
    let live = shared.live();
    let table = live.table.read();
    let header = FileHeader {
        kind: live.index.kind(),
        metric: live.index.metric(),
        dim: shared.settings.dim as u64,
        count: live.index.len() as u64,
        applied_seq,
    };
    let path = paths::snapshot(&shared.dir);
    persist::write_file_with(&path, &header, |out| {
        let mut e = Encoder::new(out);
        e.nested(|out| live.index.write_to(out));
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
        let owners = table.extra_owners();
        for (position, (name, index)) in live.extras.iter().enumerate() {
            e.bytes(name.as_bytes());
            e.nested(|out| index.write_to(out));
            let own = owners.get(position).map_or(&[][..], Vec::as_slice);
            // Every slot of the index, those never published included.
            let slots = index.len();
            e.u32s((0..slots).map(|s| own.get(s).copied().unwrap_or(NO_SLOT)));
        }
    })?;
    drop(table);
    let keep_from = applied_seq.saturating_sub(shared.storage.oplog_retention_ops);
    if keep_from > 0 {
        shared.store.trim_oplog_below(keep_from)?;
    }
    let bytes = std::fs::metadata(&path).map_or(0, |m| m.len());
    tracing::debug!(collection = %shared.name, applied_seq, bytes, ms = started.elapsed().as_millis() as u64, "snapshot written");
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
    settings: &CollectionSettings,
    trainers: &cairn_index::Trainers,
) -> Result<Option<Loaded>> {
    let dim = settings.dim;
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
    let main = settings.main_space();
    let index = cairn_index::read_index(header.kind, d.bytes()?, trainers, &main.placement(dir))?;
    // Row codes are derived from the rows and not in the file: they train again here.
    index.set_codes(settings.codes)?;
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
                extra: vec![NO_SLOT; settings.extra_vectors.len()],
            },
        );
    }
    let mut extras = Vec::with_capacity(settings.extra_vectors.len());
    for space in settings.dense_spaces().skip(1) {
        let name = d.bytes()?;
        if name != space.name.as_bytes() {
            return Err(corrupt(
                &path,
                format!("holds another vector where `{}` belongs", space.name),
            ));
        }
        let extra = cairn_index::read_index(
            space.index.kind(),
            d.bytes()?,
            trainers,
            &space.placement(dir),
        )?;
        extra.set_codes(space.codes)?;
        if extra.dim() != space.dim {
            return Err(corrupt(
                &path,
                format!("vector `{}` has dimension {}", space.name, extra.dim()),
            ));
        }
        let owners = d.u32s_map(|owner| owner)?;
        if owners.len() != extra.len() {
            return Err(corrupt(
                &path,
                format!(
                    "{} owners for {} slots of `{}`",
                    owners.len(),
                    extra.len(),
                    space.name
                ),
            ));
        }
        let position = extras.len();
        for (slot, owner) in owners.into_iter().enumerate() {
            if owner != NO_SLOT {
                table.attach_extra(position, slot as u32, owner);
            }
        }
        extras.push((space.name.to_owned(), extra));
    }
    d.finish()?;
    Ok(Some(Loaded {
        live: LiveIndex {
            index,
            extras,
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
