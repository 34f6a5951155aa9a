//! `PATCH /collections/{c}` (Qdrant's collection update): a bulk load's "indexing off, then
//! on again" and a repeat of the collection's own settings are accepted; a change that would
//! need the indexes rebuilt is a 400 naming the parameter, and changes nothing.

use serde_json::{json, Value};

use crate::harness::Server;

fn refused(server: &Server, body: Value, needle: &str) {
    let (status, answer) = server.call("PATCH", "/collections/c", Some(&body));
    assert_eq!(status, 400, "{body}: {answer}");
    let message = answer["status"]["error"].as_str().unwrap();
    assert!(message.contains(needle), "{body}: {message}");
}

#[test]
fn updates_that_change_no_index_are_accepted_and_the_rest_refused() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let create = json!({"vectors": {"body": {"size": 4, "distance": "Cosine"},
                                    "title": {"size": 2, "distance": "Euclid",
                                              "hnsw_config": {"m": 8}}},
                        "hnsw_config": {"m": 12, "ef_construct": 90}});
    server.ok("PUT", "/collections/c", Some(&create));
    let before = server.ok("GET", "/collections/c", None)["config"].clone();

    // A bulk load's toggles, and the collection's own settings repeated.
    for body in [
        json!({"optimizers_config": {"indexing_threshold": 0}}),
        json!({"optimizers_config": {"indexing_threshold": 20000, "max_optimization_threads": "auto",
                                     "deleted_threshold": 0.2}}),
        json!({"hnsw_config": {"m": 12, "ef_construct": 90, "max_indexing_threads": 2}}),
        json!({"params": {"replication_factor": 1, "on_disk_payload": false}}),
        json!({"vectors": {"title": {"hnsw_config": {"m": 8}, "on_disk": false}}}),
    ] {
        assert_eq!(
            server.ok("PATCH", "/collections/c", Some(&body)),
            true,
            "{body}"
        );
    }

    refused(&server, json!({"hnsw_config": {"m": 32}}), "hnsw_config.m");
    refused(
        &server,
        json!({"vectors": {"title": {"hnsw_config": {"ef_construct": 500}}}}),
        "vectors.title.hnsw_config.ef_construct",
    );
    refused(
        &server,
        json!({"vectors": {"colour": {"on_disk": false}}}),
        "colour",
    );
    refused(
        &server,
        json!({"params": {"replication_factor": 3}}),
        "params.replication_factor",
    );
    refused(
        &server,
        json!({"params": {"read_fan_out_factor": 2}}),
        "read_fan_out_factor",
    );
    refused(
        &server,
        json!({"quantization_config": {"scalar": {"type": "int8"}}}),
        "quantization_config",
    );
    refused(
        &server,
        json!({"optimizers_config": {"indexing_treshold": 0}}),
        "indexing_treshold",
    );
    refused(&server, json!({"shard_number": 2}), "shard_number");
    assert_eq!(server.ok("GET", "/collections/c", None)["config"], before);
    let (status, _) = server.call("PATCH", "/collections/missing", Some(&json!({})));
    assert_eq!(status, 404);
}
