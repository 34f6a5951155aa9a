//! Queries with `prefetch` (Qdrant's hybrid queries): sub-queries run first, and the query
//! above them either fuses their results (`{"fusion": "rrf" | "dbsf"}`, `{"rrf": …}`) or
//! re-scores their candidates with a vector of its own. This module plans such a tree and
//! holds the fusions; `Collection::query_tree_blocking` runs it.
//!
//! As in Qdrant, the query's own `filter` applies to every prefetch below it too, and a
//! prefetch returns 10 candidates unless it says otherwise.

use std::collections::HashMap;

use cairn_api::{
    Condition, Filter, Fusion, PointId, Prefetch, QueryInput, QueryRequest, Rrf, ScoredPoint,
    WithPayload,
};

use super::query::{check_page, plan, QueryPlan};
use super::CollectionSettings;
use crate::config::Limits;
use crate::error::{Result, ServerError};

/// Qdrant's default rank constant for reciprocal rank fusion.
const DEFAULT_RRF_K: usize = 2;
/// Deepest nesting of `prefetch`: deeper trees are refused (each level is a round of
/// searches, and no hybrid recipe Qdrant documents needs more than two).
pub const MAX_PREFETCH_DEPTH: usize = 4;
/// Most searches one query tree may run in all (its leaves).
pub const MAX_PREFETCH_SEARCHES: usize = 16;

/// A validated query: one search, or sub-queries and what to do with their results.
#[derive(Debug, Clone)]
pub enum QueryTree {
    /// One search (possibly with MMR).
    Search(Box<QueryPlan>),
    /// Sub-queries, then a fusion or a re-scoring.
    Prefetch(Box<PrefetchPlan>),
}

/// The sub-queries of a query and what it does with their results.
#[derive(Debug, Clone)]
pub struct PrefetchPlan {
    /// The sub-queries, in request order.
    pub prefetch: Vec<QueryTree>,
    /// What this query does with them.
    pub then: Then,
}

/// What a query does with its prefetches' results.
#[derive(Debug, Clone)]
pub enum Then {
    /// Merges them (the fused points carry the payloads and vectors the sub-queries fetched).
    Fuse {
        /// How.
        fusion: FusionPlan,
        /// Results to skip.
        offset: usize,
        /// Results to return.
        limit: usize,
        /// Drop fused scores below this.
        score_threshold: Option<f32>,
    },
    /// Runs this search over the union of their candidates only (its filter is narrowed to
    /// their ids when it runs).
    Rescore(Box<QueryPlan>),
}

/// A fusion and its parameters.
#[derive(Debug, Clone)]
pub enum FusionPlan {
    /// Reciprocal rank fusion.
    Rrf {
        /// Rank constant.
        k: usize,
        /// One weight per prefetch (all 1 when not given).
        weights: Option<Vec<f32>>,
    },
    /// Distribution-based score fusion.
    Dbsf,
}

/// One ranked list and the direction of its scores, what a fusion needs of a sub-query.
#[derive(Debug, Clone)]
pub struct Ranked {
    /// Best first.
    pub points: Vec<ScoredPoint>,
    /// Whether a higher score is better (false for Euclidean distances).
    pub higher_is_better: bool,
}

impl QueryTree {
    /// Most leaves of the tree.
    fn searches(&self) -> usize {
        match self {
            QueryTree::Search(_) => 1,
            QueryTree::Prefetch(p) => {
                p.prefetch.iter().map(QueryTree::searches).sum::<usize>()
                    + usize::from(matches!(p.then, Then::Rescore(_)))
            }
        }
    }
}

/// Validates a query, with or without `prefetch`, against the collection's settings and the
/// limits; `field` prefixes error paths.
pub fn plan_tree(
    settings: &CollectionSettings,
    request: QueryRequest,
    limits: &Limits,
    field: &str,
) -> Result<QueryTree> {
    let tree = plan_level(settings, request, limits, field, 0, Output::Caller)?;
    let searches = tree.searches();
    if searches > MAX_PREFETCH_SEARCHES {
        return Err(ServerError::LimitExceeded(format!(
            "{field}prefetch: the query runs {searches} searches in all, above the maximum of \
             {MAX_PREFETCH_SEARCHES}"
        )));
    }
    Ok(tree)
}

