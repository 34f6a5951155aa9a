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

use cairn_api::{ContextPair, NearestTarget, PointId, RecommendInput, RecommendStrategy};

use cairn_index::distance::KeyFn;

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

/// How the examples make a ranking (Qdrant's `strategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// One search near the examples' average.
    AverageVector,
    /// Each candidate's best similarity to an example.
    BestScore,
    /// Each candidate's similarities to the positives, less those to the negatives.
    SumScores,
    /// Qdrant's discovery: the context pairs a candidate is on the positive side of, less
    /// those it is not, plus its (sigmoid) similarity to the target.
    Discover,
    /// Qdrant's context search: how far a candidate lies outside each pair's positive side.
    Context,
}

impl Strategy {
    /// Its name in messages.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::AverageVector => "average_vector",
            Strategy::BestScore => "best_score",
            Strategy::SumScores => "sum_scores",
            Strategy::Discover => "discover",
            Strategy::Context => "context",
        }
    }
}

/// A recommendation's examples, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Examples {
    /// Like these.
    pub positive: Vec<Example>,
    /// Unlike these.
    pub negative: Vec<Example>,
    /// `discover`'s target.
    pub target: Option<Example>,
    /// `discover`'s and `context`'s pairs, positive then negative.
    pub pairs: Vec<(Example, Example)>,
    /// How they rank the results.
    pub strategy: Strategy,
}

/// The examples' vectors, ids resolved (preprocessed as the collection stores vectors).
pub struct ExampleVectors {
    /// Like these.
    pub positive: Vec<Vec<f32>>,
    /// Unlike these.
    pub negative: Vec<Vec<f32>>,
    /// `discover`'s target.
    pub target: Option<Vec<f32>>,
    /// The context pairs, positive then negative.
    pub pairs: Vec<(Vec<f32>, Vec<f32>)>,
}

/// Qdrant's `fast_sigmoid`: a similarity mapped into (−1, 1), order kept.
fn fast_sigmoid(x: f32) -> f32 {
    x / (1.0 + x.abs())
}

/// Qdrant's `scaled_fast_sigmoid`: a similarity mapped into (0, 1), order kept, so that a
/// candidate nearest a positive always outranks one nearest a negative.
fn scaled_sigmoid(x: f32) -> f32 {
    0.5 * (fast_sigmoid(x) + 1.0)
}

