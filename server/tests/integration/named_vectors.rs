//! Qdrant's map form of `vectors`: LangChain's `{"": …}`, a collection whose one vector has a
//! name, and several named dense vectors per point, each with its own size, distance and
//! index, every ranking checked against one computed here by brute force.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use crate::harness::{ids, Server};

fn server() -> (tempfile::TempDir, Server) {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    (dir, server)
}

fn points(name: Option<&str>) -> Value {
    let points: Vec<Value> = (0..20u64)
        .map(|i| {
            let v = vec![i as f32, 1.0, (i % 3) as f32];
            let vector = match name {
                Some(name) => json!({ name: v }),
                None => json!(v),
            };
            json!({"id": i, "vector": vector, "payload": {"i": i}})
        })
        .collect();
    json!({ "points": points })
}

fn error(server: &Server, method: &str, path: &str, body: &Value) -> String {
    let (status, json) = server.call(method, path, Some(body));
    assert_eq!(status, 400, "{method} {path} {body} -> {status}: {json}");
    json["status"]["error"].as_str().unwrap().to_owned()
}

#[test]
fn a_named_vector_is_written_queried_and_returned_by_its_name() {
    let (_dir, server) = server();
    let create = json!({"vectors": {"dense": {"size": 3, "distance": "Euclid"}}});
    server.ok("PUT", "/collections/c", Some(&create));
    let info = server.ok("GET", "/collections/c", None);
    assert_eq!(
        info["config"]["params"]["vectors"],
        json!({"dense": {"size": 3, "distance": "Euclid"}})
    );

    server.ok(
        "PUT",
        "/collections/c/points?wait=true",
        Some(&points(Some("dense"))),
    );
    let plain = error(&server, "PUT", "/collections/c/points", &points(None));
    assert!(plain.contains("named `dense`"), "{plain}");
    let other = error(&server, "PUT", "/collections/c/points", &points(Some("x")));
    assert!(other.contains("not `x`"), "{other}");

    let query = json!({"query": [4.0, 1.0, 1.0], "using": "dense", "limit": 1,
                       "with_vector": true});
    let hits = server.ok("POST", "/collections/c/points/query", Some(&query));
    assert_eq!(hits["points"][0]["id"], 4);
    assert_eq!(
        hits["points"][0]["vector"],
        json!({"dense": [4.0, 1.0, 1.0]})
    );
    let unnamed = json!({"query": [4.0, 1.0, 1.0]});
    let missing = error(&server, "POST", "/collections/c/points/query", &unnamed);
    assert!(missing.contains("using"), "{missing}");
    let by_name = json!({"ids": [4], "with_vector": ["dense"]});
    let got = server.ok("POST", "/collections/c/points", Some(&by_name));
    assert_eq!(got[0]["vector"], json!({"dense": [4.0, 1.0, 1.0]}));
    let wrong = json!({"ids": [4], "with_vector": ["sparse"]});
    let refused = error(&server, "POST", "/collections/c/points", &wrong);
    assert!(refused.contains("with_vector"), "{refused}");
    // The legacy search names its vector inside `vector`.
    let search = json!({"vector": {"name": "dense", "vector": [4.0, 1.0, 1.0]}, "limit": 1});
    let hits = server.ok("POST", "/collections/c/points/search", Some(&search));
    assert_eq!(hits[0]["id"], 4);
}

/// LangChain's dense store: `{"": …}` and an empty `sparse_vectors`; lists come back plain.
#[test]
fn the_unnamed_vector_in_map_form_reads_and_writes_both_ways() {
    let (_dir, server) = server();
    let create = json!({"vectors": {"": {"size": 3, "distance": "Cosine"}},
                        "sparse_vectors": {}});
    server.ok("PUT", "/collections/c", Some(&create));
    let info = server.ok("GET", "/collections/c", None);
    assert_eq!(
        info["config"]["params"]["vectors"],
        json!({"": {"size": 3, "distance": "Cosine"}})
    );
    server.ok(
        "PUT",
        "/collections/c/points?wait=true",
        Some(&points(Some(""))),
    );
    server.ok(
        "PUT",
        "/collections/c/points?wait=true",
        Some(&points(None)),
    );
    let query = json!({"query": {"nearest": [4.0, 1.0, 1.0]}, "using": "", "limit": 1,
                       "with_vector": true});
    let hits = server.ok("POST", "/collections/c/points/query", Some(&query));
    assert_eq!(hits["points"][0]["id"], 4);
    assert!(hits["points"][0]["vector"].is_array(), "{hits}");
}

