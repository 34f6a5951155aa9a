//! A partition's read path: k-NN searches (graph, filtered graph, or exact scan), scroll,
//! count, get — each on a validated plan.

use std::ops::{Bound, ControlFlow};

use cairn_api::internal::{OrderPlan, PayloadSelection, QueryTarget, ScrollPlan, SearchPlan};
use cairn_api::{
    Filter, PayloadSchemaType, PointId, QueryExplain, QueryResponse, Record, ScoredPoint,
    SparseVector, VectorOutput,
};
use cairn_index::{IndexKind, SearchParams, SearchStats, Slot, VectorIndex};

use super::live::{LiveIndex, PointTable, SlotEntry, NO_SLOT};
use super::Partition;
use crate::error::{Result, ServerError};
use crate::request::filter::matches;
use crate::request::CollectionSettings;

/// Points a walk over the id table (scroll, count, the matches of a delete by filter) visits
/// per hold of the table's read lock. The applier needs the write lock to publish a write, so
/// a pass over a large partition lets writes in every few milliseconds instead of holding them
/// up for the whole pass.
const WALK_CHUNK: usize = 4096;
/// Slots sampled to estimate how many points a filter passes.
const SELECTIVITY_SAMPLE: usize = 512;
/// A filtered graph search widens `ef` by 1/selectivity, up to this factor.
const MAX_FILTER_EF_BOOST: f64 = 8.0;

fn passes(
    settings: &CollectionSettings,
    table: &PointTable,
    filter: Option<&Filter>,
    slot: Slot,
) -> bool {
    match filter {
        None => table.is_live(slot),
        Some(f) => table.entry(slot).is_some_and(|e| {
            matches(
                f,
                &e.id,
                e.payload.as_ref(),
                &|key| table.payload_index.is_text(key),
                &|name| holds_vector(settings, e, name),
            )
        }),
    }
}

/// Whether the point of `entry` holds the vector `name` (`has_vector`): the main one always,
/// another dense one where it has a slot in its index, a sparse one where it was given.
fn holds_vector(settings: &CollectionSettings, entry: &SlotEntry, name: &str) -> bool {
    match settings.dense_space(name) {
        Some(space) => space
            .extra
            .is_none_or(|i| entry.extra.get(i).is_some_and(|&s| s != NO_SLOT)),
        None => entry.sparse.contains_key(name),
    }
}

/// Slots the payload indexes (and `has_id`) leave as candidates for `filter`, sorted; `None`
/// when no index narrows it.
fn candidates(table: &PointTable, filter: &Filter) -> Option<Vec<Slot>> {
    table
        .payload_index
        .candidates(filter, &|id| table.by_id.get(id).copied())
}

/// The live slots of `ids`, sorted.
fn slots_of(table: &PointTable, ids: &[PointId]) -> Vec<Slot> {
    let mut slots: Vec<Slot> = ids
        .iter()
        .filter_map(|id| table.by_id.get(id).copied())
        .collect();
    slots.sort_unstable();
    slots
}

/// Estimated share of slots a filter passes, from an even sample of the slot table.
fn selectivity(settings: &CollectionSettings, table: &PointTable, filter: &Filter) -> f64 {
    let n = table.slots.len();
    if n == 0 {
        return 0.0;
    }
    let step = n.div_ceil(SELECTIVITY_SAMPLE).max(1);
    let (mut seen, mut hit) = (0usize, 0usize);
    for slot in (0..n).step_by(step) {
        seen += 1;
        hit += usize::from(passes(settings, table, Some(filter), slot as Slot));
    }
    hit as f64 / seen as f64
}

/// Vector elements a query may touch and still count as short: about 1 M, which is 300 to
/// 500 µs of distance work on the 2-core machines the benchmarks run on. Short queries may run
/// on the async worker that parsed them; anything larger goes to the search threads (see
/// `http::searchers`), so that a worker never blocks its other connections for much longer
/// than quickwit's "at most 500 µs" rule.
const SHORT_QUERY_WORK: usize = 1 << 20;

