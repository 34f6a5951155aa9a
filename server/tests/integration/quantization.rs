//! Qdrant's `scalar` and `binary` quantization over REST (issue #24, point 6): graphs
//! traverse by row codes and re-rank by the full vectors, for every distance; recall against
//! exact ground truth on the shared real sets; `rescore`, `oversampling` and `ignore` per
//! query; the collection info in Qdrant's shape; the same answers after a restart, which
//! trains the codes again from the stored vectors.

use cairn_index::dataset::{load_dataset, recall_at_k, shared_data_dir, Dataset};
use serde_json::{json, Value};

use crate::harness::{ids, Server};

fn answers(server: &Server, collection: &str, data: &Dataset, params: &Value) -> Vec<Vec<u64>> {
    data.queries
        .rows()
        .map(|q| {
            ids(&server.ok(
                "POST",
                &format!("/collections/{collection}/points/query"),
                Some(&json!({"query": q, "limit": 10, "params": params})),
            ))
        })
        .collect()
}

fn recall(results: &[Vec<u64>], data: &Dataset) -> f64 {
    let slots: Vec<Vec<u32>> = results
        .iter()
        .map(|r| r.iter().map(|&id| id as u32).collect())
        .collect();
    recall_at_k(&slots, &data.ground_truth, 10)
}

#[test]
fn scalar_and_binary_codes_answer_every_distance_and_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path(), &[]);
    let sets = [
        (
            "sift",
            "siftsmall",
            "Euclid",
            json!({"scalar": {"type": "int8"}}),
            0.95,
        ),
        (
            "glove",
            "glove50-5k-angular",
            "Cosine",
            json!({"binary": {}}),
            0.80,
        ),
        (
            "ml",
            "movielens-mips",
            "Dot",
            json!({"scalar": {"type": "int8", "quantile": 0.995}}),
            0.95,
        ),
    ];
    let mut before = Vec::new();
    for (name, set, distance, quantization, floor) in &sets {
        let data = load_dataset(&shared_data_dir().join(set)).unwrap();
        let dim = data.base.dim;
        server.create(
            name,
            dim,
            distance,
            json!({"quantization_config": quantization}),
        );
        server.upsert_vectors(name, dim, &data.base.data, 0, 1000);
        let info = server.ok("GET", &format!("/collections/{name}"), None);
        let reported = &info["config"]["quantization_config"];
        let kind = if quantization.get("scalar").is_some() {
            "scalar"
        } else {
            "binary"
        };
        assert!(reported[kind].is_object(), "{reported}");
        assert_eq!(
            reported[kind]["always_ram"], true,
            "defaults filled in: {reported}"
        );

        // Binary codes need oversampling, as Qdrant advises.
        let params = if kind == "binary" {
            json!({"quantization": {"oversampling": 16}})
        } else {
            json!({})
        };
        let coded = answers(&server, name, &data, &params);
        let with = recall(&coded, &data);
        let full = answers(
            &server,
            name,
            &data,
            &json!({"quantization": {"ignore": true}}),
        );
        let without = recall(&full, &data);
        eprintln!("{set} {distance} {kind}: REST recall@10 {with:.3} with codes, {without:.3} ignoring them");
        assert!(with >= *floor, "{set}: recall@10 {with:.3}");

        let q = data.queries.row(0);
        let explained = server.ok(
            "POST",
            &format!("/collections/{name}/points/query"),
            Some(&json!({"query": q, "limit": 10, "explain": true})),
        );
        let codes = if kind == "scalar" { "int8" } else { "binary" };
        assert_eq!(
            explained["explain"]["quantization"], codes,
            "{}",
            explained["explain"]
        );
        let ignored = server.ok(
            "POST",
            &format!("/collections/{name}/points/query"),
            Some(&json!({"query": q, "limit": 10, "explain": true,
                         "params": {"quantization": {"ignore": true}}})),
        );
        assert!(
            ignored["explain"].get("quantization").is_none(),
            "{}",
            ignored["explain"]
        );
        // Rescored scores are the exact ones; without rescoring they are the codes' estimates.
        let exact = server.ok(
            "POST",
            &format!("/collections/{name}/points/query"),
            Some(&json!({"query": q, "limit": 10, "params": {"exact": true}})),
        );
        let score = |v: &Value, id: &Value| {
            v["points"]
                .as_array()
                .unwrap()
                .iter()
                .find(|p| &p["id"] == id)
                .map(|p| p["score"].as_f64().unwrap())
        };
        let top = &exact["points"][0];
        let rescored = score(&explained, &top["id"]).expect("the nearest point is found");
        assert!(
            (rescored - top["score"].as_f64().unwrap()).abs() < 1e-4,
            "{rescored} vs {top}"
        );
        let rough = server.ok(
            "POST",
            &format!("/collections/{name}/points/query"),
            Some(&json!({"query": q, "limit": 10, "params": {"quantization": {"rescore": false}}})),
        );
        let differs = rough["points"].as_array().unwrap().iter().any(|p| {
            score(&exact, &p["id"]).is_some_and(|s| (s - p["score"].as_f64().unwrap()).abs() > 1e-4)
        });
        assert!(differs, "rescore:false reports estimates: {rough}");
        before.push((name.to_owned(), coded, params, data));
    }

    server.terminate();
    server.restart();
    for (name, coded, params, data) in &before {
        let info = server.ok("GET", &format!("/collections/{name}"), None);
        assert_eq!(info["load"]["index_source"], "snapshot", "{}", info["load"]);
        assert_eq!(
            &answers(&server, name, data, params),
            coded,
            "{name}: answers changed across restart"
        );
    }
}

