//! Start-up: load the snapshot if it is sound, replay the op log after it, repair anything the
//! op log no longer covers — or rebuild from RocksDB when there is no usable snapshot.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use cairn_api::internal::NewPoint;
use cairn_api::{Payload, PointId, SparseVector};
use cairn_index::Trainers;
use cairn_storage::PartitionStore;

use super::keys::{self, parse_payload};
use super::live::{BuildPoint, LiveIndex, SlotEntry};
use super::payload_index::PayloadSchema;
use super::{snapshot, LoadReport};
use crate::error::{Result, ServerError};
use crate::request::CollectionSettings;

/// A stored point's version, payload, sparse vectors and dense vectors beside the main one
/// (all but its main vector).
struct StoredMeta {
    version: u64,
    payload: Option<Payload>,
    sparse: BTreeMap<String, SparseVector>,
    extra: BTreeMap<String, Vec<f32>>,
}

pub(super) struct Recovered {
    pub(super) live: LiveIndex,
    pub(super) snapshot_seq: u64,
    pub(super) report: LoadReport,
}

pub(super) fn load(
    settings: &CollectionSettings,
    trainers: &Trainers,
    store: &PartitionStore,
    dir: &std::path::Path,
) -> Result<Recovered> {
    let started = Instant::now();
    let last_seq = store.last_seq()?;
    let snapshot = match snapshot::read(dir, settings, trainers) {
        Ok(Some(s)) if s.applied_seq <= last_seq => Some(s),
        Ok(Some(s)) => {
            tracing::warn!(
                snapshot_seq = s.applied_seq,
                last_seq,
                "snapshot is ahead of the store; rebuilding"
            );
            None
        }
        Ok(None) => None,
        Err(e) => {
            tracing::warn!(error = %e, "index snapshot unusable; rebuilding from the store");
            None
        }
    };
    let mut recovered = match snapshot {
        Some(s) => from_snapshot(store, s)?,
        None => rebuild(settings, trainers, store, dir, last_seq)?,
    };
    recovered.report.points = recovered.live.table.read().live() as u64;
    recovered.report.load_ms = started.elapsed().as_millis() as u64;
    Ok(recovered)
}

/// Snapshot path: attach payloads, replay the op log, repair version mismatches.
fn from_snapshot(store: &PartitionStore, loaded: snapshot::Loaded) -> Result<Recovered> {
    let live = loaded.live;
    let mut report = LoadReport {
        index_source: "snapshot".into(),
        snapshot_seq: loaded.applied_seq,
        ..Default::default()
    };

    // 1. Ids the op log says changed after the snapshot.
    let mut touched = BTreeSet::new();
    for entry in store.oplog_after(loaded.applied_seq)? {
        let (_, entry) = entry?;
        report.replayed_ops += 1;
        touched.extend(entry.keys.iter().filter_map(|k| keys::decode(k)));
    }
    // 2. Current versions and payloads, streamed from the store: a point that agrees with
    // the snapshot gets its payload at once, and only those to re-read are kept. Collecting
    // every stored point first would cost a map entry per point at every start, heap the
    // allocator keeps long after.
    let mut table = live.table.write();
    let mut seen = vec![false; table.slots.len()];
    let mut stale: Vec<(PointId, StoredMeta)> = Vec::new();
    let mut repaired = 0;
    for item in store.scan_meta()? {
        let record = item?;
        let id = keys::decode(&record.key)
            .ok_or_else(|| ServerError::Internal("undecodable point key".into()))?;
        let slot = table.by_id.get(&id).copied();
        if let Some(slot) = slot {
            seen[slot as usize] = true;
            if table
                .entry(slot)
                .is_some_and(|e| e.version == record.version)
                && !touched.contains(&id)
            {
                // The snapshot's indexes hold its other vectors already: they are not read.
                table.attach(
                    slot,
                    parse_payload(record.payload)?,
                    keys::sparse_from_stored(record.sparse),
                );
                continue;
            }
        }
        repaired += u64::from(!touched.contains(&id));
        stale.push((
            id,
            StoredMeta {
                version: record.version,
                payload: parse_payload(record.payload)?,
                sparse: keys::sparse_from_stored(record.sparse),
                extra: keys::extra_from_stored(record.extra),
            },
        ));
    }
    // Points in the snapshot the store no longer has.
    let gone: Vec<PointId> = table
        .by_id
        .iter()
        .filter(|&(_, &slot)| !seen[slot as usize])
        .map(|(id, _)| *id)
        .collect();
    repaired += gone.iter().filter(|id| !touched.contains(id)).count() as u64;
    for id in &gone {
        table.remove(id);
    }
    drop(table);
    // 3. Re-insert stale points with their stored vectors, grouped by version.
    let mut by_version: BTreeMap<u64, Vec<NewPoint>> = BTreeMap::new();
    for (id, meta) in stale {
        let vector = store
            .get_vector(&keys::encode(&id))?
            .ok_or_else(|| ServerError::Internal(format!("point {id} has no stored vector")))?;
        by_version.entry(meta.version).or_default().push(NewPoint {
            id,
            vector,
            payload: meta.payload,
            sparse: meta.sparse,
            extra: meta.extra,
        });
    }
    for (version, points) in by_version {
        live.publish(version, points);
    }
    if repaired > 0 {
        tracing::warn!(
            repaired,
            "points disagreed with the snapshot beyond the op log; repaired from the store"
        );
    }
    report.repaired_points = repaired;
    Ok(Recovered {
        live,
        snapshot_seq: loaded.applied_seq,
        report,
    })
}

/// No snapshot: build the index from every stored point.
fn rebuild(
    settings: &CollectionSettings,
    trainers: &Trainers,
    store: &PartitionStore,
    dir: &std::path::Path,
    last_seq: u64,
) -> Result<Recovered> {
    let points = store.scan_points()?.map(|item| {
        let (key, point) = item?;
        let id = keys::decode(&key)
            .ok_or_else(|| ServerError::Internal("undecodable point key".into()))?;
        if point.vector.len() != settings.dim {
            return Err(ServerError::Internal(format!(
                "stored point {id} has dimension {}",
                point.vector.len()
            )));
        }
        let extra = if settings.extra_vectors.is_empty() {
            BTreeMap::new()
        } else {
            keys::extra_from_stored(point.extra)
        };
        Ok(BuildPoint {
            entry: SlotEntry {
                id,
                version: point.version,
                payload: parse_payload(point.payload)?,
                sparse: keys::sparse_from_stored(point.sparse),
                extra: Vec::new(),
            },
            vector: point.vector,
            extra,
        })
    });
    // Payload indexes are built by the caller, which holds the schema, once the table is up.
    let live = LiveIndex::build(settings, &PayloadSchema::new(), trainers, dir, points)?;
    let source = if live.index.is_empty() && last_seq == 0 {
        "new"
    } else {
        "rebuilt"
    };
    // Everything up to `last_seq` is in the index now; the applier snapshots it soon.
    let report = LoadReport {
        index_source: source.into(),
        ..Default::default()
    };
    Ok(Recovered {
        live,
        snapshot_seq: if source == "new" { last_seq } else { 0 },
        report,
    })
}
