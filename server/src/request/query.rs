//! Query and scroll requests into plans: every limit checked and every field validated
//! against the collection's settings, so that what reaches a partition can run as it is.

use cairn_api::internal::{OrderPlan, PayloadSelection, QueryTarget, ScrollPlan, SearchPlan};
use cairn_api::{
    Direction, NearestTarget, PointId, QueryInput, QueryRequest, QueryResponse, ScrollRequest,
    SparseVector, StartFrom, WithVector,
};
use cairn_index::IndexParams;

use super::filter::validate;
use super::mmr::{mmr_plan, pick, MmrPlan};
use super::points::check_vector;
use super::recommend::{discovery, examples, Examples, Strategy};
use super::CollectionSettings;
use crate::config::Limits;
use crate::error::{Result, ServerError};

/// Default number of results, as in Qdrant.
const DEFAULT_LIMIT: usize = 10;
/// Default scroll page, as in Qdrant.
const DEFAULT_SCROLL_LIMIT: usize = 10;
/// Largest `params.probe` and `params.branching` (a meta-index has at most 65,536 centres; a
/// query looking up more than a few thousand is a broadcast in disguise).
const MAX_BRANCHING: usize = 4096;

/// A validated k-NN query of a collection: the search each partition runs, and how the
/// collection fans it out.
#[derive(Debug, Clone)]
pub struct QueryPlan {
    /// The search every partition asked runs (for a partitioned collection, each partition
    /// returns its top `offset + limit` and the collection merges).
    pub search: SearchPlan,
    /// How the collection picks partitions and replicas.
    pub fan_out: FanOut,
    /// Diversity re-ranking of the search's hits (`nearest` with `mmr`): the search then
    /// fetches the candidates, with their vectors, and [`QueryPlan::finish`] picks from them.
    pub mmr: Option<MmrPlan>,
    /// The vectors the caller named, when it named some: partitions return all of a point's
    /// vectors, and [`QueryPlan::finish`] keeps these.
    pub vectors: Option<WithVector>,
    /// A recommendation's examples: the collection reads the ids' vectors, makes the query
    /// vector from them into `search.target` (which holds an empty vector until then) and
    /// leaves the ids out of the results.
    pub examples: Option<Examples>,
}

impl QueryPlan {
    /// The answer to the caller: an `mmr` query's candidates re-ranked for diversity, and
    /// only the vectors asked for.
    pub fn finish(
        &self,
        mut response: QueryResponse,
        settings: &CollectionSettings,
    ) -> QueryResponse {
        if let Some(mmr) = &self.mmr {
            let space = settings.searched_space(self.search.using.as_deref());
            response.points = pick(response.points, space.name, space.metric(), mmr);
        }
        if let Some(names) = &self.vectors {
            for point in &mut response.points {
                point.vector = point
                    .vector
                    .take()
                    .and_then(|v| settings.pick_vectors(v, names));
            }
        }
        response
    }

    /// Whether the answer ranks higher scores first: similarities and sparse dot products
    /// do, Euclidean distances do not.
    pub fn higher_is_better(&self, settings: &CollectionSettings) -> bool {
        // Recommendation scores other than `average_vector`'s rank higher first, whatever
        // the distance.
        if self
            .examples
            .as_ref()
            .is_some_and(|e| e.strategy != Strategy::AverageVector)
        {
            return true;
        }
        match self.search.target {
            QueryTarget::Sparse { .. } => true,
            QueryTarget::Vector(_) | QueryTarget::Point(_) => settings
                .searched_space(self.search.using.as_deref())
                .metric()
                .higher_is_better(),
        }
    }
}

/// The collection-level knobs of a query: which partitions, and how replicas are read.
#[derive(Debug, Clone, Copy)]
pub struct FanOut {
    /// Partitioned collections: meta-index centres to look up (`None`: the collection's
    /// default).
    pub branching: Option<usize>,
    /// Partitioned collections: most partitions to visit.
    pub probe: Option<usize>,
    /// Cluster: answer from the partitions that have a live replica when some have none
    /// (`false`: fail with 503 instead).
    pub allow_partial: bool,
    /// Cluster: straggler mitigation (replica choice by load and latency, hedged reads).
    pub hedge: bool,
}

impl Default for FanOut {
    fn default() -> Self {
        Self {
            branching: None,
            probe: None,
            allow_partial: true,
            hedge: true,
        }
    }
}

