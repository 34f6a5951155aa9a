//! Qdrant request fields that Cairn does not implement, and that would change what is matched,
//! written, returned or stored if they were ignored, are a 400 `invalid_request` naming the
//! field, and the refused request changes nothing. One test per refused field, each on a
//! server of its own (as in `bad_input.rs`), so a failure names the field.

use serde_json::{json, Value};

use crate::harness::{ids, Server};

/// A server holding collection `c`: three 3-d points with payloads `{"tag", "n"}`.
fn fixture() -> (tempfile::TempDir, Server) {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    server.create("c", 3, "Euclid", json!({}));
    let points = json!({"points": [
        {"id": 1, "vector": [1.0, 0.0, 0.0], "payload": {"tag": "one", "n": 1}},
        {"id": 2, "vector": [0.0, 1.0, 0.0], "payload": {"tag": "two", "n": 2}},
        {"id": 3, "vector": [0.0, 0.0, 1.0], "payload": {"tag": "three", "n": 3}}]});
    server.ok("PUT", "/collections/c/points?wait=true", Some(&points));
    (dir, server)
}

/// Everything a refused request could have changed: the collections, and every point of `c`
/// with its vector and payload.
fn snapshot(server: &Server) -> Value {
    let scroll = json!({"limit": 100, "with_vector": true, "with_payload": true});
    json!({
        "collections": server.ok("GET", "/collections", None),
        "points": server.ok("POST", "/collections/c/points/scroll", Some(&scroll)),
    })
}

/// Sends `route` ("METHOD /path") with `body` and checks that it is a 400 `invalid_request`
/// whose message contains `needle`, and that it changed nothing.
fn refused(server: &Server, route: &str, body: Option<&Value>, needle: &str) {
    let (method, path) = route.split_once(' ').unwrap();
    let before = snapshot(server);
    let (status, response) = server.call(method, path, body);
    assert_eq!(
        status, 400,
        "{route}: expected 400, got {status}: {response}"
    );
    assert_eq!(response["status"]["code"], "invalid_request", "{response}");
    let message = response["status"]["error"].as_str().unwrap_or_default();
    assert!(
        message.contains(needle),
        "{route}: error {message:?} does not mention {needle:?}"
    );
    assert_eq!(snapshot(server), before, "{route} changed the data");
}

/// How many points of `c` pass `filter`.
fn count_of(server: &Server, filter: Value) -> Value {
    let body = json!({ "filter": filter });
    server.ok("POST", "/collections/c/points/count", Some(&body))["count"].clone()
}

/// [`refused`] on a fresh [`fixture`], returned for further checks.
fn refused_alone(route: &str, body: Value, needle: &str) -> (tempfile::TempDir, Server) {
    let (dir, server) = fixture();
    refused(&server, route, Some(&body), needle);
    (dir, server)
}

/// The standard refusal of `field` (a path), whatever its value.
fn not_supported(field: &str) -> String {
    format!("{field}: not supported by Cairn")
}

/// A filter refused by delete (the request that would do most harm), query and count.
fn refused_filter(filter: Value, needle: &str) {
    let (_dir, server) = fixture();
    let delete = json!({"filter": filter});
    refused(
        &server,
        "POST /collections/c/points/delete?wait=true",
        Some(&delete),
        needle,
    );
    let query = json!({"query": [1.0, 0.0, 0.0], "filter": filter});
    refused(
        &server,
        "POST /collections/c/points/query",
        Some(&query),
        needle,
    );
    let count = json!({"filter": filter});
    refused(
        &server,
        "POST /collections/c/points/count",
        Some(&count),
        needle,
    );
}

/// A create request for collection `x`: 3-d Euclid vectors plus `vectors_extra` inside
/// `vectors`, plus `extra` at the top.
fn create_x(vectors_extra: Value, extra: Value) -> Value {
    let mut body = json!({"vectors": {"size": 3, "distance": "Euclid"}});
    body["vectors"]
        .as_object_mut()
        .unwrap()
        .extend(vectors_extra.as_object().unwrap().clone());
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    body
}