impl Examples {
    /// The ids among the examples, each once: looked up before the search, left out of its
    /// results.
    pub fn ids(&self) -> Vec<PointId> {
        let mut ids: Vec<PointId> = self
            .positive
            .iter()
            .chain(&self.negative)
            .chain(&self.target)
            .chain(self.pairs.iter().flat_map(|(p, n)| [p, n]))
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
        let one = |e: &Example| -> Result<Vec<f32>> {
            match e {
                Example::Vector(v) => Ok(v.clone()),
                Example::Point(id) => stored
                    .get(id)
                    .cloned()
                    .ok_or(ServerError::PointNotFound(*id)),
            }
        };
        Ok(ExampleVectors {
            positive: self.positive.iter().map(one).collect::<Result<_>>()?,
            negative: self.negative.iter().map(one).collect::<Result<_>>()?,
            target: self.target.as_ref().map(one).transpose()?,
            pairs: self
                .pairs
                .iter()
                .map(|(p, n)| Ok((one(p)?, one(n)?)))
                .collect::<Result<_>>()?,
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
        match self.strategy {
            // Near the target, where discovery's score rises, and inside the pairs' positive
            // sides, around their positives.
            Strategy::Discover | Strategy::Context => {
                return vectors
                    .target
                    .iter()
                    .cloned()
                    .chain(vectors.pairs.iter().map(|(p, _)| p.clone()))
                    .collect()
            }
            Strategy::AverageVector | Strategy::BestScore | Strategy::SumScores => {}
        }
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
        if queries.is_empty() {
            // Negatives alone: the points least like them. For `Dot` and `Cosine` that is the
            // direction away from their sum; Euclid's farthest points are no nearest-neighbour
            // search, so there every point is scored ([`Examples::scores_every_point`]) and
            // this query only carries the search that fetches them.
            let mut away = vec![0f32; space.dim];
            for v in &vectors.negative {
                for (a, x) in away.iter_mut().zip(v) {
                    *a -= x;
                }
            }
            space.metric().preprocess(&mut away);
            queries.push(away);
        }
        queries
    }

    /// Whether a `best_score` or `sum_scores` ranking must score every point: negatives alone
    /// on a Euclid space, whose best candidates are the points farthest from them.
    pub fn scores_every_point(&self, space: DenseSpace<'_>) -> bool {
        self.positive.is_empty()
            && space.metric() == cairn_index::Metric::L2
            && matches!(self.strategy, Strategy::BestScore | Strategy::SumScores)
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
            Strategy::Discover => {
                let rank: f32 = vectors
                    .pairs
                    .iter()
                    .map(|(p, n)| {
                        if similarity(p) > similarity(n) {
                            1.0
                        } else {
                            -1.0
                        }
                    })
                    .sum();
                rank + vectors
                    .target
                    .as_ref()
                    .map_or(0.0, |t| scaled_sigmoid(similarity(t)))
            }
            // Qdrant's context loss: 0 on a pair's positive side (by a margin of one ulp),
            // a sigmoid of how far across otherwise.
            Strategy::Context => vectors
                .pairs
                .iter()
                .map(|(p, n)| fast_sigmoid((similarity(p) - similarity(n) - f32::EPSILON).min(0.0)))
                .sum(),
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
/// Checks one example: a dense vector (checked and prepared for `space`) or a point id.
fn example(space: DenseSpace<'_>, target: NearestTarget, field: &str) -> Result<Example> {
    match target {
        NearestTarget::Vector(v) => Ok(Example::Vector(check_vector(space, v, field)?)),
        NearestTarget::Point(id) => Ok(Example::Point(id)),
        NearestTarget::Sparse(_) => Err(ServerError::InvalidRequest(format!(
            "{field} is a sparse vector; examples are dense vectors and point ids"
        ))),
    }
}

/// Checks that a query's examples are within [`MAX_EXAMPLES`].
fn check_count(n: usize, field: &str) -> Result<()> {
    if n > MAX_EXAMPLES {
        return Err(ServerError::LimitExceeded(format!(
            "{field}: {n} examples is above the maximum of {MAX_EXAMPLES}"
        )));
    }
    Ok(())
}

/// Checks a `discover` query (`target` given) or a `context` one (`target` absent): at least
/// one pair, each of two examples.
pub(super) fn discovery(
    space: DenseSpace<'_>,
    target: Option<NearestTarget>,
    pairs: Vec<ContextPair>,
    field: &str,
) -> Result<Examples> {
    if pairs.is_empty() {
        return Err(ServerError::InvalidRequest(format!(
            "{field}.context: at least one pair {{\"positive\", \"negative\"}} is needed"
        )));
    }
    check_count(2 * pairs.len() + usize::from(target.is_some()), field)?;
    let strategy = if target.is_some() {
        Strategy::Discover
    } else {
        Strategy::Context
    };
    let pairs = pairs
        .into_iter()
        .enumerate()
        .map(|(i, pair)| {
            let at = format!("{field}.context[{i}]");
            Ok((
                example(space, pair.positive, &format!("{at}.positive"))?,
                example(space, pair.negative, &format!("{at}.negative"))?,
            ))
        })
        .collect::<Result<_>>()?;
    Ok(Examples {
        positive: Vec::new(),
        negative: Vec::new(),
        target: target
            .map(|t| example(space, t, &format!("{field}.target")))
            .transpose()?,
        pairs,
        strategy,
    })
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
            .map(|(i, e)| example(space, e, &format!("{field}.{side}[{i}]")))
            .collect()
    };
    let examples = Examples {
        positive: check(input.positive, "positive")?,
        negative: check(input.negative, "negative")?,
        target: None,
        pairs: Vec::new(),
        strategy,
    };
    // As in Qdrant: `average_vector` needs a positive (it searches near their mean); the
    // scoring strategies also take negatives alone, ranking the points least like them.
    match (
        examples.positive.is_empty(),
        examples.negative.is_empty(),
        strategy,
    ) {
        (true, _, Strategy::AverageVector) => {
            return Err(ServerError::InvalidRequest(format!(
                "{field}.positive: average_vector needs at least one positive example \
                 (best_score and sum_scores also take negatives alone)"
            )))
        }
        (true, true, _) => {
            return Err(ServerError::InvalidRequest(format!(
                "{field}: at least one positive or negative example is needed"
            )))
        }
        (false, _, _) | (true, false, _) => {}
    }
    check_count(examples.positive.len() + examples.negative.len(), field)?;
    Ok(examples)
}
