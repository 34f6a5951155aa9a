//! `GET /openapi.json` against the live router (issue #23): every documented operation is
//! served (the router's fallback never answers it), every other method on a documented path
//! is a 405, so no route the router serves is missing from the document; and each operation
//! describes its success body and the JSON error body of its refusals.

use serde_json::{json, Value};

use super::harness::Server;

const METHODS: [&str; 5] = ["GET", "PUT", "POST", "DELETE", "PATCH"];

/// `path` with its parameters filled: the probe collection, point 1, node 7.
fn concrete(path: &str, collection: &str) -> String {
    path.replace("{collection}", collection).replace(
        "{id}",
        if path.starts_with("/cluster") {
            "7"
        } else {
            "1"
        },
    )
}

/// Whether an answer is the router's own (no route, or no such method) rather than a handler's.
fn from_fallback(status: u16, body: &Value) -> bool {
    status == 405
        || (status == 404
            && body["status"]["error"]
                .as_str()
                .is_some_and(|e| e.starts_with("no route for")))
}

#[test]
fn the_document_and_the_router_list_the_same_routes() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let (status, document) = server.call("GET", "/openapi.json", None);
    assert_eq!(status, 200, "{document}");
    assert!(
        document["openapi"]
            .as_str()
            .is_some_and(|v| v.starts_with("3.")),
        "{document}"
    );
    let paths = document["paths"].as_object().unwrap();
    assert!(paths.len() >= 20, "{} paths", paths.len());

    let mut ids = std::collections::BTreeSet::new();
    let mut served = 0;
    for (path, item) in paths {
        for method in METHODS {
            let operation = &item[method.to_lowercase()];
            // A collection of its own per call, so a DELETE cannot take another's away.
            let collection = format!("probe{served}");
            server.create(&collection, 2, "Cosine", json!({}));
            let url = concrete(path, &collection);
            let body = (method != "GET" && method != "DELETE").then(|| json!({}));
            let (status, answer) = server.call(method, &url, body.as_ref());
            served += 1;
            if operation.is_null() {
                assert_eq!(
                    status, 405,
                    "{method} {path} is not documented but answered {status} {answer}"
                );
                continue;
            }
            assert!(
                !from_fallback(status, &answer),
                "{method} {path} is documented but not routed: {status} {answer}"
            );
            assert!(status < 500, "{method} {path}: {status} {answer}");
            let id = operation["operationId"].as_str().unwrap_or_default();
            assert!(
                ids.insert(id.to_owned()),
                "{method} {path}: operationId {id:?} twice"
            );
            let responses = &operation["responses"];
            assert!(
                responses["200"].is_object(),
                "{method} {path}: no 200 answer"
            );
            for error in ["400", "401", "404", "429", "503"] {
                assert_eq!(
                    responses[error]["content"]["application/json"]["schema"]["$ref"],
                    "#/components/schemas/ErrorBody",
                    "{method} {path}: {error}"
                );
            }
            // Taking a snapshot is a POST with nothing to send, as in Qdrant.
            let bodiless = ["create_snapshot", "create_full_snapshot"].contains(&id);
            if (method == "PUT" || method == "POST" || method == "PATCH") && !bodiless {
                assert!(
                    operation["requestBody"].is_object(),
                    "{method} {path}: no request body documented"
                );
            }
        }
    }
    // Nothing the document leaves out answers but the fallback.
    for (method, path) in [
        ("GET", "/internal/raft/meta/vote"),
        ("POST", "/collections/probe0/points/recommend"),
        ("GET", "/openapi.yaml"),
    ] {
        let (status, answer) = server.call(method, path, None);
        assert!(
            from_fallback(status, &answer),
            "{method} {path}: {status} {answer}"
        );
    }
    // The wire types are in the document, with their fields.
    let schemas = &document["components"]["schemas"];
    for (schema, field) in [
        ("CreateCollection", "vectors"),
        ("QueryRequest", "query"),
        ("Filter", "must"),
        ("FieldCondition", "range"),
        ("UpsertRequest", "points"),
        ("ErrorStatus", "code"),
    ] {
        assert!(
            schemas[schema]["properties"][field].is_object(),
            "{schema}.{field}: {}",
            schemas[schema]
        );
    }
    // Refused Qdrant fields are not offered.
    assert!(schemas["QueryRequest"]["properties"]["lookup_from"].is_null());
    assert!(schemas["QueryRequest"]["properties"]["prefetch"].is_object());
}
