//! What a `cairn` process runs. Today one role: standalone (router and partitions in one
//! process). The router and shard roles of a cluster join here.

pub mod standalone;
