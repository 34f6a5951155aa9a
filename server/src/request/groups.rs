//! Grouped queries (`/points/query/groups`): the query's hits grouped by a payload value, the
//! groups ordered by their best hit, each holding its best `group_size` hits. The collection
//! runs the query with a growing `limit` until `limit` groups are full or the hits run out
//! (Qdrant's approach too); here are the plan and the grouping of one list of hits.

use std::collections::HashMap;

use cairn_api::internal::PayloadSelection;
use cairn_api::{GroupId, PointGroup, QueryGroupsRequest, QueryInput, ScoredPoint, WithPayload};
use serde_json::Value;

use super::filter::lookup;
use super::query::{plan, QueryPlan};
use super::CollectionSettings;
use crate::config::Limits;
use crate::error::{Result, ServerError};

/// Hits per group when `group_size` is not given, as in Qdrant.
const DEFAULT_GROUP_SIZE: usize = 3;
/// Groups when `limit` is not given, as in Qdrant.
const DEFAULT_GROUPS: usize = 10;

/// A validated grouped query.
#[derive(Debug, Clone)]
pub struct GroupPlan {
    /// The query; it always reads its hits' payloads (the group key is there).
    pub query: QueryPlan,
    /// The payload key that names a hit's group.
    pub key: String,
    /// Groups wanted.
    pub groups: usize,
    /// Hits per group.
    pub size: usize,
    /// The payload the caller asked for, applied to the hits once grouped.
    pub payload: PayloadSelection,
    /// Most hits one run of the query may ask for (`limits.max_limit`).
    pub max_hits: usize,
}

/// Validates a grouped query.
pub fn groups_plan(
    settings: &CollectionSettings,
    request: QueryGroupsRequest,
    limits: &Limits,
) -> Result<GroupPlan> {
    let QueryGroupsRequest {
        mut query,
        group_by,
        group_size,
        with_lookup: _,
    } = request;
    let refused = |m: &str| Err(ServerError::InvalidRequest(m.to_owned()));
    if query.prefetch.as_ref().is_some_and(|p| !p.is_empty()) {
        return refused("prefetch: grouped queries over prefetches are not supported yet");
    }
    if matches!(query.query, Some(QueryInput::Nearest { mmr: Some(_), .. })) {
        return refused("query.mmr: grouped queries with diversity are not supported yet");
    }
    if query.offset.is_some_and(|o| o > 0) {
        return refused("offset: groups are not paged; ask for more groups with `limit`");
    }
    if group_by.trim().is_empty() {
        return refused("group_by must name a payload key");
    }
    let size = group_size.unwrap_or(DEFAULT_GROUP_SIZE);
    let groups = query.limit.unwrap_or(DEFAULT_GROUPS);
    if size == 0 || groups == 0 {
        return refused("limit and group_size must be at least 1");
    }
    let wanted = groups.saturating_mul(size);
    if wanted > limits.max_limit {
        return Err(ServerError::LimitExceeded(format!(
            "limit × group_size = {wanted} is above the maximum of {}",
            limits.max_limit
        )));
    }
    let payload = PayloadSelection::from_wire(query.with_payload.take(), false);
    query.with_payload = Some(WithPayload::Enable(true));
    query.limit = Some(wanted);
    query.offset = None;
    Ok(GroupPlan {
        query: plan(settings, query, limits, "")?,
        key: group_by,
        groups,
        size,
        payload,
        max_hits: limits.max_limit,
    })
}

/// The group keys of a hit: each string or integer at the key (arrays crossed).
fn keys_of(hit: &ScoredPoint, key: &str) -> Vec<GroupId> {
    let mut keys: Vec<GroupId> = Vec::new();
    for value in lookup(hit.payload.as_ref(), key) {
        let key = match value {
            Value::String(s) => GroupId::String(s.clone()),
            Value::Number(n) => match n.as_i64() {
                Some(n) => GroupId::Integer(n),
                None => continue,
            },
            Value::Null | Value::Bool(_) | Value::Array(_) | Value::Object(_) => continue,
        };
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    keys
}

/// Groups `hits` (best first): the first `groups` keys met open groups, each keeps its first
/// `size` hits. Returns the groups and whether all of them are full. A hit keeps the payload
/// the caller asked for.
pub fn group(hits: Vec<ScoredPoint>, plan: &GroupPlan) -> (Vec<PointGroup>, bool) {
    let mut groups: Vec<PointGroup> = Vec::new();
    let mut at: HashMap<GroupId, usize> = HashMap::new();
    for hit in hits {
        for key in keys_of(&hit, &plan.key) {
            let i = match at.get(&key) {
                Some(&i) => i,
                None if groups.len() < plan.groups => {
                    at.insert(key.clone(), groups.len());
                    groups.push(PointGroup {
                        id: key,
                        hits: Vec::new(),
                        lookup: None,
                    });
                    groups.len() - 1
                }
                None => continue,
            };
            if groups[i].hits.len() < plan.size {
                let mut hit = hit.clone();
                hit.payload = plan.payload.apply(hit.payload.as_ref());
                groups[i].hits.push(hit);
            }
        }
    }
    let full = groups.len() == plan.groups && groups.iter().all(|g| g.hits.len() == plan.size);
    (groups, full)
}