/// The three vectors of the collection below: `body` (the main vector, first by name),
/// `title` and `votes`, each with its own size and distance.
const SPACES: [(&str, usize, &str); 3] = [
    ("body", 8, "Cosine"),
    ("title", 4, "Euclid"),
    ("votes", 6, "Dot"),
];
const POINTS: u64 = 600;

/// A point's vectors by name: every point has `body`; a quarter lack `title`, a fifth `votes`.
fn named_points(seed: u64) -> BTreeMap<u64, BTreeMap<&'static str, Vec<f32>>> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..POINTS)
        .map(|id| {
            let vectors = SPACES
                .iter()
                .filter(|(name, _, _)| match *name {
                    "title" => id % 4 != 0,
                    "votes" => id % 5 != 0,
                    _ => true,
                })
                .map(|&(name, dim, _)| (name, random(&mut rng, dim)))
                .collect();
            (id, vectors)
        })
        .collect()
}

fn random(rng: &mut StdRng, dim: usize) -> Vec<f32> {
    (0..dim).map(|_| rng.gen_range(-1.0f32..1.0)).collect()
}

fn distance_of(name: &str) -> &'static str {
    SPACES.iter().find(|s| s.0 == name).unwrap().2
}

/// Higher is closer, by the space's distance (cosine on the normalised vectors).
fn similarity(distance: &str, a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
    match distance {
        "Cosine" => dot / (norm(a) * norm(b)),
        "Dot" => dot,
        _ => -a.iter().zip(b).map(|(x, y)| (x - y).powi(2)).sum::<f32>(),
    }
}

/// The exact top `k` of the points holding vector `name` that `keep` accepts.
fn brute(
    data: &BTreeMap<u64, BTreeMap<&str, Vec<f32>>>,
    name: &str,
    query: &[f32],
    keep: impl Fn(u64) -> bool,
    k: usize,
) -> Vec<u64> {
    let distance = distance_of(name);
    let mut scored: Vec<(u64, f32)> = data
        .iter()
        .filter(|(id, _)| keep(**id))
        .filter_map(|(id, v)| Some((*id, similarity(distance, v.get(name)?, query))))
        .collect();
    scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    scored.into_iter().take(k).map(|(id, _)| id).collect()
}

fn load(server: &Server, data: &BTreeMap<u64, BTreeMap<&str, Vec<f32>>>, extra: Value) {
    let mut body = json!({"vectors": {
        "body": {"size": 8, "distance": "Cosine"},
        "title": {"size": 4, "distance": "Euclid", "hnsw_config": {"m": 8, "ef_construct": 64}},
        "votes": {"size": 6, "distance": "Dot"},
    }});
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    server.ok("PUT", "/collections/n", Some(&body));
    let points: Vec<Value> = data
        .iter()
        .map(|(id, vectors)| json!({"id": id, "vector": vectors, "payload": {"even": id % 2 == 0}}))
        .collect();
    for chunk in points.chunks(150) {
        server.ok(
            "PUT",
            "/collections/n/points?wait=true",
            Some(&json!({ "points": chunk })),
        );
    }
}

/// Query ids for one vector: exact, and by its index (whose recall@10 is returned).
fn check_space(
    server: &Server,
    data: &BTreeMap<u64, BTreeMap<&str, Vec<f32>>>,
    name: &str,
    seed: u64,
) -> f64 {
    let dim = SPACES.iter().find(|s| s.0 == name).unwrap().1;
    let mut rng = StdRng::seed_from_u64(seed);
    let (mut found, mut wanted) = (0usize, 0usize);
    for _ in 0..20 {
        let q = random(&mut rng, dim);
        let truth = brute(data, name, &q, |_| true, 10);
        let exact = json!({"query": q, "using": name, "limit": 10, "params": {"exact": true}});
        let got = ids(&server.ok("POST", "/collections/n/points/query", Some(&exact)));
        assert_eq!(got, truth, "exact `{name}`");
        let indexed = json!({"query": q, "using": name, "limit": 10});
        let got = ids(&server.ok("POST", "/collections/n/points/query", Some(&indexed)));
        found += got.iter().filter(|id| truth.contains(id)).count();
        wanted += truth.len();
        // Filtered: the filter reads the payload of the point that holds the vector.
        let filtered = json!({"query": q, "using": name, "limit": 5, "params": {"exact": true},
                              "filter": {"must": [{"key": "even", "match": {"value": true}}]}});
        let got = ids(&server.ok("POST", "/collections/n/points/query", Some(&filtered)));
        assert_eq!(
            got,
            brute(data, name, &q, |id| id % 2 == 0, 5),
            "filtered `{name}`"
        );
    }
    found as f64 / wanted as f64
}

