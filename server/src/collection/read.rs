//! The read path of a collection: route, fan out to partitions, merge.
//!
//! Every read names how fresh it must be ([`ReadConsistency`]); each partition it touches is
//! read through [`PartitionHandle::at_least`] the position that asks for, found per partition
//! and only for the partitions the read touches (a linearizable read asks each one's leader).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use cairn_api::internal::{PayloadSelection, QueryTarget, ScrollPlan, SearchPlan};
use cairn_api::{
    Filter, PartitionsExplain, PointGroup, PointId, QueryExplain, QueryResponse, ReadConsistency,
    Record, ScoredPoint,
};
use cairn_index::Metric;

use super::handle::{PartitionHandle, ReadTrace};
use super::merge::{ordered_page, scroll_page, top_hits};
use super::routing::Phase;
use super::Collection;
use crate::error::{Result, ServerError};
use crate::request::groups::{group, GroupPlan};
use crate::request::hybrid::{among, fuse, higher_is_better, Ranked, Then};
use crate::request::recommend::{Examples, Strategy};
use crate::request::settings::DenseSpace;
use crate::request::{QueryPlan, QueryTree};

/// A `best_score` or `sum_scores` recommendation gathers this many candidates per result it
/// returns from each search near an example (a positive's nearest points that a negative
/// outranks are passed over), at least `MIN_CANDIDATES` and at most `MAX_CANDIDATES`.
const CANDIDATES_PER_RESULT: usize = 4;
const MIN_CANDIDATES: usize = 64;
const MAX_CANDIDATES: usize = 10_000;
/// Most points an exact `best_score`, `sum_scores`, `discover` or `context` ranking scores.
const MAX_EXACT_CANDIDATES: usize = 100_000;

/// The partitions a query visits and why.
struct Route {
    touched: Vec<u32>,
    how: &'static str,
    version: u64,
    distance_computations: u64,
}

impl Collection {
    /// Whether `plan` is cheap enough to run on an async worker (one partition only; a
    /// fan-out leaves the worker, and so does a read that may wait for a replica).
    pub fn is_short(&self, plan: &QueryPlan, consistency: &ReadConsistency) -> bool {
        match self.partitions.as_slice() {
            [only] => *consistency == ReadConsistency::Any && only.is_short(&plan.search),
            _ => false,
        }
    }

    /// Whether a query at `consistency` may wait on other nodes: a partition searched
    /// remotely, a read index or a replica catching up to a floor. Such queries must not hold
    /// one of the few search threads idle.
    pub fn may_wait(&self, consistency: &ReadConsistency) -> bool {
        *consistency != ReadConsistency::Any
            || self.partitions.iter().any(|p| p.searches_remotely())
    }

    /// Refuses a read token that names a partition this collection does not have.
    fn check_read(&self, consistency: &ReadConsistency) -> Result<()> {
        let w = self.partitions.len();
        match consistency {
            ReadConsistency::After(token) => match token.0.iter().find(|(p, _)| *p as usize >= w) {
                Some((p, _)) => Err(ServerError::InvalidRequest(format!(
                    "read_after names partition {p}, but `{}` has {w}: the token is from \
                     another collection",
                    self.name
                ))),
                None => Ok(()),
            },
            ReadConsistency::Any | ReadConsistency::Linearizable => Ok(()),
        }
    }

    /// What serves partition `p` for a read at `consistency` (blocking: it may wait for a
    /// replica to catch up, and a linearizable read first asks the partition's leader).
    fn reader(&self, p: usize, consistency: &ReadConsistency) -> Result<Arc<dyn PartitionHandle>> {
        let partition = self.partitions[p].clone();
        let floor = match consistency {
            ReadConsistency::Any => return Ok(partition),
            ReadConsistency::Linearizable => partition.read_index()?,
            ReadConsistency::After(token) => token.position(p as u32),
        };
        partition.at_least(floor)
    }

