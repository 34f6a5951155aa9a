use std::collections::BTreeMap;
use std::fmt;

use serde::de::{DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::unsupported::{refuse_other_than, refuse_set, refuse_within};
use crate::{Filter, RefuseUnsupported, SparseVector, Unsupported, VectorValue};

/// A point id: an unsigned integer or a UUID, as in Qdrant. Integers sort before UUIDs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PointId {
    /// Numeric id.
    Num(u64),
    /// UUID id (given as a string on the wire).
    Uuid(uuid::Uuid),
}

impl fmt::Display for PointId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PointId::Num(n) => write!(f, "{n}"),
            PointId::Uuid(u) => write!(f, "{u}"),
        }
    }
}

impl From<u64> for PointId {
    fn from(n: u64) -> Self {
        PointId::Num(n)
    }
}

impl From<uuid::Uuid> for PointId {
    fn from(u: uuid::Uuid) -> Self {
        PointId::Uuid(u)
    }
}

impl std::str::FromStr for PointId {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if let Ok(n) = s.parse::<u64>() {
            return Ok(PointId::Num(n));
        }
        uuid::Uuid::parse_str(s)
            .map(PointId::Uuid)
            .map_err(|_| format!("point id must be an unsigned integer or a UUID, got {s:?}"))
    }
}

impl Serialize for PointId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            PointId::Num(n) => s.serialize_u64(*n),
            PointId::Uuid(u) => s.collect_str(u),
        }
    }
}

/// `integer ≥ 0 | string (uuid)`: written by hand because the wire form is chosen by the
/// variant's JSON type, which `#[serde(untagged)]` would describe but not parse as well.
impl utoipa::PartialSchema for PointId {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{
            KnownFormat, ObjectBuilder, OneOfBuilder, SchemaFormat, Type,
        };
        OneOfBuilder::new()
            .item(
                ObjectBuilder::new()
                    .schema_type(Type::Integer)
                    .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)))
                    .minimum(Some(0)),
            )
            .item(
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .format(Some(SchemaFormat::KnownFormat(KnownFormat::Uuid))),
            )
            .description(Some("An unsigned integer or a UUID."))
            .into()
    }
}

impl utoipa::ToSchema for PointId {}

impl<'de> Deserialize<'de> for PointId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(PointIdVisitor)
    }
}

/// Reads a point id from a JSON number or string; also the id half of the query targets
/// (`crate::QueryInput`), which dispatch on the JSON type themselves.
pub(crate) struct PointIdVisitor;

impl Visitor<'_> for PointIdVisitor {
    type Value = PointId;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an unsigned integer or a UUID string")
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<PointId, E> {
        Ok(PointId::Num(v))
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<PointId, E> {
        u64::try_from(v)
            .map(PointId::Num)
            .map_err(|_| E::custom(format!("point id must be an unsigned integer, got {v}")))
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<PointId, E> {
        uuid::Uuid::parse_str(v)
            .map(PointId::Uuid)
            .map_err(|_| E::custom(format!("point id string must be a UUID, got {v:?}")))
    }
}

/// A JSON object of user data attached to a point.
pub type Payload = serde_json::Map<String, serde_json::Value>;

/// A vector as sent: a plain list, or Qdrant's named-vector map.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum VectorInput {
    /// One unnamed dense vector.
    Dense(Vec<f32>),
    /// Vectors by name (`""`: the unnamed dense vector), dense or sparse.
    Named(BTreeMap<String, VectorValue>),
}

impl<'de> Deserialize<'de> for VectorInput {
    /// Dispatches on the JSON type so a bad element is reported as such (an untagged enum
    /// would only say that no variant matched). Streams the floats straight into the vector:
    /// going through `serde_json::Value` cost an allocation per element, twice the decode time
    /// of a list-form upsert.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(VectorInputVisitor)
    }
}

struct VectorInputVisitor;

impl<'de> Visitor<'de> for VectorInputVisitor {
    type Value = VectorInput;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a vector: an array of numbers, or an object of named vectors")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<VectorInput, A::Error> {
        dense(seq).map(VectorInput::Dense)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<VectorInput, A::Error> {
        BTreeMap::deserialize(serde::de::value::MapAccessDeserializer::new(map))
            .map(VectorInput::Named)
    }
}

