//! The shard's side of the internal wire: a [`PartitionCall`] run against a partition of
//! this process. The router's side is [`super::remote::RemotePartition`]; the HTTP route that
//! carries the call is `crate::http`'s internal API.

use cairn_api::internal::PartitionCall;

use crate::collection::handle::{serve_call, AnswerEncoding, Json};
use crate::error::Result;
use crate::partition::Partition;

/// Runs `call` against a shard's local partition (blocking); the answer as JSON. The op-log
/// catch-up calls are the shard's own; every other call is served as any partition serves it.
pub fn dispatch(p: &Partition, call: PartitionCall) -> Result<serde_json::Value> {
    match call {
        PartitionCall::OplogAfter { after, limit } => Json::encode(&p.oplog_after(after, limit)?),
        PartitionCall::Apply { items } => Json::encode(&p.apply_oplog(items)?),
        other @ (PartitionCall::Upsert { .. }
        | PartitionCall::Delete { .. }
        | PartitionCall::DeletePresent { .. }
        | PartitionCall::Holds { .. }
        | PartitionCall::Stored { .. }
        | PartitionCall::Ids
        | PartitionCall::Sample { .. }
        | PartitionCall::State
        | PartitionCall::Query { .. }
        | PartitionCall::Scroll { .. }
        | PartitionCall::Count { .. }
        | PartitionCall::Matching { .. }
        | PartitionCall::Get { .. }
        | PartitionCall::ReadIndex) => serve_call::<Json>(p, other),
    }
}
