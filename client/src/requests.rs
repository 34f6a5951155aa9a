//! Builders for every request, named after the REST call they make.
//!
//! Each builder starts from what the call cannot do without (the collection, the vector, the
//! points) and takes everything else through chained setters, so a call reads like the JSON
//! it sends and new options never break existing code.

use cairn_api::{
    CountRequest, CreateCollection, DeletePointsRequest, Distance, Filter, GetPointsRequest,
    HnswConfigDiff, IndexConfig, PointId, PointStruct, QuantizationSearchParams, QueryInput,
    QueryRequest, ReadConsistency, ScrollRequest, SearchParams, WithPayload, WithVector,
};

/// The setters every builder with a `request.filter` shares.
macro_rules! filter_setter {
    ($builder:ty, $doc:literal) => {
        impl $builder {
            #[doc = $doc]
            pub fn filter(mut self, filter: Filter) -> Self {
                self.request.filter = Some(filter);
                self
            }
        }
    };
}

/// The setters every builder that returns points shares; `$payload_default` documents what
/// the server does when `with_payload` is not sent.
macro_rules! selection_setters {
    ($builder:ty, $payload_default:literal) => {
        impl $builder {
            #[doc = concat!("Return payloads (default ", $payload_default, ").")]
            pub fn with_payload(mut self, on: bool) -> Self {
                self.request.with_payload = Some(WithPayload::Enable(on));
                self
            }

            /// Return vectors (default false).
            pub fn with_vector(mut self, on: bool) -> Self {
                self.request.with_vector = Some(WithVector::Enable(on));
                self
            }
        }
    };
}

/// The setter every read shares: how fresh its answer must be.
macro_rules! consistency_setter {
    ($builder:ty) => {
        impl $builder {
            /// How fresh the answer must be (default: the client's read-your-writes token if
            /// it keeps one, else any replica). [`ReadConsistency::Linearizable`] sees every
            /// write acknowledged before the call; [`ReadConsistency::After`] a write's
            /// `read_token` and all before it.
            pub fn consistency(mut self, consistency: ReadConsistency) -> Self {
                self.consistency = Some(consistency);
                self
            }
        }
    };
}

consistency_setter!(GetPoints);
consistency_setter!(ScrollPoints);
consistency_setter!(CountPoints);
consistency_setter!(QueryPoints);
filter_setter!(DeletePoints, "Deletes every point matching `filter`.");
filter_setter!(ScrollPoints, "Only points matching `filter`.");
filter_setter!(CountPoints, "Counts only points matching `filter`.");
filter_setter!(QueryPoints, "Only points matching `filter`.");
selection_setters!(GetPoints, "true");
selection_setters!(ScrollPoints, "true");
selection_setters!(QueryPoints, "false");

/// `PUT /collections/{name}`.
#[derive(Debug, Clone)]
pub struct CreateCollectionBuilder {
    pub(crate) name: String,
    pub(crate) request: CreateCollection,
}

impl CreateCollectionBuilder {
    /// A collection of `size`-dimensional vectors compared by `distance`.
    pub fn new(name: impl Into<String>, size: usize, distance: Distance) -> Self {
        Self {
            name: name.into(),
            request: CreateCollection::new(size, distance),
        }
    }

    /// HNSW settings (links per node, construction and default search candidate lists).
    pub fn hnsw(mut self, config: HnswConfigDiff) -> Self {
        self.request.hnsw_config = Some(config);
        self
    }

    /// The index kind (`hnsw` by default; `flat` for exact search only).
    pub fn index(mut self, index: IndexConfig) -> Self {
        self.request.index = Some(index);
        self
    }

    /// Number of partitions (Qdrant's `shard_number`).
    pub fn partitions(mut self, partitions: u32) -> Self {
        self.request.shard_number = Some(partitions);
        self
    }

    /// Share of points also stored in a second partition (partitioned collections; see
    /// [`cairn_api::CreateCollection::spill`]).
    pub fn spill(mut self, share: f64) -> Self {
        self.request.spill = Some(share);
        self
    }

    /// Copies of each partition.
    pub fn replication_factor(mut self, copies: u32) -> Self {
        self.request.replication_factor = Some(copies);
        self
    }

    /// Replicas that must acknowledge a write.
    pub fn write_consistency_factor(mut self, replicas: u32) -> Self {
        self.request.write_consistency_factor = Some(replicas);
        self
    }

