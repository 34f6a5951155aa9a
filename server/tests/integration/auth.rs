//! API keys (issue #23): with `http.api_key` and `http.read_only_api_key` set, every route but
//! the probes needs a key, in Qdrant's `api-key` header or as a bearer token; a wrong or
//! missing key is a 401 and a write with the read-only key a 403, both with the JSON error
//! body, before any handler runs. The keys never reach the log or `cairn config`'s output.
//! Every case runs over plain HTTP and over HTTPS.

use serde_json::{json, Value};

use super::harness::Server;

const READ_WRITE: &str = "rw-7f3a9c1e5b2d4f60";
const READ_ONLY: &str = "ro-2b8e6d4c0a1f3957";

/// How a request presents its key.
#[derive(Clone, Copy)]
enum Key<'a> {
    None,
    Header(&'a str),
    Bearer(&'a str),
}

/// A server's API over plain HTTP or HTTPS, with a client that trusts its certificate.
struct Api {
    base: String,
    client: reqwest::blocking::Client,
    server: Server,
    _dir: tempfile::TempDir,
}

/// Starts a server with `env`, serving HTTPS with a certificate made for it when `https`.
fn start(https: bool, env: &[(&str, &str)]) -> Api {
    let dir = tempfile::tempdir().unwrap();
    let mut env: Vec<(&str, String)> = env.iter().map(|(k, v)| (*k, (*v).to_owned())).collect();
    let mut client = reqwest::blocking::Client::builder();
    if https {
        let (cert, key) = super::tls::self_signed(dir.path());
        env.push(("CAIRN__HTTP__TLS_CERT_FILE", cert.display().to_string()));
        env.push(("CAIRN__HTTP__TLS_KEY_FILE", key.display().to_string()));
        let pem = std::fs::read(&cert).unwrap();
        client = client.add_root_certificate(reqwest::Certificate::from_pem(&pem).unwrap());
    }
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let server = Server::start(dir.path(), &env);
    let scheme = if https { "https" } else { "http" };
    Api {
        base: format!("{scheme}://{}", server.addr),
        client: client.build().unwrap(),
        server,
        _dir: dir,
    }
}

fn call(api: &Api, method: &str, path: &str, key: Key, body: Option<&Value>) -> (u16, Value) {
    let mut request = api
        .client
        .request(method.parse().unwrap(), format!("{}{path}", api.base));
    request = match key {
        Key::None => request,
        Key::Header(key) => request.header("api-key", key),
        Key::Bearer(key) => request.header("authorization", format!("Bearer {key}")),
    };
    if let Some(body) = body {
        request = request.json(body);
    }
    let response = request.send().unwrap();
    let status = response.status().as_u16();
    let text = response.text().unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

fn refused(answer: &(u16, Value), status: u16, code: &str) {
    assert_eq!(answer.0, status, "{}", answer.1);
    assert_eq!(answer.1["status"]["code"], code, "{}", answer.1);
    assert!(answer.1["status"]["error"].is_string(), "{}", answer.1);
}

#[test]
fn keys_guard_every_route_but_the_probes_over_http() {
    keys_guard_every_route_but_the_probes(false);
}

#[test]
fn keys_guard_every_route_but_the_probes_over_https() {
    keys_guard_every_route_but_the_probes(true);
}

fn keys_guard_every_route_but_the_probes(https: bool) {
    let server = start(
        https,
        &[
            ("CAIRN__HTTP__API_KEY", READ_WRITE),
            ("CAIRN__HTTP__READ_ONLY_API_KEY", READ_ONLY),
        ],
    );
    let points =
        json!({"points": [{"id": 1, "vector": [1.0, 0.0]}, {"id": 2, "vector": [0.0, 1.0]}]});
    let query = json!({"query": [1.0, 0.1], "limit": 1});

    // The probes are open; everything else, an unknown path included, needs a key.
    for probe in ["/healthz", "/readyz"] {
        assert_eq!(
            call(&server, "GET", probe, Key::None, None).0,
            200,
            "{probe}"
        );
    }
    for path in [
        "/",
        "/collections",
        "/metrics",
        "/cluster",
        "/no/such/route",
    ] {
        let answer = call(&server, "GET", path, Key::None, None);
        refused(&answer, 401, "unauthorized");
        assert!(answer.1["status"]["error"]
            .as_str()
            .unwrap()
            .contains("api-key"));
    }
    refused(
        &call(&server, "GET", "/collections", Key::Header("wrong"), None),
        401,
        "unauthorized",
    );
    refused(
        &call(&server, "GET", "/collections", Key::Bearer("wrong"), None),
        401,
        "unauthorized",
    );
    refused(
        &call(&server, "GET", "/collections", Key::Header(""), None),
        401,
        "unauthorized",
    );

    // The read-write key writes, in either header.
    let create = json!({"vectors": {"size": 2, "distance": "Euclid"}});
    refused(
        &call(&server, "PUT", "/collections/c", Key::None, Some(&create)),
        401,
        "unauthorized",
    );
    assert_eq!(
        call(
            &server,
            "PUT",
            "/collections/c",
            Key::Header(READ_WRITE),
            Some(&create)
        )
        .0,
        200
    );
    let upsert = call(
        &server,
        "PUT",
        "/collections/c/points?wait=true",
        Key::Bearer(READ_WRITE),
        Some(&points),
    );
    assert_eq!(upsert.0, 200, "{}", upsert.1);

    // The read-only key reads: gets, scroll, count, queries, info, metrics...
    for key in [Key::Header(READ_ONLY), Key::Bearer(READ_ONLY)] {
        let found = call(
            &server,
            "POST",
            "/collections/c/points/query",
            key,
            Some(&query),
        );
        assert_eq!(found.0, 200, "{}", found.1);
        assert_eq!(found.1["result"]["points"][0]["id"], 1);
        for (method, path, body) in [
            ("GET", "/collections/c", None),
            ("GET", "/collections/c/points/1", None),
            (
                "POST",
                "/collections/c/points",
                Some(json!({"ids": [1, 2]})),
            ),
            ("POST", "/collections/c/points/scroll", Some(json!({}))),
            ("POST", "/collections/c/points/count", Some(json!({}))),
            (
                "POST",
                "/collections/c/points/search",
                Some(json!({"vector": [1.0, 0.1], "limit": 1})),
            ),
            ("GET", "/metrics", None),
        ] {
            let answer = call(&server, method, path, key, body.as_ref());
            assert_eq!(answer.0, 200, "{method} {path}: {}", answer.1);
        }
        // ...and writes nothing.
        for (method, path, body) in [
            ("PUT", "/collections/c/points?wait=true", Some(&points)),
            (
                "POST",
                "/collections/c/points/delete",
                Some(&json!({"points": [1]})),
            ),
            ("PUT", "/collections/d", Some(&create)),
            ("DELETE", "/collections/c", None),
            ("DELETE", "/cluster/peer/2", None),
        ] {
            let answer = call(&server, method, path, key, body);
            refused(&answer, 403, "forbidden");
            assert!(answer.1["status"]["error"]
                .as_str()
                .unwrap()
                .contains("may only read"));
        }
    }
    let count = call(
        &server,
        "POST",
        "/collections/c/points/count",
        Key::Header(READ_ONLY),
        Some(&json!({})),
    );
    assert_eq!(
        count.1["result"]["count"], 2,
        "the read-only key deleted nothing"
    );
    assert_eq!(
        call(
            &server,
            "GET",
            "/collections/d",
            Key::Header(READ_WRITE),
            None
        )
        .0,
        404
    );

    // The keys never reach the log.
    let log = server.server.log();
    assert!(
        !log.contains(READ_WRITE) && !log.contains(READ_ONLY),
        "a key was logged"
    );
}

#[test]
fn cairn_config_masks_the_keys() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_cairn"))
        .arg("config")
        .env("CAIRN__HTTP__API_KEY", READ_WRITE)
        .env("CAIRN__HTTP__READ_ONLY_API_KEY", READ_ONLY)
        .output()
        .unwrap();
    assert!(output.status.success());
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(text.contains("api_key = \"***\""), "{text}");
    assert!(
        !text.contains(READ_WRITE) && !text.contains(READ_ONLY),
        "{text}"
    );
}

#[test]
fn equal_keys_are_refused_at_start_up() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_cairn"))
        .arg("config")
        .env("CAIRN__HTTP__API_KEY", READ_WRITE)
        .env("CAIRN__HTTP__READ_ONLY_API_KEY", READ_WRITE)
        .output()
        .unwrap();
    assert!(!output.status.success());
    let text = String::from_utf8_lossy(&output.stderr);
    assert!(text.contains("must differ"), "{text}");
    assert!(!text.contains(READ_WRITE), "{text}");
}