    /// Live points (a point stored in several partitions counts once).
    pub fn points(&self) -> usize {
        if let [only] = self.partitions.as_slice() {
            return only.points();
        }
        // Each point lives in one partition, unless the meta-index spills boundary points or
        // replicates large norms, or a migration is moving points: then ids must be counted
        // once (a union, O(n)). A single point changing partitions counts twice for the moment
        // between its two steps.
        let routing = self.routing();
        let single_homed = match (&routing.phase, &routing.meta_index) {
            (Phase::Untrained, _) => true,
            (Phase::Routed, Some(meta_index)) => {
                meta_index.hot_norm().is_none() && meta_index.spill_ratio().is_none()
            }
            (Phase::Routed | Phase::Migrating, _) => false,
        };
        if single_homed {
            self.partitions.iter().map(|p| p.points()).sum()
        } else {
            self.count_blocking(None, &ReadConsistency::Any)
                .map_or(0, |c| c as usize)
        }
    }

    /// The route of a query that cannot be routed by content (a sparse query): every
    /// partition, or partition 0 alone while the router is untrained (all points are there).
    fn route_everywhere(&self) -> Route {
        let routing = self.routing();
        match (routing.phase, &routing.meta_index) {
            (Phase::Untrained, _) | (_, None) => Route {
                touched: vec![0],
                how: Phase::Untrained.name(),
                version: 0,
                distance_computations: 0,
            },
            (Phase::Migrating | Phase::Routed, Some(_)) => Route {
                touched: (0..self.partitions.len() as u32).collect(),
                how: "broadcast",
                version: routing.version(),
                distance_computations: 0,
            },
        }
    }

    fn route(&self, vector: &[f32], plan: &QueryPlan) -> Result<Route> {
        let routing = self.routing();
        let w = self.partitions.len();
        let all = |how| Route {
            touched: (0..w as u32).collect(),
            how,
            version: routing.version(),
            distance_computations: 0,
        };
        let meta_index = match (routing.phase, &routing.meta_index) {
            (Phase::Untrained, _) | (_, None) => {
                return Ok(Route {
                    touched: vec![0],
                    how: Phase::Untrained.name(),
                    version: 0,
                    distance_computations: 0,
                })
            }
            (Phase::Migrating, Some(_)) => return Ok(all(Phase::Migrating.name())),
            (Phase::Routed, Some(meta_index)) => meta_index,
        };
        let (search, fan_out) = (&plan.search, &plan.fan_out);
        if search.exact || search.filter.is_some() || fan_out.probe.is_some_and(|p| p >= w) {
            return Ok(all("broadcast"));
        }
        let (touched, stats) = meta_index
            .route(vector, fan_out.branching, fan_out.probe)
            .map_err(|e| ServerError::Internal(format!("routing: {e}")))?;
        Ok(Route {
            touched,
            how: Phase::Routed.name(),
            version: meta_index.version(),
            distance_computations: stats.distance_computations,
        })
    }

    /// Whether a query at `consistency` is one search over the network (one partition, read at
    /// any replica, whose replicas are on other nodes): then [`Self::query_async`] awaits it
    /// on the runtime and no thread blocks on the call.
    pub fn queries_remotely(&self, consistency: &ReadConsistency) -> bool {
        matches!(
            (self.partitions.as_slice(), consistency),
            ([only], ReadConsistency::Any) if only.searches_remotely()
        )
    }

    /// The query of [`Self::queries_remotely`] collections, as a future.
    pub async fn query_async(&self, plan: &QueryPlan) -> Result<QueryResponse> {
        match self.partitions.as_slice() {
            [only] => only
                .search_async(&plan.search, plan.fan_out.hedge)
                .await
                .map(|(answer, _)| answer),
            _ => tokio::task::block_in_place(|| self.query_blocking(plan, &ReadConsistency::Any)),
        }
    }

