//! `POST /collections/{c}/facet`: counts of an indexed key's values, checked against counts
//! made here: keyword, integer, bool and array values, with a filter, a limit, across
//! partitions (a spilled point counts once), and refused without an index.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::harness::{seeded_vectors, stored_copies, Server};

fn payload(i: usize) -> Value {
    let mut p = json!({"size": i % 4, "flag": i.is_multiple_of(2),
                       "tags": if i.is_multiple_of(5) { json!(["a", "b", "a"]) } else { json!(["a"]) }});
    if !i.is_multiple_of(10) {
        p["color"] = json!(["red", "green", "blue"][i % 3]);
    }
    p
}

/// Counts made here, most first, ties by value.
fn expected(n: usize, key: &str, keep: impl Fn(usize) -> bool) -> Vec<(Value, u64)> {
    let mut counts: BTreeMap<String, (Value, u64)> = BTreeMap::new();
    for i in (0..n).filter(|&i| keep(i)) {
        let mut values = match &payload(i)[key] {
            Value::Array(a) => a.clone(),
            Value::Null => vec![],
            v @ (Value::Bool(_) | Value::Number(_) | Value::String(_) | Value::Object(_)) => {
                vec![v.clone()]
            }
        };
        values.sort_by_key(|v| v.to_string());
        values.dedup();
        for v in values {
            counts.entry(v.to_string()).or_insert((v, 0)).1 += 1;
        }
    }
    let mut out: Vec<(Value, u64)> = counts.into_values().collect();
    out.sort_by(|a, b| {
        b.1.cmp(&a.1).then_with(|| match (&a.0, &b.0) {
            (Value::Number(x), Value::Number(y)) => {
                x.as_f64().unwrap().total_cmp(&y.as_f64().unwrap())
            }
            (x, y) => x.to_string().cmp(&y.to_string()),
        })
    });
    out
}

fn facet(server: &Server, name: &str, body: Value) -> Vec<(Value, u64)> {
    server.ok("POST", &format!("/collections/{name}/facet"), Some(&body))["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| (h["value"].clone(), h["count"].as_u64().unwrap()))
        .collect()
}

fn load(server: &Server, name: &str, n: usize, dim: usize) {
    let vectors = seeded_vectors(n, dim, 41);
    for (b, chunk) in vectors.chunks(dim * 500).enumerate() {
        let points: Vec<Value> = chunk
            .chunks(dim)
            .enumerate()
            .map(|(i, v)| {
                let id = b * 500 + i;
                json!({"id": id, "vector": v, "payload": payload(id)})
            })
            .collect();
        server.ok(
            "PUT",
            &format!("/collections/{name}/points?wait=true"),
            Some(&json!({ "points": points })),
        );
    }
    for (key, schema) in [
        ("color", "keyword"),
        ("size", "integer"),
        ("tags", "keyword"),
        ("flag", "bool"),
    ] {
        server.ok(
            "PUT",
            &format!("/collections/{name}/index?wait=true"),
            Some(&json!({"field_name": key, "field_schema": schema})),
        );
    }
}

#[test]
fn facets_count_each_value_of_an_indexed_key() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    server.create("shop", 2, "Euclid", json!({}));
    let (status, body) = server.call(
        "POST",
        "/collections/nowhere/facet",
        Some(&json!({"key": "color"})),
    );
    assert_eq!(status, 404, "{body}");
    load(&server, "shop", 300, 2);

    let all = |_: usize| true;
    for key in ["color", "size", "tags", "flag"] {
        assert_eq!(
            facet(&server, "shop", json!({ "key": key })),
            expected(300, key, all),
            "{key}"
        );
    }
    assert_eq!(
        facet(
            &server,
            "shop",
            json!({"key": "color", "filter": {"must": [{"key": "size", "match": {"value": 1}}]}})
        ),
        expected(300, "color", |i| i % 4 == 1)
    );
    assert_eq!(
        facet(
            &server,
            "shop",
            json!({"key": "size", "limit": 2, "exact": true})
        ),
        expected(300, "size", all)[..2]
    );
    for (body, says) in [
        (json!({"key": "nothing"}), "payload index"),
        (json!({"key": "color", "limit": 0}), "limit"),
        (json!({"limit": 3}), "key"),
    ] {
        let (status, answer) = server.call("POST", "/collections/shop/facet", Some(&body));
        assert_eq!(status, 400, "{body}: {answer}");
        let error = answer["status"]["error"].as_str().unwrap();
        assert!(error.contains(says), "{error:?} should say {says:?}");
    }
}

#[test]
fn a_point_spilled_into_two_partitions_counts_once() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    server.create("parts", 8, "Euclid", json!({"partitions": 3}));
    load(&server, "parts", 2_000, 8);
    let info = server.wait_routed("parts");
    let copies = stored_copies(&info);
    assert!(
        copies > 2_000,
        "some points are spilled: {}",
        info["routing"]
    );
    assert_eq!(
        facet(&server, "parts", json!({"key": "color"})),
        expected(2_000, "color", |_| true)
    );
}