/// Whether a query with this work estimate may run on an async worker (see
/// [`estimated_work`]).
fn is_short_work(
    index: &cairn_index::IndexParams,
    dim: usize,
    points: usize,
    plan: &SearchPlan,
) -> bool {
    estimated_work(index, dim, points, plan).is_some_and(|work| work <= SHORT_QUERY_WORK)
}

/// Vector elements `plan` will touch: `max(ef, k)` expansions × `2M` neighbours × `dim` for
/// an unfiltered graph search, `points × dim` for an exact scan. `None` for filtered queries,
/// whose cost depends on the filter's selectivity, known only once sampled, and for sparse
/// ones, whose cost is the length of their dimensions' posting lists.
fn estimated_work(
    index: &cairn_index::IndexParams,
    dim: usize,
    points: usize,
    plan: &SearchPlan,
) -> Option<usize> {
    if plan.filter.is_some() || matches!(plan.target, QueryTarget::Sparse { .. }) {
        return None;
    }
    let k = plan.offset + plan.limit;
    // `mips_auto` may serve by the norm scan (a share of the points) until it outgrows it:
    // counted as the whole scan, which its default reads a quarter of.
    let scanning = matches!(index, cairn_index::IndexParams::MipsAuto(_))
        && points <= cairn_index::mips_auto::scan_rows(dim);
    Some(match (index.default_ef(points), index.max_degree()) {
        _ if scanning => points * dim,
        (Some(ef), Some(degree)) if !plan.exact => plan.ef.unwrap_or(ef).max(k) * degree * dim,
        _ => points * dim,
    })
}

/// A value of a numeric index as a scroll returns it: an integer index's as an integer.
fn order_value(value: f64, integer: bool) -> Option<serde_json::Number> {
    if integer && value.fract() == 0.0 && value.abs() < 9.0e15 {
        return Some(serde_json::Number::from(value as i64));
    }
    serde_json::Number::from_f64(value)
}

/// The dense index a query searches (the main one, or the index of a vector beside it), and
/// how its slots map to the main index's, which the table, filters and results speak.
#[derive(Clone, Copy)]
struct Searched<'a> {
    index: &'a dyn VectorIndex,
    /// `None`: the main index; `Some(i)`: the index of extra vector `i`.
    extra: Option<usize>,
}

impl<'a> Searched<'a> {
    /// The index `plan.using` names in `live` (checked against the settings when planned).
    fn of(live: &'a LiveIndex, settings: &CollectionSettings, plan: &SearchPlan) -> Result<Self> {
        let Some(name) = plan.using.as_deref() else {
            return Ok(Self {
                index: &*live.index,
                extra: None,
            });
        };
        let space = settings.space(name, "using")?;
        Ok(match space.extra {
            None => Self {
                index: &*live.index,
                extra: None,
            },
            Some(i) => Self {
                index: &*live
                    .extras
                    .get(i)
                    .ok_or_else(|| ServerError::Internal(format!("no index for vector `{name}`")))?
                    .1,
                extra: Some(i),
            },
        })
    }

    /// The live main slot holding `slot` of this index.
    #[inline]
    fn main_slot(self, table: &PointTable, slot: Slot) -> Option<Slot> {
        match self.extra {
            None => Some(slot),
            Some(i) => table.owner(i, slot),
        }
    }

    /// This index's slot of the point at main slot `main`, if it holds one.
    fn own_slot(self, table: &PointTable, main: Slot) -> Option<Slot> {
        match self.extra {
            None => Some(main),
            Some(i) => table
                .entry(main)
                .and_then(|e| e.extra.get(i).copied())
                .filter(|&s| s != NO_SLOT),
        }
    }

