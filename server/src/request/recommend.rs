//! Recommendation from examples (Qdrant's `{"recommend": {"positive", "negative",
//! "strategy"}}` query). The examples are checked here; the collection looks the ids up and
//! searches ([`Examples::average`], [`Examples::score`]).
//!
//! - `average_vector` (Qdrant's default): one search near `2·mean(positive) − mean(negative)`
//!   (near `mean(positive)` without negatives).
//! - `best_score` and `sum_scores` score a candidate against every example: the best
//!   similarity to a positive, unless a negative is closer (then negative, Qdrant's sigmoid
//!   of it negated), or the sum of the similarities to the positives less the sum to the
//!   negatives. Qdrant walks its graph by that score; Cairn gathers candidates by searching
//!   near each positive example (and, for `sum_scores`, near the sum of the positives less
//!   the negatives) with room to spare, and ranks them by the score computed exactly.
//!
//! Either way the examples given by id are left out of the results.

use std::collections::HashMap;

use cairn_api::{NearestTarget, PointId, RecommendInput, RecommendStrategy};

use super::points::check_vector;
use cairn_index::distance::KeyFn;

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

/// How the examples make a ranking (Qdrant's `strategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// One search near the examples' average.
    AverageVector,
    /// Each candidate's best similarity to an example.
    BestScore,
    /// Each candidate's similarities to the positives, less those to the negatives.
    SumScores,
}

/// A recommendation's examples, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Examples {
    /// Like these.
    pub positive: Vec<Example>,
    /// Unlike these.
    pub negative: Vec<Example>,
    /// How they rank the results.
    pub strategy: Strategy,
}

/// The examples' vectors, ids resolved (preprocessed as the collection stores vectors).
pub struct ExampleVectors {
    /// Like these.
    pub positive: Vec<Vec<f32>>,
    /// Unlike these.
    pub negative: Vec<Vec<f32>>,
}

/// Qdrant's `scaled_fast_sigmoid`: a similarity mapped into (0, 1), order kept, so that a
/// candidate nearest a positive always outranks one nearest a negative.
fn scaled_sigmoid(x: f32) -> f32 {
    0.5 * (x / (1.0 + x.abs()) + 1.0)
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

    /// The examples' vectors, the ids' taken from `stored` (an id missing there is a 404).
    pub fn vectors(&self, stored: &HashMap<PointId, Vec<f32>>) -> Result<ExampleVectors> {
        let resolve = |examples: &[Example]| -> Result<Vec<Vec<f32>>> {
            examples
                .iter()
                .map(|e| match e {
                    Example::Vector(v) => Ok(v.clone()),
                    Example::Point(id) => stored
                        .get(id)
                        .cloned()
                        .ok_or(ServerError::PointNotFound(*id)),
                })
                .collect()
        };
        Ok(ExampleVectors {
            positive: resolve(&self.positive)?,
            negative: resolve(&self.negative)?,
        })
    }

    /// The vectors to gather `best_score` and `sum_scores` candidates near: each positive
    /// example, and for `sum_scores` the sum of the positives less the negatives (for `Dot`
    /// and `Cosine`, whose similarity is a dot product, exactly the direction that score
    /// ranks by), preprocessed for the space's metric.
    pub fn candidate_queries(
        &self,
        space: DenseSpace<'_>,
        vectors: &ExampleVectors,
    ) -> Vec<Vec<f32>> {
        let mut queries = vectors.positive.clone();
        if self.strategy == Strategy::SumScores {
            let mut sum = vec![0f32; space.dim];
            for (sign, list) in [(1.0, &vectors.positive), (-1.0, &vectors.negative)] {
                for v in list {
                    for (s, x) in sum.iter_mut().zip(v) {
                        *s += sign * x;
                    }
                }
            }
            if sum.iter().any(|x| *x != 0.0) {
                space.metric().preprocess(&mut sum);
                queries.push(sum);
            }
        }
        queries
    }

    /// A candidate's score under `best_score` or `sum_scores` (higher is better), from the
    /// space's similarity: the negated key (inner product, or negated squared distance).
    pub fn score(&self, key: KeyFn, candidate: &[f32], vectors: &ExampleVectors) -> f32 {
        let similarity = |v: &Vec<f32>| -key(candidate, v);
        match self.strategy {
            Strategy::BestScore | Strategy::AverageVector => {
                let best = |list: &[Vec<f32>]| {
                    list.iter()
                        .map(similarity)
                        .fold(f32::NEG_INFINITY, f32::max)
                };
                let (positive, negative) = (best(&vectors.positive), best(&vectors.negative));
                if positive > negative {
                    scaled_sigmoid(positive)
                } else {
                    -scaled_sigmoid(negative)
                }
            }
            Strategy::SumScores => {
                vectors.positive.iter().map(similarity).sum::<f32>()
                    - vectors.negative.iter().map(similarity).sum::<f32>()
            }
        }
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
    let strategy = match input.strategy {
        Some(RecommendStrategy::BestScore) => Strategy::BestScore,
        Some(RecommendStrategy::SumScores) => Strategy::SumScores,
        Some(RecommendStrategy::AverageVector) | None => Strategy::AverageVector,
    };
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
        strategy,
    };
    // Qdrant's `best_score` and `sum_scores` also take negatives alone (the points least like
    // them); Cairn gathers candidates near positives, so it needs one.
    if examples.positive.is_empty() {
        return Err(ServerError::InvalidRequest(format!(
            "{field}.positive: at least one positive example is needed"
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
