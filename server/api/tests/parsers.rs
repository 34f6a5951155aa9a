//! Property tests of the parsers of untrusted bytes (issue #23): request bodies, point ids,
//! filters, read tokens and the internal wire. Whatever arrives, a parser answers `Ok` or
//! `Err` — it never panics, never loops, never allocates by what a length field claims — and a
//! value it accepts survives a round trip. Arbitrary byte strings exercise the tokenizer;
//! arbitrary JSON documents, biased toward the keys the types know, get past it into the
//! types' own visitors and refusals.
#![allow(missing_docs, clippy::unwrap_used)]

use cairn_api::{
    internal, CountRequest, CreateCollection, DeletePointsRequest, Filter, GetPointsRequest,
    PointId, QueryBatchRequest, QueryRequest, ReadQuery, ReadToken, RefuseUnsupported,
    ScrollRequest, SearchBatchRequest, SearchRequest, UpdateBatchRequest, UpsertRequest,
};
use proptest::prelude::*;
use serde_json::Value;

/// Keys the request types and filters know, so generated objects reach their fields.
const KEYS: &[&str] = &[
    "vectors",
    "size",
    "distance",
    "points",
    "batch",
    "ids",
    "id",
    "vector",
    "payload",
    "payloads",
    "query",
    "nearest",
    "filter",
    "must",
    "should",
    "must_not",
    "min_should",
    "key",
    "match",
    "value",
    "any",
    "except",
    "range",
    "gt",
    "gte",
    "lt",
    "lte",
    "has_id",
    "is_empty",
    "is_null",
    "limit",
    "offset",
    "params",
    "hnsw_ef",
    "exact",
    "with_payload",
    "with_vector",
    "include",
    "exclude",
    "searches",
    "score_threshold",
    "using",
    "index",
    "kind",
    "mmr",
    "prefetch",
    "shard_key",
    "quantization_config",
    "hnsw_config",
    "m",
    "consistency",
    "",
];

fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        prop_oneof![
            "[a-z0-9:,-]{0,12}",
            Just("Cosine".to_owned()),
            Just("Dot".to_owned()),
            Just("9b1deb4d-3b7d-4bad-9bdd-2b0d7b3dcb6d".to_owned()),
        ]
        .prop_map(Value::String),
    ];
    leaf.prop_recursive(6, 64, 8, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            proptest::collection::vec((proptest::sample::select(KEYS), inner), 0..6).prop_map(
                |fields| Value::Object(
                    fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
                )
            ),
        ]
    })
}

/// Parses `bytes` as `T`; an accepted value is checked for refusals and survives a round trip.
fn parse<T>(bytes: &[u8])
where
    T: serde::de::DeserializeOwned + serde::Serialize + RefuseUnsupported,
{
    if let Ok(value) = serde_json::from_slice::<T>(bytes) {
        let _ = value.refuse_unsupported();
        let again = serde_json::to_vec(&value).unwrap();
        serde_json::from_slice::<T>(&again).unwrap();
    }
}

/// Every public request body, from the same bytes.
fn every_body(bytes: &[u8]) {
    parse::<CreateCollection>(bytes);
    parse::<UpsertRequest>(bytes);
    parse::<GetPointsRequest>(bytes);
    parse::<DeletePointsRequest>(bytes);
    parse::<ScrollRequest>(bytes);
    parse::<CountRequest>(bytes);
    parse::<QueryRequest>(bytes);
    parse::<QueryBatchRequest>(bytes);
    parse::<SearchRequest>(bytes);
    parse::<SearchBatchRequest>(bytes);
    parse::<UpdateBatchRequest>(bytes);
    parse::<Filter>(bytes);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(20_000))]

    #[test]
    fn bodies_of_arbitrary_bytes_parse_or_fail(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        every_body(&bytes);
        let _ = internal::decode::<internal::PartitionCall>(&bytes);
        let _ = internal::decode::<internal::CollectionWrite>(&bytes);
    }

    #[test]
    fn bodies_of_arbitrary_json_parse_or_fail(value in json()) {
        every_body(&serde_json::to_vec(&value).unwrap());
        // The same value as the internal wire carries it.
        let packed = rmp_serde::to_vec_named(&value).unwrap();
        let _ = internal::decode::<internal::PartitionCall>(&packed);
        let _ = internal::decode::<internal::CollectionWrite>(&packed);
    }

    #[test]
    fn ids_and_tokens_of_arbitrary_text_parse_or_fail(text in "\\PC{0,40}|[0-9a-f:,-]{0,40}") {
        if let Ok(id) = text.parse::<PointId>() {
            prop_assert_eq!(id.to_string().parse::<PointId>().unwrap(), id);
        }
        if let Ok(token) = text.parse::<ReadToken>() {
            prop_assert_eq!(token.to_string().parse::<ReadToken>().unwrap(), token);
        }
        let read = ReadQuery { consistency: Some(text.clone()), read_after: Some(text), timeout: None };
        let _ = read.consistency();
    }
}