    /// Main slots (sorted) as this index's slots, sorted.
    fn own_slots(self, table: &PointTable, main: Vec<Slot>) -> Vec<Slot> {
        if self.extra.is_none() {
            return main;
        }
        let mut own: Vec<Slot> = main
            .into_iter()
            .filter_map(|m| self.own_slot(table, m))
            .collect();
        own.sort_unstable();
        own
    }
}

impl Partition {
    /// The values of `key`'s payload index, each with the live points holding it that pass
    /// `filter` (blocking: one hold of the table's read lock).
    pub fn facet_blocking(
        &self,
        key: &str,
        filter: Option<&Filter>,
    ) -> Result<Vec<(serde_json::Value, Vec<PointId>)>> {
        let live = self.shared.live();
        let table = live.table.read();
        let values = table
            .payload_index
            .facet(key, |slot| passes(self.settings(), &table, filter, slot))
            .ok_or_else(|| {
                ServerError::InvalidRequest(format!(
                    "key: `{key}` has no keyword, integer, bool or uuid payload index; facets \
                     count an index's values (PUT /collections/{{c}}/index makes one)"
                ))
            })?;
        Ok(values
            .into_iter()
            .map(|(value, slots)| {
                let ids = slots
                    .into_iter()
                    .filter_map(|s| table.entry(s).map(|e| e.id))
                    .collect();
                (value, ids)
            })
            .collect())
    }

    /// Whether `plan` is cheap enough to run on an async worker (see [`estimated_work`]).
    pub fn is_short(&self, plan: &SearchPlan) -> bool {
        let settings = self.settings();
        match settings.dense_space(plan.using.as_deref().unwrap_or(settings.vector_name())) {
            Some(space) => is_short_work(space.index, space.dim, self.points(), plan),
            None => false,
        }
    }