/// Creating `x` with these extras is refused, and `x` does not exist afterwards.
fn create_refused(vectors_extra: Value, extra: Value, needle: &str) -> (tempfile::TempDir, Server) {
    let (dir, server) = refused_alone("PUT /collections/x", create_x(vectors_extra, extra), needle);
    assert_eq!(
        server.ok("GET", "/collections/x/exists", None)["exists"],
        false
    );
    (dir, server)
}

// ---- the delete that motivated this: a filter of only `min_should` matched every point ----

/// Refused until it was built, `min_should` now deletes exactly its matches, nested too.
#[test]
fn delete_by_a_filter_of_only_min_should_deletes_only_its_matches() {
    let (_dir, server) = fixture();
    let count = |filter: Value| count_of(&server, filter);
    let min_should = json!({"conditions": [{"key": "tag", "match": {"value": "one"}},
                                           {"key": "n", "range": {"lte": 2}}], "min_count": 2});
    assert_eq!(count(json!({"min_should": min_should})), 1);
    let nested = json!({"must_not": [{"must": [{"has_id": [1, 2]}], "min_should": min_should}]});
    assert_eq!(count(nested), 2);
    let delete = json!({"filter": {"min_should": min_should}});
    server.ok(
        "POST",
        "/collections/c/points/delete?wait=true",
        Some(&delete),
    );
    assert_eq!(count(json!({})), 2);
    assert_eq!(count(json!({"must": [{"has_id": [1]}]})), 0);
}

// ---- filters ----

#[test]
fn filter_field_is_empty_flag_is_refused() {
    refused_filter(
        json!({"must_not": [{"key": "tag", "is_empty": false}]}),
        &not_supported("filter.must_not[0].is_empty"),
    );
}

#[test]
fn filter_field_is_null_flag_is_refused() {
    refused_filter(
        json!({"must_not": [{"key": "tag", "is_null": false}]}),
        &not_supported("filter.must_not[0].is_null"),
    );
}

/// A `must_not` of one `match` of this kind, refused with its path.
fn refused_match(kind: &str, value: &str) {
    refused_filter(
        json!({"must_not": [{"key": "tag", "match": {kind: value}}]}),
        &not_supported(&format!("filter.must_not[0].match.{kind}")),
    );
}

/// Refused until it was built: without a text index, any whitespace-separated piece of the
/// query found in the value (Qdrant's rule; with one, any word).
#[test]
fn filter_match_text_any_matches_any_piece() {
    let (_dir, server) = fixture();
    let any = |query: &str| json!({"must": [{"key": "tag", "match": {"text_any": query}}]});
    assert_eq!(count_of(&server, any("wo thr")), 2);
    assert_eq!(count_of(&server, any("ONE four")), 0);
    assert_eq!(count_of(&server, any("")), 0);
}

#[test]
fn filter_match_phrase_is_refused() {
    refused_match("phrase", "one");
}

/// Refused until it was built: a string value starting with the prefix, case and all, with
/// or without a keyword index.
#[test]
fn filter_match_prefix_matches_the_start_of_a_string() {
    let (_dir, server) = fixture();
    let starts = |prefix: &str| json!({"must": [{"key": "tag", "match": {"prefix": prefix}}]});
    assert_eq!(count_of(&server, starts("t")), 2);
    assert_eq!(count_of(&server, starts("T")), 0);
    let index = json!({"field_name": "tag", "field_schema": "keyword"});
    server.ok("PUT", "/collections/c/index?wait=true", Some(&index));
    assert_eq!(count_of(&server, starts("t")), 2);
    assert_eq!(count_of(&server, starts("on")), 1);
    assert_eq!(count_of(&server, starts("")), 3);
}

