//! Payload indexes (`PUT/DELETE /collections/{c}/index`): what they index, that filtered
//! queries and counts use them and still answer exactly, and that they outlive a `kill -9`.

use serde_json::{json, Value};

use crate::harness::{ids, Server};

const POINTS: u64 = 3_000;
const DIM: usize = 8;

/// A deterministic vector per id.
fn vector(id: u64) -> Vec<f32> {
    (0..DIM as u64)
        .map(|j| ((id * 7919 + j * 104_729) % 1000) as f32 / 1000.0)
        .collect()
}

fn payload(id: u64) -> Value {
    json!({
        "doc": format!("doc-{}", id % 60),
        "n": id,
        "ok": id.is_multiple_of(2),
        "body": format!("Part {} of the common Story", id % 7),
        "meta": {"tags": [format!("t{}", id % 5), "all"]},
        "at": place(id),
        "when": when(id),
    })
}

/// Where a point is: spread over every longitude and latitudes −60…60, in tenths of a degree.
fn place(id: u64) -> Value {
    json!({"lon": lon(id), "lat": lat(id)})
}

fn lon(id: u64) -> f64 {
    -180.0 + ((id * 37) % 3600) as f64 / 10.0
}

fn lat(id: u64) -> f64 {
    -60.0 + ((id * 53) % 1200) as f64 / 10.0
}

/// Point `id`'s instant is `id` hours after 2024-01-01T00:00:00Z, spelled in the ways Qdrant
/// reads (a zone offset, no zone, a space for the `T`); every 50th is no datetime at all.
fn when(id: u64) -> Value {
    if id.is_multiple_of(50) {
        return json!("soon");
    }
    let (mut day, hour) = (id / 24, id % 24);
    let mut month = 1;
    // 2024's months, a leap February; the ids reach into May.
    for length in [31, 29, 31, 30, 31] {
        if day < length {
            break;
        }
        day -= length;
        month += 1;
    }
    let day = day + 1;
    let text = match id % 3 {
        0 => format!("2024-{month:02}-{day:02}T{hour:02}:00:00Z"),
        1 => format!("2024-{month:02}-{day:02} {hour:02}:00:00"),
        _ => format!("2024-{month:02}-{day:02}T{hour:02}:00:00+00:00"),
    };
    json!(text)
}

fn loaded() -> (tempfile::TempDir, Server) {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    server.create("c", DIM, "Euclid", json!({}));
    for chunk in (0..POINTS).collect::<Vec<_>>().chunks(1000) {
        let points: Vec<Value> = chunk
            .iter()
            .map(|&id| json!({"id": id, "vector": vector(id), "payload": payload(id)}))
            .collect();
        server.ok(
            "PUT",
            "/collections/c/points?wait=true",
            Some(&json!({ "points": points })),
        );
    }
    (dir, server)
}

fn index(server: &Server, field: &str, schema: Value) -> Value {
    server.ok(
        "PUT",
        "/collections/c/index?wait=true",
        Some(&json!({"field_name": field, "field_schema": schema})),
    )
}

/// A filtered query with `explain`, and the same query scanned exactly.
fn query(server: &Server, filter: &Value) -> (Value, Vec<u64>) {
    let q = json!({"query": vector(11), "limit": 10, "filter": filter, "explain": true});
    let answer = server.ok("POST", "/collections/c/points/query", Some(&q));
    let exact = json!({"query": vector(11), "limit": 10, "filter": filter,
                       "params": {"exact": true}});
    let truth = ids(&server.ok("POST", "/collections/c/points/query", Some(&exact)));
    (answer, truth)
}

fn count(server: &Server, filter: &Value) -> u64 {
    let body = json!({"filter": filter, "exact": true});
    server.ok("POST", "/collections/c/points/count", Some(&body))["count"]
        .as_u64()
        .unwrap()
}

