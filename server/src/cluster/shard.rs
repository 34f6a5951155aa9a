//! The shard's side of the internal wire: a [`PartitionCall`] run against a partition of
//! this process. The router's side is [`super::remote::RemotePartition`]; the HTTP route that
//! carries the call is `crate::http`'s internal API.

use cairn_api::internal::PartitionCall;
use serde::Serialize;

use crate::error::{Result, ServerError};
use crate::partition::Partition;

fn json<T: Serialize>(value: T) -> Result<serde_json::Value> {
    serde_json::to_value(value).map_err(|e| ServerError::Internal(e.to_string()))
}

/// Runs `call` against a shard's local partition (blocking); the answer as JSON.
pub fn dispatch(p: &Partition, call: PartitionCall) -> Result<serde_json::Value> {
    match call {
        PartitionCall::Upsert { points } => {
            let seq = p.upsert_blocking(points)?;
            p.wait_applied_blocking(seq)?;
            json(seq)
        }
        PartitionCall::Delete { ids } => {
            let seq = p.delete_blocking(ids)?;
            p.wait_applied_blocking(seq)?;
            json(seq)
        }
        PartitionCall::DeletePresent { ids } => {
            let seq = p.delete_present_blocking(&ids)?;
            if let Some(seq) = seq {
                p.wait_applied_blocking(seq)?;
            }
            json(seq)
        }
        PartitionCall::Holds { ids } => json(p.holds(&ids)?),
        PartitionCall::Stored { ids } => json(p.stored(&ids)?),
        PartitionCall::Ids => json(p.stored_ids()?),
        PartitionCall::Sample { n, seed } => json(p.sample(n, seed)?),
        PartitionCall::State => json(p.state()),
        PartitionCall::Query { plan } => json(p.query_blocking(&plan)?),
        PartitionCall::Scroll { plan } => json(p.scroll_blocking(&plan)),
        PartitionCall::Count { filter } => json(p.count_blocking(filter.as_ref())),
        PartitionCall::Matching { filter } => json(p.matching_ids(filter.as_ref())),
        PartitionCall::Get {
            ids,
            with_payload,
            with_vector,
        } => json(p.get_points(&ids, &with_payload, with_vector)),
        PartitionCall::OplogAfter { after, limit } => json(p.oplog_after(after, limit)?),
        PartitionCall::Apply { items } => json(p.apply_oplog(items)?),
    }
}