fn index_files(dir: &Path, found: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            index_files(&path, found);
        } else if path.extension().is_some_and(|e| e == "cidx") {
            found.push(path);
        }
    }
}

#[test]
fn several_named_vectors_are_each_indexed_searched_and_returned() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path(), &[]);
    let mut data = named_points(11);
    load(&server, &data, json!({}));

    // The main vector is the first name; each other one has its own index.
    let info = server.ok("GET", "/collections/n", None);
    let vectors = &info["config"]["params"]["vectors"];
    assert_eq!(vectors["body"], json!({"size": 8, "distance": "Cosine"}));
    assert_eq!(vectors["title"]["size"], 4);
    assert_eq!(vectors["title"]["hnsw_config"]["m"], 8);
    assert_eq!(vectors["votes"]["distance"], "Dot");
    assert_eq!(info["config"]["index"]["kind"], "hnsw");
    assert_eq!(info["config"]["vector_indexes"]["title"]["kind"], "hnsw");
    assert_eq!(
        info["config"]["vector_indexes"]["votes"]["kind"],
        "mips_auto"
    );

    for (seed, (name, _, _)) in SPACES.iter().enumerate() {
        let recall = check_space(&server, &data, name, seed as u64);
        assert!(recall >= 0.95, "`{name}` recall@10 {recall}");
    }
    let explained = server.ok(
        "POST",
        "/collections/n/points/query",
        Some(&json!({"query": [0.1, 0.2, 0.3, 0.4, 0.5, 0.6], "using": "votes", "explain": true})),
    );
    assert_eq!(explained["explain"]["index"], "mips_auto", "{explained}");

    // Vectors come back by name, each only where the point has it.
    let got = server.ok(
        "POST",
        "/collections/n/points",
        Some(&json!({"ids": [0, 1], "with_vector": true})),
    );
    let by_id: HashMap<u64, &Value> = got
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["id"].as_u64().unwrap(), &r["vector"]))
        .collect();
    assert!(by_id[&0].get("title").is_none() && by_id[&0].get("votes").is_none());
    assert_eq!(by_id[&1]["title"].as_array().unwrap().len(), 4);
    assert_eq!(by_id[&1]["votes"].as_array().unwrap().len(), 6);
    let only = server.ok(
        "POST",
        "/collections/n/points",
        Some(&json!({"ids": [1], "with_vector": ["title"]})),
    );
    let only = only[0]["vector"].as_object().unwrap();
    assert_eq!(only.keys().collect::<Vec<_>>(), ["title"]);

    // Every point needs the main vector; the others may be left out.
    let missing = error(
        &server,
        "PUT",
        "/collections/n/points",
        &json!({"points": [{"id": 9999, "vector": {"title": [0.0, 0.0, 0.0, 1.0]}}]}),
    );
    assert!(missing.contains("main vector `body`"), "{missing}");
    let wrong = error(
        &server,
        "PUT",
        "/collections/n/points",
        &json!({"points": [{"id": 9999, "vector": {"body": vec![1.0; 8], "title": vec![1.0; 5]}}]}),
    );
    assert!(wrong.contains("title"), "{wrong}");
    let unknown = error(
        &server,
        "POST",
        "/collections/n/points/query",
        &json!({"query": vec![1.0; 3], "using": "colour"}),
    );
    assert!(unknown.contains("`body`, `title`, `votes`"), "{unknown}");

    // A vector update gives point 0 a title; a deletion takes point 1's away.
    let title: Vec<f32> = vec![5.0, 5.0, 5.0, 5.0];
    server.ok(
        "PUT",
        "/collections/n/points/vectors?wait=true",
        Some(&json!({"points": [{"id": 0, "vector": {"title": title}}]})),
    );
    data.get_mut(&0).unwrap().insert("title", title.clone());
    let near = json!({"query": title, "using": "title", "limit": 1});
    assert_eq!(
        ids(&server.ok("POST", "/collections/n/points/query", Some(&near))),
        [0]
    );
    let old = data[&1]["title"].clone();
    server.ok(
        "POST",
        "/collections/n/points/vectors/delete?wait=true",
        Some(&json!({"points": [1], "vector": ["title"]})),
    );
    data.get_mut(&1).unwrap().remove("title");
    let near = json!({"query": old, "using": "title", "limit": 10, "params": {"exact": true}});
    let got = ids(&server.ok("POST", "/collections/n/points/query", Some(&near)));
    assert!(!got.contains(&1), "{got:?}");
    assert_eq!(got, brute(&data, "title", &old, |_| true, 10));
    let main = error(
        &server,
        "POST",
        "/collections/n/points/vectors/delete",
        &json!({"points": [2], "vector": ["body"]}),
    );
    assert!(main.contains("main vector"), "{main}");
    let batch = json!({"operations": [{"delete_vectors": {"points": [3], "vector": ["votes"]}}]});
    server.ok(
        "POST",
        "/collections/n/points/batch?wait=true",
        Some(&batch),
    );
    data.get_mut(&3).unwrap().remove("votes");
    let got = server.ok(
        "POST",
        "/collections/n/points",
        Some(&json!({"ids": [3], "with_vector": true})),
    );
    assert!(got[0]["vector"].get("votes").is_none(), "{got}");

    // `has_vector` reads which vectors each point holds.
    let count = |filter: Value| {
        server.ok(
            "POST",
            "/collections/n/points/count",
            Some(&json!({ "filter": filter })),
        )["count"]
            .as_u64()
            .unwrap()
    };
    let holding = |name: &str| data.values().filter(|v| v.contains_key(name)).count() as u64;
    assert_eq!(
        count(json!({"must": [{"has_vector": "title"}]})),
        holding("title")
    );
    assert_eq!(
        count(json!({"must_not": [{"has_vector": "votes"}]})),
        POINTS - holding("votes")
    );
    assert_eq!(count(json!({"must": [{"has_vector": "body"}]})), POINTS);
    let without_title = json!({"query": data[&8]["body"], "using": "body", "limit": 10,
        "params": {"exact": true}, "filter": {"must_not": [{"has_vector": "title"}]}});
    let got = ids(&server.ok("POST", "/collections/n/points/query", Some(&without_title)));
    let no_title = |id: u64| !data[&id].contains_key("title");
    assert_eq!(got, brute(&data, "body", &data[&8]["body"], no_title, 10));

    // A query by point id searches near that point's vector of the name used.
    let by_id = json!({"query": 2, "using": "votes", "limit": 10, "params": {"exact": true}});
    let got = ids(&server.ok("POST", "/collections/n/points/query", Some(&by_id)));
    assert_eq!(got, brute(&data, "votes", &data[&2]["votes"], |_| true, 10));
    let lacking = json!({"query": 4, "using": "title"});
    let message = error(&server, "POST", "/collections/n/points/query", &lacking);
    assert!(message.contains("no vector `title`"), "{message}");

    // Recommendations average the examples' vectors of the name used.
    let rec = json!({"query": {"recommend": {"positive": [6, 7]}}, "using": "title",
                     "limit": 5, "params": {"exact": true}});
    let got = ids(&server.ok("POST", "/collections/n/points/query", Some(&rec)));
    let mean: Vec<f32> = (0..4)
        .map(|i| (data[&6]["title"][i] + data[&7]["title"][i]) / 2.0)
        .collect();
    assert_eq!(
        got,
        brute(&data, "title", &mean, |id| id != 6 && id != 7, 5)
    );

    // A hybrid of two dense vectors: each prefetch searches its own, reciprocal ranks fuse.
    let (qb, qt) = (data[&10]["body"].clone(), data[&10]["title"].clone());
    let hybrid = json!({"prefetch": [
            {"query": qb, "using": "body", "limit": 20, "params": {"exact": true}},
            {"query": qt, "using": "title", "limit": 20, "params": {"exact": true}}],
        "query": {"fusion": "rrf"}, "limit": 5});
    let got = ids(&server.ok("POST", "/collections/n/points/query", Some(&hybrid)));
    let mut fused: HashMap<u64, f64> = HashMap::new();
    for list in [
        brute(&data, "body", &qb, |_| true, 20),
        brute(&data, "title", &qt, |_| true, 20),
    ] {
        for (rank, id) in list.into_iter().enumerate() {
            *fused.entry(id).or_default() += 1.0 / (2.0 + rank as f64);
        }
    }
    let mut fused: Vec<(u64, f64)> = fused.into_iter().collect();
    fused.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    assert_eq!(got[0], 10, "{got:?}");
    assert_eq!(got[0], fused[0].0);

    // Restarts: from the index file (the other vectors' indexes inside it), then rebuilt.
    let before: Vec<Vec<u64>> = SPACES
        .iter()
        .map(|(name, dim, _)| {
            let q = vec![0.3; *dim];
            ids(&server.ok(
                "POST",
                "/collections/n/points/query",
                Some(&json!({"query": q, "using": name, "limit": 10})),
            ))
        })
        .collect();
    server.terminate();
    server.restart();
    let info = server.ok("GET", "/collections/n", None);
    assert_eq!(info["load"]["index_source"], "snapshot", "{}", info["load"]);
    for ((name, dim, _), expected) in SPACES.iter().zip(&before) {
        let q = vec![0.3; *dim];
        let got = ids(&server.ok(
            "POST",
            "/collections/n/points/query",
            Some(&json!({"query": q, "using": name, "limit": 10})),
        ));
        assert_eq!(
            &got, expected,
            "`{name}` after a restart from the index file"
        );
    }
    server.terminate();
    let mut files = Vec::new();
    index_files(dir.path(), &mut files);
    assert!(!files.is_empty());
    for file in files {
        std::fs::remove_file(file).unwrap();
    }
    server.restart();
    let info = server.ok("GET", "/collections/n", None);
    assert_eq!(info["load"]["index_source"], "rebuilt", "{}", info["load"]);
    for (seed, (name, _, _)) in SPACES.iter().enumerate() {
        let recall = check_space(&server, &data, name, 100 + seed as u64);
        assert!(
            recall >= 0.95,
            "`{name}` recall@10 after a rebuild {recall}"
        );
    }
}