#[test]
fn indexed_filters_score_only_their_candidates_and_answer_exactly() {
    let (_dir, mut server) = loaded();
    let done = index(&server, "doc", json!("keyword"));
    assert_eq!(done["status"], "completed");
    index(&server, "n", json!("integer"));
    index(&server, "ok", json!("bool"));
    index(
        &server,
        "body",
        json!({"type": "text", "tokenizer": "word", "lowercase": true}),
    );
    index(&server, "meta.tags[]", json!("keyword"));
    let schema = &server.ok("GET", "/collections/c", None)["payload_schema"];
    assert_eq!(
        schema["doc"],
        json!({"data_type": "keyword", "points": POINTS})
    );
    assert_eq!(schema["body"]["data_type"], "text");

    let doc = json!({"must": [{"key": "doc", "match": {"value": "doc-7"}}]});
    let (answer, truth) = query(&server, &doc);
    let explain = &answer["explain"];
    assert_eq!(
        explain["payload_index_candidates"],
        POINTS / 60,
        "{explain}"
    );
    assert_eq!(explain["exact"], true, "{explain}");
    assert_eq!(explain["distance_computations"], POINTS / 60, "{explain}");
    assert_eq!(ids(&answer), truth);
    assert!(ids(&answer).iter().all(|id| id % 60 == 7));

    // Conditions that narrow together; an unindexed one is still checked on each candidate.
    let mixed = json!({"must": [
        {"key": "n", "range": {"gte": 100, "lt": 1100}},
        {"key": "meta.tags", "match": {"any": ["t1", "t2"]}},
        {"must": [{"key": "ok", "match": {"value": true}}]}
    ], "must_not": [{"key": "doc", "match": {"value": "doc-2"}}]});
    let (answer, truth) = query(&server, &mixed);
    assert_eq!(ids(&answer), truth);
    let expected = (100..1100u64)
        .filter(|id| [1, 2].contains(&(id % 5)) && id % 2 == 0 && id % 60 != 2)
        .count() as u64;
    assert_eq!(count(&server, &mixed), expected);

    // Words where the key has a text index: every word, any case, in any order.
    let words = json!({"must": [{"key": "body", "match": {"text": "story PART 3"}}]});
    let part_3 = (0..POINTS).filter(|i| i % 7 == 3).count() as u64;
    assert_eq!(count(&server, &words), part_3);
    let (answer, truth) = query(&server, &words);
    assert_eq!(ids(&answer), truth);

    // Indexes are stored: after a kill -9 they are back, built from the points.
    server.kill9();
    server.restart();
    let schema = &server.ok("GET", "/collections/c", None)["payload_schema"];
    assert_eq!(
        schema["n"],
        json!({"data_type": "integer", "points": POINTS})
    );
    let (answer, _) = query(&server, &doc);
    assert_eq!(answer["explain"]["payload_index_candidates"], POINTS / 60);

    // Writes after the index keep it whole: a moved point leaves its old value's list.
    let moved = json!({"points": [{"id": 7, "vector": vector(7), "payload": {"doc": "doc-8"}}]});
    server.ok("PUT", "/collections/c/points?wait=true", Some(&moved));
    assert_eq!(count(&server, &doc), POINTS / 60 - 1);
    let eight = json!({"must": [{"key": "doc", "match": {"value": "doc-8"}}]});
    assert_eq!(count(&server, &eight), POINTS / 60 + 1);

    // Dropped: the same answers, read from the payloads.
    server.ok("DELETE", "/collections/c/index/doc?wait=true", None);
    let (answer, truth) = query(&server, &doc);
    assert!(answer["explain"].get("payload_index_candidates").is_none());
    assert_eq!(ids(&answer), truth);
    assert!(server.ok("GET", "/collections/c", None)["payload_schema"]
        .get("doc")
        .is_none());
}

/// Metres between two points on the sphere Qdrant measures on (the test's own haversine).
fn metres(lon1: f64, lat1: f64, lon2: f64, lat2: f64) -> f64 {
    let (p1, p2) = (lat1.to_radians(), lat2.to_radians());
    let h = ((p2 - p1) / 2.0).sin().powi(2)
        + p1.cos() * p2.cos() * ((lon2 - lon1).to_radians() / 2.0).sin().powi(2);
    2.0 * 6_371_008.8 * h.sqrt().asin()
}