/// Refused until it was built: `nested` holds when one element of the array passes its
/// whole filter (keys relative to the element); a refused test inside it is still refused.
#[test]
fn filter_nested_condition_matches_one_element_at_a_time() {
    let (_dir, server) = fixture();
    let items = json!({"points": [
        {"id": 1, "vector": [1.0, 0.0, 0.0], "payload": {"items": [{"a": 1, "b": "x"}, {"a": 2, "b": "y"}]}},
        {"id": 2, "vector": [0.0, 1.0, 0.0], "payload": {"items": [{"a": 1, "b": "y"}]}}]});
    server.ok("PUT", "/collections/c/points?wait=true", Some(&items));
    let count = |filter: Value| count_of(&server, filter);
    let one_and_y = json!({"key": "items", "filter": {"must": [
        {"key": "a", "match": {"value": 1}}, {"key": "b", "match": {"value": "y"}}]}});
    assert_eq!(count(json!({"must": [{"nested": one_and_y}]})), 1);
    assert_eq!(count(json!({"must_not": [{"nested": one_and_y}]})), 2);
    let across = json!({"must": [{"key": "items[].a", "match": {"value": 1}},
                                 {"key": "items[].b", "match": {"value": "y"}}]});
    assert_eq!(count(across), 2);
    let phrase =
        json!({"key": "items", "filter": {"must": [{"key": "a", "match": {"phrase": "x"}}]}});
    refused_filter(
        json!({"must": [{"nested": phrase}]}),
        &not_supported("filter.must[0].nested.filter.must[0].match.phrase"),
    );
}

#[test]
fn filter_slice_condition_is_refused() {
    refused_filter(
        json!({"must": [{"slice": {"key": "n"}}]}),
        &not_supported("slice"),
    );
}

#[test]
fn filter_unknown_keys_are_refused_naming_them() {
    // As in Qdrant for the filter itself; here for conditions, `match` and `range` too, so a
    // misspelt test cannot widen what a delete removes.
    let cases = [
        (
            json!({"must_not": [{"has_id": [1]}], "mustt": []}),
            "unknown field `mustt`",
        ),
        (
            json!({"must_not": [{"key": "tag", "match": {"value": "one"}, "rnage": {"gt": 1}}]}),
            "unknown field `rnage`",
        ),
        (
            json!({"must_not": [{"key": "tag", "match": {"value": "one", "valeu": 2}}]}),
            "unknown field `valeu`",
        ),
        (
            json!({"must_not": [{"key": "n", "range": {"gt": 0, "lte_": 2}}]}),
            "unknown field `lte_`",
        ),
        (
            json!({"must_not": [{"has_id": [1], "key_": "n"}]}),
            "unknown field `key_` in a `has_id` condition",
        ),
    ];
    for (filter, needle) in cases {
        refused_filter(filter, needle);
    }
}

// ---- collections ----

#[test]
fn create_vectors_quantization_config_takes_qdrant_kinds_only() {
    let neq = json!({"quantization_config": {"neq": {"codec": "pq"}}});
    let (_dir, server) = create_refused(
        neq,
        json!({}),
        "vectors.quantization_config: a vector's own quantization is Qdrant's scalar or binary",
    );
    let scalar = create_x(
        json!({"quantization_config": {"scalar": {"type": "int8"}}}),
        json!({}),
    );
    server.ok("PUT", "/collections/x", Some(&scalar));
}

#[test]
fn create_vectors_datatype_other_than_float32_is_refused() {
    let needle = "vectors.datatype: \"float16\" is not supported by Cairn";
    let (_dir, server) = create_refused(json!({"datatype": "float16"}), json!({}), needle);
    let float32 = create_x(json!({"datatype": "float32"}), json!({}));
    server.ok("PUT", "/collections/x", Some(&float32));
}

#[test]
fn create_vectors_on_disk_other_than_a_boolean_is_refused() {
    // `on_disk: true` is served (`on_disk.rs`); a value that is neither is refused.
    let needle = "vectors.on_disk: \"yes\" is not supported by Cairn";
    let (_dir, server) = create_refused(json!({"on_disk": "yes"}), json!({}), needle);
    let in_memory = create_x(json!({"on_disk": false}), json!({}));
    server.ok("PUT", "/collections/x", Some(&in_memory));
}