/// Whose payloads and vectors a level's searches fetch: the caller's selection when their
/// points are the answer (under fusions only), none when a re-scoring search fetches its own.
#[derive(Clone, Copy)]
enum Output {
    Caller,
    Nothing,
}

fn plan_level(
    settings: &CollectionSettings,
    mut request: QueryRequest,
    limits: &Limits,
    field: &str,
    depth: usize,
    output: Output,
) -> Result<QueryTree> {
    let prefetch = request.prefetch.take().unwrap_or_default();
    let fusion = match &request.query {
        Some(QueryInput::Fusion { fusion }) => Some(match fusion {
            Fusion::Rrf => FusionPlan::Rrf {
                k: DEFAULT_RRF_K,
                weights: None,
            },
            Fusion::Dbsf => FusionPlan::Dbsf,
        }),
        Some(QueryInput::Rrf { rrf }) => Some(rrf_plan(rrf, prefetch.len(), field)?),
        _ => None,
    };
    if prefetch.is_empty() {
        if fusion.is_some() {
            return Err(ServerError::InvalidRequest(format!(
                "{field}query: a fusion merges the results of `prefetch`, and there is none"
            )));
        }
        if matches!(output, Output::Nothing) {
            request.with_payload = Some(WithPayload::Enable(false));
            request.with_vector = None;
        }
        return plan(settings, request, limits, field).map(|p| QueryTree::Search(Box::new(p)));
    }
    if depth >= MAX_PREFETCH_DEPTH {
        return Err(ServerError::LimitExceeded(format!(
            "{field}prefetch is nested deeper than the maximum of {MAX_PREFETCH_DEPTH} levels"
        )));
    }
    if let Some(QueryInput::Nearest { mmr: Some(_), .. }) = &request.query {
        return Err(ServerError::InvalidRequest(format!(
            "{field}query: `mmr` over prefetch results is not supported; put the `mmr` query \
             in a prefetch or drop the prefetch"
        )));
    }
    let below = match (&fusion, output) {
        (Some(_), output) => output,
        (None, _) => Output::Nothing,
    };
    let mut children = Vec::with_capacity(prefetch.len());
    for (i, sub) in prefetch.into_iter().enumerate() {
        let sub_field = format!("{field}prefetch[{i}].");
        let sub_request = prefetch_request(sub, &request);
        children.push(plan_level(
            settings,
            sub_request,
            limits,
            &sub_field,
            depth + 1,
            below,
        )?);
    }
    let then = match fusion {
        Some(fusion) => {
            let (limit, offset) = check_page(&request, limits, field)?;
            Then::Fuse {
                fusion,
                offset,
                limit,
                score_threshold: request.score_threshold,
            }
        }
        None => {
            if request.query.is_none() {
                return Err(ServerError::InvalidRequest(format!(
                    "{field}query is required with `prefetch`: a fusion (`{{\"fusion\": \
                     \"rrf\"}}`) or a vector to re-score the prefetched points with"
                )));
            }
            if matches!(output, Output::Nothing) {
                request.with_payload = Some(WithPayload::Enable(false));
                request.with_vector = None;
            }
            Then::Rescore(Box::new(plan(settings, request, limits, field)?))
        }
    };
    Ok(QueryTree::Prefetch(Box::new(PrefetchPlan {
        prefetch: children,
        then,
    })))
}

fn rrf_plan(rrf: &Rrf, prefetches: usize, field: &str) -> Result<FusionPlan> {
    let k = rrf.k.unwrap_or(DEFAULT_RRF_K);
    if k == 0 {
        return Err(ServerError::InvalidRequest(format!(
            "{field}query.rrf.k must be at least 1"
        )));
    }
    if let Some(weights) = &rrf.weights {
        if weights.len() != prefetches {
            return Err(ServerError::InvalidRequest(format!(
                "{field}query.rrf.weights: {} weights for {prefetches} prefetches; give one per \
                 prefetch",
                weights.len()
            )));
        }
        if let Some(w) = weights.iter().find(|w| !(w.is_finite() && **w >= 0.0)) {
            return Err(ServerError::InvalidRequest(format!(
                "{field}query.rrf.weights: {w} is not a finite number of at least 0"
            )));
        }
    }
    Ok(FusionPlan::Rrf {
        k,
        weights: rrf.weights.clone(),
    })
}