/// Datetime ranges and geo conditions count exactly what brute force counts, before and after
/// their keys are indexed; with the index, a query scores only the index's candidates and
/// still returns the exact top 10.
#[test]
fn datetime_and_geo_filters_answer_alike_with_and_without_an_index() {
    let (_dir, server) = loaded();
    let hours = |from: u64, to: u64| {
        (0..POINTS)
            .filter(|id| id % 50 != 0 && (from..to).contains(id))
            .count() as u64
    };
    let square = |west: f64, south: f64, east: f64, north: f64| {
        json!({"points": [{"lon": west, "lat": south}, {"lon": east, "lat": south},
                          {"lon": east, "lat": north}, {"lon": west, "lat": north},
                          {"lon": west, "lat": south}]})
    };
    let all = 0..POINTS;
    let cases: Vec<(Value, u64)> = vec![
        // Hours 100 to 499 after the base, bounds in other spellings and zones.
        (
            json!({"key": "when", "range": {"gte": "2024-01-05T04:00:00Z", "lt": "2024-01-21 20:00"}}),
            hours(100, 500),
        ),
        (
            json!({"key": "when", "range": {"gt": "2024-01-01T01:59:59.999999+00:00", "lte": "2024-01-02T05:00:00+02:00"}}),
            hours(2, 28),
        ),
        (
            json!({"key": "when", "range": {"gte": "2024-03-01"}}),
            hours(1440, POINTS),
        ),
        (
            json!({"key": "at", "geo_radius": {"center": {"lon": 10.0, "lat": 20.0}, "radius": 2_000_000.0}}),
            all.clone()
                .filter(|&id| metres(10.0, 20.0, lon(id), lat(id)) < 2_000_000.0)
                .count() as u64,
        ),
        (
            json!({"key": "at", "geo_bounding_box": {"top_left": {"lon": 170.0, "lat": 10.0},
                                                      "bottom_right": {"lon": -170.0, "lat": -10.0}}}),
            all.clone()
                .filter(|&id| (lon(id) > 170.0 || lon(id) < -170.0) && lat(id).abs() < 10.0)
                .count() as u64,
        ),
        (
            json!({"key": "at", "geo_polygon": {"exterior": square(-20.0, -20.0, 20.0, 20.0),
                                                 "interiors": [square(-5.0, -5.0, 5.0, 5.0)]}}),
            all.clone()
                .filter(|&id| {
                    let (x, y) = (lon(id), lat(id));
                    let inside = |r: f64| x > -r && x < r && y > -r && y < r;
                    inside(20.0) && !((-5.0..=5.0).contains(&x) && (-5.0..=5.0).contains(&y))
                })
                .count() as u64,
        ),
    ];
    let check = |indexed: bool| {
        for (condition, expected) in &cases {
            assert!(*expected > 10, "{condition}: a test needs matches");
            let filter = json!({"must": [condition]});
            assert_eq!(count(&server, &filter), *expected, "{condition}");
            let (answer, truth) = query(&server, &filter);
            assert_eq!(ids(&answer), truth, "{condition}");
            let candidates = answer["explain"]["payload_index_candidates"].as_u64();
            if indexed {
                let candidates = candidates.unwrap_or_else(|| panic!("{condition}: {answer}"));
                // Exact for datetimes; the cells around a geo region hold a little more.
                assert!(
                    candidates >= *expected && candidates <= 2 * expected,
                    "{condition}: {candidates}"
                );
            } else {
                assert_eq!(candidates, None, "{condition}");
            }
        }
    };
    check(false);
    index(&server, "when", json!("datetime"));
    index(&server, "at", json!("geo"));
    let schema = &server.ok("GET", "/collections/c", None)["payload_schema"];
    assert_eq!(schema["at"], json!({"data_type": "geo", "points": POINTS}));
    assert_eq!(
        schema["when"],
        json!({"data_type": "datetime", "points": POINTS - POINTS / 50})
    );
    check(true);
    // A datetime index orders a scroll; its values are microseconds since the epoch.
    let base = 1_704_067_200_000_000u64; // 2024-01-01T00:00:00Z
    let scroll = json!({"limit": 3, "order_by": {"key": "when", "direction": "desc",
                                                 "start_from": "2024-01-03T03:00:00+01:00"}});
    let page = server.ok("POST", "/collections/c/points/scroll", Some(&scroll));
    let got: Vec<(u64, u64)> = page["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["id"].as_u64().unwrap(),
                p["order_value"].as_u64().unwrap(),
            )
        })
        .collect();
    let hour = 3_600_000_000u64;
    // 2024-01-03T02:00Z is hour 50, which holds no datetime.
    assert_eq!(got, [49, 48, 47].map(|id| (id, base + id * hour)), "{page}");
    // Bad shapes are a 400 naming the condition.
    for (condition, needle) in [
        (
            json!({"key": "at", "geo_polygon": {"exterior": {"points": [{"lon": 0, "lat": 0}, {"lon": 1, "lat": 0}, {"lon": 0, "lat": 1}]}}}),
            "filter.must[0].geo_polygon.exterior: a ring needs at least 4 points",
        ),
        (
            json!({"key": "at", "geo_radius": {"center": {"lon": 0, "lat": 95}, "radius": 1.0}}),
            "filter.must[0].geo_radius.center",
        ),
        (
            json!({"key": "when", "range": {"gte": "next tuesday"}}),
            "'next tuesday' is not a datetime",
        ),
    ] {
        let body = json!({"filter": {"must": [condition]}});
        let (status, answer) = server.call("POST", "/collections/c/points/count", Some(&body));
        assert_eq!(status, 400, "{answer}");
        let message = answer["status"]["error"].as_str().unwrap_or_default();
        assert!(message.contains(needle), "{message}");
    }
}

