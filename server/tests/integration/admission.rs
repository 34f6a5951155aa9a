//! Back-pressure (issue #23): with room for one request and one more in line (or one search
//! thread and one search waiting), a burst of concurrent exact queries gets some answers and,
//! for the rest, a 429 with `Retry-After` and the JSON error body naming the settings, fast;
//! the probes answer throughout, nothing fails otherwise, and the node serves normally after
//! the burst.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::harness::Server;

const DIM: usize = 128;

/// What one query of a burst met: status, `Retry-After`, body and latency.
type Outcome = (u16, Option<String>, Value, Duration);

/// A server holding 5,000 seeded 128-d vectors in `busy`: an exact query scans them all, a
/// few milliseconds each. Returns the server and the vectors.
fn busy_server(dir: &std::path::Path, env: &[(&str, &str)]) -> (Server, Vec<f32>) {
    let server = Server::start(dir, env);
    server.create("busy", DIM, "Euclid", json!({}));
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let data: Vec<f32> = (0..5_000 * DIM)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % 1_000) as f32 / 1_000.0
        })
        .collect();
    server.upsert_vectors("busy", DIM, &data, 0, 1_000);
    (server, data)
}

/// 16 clients each send 20 exact queries back to back while the probes are asked 20 times;
/// every probe must answer 200.
fn burst(server: &Server, data: &[f32]) -> Vec<Outcome> {
    let url = server.url("/collections/busy/points/query");
    std::thread::scope(|scope| {
        let askers: Vec<_> = (0..16)
            .map(|t| {
                let url = &url;
                scope.spawn(move || {
                    let client = reqwest::blocking::Client::new();
                    (0..20)
                        .map(|i| {
                            let row = (t * 20 + i) % 5_000;
                            let query = json!({"query": &data[row * DIM..(row + 1) * DIM],
                                               "limit": 10, "params": {"exact": true}});
                            let started = Instant::now();
                            let answer = client.post(url.as_str()).json(&query).send().unwrap();
                            let status = answer.status().as_u16();
                            let retry = answer
                                .headers()
                                .get("retry-after")
                                .map(|v| v.to_str().unwrap().to_owned());
                            let body: Value = answer.json().unwrap();
                            (status, retry, body, started.elapsed())
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        // The probes are never held back.
        for _ in 0..20 {
            let (status, _) = server.call("GET", "/readyz", None);
            assert_eq!(status, 200);
            std::thread::sleep(Duration::from_millis(5));
        }
        askers.into_iter().flat_map(|a| a.join().unwrap()).collect()
    })
}

/// Only 200s and 429s, some of each; every 429 has `Retry-After: 1` and the JSON error body
/// naming `setting`, and came back fast (median under 20 ms); afterwards a query is served.
fn check_burst(server: &Server, data: &[f32], outcomes: &[Outcome], setting: &str) {
    let refused: Vec<_> = outcomes.iter().filter(|o| o.0 == 429).collect();
    let served = outcomes.iter().filter(|o| o.0 == 200).count();
    assert_eq!(served + refused.len(), outcomes.len(), "only 200s and 429s");
    assert!(
        !refused.is_empty() && served > 0,
        "{served} served, {} refused",
        refused.len()
    );
    for (_, retry, body, _) in &refused {
        assert_eq!(retry.as_deref(), Some("1"));
        assert_eq!(body["status"]["code"], "rate_limited", "{body}");
        assert!(
            body["status"]["error"].as_str().unwrap().contains(setting),
            "{body}"
        );
    }
    let mut refusal_ms: Vec<f64> = refused.iter().map(|o| o.3.as_secs_f64() * 1e3).collect();
    refusal_ms.sort_by(f64::total_cmp);
    let median = refusal_ms[refusal_ms.len() / 2];
    eprintln!(
        "{served} served, {} refused; a refusal took {median:.2} ms (median)",
        refused.len()
    );
    assert!(median < 20.0, "refusals are slow: {median} ms");

    let (status, body) = server.call(
        "POST",
        "/collections/busy/points/query",
        Some(&json!({"query": &data[..DIM], "limit": 1})),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["result"]["points"][0]["id"], 0);
}

/// Runs the burst against a server started with `env` and checks it (see [`check_burst`]);
/// returns the server's `/metrics` text afterwards.
fn refuses_beyond(env: &[(&str, &str)], setting: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let (server, data) = busy_server(dir.path(), env);
    let outcomes = burst(&server, &data);
    check_burst(&server, &data, &outcomes, setting);
    reqwest::blocking::get(server.url("/metrics"))
        .unwrap()
        .text()
        .unwrap()
}

#[test]
fn requests_beyond_the_limits_get_a_fast_429_and_the_rest_are_served() {
    refuses_beyond(
        &[
            ("CAIRN__HTTP__MAX_REQUESTS_IN_FLIGHT", "1"),
            ("CAIRN__HTTP__MAX_QUEUED_REQUESTS", "1"),
        ],
        "max_requests_in_flight",
    );
}

/// The search threads' line is bounded on its own: with one thread and one search waiting,
/// the same burst (well within the request limits) gets 429s naming
/// `search_queue_per_thread`, as fast, and `/metrics` counts searches run on the threads and
/// refused.
#[test]
fn searches_beyond_the_search_line_get_a_fast_429_and_the_rest_are_served() {
    let metrics = refuses_beyond(
        &[
            ("CAIRN__HTTP__SEARCH_THREADS", "1"),
            ("CAIRN__HTTP__SEARCH_QUEUE_PER_THREAD", "1"),
        ],
        "search_queue_per_thread",
    );
    let count = |place: &str| -> u64 {
        let series = format!("cairn_searches_total{{where=\"{place}\"}} ");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(series.as_str()))
            .unwrap_or_else(|| panic!("no {series} in {metrics}"))
            .parse()
            .unwrap()
    };
    assert!(count("pool") > 0 && count("refused") > 0, "{metrics}");
}

/// Qdrant's `timeout` query parameter is a deadline that includes the wait for a turn: with
/// the one place taken by a client that sent its headers and holds back its body, a query with
/// `timeout=1` gets a 408 and the JSON error body after about a second, instead of waiting as
/// long as that client likes. A timeout that is not a whole number of seconds is a 400; once
/// the slow client leaves, the same query is served.
#[test]
fn a_request_timeout_is_a_deadline_that_counts_the_wait_for_a_turn() {
    use std::io::Write;

    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        dir.path(),
        &[
            ("CAIRN__HTTP__MAX_REQUESTS_IN_FLIGHT", "1"),
            ("CAIRN__HTTP__MAX_QUEUED_REQUESTS", "4"),
        ],
    );
    server.create("c", 2, "Cosine", json!({}));
    let query = json!({"query": [1.0, 0.0], "limit": 1});
    for bad in ["0", "1.5", "soon"] {
        let (status, body) = server.call(
            "POST",
            &format!("/collections/c/points/query?timeout={bad}"),
            Some(&query),
        );
        assert_eq!(status, 400, "{bad}: {body}");
        assert!(
            body["status"]["error"]
                .as_str()
                .unwrap()
                .contains("timeout"),
            "{body}"
        );
    }

    // Takes the one place: headers promise a body that never comes.
    let mut slow = std::net::TcpStream::connect(&server.addr).unwrap();
    write!(
        slow,
        "PUT /collections/c/points HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         content-length: 1000\r\n\r\n{{"
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let started = Instant::now();
    let (status, body) = server.call(
        "POST",
        "/collections/c/points/query?timeout=1",
        Some(&query),
    );
    let waited = started.elapsed();
    assert_eq!(status, 408, "{body}");
    assert_eq!(body["status"]["code"], "timeout", "{body}");
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(3),
        "answered after {waited:?}"
    );

    drop(slow);
    let (status, body) = server.call(
        "POST",
        "/collections/c/points/query?timeout=1",
        Some(&query),
    );
    assert_eq!(status, 200, "{body}");
}