#[test]
fn create_vectors_memory_other_than_a_tier_is_refused() {
    // `cold` is on disk (`on_disk.rs`); `cached` and `pinned` in RAM; others are refused.
    let needle = "vectors.memory: \"frozen\" is not supported by Cairn";
    create_refused(json!({"memory": "frozen"}), json!({}), needle);
}

#[test]
fn create_vectors_multivector_config_is_refused() {
    let multi = json!({"multivector_config": {"comparator": "max_sim"}});
    create_refused(
        multi,
        json!({}),
        &not_supported("vectors.multivector_config"),
    );
}

#[test]
fn create_sparse_vectors_on_disk_is_refused() {
    let sparse = json!({"sparse_vectors": {"text": {"index": {"on_disk": true}}}});
    let needle = "sparse_vectors.text.index.on_disk: true is not supported by Cairn";
    let (_dir, server) = create_refused(json!({}), sparse, needle);
    // None, as LangChain's dense stores send it, and in-memory sparse vectors are served.
    let none = create_x(json!({}), json!({"sparse_vectors": {}}));
    server.ok("PUT", "/collections/x", Some(&none));
    let idf = create_x(
        json!({}),
        json!({"sparse_vectors": {"text": {"modifier": "idf", "index": {"on_disk": false}}}}),
    );
    server.ok("PUT", "/collections/y", Some(&idf));
}

#[test]
fn create_custom_sharding_method_is_refused() {
    let needle = "sharding_method: \"custom\" is not supported by Cairn";
    let custom = json!({"sharding_method": "custom"});
    let (_dir, server) = create_refused(json!({}), custom, needle);
    let auto = create_x(json!({}), json!({"sharding_method": "auto"}));
    server.ok("PUT", "/collections/x", Some(&auto));
}

#[test]
fn create_strict_mode_config_is_refused() {
    let strict = json!({"strict_mode_config": {"enabled": true, "max_points_count": 10}});
    create_refused(json!({}), strict, &not_supported("strict_mode_config"));
}

#[test]
fn create_metadata_is_refused() {
    let metadata = json!({"metadata": {"owner": "search-team"}});
    create_refused(json!({}), metadata, &not_supported("metadata"));
}

#[test]
fn create_init_from_is_refused() {
    let init_from = json!({"init_from": {"collection": "c"}});
    create_refused(json!({}), init_from, &not_supported("init_from"));
}

// ---- writes ----

#[test]
fn upsert_shard_key_is_refused() {
    let body = json!({"points": [{"id": 9, "vector": [1.0, 1.0, 1.0]}], "shard_key": "eu"});
    refused_alone(
        "PUT /collections/c/points?wait=true",
        body,
        &not_supported("shard_key"),
    );
}

/// Refused until it was built: `update_filter` replaces a stored point only where the filter
/// holds (Qdrant leaves point 1 alone, its tag is not "two"), and inserts new points.
#[test]
fn upsert_update_filter_replaces_only_matching_points() {
    let (_dir, server) = fixture();
    let body = json!({
        "points": [{"id": 1, "vector": [9.0, 9.0, 9.0], "payload": {"tag": "overwritten"}},
                   {"id": 2, "vector": [8.0, 8.0, 8.0], "payload": {"tag": "replaced"}},
                   {"id": 4, "vector": [7.0, 7.0, 7.0], "payload": {"tag": "new"}}],
        "update_filter": {"must": [{"key": "tag", "match": {"value": "two"}}]}});
    server.ok("PUT", "/collections/c/points?wait=true", Some(&body));
    let tag = |id: u64| {
        server.ok("GET", &format!("/collections/c/points/{id}"), None)["payload"]["tag"].clone()
    };
    assert_eq!(tag(1), "one");
    assert_eq!(tag(2), "replaced");
    assert_eq!(tag(4), "new");
    let phrase = json!({"points": [{"id": 1, "vector": [9.0, 9.0, 9.0]}],
                     "update_filter": {"must": [{"key": "tag", "match": {"phrase": "x"}}]}});
    refused(
        &server,
        "PUT /collections/c/points?wait=true",
        Some(&phrase),
        &not_supported("update_filter.must[0].match.phrase"),
    );
}