/// Reads a dense vector element by element, straight into the `Vec` (no intermediate
/// `serde_json::Value` or untagged-enum buffer: either costs an allocation per element or a
/// second pass, measured at +20% of a 128-d query body's decode time).
pub(crate) fn dense<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<Vec<f32>, A::Error> {
    // The size hint comes from the request: cap the pre-allocation, not the vector.
    let mut vector = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
    while let Some(x) = seq.next_element_seed(Element(vector.len()))? {
        vector.push(x);
    }
    Ok(vector)
}

/// `deserialize_with` for a list of finite numbers (see [`dense`]): a derived `Vec<f32>`
/// would turn a number beyond `f32`'s range into an infinity, which JSON cannot even print
/// back.
pub(crate) fn dense_vec<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f32>, D::Error> {
    DenseList::deserialize(d).map(|list| list.0)
}

/// `deserialize_with` for an optional list of finite numbers.
pub(crate) fn dense_opt<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<f32>>, D::Error> {
    Option::<DenseList>::deserialize(d).map(|list| list.map(|l| l.0))
}

/// `deserialize_with` for rows of finite numbers (the column form's vectors).
fn dense_rows<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Vec<f32>>, D::Error> {
    Vec::<DenseList>::deserialize(d).map(|rows| rows.into_iter().map(|l| l.0).collect())
}

/// A list of finite numbers, read element by element (see [`dense`]).
pub(crate) struct DenseList(pub(crate) Vec<f32>);

impl<'de> Deserialize<'de> for DenseList {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct ListVisitor;
        impl<'de> Visitor<'de> for ListVisitor {
            type Value = DenseList;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an array of numbers")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<DenseList, A::Error> {
                dense(seq).map(DenseList)
            }
        }
        d.deserialize_seq(ListVisitor)
    }
}

/// One vector element, knowing its index so that an error can name it.
struct Element(usize);

impl<'de> DeserializeSeed<'de> for Element {
    type Value = f32;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<f32, D::Error> {
        d.deserialize_any(self)
    }
}

impl Visitor<'_> for Element {
    type Value = f32;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "vector element {} to be a number", self.0)
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<f32, E> {
        // JSON has no infinities: a finite number too large for an f32 would become one.
        let x = v as f32;
        if x.is_finite() {
            Ok(x)
        } else {
            Err(E::custom(format!(
                "vector element {} is {v:e}, beyond the range of a 32-bit float",
                self.0
            )))
        }
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<f32, E> {
        Ok(v as f32)
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<f32, E> {
        Ok(v as f32)
    }
}

/// One point to upsert.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PointStruct {
    /// Its id.
    pub id: PointId,
    /// Its vector.
    pub vector: VectorInput,
    /// Optional payload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub payload: Option<Payload>,
}

/// Column form of an upsert.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Batch {
    /// Ids, one per point.
    pub ids: Vec<PointId>,
    /// Vectors, one per point.
    #[serde(deserialize_with = "dense_rows")]
    pub vectors: Vec<Vec<f32>>,
    /// Payloads, one per point, when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<Option<Object>>>)]
    pub payloads: Option<Vec<Option<Payload>>>,
}

/// `PUT /collections/{c}/points`: exactly one of `points` (list form) or `batch` (columns).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, utoipa::ToSchema)]
pub struct UpsertRequest {
    /// List form.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub points: Option<Vec<PointStruct>>,
    /// Column form.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<Batch>,
    /// Refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(ignore)]
    pub shard_key: Option<serde_json::Value>,
    /// Replace a stored point only where it passes this filter (new points are inserted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_filter: Option<Filter>,
    /// Qdrant's `upsert` / `insert_only` / `update_only`: only `upsert`, what Cairn does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(ignore)]
    pub update_mode: Option<serde_json::Value>,
}

impl RefuseUnsupported for UpsertRequest {
    fn refuse_unsupported(&self) -> Result<(), Unsupported> {
        refuse_set(&[("shard_key", &self.shard_key)])?;
        refuse_within("update_filter", self.update_filter.as_ref())?;
        refuse_other_than(
            "update_mode",
            &self.update_mode,
            &[serde_json::json!("upsert")],
            "an upsert inserts new points and replaces existing ones",
        )
    }
}