/// Overwrites leave dead slots in every vector's index; the vacuum rebuilds them all, and a
/// partitioned collection asks every partition for a vector it is not routed by.
#[test]
fn the_vacuum_and_partitions_keep_every_vector() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[("CAIRN__STORAGE__VACUUM_MIN_DEAD", "100")]);
    let mut data = named_points(12);
    load(&server, &data, json!({}));
    // Overwrite half the points with new vectors.
    let fresh = named_points(13);
    let rewritten: Vec<Value> = fresh
        .iter()
        .filter(|(id, _)| *id % 2 == 1)
        .map(|(id, vectors)| json!({"id": id, "vector": vectors}))
        .collect();
    server.ok(
        "PUT",
        "/collections/n/points?wait=true",
        Some(&json!({ "points": rewritten })),
    );
    for (id, vectors) in fresh.into_iter().filter(|(id, _)| id % 2 == 1) {
        data.insert(id, vectors);
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while server.ok("GET", "/collections/n", None)["slots"]["dead_slots"] != 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "no vacuum within 30 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    for (seed, (name, _, _)) in SPACES.iter().enumerate() {
        let recall = check_space(&server, &data, name, 200 + seed as u64);
        assert!(
            recall >= 0.95,
            "`{name}` recall@10 after the vacuum {recall}"
        );
    }
    drop(server);

    // Partitioned: routed by `body`; `title` and `votes` searches visit every partition.
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let data = named_points(14);
    load(&server, &data, json!({"shard_number": 2}));
    server.wait_routed("n");
    for (seed, (name, _, _)) in SPACES.iter().enumerate() {
        let recall = check_space(&server, &data, name, 300 + seed as u64);
        assert!(recall >= 0.9, "`{name}` recall@10 partitioned {recall}");
    }
}