    /// Runs a k-NN query (blocking: call from a blocking thread).
    pub fn query_blocking(&self, plan: &SearchPlan) -> Result<QueryResponse> {
        let live = self.shared.live();
        let table = live.table.read();
        let searched = Searched::of(&live, self.settings(), plan)?;
        let vector = match &plan.target {
            QueryTarget::Vector(v) => v.clone(),
            QueryTarget::Point(id) => {
                let (slot, _) = table.get(id).ok_or(ServerError::PointNotFound(*id))?;
                let own = searched.own_slot(&table, slot).ok_or_else(|| {
                    ServerError::InvalidRequest(format!(
                        "point {id} has no vector `{}` to search near",
                        plan.using.as_deref().unwrap_or_default()
                    ))
                })?;
                searched
                    .index
                    .vector(own)
                    .ok_or(ServerError::PointNotFound(*id))?
            }
            QueryTarget::Sparse { name, vector } => {
                return Ok(self.sparse_query(&live, &table, name, vector, plan));
            }
        };
        let k = plan.offset + plan.limit;
        let filter = plan.filter.as_ref();
        let accept = |slot: Slot| {
            searched
                .main_slot(&table, slot)
                .is_some_and(|main| passes(self.settings(), &table, filter, main))
        };
        let index = searched.index;
        let mut exact = plan.exact || index.kind() == IndexKind::Flat;
        let mut ef = plan.ef;
        let mut filter_selectivity = None;
        // A re-scoring's points are its candidates (scored exactly: the plan says `exact`),
        // otherwise the payload indexes' for the filter, listed only when they may be few
        // enough to scan (or the plan scans anyway); a larger bound is the selectivity.
        let threshold = self.settings().full_scan_threshold;
        let (indexed, bound) = match (&plan.among, filter) {
            (Some(ids), _) => (Some(slots_of(&table, ids)), None),
            (None, Some(f)) => match table.payload_index.bound(f) {
                Some(b) if b < threshold || exact => (candidates(&table, f), Some(b)),
                b => (None, b),
            },
            (None, None) => (None, None),
        };
        // Listed by main slot; searched in the index's own.
        let indexed = indexed.map(|main| searched.own_slots(&table, main));
        if let (Some(f), false) = (filter, exact) {
            // The indexes' count bounds the matches (dead slots included); without an index
            // that narrows the filter, a sample estimates them.
            let share = match (&indexed, bound) {
                (Some(slots), _) => slots.len() as f64 / table.slots.len().max(1) as f64,
                (None, Some(b)) => b as f64 / table.slots.len().max(1) as f64,
                (None, None) => selectivity(self.settings(), &table, f),
            };
            filter_selectivity = Some(share);
            let expected = share * table.slots.len() as f64;
            if expected < self.settings().full_scan_threshold as f64 {
                exact = true;
            } else {
                let base = ef.unwrap_or_else(|| self.default_ef(plan, index)).max(k);
                ef = Some(
                    ((base as f64) * (1.0 / share.max(1e-9)).min(MAX_FILTER_EF_BOOST)) as usize,
                );
            }
        }
        let params = SearchParams {
            ef,
            exact,
            oversampling: plan.oversampling,
            rescore: plan.rescore,
            ignore_quantization: plan.ignore_quantization,
        };
        // An exact search over the indexes' candidates scores only those; where the indexes
        // answer the filter exactly, a live candidate is a match without a payload read.
        let answered =
            plan.among.is_none() && filter.is_some_and(|f| table.payload_index.answers(f));
        let scan_candidates = |slots: &[Slot]| {
            let store = index.store();
            let listed = slots.iter().copied().filter(|&slot| {
                if answered {
                    searched.main_slot(&table, slot).is_some()
                } else {
                    accept(slot)
                }
            });
            Ok::<_, ServerError>(store.search_slots(&vector, k, listed)?)
        };
        // The index's whole share of the query, the exact fallback included, is one span of
        // the search clock: `/metrics` subtracts it from the route time per query.
        let (hits, stats, exact_fallback) = self.shared.searches.time(|| {
            if let (true, Some(slots)) = (exact, &indexed) {
                let (hits, stats) = scan_candidates(slots)?;
                return Ok((hits, stats, false));
            }
            let (hits, stats) = index.search(&vector, k, &params, Some(&accept))?;
            if exact || filter.is_none() || hits.len() >= k {
                return Ok((hits, stats, false));
            }
            // A filtered graph search can come up short when the filter cuts the graph's
            // reachable region; an exact scan is the guarantee.
            let (exact_hits, exact_stats) = match &indexed {
                Some(slots) => scan_candidates(slots)?,
                None => index.search(
                    &vector,
                    k,
                    &SearchParams {
                        ef,
                        exact: true,
                        ..SearchParams::default()
                    },
                    Some(&accept),
                )?,
            };
            let both = SearchStats {
                distance_computations: stats.distance_computations
                    + exact_stats.distance_computations,
                ..stats
            };
            Ok::<_, ServerError>((exact_hits, both, true))
        })?;
        let explain = plan.explain.then(|| QueryExplain {
            index: index.kind().name().to_owned(),
            index_choice: index.choice(),
            exact: exact || exact_fallback,
            ef: if exact {
                None
            } else {
                Some(ef.unwrap_or_else(|| self.default_ef(plan, index)).max(k))
            },
            filter_selectivity,
            exact_fallback,
            payload_index_candidates: indexed.as_ref().map(|slots| slots.len() as u64),
            distance_computations: stats.distance_computations,
            quantization: stats
                .scored_codes
                .then(|| index.codes().map(|c| c.name().to_owned()))
                .flatten(),
            partitions: None,
        });
        let metric = index.metric();
        let mut out = Vec::with_capacity(plan.limit);
        for hit in hits.into_iter().skip(plan.offset) {
            let Some(slot) = searched.main_slot(&table, hit.slot) else {
                continue;
            };
            let score = metric.key_to_score(hit.key);
            if let Some(t) = plan.score_threshold {
                let worse = if metric.higher_is_better() {
                    score < t
                } else {
                    score > t
                };
                if worse {
                    break;
                }
            }
            out.extend(self.scored(&live, &table, plan, slot, score));
        }
        Ok(QueryResponse {
            points: out,
            explain,
            warning: None,
        })
    }