/// Without a text index `match.text` is a substring test (Qdrant's rule).
#[test]
fn text_without_an_index_matches_substrings() {
    let (_dir, server) = loaded();
    let substring = json!({"must": [{"key": "body", "match": {"text": "rt 3 of the com"}}]});
    assert_eq!(
        count(&server, &substring),
        (0..POINTS).filter(|i| i % 7 == 3).count() as u64
    );
    let case = json!({"must": [{"key": "body", "match": {"text": "story"}}]});
    assert_eq!(count(&server, &case), 0, "a substring keeps its case");
}

#[test]
fn index_requests_cairn_cannot_honour_are_refused() {
    let (_dir, server) = loaded();
    for (body, needle) in [
        (json!({"field_name": "d"}), "field_schema is required"),
        (
            json!({"field_name": "", "field_schema": "keyword"}),
            "field_name",
        ),
        (
            json!({"field_name": "b", "field_schema": {"type": "text", "tokenizer": "prefix"}}),
            "tokenizer",
        ),
        (
            json!({"field_name": "b", "field_schema": {"type": "text", "min_token_len": 2}}),
            "min_token_len",
        ),
        (
            json!({"field_name": "b", "field_schema": "vector"}),
            "field_schema",
        ),
    ] {
        let (status, answer) = server.call("PUT", "/collections/c/index", Some(&body));
        assert_eq!(status, 400, "{body} -> {answer}");
        let message = answer["status"]["error"].as_str().unwrap_or_default();
        assert!(message.contains(needle), "{body}: {message}");
    }
    let (status, _) = server.call(
        "PUT",
        "/collections/missing/index",
        Some(&json!({"field_name": "d", "field_schema": "keyword"})),
    );
    assert_eq!(status, 404);
    assert!(server.ok("GET", "/collections/c", None)["payload_schema"]
        .as_object()
        .unwrap()
        .is_empty());
}