    /// Asks each partition of `touched` for `sub` (blocking). Legs that wait on the network
    /// (replicas on other nodes) are tasks on the runtime, awaited together; partitions with
    /// a replica in this process are searched one after another on this thread meanwhile
    /// (threads would only add their start-up cost to work sharing the same cores).
    #[allow(clippy::type_complexity)]
    fn fan_out(
        &self,
        touched: &[u32],
        sub: &SearchPlan,
        hedge: bool,
        consistency: &ReadConsistency,
    ) -> Vec<Result<(QueryResponse, Option<ReadTrace>)>> {
        let mut answers: Vec<Option<Result<_>>> = touched.iter().map(|_| None).collect();
        let runtime = tokio::runtime::Handle::try_current().ok();
        let mut tasks = Vec::new();
        if let Some(runtime) = &runtime {
            for (i, &p) in touched.iter().enumerate() {
                if !self.partitions[p as usize].searches_remotely() {
                    continue;
                }
                match self.reader(p as usize, consistency) {
                    Ok(reader) => {
                        let sub = sub.clone();
                        let task =
                            runtime.spawn(async move { reader.search_async(&sub, hedge).await });
                        tasks.push((i, task));
                    }
                    Err(error) => answers[i] = Some(Err(error)),
                }
            }
        }
        let rest: Vec<usize> = (0..touched.len())
            .filter(|&i| answers[i].is_none() && !tasks.iter().any(|(t, _)| *t == i))
            .collect();
        let leg = |i: usize| {
            self.reader(touched[i] as usize, consistency)?
                .search(sub, hedge)
        };
        for i in rest {
            answers[i] = Some(leg(i));
        }
        if let Some(runtime) = &runtime {
            runtime.block_on(async {
                for (i, task) in tasks {
                    answers[i] = Some(task.await.unwrap_or_else(|e| {
                        Err(ServerError::Internal(format!(
                            "a partition query failed: {e}"
                        )))
                    }));
                }
            });
        }
        answers
            .into_iter()
            .map(|answer| {
                answer.unwrap_or_else(|| Err(ServerError::Internal("a leg was not run".into())))
            })
            .collect()
    }

    /// Runs a k-NN query (blocking). A recommendation first reads its examples' vectors and
    /// searches near their average, with room for the examples, which it then leaves out.
    pub fn query_blocking(
        &self,
        plan: &QueryPlan,
        consistency: &ReadConsistency,
    ) -> Result<QueryResponse> {
        let Some(examples) = &plan.examples else {
            return self.search_blocking(plan, consistency);
        };
        let ids = examples.ids();
        let space = self.settings.searched_space(plan.search.using.as_deref());
        // An id the collection lacks is a 404 (`Examples::average`); one without the vector
        // searched, a 400.
        let mut stored = HashMap::new();
        for record in self.get_points(&ids, &PayloadSelection::None, true, consistency)? {
            let vector = record.vector.as_ref().and_then(|v| v.dense(space.name));
            let vector = vector.ok_or_else(|| {
                ServerError::InvalidRequest(format!(
                    "query: the example point {} has no vector `{}`",
                    record.id, space.name
                ))
            })?;
            stored.insert(record.id, vector.to_vec());
        }
        if examples.strategy != Strategy::AverageVector {
            return self.recommend_by_score(plan, examples, space, &stored, &ids, consistency);
        }
        let mut resolved = plan.clone();
        resolved.examples = None;
        resolved.search.target = QueryTarget::Vector(examples.average(space, &stored)?);
        resolved.search.offset = 0;
        resolved.search.limit = plan.search.offset + plan.search.limit + ids.len();
        let mut answer = self.search_blocking(&resolved, consistency)?;
        answer.points = answer
            .points
            .into_iter()
            .filter(|p| ids.binary_search(&p.id).is_err())
            .skip(plan.search.offset)
            .take(plan.search.limit)
            .collect();
        Ok(answer)
    }