fn token(secret: &str, claims: Value) -> String {
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(secret.as_bytes()),
    )
    .unwrap()
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Scoped tokens (`http.jwt_rbac`): a JWT signed with the read-write key reaches what its
/// `access` claim names, until its `exp`.
#[test]
fn scoped_tokens_reach_their_collections_until_they_expire_over_http() {
    scoped_tokens_reach_their_collections_until_they_expire(false);
}

#[test]
fn scoped_tokens_reach_their_collections_until_they_expire_over_https() {
    scoped_tokens_reach_their_collections_until_they_expire(true);
}

fn scoped_tokens_reach_their_collections_until_they_expire(https: bool) {
    let server = start(
        https,
        &[
            ("CAIRN__HTTP__API_KEY", READ_WRITE),
            ("CAIRN__HTTP__JWT_RBAC", "true"),
        ],
    );
    let create = json!({"vectors": {"size": 2, "distance": "Euclid"}});
    let manage = token(READ_WRITE, json!({"access": "m"}));
    for name in ["a", "b", "c"] {
        let answer = call(
            &server,
            "PUT",
            &format!("/collections/{name}"),
            Key::Bearer(&manage),
            Some(&create),
        );
        assert_eq!(answer.0, 200, "{}", answer.1);
    }
    let points = json!({"points": [{"id": 1, "vector": [1.0, 0.0]}]});
    let query = json!({"query": [1.0, 0.0], "limit": 1});
    let in_an_hour = unix_now() + 3600;

    // Read on `a`, read-write on `b`, nothing on `c`.
    let scoped = token(
        READ_WRITE,
        json!({"exp": in_an_hour, "access": [
            {"collection": "a", "access": "r"}, {"collection": "b", "access": "rw"}]}),
    );
    for key in [Key::Header(&scoped), Key::Bearer(&scoped)] {
        assert_eq!(
            call(
                &server,
                "POST",
                "/collections/a/points/query",
                key,
                Some(&query)
            )
            .0,
            200
        );
        refused(
            &call(&server, "PUT", "/collections/a/points", key, Some(&points)),
            403,
            "forbidden",
        );
        refused(
            &call(&server, "DELETE", "/collections/a", key, None),
            403,
            "forbidden",
        );
        let wrote = call(
            &server,
            "PUT",
            "/collections/b/points?wait=true",
            key,
            Some(&points),
        );
        assert_eq!(wrote.0, 200, "{}", wrote.1);
        let other = call(
            &server,
            "POST",
            "/collections/c/points/query",
            key,
            Some(&query),
        );
        refused(&other, 403, "forbidden");
        assert!(other.1["status"]["error"]
            .as_str()
            .unwrap()
            .contains("collection `c`"));
        // The list would name the collections it does not reach.
        refused(
            &call(&server, "GET", "/collections", key, None),
            403,
            "forbidden",
        );
    }

    // Global read: every read, no write.
    let reader = token(READ_WRITE, json!({"exp": in_an_hour, "access": "r"}));
    assert_eq!(
        call(&server, "GET", "/collections", Key::Bearer(&reader), None).0,
        200
    );
    assert_eq!(
        call(
            &server,
            "POST",
            "/collections/c/points/query",
            Key::Bearer(&reader),
            Some(&query)
        )
        .0,
        200
    );
    refused(
        &call(
            &server,
            "PUT",
            "/collections/c/points",
            Key::Bearer(&reader),
            Some(&points),
        ),
        403,
        "forbidden",
    );

    // Expired, forged, malformed: 401.
    let expired = token(READ_WRITE, json!({"exp": unix_now() - 1, "access": "m"}));
    let answer = call(&server, "GET", "/collections", Key::Bearer(&expired), None);
    refused(&answer, 401, "unauthorized");
    assert!(answer.1["status"]["error"]
        .as_str()
        .unwrap()
        .contains("expired"));
    let forged = token("another key", json!({"access": "m"}));
    refused(
        &call(&server, "GET", "/collections", Key::Bearer(&forged), None),
        401,
        "unauthorized",
    );
    let odd = token(
        READ_WRITE,
        json!({"access": [{"collection": "a", "access": "admin"}]}),
    );
    refused(
        &call(&server, "GET", "/collections/a", Key::Bearer(&odd), None),
        401,
        "unauthorized",
    );
    refused(
        &call(
            &server,
            "GET",
            "/collections",
            Key::Bearer("not.a.token"),
            None,
        ),
        401,
        "unauthorized",
    );
}