/// Checks a query's `hnsw_ef`. For a norm scan it counts the items scanned, which the
/// collection bounds as it bounds an `exact` query, so the graphs' maximum does not apply.
fn check_ef(ef: Option<usize>, limits: &Limits, counts_items: bool, field: &str) -> Result<()> {
    match ef {
        Some(ef) if ef > limits.max_ef && !counts_items => {
            Err(ServerError::LimitExceeded(format!(
                "{field}params.hnsw_ef {ef} is above the maximum of {}",
                limits.max_ef
            )))
        }
        Some(0) => Err(ServerError::InvalidRequest(format!(
            "{field}params.hnsw_ef must be at least 1"
        ))),
        Some(_) | None => Ok(()),
    }
}

fn check_routing_knobs(
    settings: &CollectionSettings,
    knobs: [(&str, Option<usize>); 2],
    field: &str,
) -> Result<()> {
    let partitioned = settings.partitions() > 1;
    for (knob, value) in knobs {
        match value {
            None => {}
            Some(_) if !partitioned => {
                return Err(ServerError::InvalidRequest(format!(
                    "{field}params.{knob}: this collection is not partitioned, so there is \
                     nothing to route; leave {knob} out"
                )))
            }
            Some(0) => {
                return Err(ServerError::InvalidRequest(format!(
                    "{field}params.{knob} must be at least 1"
                )))
            }
            Some(n) if n > MAX_BRANCHING => {
                return Err(ServerError::LimitExceeded(format!(
                    "{field}params.{knob} {n} is above the maximum of {MAX_BRANCHING}"
                )))
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// What a query's `query` asks for, `{"nearest": …}` unwrapped.
enum Asked {
    Dense(Vec<f32>),
    Point(PointId),
    Sparse(SparseVector),
    Recommend,
    Fusion,
    Nothing,
}

impl From<Option<QueryInput>> for Asked {
    fn from(query: Option<QueryInput>) -> Self {
        match query {
            Some(
                QueryInput::Vector(v)
                | QueryInput::Nearest {
                    nearest: NearestTarget::Vector(v),
                    ..
                },
            ) => Asked::Dense(v),
            Some(
                QueryInput::Point(id)
                | QueryInput::Nearest {
                    nearest: NearestTarget::Point(id),
                    ..
                },
            ) => Asked::Point(id),
            Some(
                QueryInput::Sparse(v)
                | QueryInput::Nearest {
                    nearest: NearestTarget::Sparse(v),
                    ..
                },
            ) => Asked::Sparse(v),
            Some(
                QueryInput::Recommend { .. }
                | QueryInput::Discover { .. }
                | QueryInput::Context { .. },
            ) => Asked::Recommend,
            Some(QueryInput::Fusion { .. } | QueryInput::Rrf { .. }) => Asked::Fusion,
            None => Asked::Nothing,
        }
    }
}

/// A query's target, and the named vector beside the main one it searches (`None`: the
/// main vector, or a sparse one).
fn target(
    settings: &CollectionSettings,
    query: Option<QueryInput>,
    using: &str,
    field: &str,
) -> Result<(QueryTarget, Option<String>)> {
    let vector_field = format!("{field}query");
    let asked = Asked::from(query);
    let sparse_space = settings.sparse_vectors.contains_key(using);
    // A sparse query names its space in `using`: say so before any complaint about `using`.
    let space = if !sparse_space && !matches!(asked, Asked::Sparse(_)) {
        Some(settings.space(using, &format!("{field}using"))?)
    } else {
        None
    };
    let extra = space
        .filter(|s| s.extra.is_some())
        .map(|s| s.name.to_owned());
    let refused = |message: String| Err(ServerError::InvalidRequest(message));
    let target = match (asked, space) {
        (Asked::Dense(v), Some(space)) => {
            QueryTarget::Vector(check_vector(space, v, &vector_field)?)
        }
        (Asked::Point(id), Some(_)) => QueryTarget::Point(id),
        // Made from the examples by the collection (`QueryPlan::examples`).
        (Asked::Recommend, Some(_)) => QueryTarget::Vector(Vec::new()),
        (Asked::Recommend, None) => {
            return refused(format!(
                "{vector_field}: recommendations and discovery work on dense vectors, and `using` names \
                 the sparse vector `{using}`"
            ))
        }
        (Asked::Sparse(v), None) if sparse_space => QueryTarget::Sparse {
            name: using.to_owned(),
            vector: v
                .checked()
                .map_err(|e| ServerError::InvalidVector(format!("{vector_field}: {e}")))?,
        },
        (Asked::Sparse(_), _) => {
            return refused(format!(
                "{vector_field} is a sparse vector, and `using` names {}; name one of the \
                 collection's sparse vectors in `using`",
                describe(using)
            ))
        }
        (Asked::Point(_), None) => {
            return refused(format!(
                "{vector_field}: a query by point id on the sparse vector `{using}` is not \
                 supported; send the sparse vector itself"
            ))
        }
        (Asked::Dense(_), None) => {
            return refused(format!(
                "{vector_field} is a dense vector, but `using` names the sparse vector \
                 `{using}`; send {{\"indices\": […], \"values\": […]}}"
            ))
        }
        (Asked::Fusion, _) => {
            return refused(format!(
                "{vector_field}: a fusion merges the results of `prefetch`, and there is none"
            ))
        }
        (Asked::Nothing, _) => {
            return refused(format!(
                "{vector_field} is required: a vector, a point id or {{\"nearest\": …}} (list \
                 points with /points/scroll)"
            ))
        }
    };
    Ok((target, extra))
}

/// `using` as messages name it.
fn describe(using: &str) -> String {
    if using.is_empty() {
        "the dense vector (none given)".to_owned()
    } else {
        format!("`{using}`")
    }
}

/// A query's `limit` and `offset` (Qdrant's defaults filled in), checked against the limits,
/// and its `score_threshold` checked finite.
pub(super) fn check_page(
    request: &QueryRequest,
    limits: &Limits,
    field: &str,
) -> Result<(usize, usize)> {
    let limit = request.limit.unwrap_or(DEFAULT_LIMIT);
    let offset = request.offset.unwrap_or(0);
    if limit.saturating_add(offset) > limits.max_limit {
        return Err(ServerError::LimitExceeded(format!(
            "{field}limit + offset = {} is above the maximum of {}",
            limit.saturating_add(offset),
            limits.max_limit
        )));
    }
    if request.score_threshold.is_some_and(|t| !t.is_finite()) {
        return Err(ServerError::InvalidRequest(format!(
            "{field}score_threshold must be finite"
        )));
    }
    Ok((limit, offset))
}

/// Validates a query against the collection's settings and the limits; `field` prefixes
/// error paths (`searches[3].` in a batch).
pub fn plan(
    settings: &CollectionSettings,
    request: QueryRequest,
    limits: &Limits,
    field: &str,
) -> Result<QueryPlan> {
    if request.prefetch.as_ref().is_some_and(|p| !p.is_empty()) {
        return Err(ServerError::Internal(
            "a query with prefetch reached the one-search planner".into(),
        ));
    }
    let using = request.using.clone().unwrap_or_default();
    let (limit, offset) = check_page(&request, limits, field)?;
    let params = request.params.unwrap_or_default();
    let counts_items = settings
        .dense_space(&using)
        .is_some_and(|space| matches!(space.index, IndexParams::NormScan(_)));
    check_ef(params.hnsw_ef, limits, counts_items, field)?;
    check_routing_knobs(
        settings,
        [("probe", params.probe), ("branching", params.branching)],
        field,
    )?;
    if let Some(oversampling) = params.quantization.and_then(|q| q.oversampling) {
        if !(oversampling.is_finite() && oversampling >= 1.0) {
            return Err(ServerError::InvalidRequest(format!(
                "{field}params.quantization.oversampling must be a finite number of at least 1, \
                 not {oversampling}"
            )));
        }
    }
    if let Some(filter) = &request.filter {
        validate(filter, &format!("{field}filter"), limits.max_filter_depth)?;
    }
    let mmr = match &request.query {
        Some(QueryInput::Nearest { mmr: Some(m), .. }) => Some(*m),
        _ => None,
    };
    let examples = match (&request.query, settings.dense_space(&using)) {
        (Some(QueryInput::Recommend { recommend }), Some(space)) => Some(examples(
            space,
            recommend.clone(),
            &format!("{field}query.recommend"),
        )?),
        (Some(QueryInput::Discover { discover }), Some(space)) => Some(discovery(
            space,
            Some(discover.target.clone()),
            discover.context.clone().into_pairs(),
            &format!("{field}query.discover"),
        )?),
        (Some(QueryInput::Context { context }), Some(space)) => Some(discovery(
            space,
            None,
            context.clone().into_pairs(),
            &format!("{field}query"),
        )?),
        // A recommendation `using` a sparse vector (or none the collection has) is refused
        // with the target below.
        _ => None,
    };
    let (target, extra) = target(settings, request.query, &using, field)?;
    if mmr.is_some() && matches!(target, QueryTarget::Sparse { .. }) {
        return Err(ServerError::InvalidRequest(format!(
            "{field}query.mmr: diversity is measured between dense vectors; a sparse query \
             cannot use it"
        )));
    }
    let with_vector = settings.wants_vector(request.with_vector.as_ref(), field)?;
    let vectors = match &request.with_vector {
        Some(names @ WithVector::Names(_)) => Some(names.clone()),
        Some(WithVector::Enable(_)) | None => None,
    };
    let mmr = mmr
        .map(|m| mmr_plan(m, offset, limit, with_vector, limits, field))
        .transpose()?;
    // An `mmr` query's search fetches the candidates, with the vectors the picking compares.
    let (search_limit, search_offset) = match &mmr {
        Some(m) => (m.candidates, 0),
        None => (limit, offset),
    };
    let quantization = params.quantization.unwrap_or_default();
    // `ignore` means "search the full vectors": on a quantized collection that is the exact
    // scan, on a graph with row codes a traversal of the full rows; elsewhere there are no
    // codes to ignore (Qdrant's reading too).
    let ignore = quantization.ignore == Some(true);
    let quantized = matches!(settings.index, IndexParams::Quantized(_));
    let ignore_codes = quantized && ignore;
    Ok(QueryPlan {
        search: SearchPlan {
            target,
            using: extra,
            filter: request.filter,
            limit: search_limit,
            offset: search_offset,
            ef: params.hnsw_ef,
            exact: params.exact.unwrap_or(false) || ignore_codes,
            oversampling: quantization.oversampling.map(|o| o as f32),
            rescore: quantization.rescore,
            ignore_quantization: ignore,
            score_threshold: request.score_threshold,
            with_payload: PayloadSelection::from_wire(request.with_payload, false),
            with_vector: with_vector || mmr.is_some(),
            explain: request.explain.unwrap_or(false),
            among: None,
        },
        fan_out: FanOut {
            branching: params.branching,
            probe: params.probe,
            allow_partial: params.allow_partial.unwrap_or(true),
            hedge: params.hedge.unwrap_or(true),
        },
        mmr,
        vectors,
        examples,
    })
}

/// Checks a batch: how many queries, and how many results they ask for in all.
pub fn check_batch(
    searches: impl ExactSizeIterator<Item = (Option<usize>, Option<usize>)>,
    limits: &Limits,
) -> Result<()> {
    let n = searches.len();
    if n > limits.max_batch_queries {
        return Err(ServerError::LimitExceeded(format!(
            "searches: {n} queries is above the maximum of {} per batch",
            limits.max_batch_queries
        )));
    }
    // Each query's own `limit + offset` is checked with it; here the batch's sum, which
    // bounds the hits one request gathers and sends back (queries × limit).
    let results = searches
        .map(|(limit, offset)| {
            limit
                .unwrap_or(DEFAULT_LIMIT)
                .saturating_add(offset.unwrap_or(0))
        })
        .fold(0usize, usize::saturating_add);
    if results > limits.max_batch_results {
        return Err(ServerError::LimitExceeded(format!(
            "searches: the batch asks for {results} results in all (the sum of limit + offset), \
             above the maximum of {} per batch",
            limits.max_batch_results
        )));
    }
    Ok(())
}

/// Validates a scroll request.
pub fn scroll_plan(
    settings: &CollectionSettings,
    request: ScrollRequest,
    limits: &Limits,
) -> Result<ScrollPlan> {
    let limit = request.limit.unwrap_or(DEFAULT_SCROLL_LIMIT);
    if limit > limits.max_limit {
        return Err(ServerError::LimitExceeded(format!(
            "limit {limit} is above the maximum of {}",
            limits.max_limit
        )));
    }
    if let Some(f) = &request.filter {
        validate(f, "filter", limits.max_filter_depth)?;
    }
    let order_by = match request.order_by {
        None => None,
        Some(_) if request.offset.is_some() => {
            return Err(ServerError::InvalidRequest(
                "offset pages through ids; with order_by, ask for the next page with \
                 order_by.start_from (the last value returned)"
                    .into(),
            ))
        }
        Some(order) if order.key.is_empty() => {
            return Err(ServerError::InvalidRequest(
                "order_by.key must not be empty".into(),
            ))
        }
        Some(order) if order.start_from.is_some_and(|v| !v.value().is_finite()) => {
            return Err(ServerError::InvalidRequest(
                "order_by.start_from must be finite".into(),
            ))
        }
        Some(order) => Some(OrderPlan {
            key: order.key,
            descending: order.direction == Some(Direction::Desc),
            start_from: order.start_from.map(StartFrom::value),
        }),
    };
    Ok(ScrollPlan {
        offset: request.offset,
        limit,
        filter: request.filter,
        with_payload: PayloadSelection::from_wire(request.with_payload, true),
        with_vector: settings.wants_vector(request.with_vector.as_ref(), "")?,
        order_by,
    })
}
