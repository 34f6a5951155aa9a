//! Merging per-partition answers into one. Pure functions, shared by every fan-out (local
//! partitions, or replicas on other nodes of a cluster).

use std::collections::HashSet;

use cairn_api::{Record, ScoredPoint};
use cairn_index::Metric;

/// The best `limit` hits after skipping `offset`, from lists each holding a partition's best
/// `offset + limit`. A point stored in several partitions (a replicated large-norm point)
/// counts once; ties break by id so the order is the same however the lists arrive.
pub fn top_hits(
    metric: Metric,
    lists: Vec<Vec<ScoredPoint>>,
    offset: usize,
    limit: usize,
) -> Vec<ScoredPoint> {
    let mut all: Vec<ScoredPoint> = lists.into_iter().flatten().collect();
    let higher = metric.higher_is_better();
    all.sort_by(|a, b| {
        let by_score = if higher {
            b.score.total_cmp(&a.score)
        } else {
            a.score.total_cmp(&b.score)
        };
        by_score.then(a.id.cmp(&b.id))
    });
    let mut seen = HashSet::with_capacity(all.len());
    all.into_iter()
        .filter(|p| seen.insert(p.id))
        .skip(offset)
        .take(limit)
        .collect()
}

/// One scroll page of `limit` records in id order and the id that starts the next page, from
/// pages each holding a partition's first `limit + 1` records from the same offset.
pub fn scroll_page(
    pages: Vec<Vec<Record>>,
    limit: usize,
) -> (Vec<Record>, Option<cairn_api::PointId>) {
    let mut all: Vec<Record> = pages.into_iter().flatten().collect();
    all.sort_by_key(|r| r.id);
    all.dedup_by(|b, a| a.id == b.id);
    let next = all.get(limit).map(|r| r.id);
    all.truncate(limit);
    (all, next)
}

/// Merges partitions' pages of a scroll ordered by a payload value: by value (largest first
/// when `descending`), then id; a (point, value) pair once (a spilled point comes from two
/// partitions), while a point holding several values comes once per value, as in Qdrant.
pub fn ordered_page(pages: Vec<Vec<Record>>, limit: usize, descending: bool) -> Vec<Record> {
    let mut all: Vec<Record> = pages.into_iter().flatten().collect();
    let value = |r: &Record| {
        r.order_value
            .as_ref()
            .and_then(serde_json::Number::as_f64)
            .unwrap_or(f64::NAN)
    };
    all.sort_by(|a, b| {
        let by_value = value(a).total_cmp(&value(b));
        let by_value = if descending {
            by_value.reverse()
        } else {
            by_value
        };
        by_value.then(a.id.cmp(&b.id))
    });
    all.dedup_by(|b, a| a.id == b.id && value(a).total_cmp(&value(b)).is_eq());
    all.truncate(limit);
    all
}

#[cfg(test)]
mod tests {
    use cairn_api::PointId;

    use super::*;

    fn hit(id: u64, score: f32) -> ScoredPoint {
        ScoredPoint {
            id: PointId::Num(id),
            version: 1,
            score,
            payload: None,
            vector: None,
        }
    }

    fn ids(hits: &[ScoredPoint]) -> Vec<u64> {
        hits.iter()
            .map(|h| match h.id {
                PointId::Num(n) => n,
                PointId::Uuid(_) => u64::MAX,
            })
            .collect()
    }

    #[test]
    fn hits_merge_by_score_in_the_metric_direction_without_duplicates() {
        let lists = vec![
            vec![hit(1, 0.1), hit(2, 0.5), hit(9, 0.9)],
            vec![hit(3, 0.2), hit(2, 0.5)],
        ];
        assert_eq!(ids(&top_hits(Metric::L2, lists.clone(), 0, 3)), [1, 3, 2]);
        assert_eq!(
            ids(&top_hits(Metric::InnerProduct, lists.clone(), 0, 3)),
            [9, 2, 3]
        );
        assert_eq!(ids(&top_hits(Metric::L2, lists, 1, 10)), [3, 2, 9]);
    }

    #[test]
    fn scroll_pages_merge_in_id_order_and_name_the_next_page() {
        let rec = |id| Record {
            id: PointId::Num(id),
            payload: None,
            vector: None,
            order_value: None,
        };
        let pages = vec![vec![rec(1), rec(4), rec(5)], vec![rec(2), rec(4), rec(7)]];
        let (page, next) = scroll_page(pages, 3);
        assert_eq!(
            page.iter().map(|r| r.id).collect::<Vec<_>>(),
            [PointId::Num(1), PointId::Num(2), PointId::Num(4)]
        );
        assert_eq!(next, Some(PointId::Num(5)));
    }
}