/// A prefetch as a query of its own: the parent's filter joins its own, and it fetches the
/// parent's payload and vector selection (dropped again below a re-scoring, see `Output`).
fn prefetch_request(sub: Prefetch, parent: &QueryRequest) -> QueryRequest {
    let filter = match (parent.filter.clone(), sub.filter) {
        (Some(a), Some(b)) => Some(Filter::must([
            Condition::Nested(Box::new(a)),
            Condition::Nested(Box::new(b)),
        ])),
        (a, b) => a.or(b),
    };
    QueryRequest {
        query: sub.query,
        filter,
        params: sub.params,
        limit: sub.limit,
        offset: None,
        with_payload: parent.with_payload.clone(),
        with_vector: parent.with_vector.clone(),
        score_threshold: sub.score_threshold,
        using: sub.using,
        explain: None,
        shard_key: None,
        prefetch: sub.prefetch,
        lookup_from: sub.lookup_from,
    }
}

/// The re-scoring search over the prefetched points `ids` (sorted, distinct): each is scored
/// exactly, and no other point.
pub fn among(plan: &QueryPlan, ids: Vec<PointId>) -> QueryPlan {
    let mut plan = plan.clone();
    plan.search.among = Some(ids);
    plan.search.exact = true;
    plan
}

/// Merges ranked lists into one, best first (higher fused score), and applies offset, limit
/// and threshold. A point keeps the payload and vector of the first list that had it.
pub fn fuse(
    lists: Vec<Ranked>,
    fusion: &FusionPlan,
    offset: usize,
    limit: usize,
    score_threshold: Option<f32>,
) -> Vec<ScoredPoint> {
    let mut fused: HashMap<PointId, ScoredPoint> = HashMap::new();
    let mut add = |point: ScoredPoint, score: f32| {
        fused
            .entry(point.id)
            .and_modify(|p| p.score += score)
            .or_insert(ScoredPoint { score, ..point });
    };
    match fusion {
        FusionPlan::Rrf { k, weights } => {
            for (i, list) in lists.into_iter().enumerate() {
                let weight = weights.as_ref().map_or(1.0, |w| w[i]);
                for (rank, point) in list.points.into_iter().enumerate() {
                    add(point, rrf_score(rank, *k, weight));
                }
            }
        }
        FusionPlan::Dbsf => {
            for list in lists {
                let normalise = dbsf_normaliser(&list);
                for point in list.points {
                    let score = normalise(point.score);
                    add(point, score);
                }
            }
        }
    }
    let mut points: Vec<ScoredPoint> = fused.into_values().collect();
    points.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.id.cmp(&b.id)));
    points
        .into_iter()
        .skip(offset)
        .take_while(|p| score_threshold.is_none_or(|t| p.score >= t))
        .take(limit)
        .collect()
}

/// Qdrant's weighted reciprocal rank: `1 / ((rank + 1) / weight + k − 1)`, which is
/// `1 / (rank + k)` at weight 1; a weight of 0 adds nothing.
fn rrf_score(rank: usize, k: usize, weight: f32) -> f32 {
    if weight <= 0.0 {
        return 0.0;
    }
    1.0 / ((rank + 1) as f32 / weight + k as f32 - 1.0)
}

/// Maps a list's scores to [0, 1] by their mean ± 3 standard deviations (1 best, whatever
/// the list's direction); a list whose scores are all equal maps them to 0.5.
fn dbsf_normaliser(list: &Ranked) -> impl Fn(f32) -> f32 {
    let n = list.points.len().max(1) as f64;
    let mean = list.points.iter().map(|p| f64::from(p.score)).sum::<f64>() / n;
    let variance = list
        .points
        .iter()
        .map(|p| (f64::from(p.score) - mean).powi(2))
        .sum::<f64>()
        / n;
    let sd = variance.sqrt();
    let (low, high) = (mean - 3.0 * sd, mean + 3.0 * sd);
    let higher_is_better = list.higher_is_better;
    move |score: f32| {
        if high <= low {
            return 0.5;
        }
        let x = ((f64::from(score) - low) / (high - low)).clamp(0.0, 1.0);
        (if higher_is_better { x } else { 1.0 - x }) as f32
    }
}