    /// Quantization settings as JSON: Qdrant's `{"scalar": {"type": "int8"}}` or
    /// `{"binary": {}}` (codes a graph walks by, re-ranked by the full vectors), or Cairn's
    /// `{"neq": {"codec": "pq", "m": 8}}` for `Dot`; a server that cannot honour them refuses
    /// the collection with a message.
    pub fn quantization(mut self, config: serde_json::Value) -> Self {
        self.request.quantization_config = Some(config);
        self
    }

    /// The request body as sent.
    pub fn request(&self) -> &CreateCollection {
        &self.request
    }
}

/// `PUT /collections/{c}/points`.
#[derive(Debug, Clone)]
pub struct UpsertPoints {
    pub(crate) collection: String,
    pub(crate) points: Vec<PointStruct>,
    pub(crate) wait: bool,
}

impl UpsertPoints {
    /// Inserts or replaces `points` (a point with an existing id replaces it).
    pub fn new<P: Into<PointStruct>>(
        collection: impl Into<String>,
        points: impl IntoIterator<Item = P>,
    ) -> Self {
        Self {
            collection: collection.into(),
            points: points.into_iter().map(Into::into).collect(),
            wait: true,
        }
    }

    /// `true` (the default): answer once the points are searchable. `false`: once they are
    /// durable, which is faster and just as safe, but a search right after may miss them.
    pub fn wait(mut self, wait: bool) -> Self {
        self.wait = wait;
        self
    }
}

/// `POST /collections/{c}/points`: points by id.
#[derive(Debug, Clone)]
pub struct GetPoints {
    pub(crate) collection: String,
    pub(crate) request: GetPointsRequest,
    pub(crate) consistency: Option<ReadConsistency>,
}

impl GetPoints {
    /// Fetches `ids` (missing ids are skipped), with payloads and without vectors by default.
    pub fn new<I: Into<PointId>>(
        collection: impl Into<String>,
        ids: impl IntoIterator<Item = I>,
    ) -> Self {
        Self {
            collection: collection.into(),
            request: GetPointsRequest {
                ids: ids.into_iter().map(Into::into).collect(),
                ..GetPointsRequest::default()
            },
            consistency: None,
        }
    }
}

/// `POST /collections/{c}/points/delete`.
#[derive(Debug, Clone)]
pub struct DeletePoints {
    pub(crate) collection: String,
    pub(crate) request: DeletePointsRequest,
    pub(crate) wait: bool,
}

impl DeletePoints {
    /// Deletes nothing until [`DeletePoints::ids`] or [`DeletePoints::filter`] says what.
    pub fn new(collection: impl Into<String>) -> Self {
        Self {
            collection: collection.into(),
            request: DeletePointsRequest::default(),
            wait: true,
        }
    }

    /// Deletes these ids.
    pub fn ids<I: Into<PointId>>(mut self, ids: impl IntoIterator<Item = I>) -> Self {
        self.request.points = Some(ids.into_iter().map(Into::into).collect());
        self
    }

    /// Answer once the deletion is visible to searches (default true).
    pub fn wait(mut self, wait: bool) -> Self {
        self.wait = wait;
        self
    }
}

/// `POST /collections/{c}/points/scroll`: a page of points in id order.
#[derive(Debug, Clone)]
pub struct ScrollPoints {
    pub(crate) collection: String,
    pub(crate) request: ScrollRequest,
    pub(crate) consistency: Option<ReadConsistency>,
}

impl ScrollPoints {
    /// The first page (10 points, with payloads).
    pub fn new(collection: impl Into<String>) -> Self {
        Self {
            collection: collection.into(),
            request: ScrollRequest::default(),
            consistency: None,
        }
    }

    /// Page size.
    pub fn limit(mut self, limit: usize) -> Self {
        self.request.limit = Some(limit);
        self
    }

    /// Start at this id (a previous page's `next_page_offset`).
    pub fn offset(mut self, offset: impl Into<PointId>) -> Self {
        self.request.offset = Some(offset.into());
        self
    }
}

/// `POST /collections/{c}/points/count`.
#[derive(Debug, Clone)]
pub struct CountPoints {
    pub(crate) collection: String,
    pub(crate) request: CountRequest,
    pub(crate) consistency: Option<ReadConsistency>,
}

impl CountPoints {
    /// Counts every point.
    pub fn new(collection: impl Into<String>) -> Self {
        Self {
            collection: collection.into(),
            request: CountRequest::default(),
            consistency: None,
        }
    }
}

