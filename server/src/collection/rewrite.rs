//! Writes that read a point's stored value first: payload updates and vector deletions
//! (Qdrant's set, overwrite, delete and clear payload, delete vectors), vector updates, and
//! upserts with `update_filter`. Each reads the points it changes and writes them back so
//! that no other write of the same point comes in between and is lost:
//!
//! - **one partition in this process**: read and written under the partition's write lock;
//! - **one replicated partition**, which every node of the cluster writes through its group:
//!   the values and their versions are read at a linearizable read index, the new points are
//!   written with a compare-and-set on those versions ([`PartitionHandle::upsert_if`]), and
//!   when another write came in between they are read and made again;
//! - **several partitions**: read and written under the collection's write lock on its
//!   writer (the module docs of `collection`), to which a cluster's other nodes forward the
//!   write, the new values placed as an upsert's are (a new vector may move its point).
//!
//! A filter is judged on the value read, so a point that stopped matching meanwhile is left
//! alone; `match.text` reads a key as the collection's payload indexes say (every partition
//! has the same schema).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use cairn_api::internal::{CollectionWrite, NewPoint};
use cairn_api::{Filter, PayloadSchemaType, PointId, ReadConsistency};

use super::handle::PartitionHandle;
use super::host::MetaStore;
use super::{Collection, PartitionId, WriteTicket, Writer, DELETE_BATCH};
use crate::error::{Result, ServerError};
use crate::partition::Partition;
use crate::request::filter::point_matches;
use crate::request::payload::{PointChange, Selection};
use crate::request::points::merge_vectors;

/// How many times a compare-and-set reads and tries again after other writes of the same
/// points came in between, before the write gives up with a 503 the client may retry. Each
/// round is a read index and a log write, so contention that outlasts this many is a hot spot
/// better reported than spun on.
const CAS_ATTEMPTS: usize = 16;

