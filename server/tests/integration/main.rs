//! Integration tests: the real `cairn` binary on port 0, spoken to over HTTP.
#![allow(
    missing_docs,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stderr
)]

mod admission;
mod aliases;
mod auth;
mod bad_input;
mod cluster_updates;
mod consistency;
mod durability;
mod facet;
mod filtered_recall;
mod frameworks;
mod fuzz;
mod groups;
mod harness;
mod membership;
mod mips;
mod mmr;
mod moves;
mod named_vectors;
mod nemesis;
mod on_disk;
mod openapi;
mod partitions;
mod payload_indexes;
mod peers;
mod point_updates;
mod qdrant_client;
mod quantization;
mod recall;
mod recommend;
mod refused_fields;
mod restart;
mod routed;
mod snapshots;
mod sparse;
mod tls;
mod update_collection;
mod vacuum;