#[test]
fn each_named_vector_takes_its_own_codes_and_bad_configs_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    server.ok(
        "PUT",
        "/collections/named",
        Some(&json!({
            "vectors": {
                "text": {"size": 8, "distance": "Cosine"},
                "image": {"size": 4, "distance": "Euclid", "quantization_config": {"binary": {}}},
            },
            "quantization_config": {"scalar": {"type": "int8", "quantile": 0.9}},
        })),
    );
    let info = server.ok("GET", "/collections/named", None);
    let config = &info["config"];
    assert_eq!(
        config["quantization_config"]["scalar"]["quantile"], 0.9,
        "{config}"
    );
    let vectors = &config["params"]["vectors"];
    assert!(
        vectors["image"]["quantization_config"]["binary"].is_object(),
        "{vectors}"
    );
    assert!(
        vectors["text"].get("quantization_config").is_none(),
        "{vectors}"
    );

    let refused = [
        (
            json!({"vectors": {"size": 8, "distance": "Dot"}, "quantization_config": {"product": {"compression": "x16"}}}),
            "product",
        ),
        (
            json!({"vectors": {"size": 8, "distance": "Dot"}, "quantization_config": {"scalar": {"type": "int4"}}}),
            "int4",
        ),
        (
            json!({"vectors": {"size": 8, "distance": "Dot"}, "quantization_config": {"scalar": {"type": "int8", "quantile": 0.3}}}),
            "quantile",
        ),
        (
            json!({"vectors": {"size": 8, "distance": "Dot"}, "quantization_config": {"binary": {"encoding": "two_bits"}}}),
            "two_bits",
        ),
        (
            json!({"vectors": {"size": 8, "distance": "Dot"}, "quantization_config": {"binary": {"query_encoding": "scalar8bits"}}}),
            "scalar8bits",
        ),
        (
            json!({"vectors": {"size": 8, "distance": "Euclid"}, "index": {"kind": "flat"}, "quantization_config": {"binary": {}}}),
            "keeps no codes",
        ),
        (
            json!({"vectors": {"size": 8, "distance": "Dot", "quantization_config": {"neq": {}}}}),
            "a vector's own quantization",
        ),
    ];
    for (body, needle) in refused {
        let (status, error) = server.call("PUT", "/collections/bad", Some(&body));
        assert_eq!(status, 400, "{body}: {error}");
        let message = error["status"]["error"].as_str().unwrap_or_default();
        assert!(message.contains(needle), "{body}: {message}");
    }
}