    /// A `best_score`, `sum_scores`, `discover` or `context` query (blocking): candidates from
    /// a search near each of [`Examples::candidate_queries`], each with room for
    /// `CANDIDATES_PER_RESULT` times the results (every point when `exact`), scored exactly
    /// against every example, best first; the examples given by id left out.
    fn recommend_by_score(
        &self,
        plan: &QueryPlan,
        examples: &Examples,
        space: DenseSpace<'_>,
        stored: &HashMap<PointId, Vec<f32>>,
        ids: &[PointId],
        consistency: &ReadConsistency,
    ) -> Result<QueryResponse> {
        let vectors = examples.vectors(stored)?;
        let wanted = plan.search.offset + plan.search.limit + ids.len();
        let mut queries = examples.candidate_queries(space, &vectors);
        let every_point = examples.scores_every_point(space);
        let pool = if plan.search.exact || every_point {
            // Exact: every point is a candidate, gathered by one search that returns them all.
            let points = self.points();
            if points > MAX_EXACT_CANDIDATES && every_point {
                return Err(ServerError::LimitExceeded(format!(
                    "a {} ranking from negatives alone on a Euclid vector scores every point \
                     (the best are the farthest from them), and the collection has {points}, \
                     above the maximum of {MAX_EXACT_CANDIDATES}; add a positive example",
                    examples.strategy.name()
                )));
            }
            if points > MAX_EXACT_CANDIDATES {
                return Err(ServerError::LimitExceeded(format!(
                    "params.exact: an exact {} ranking scores every point, and the collection \
                     has {points}, above the maximum of {MAX_EXACT_CANDIDATES}; ask without \
                     exact (candidates are then gathered near the examples)",
                    examples.strategy.name()
                )));
            }
            queries.truncate(1);
            points.max(1)
        } else {
            (wanted * CANDIDATES_PER_RESULT).clamp(MIN_CANDIDATES, MAX_CANDIDATES)
        };
        let mut candidates: HashMap<PointId, ScoredPoint> = HashMap::new();
        let mut warning = None;
        for query in queries {
            let mut sub = plan.clone();
            sub.examples = None;
            sub.search.target = QueryTarget::Vector(query);
            sub.search.offset = 0;
            sub.search.limit = pool;
            sub.search.with_vector = true;
            sub.search.score_threshold = None;
            sub.search.exact |= every_point;
            let answer = self.search_blocking(&sub, consistency)?;
            warning = warning.or(answer.warning);
            for point in answer.points {
                candidates.entry(point.id).or_insert(point);
            }
        }
        let key = space.metric().key_fn();
        let mut scored: Vec<ScoredPoint> = candidates
            .into_values()
            .filter(|p| ids.binary_search(&p.id).is_err())
            .filter_map(|mut p| {
                let vector = p.vector.as_ref()?.dense(space.name)?;
                p.score = examples.score(key, vector, &vectors);
                Some(p)
            })
            .filter(|p| plan.search.score_threshold.is_none_or(|t| p.score >= t))
            .collect();
        scored.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.id.cmp(&b.id)));
        let points = scored
            .into_iter()
            .skip(plan.search.offset)
            .take(plan.search.limit)
            .map(|mut p| {
                if !plan.search.with_vector {
                    p.vector = None;
                }
                p
            })
            .collect();
        Ok(QueryResponse {
            points,
            explain: None,
            warning,
        })
    }

    /// Runs a grouped query (blocking): the query again with four times the hits while its
    /// groups are not full and more hits may come, up to `limits.max_limit` hits.
    pub fn query_groups_blocking(
        &self,
        plan: &GroupPlan,
        consistency: &ReadConsistency,
    ) -> Result<Vec<PointGroup>> {
        let wanted = plan.groups * plan.size;
        let mut fetch = wanted.saturating_mul(2).min(plan.max_hits).max(wanted);
        loop {
            let mut query = plan.query.clone();
            query.search.limit = fetch;
            let answer = self.query_blocking(&query, consistency)?;
            let exhausted = answer.points.len() < fetch;
            let answer = query.finish(answer, &self.settings);
            let (groups, full) = group(answer.points, plan);
            if full || exhausted || fetch >= plan.max_hits {
                return Ok(groups);
            }
            fetch = fetch.saturating_mul(4).min(plan.max_hits);
        }
    }

    /// Runs a k-NN query whose target is known (blocking).
    fn search_blocking(
        &self,
        plan: &QueryPlan,
        consistency: &ReadConsistency,
    ) -> Result<QueryResponse> {
        self.check_read(consistency)?;
        let (search, fan_out) = (&plan.search, &plan.fan_out);
        if self.partitions.len() == 1 {
            return self
                .reader(0, consistency)?
                .search(search, fan_out.hedge)
                .map(|(answer, _)| answer);
        }
        // Partitions are routed by the main vector; a search on another asks them all.
        let space = self.settings.searched_space(search.using.as_deref());
        let dense = |vector: Vec<f32>| -> Result<_> {
            let route = match space.extra {
                None => self.route(&vector, plan)?,
                Some(_) => self.route_everywhere(),
            };
            Ok((route, QueryTarget::Vector(vector), space.metric()))
        };
        let (route, target, metric) = match &search.target {
            QueryTarget::Vector(v) => dense(v.clone())?,
            QueryTarget::Point(id) => {
                let record = self
                    .get_points(&[*id], &PayloadSelection::None, true, consistency)?
                    .pop()
                    .ok_or(ServerError::PointNotFound(*id))?;
                let vector = record.vector.as_ref().and_then(|v| v.dense(space.name));
                dense(
                    vector
                        .ok_or_else(|| {
                            ServerError::InvalidRequest(format!(
                                "point {id} has no vector `{}` to search near",
                                space.name
                            ))
                        })?
                        .to_vec(),
                )?
            }
            // Sparse vectors do not route: every partition that may hold points is asked, and
            // their dot products merge like inner products (higher is better).
            QueryTarget::Sparse { .. } => (
                self.route_everywhere(),
                search.target.clone(),
                Metric::InnerProduct,
            ),
        };
        let sub = SearchPlan {
            target,
            limit: search.offset + search.limit,
            offset: 0,
            explain: true,
            ..search.clone()
        };
        let answers = self.fan_out(&route.touched, &sub, fan_out.hedge, consistency);
        let mut lists = Vec::with_capacity(route.touched.len());
        let mut explain: Option<QueryExplain> = None;
        let mut missing = Vec::new();
        let mut replicas = Vec::new();
        let mut hedges = 0;
        for (&p, answer) in route.touched.iter().zip(answers) {
            let (answer, trace) = match answer {
                Ok(answer) => answer,
                // A partition with no live replica: answer from the others, and say so.
                Err(ServerError::Unavailable(m)) if fan_out.allow_partial => {
                    tracing::warn!(collection = self.name, partition = p, error = %m, "partial result");
                    missing.push(p);
                    continue;
                }
                Err(e) => return Err(e),
            };
            if let Some(trace) = trace {
                hedges += u32::from(trace.hedged);
                replicas.push(trace.node);
            }
            lists.push(answer.points);
            let Some(e) = answer.explain else { continue };
            explain = Some(match explain.take() {
                None => e,
                Some(mut sum) => {
                    sum.exact |= e.exact;
                    sum.exact_fallback |= e.exact_fallback;
                    sum.payload_index_candidates =
                        match (sum.payload_index_candidates, e.payload_index_candidates) {
                            (None, None) => None,
                            (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
                        };
                    sum.distance_computations += e.distance_computations;
                    // Partitions too small to have trained their codes scored vectors.
                    sum.quantization = sum.quantization.or(e.quantization);
                    // Each partition chooses from its own norms: every distinct choice.
                    if let Some(one) = e.index_choice {
                        match &mut sum.index_choice {
                            Some(all) if !all.split("; ").any(|c| c == one) => {
                                all.push_str("; ");
                                all.push_str(&one);
                            }
                            Some(_) => {}
                            none => *none = Some(one),
                        }
                    }
                    sum
                }
            });
        }
        let points = top_hits(metric, lists, search.offset, search.limit);
        let coverage = 1.0 - missing.len() as f64 / route.touched.len().max(1) as f64;
        let warning = (!missing.is_empty()).then(|| {
            format!(
                "partial result: partitions {missing:?} have no live replica (coverage {coverage:.2})"
            )
        });
        // No partition answered (every one touched had no live replica): the routing and the
        // coverage of 0 are still worth telling.
        let explain = explain.or_else(|| {
            (search.explain && !missing.is_empty()).then(|| QueryExplain {
                index: "none".into(),
                index_choice: None,
                exact: false,
                ef: None,
                filter_selectivity: None,
                exact_fallback: false,
                payload_index_candidates: None,
                distance_computations: 0,
                quantization: None,
                partitions: None,
            })
        });
        let explain = match (search.explain, explain) {
            (true, Some(mut e)) => {
                e.distance_computations += route.distance_computations;
                e.partitions = Some(PartitionsExplain {
                    routing: route.how.to_owned(),
                    touched: route.touched,
                    total: self.partitions.len(),
                    routing_version: route.version,
                    routing_distance_computations: route.distance_computations,
                    coverage,
                    replicas,
                    hedges,
                });
                Some(e)
            }
            _ => None,
        };
        Ok(QueryResponse {
            points,
            explain,
            warning,
        })
    }

    /// Runs a query tree (blocking): a search, or prefetches and then their fusion or the
    /// re-scoring of their candidates. The answer is the caller's (MMR picked, vectors kept
    /// as named).
    pub fn query_tree_blocking(
        &self,
        tree: &QueryTree,
        consistency: &ReadConsistency,
    ) -> Result<QueryResponse> {
        let prefetch = match tree {
            QueryTree::Search(plan) => {
                let answer = self.query_blocking(plan, consistency)?;
                return Ok(plan.finish(answer, &self.settings));
            }
            QueryTree::Prefetch(prefetch) => prefetch,
        };
        let mut lists = Vec::with_capacity(prefetch.prefetch.len());
        let mut warning = None;
        for sub in &prefetch.prefetch {
            let answer = self.query_tree_blocking(sub, consistency)?;
            warning = warning.or(answer.warning);
            lists.push(Ranked {
                points: answer.points,
                higher_is_better: higher_is_better(sub, &self.settings),
            });
        }
        match &prefetch.then {
            Then::Fuse {
                fusion,
                offset,
                limit,
                score_threshold,
            } => Ok(QueryResponse {
                points: fuse(lists, fusion, *offset, *limit, *score_threshold),
                explain: None,
                warning,
            }),
            Then::Rescore(plan) => {
                let ids: Vec<PointId> = lists
                    .into_iter()
                    .flat_map(|list| list.points)
                    .map(|p| p.id)
                    .collect::<BTreeSet<_>>()
                    .into_iter()
                    .collect();
                if ids.is_empty() {
                    return Ok(QueryResponse {
                        points: Vec::new(),
                        explain: None,
                        warning,
                    });
                }
                let plan = among(plan, ids);
                let mut answer = self.query_blocking(&plan, consistency)?;
                answer.warning = answer.warning.or(warning);
                Ok(plan.finish(answer, &self.settings))
            }
        }
    }

    /// Points in id order from `offset`, and the id that starts the next page.
    pub fn scroll_blocking(
        &self,
        plan: &ScrollPlan,
        consistency: &ReadConsistency,
    ) -> Result<(Vec<Record>, Option<PointId>)> {
        self.check_read(consistency)?;
        if self.partitions.len() == 1 {
            return self.reader(0, consistency)?.scroll(plan);
        }
        let sub = ScrollPlan {
            limit: plan.limit + 1,
            ..plan.clone()
        };
        let pages = (0..self.partitions.len())
            .map(|p| {
                let (page, _) = self.reader(p, consistency)?.scroll(&sub)?;
                Ok(page)
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(match &plan.order_by {
            Some(order) => (ordered_page(pages, plan.limit, order.descending), None),
            None => scroll_page(pages, plan.limit),
        })
    }

    /// Points passing `filter` (all points without one).
    pub fn count_blocking(
        &self,
        filter: Option<&Filter>,
        consistency: &ReadConsistency,
    ) -> Result<u64> {
        self.check_read(consistency)?;
        match self.partitions.len() {
            1 => self.reader(0, consistency)?.count(filter),
            _ => Ok(self.matching_ids(filter, consistency)?.len() as u64),
        }
    }

    /// Ids passing `filter` (all ids without one), in id order, each once.
    pub fn matching_ids(
        &self,
        filter: Option<&Filter>,
        consistency: &ReadConsistency,
    ) -> Result<Vec<PointId>> {
        self.check_read(consistency)?;
        if self.partitions.len() == 1 {
            return self.reader(0, consistency)?.matching_ids(filter);
        }
        let mut ids = BTreeSet::new();
        for p in 0..self.partitions.len() {
            ids.extend(self.reader(p, consistency)?.matching_ids(filter)?);
        }
        Ok(ids.into_iter().collect())
    }

    /// The points with these ids that exist, in request order.
    pub fn get_points(
        &self,
        ids: &[PointId],
        with_payload: &PayloadSelection,
        with_vector: bool,
        consistency: &ReadConsistency,
    ) -> Result<Vec<Record>> {
        self.check_read(consistency)?;
        if self.partitions.len() == 1 {
            return self
                .reader(0, consistency)?
                .get_points(ids, with_payload, with_vector);
        }
        let mut found: HashMap<PointId, Record> = HashMap::new();
        for p in 0..self.partitions.len() {
            let reader = self.reader(p, consistency)?;
            for record in reader.get_points(ids, with_payload, with_vector)? {
                found.entry(record.id).or_insert(record);
            }
        }
        Ok(ids.iter().filter_map(|id| found.get(id).cloned()).collect())
    }
}
