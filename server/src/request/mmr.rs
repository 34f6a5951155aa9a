//! Maximal marginal relevance (Carbonell and Goldstein, 1998), in Qdrant's reading: from the
//! query's nearest candidates, pick the most relevant first, then each time the candidate
//! that maximises `(1 − diversity) · relevance − diversity · (its highest similarity to a
//! pick so far)`. Results keep their similarity to the query as their score and come in the
//! order they were picked.
//!
//! Relevance and similarity are both read in the metric's key space, negated (higher is
//! closer), the same comparison the index ranks by; keeping the highest similarity to the
//! picks per candidate, updated with each new pick, costs `picks × candidates` distance
//! evaluations rather than all pairs.

use cairn_api::{Mmr, ScoredPoint};
use cairn_index::Metric;

use crate::config::Limits;
use crate::error::{Result, ServerError};

/// What an `mmr` query does with its candidates (checked by the query's plan).
#[derive(Debug, Clone, Copy)]
pub struct MmrPlan {
    /// From 0 (relevance only) to 1 (diversity only).
    pub diversity: f32,
    /// Results to skip, then to return, from the picking order.
    pub offset: usize,
    /// Results to return.
    pub limit: usize,
    /// Whether the caller asked for vectors (the candidates carry them regardless).
    pub with_vector: bool,
    /// Nearest points to pick from.
    pub candidates: usize,
}

/// Checks `mmr` (Qdrant's defaults: diversity 0.5, as many candidates as results).
pub(super) fn mmr_plan(
    mmr: Mmr,
    offset: usize,
    limit: usize,
    with_vector: bool,
    limits: &Limits,
    field: &str,
) -> Result<MmrPlan> {
    let diversity = mmr.diversity.unwrap_or(0.5);
    if !(0.0..=1.0).contains(&diversity) {
        return Err(ServerError::InvalidRequest(format!(
            "{field}query.mmr.diversity must be between 0 and 1, got {diversity}"
        )));
    }
    let candidates = mmr.candidates_limit.unwrap_or(offset + limit);
    if candidates > limits.max_limit {
        return Err(ServerError::LimitExceeded(format!(
            "{field}query.mmr.candidates_limit {candidates} is above the maximum of {} \
             (limits.max_limit)",
            limits.max_limit
        )));
    }
    Ok(MmrPlan {
        diversity,
        offset,
        limit,
        with_vector,
        candidates,
    })
}

/// The `plan.offset + plan.limit` picks from `candidates` (best first, carrying vectors),
/// after `plan.offset`, compared by their dense vector `name` under `metric`; vectors are
/// dropped unless the caller asked for them.
pub fn pick(
    candidates: Vec<ScoredPoint>,
    name: &str,
    metric: Metric,
    plan: &MmrPlan,
) -> Vec<ScoredPoint> {
    let key = metric.key_fn();
    let n = candidates.len();
    let take = (plan.offset + plan.limit).min(n);
    let relevance: Vec<f32> = candidates
        .iter()
        .map(|p| -metric.score_to_key(p.score))
        .collect();
    let vectors: Vec<Option<&[f32]>> = candidates
        .iter()
        .map(|p| p.vector.as_ref().and_then(|v| v.dense(name)))
        .collect();
    let weight = 1.0 - plan.diversity;
    let mut closest_pick = vec![f32::NEG_INFINITY; n];
    let mut open = vec![true; n];
    let mut order = Vec::with_capacity(take);
    while order.len() < take {
        let value = |i: usize| match order.is_empty() {
            true => relevance[i],
            false => weight * relevance[i] - plan.diversity * closest_pick[i],
        };
        let mut best: Option<(usize, f32)> = None;
        for i in (0..n).filter(|&i| open[i]) {
            let v = value(i);
            // Strictly better only: on a tie the nearer candidate (earlier) stays.
            if best.is_none_or(|(_, b)| v > b) {
                best = Some((i, v));
            }
        }
        let Some((chosen, _)) = best else { break };
        open[chosen] = false;
        order.push(chosen);
        if let Some(picked) = vectors[chosen] {
            for i in (0..n).filter(|&i| open[i]) {
                if let Some(v) = vectors[i] {
                    closest_pick[i] = closest_pick[i].max(-key(v, picked));
                }
            }
        }
    }
    let mut slots: Vec<Option<ScoredPoint>> = candidates.into_iter().map(Some).collect();
    order
        .into_iter()
        .skip(plan.offset)
        .filter_map(|i| slots[i].take())
        .map(|mut p| {
            if !plan.with_vector {
                p.vector = None;
            }
            p
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use cairn_api::{PointId, VectorOutput};

    use super::*;

    /// Candidates on a line from the query at 0: two near-duplicates close by, one far apart.
    fn candidates() -> Vec<ScoredPoint> {
        [(1, 1.0), (2, 1.1), (3, 4.0)]
            .into_iter()
            .map(|(id, x): (u64, f32)| ScoredPoint {
                id: PointId::Num(id),
                version: 1,
                score: Metric::L2.key_to_score(x * x),
                payload: None,
                vector: Some(VectorOutput::Dense(vec![x])),
            })
            .collect()
    }

    fn ids(diversity: f32, offset: usize, limit: usize) -> Vec<u64> {
        let plan = MmrPlan {
            diversity,
            offset,
            limit,
            with_vector: false,
            candidates: 3,
        };
        pick(candidates(), "", Metric::L2, &plan)
            .into_iter()
            .map(|p| match p.id {
                PointId::Num(n) => n,
                PointId::Uuid(_) => unreachable!(),
            })
            .collect()
    }

    #[test]
    fn diversity_trades_a_near_duplicate_for_a_distinct_point() {
        assert_eq!(ids(0.0, 0, 3), [1, 2, 3], "relevance only keeps the order");
        // L2 keys are squared distances: the far point is 16 from the query, so it takes a
        // strong wish for diversity to pass the duplicate (0.01 from the first pick).
        assert_eq!(ids(0.5, 0, 3), [1, 2, 3]);
        assert_eq!(
            ids(0.9, 0, 2),
            [1, 3],
            "the duplicate of the first pick waits"
        );
        assert_eq!(ids(0.9, 1, 2), [3, 2]);
        assert_eq!(ids(1.0, 0, 10), [1, 3, 2]);
        let plan = MmrPlan {
            diversity: 0.5,
            offset: 0,
            limit: 1,
            with_vector: true,
            candidates: 3,
        };
        let kept = pick(candidates(), "", Metric::L2, &plan);
        assert!(kept[0].vector.is_some(), "vectors kept when asked for");
        assert_eq!(
            kept[0].score,
            candidates()[0].score,
            "scores stay the query's"
        );
    }
}