/// `?wait=` on writes: `true` answers once the write is durable *and* searchable.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct WriteQuery {
    /// Wait until searchable.
    #[serde(default)]
    pub wait: Option<bool>,
}

/// Whether a write is only durable, or also applied to the index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum UpdateStatus {
    /// Durable (survives a crash) but maybe not yet searchable.
    Acknowledged,
    /// Durable and searchable.
    Completed,
}

/// Result of a write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct UpdateResult {
    /// Increases with every write to the collection: for a collection of one partition, the
    /// write's position in that partition's log.
    pub operation_id: u64,
    /// How far it got.
    pub status: UpdateStatus,
    /// Where the write left each partition it touched: a read with `read_after=<token>` sees
    /// it (Cairn's extension; see [`crate::ReadToken`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_token: Option<crate::ReadToken>,
}

/// `with_payload`: a flag, a list of keys to include, or an include/exclude selector.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum WithPayload {
    /// All or nothing.
    Enable(bool),
    /// Only these top-level keys.
    Fields(Vec<String>),
    /// Include and/or exclude lists.
    Selector {
        /// Keys to keep.
        #[serde(default)]
        include: Option<Vec<String>>,
        /// Keys to drop.
        #[serde(default)]
        exclude: Option<Vec<String>>,
    },
}

/// A vector as returned: a plain list, or by name when the collection's vector has one (Qdrant
/// returns the unnamed vector `""` as a plain list even when it was created in map form).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum VectorOutput {
    /// The unnamed vector.
    Dense(Vec<f32>),
    /// Vectors by name, dense or sparse.
    Named(BTreeMap<String, VectorValue>),
}

impl VectorOutput {
    /// The dense vector, if the point has exactly one (named or not).
    pub fn into_dense(self) -> Option<Vec<f32>> {
        match self {
            VectorOutput::Dense(v) => Some(v),
            VectorOutput::Named(named) => {
                let mut dense = named.into_values().filter_map(|v| match v {
                    VectorValue::Dense(v) => Some(v),
                    VectorValue::Sparse(_) => None,
                });
                match (dense.next(), dense.next()) {
                    (Some(v), None) => Some(v),
                    _ => None,
                }
            }
        }
    }

    /// The dense vector, if the point has exactly one (named or not).
    pub fn as_dense(&self) -> Option<&[f32]> {
        match self {
            VectorOutput::Dense(v) => Some(v),
            VectorOutput::Named(named) => {
                let mut dense = named.values().filter_map(|v| match v {
                    VectorValue::Dense(v) => Some(v.as_slice()),
                    VectorValue::Sparse(_) => None,
                });
                match (dense.next(), dense.next()) {
                    (Some(v), None) => Some(v),
                    _ => None,
                }
            }
        }
    }

    /// The dense vector called `name` (`""`: the unnamed one), if returned.
    pub fn dense(&self, name: &str) -> Option<&[f32]> {
        match self {
            VectorOutput::Dense(v) => name.is_empty().then_some(v.as_slice()),
            VectorOutput::Named(named) => match named.get(name) {
                Some(VectorValue::Dense(v)) => Some(v),
                Some(VectorValue::Sparse(_)) | None => None,
            },
        }
    }

    /// The sparse vector called `name`, if returned.
    pub fn sparse(&self, name: &str) -> Option<&SparseVector> {
        match self {
            VectorOutput::Named(named) => match named.get(name) {
                Some(VectorValue::Sparse(v)) => Some(v),
                Some(VectorValue::Dense(_)) | None => None,
            },
            VectorOutput::Dense(_) => None,
        }
    }

    /// The same vector under `name` (`""`: the unnamed vector, a plain list).
    pub fn named(self, name: &str) -> Self {
        match (self, name) {
            (VectorOutput::Dense(v), name) if !name.is_empty() => {
                VectorOutput::Named(BTreeMap::from([(name.to_owned(), VectorValue::Dense(v))]))
            }
            (output, _) => output,
        }
    }
}