/// Where a rewrite reads and writes (see the module docs).
enum Layout<'a> {
    Local(&'a Partition),
    Replicated(&'a Arc<dyn PartitionHandle>),
    Partitioned,
}

/// Filters judged on points read for a rewrite, outside any partition.
struct Judge {
    /// Keys with a full-text index.
    text: HashSet<String>,
    /// The main vector's name.
    main: String,
}

impl Judge {
    fn matches(&self, point: &NewPoint, filter: &Filter) -> bool {
        point_matches(filter, point, &self.main, &|key| self.text.contains(key))
    }
}

impl Collection {
    fn layout(&self) -> Layout<'_> {
        match self.partitions.as_slice() {
            [only] => match (&self.meta, only.local()) {
                (MetaStore::Shared(_), _) | (_, None) => Layout::Replicated(only),
                (_, Some(local)) => Layout::Local(local),
            },
            _ => Layout::Partitioned,
        }
    }

    /// The judge of filters for this collection's rewrites (its text-indexed keys asked of
    /// the first partition, which may be on another node).
    fn judge(&self) -> Result<Judge> {
        let text = match self.partitions.first() {
            Some(first) => first
                .payload_indexes()?
                .into_iter()
                .filter(|(_, info)| info.data_type == PayloadSchemaType::Text)
                .map(|(key, _)| key)
                .collect(),
            None => HashSet::new(),
        };
        Ok(Judge {
            text,
            main: self.settings.vector_name().to_owned(),
        })
    }

    /// Changes the selected points' payloads or removes some of their vectors (blocking); a
    /// filter is matched again on each point as read.
    pub fn update_points(
        &self,
        selection: &Selection,
        change: &PointChange,
    ) -> Result<WriteTicket> {
        let filter = match selection {
            Selection::Ids(_) => None,
            Selection::Filter(f) => Some(f),
        };
        let ids = || match selection {
            Selection::Ids(ids) => Ok(ids.clone()),
            Selection::Filter(f) => self.matching_ids(Some(f), &ReadConsistency::Linearizable),
        };
        match self.layout() {
            Layout::Local(only) => {
                let mut last = None;
                for chunk in ids()?.chunks(DELETE_BATCH) {
                    last = only.update_points(chunk, filter, change)?.or(last);
                }
                Ok(self.single_or_none(last))
            }
            Layout::Replicated(only) => {
                // Asked of a partition that may be on another node: only when a filter needs it.
                let judge = filter.map(|_| self.judge()).transpose()?;
                let mut last = None;
                for chunk in ids()?.chunks(DELETE_BATCH) {
                    let seq = self.compare_and_set(only, chunk, |_, stored| {
                        Ok(stored.and_then(|mut point| {
                            let passes = filter
                                .zip(judge.as_ref())
                                .is_none_or(|(f, judge)| judge.matches(&point, f));
                            (passes && change.apply(&mut point)).then_some(point)
                        }))
                    })?;
                    last = seq.or(last);
                }
                Ok(self.single_or_none(last))
            }
            Layout::Partitioned => match self.lead()? {
                Some(mut writer) => self.update_locked(&mut writer, selection, change),
                None => self.forward(&CollectionWrite::Update {
                    selection: selection.clone(),
                    change: change.clone(),
                }),
            },
        }
    }

    /// Gives existing points new vectors (checked), keeping their payloads and the vectors
    /// not given (blocking); an id the collection lacks is a 404 and nothing is written. With
    /// `only_where`, only the stored points that pass it change.
    pub fn update_vectors(
        &self,
        points: Vec<NewPoint>,
        only_where: Option<&Filter>,
    ) -> Result<WriteTicket> {
        match self.layout() {
            Layout::Local(only) => {
                Ok(self.single_or_none(only.update_vectors(points, only_where)?))
            }
            Layout::Replicated(only) => {
                let judge = only_where.map(|_| self.judge()).transpose()?;
                let ids: Vec<PointId> = points.iter().map(|p| p.id).collect();
                let given: HashMap<PointId, NewPoint> =
                    points.into_iter().map(|p| (p.id, p)).collect();
                let seq = self.compare_and_set(only, &ids, |id, stored| {
                    let old = stored.ok_or(ServerError::PointNotFound(id))?;
                    revectored(old, given.get(&id).cloned(), only_where, judge.as_ref())
                })?;
                Ok(self.single_or_none(seq))
            }
            Layout::Partitioned => match self.lead()? {
                Some(mut writer) => self.update_vectors_locked(&mut writer, points, only_where),
                None => self.forward(&CollectionWrite::UpdateVectors {
                    points,
                    only_where: only_where.cloned(),
                }),
            },
        }
    }

    /// Upserts `points` as Qdrant's `update_filter` does (blocking): a stored point is
    /// replaced only if it passes `filter`, a new one is inserted.
    pub fn upsert_where(&self, points: Vec<NewPoint>, filter: &Filter) -> Result<WriteTicket> {
        match self.layout() {
            Layout::Local(only) => Ok(self.single_or_none(only.upsert_where(points, filter)?)),
            Layout::Replicated(only) => {
                let judge = self.judge()?;
                let ids: Vec<PointId> = points.iter().map(|p| p.id).collect();
                let given: HashMap<PointId, NewPoint> =
                    points.into_iter().map(|p| (p.id, p)).collect();
                let seq = self.compare_and_set(only, &ids, |id, stored| {
                    let replaceable = stored.is_none_or(|old| judge.matches(&old, filter));
                    Ok(replaceable.then(|| given.get(&id).cloned()).flatten())
                })?;
                Ok(self.single_or_none(seq))
            }
            Layout::Partitioned => match self.lead()? {
                Some(mut writer) => self.upsert_where_locked(&mut writer, points, filter),
                None => self.forward(&CollectionWrite::UpsertWhere {
                    points,
                    filter: filter.clone(),
                }),
            },
        }
    }

    /// A write's ticket for one partition's last sequence number (`None`: nothing written).
    fn single_or_none(&self, seq: Option<u64>) -> WriteTicket {
        match seq {
            Some(seq) => WriteTicket::single(seq),
            None => self.ticket(Vec::new()),
        }
    }

    /// Rewrites those of `ids` that `change` rewrites in one replicated partition (module
    /// docs): `change` gets each id and its stored value (`None`: absent) and answers the point
    /// to write, if any. Returns the write's sequence number, `None` when nothing changed.
    fn compare_and_set(
        &self,
        only: &Arc<dyn PartitionHandle>,
        ids: &[PointId],
        mut change: impl FnMut(PointId, Option<NewPoint>) -> Result<Option<NewPoint>>,
    ) -> Result<Option<u64>> {
        for _ in 0..CAS_ATTEMPTS {
            let floor = only.read_index()?;
            let stored = only.clone().at_least(floor)?.stored_versions(ids)?;
            let mut expect = Vec::new();
            let mut points = Vec::new();
            for (id, entry) in ids.iter().zip(stored) {
                let (version, old) = match entry {
                    Some((version, point)) => (version, Some(point)),
                    None => (0, None),
                };
                if let Some(point) = change(*id, old)? {
                    expect.push((*id, version));
                    points.push(point);
                }
            }
            if points.is_empty() {
                return Ok(None);
            }
            if let Some(seq) = only.upsert_if(points, expect)? {
                return Ok(Some(seq));
            }
            tracing::debug!(
                collection = self.name,
                "a rewrite met another write of the same points; reading again"
            );
        }
        Err(ServerError::Unavailable(format!(
            "collection `{}`: other writes of the same points kept coming in between this \
             write's read and its write ({CAS_ATTEMPTS} attempts); retry",
            self.name
        )))
    }

    /// [`Self::update_points`] on the writer of a partitioned collection (here, or forwarded
    /// from another node): the selection is read from copies holding every acknowledged
    /// write, the changed points placed as an upsert's, a chunk at a time. Callers hold the
    /// write lock.
    pub(super) fn update_locked(
        &self,
        writer: &mut Writer,
        selection: &Selection,
        change: &PointChange,
    ) -> Result<WriteTicket> {
        let (ids, filter) = match selection {
            Selection::Ids(ids) => (ids.clone(), None),
            Selection::Filter(f) => {
                let mut ids = std::collections::BTreeSet::new();
                for q in 0..self.partitions.len() {
                    ids.extend(self.committed(writer, q)?.matching_ids(Some(f))?);
                }
                (ids.into_iter().collect::<Vec<_>>(), Some(f))
            }
        };
        let judge = filter.map(|_| self.judge()).transpose()?;
        let routing = self.routing();
        let mut waits: BTreeMap<PartitionId, u64> = BTreeMap::new();
        for chunk in ids.chunks(DELETE_BATCH) {
            let stored = self.stored_locked(writer, chunk)?;
            let changed: Vec<NewPoint> = chunk
                .iter()
                .filter_map(|id| stored.get(id).cloned())
                .filter_map(|mut point| {
                    let passes = filter
                        .zip(judge.as_ref())
                        .is_none_or(|(f, judge)| judge.matches(&point, f));
                    (passes && change.apply(&mut point)).then_some(point)
                })
                .collect();
            if !changed.is_empty() {
                // A later write of a partition covers its earlier ones: keep the last position.
                waits.extend(self.place_locked(writer, &routing, changed)?.waits);
            }
        }
        Ok(self.ticket(waits.into_iter().collect()))
    }

    /// [`Self::update_vectors`] on the writer of a partitioned collection.
    pub(super) fn update_vectors_locked(
        &self,
        writer: &mut Writer,
        points: Vec<NewPoint>,
        only_where: Option<&Filter>,
    ) -> Result<WriteTicket> {
        let judge = only_where.map(|_| self.judge()).transpose()?;
        let ids: Vec<PointId> = points.iter().map(|p| p.id).collect();
        let mut stored = self.stored_locked(writer, &ids)?;
        let mut rewritten = Vec::with_capacity(points.len());
        for point in points {
            let old = stored
                .remove(&point.id)
                .ok_or(ServerError::PointNotFound(point.id))?;
            rewritten.extend(revectored(old, Some(point), only_where, judge.as_ref())?);
        }
        let routing = self.routing();
        self.place_locked(writer, &routing, rewritten)
    }

    /// [`Self::upsert_where`] on the writer of a partitioned collection.
    pub(super) fn upsert_where_locked(
        &self,
        writer: &mut Writer,
        points: Vec<NewPoint>,
        filter: &Filter,
    ) -> Result<WriteTicket> {
        let judge = self.judge()?;
        let ids: Vec<PointId> = points.iter().map(|p| p.id).collect();
        let stored = self.stored_locked(writer, &ids)?;
        let kept: Vec<NewPoint> = points
            .into_iter()
            .filter(|p| {
                stored
                    .get(&p.id)
                    .is_none_or(|old| judge.matches(old, filter))
            })
            .collect();
        let routing = self.routing();
        self.place_locked(writer, &routing, kept)
    }
}

/// `old` with the vectors of `new` (payload and the vectors not given kept), unless
/// `only_where` is given and `old` does not pass it.
fn revectored(
    mut old: NewPoint,
    new: Option<NewPoint>,
    only_where: Option<&Filter>,
    judge: Option<&Judge>,
) -> Result<Option<NewPoint>> {
    if let Some((f, judge)) = only_where.zip(judge) {
        if !judge.matches(&old, f) {
            return Ok(None);
        }
    }
    let new = new.ok_or_else(|| ServerError::Internal("a vector update lost its point".into()))?;
    merge_vectors(&mut old, new);
    Ok(Some(old))
}