/// Per-key rate limits (`http.rate_limit_per_key`): each key and each token has a bucket of
/// that many requests per second, one second's worth at once; beyond it a 429 with
/// `Retry-After` and the JSON body naming the setting. Another key's bucket is untouched, the
/// probes are never counted, and a second later the key is served again.
#[test]
fn each_key_gets_its_own_rate_limit() {
    let api = start(
        false,
        &[
            ("CAIRN__HTTP__API_KEY", READ_WRITE),
            ("CAIRN__HTTP__READ_ONLY_API_KEY", READ_ONLY),
            ("CAIRN__HTTP__RATE_LIMIT_PER_KEY", "5"),
        ],
    );
    let statuses: Vec<u16> = (0..20)
        .map(|_| call(&api, "GET", "/collections", Key::Header(READ_WRITE), None).0)
        .collect();
    let served = statuses.iter().filter(|s| **s == 200).count();
    assert!((5..=7).contains(&served), "{statuses:?}");
    assert!(
        statuses.iter().all(|s| *s == 200 || *s == 429),
        "{statuses:?}"
    );
    let refused = call(&api, "GET", "/collections", Key::Header(READ_WRITE), None);
    refused_with(&refused, 429, "rate_limited", "http.rate_limit_per_key");
    // Another key, and the probes, are not held back.
    assert_eq!(
        call(&api, "GET", "/collections", Key::Bearer(READ_ONLY), None).0,
        200
    );
    for _ in 0..20 {
        assert_eq!(call(&api, "GET", "/healthz", Key::None, None).0, 200);
    }
    std::thread::sleep(std::time::Duration::from_millis(1100));
    assert_eq!(
        call(&api, "GET", "/collections", Key::Header(READ_WRITE), None).0,
        200
    );
}

fn refused_with(answer: &(u16, Value), status: u16, code: &str, needle: &str) {
    refused(answer, status, code);
    assert!(
        answer.1["status"]["error"]
            .as_str()
            .is_some_and(|e| e.contains(needle)),
        "{}",
        answer.1
    );
}