    /// The hit at `slot` as the plan returns it (`None` if the slot died meanwhile).
    fn scored(
        &self,
        live: &LiveIndex,
        table: &PointTable,
        plan: &SearchPlan,
        slot: Slot,
        score: f32,
    ) -> Option<ScoredPoint> {
        let entry = table.entry(slot)?;
        Some(ScoredPoint {
            id: entry.id,
            version: entry.version,
            score,
            payload: plan.with_payload.apply(entry.payload.as_ref()),
            vector: plan
                .with_vector
                .then(|| self.vector_output(live, table, slot))
                .flatten(),
        })
    }

    /// A point's stored vectors as results return them: the main one under the collection's
    /// vector name (if it has one), the others and the sparse ones by name.
    fn vector_output(
        &self,
        live: &LiveIndex,
        table: &PointTable,
        slot: Slot,
    ) -> Option<VectorOutput> {
        let dense = live.index.vector(slot)?;
        Some(match table.entry(slot) {
            Some(entry) => {
                self.settings()
                    .vectors_output(dense, &entry.sparse, live.extra_vectors(entry))
            }
            None => self.settings().vector_output(dense),
        })
    }

    /// A sparse query: the inverted index scores exactly the points sharing a dimension with
    /// the query (and passing the filter); the payload indexes, which narrow a dense search's
    /// candidates, are not needed, since the filter runs only on those points.
    fn sparse_query(
        &self,
        live: &LiveIndex,
        table: &PointTable,
        name: &str,
        query: &SparseVector,
        plan: &SearchPlan,
    ) -> QueryResponse {
        let k = plan.offset + plan.limit;
        let filter = plan.filter.as_ref();
        let idf = self.settings().sparse_idf(name);
        let among = plan.among.as_ref().map(|ids| slots_of(table, ids));
        let (hits, stats) = self.shared.searches.time(|| {
            table
                .sparse_index
                .search(name, query, idf, table.slots.len(), k, |slot| {
                    among
                        .as_ref()
                        .is_none_or(|among| among.binary_search(&slot).is_ok())
                        && passes(self.settings(), table, filter, slot)
                })
        });
        let points = hits
            .into_iter()
            .skip(plan.offset)
            .take_while(|&(_, score)| plan.score_threshold.is_none_or(|t| score >= t))
            .filter_map(|(slot, score)| self.scored(live, table, plan, slot, score))
            .collect();
        let explain = plan.explain.then(|| QueryExplain {
            index: "sparse".to_owned(),
            index_choice: None,
            exact: true,
            ef: None,
            filter_selectivity: None,
            exact_fallback: false,
            payload_index_candidates: None,
            distance_computations: stats.postings,
            quantization: None,
            partitions: None,
        });
        QueryResponse {
            points,
            explain,
            warning: None,
        }
    }

    /// The `ef` a search of `index` uses when the query does not set one: the index's own
    /// where its state decides it (`mips_auto`'s choice), else its parameters' (a flat index
    /// has none; the value is then never used as such).
    fn default_ef(&self, plan: &SearchPlan, index: &dyn VectorIndex) -> usize {
        if let Some(ef) = index.default_ef() {
            return ef;
        }
        let settings = self.settings();
        settings
            .dense_space(plan.using.as_deref().unwrap_or(settings.vector_name()))
            .and_then(|space| space.index.default_ef(index.len()))
            .unwrap_or(0)
    }