/// `with_vector`: a flag, or the names of the vectors to return.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum WithVector {
    /// Return the vector or not.
    Enable(bool),
    /// Named vectors to return.
    Names(Vec<String>),
}

impl WithVector {
    /// Whether the vector called `name` (`""`: the unnamed one) is requested.
    pub fn includes(&self, name: &str) -> bool {
        match self {
            WithVector::Enable(on) => *on,
            WithVector::Names(names) => names.iter().any(|n| n == name),
        }
    }
}

/// A stored point as returned by get and scroll.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Record {
    /// Its id.
    pub id: PointId,
    /// Its payload, when requested.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub payload: Option<Payload>,
    /// Its vector, when requested.
    #[serde(default)]
    pub vector: Option<VectorOutput>,
    /// The value it was ordered by (a scroll with `order_by`): an integer for an integer
    /// index.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<f64>)]
    pub order_value: Option<serde_json::Number>,
}

/// `POST /collections/{c}/points`: get many by id.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, utoipa::ToSchema)]
pub struct GetPointsRequest {
    /// Ids to fetch; missing ones are skipped.
    pub ids: Vec<PointId>,
    /// Payload selection (default: all).
    #[serde(default)]
    pub with_payload: Option<WithPayload>,
    /// Vector selection (default: none).
    #[serde(default)]
    pub with_vector: Option<WithVector>,
    /// Refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(ignore)]
    pub shard_key: Option<serde_json::Value>,
}

impl RefuseUnsupported for GetPointsRequest {
    fn refuse_unsupported(&self) -> Result<(), Unsupported> {
        refuse_set(&[("shard_key", &self.shard_key)])
    }
}

/// One point's new vector.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PointVectors {
    /// An existing point.
    pub id: PointId,
    /// Its new vector (by name when the collection's vector has one).
    pub vector: VectorInput,
}

/// `PUT /collections/{c}/points/vectors`: new vectors for existing points, payloads kept.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct UpdateVectorsRequest {
    /// The points and their vectors.
    pub points: Vec<PointVectors>,
    /// Refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(ignore)]
    pub shard_key: Option<serde_json::Value>,
    /// Change only the points that pass this filter (the others are left as they are).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_filter: Option<Filter>,
}

impl RefuseUnsupported for UpdateVectorsRequest {
    fn refuse_unsupported(&self) -> Result<(), Unsupported> {
        refuse_set(&[("shard_key", &self.shard_key)])?;
        refuse_within("update_filter", self.update_filter.as_ref())
    }
}

/// `POST /collections/{c}/points/payload` (set: merge these keys in) and
/// `PUT /collections/{c}/points/payload` (overwrite: replace the payload), for the points
/// given by id or by filter.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SetPayloadRequest {
    /// The keys to set (or the whole payload, when overwriting).
    #[schema(value_type = Object)]
    pub payload: Payload,
    /// These points.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub points: Option<Vec<PointId>>,
    /// Every point matching this filter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<Filter>,
    /// A dotted path of objects: the change applies to the object there (created if absent)
    /// rather than to the whole payload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(ignore)]
    pub shard_key: Option<serde_json::Value>,
}

impl RefuseUnsupported for SetPayloadRequest {
    fn refuse_unsupported(&self) -> Result<(), Unsupported> {
        refuse_set(&[("shard_key", &self.shard_key)])?;
        refuse_within("filter", self.filter.as_ref())
    }
}

/// `POST /collections/{c}/points/payload/delete`: remove keys from the points given by id or
/// by filter.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DeletePayloadRequest {
    /// Dotted paths of the keys to remove.
    pub keys: Vec<String>,
    /// These points.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub points: Option<Vec<PointId>>,
    /// Every point matching this filter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<Filter>,
    /// Refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(ignore)]
    pub shard_key: Option<serde_json::Value>,
}

impl RefuseUnsupported for DeletePayloadRequest {
    fn refuse_unsupported(&self) -> Result<(), Unsupported> {
        refuse_set(&[("shard_key", &self.shard_key)])?;
        refuse_within("filter", self.filter.as_ref())
    }
}

