//! kill -9 during acknowledged writes: every acknowledged point survives with identical
//! vector and payload; the in-flight batch is all-or-nothing; nothing later exists.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use crate::harness::Server;

const DIM: usize = 8;
const BATCH: u64 = 40;

fn vector_of(id: u64) -> Vec<f32> {
    (0..DIM)
        .map(|d| ((id * 31 + d as u64 * 7) % 1000) as f32 / 7.0 - 50.0)
        .collect()
}

fn batch_body(batch: u64) -> Value {
    let points: Vec<Value> = (batch * BATCH..(batch + 1) * BATCH)
        .map(|id| json!({"id": id, "vector": vector_of(id), "payload": {"batch": batch, "label": format!("p{id}")}}))
        .collect();
    json!({"points": points})
}

/// Which points of `batch` exist, each checked for exact vector and payload.
fn present(server: &Server, batch: u64) -> usize {
    let ids: Vec<u64> = (batch * BATCH..(batch + 1) * BATCH).collect();
    let got = server.ok(
        "POST",
        "/collections/d/points",
        Some(&json!({"ids": ids, "with_vector": true, "with_payload": true})),
    );
    for p in got.as_array().unwrap() {
        let id = p["id"].as_u64().unwrap();
        let vector: Vec<f32> = serde_json::from_value(p["vector"].clone()).unwrap();
        assert_eq!(vector, vector_of(id), "vector of point {id} changed");
        assert_eq!(
            p["payload"],
            json!({"batch": batch, "label": format!("p{id}")}),
            "payload of {id}"
        );
    }
    got.as_array().unwrap().len()
}

#[test]
fn acknowledged_writes_survive_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    // Frequent snapshots, so kills land both before and after a snapshot (replay path).
    let mut server = Server::start(dir.path(), &[("CAIRN__STORAGE__SNAPSHOT_EVERY_OPS", "7")]);
    server.create("d", DIM, "Euclid", json!({}));
    let mut rng = rand::rngs::StdRng::seed_from_u64(20261122);
    let mut next_batch = 0u64;
    let mut acknowledged: Vec<u64> = Vec::new();
    for round in 0..4 {
        let url = server.url("/collections/d/points?wait=true");
        let stop = Arc::new(AtomicBool::new(false));
        let writer = {
            let stop = stop.clone();
            let start = next_batch;
            std::thread::spawn(move || {
                let client = reqwest::blocking::Client::builder()
                    .timeout(Duration::from_secs(30))
                    .build()
                    .unwrap();
                let mut acked = Vec::new();
                let mut batch = start;
                while !stop.load(Ordering::Relaxed) {
                    match client.put(&url).json(&batch_body(batch)).send() {
                        Ok(r) if r.status().is_success() => acked.push(batch),
                        Ok(r) => panic!("write rejected: {}", r.status()),
                        Err(_) => return (acked, batch), // the server died mid-request
                    }
                    batch += 1;
                }
                (acked, batch)
            })
        };
        std::thread::sleep(Duration::from_millis(rng.gen_range(300..1500)));
        server.kill9();
        stop.store(true, Ordering::Relaxed);
        let (acked, in_flight) = writer.join().unwrap();
        eprintln!(
            "round {round}: {} batches acknowledged before SIGKILL",
            acked.len()
        );
        acknowledged.extend(acked);
        server.restart();
        for &b in &acknowledged {
            assert_eq!(
                present(&server, b),
                BATCH as usize,
                "acknowledged batch {b} lost points after round {round}"
            );
        }
        let partial = present(&server, in_flight);
        assert!(
            partial == 0 || partial == BATCH as usize,
            "in-flight batch {in_flight} half-present: {partial}"
        );
        if partial == BATCH as usize {
            acknowledged.push(in_flight);
        }
        assert_eq!(present(&server, in_flight + 1), 0);
        let count = server.ok("POST", "/collections/d/points/count", Some(&json!({})))["count"]
            .as_u64()
            .unwrap();
        assert_eq!(count, acknowledged.len() as u64 * BATCH);
        // Searches see every acknowledged point: each finds itself.
        for &b in acknowledged.iter().rev().take(3) {
            let id = b * BATCH;
            let r = server.ok(
                "POST",
                "/collections/d/points/query",
                Some(&json!({"query": vector_of(id), "limit": 1})),
            );
            assert_eq!(
                r["points"][0]["score"].as_f64().unwrap(),
                0.0,
                "point {id} not found by search"
            );
        }
        next_batch = in_flight + 1;
    }
    assert!(
        acknowledged.len() > 4,
        "too few writes to mean anything: {}",
        acknowledged.len()
    );
}