/// `POST /collections/{c}/points/query`: the k nearest points to a vector or to a stored point.
///
/// ```no_run
/// use cairn_client::api::{Condition, Filter, Range};
/// use cairn_client::{Client, QueryPoints};
///
/// # async fn run(client: Client) -> Result<(), cairn_client::Error> {
/// let answer = client
///     .query(
///         QueryPoints::new("cities")
///             .vector(vec![0.2, 0.1, 0.9, 0.7])
///             .limit(5)
///             .filter(Filter::must([Condition::range(
///                 "population",
///                 Range { gt: Some(5.0), ..Range::default() },
///             )]))
///             .ef(128)
///             .with_payload(true)
///             .explain(true),
///     )
///     .await?;
/// for hit in &answer.points {
///     println!("{} scored {}", hit.id, hit.score);
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct QueryPoints {
    pub(crate) collection: String,
    pub(crate) request: QueryRequest,
    pub(crate) consistency: Option<ReadConsistency>,
}

impl QueryPoints {
    /// A query of `collection`; say what to search near with [`QueryPoints::vector`] or
    /// [`QueryPoints::nearest_point`].
    pub fn new(collection: impl Into<String>) -> Self {
        Self {
            collection: collection.into(),
            request: QueryRequest::default(),
            consistency: None,
        }
    }

    /// Search near this vector.
    pub fn vector(mut self, vector: impl Into<Vec<f32>>) -> Self {
        self.request.query = Some(QueryInput::Vector(vector.into()));
        self
    }

    /// Search near the stored vector of this point.
    pub fn nearest_point(mut self, id: impl Into<PointId>) -> Self {
        self.request.query = Some(QueryInput::Point(id.into()));
        self
    }

    /// Number of results (default 10).
    pub fn limit(mut self, limit: usize) -> Self {
        self.request.limit = Some(limit);
        self
    }

    /// Results to skip, for paging.
    pub fn offset(mut self, offset: usize) -> Self {
        self.request.offset = Some(offset);
        self
    }

    /// Graph candidate list size for this query: higher is slower and finds more true
    /// neighbours.
    pub fn ef(mut self, ef: usize) -> Self {
        self.params().hnsw_ef = Some(ef);
        self
    }

    /// Scan every point instead of using the index (exact, slow; the ground-truth path).
    pub fn exact(mut self, exact: bool) -> Self {
        self.params().exact = Some(exact);
        self
    }

    /// Candidates fetched by quantized codes per result wanted, before re-scoring with full
    /// vectors (at least 1). Collections without quantization ignore it.
    pub fn oversampling(mut self, oversampling: f64) -> Self {
        self.params()
            .quantization
            .get_or_insert_with(QuantizationSearchParams::default)
            .oversampling = Some(oversampling);
        self
    }

    /// Whether to re-score the candidates found by quantized codes with full vectors.
    /// Collections without quantization ignore it.
    pub fn rescore(mut self, rescore: bool) -> Self {
        self.params()
            .quantization
            .get_or_insert_with(QuantizationSearchParams::default)
            .rescore = Some(rescore);
        self
    }

    /// Search the full vectors, not the quantized codes (Qdrant's `quantization.ignore`).
    /// Collections without quantization ignore it.
    pub fn ignore_quantization(mut self, ignore: bool) -> Self {
        self.params()
            .quantization
            .get_or_insert_with(QuantizationSearchParams::default)
            .ignore = Some(ignore);
        self
    }

    /// Partitions to probe in a partitioned collection (more probes, higher recall, more
    /// work). A collection that is not partitioned answers 400.
    pub fn probe(mut self, partitions: usize) -> Self {
        self.params().probe = Some(partitions);
        self
    }

    /// Drop results scoring worse than this (for `Euclid`: farther than this).
    pub fn score_threshold(mut self, threshold: f32) -> Self {
        self.request.score_threshold = Some(threshold);
        self
    }

    /// Also return how the query ran (index, exactness, `ef`, distance computations).
    pub fn explain(mut self, on: bool) -> Self {
        self.request.explain = Some(on);
        self
    }

    /// The request body as sent.
    pub fn request(&self) -> &QueryRequest {
        &self.request
    }

    fn params(&mut self) -> &mut SearchParams {
        self.request
            .params
            .get_or_insert_with(SearchParams::default)
    }
}