/// `POST /collections/{c}/points/delete` (and `…/points/payload/clear`): points by ids or by
/// filter.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DeletePointsRequest {
    /// Ids to delete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub points: Option<Vec<PointId>>,
    /// Delete every point matching this filter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<Filter>,
    /// Refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(ignore)]
    pub shard_key: Option<serde_json::Value>,
}

impl RefuseUnsupported for DeletePointsRequest {
    fn refuse_unsupported(&self) -> Result<(), Unsupported> {
        refuse_set(&[("shard_key", &self.shard_key)])?;
        refuse_within("filter", self.filter.as_ref())
    }
}

/// `POST /collections/{c}/points/vectors/delete`: remove named vectors (beside the main one,
/// or sparse) from the points given by id or by filter.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DeleteVectorsRequest {
    /// The names of the vectors to remove.
    pub vector: Vec<String>,
    /// These points.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub points: Option<Vec<PointId>>,
    /// Every point matching this filter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<Filter>,
    /// Refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(ignore)]
    pub shard_key: Option<serde_json::Value>,
}

impl RefuseUnsupported for DeleteVectorsRequest {
    fn refuse_unsupported(&self) -> Result<(), Unsupported> {
        refuse_set(&[("shard_key", &self.shard_key)])?;
        refuse_within("filter", self.filter.as_ref())
    }
}

/// `POST /collections/{c}/points/batch`: writes applied one after another, in order (as in
/// Qdrant, not as one transaction: a failing operation leaves those before it applied).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct UpdateBatchRequest {
    /// The writes.
    pub operations: Vec<UpdateOperation>,
}

impl RefuseUnsupported for UpdateBatchRequest {
    fn refuse_unsupported(&self) -> Result<(), Unsupported> {
        crate::unsupported::refuse_each("operations", &self.operations)
    }
}

/// One write of a batch, in Qdrant's shape (`{"upsert": {…}}`, `{"set_payload": {…}}`, …).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum UpdateOperation {
    /// Insert or replace points.
    Upsert(UpsertRequest),
    /// Delete points by id or filter.
    Delete(DeletePointsRequest),
    /// Merge keys into payloads.
    SetPayload(SetPayloadRequest),
    /// Replace payloads.
    OverwritePayload(SetPayloadRequest),
    /// Remove payload keys.
    DeletePayload(DeletePayloadRequest),
    /// Empty payloads.
    ClearPayload(DeletePointsRequest),
    /// New vectors for existing points.
    UpdateVectors(UpdateVectorsRequest),
    /// Remove named vectors from points.
    DeleteVectors(DeleteVectorsRequest),
}

impl UpdateOperation {
    /// Its name on the wire (`upsert`, `set_payload`, …).
    pub fn name(&self) -> &'static str {
        match self {
            UpdateOperation::Upsert(_) => "upsert",
            UpdateOperation::Delete(_) => "delete",
            UpdateOperation::SetPayload(_) => "set_payload",
            UpdateOperation::OverwritePayload(_) => "overwrite_payload",
            UpdateOperation::DeletePayload(_) => "delete_payload",
            UpdateOperation::ClearPayload(_) => "clear_payload",
            UpdateOperation::UpdateVectors(_) => "update_vectors",
            UpdateOperation::DeleteVectors(_) => "delete_vectors",
        }
    }
}

impl RefuseUnsupported for UpdateOperation {
    fn refuse_unsupported(&self) -> Result<(), Unsupported> {
        let refused = match self {
            UpdateOperation::Upsert(r) => r.refuse_unsupported(),
            UpdateOperation::Delete(r) | UpdateOperation::ClearPayload(r) => r.refuse_unsupported(),
            UpdateOperation::SetPayload(r) | UpdateOperation::OverwritePayload(r) => {
                r.refuse_unsupported()
            }
            UpdateOperation::DeletePayload(r) => r.refuse_unsupported(),
            UpdateOperation::UpdateVectors(r) => r.refuse_unsupported(),
            UpdateOperation::DeleteVectors(r) => r.refuse_unsupported(),
        };
        refused.map_err(|e| e.within(self.name()))
    }
}