    /// Points in id order from `offset`, and the id that starts the next page; with
    /// `order_by`, one page in the order of a payload index (and no next id).
    pub fn scroll_blocking(&self, plan: &ScrollPlan) -> Result<(Vec<Record>, Option<PointId>)> {
        if let Some(order) = &plan.order_by {
            return Ok((self.scroll_ordered(plan, order)?, None));
        }
        let mut page = Vec::with_capacity(plan.limit);
        let mut next = None;
        self.walk(plan.offset, |live, table, id, slot| {
            if !passes(self.settings(), table, plan.filter.as_ref(), slot) {
                return ControlFlow::Continue(());
            }
            if page.len() == plan.limit {
                next = Some(id);
                return ControlFlow::Break(());
            }
            let payload = table
                .entry(slot)
                .and_then(|e| plan.with_payload.apply(e.payload.as_ref()));
            let vector = plan
                .with_vector
                .then(|| self.vector_output(live, table, slot))
                .flatten();
            page.push(Record {
                id,
                payload,
                vector,
                order_value: None,
            });
            ControlFlow::Continue(())
        });
        Ok((page, next))
    }

    /// The first `plan.limit` (point, value) pairs of live points passing the filter, in the
    /// order of a numeric or datetime payload index: as in Qdrant, a point holding several
    /// values comes once per value. Unavailable when the key has no such index here: the
    /// caller checked that the collection has one, so this replica has yet to apply it. One
    /// hold of the table's read lock: the walk stops at the page, but a filter that
    /// few points pass may walk far.
    fn scroll_ordered(&self, plan: &ScrollPlan, order: &OrderPlan) -> Result<Vec<Record>> {
        // A datetime index orders by whole microseconds, returned as integers (Qdrant's).
        let integer = matches!(
            self.payload_index_type(&order.key),
            Some(PayloadSchemaType::Integer | PayloadSchemaType::Datetime)
        );
        let live = self.shared.live();
        let table = live.table.read();
        let mut page = Vec::with_capacity(plan.limit.min(1024));
        let walked = table.payload_index.walk_ordered(
            &order.key,
            order.descending,
            order.start_from,
            |value, slot| {
                if page.len() >= plan.limit {
                    return ControlFlow::Break(());
                }
                let Some(entry) = table.entry(slot) else {
                    return ControlFlow::Continue(());
                };
                if !passes(self.settings(), &table, plan.filter.as_ref(), slot) {
                    return ControlFlow::Continue(());
                }
                page.push(Record {
                    id: entry.id,
                    payload: plan.with_payload.apply(entry.payload.as_ref()),
                    vector: plan
                        .with_vector
                        .then(|| self.vector_output(&live, &table, slot))
                        .flatten(),
                    order_value: order_value(value, integer),
                });
                ControlFlow::Continue(())
            },
        );
        if !walked {
            return Err(ServerError::Unavailable(format!(
                "order_by.key: the payload index of `{}` is not built on this replica yet (it \
                 was created a moment ago); retry",
                order.key
            )));
        }
        Ok(page)
    }

    /// Points passing `filter` (all points without one).
    pub fn count_blocking(&self, filter: Option<&Filter>) -> u64 {
        let Some(f) = filter else {
            return self.shared.live().table.read().live() as u64;
        };
        {
            let live = self.shared.live();
            let table = live.table.read();
            // Checks only the indexes' candidates: one hold of the lock, as short as the list
            // (a count over a whole large partition walks it in chunks below).
            if table
                .payload_index
                .bound(f)
                .is_some_and(|b| b <= WALK_CHUNK)
            {
                if let Some(slots) = candidates(&table, f) {
                    return slots
                        .iter()
                        .filter(|&&s| passes(self.settings(), &table, filter, s))
                        .count() as u64;
                }
            }
        }
        let mut count = 0;
        self.walk(None, |_, table, _, slot| {
            count += u64::from(passes(self.settings(), table, filter, slot));
            ControlFlow::Continue(())
        });
        count
    }

    /// Ids passing `filter` (all ids without one), in id order.
    pub fn matching_ids(&self, filter: Option<&Filter>) -> Vec<PointId> {
        let mut ids = Vec::new();
        self.walk(None, |_, table, id, slot| {
            if passes(self.settings(), table, filter, slot) {
                ids.push(id);
            }
            ControlFlow::Continue(())
        });
        ids
    }

