//! The client against the real `cairn` binary (started by cairn-testkit), never a mock.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use cairn_client::api::{Condition, Distance, ErrorCode, Filter, PointId, Range};
use cairn_client::{
    ChunkedUpsert, Client, CountPoints, CreateCollectionBuilder, DeletePoints, Error, GetPoints,
    PayloadExt, Point, QueryPoints, ScrollPoints, UpsertPoints,
};
use cairn_testkit::CairnProcess;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Item {
    group: String,
    rank: u32,
}

fn server() -> CairnProcess {
    CairnProcess::start(&[]).expect("start cairn")
}

/// Deterministic pseudo-random vectors (splitmix64), so failures reproduce.
fn vectors(n: usize, dim: usize, seed: u64) -> Vec<Vec<f32>> {
    let mut state = seed;
    let mut next = move || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) >> 40) as f32 / (1u64 << 24) as f32 - 0.5
    };
    (0..n).map(|_| (0..dim).map(|_| next()).collect()).collect()
}

fn item_points(vectors: &[Vec<f32>]) -> Vec<Point> {
    vectors
        .iter()
        .enumerate()
        .map(|(i, v)| {
            Point::new(i as u64, v.clone())
                .payload(&Item {
                    group: ["a", "b", "c"][i % 3].into(),
                    rank: i as u32,
                })
                .expect("payload")
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_round_trips_through_the_real_server() {
    let server = server();
    let client = Client::new(server.url("")).unwrap();
    assert!(client.is_ready().await.unwrap());
    assert!(!client.server_info().await.unwrap().version.is_empty());

    client
        .create_collection(CreateCollectionBuilder::new("items", 8, Distance::Euclid))
        .await
        .unwrap();
    assert!(client.collection_exists("items").await.unwrap());
    assert!(!client.collection_exists("nope").await.unwrap());
    assert_eq!(client.list_collections().await.unwrap(), vec!["items"]);

    let data = vectors(300, 8, 1);
    let result = client
        .upsert(UpsertPoints::new("items", item_points(&data)))
        .await
        .unwrap();
    assert!(result.operation_id > 0);
    assert_eq!(
        client.collection_info("items").await.unwrap().points_count,
        300
    );

    // Get: typed payloads and vectors come back as stored.
    let records = client
        .get_points(GetPoints::new("items", [5u64, 299, 1000]).with_vector(true))
        .await
        .unwrap();
    assert_eq!(records.len(), 2, "missing ids are skipped");
    let five = records.iter().find(|r| r.id == PointId::Num(5)).unwrap();
    assert_eq!(
        five.payload_as::<Item>().unwrap(),
        Item {
            group: "c".into(),
            rank: 5
        }
    );
    assert_eq!(
        five.vector.as_ref().and_then(|v| v.as_dense()),
        Some(&data[5][..])
    );

    // Query: the point itself is its own nearest neighbour; explain says how it ran.
    let response = client
        .query(
            QueryPoints::new("items")
                .vector(data[42].clone())
                .limit(5)
                .with_payload(true)
                .explain(true),
        )
        .await
        .unwrap();
    assert_eq!(response.points.len(), 5);
    assert_eq!(response.points[0].id, PointId::Num(42));
    assert_eq!(response.points[0].payload_as::<Item>().unwrap().rank, 42);
    let explain = response.explain.expect("explain asked for");
    assert_eq!(explain.index, "hnsw");
    assert!(explain.distance_computations > 0);
    let by_id = client
        .query(QueryPoints::new("items").nearest_point(42u64).limit(1))
        .await
        .unwrap();
    assert_eq!(by_id.points[0].id, PointId::Num(42));

    // Filtered, exact and batched queries agree with what the data says.
    let in_b = Filter::must([
        Condition::matches("group", "b"),
        Condition::range(
            "rank",
            Range {
                lt: Some(150.0),
                ..Range::default()
            },
        ),
    ]);
    let filtered = client
        .query(
            QueryPoints::new("items")
                .vector(data[0].clone())
                .filter(in_b.clone())
                .limit(100)
                .with_payload(true),
        )
        .await
        .unwrap();
    assert_eq!(filtered.points.len(), 50);
    for hit in &filtered.points {
        let item: Item = hit.payload_as().unwrap();
        assert!(item.group == "b" && item.rank < 150, "{item:?}");
    }
    assert_eq!(
        client
            .count(CountPoints::new("items").filter(in_b))
            .await
            .unwrap(),
        50
    );
    let batch = client
        .query_batch(
            (0..4)
                .map(|i| {
                    QueryPoints::new("items")
                        .vector(data[i].clone())
                        .exact(true)
                })
                .collect(),
        )
        .await
        .unwrap();
    assert_eq!(batch.len(), 4);
    for (i, answer) in batch.iter().enumerate() {
        assert_eq!(answer.points[0].id, PointId::Num(i as u64));
    }

    // Scroll pages through every point exactly once, in id order.
    let mut seen = Vec::new();
    let mut page = ScrollPoints::new("items").limit(64).with_payload(false);
    loop {
        let result = client.scroll(page.clone()).await.unwrap();
        seen.extend(result.points.iter().map(|r| r.id));
        match result.next_page_offset {
            Some(next) => page = page.offset(next),
            None => break,
        }
    }
    assert_eq!(seen, (0..300u64).map(PointId::Num).collect::<Vec<_>>());

    // Deletes by id and by filter.
    client
        .delete_points(DeletePoints::new("items").ids([0u64, 1, 2]))
        .await
        .unwrap();
    client
        .delete_points(
            DeletePoints::new("items").filter(Filter::must([Condition::matches("group", "a")])),
        )
        .await
        .unwrap();
    // 300 points, 3 deleted by id (one of them in group a), then group a (100, one gone).
    assert_eq!(client.count(CountPoints::new("items")).await.unwrap(), 198);
    assert!(client
        .delete_points(DeletePoints::new("items"))
        .await
        .is_err());

    client.delete_collection("items").await.unwrap();
    assert!(client.list_collections().await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_refusals_become_typed_errors() {
    let server = server();
    let client = Client::new(server.url("")).unwrap();
    client
        .create_collection(CreateCollectionBuilder::new("c", 4, Distance::Dot))
        .await
        .unwrap();

    let again = client
        .create_collection(CreateCollectionBuilder::new("c", 4, Distance::Dot))
        .await
        .unwrap_err();
    assert_eq!(again.code(), Some(ErrorCode::AlreadyExists), "{again}");
    assert_eq!(again.status(), Some(409));

    let wrong = client
        .upsert(UpsertPoints::new("c", [Point::new(1, vec![1.0, 2.0])]))
        .await
        .unwrap_err();
    let Error::Api {
        status: 400,
        code: ErrorCode::WrongDimension,
        message,
    } = &wrong
    else {
        panic!("expected a wrong-dimension error, got {wrong:?}")
    };
    assert!(message.contains('4'), "{message}");

    let missing = client
        .query(QueryPoints::new("missing").vector(vec![1.0; 4]))
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Some(ErrorCode::NotFound), "{missing}");
    assert!(missing.to_string().contains("missing"), "{missing}");

    // Options this server cannot honour are refused with a reason, never silently dropped.
    let replicated = client
        .create_collection(
            CreateCollectionBuilder::new("p", 4, Distance::Dot)
                .partitions(4)
                .replication_factor(2),
        )
        .await
        .unwrap_err();
    assert_eq!(replicated.status(), Some(400));
    assert!(
        replicated.to_string().contains("replication_factor 2"),
        "{replicated}"
    );
    assert!(!client.collection_exists("p").await.unwrap());
    let probed = client
        .query(QueryPoints::new("c").vector(vec![1.0; 4]).probe(2))
        .await
        .unwrap_err();
    assert_eq!(probed.status(), Some(400));
    assert!(probed.to_string().contains("params.probe"), "{probed}");
    let undersampled = client
        .query(QueryPoints::new("c").vector(vec![1.0; 4]).oversampling(0.5))
        .await
        .unwrap_err();
    assert!(
        undersampled.to_string().contains("oversampling"),
        "{undersampled}"
    );
    // Quantization knobs on a collection without quantization are ignored, as Qdrant does.
    client
        .query(
            QueryPoints::new("c")
                .vector(vec![1.0; 4])
                .oversampling(2.0)
                .rescore(true),
        )
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_upsert_reports_progress_and_stores_everything() {
    let server = server();
    let client = Client::new(server.url("")).unwrap();
    client
        .create_collection(CreateCollectionBuilder::new("bulk", 16, Distance::Cosine))
        .await
        .unwrap();
    let data = vectors(5_000, 16, 2);
    let mut reports = Vec::new();
    let n = client
        .upsert_chunked(
            "bulk",
            data.iter()
                .enumerate()
                .map(|(i, v)| Point::new(i as u64, v.clone())),
            ChunkedUpsert {
                chunk_size: 300,
                concurrency: 3,
                wait: true,
            },
            |p| reports.push(p),
        )
        .await
        .unwrap();
    assert_eq!(n, 5_000);
    assert_eq!(reports.len(), 17, "5000 points in chunks of 300");
    assert!(reports.windows(2).all(|w| w[0].done < w[1].done));
    let last = reports.last().unwrap();
    assert_eq!((last.done, last.total), (5_000, Some(5_000)));
    assert_eq!(client.count(CountPoints::new("bulk")).await.unwrap(), 5_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fails_over_to_the_next_url_and_retries_through_a_restart() {
    let mut server = server();
    // A port nothing listens on: tcpmux's, privileged, so no test server can be given it (a
    // port bound and released here could be handed to another test's server meanwhile).
    let dead = "http://127.0.0.1:1";
    let client = Client::builder()
        .url(dead)
        .url(server.url(""))
        // Enough attempts (about 10 s of backoff) to outlast a restart on a loaded machine.
        .retries(100)
        .backoff(Duration::from_millis(20), Duration::from_millis(200))
        .build()
        .unwrap();
    client
        .create_collection(CreateCollectionBuilder::new("f", 2, Distance::Euclid))
        .await
        .expect("connection refused is safe to fail over, even for a create");
    client
        .upsert(UpsertPoints::new("f", [Point::new(1, vec![0.0, 1.0])]))
        .await
        .unwrap();

    // Kill the server, ask while it is down, bring it back on the same port: the query is
    // retried (refused connections, then 503 while it loads) until it answers.
    server.kill().unwrap();
    let asking = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .query(QueryPoints::new("f").vector(vec![0.0, 1.0]).limit(1))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Keep the restarted server: dropping it would kill it.
    let _server = tokio::task::spawn_blocking(move || {
        server.restart().unwrap();
        server
    })
    .await
    .unwrap();
    let answer = asking
        .await
        .unwrap()
        .expect("retried until the server was back");
    assert_eq!(answer.points[0].id, PointId::Num(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_server_is_a_timeout_not_a_hang() {
    let server = server();
    let patient = Client::builder()
        .url(server.url(""))
        .retries(0)
        .build()
        .unwrap();
    patient
        .create_collection(CreateCollectionBuilder::new("t", 2, Distance::Euclid))
        .await
        .unwrap();
    // Only the call to the stopped server gets the short timeout (on a busy machine, the
    // create above may take longer than 300 ms by itself).
    let client = patient.with_timeout(Duration::from_millis(300));
    let pid = server.pid().unwrap();
    cairn_testkit::signal(pid, "STOP").unwrap();
    let started = std::time::Instant::now();
    let stalled = client.collection_info("t").await;
    cairn_testkit::signal(pid, "CONT").unwrap();
    let Err(err) = stalled else {
        panic!(
            "a stopped server (pid {pid}) answered: {stalled:?}\n{}",
            server.log()
        )
    };
    assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
    assert!(err.is_transient());
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(patient.collection_info("t").await.is_ok());
}

#[test]
fn the_quickstart_example_runs_against_a_server() {
    let server = server();
    let example = cairn_testkit::find_binary()
        .unwrap()
        .with_file_name("examples")
        .join("quickstart");
    assert!(
        example.is_file(),
        "{} missing: `cargo test` builds examples; run the workspace tests",
        example.display()
    );
    let out = std::process::Command::new(&example)
        .env("CAIRN_URL", server.url(""))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("Berlin"), "{stdout}");
    assert!(stdout.contains("1 city matches the filter"), "{stdout}");
}

/// Issue #22's acceptance: the node the client is talking to is killed under load, and the
/// client fails over to another peer node with 0 failed queries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queries_survive_the_loss_of_the_node_the_client_talks_to() {
    let mut nodes = tokio::task::spawn_blocking(|| cairn_testkit::start_peers(3, &[]))
        .await
        .unwrap()
        .expect("start three peer nodes");
    let mut builder = Client::builder()
        .retries(100)
        .backoff(Duration::from_millis(20), Duration::from_millis(200));
    for node in &nodes {
        builder = builder.url(node.url(""));
    }
    let client = builder.build().unwrap();
    // The cluster forms and every node records itself; until then a create needing three
    // nodes is refused.
    let started = std::time::Instant::now();
    loop {
        let created = client
            .create_collection(
                CreateCollectionBuilder::new("peers", 8, Distance::Euclid).replication_factor(3),
            )
            .await;
        match created {
            Ok(_) => break,
            Err(_) if started.elapsed() < Duration::from_secs(30) => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("the cluster never took the collection: {e}"),
        }
    }
    let data = vectors(300, 8, 22);
    // Every node opens the collection as it applies the metadata; writes wait for it.
    for node in &nodes {
        let one = Client::new(node.url("")).unwrap();
        let started = std::time::Instant::now();
        while one.count(CountPoints::new("peers")).await.is_err() {
            assert!(started.elapsed() < Duration::from_secs(30));
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    client
        .upsert(UpsertPoints::new("peers", item_points(&data)))
        .await
        .unwrap();

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut workers = Vec::new();
    for w in 0..2 {
        let (client, stop, data) = (client.clone(), stop.clone(), data.clone());
        workers.push(tokio::spawn(async move {
            let (mut ok, mut failed) = (0u32, Vec::new());
            let mut i = w;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let query = QueryPoints::new("peers")
                    .vector(data[i % data.len()].clone())
                    .limit(5);
                match client.query(query).await {
                    Ok(answer) if !answer.points.is_empty() => ok += 1,
                    Ok(answer) => failed.push(format!("empty answer {answer:?}")),
                    Err(e) => failed.push(e.to_string()),
                }
                i += 2;
            }
            (ok, failed)
        }));
    }
    tokio::time::sleep(Duration::from_millis(800)).await;
    // The client prefers the first URL: that node dies under load.
    nodes[0].kill().unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (mut ok, mut failed) = (0, Vec::new());
    for worker in workers {
        let (o, f) = worker.await.unwrap();
        ok += o;
        failed.extend(f);
    }
    assert!(
        failed.is_empty(),
        "{} queries failed: {:?}",
        failed.len(),
        &failed[..failed.len().min(5)]
    );
    assert!(ok > 20, "only {ok} queries answered");
    // Writes go on through the other two (a majority of the partition's replicas).
    client
        .upsert(UpsertPoints::new(
            "peers",
            [Point::new(1_000, data[0].clone())],
        ))
        .await
        .unwrap();
    assert_eq!(client.count(CountPoints::new("peers")).await.unwrap(), 301);
}

/// Read-your-writes: the client carries each write's `read_token` into its later reads, so a
/// write answered before it is searchable (`wait(false)`) is still found by the next read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_reads_its_own_writes() {
    use cairn_client::api::ReadConsistency;

    let server = server();
    let client = Client::builder()
        .url(server.url(""))
        .read_your_writes(true)
        .build()
        .unwrap();
    client
        .create_collection(CreateCollectionBuilder::new("session", 8, Distance::Euclid))
        .await
        .unwrap();
    let data = vectors(100, 8, 11);
    for (i, v) in data.iter().enumerate() {
        let written = client
            .upsert(UpsertPoints::new("session", [Point::new(i as u64, v.clone())]).wait(false))
            .await
            .unwrap();
        assert!(written.read_token.is_some(), "{written:?}");
        let hits = client
            .query(QueryPoints::new("session").vector(v.clone()).limit(1))
            .await
            .unwrap();
        assert_eq!(hits.points[0].id, PointId::Num(i as u64), "write {i}");
    }
    let linearizable = CountPoints::new("session").consistency(ReadConsistency::Linearizable);
    assert_eq!(client.count(linearizable).await.unwrap(), 100);
    // A token the collection never gave is refused, not waited on.
    let foreign = GetPoints::new("session", [1u64])
        .consistency(ReadConsistency::After("0:999999".parse().unwrap()));
    match client.get_points(foreign).await {
        Err(Error::Api { status, .. }) => assert_eq!(status, 400),
        other => panic!("a foreign token was not refused: {other:?}"),
    }
}