/// Whether a tree's answer ranks higher scores first.
pub fn higher_is_better(tree: &QueryTree, settings: &CollectionSettings) -> bool {
    match tree {
        QueryTree::Search(plan) => plan.higher_is_better(settings),
        QueryTree::Prefetch(p) => match &p.then {
            Then::Fuse { .. } => true,
            Then::Rescore(plan) => plan.higher_is_better(settings),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(id: u64, score: f32) -> ScoredPoint {
        ScoredPoint {
            id: PointId::Num(id),
            version: 1,
            score,
            payload: None,
            vector: None,
        }
    }

    fn ranked(points: &[(u64, f32)], higher_is_better: bool) -> Ranked {
        Ranked {
            points: points.iter().map(|&(id, s)| point(id, s)).collect(),
            higher_is_better,
        }
    }

    fn ids(points: &[ScoredPoint]) -> Vec<u64> {
        points
            .iter()
            .map(|p| match p.id {
                PointId::Num(n) => n,
                PointId::Uuid(_) => u64::MAX,
            })
            .collect()
    }

    /// Qdrant's numbers: at k = 2, first place is worth 1/2, second 1/3; a point first in one
    /// list and second in the other scores 5/6.
    #[test]
    fn rrf_adds_reciprocal_ranks() {
        let rrf = FusionPlan::Rrf {
            k: 2,
            weights: None,
        };
        let fused = fuse(
            vec![
                ranked(&[(1, 0.9), (2, 0.8)], true),
                ranked(&[(2, 5.0), (3, 1.0)], false),
            ],
            &rrf,
            0,
            10,
            None,
        );
        assert_eq!(ids(&fused), vec![2, 1, 3]);
        assert!((fused[0].score - (1.0 / 3.0 + 1.0 / 2.0)).abs() < 1e-6);
        assert!((fused[1].score - 0.5).abs() < 1e-6);
        // Weights: the second list counts three times.
        let weighted = FusionPlan::Rrf {
            k: 2,
            weights: Some(vec![1.0, 3.0]),
        };
        let fused = fuse(
            vec![ranked(&[(1, 0.9)], true), ranked(&[(3, 1.0)], true)],
            &weighted,
            0,
            10,
            None,
        );
        assert_eq!(ids(&fused), vec![3, 1]);
        assert!((fused[0].score - 1.0 / (1.0 / 3.0 + 1.0)).abs() < 1e-6);
        // Offset, limit and threshold apply to the fused list.
        let fused = fuse(
            vec![ranked(&[(1, 0.9), (2, 0.8), (3, 0.7)], true)],
            &rrf,
            1,
            1,
            None,
        );
        assert_eq!(ids(&fused), vec![2]);
        let fused = fuse(
            vec![ranked(&[(1, 0.9), (2, 0.8), (3, 0.7)], true)],
            &rrf,
            0,
            10,
            Some(0.3),
        );
        assert_eq!(ids(&fused), vec![1, 2]);
    }

    /// DBSF reads each list in its own direction: the nearest of a distance list (lowest) and
    /// the best of a similarity list (highest) both normalise near 1.
    #[test]
    fn dbsf_normalises_each_list_in_its_direction() {
        let fused = fuse(
            vec![
                ranked(&[(1, 0.9), (2, 0.5), (3, 0.1)], true),
                ranked(&[(3, 0.2), (2, 0.3), (1, 9.0)], false),
            ],
            &FusionPlan::Dbsf,
            0,
            10,
            None,
        );
        // First list: mean 0.5, sd 0.327, so 0.70, 0.50, 0.30 for points 1, 2, 3. Second
        // list (distances, lower better): mean 3.17, sd 4.13, so 0.26, 0.62, 0.62 for points
        // 1, 2, 3 (point 3 a hair above 2). Sums: 2 (1.12), then 1 (0.97), then 3 (0.92).
        assert_eq!(ids(&fused), vec![2, 1, 3]);
        assert!((fused[0].score - 1.116).abs() < 1e-2, "{fused:?}");
        let single = fuse(
            vec![ranked(&[(7, 4.0)], true)],
            &FusionPlan::Dbsf,
            0,
            10,
            None,
        );
        assert!((single[0].score - 0.5).abs() < 1e-6);
    }
}
