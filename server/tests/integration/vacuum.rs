//! Deleted and overwritten points are never returned, and their space is reclaimed in the
//! background: the vacuum rebuilds the index without dead slots, and the result survives a
//! restart.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::harness::{ids, Server};

#[test]
fn deletes_are_never_returned_and_space_is_reclaimed() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path(), &[]);
    server.create("v", 8, "Euclid", json!({}));
    let data: Vec<f32> = (0..3000 * 8)
        .map(|i| ((i * 7919) % 1000) as f32 / 10.0)
        .collect();
    server.upsert_vectors("v", 8, &data, 0, 500);
    // Overwrite 500 points (their old slots die) and delete 1500 more.
    let moved: Vec<serde_json::Value> = (0..500u64)
        .map(|id| json!({"id": id, "vector": vec![1000.0 + id as f32; 8], "payload": {"moved": true}}))
        .collect();
    server.ok(
        "PUT",
        "/collections/v/points?wait=true",
        Some(&json!({"points": moved})),
    );
    let deleted: Vec<u64> = (1500..3000).collect();
    server.ok(
        "POST",
        "/collections/v/points/delete?wait=true",
        Some(&json!({"points": deleted})),
    );

    let started = Instant::now();
    let slots = loop {
        let info = server.ok("GET", "/collections/v", None);
        if info["slots"]["dead_slots"] == 0 {
            break info["slots"].clone();
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no vacuum within 30 s: {}",
            info["slots"]
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(
        slots["index_slots"], 1500,
        "vacuum kept dead slots: {slots}"
    );

    for restart in [false, true] {
        if restart {
            server.restart();
        }
        assert_eq!(
            server.ok("POST", "/collections/v/points/count", Some(&json!({})))["count"],
            1500
        );
        for probe in [0usize, 700, 1600, 2999] {
            let q = &data[probe * 8..probe * 8 + 8];
            let r = server.ok(
                "POST",
                "/collections/v/points/query",
                Some(&json!({"query": q, "limit": 100})),
            );
            assert!(
                ids(&r).iter().all(|&id| id < 1500),
                "a deleted point came back: {:?}",
                ids(&r)
            );
        }
        let moved = server.ok(
            "POST",
            "/collections/v/points/query",
            Some(&json!({"query": vec![1000.0f32; 8], "limit": 1, "with_payload": true})),
        );
        assert_eq!(moved["points"][0]["id"], 0);
        assert_eq!(moved["points"][0]["payload"], json!({"moved": true}));
    }
}