/// A point of the cluster test: a 4-d Euclid main vector `dense`, a 2-d Dot `image` on even
/// ids, and a sparse `text` of two terms.
fn cluster_point(i: u64) -> Value {
    let dense = [i as f32, 1.0, (i % 7) as f32, 0.5];
    let mut vector = json!({
        "dense": dense,
        "text": {"indices": [i % 11, 20 + i % 5], "values": [1.0 + (i % 3) as f32, 0.5]},
    });
    if i.is_multiple_of(2) {
        vector["image"] = json!([(i % 13) as f32, 1.0 + (i % 4) as f32]);
    }
    json!({"id": i, "vector": vector})
}

/// Named and sparse vectors on a cluster: each replica's log carries every vector of a
/// point, so every node answers each space as brute force does, a replica that was away
/// catching up through a snapshot included, and returns the vectors by name.
#[test]
fn on_a_cluster_every_replica_keeps_every_vector() {
    use crate::peers::{nodes_with_collection, wait_count, wait_log};
    let root = tempfile::tempdir().unwrap();
    let mut nodes = nodes_with_collection(
        root.path(),
        &[
            ("CAIRN__CLUSTER__SNAPSHOT_EVERY_ENTRIES", "50"),
            ("CAIRN__CLUSTER__LOG_KEEP_ENTRIES", "10"),
        ],
        "plain",
        3,
    );
    nodes[0].ok(
        "PUT",
        "/collections/hy",
        Some(&json!({
            "vectors": {"dense": {"size": 4, "distance": "Euclid"}, "image": {"size": 2, "distance": "Dot"}},
            "sparse_vectors": {"text": {}},
            "replication_factor": 3,
        })),
    );
    for node in &nodes {
        wait_count(node, "hy", 0);
    }
    let write = |node: &Server, i: u64| {
        node.ok(
            "PUT",
            "/collections/hy/points?wait=true",
            Some(&json!({"points": [cluster_point(i)]})),
        );
    };
    for i in 0..10 {
        write(&nodes[i as usize % 3], i);
    }
    nodes[2].kill9();
    // One entry per write, past what the leader keeps, so node 3 needs a snapshot.
    let total = 160u64;
    for i in 10..total {
        write(&nodes[i as usize % 2], i);
    }
    nodes[2].restart();
    wait_log(&nodes[2], "snapshot installed");
    let all: Vec<Value> = (0..total).map(cluster_point).collect();
    let dot = |a: &Value, b: &[f32]| -> f32 {
        a.as_array()
            .unwrap()
            .iter()
            .zip(b)
            .map(|(x, y)| x.as_f64().unwrap() as f32 * y)
            .sum()
    };
    let sparse_dot = |v: &Value, q: &[(u64, f32)]| -> f32 {
        let indices = v["indices"].as_array().unwrap();
        let values = v["values"].as_array().unwrap();
        indices
            .iter()
            .zip(values)
            .map(|(i, x)| {
                let i = i.as_u64().unwrap();
                q.iter()
                    .filter(|(j, _)| *j == i)
                    .map(|(_, w)| w * x.as_f64().unwrap() as f32)
                    .sum::<f32>()
            })
            .sum()
    };
    let top = |score: &dyn Fn(&Value) -> Option<f32>| -> Vec<u64> {
        let mut scored: Vec<(f32, u64)> = all
            .iter()
            .filter_map(|p| Some((score(p)?, p["id"].as_u64().unwrap())))
            .collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        scored.into_iter().take(5).map(|(_, id)| id).collect()
    };
    let image_query = [1.0f32, 0.25];
    let want_image = top(&|p: &Value| Some(dot(p["vector"].get("image")?, &image_query)));
    let text_query = [(3u64, 1.0f32), (21, 2.0)];
    let want_text = top(&|p: &Value| {
        let s = sparse_dot(&p["vector"]["text"], &text_query);
        (s > 0.0).then_some(s)
    });
    for node in &nodes {
        wait_count(node, "hy", total);
        let by_image = node.ok(
            "POST",
            "/collections/hy/points/query",
            Some(&json!({"query": image_query, "using": "image", "limit": 5, "params": {"exact": true}})),
        );
        assert_eq!(ids(&by_image), want_image, "{}: {by_image}", node.addr);
        let by_text = node.ok(
            "POST",
            "/collections/hy/points/query",
            Some(&json!({"query": {"indices": [3, 21], "values": [1.0, 2.0]}, "using": "text", "limit": 5})),
        );
        assert_eq!(ids(&by_text), want_text, "{}: {by_text}", node.addr);
        let got = node.ok(
            "POST",
            "/collections/hy/points",
            Some(&json!({"ids": [4, 5], "with_vector": true})),
        );
        let records = got.as_array().unwrap();
        assert_eq!(records.len(), 2, "{got}");
        for record in records {
            let i = record["id"].as_u64().unwrap();
            let want = &cluster_point(i)["vector"];
            assert_eq!(
                record["vector"]["dense"], want["dense"],
                "{}: {record}",
                node.addr
            );
            assert_eq!(
                record["vector"]["text"], want["text"],
                "{}: {record}",
                node.addr
            );
            assert_eq!(
                record["vector"].get("image"),
                want.get("image"),
                "{}: {record}",
                node.addr
            );
        }
    }
}