/// Cairn's `rabitq` kind over REST (issue #25, point 4): RaBitQ codes of the graph's links
/// steer the search and every result is scored exactly; recall on siftsmall against exact
/// ground truth; reported as Cairn's quantization, out of Qdrant's field; the same answers
/// after a restart, which encodes the links again; refused where no HNSW graph keeps it.
#[test]
fn rabitq_link_codes_serve_exact_scores_and_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path(), &[]);
    let data = load_dataset(&shared_data_dir().join("siftsmall")).unwrap();
    server.create(
        "sift",
        128,
        "Euclid",
        json!({"quantization_config": {"rabitq": {}}}),
    );
    server.upsert_vectors("sift", 128, &data.base.data, 0, 1000);
    let info = server.ok("GET", "/collections/sift", None);
    let config = &info["config"];
    assert!(config["quantization_config"].is_null(), "{config}");
    assert_eq!(
        config["cairn_quantization_config"],
        json!({"rabitq": {"always_ram": true}}),
        "{config}"
    );
    let params = json!({"hnsw_ef": 64});
    let coded = answers(&server, "sift", &data, &params);
    let with = recall(&coded, &data);
    let without = recall(
        &answers(
            &server,
            "sift",
            &data,
            &json!({"hnsw_ef": 64, "quantization": {"ignore": true}}),
        ),
        &data,
    );
    eprintln!(
        "siftsmall rabitq: REST recall@10 at ef 64 {with:.3} with link codes, {without:.3} without"
    );
    assert!(with >= 0.95, "recall@10 {with:.3}");

    let q = data.queries.row(0);
    let explained = server.ok(
        "POST",
        "/collections/sift/points/query",
        Some(&json!({"query": q, "limit": 10, "explain": true})),
    );
    assert_eq!(
        explained["explain"]["quantization"], "rabitq",
        "{explained}"
    );
    let exact = server.ok(
        "POST",
        "/collections/sift/points/query",
        Some(&json!({"query": q, "limit": 10, "params": {"exact": true}})),
    );
    for (found, truth) in explained["points"]
        .as_array()
        .unwrap()
        .iter()
        .zip(exact["points"].as_array().unwrap())
    {
        assert_eq!(found["id"], truth["id"], "{explained} vs {exact}");
        let (a, b) = (
            found["score"].as_f64().unwrap(),
            truth["score"].as_f64().unwrap(),
        );
        assert!((a - b).abs() < 1e-4, "scores are exact: {a} vs {b}");
    }

    server.terminate();
    server.restart();
    assert_eq!(
        answers(&server, "sift", &data, &params),
        coded,
        "answers changed across restart"
    );

    for (name, body, names) in [
        (
            "flat",
            json!({"vectors": {"size": 4, "distance": "Euclid"}, "index": {"kind": "flat"},
                   "quantization_config": {"rabitq": {}}}),
            "flat",
        ),
        (
            "plus",
            json!({"vectors": {"size": 4, "distance": "Dot"}, "index": {"kind": "ip_nsw_plus"},
                   "quantization_config": {"rabitq": {}}}),
            "ip_nsw_plus",
        ),
        (
            "unknown",
            json!({"vectors": {"size": 4, "distance": "Euclid"},
                   "quantization_config": {"rabitq": {"bits": 4}}}),
            "bits",
        ),
    ] {
        let (status, body) = server.call("PUT", &format!("/collections/{name}"), Some(&body));
        assert_eq!(status, 400, "{name}: {body}");
        let message = body["status"]["error"].as_str().unwrap_or_default();
        assert!(message.contains(names), "{name}: {body}");
    }
}