/// `POST /collections/{c}/points/scroll`: pages of points in id order.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ScrollRequest {
    /// First id of the page (inclusive).
    #[serde(default)]
    pub offset: Option<PointId>,
    /// Page size (default 10).
    #[serde(default)]
    pub limit: Option<usize>,
    /// Only points matching this filter.
    #[serde(default)]
    pub filter: Option<Filter>,
    /// Payload selection (default: all).
    #[serde(default)]
    pub with_payload: Option<WithPayload>,
    /// Vector selection (default: none).
    #[serde(default)]
    pub with_vector: Option<WithVector>,
    /// Refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(ignore)]
    pub shard_key: Option<serde_json::Value>,
    /// Order by a payload key with an `integer` or `float` index instead of by id (one page:
    /// the next starts from the last value, with `start_from`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order_by: Option<OrderBy>,
}

/// Scroll's `order_by`: a payload key, or `{"key", "direction", "start_from"}`.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct OrderBy {
    /// The payload key, which needs an `integer`, `float` or `datetime` index.
    pub key: String,
    /// `asc` (the default) or `desc`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direction: Option<Direction>,
    /// The first value (inclusive) in the direction of the order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_from: Option<StartFrom>,
}

/// Where an ordered scroll starts: a number, or a datetime string.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum StartFrom {
    /// A number.
    Number(f64),
    /// A datetime, for a `datetime` index.
    #[schema(value_type = String, format = DateTime)]
    Datetime(crate::Datetime),
}

impl StartFrom {
    /// The value on an index's scale: a datetime index orders by microseconds since the epoch,
    /// so a number there is read as microseconds too (the `order_value` it returns).
    pub fn value(self) -> f64 {
        match self {
            StartFrom::Number(n) => n,
            StartFrom::Datetime(t) => t.micros() as f64,
        }
    }
}

/// An order's direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// Smallest first.
    Asc,
    /// Largest first.
    Desc,
}

impl<'de> Deserialize<'de> for OrderBy {
    /// A string is the key alone; an object is read strictly (a misspelt field would change
    /// the order).
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Full {
            key: String,
            #[serde(default)]
            direction: Option<Direction>,
            #[serde(default)]
            start_from: Option<StartFrom>,
        }
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Shape {
            Key(String),
            Object(serde_json::Map<String, serde_json::Value>),
        }
        match Shape::deserialize(d)? {
            Shape::Key(key) => Ok(OrderBy {
                key,
                direction: None,
                start_from: None,
            }),
            Shape::Object(map) => {
                let full: Full = serde_json::from_value(serde_json::Value::Object(map))
                    .map_err(serde::de::Error::custom)?;
                Ok(OrderBy {
                    key: full.key,
                    direction: full.direction,
                    start_from: full.start_from,
                })
            }
        }
    }
}

impl RefuseUnsupported for ScrollRequest {
    fn refuse_unsupported(&self) -> Result<(), Unsupported> {
        refuse_set(&[("shard_key", &self.shard_key)])?;
        refuse_within("filter", self.filter.as_ref())
    }
}

/// A page of points.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ScrollResult {
    /// The points, in id order.
    pub points: Vec<Record>,
    /// Offset of the next page, or null at the end.
    pub next_page_offset: Option<PointId>,
}

/// `POST /collections/{c}/points/count`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CountRequest {
    /// Only points matching this filter.
    #[serde(default)]
    pub filter: Option<Filter>,
    /// Accepted for compatibility; counts are always exact.
    #[serde(default)]
    pub exact: Option<bool>,
    /// Refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(ignore)]
    pub shard_key: Option<serde_json::Value>,
}

impl RefuseUnsupported for CountRequest {
    fn refuse_unsupported(&self) -> Result<(), Unsupported> {
        refuse_set(&[("shard_key", &self.shard_key)])?;
        refuse_within("filter", self.filter.as_ref())
    }
}

