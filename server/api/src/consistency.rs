//! How fresh a read must be: Qdrant's `consistency` query parameter, and Cairn's session
//! tokens (`read_after`).
//!
//! In a cluster every partition is a Raft group; a replica applies the group's log some
//! milliseconds after the leader commits it. A read by default asks one live replica and sees a
//! committed prefix of the log: never a write that could still be lost, possibly not the very
//! latest acknowledged ones. Two stronger levels cost more:
//!
//! - **linearizable** (`consistency=majority`, `quorum`, `all` or any number above 1): the
//!   partition's leader confirms its leadership with a quorum heartbeat and names its commit
//!   index (Raft's ReadIndex); the replica serving the read waits until it has applied that
//!   far. The read sees every write acknowledged before it started, whoever made it. Qdrant's
//!   values count replicas that must agree; in a Raft group every committed write is on a
//!   majority, so each of them means the same here.
//! - **session** (`read_after=<token>`): every write answers a [`ReadToken`], its position in
//!   each partition it touched; a read given the token is served by a replica that has applied
//!   at least that far. A client sees its own writes (and everything before them) without the
//!   leader's heartbeat round.
//!
//! Standalone, the one copy is always the latest: both levels only wait for the index to have
//! applied the writes (`wait=false` answers a write once it is durable, before it is
//! searchable).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Query string of the read endpoints (get, scroll, count, query, search), as Qdrant names it,
/// plus Cairn's `read_after`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ReadQuery {
    /// Qdrant's read consistency: a number of replicas, `majority`, `quorum` or `all`. `1` (the
    /// default) reads one replica; anything above is a linearizable read (module docs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consistency: Option<String>,
    /// A write's [`ReadToken`]: the read sees at least that write (Cairn's extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_after: Option<String>,
    /// Qdrant's per-request deadline in seconds: the server gives up on the request once it
    /// has run this long, waiting for its turn included, and answers 408 `timeout`. Absent:
    /// no deadline beyond the cluster's own per-read one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(minimum = 1)]
    pub timeout: Option<u64>,
}

impl ReadQuery {
    /// The consistency asked for; the error names the parameter and what it accepts.
    pub fn consistency(&self) -> Result<ReadConsistency, String> {
        let linearizable = match self.consistency.as_deref().map(str::trim) {
            None | Some("1") => false,
            Some("majority" | "quorum" | "all") => true,
            Some(n) => match n.parse::<u64>() {
                Ok(n) if n >= 2 => true,
                _ => {
                    return Err(format!(
                        "consistency must be a positive number of replicas, majority, quorum \
                         or all, got {n:?}"
                    ))
                }
            },
        };
        if linearizable {
            // A linearizable read sees every acknowledged write, the token's included.
            return Ok(ReadConsistency::Linearizable);
        }
        match &self.read_after {
            None => Ok(ReadConsistency::Any),
            Some(token) => token
                .parse()
                .map(ReadConsistency::After)
                .map_err(|e| format!("read_after: {e}")),
        }
    }
}

/// How fresh a read must be (module docs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ReadConsistency {
    /// Any live replica: a committed prefix of each partition's log.
    #[default]
    Any,
    /// Every write acknowledged before the read started.
    Linearizable,
    /// At least the writes up to the token's positions.
    After(ReadToken),
}

/// Where a write left the partitions it touched: `(partition, log position)` pairs. Written
/// `0:152` (one partition) or `0:152,3:97`; clients pass it back as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadToken(pub Vec<(u32, u64)>);

impl ReadToken {
    /// The position of `partition` in the token (0 where the token does not name it).
    pub fn position(&self, partition: u32) -> u64 {
        self.0
            .iter()
            .filter(|(p, _)| *p == partition)
            .map(|(_, at)| *at)
            .max()
            .unwrap_or(0)
    }

    /// The later of two tokens, partition by partition (what a client that wrote twice holds).
    pub fn merge(&self, other: &ReadToken) -> ReadToken {
        let mut merged: Vec<(u32, u64)> = self.0.clone();
        for &(p, at) in &other.0 {
            match merged.iter_mut().find(|(q, _)| *q == p) {
                Some(entry) => entry.1 = entry.1.max(at),
                None => merged.push((p, at)),
            }
        }
        merged.sort_unstable();
        ReadToken(merged)
    }
}

impl fmt::Display for ReadToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (p, at)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{p}:{at}")?;
        }
        Ok(())
    }
}

impl FromStr for ReadToken {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("{s:?} is not a read token (the `read_token` of a write, e.g. 0:152)");
        if s.is_empty() {
            return Err(bad());
        }
        let pairs = s
            .split(',')
            .map(|pair| {
                let (p, at) = pair.split_once(':').ok_or_else(bad)?;
                Ok((
                    p.trim().parse().map_err(|_| bad())?,
                    at.trim().parse().map_err(|_| bad())?,
                ))
            })
            .collect::<Result<Vec<(u32, u64)>, String>>()?;
        Ok(ReadToken(pairs))
    }
}

impl Serialize for ReadToken {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// A string of `partition:position` pairs (`"0:152,3:97"`).
impl utoipa::PartialSchema for ReadToken {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::schema::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .pattern(Some(r"^[0-9]+:[0-9]+(,[0-9]+:[0-9]+)*$"))
            .description(Some("Where a write left each partition it touched (`partition:position`, comma-separated); pass it as `read_after`."))
            .into()
    }
}

impl utoipa::ToSchema for ReadToken {}

impl<'de> Deserialize<'de> for ReadToken {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(consistency: Option<&str>, after: Option<&str>) -> ReadQuery {
        ReadQuery {
            consistency: consistency.map(str::to_owned),
            read_after: after.map(str::to_owned),
            timeout: None,
        }
    }

    #[test]
    fn qdrant_values_map_onto_two_levels() {
        assert_eq!(read(None, None).consistency(), Ok(ReadConsistency::Any));
        assert_eq!(
            read(Some("1"), None).consistency(),
            Ok(ReadConsistency::Any)
        );
        for c in ["majority", "quorum", "all", "2", "3"] {
            assert_eq!(
                read(Some(c), Some("0:4")).consistency(),
                Ok(ReadConsistency::Linearizable),
                "{c}"
            );
        }
        for c in ["0", "-1", "most", ""] {
            let e = read(Some(c), None).consistency().unwrap_err();
            assert!(e.starts_with("consistency must be"), "{c}: {e}");
        }
    }

    #[test]
    fn tokens_round_trip_and_merge() {
        let token: ReadToken = "0:152,3:97".parse().unwrap();
        assert_eq!(token, ReadToken(vec![(0, 152), (3, 97)]));
        assert_eq!(token.to_string(), "0:152,3:97");
        assert_eq!(token.position(3), 97);
        assert_eq!(token.position(1), 0);
        let later = token.merge(&"3:120,1:5".parse().unwrap());
        assert_eq!(later.to_string(), "0:152,1:5,3:120");
        assert_eq!(
            read(None, Some("0:7")).consistency(),
            Ok(ReadConsistency::After(ReadToken(vec![(0, 7)])))
        );
        for bad in ["", "7", "0:", "a:1", "0:1,", "0:-1"] {
            let e = read(None, Some(bad)).consistency().unwrap_err();
            assert!(e.starts_with("read_after:"), "{bad}: {e}");
        }
        let json = serde_json::to_string(&token).unwrap();
        assert_eq!(json, "\"0:152,3:97\"");
        assert_eq!(serde_json::from_str::<ReadToken>(&json).unwrap(), token);
    }
}