    /// Visits the points from `start` on (all without one) in id order until `visit`
    /// breaks, [`WALK_CHUNK`] of them per hold of the table's read lock. Between two holds
    /// the applier may publish writes: a point written meanwhile is seen if its id is still
    /// ahead of the walk, as a scroll's next page would see it.
    fn walk(
        &self,
        start: Option<PointId>,
        mut visit: impl FnMut(&LiveIndex, &PointTable, PointId, Slot) -> ControlFlow<()>,
    ) {
        let mut from = start.map_or(Bound::Unbounded, Bound::Included);
        loop {
            // Read anew each time: a vacuum may have swapped the index in between.
            let live = self.shared.live();
            let table = live.table.read();
            let mut seen = 0;
            for (&id, &slot) in table.by_id.range((from, Bound::Unbounded)) {
                if visit(&live, &table, id, slot).is_break() {
                    return;
                }
                seen += 1;
                from = Bound::Excluded(id);
                if seen == WALK_CHUNK {
                    break;
                }
            }
            if seen < WALK_CHUNK {
                return;
            }
        }
    }

    /// The points with these ids that exist, in request order.
    pub fn get_points(
        &self,
        ids: &[PointId],
        with_payload: &PayloadSelection,
        with_vector: bool,
    ) -> Vec<Record> {
        let live = self.shared.live();
        let table = live.table.read();
        ids.iter()
            .filter_map(|id| {
                let (slot, entry) = table.get(id)?;
                Some(Record {
                    order_value: None,
                    id: *id,
                    payload: with_payload.apply(entry.payload.as_ref()),
                    vector: with_vector
                        .then(|| self.vector_output(&live, &table, slot))
                        .flatten(),
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use cairn_api::{Filter, PointId};
    use cairn_index::hnsw::HnswParams;
    use cairn_index::IndexParams;

    use super::*;

    fn plan(ef: Option<usize>, exact: bool, filter: Option<Filter>) -> SearchPlan {
        SearchPlan {
            target: QueryTarget::Point(PointId::Num(1)),
            using: None,
            filter,
            limit: 10,
            offset: 0,
            ef,
            exact,
            oversampling: None,
            rescore: None,
            ignore_quantization: false,
            score_threshold: None,
            with_payload: PayloadSelection::from_wire(None, false),
            with_vector: false,
            explain: false,
            among: None,
        }
    }

    #[test]
    fn graph_searches_at_usual_ef_are_short_and_large_scans_are_not() {
        let hnsw = IndexParams::Hnsw(HnswParams::default());
        assert!(is_short_work(
            &hnsw,
            128,
            1_000_000,
            &plan(Some(64), false, None)
        ));
        assert!(is_short_work(
            &hnsw,
            128,
            1_000_000,
            &plan(Some(256), false, None)
        ));
        assert!(!is_short_work(
            &hnsw,
            128,
            1_000_000,
            &plan(Some(4096), false, None)
        ));
        assert!(!is_short_work(
            &hnsw,
            1536,
            1_000_000,
            &plan(Some(64), false, None)
        ));
        assert!(!is_short_work(
            &hnsw,
            128,
            100_000,
            &plan(Some(64), true, None)
        ));
        assert!(is_short_work(
            &IndexParams::Flat,
            128,
            1_000,
            &plan(None, false, None)
        ));
        assert!(!is_short_work(
            &IndexParams::Flat,
            128,
            100_000,
            &plan(None, false, None)
        ));
    }

    #[test]
    fn filtered_queries_are_never_short() {
        let hnsw = IndexParams::Hnsw(HnswParams::default());
        let filter: Filter = serde_json::from_str(r#"{"must": [{"has_id": [1]}]}"#).unwrap();
        assert!(!is_short_work(
            &hnsw,
            4,
            10,
            &plan(Some(8), false, Some(filter))
        ));
    }
}