/// A count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CountResult {
    /// Number of points.
    pub count: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::unsupported::refused_path;

    fn parse(json: &str) -> Result<VectorInput, String> {
        serde_json::from_str(json).map_err(|e| e.to_string())
    }

    #[test]
    fn dense_vectors_take_any_json_number() {
        assert_eq!(
            parse("[1, -2, 0.5, 1e3]").unwrap(),
            VectorInput::Dense(vec![1.0, -2.0, 0.5, 1000.0])
        );
        assert_eq!(parse("[]").unwrap(), VectorInput::Dense(vec![]));
    }

    #[test]
    fn named_vectors_parse_as_a_map() {
        let VectorInput::Named(named) = parse(r#"{"": [1, 2]}"#).unwrap() else {
            panic!("not named")
        };
        assert_eq!(named[""], VectorValue::Dense(vec![1.0, 2.0]));
        let VectorInput::Named(named) =
            parse(r#"{"": [1], "words": {"indices": [4], "values": [2]}}"#).unwrap()
        else {
            panic!("not named")
        };
        assert_eq!(
            named["words"],
            VectorValue::Sparse(SparseVector {
                indices: vec![4],
                values: vec![2.0]
            })
        );
    }

    #[test]
    fn point_requests_refuse_what_would_change_their_effect() {
        let upsert = refused_path::<UpsertRequest>;
        assert_eq!(
            upsert(r#"{"points": [], "shard_key": "eu"}"#).as_deref(),
            Some("shard_key")
        );
        assert_eq!(
            upsert(r#"{"points": [], "update_filter": {"must": {"key": "a", "match": {"phrase": "x"}}}}"#)
                .as_deref(),
            Some("update_filter.must[0].match.phrase")
        );
        assert_eq!(
            upsert(r#"{"batch": {"ids": [], "vectors": []}, "update_mode": "insert_only"}"#)
                .as_deref(),
            Some("update_mode")
        );
        assert_eq!(
            upsert(
                r#"{"points": [], "update_mode": "upsert", "shard_key": null, "update_filter": null}"#
            ),
            None
        );
        assert_eq!(
            refused_path::<DeletePointsRequest>(r#"{"points": [1], "shard_key": 3}"#).as_deref(),
            Some("shard_key")
        );
        assert_eq!(
            refused_path::<DeletePointsRequest>(
                r#"{"filter": {"min_should": {"conditions": [{"key": "a", "match": {"phrase": "x"}}], "min_count": 1}}}"#
            )
            .as_deref(),
            Some("filter.min_should.conditions[0].match.phrase")
        );
        assert_eq!(
            refused_path::<GetPointsRequest>(r#"{"ids": [1], "shard_key": "eu"}"#).as_deref(),
            Some("shard_key")
        );
        assert_eq!(
            refused_path::<ScrollRequest>(r#"{"shard_key": ["a"]}"#).as_deref(),
            Some("shard_key")
        );
        assert_eq!(
            refused_path::<ScrollRequest>(
                r#"{"filter": {"must": {"key": "a", "is_empty": true}}}"#
            )
            .as_deref(),
            Some("filter.must[0].is_empty")
        );
        assert_eq!(
            refused_path::<CountRequest>(r#"{"shard_key": "eu", "exact": false}"#).as_deref(),
            Some("shard_key")
        );
        assert_eq!(
            refused_path::<CountRequest>(r#"{"exact": false, "filter": {"must": []}}"#),
            None
        );
    }

    #[test]
    fn the_rust_client_never_sends_refused_fields() {
        let upsert = UpsertRequest {
            points: Some(vec![]),
            ..UpsertRequest::default()
        };
        assert_eq!(serde_json::to_string(&upsert).unwrap(), r#"{"points":[]}"#);
        let get = GetPointsRequest::default();
        assert!(!serde_json::to_string(&get).unwrap().contains("shard_key"));
    }

    #[test]
    fn errors_name_the_bad_element_or_the_wrong_shape() {
        let err = parse(r#"[1.0, "x", 3]"#).unwrap_err();
        assert!(err.contains("vector element 1 to be a number"), "{err}");
        let err = parse("[1.0, null]").unwrap_err();
        assert!(err.contains("vector element 1"), "{err}");
        for wrong in ["3", r#""abc""#, "true", "null"] {
            let err = parse(wrong).unwrap_err();
            assert!(err.contains("an array of numbers"), "{wrong}: {err}");
        }
    }
}