#[test]
fn upsert_update_mode_other_than_upsert_is_refused() {
    let route = "PUT /collections/c/points?wait=true";
    let list =
        json!({"points": [{"id": 1, "vector": [9.0, 9.0, 9.0]}], "update_mode": "insert_only"});
    let needle = "update_mode: \"insert_only\" is not supported by Cairn";
    let (_dir, server) = refused_alone(route, list, needle);
    let batch =
        json!({"batch": {"ids": [7], "vectors": [[1.0, 1.0, 1.0]]}, "update_mode": "update_only"});
    let needle = "update_mode: \"update_only\" is not supported by Cairn";
    refused(&server, route, Some(&batch), needle);
    let upsert = json!({"points": [{"id": 4, "vector": [1.0, 1.0, 1.0]}], "update_mode": "upsert"});
    server.ok("PUT", "/collections/c/points?wait=true", Some(&upsert));
    assert_eq!(
        server.ok("POST", "/collections/c/points/count", Some(&json!({})))["count"],
        4
    );
}

#[test]
fn delete_shard_key_is_refused() {
    let route = "POST /collections/c/points/delete?wait=true";
    let by_ids = json!({"points": [1, 2], "shard_key": "eu"});
    let (_dir, server) = refused_alone(route, by_ids, &not_supported("shard_key"));
    let by_filter = json!({"filter": {"must": [{"has_id": [1]}]}, "shard_key": ["eu"]});
    refused(
        &server,
        route,
        Some(&by_filter),
        &not_supported("shard_key"),
    );
}

// ---- reads ----

#[test]
fn get_shard_key_is_refused() {
    let body = json!({"ids": [1, 2], "shard_key": "eu"});
    refused_alone(
        "POST /collections/c/points",
        body,
        &not_supported("shard_key"),
    );
}

/// Every read route takes Qdrant's consistency levels (served as the two levels of
/// `cairn_api::consistency`) and Cairn's `read_after`; a value neither can mean is a 400.
#[test]
fn read_consistency_levels_are_served_and_nonsense_refused() {
    let (_dir, server) = fixture();
    let query = json!({"query": [1.0, 0.0, 0.0]});
    let search = json!({"vector": [1.0, 0.0, 0.0], "limit": 3});
    let reads = [
        ("GET /collections/c/points/1", None),
        ("POST /collections/c/points", Some(json!({"ids": [1]}))),
        ("POST /collections/c/points/scroll", Some(json!({}))),
        ("POST /collections/c/points/count", Some(json!({}))),
        ("POST /collections/c/points/query", Some(query.clone())),
        (
            "POST /collections/c/points/query/batch",
            Some(json!({"searches": [query]})),
        ),
        ("POST /collections/c/points/search", Some(search.clone())),
        (
            "POST /collections/c/points/search/batch",
            Some(json!({"searches": [search]})),
        ),
    ];
    for (route, body) in &reads {
        let (method, path) = route.split_once(' ').unwrap();
        for level in ["1", "all", "majority", "quorum", "2"] {
            server.ok(
                method,
                &format!("{path}?consistency={level}"),
                body.as_ref(),
            );
        }
        server.ok(method, &format!("{path}?read_after=0:1"), body.as_ref());
        for level in ["most", "0"] {
            refused(
                &server,
                &format!("{route}?consistency={level}"),
                body.as_ref(),
                "consistency must be a positive number of replicas",
            );
        }
        refused(
            &server,
            &format!("{route}?read_after=soon"),
            body.as_ref(),
            "is not a read token",
        );
    }
    // A second value cannot slip past the first.
    let twice = "GET /collections/c/points/1?consistency=1&consistency=all";
    refused(&server, twice, None, "duplicate field `consistency`");
}

#[test]
fn scroll_shard_key_is_refused() {
    let body = json!({"limit": 2, "shard_key": "eu"});
    refused_alone(
        "POST /collections/c/points/scroll",
        body,
        &not_supported("shard_key"),
    );
}

