//! Recommendation from examples (Qdrant's `{"recommend": {"positive", "negative"}}` query)
//! with Qdrant's default strategy, `average_vector`: one search near
//! `2·mean(positive) − mean(negative)` (near `mean(positive)` without negatives), the examples
//! given by id left out of the results. The examples are checked here; the collection looks
//! the ids up, averages and searches ([`Examples::average`]).
//!
//! `best_score` and `sum_scores` score every candidate against each example rather than one
//! averaged query; they are refused until built, rather than answered as `average_vector`.

use std::collections::HashMap;

use cairn_api::{NearestTarget, PointId, RecommendInput, RecommendStrategy};

use super::points::check_vector;
use super::settings::DenseSpace;
use crate::error::{Result, ServerError};

/// Most examples of one query: each id is a point read before the search.
pub const MAX_EXAMPLES: usize = 1_024;

/// One example: a vector as sent (checked and prepared), or a stored point.
#[derive(Debug, Clone, PartialEq)]
pub enum Example {
    /// A dense vector.
    Vector(Vec<f32>),
    /// A point of the collection, by id.
    Point(PointId),
}

/// A recommendation's examples, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Examples {
    /// Like these.
    pub positive: Vec<Example>,
    /// Unlike these.
    pub negative: Vec<Example>,
}

impl Examples {
    /// The ids among the examples, each once: looked up before the search, left out of its
    /// results.
    pub fn ids(&self) -> Vec<PointId> {
        let mut ids: Vec<PointId> = self
            .positive
            .iter()
            .chain(&self.negative)
            .filter_map(|e| match e {
                Example::Point(id) => Some(*id),
                Example::Vector(_) => None,
            })
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// The query vector of `average_vector`, the ids' vectors taken from `stored` (an id
    /// missing there is a 404).
    pub fn average(
        &self,
        space: DenseSpace<'_>,
        stored: &HashMap<PointId, Vec<f32>>,
    ) -> Result<Vec<f32>> {
        let mean = |examples: &[Example]| -> Result<Option<Vec<f32>>> {
            let mut sum = vec![0f32; space.dim];
            for example in examples {
                let v = match example {
                    Example::Vector(v) => v,
                    Example::Point(id) => stored.get(id).ok_or(ServerError::PointNotFound(*id))?,
                };
                for (s, x) in sum.iter_mut().zip(v) {
                    *s += x;
                }
            }
            let n = examples.len() as f32;
            Ok((!examples.is_empty()).then(|| sum.into_iter().map(|s| s / n).collect()))
        };
        let positive = mean(&self.positive)?.unwrap_or_else(|| vec![0.0; space.dim]);
        let mut query = match mean(&self.negative)? {
            Some(negative) => positive
                .iter()
                .zip(&negative)
                .map(|(p, n)| 2.0 * p - n)
                .collect(),
            None => positive,
        };
        if query.iter().all(|x| *x == 0.0) {
            return Err(ServerError::InvalidRequest(
                "query.recommend: the examples cancel out (their average vector is zero), so \
                 nothing is nearer than anything else"
                    .into(),
            ));
        }
        space.metric().preprocess(&mut query);
        Ok(query)
    }
}

/// Checks a `recommend` query's examples against the collection (`field` is its path).
pub(super) fn examples(
    space: DenseSpace<'_>,
    input: RecommendInput,
    field: &str,
) -> Result<Examples> {
    let refused = match input.strategy {
        Some(RecommendStrategy::BestScore) => Some("best_score"),
        Some(RecommendStrategy::SumScores) => Some("sum_scores"),
        Some(RecommendStrategy::AverageVector) | None => None,
    };
    if let Some(name) = refused {
        return Err(ServerError::InvalidRequest(format!(
            "{field}.strategy `{name}` is not supported yet: Cairn recommends with \
             `average_vector` (one search near the examples' average)"
        )));
    }
    let check = |examples: Option<Vec<NearestTarget>>, side: &str| -> Result<Vec<Example>> {
        examples
            .unwrap_or_default()
            .into_iter()
            .enumerate()
            .map(|(i, example)| match example {
                NearestTarget::Vector(v) => Ok(Example::Vector(check_vector(
                    space,
                    v,
                    &format!("{field}.{side}[{i}]"),
                )?)),
                NearestTarget::Point(id) => Ok(Example::Point(id)),
                NearestTarget::Sparse(_) => Err(ServerError::InvalidRequest(format!(
                    "{field}.{side}[{i}] is a sparse vector; recommendations are made from \
                     dense vectors and point ids"
                ))),
            })
            .collect()
    };
    let examples = Examples {
        positive: check(input.positive, "positive")?,
        negative: check(input.negative, "negative")?,
    };
    if examples.positive.is_empty() {
        return Err(ServerError::InvalidRequest(format!(
            "{field}.positive: `average_vector` needs at least one positive example"
        )));
    }
    let n = examples.positive.len() + examples.negative.len();
    if n > MAX_EXAMPLES {
        return Err(ServerError::LimitExceeded(format!(
            "{field}: {n} examples is above the maximum of {MAX_EXAMPLES}"
        )));
    }
    Ok(examples)
}