/// Scroll's `order_by` walks an integer or float index in order: each point once, at its
/// first value in that order, from `start_from`, through the filter; refused without such an
/// index or with `offset`.
#[test]
fn order_by_pages_by_an_indexed_number() {
    let (_dir, server) = loaded();
    // `price`: distinct per point (a permutation of the ids), with a second, larger value on
    // every tenth point and none on every seventh.
    let price = |id: u64| (id * 1_031) % POINTS;
    let points: Vec<Value> = (0..POINTS)
        .map(|id| {
            let mut p = payload(id);
            if id % 7 != 0 {
                p["price"] = match id % 10 {
                    0 => json!([price(id) as f64 + 0.5, (POINTS + id) as f64 + 0.5]),
                    _ => json!(price(id) as f64 + 0.5),
                };
            }
            json!({"id": id, "vector": vector(id), "payload": p})
        })
        .collect();
    for chunk in points.chunks(1000) {
        server.ok(
            "PUT",
            "/collections/c/points?wait=true",
            Some(&json!({ "points": chunk })),
        );
    }
    let scroll = |body: Value| server.call("POST", "/collections/c/points/scroll", Some(&body));
    let (status, refused) = scroll(json!({"order_by": "price"}));
    assert_eq!(status, 400, "{refused}");
    assert!(refused["status"]["error"]
        .as_str()
        .unwrap()
        .contains("no integer, float or datetime payload index"));
    index(&server, "price", json!("float"));

    // Expected: each (value, point) pair from `from` on in the order, as Qdrant gives them
    // (a point with two values comes twice), points without one left out.
    let values = |id: u64| -> Vec<f64> {
        match id % 7 {
            0 => vec![],
            _ if id.is_multiple_of(10) => vec![price(id) as f64 + 0.5, (POINTS + id) as f64 + 0.5],
            _ => vec![price(id) as f64 + 0.5],
        }
    };
    let expected = |descending: bool, from: Option<f64>, keep: &dyn Fn(u64) -> bool| {
        let mut all: Vec<(f64, u64)> = (0..POINTS)
            .filter(|&id| keep(id))
            .flat_map(|id| values(id).into_iter().map(move |v| (v, id)))
            .filter(|&(v, _)| match (from, descending) {
                (None, _) => true,
                (Some(f), false) => v >= f,
                (Some(f), true) => v <= f,
            })
            .collect();
        all.sort_by(|a, b| {
            if descending {
                b.0.total_cmp(&a.0)
            } else {
                a.0.total_cmp(&b.0)
            }
        });
        all.into_iter().take(20).collect::<Vec<_>>()
    };
    let got = |body: Value| -> Vec<(f64, u64)> {
        let (status, page) = scroll(body);
        assert_eq!(status, 200, "{page}");
        assert!(page["result"]["next_page_offset"].is_null(), "{page}");
        page["result"]["points"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                (
                    p["order_value"].as_f64().unwrap(),
                    p["id"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    let all = |_: u64| true;
    assert_eq!(
        got(json!({"order_by": "price", "limit": 20})),
        expected(false, None, &all)
    );
    let desc = json!({"order_by": {"key": "price", "direction": "desc"}, "limit": 20});
    assert_eq!(got(desc), expected(true, None, &all));
    let from = json!({"order_by": {"key": "price", "start_from": 1500.0}, "limit": 20});
    assert_eq!(got(from), expected(false, Some(1500.0), &all));
    let filtered = json!({"order_by": {"key": "price", "direction": "desc", "start_from": 2000},
                          "filter": {"must": [{"key": "ok", "match": {"value": true}}]},
                          "limit": 20});
    assert_eq!(
        got(filtered),
        expected(true, Some(2000.0), &|id| id % 2 == 0)
    );

    let (status, refused) = scroll(json!({"order_by": "price", "offset": 3}));
    assert_eq!(status, 400, "{refused}");
    assert!(refused["status"]["error"]
        .as_str()
        .unwrap()
        .contains("start_from"));
    let (status, refused) = scroll(json!({"order_by": {"key": "price", "dir": "desc"}}));
    assert_eq!(status, 400, "{refused}");
    let (status, refused) = scroll(json!({"order_by": "doc"}));
    assert_eq!(status, 400, "{refused}");
}

/// On a cluster, an index changes at one place in each partition's log: created through any
/// node, every replica builds it; a node away meanwhile gets it with the snapshot that brings
/// it back; each node's info reports it from its own replica and its queries use it; nodes
/// without a replica order scrolls and count facets by it through one that has; dropped
/// through another node, it goes everywhere.
#[test]
fn on_a_cluster_every_replica_indexes_at_the_same_place_in_its_log() {
    use crate::peers::{nodes_with_collection, upsert, wait_count, wait_log, write_until_purged};
    let root = tempfile::tempdir().unwrap();
    let mut nodes = nodes_with_collection(
        root.path(),
        &[
            ("CAIRN__CLUSTER__SNAPSHOT_EVERY_ENTRIES", "100"),
            ("CAIRN__CLUSTER__LOG_KEEP_ENTRIES", "20"),
        ],
        "ix",
        3,
    );
    let (status, body) = upsert(&nodes[0], "ix", 0..20, "early");
    assert_eq!(status, 200, "{body}");
    nodes[2].kill9();
    let created = nodes[1].ok(
        "PUT",
        "/collections/ix/index?wait=true",
        Some(&json!({"field_name": "tag", "field_schema": "keyword"})),
    );
    assert_eq!(created["status"], "completed");
    // Node 3 comes back behind the retained log: only a snapshot can bring it the index.
    let next = write_until_purged(&[&nodes[0], &nodes[1]], "ix", 20, 100);
    nodes[2].restart();
    wait_log(&nodes[2], "snapshot installed");
    wait_count(&nodes[2], "ix", next);
    let schema_on = |node: &crate::harness::Server| {
        node.ok("GET", "/collections/ix", None)["payload_schema"].clone()
    };
    let early = json!({"must": [{"key": "tag", "match": {"value": "early"}}]});
    for node in &nodes {
        assert_eq!(
            schema_on(node),
            json!({"tag": {"data_type": "keyword", "points": next}}),
            "{}",
            node.addr
        );
        let q =
            json!({"query": [1.2, 1.0, 0.5, 0.25], "limit": 5, "filter": early, "explain": true});
        let answer = node.ok("POST", "/collections/ix/points/query", Some(&q));
        assert_eq!(
            answer["explain"]["payload_index_candidates"], 20,
            "{answer}"
        );
        assert_eq!(ids(&answer), [1, 2, 0, 3, 4], "{answer}");
    }
    // One replica on three nodes: two nodes forward, and order by an index they ask for.
    nodes[0].create("one", 4, "Euclid", json!({"replication_factor": 1}));
    for node in &nodes {
        wait_count(node, "one", 0);
    }
    let points: Vec<Value> = (0..30u64)
        .map(|i| json!({"id": i, "vector": [i as f32, 0.0, 0.0, 1.0], "payload": {"n": (i * 7) % 30}}))
        .collect();
    nodes[1].ok(
        "PUT",
        "/collections/one/points?wait=true",
        Some(&json!({"points": points})),
    );
    let body = json!({"field_name": "n", "field_schema": "integer"});
    nodes[2].ok("PUT", "/collections/one/index?wait=true", Some(&body));
    for node in &nodes {
        let scroll = json!({"limit": 3, "order_by": {"key": "n", "direction": "desc"}});
        let page = node.ok("POST", "/collections/one/points/scroll", Some(&scroll));
        let values: Vec<u64> = page["points"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["order_value"].as_u64().unwrap())
            .collect();
        assert_eq!(values, [29, 28, 27], "{}: {page}", node.addr);
        // Facets too: every value once, the smallest first among equal counts.
        let facet =
            json!({"key": "n", "limit": 2, "filter": {"must": {"key": "n", "range": {"gte": 10}}}});
        let hits = node.ok("POST", "/collections/one/facet", Some(&facet));
        assert_eq!(
            hits["hits"],
            json!([{"value": 10, "count": 1}, {"value": 11, "count": 1}]),
            "{}",
            node.addr
        );
    }
    // Dropped through node 3: every replica drops it (each a moment after the answer).
    nodes[2].ok("DELETE", "/collections/ix/index/tag?wait=true", None);
    for node in &nodes {
        let started = std::time::Instant::now();
        while schema_on(node) != json!({}) {
            assert!(
                started.elapsed() < std::time::Duration::from_secs(30),
                "{} keeps the index: {}",
                node.addr,
                schema_on(node)
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
}