#[test]
fn count_shard_key_is_refused() {
    let body = json!({"exact": true, "shard_key": "eu"});
    refused_alone(
        "POST /collections/c/points/count",
        body,
        &not_supported("shard_key"),
    );
}

#[test]
fn query_shard_key_is_refused() {
    let body = json!({"query": [1.0, 0.0, 0.0], "shard_key": "eu"});
    refused_alone(
        "POST /collections/c/points/query",
        body,
        &not_supported("shard_key"),
    );
}

#[test]
fn query_prefetch_lookup_from_is_refused() {
    let prefetch = json!({"query": 2, "lookup_from": {"collection": "other"}, "limit": 1});
    let body = json!({"query": [1.0, 0.0, 0.0], "prefetch": prefetch});
    let (_dir, server) = refused_alone(
        "POST /collections/c/points/query",
        body.clone(),
        &not_supported("prefetch[0].lookup_from"),
    );
    let batch = json!({"searches": [{"query": [1.0, 0.0, 0.0]}, body]});
    let needle = not_supported("searches[1].prefetch[0].lookup_from");
    refused(
        &server,
        "POST /collections/c/points/query/batch",
        Some(&batch),
        &needle,
    );
}

#[test]
fn query_lookup_from_is_refused() {
    let body = json!({"query": 2, "lookup_from": {"collection": "other", "vector": "image"}});
    refused_alone(
        "POST /collections/c/points/query",
        body,
        &not_supported("lookup_from"),
    );
}

#[test]
fn search_shard_key_is_refused() {
    let body = json!({"vector": [1.0, 0.0, 0.0], "limit": 3, "shard_key": "eu"});
    let (_dir, server) = refused_alone(
        "POST /collections/c/points/search",
        body.clone(),
        &not_supported("shard_key"),
    );
    let batch = json!({"searches": [body]});
    let needle = not_supported("searches[0].shard_key");
    refused(
        &server,
        "POST /collections/c/points/search/batch",
        Some(&batch),
        &needle,
    );
}

// ---- what stays accepted ----

#[test]
fn nulls_cairns_own_values_and_tuning_knobs_are_accepted() {
    let (_dir, server) = fixture();
    let body = create_x(
        json!({"datatype": "float32", "on_disk": false, "quantization_config": null,
               "hnsw_config": {"m": 8, "on_disk": true, "max_indexing_threads": 2}}),
        json!({"sharding_method": "auto", "sparse_vectors": null, "metadata": null,
               "on_disk_payload": true, "wal_config": {"wal_capacity_mb": 64},
               "optimizers_config": {"deleted_threshold": 0.3}, "payload": {"memory": "cold"}}),
    );
    server.ok("PUT", "/collections/x?timeout=10", Some(&body));
    let upsert = json!({"points": [{"id": 4, "vector": [1.0, 1.0, 0.0]}],
                        "shard_key": null, "update_filter": null, "update_mode": "upsert"});
    server.ok(
        "PUT",
        "/collections/c/points?wait=true&ordering=strong&timeout=5",
        Some(&upsert),
    );
    let query = json!({"query": {"nearest": [1.0, 0.5, 0.0], "mmr": null}, "limit": 2,
                       "prefetch": null, "lookup_from": null, "shard_key": null,
                       "params": {"indexed_only": true, "acorn": {"enable": true}},
                       "filter": {"must": [{"key": "n", "range": {"gte": 1, "lt": null},
                                            "geo_radius": null}],
                                  "min_should": null}});
    let hits = server.ok(
        "POST",
        "/collections/c/points/query?timeout=5",
        Some(&query),
    );
    assert_eq!(ids(&hits), vec![1, 2]);
    let scroll = json!({"order_by": null,
                        "filter": {"must": {"key": "tag", "match": {"value": "two", "text": null}}}});
    assert_eq!(
        ids(&server.ok("POST", "/collections/c/points/scroll", Some(&scroll))),
        vec![2]
    );
    let count = json!({"exact": false});
    assert_eq!(
        server.ok("POST", "/collections/c/points/count", Some(&count))["count"],
        4
    );
}
