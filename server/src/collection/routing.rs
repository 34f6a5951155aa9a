//! A partitioned collection's routing state and its durable records, both kept in its
//! [`MetaStore`] (partition 0's RocksDB `meta` family, or the cluster's metadata) (synced writes, so a record is either wholly there or absent).
//!
//! ```text
//!            points ≥ train_at            every point re-homed
//!  Untrained ────────────────▶ Migrating ─────────────────────▶ Routed
//!                                  ▲                               │
//!                                  └───────────────────────────────┘
//!                                   grown 4× since the last training
//! ```
//!
//! The routing record holds the phase, the meta-index (meta-HNSW, centre → partition table) and
//! the point count it was trained at. Its version is the meta-index's: each training adds one.

use std::sync::Arc;

use cairn_api::PointId;
use cairn_index::persist::codec::{Decoder, Encoder};
use cairn_index::pyramid::{Assignment, MetaIndex, PyramidParams};
use serde::{Deserialize, Serialize};

use super::host::MetaStore;
use crate::error::{Result, ServerError};
use crate::request::CollectionSettings;

/// Meta key of the routing record.
pub(crate) const ROUTING_KEY: &str = "routing";
/// Meta key of the moves in flight (see the collection's write path).
const MOVES_KEY: &str = "moves_in_flight";
/// Layout version of the routing record.
const FORMAT: u64 = 1;

/// Where a collection is in its routing life cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Too few points to train: everything is in partition 0.
    Untrained,
    /// A new meta-index is in force for writes; points are being re-homed.
    Migrating,
    /// Every point is where the meta-index says.
    Routed,
}

impl Phase {
    /// Name shown in collection info and `explain`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Untrained => "untrained",
            Self::Migrating => "migrating",
            Self::Routed => "routed",
        }
    }

    fn tag(self) -> u8 {
        match self {
            Self::Untrained => 0,
            Self::Migrating => 1,
            Self::Routed => 2,
        }
    }
}

/// The routing state of a collection.
pub struct Routing {
    /// Life-cycle phase.
    pub phase: Phase,
    /// The meta-index in force (none while untrained).
    pub meta_index: Option<Arc<MetaIndex>>,
    /// Points the collection held when the meta-index was trained.
    pub trained_at_points: u64,
    /// Points in the training sample.
    pub sample_points: u64,
}

/// Points a collection needs per k-means centre: enough for FAISS's k-means to place every
/// centre (it warns below 39 and fails below 1).
const POINTS_PER_CENTRE: u64 = 32;
/// Centres per partition of the first training of a small collection: routing coarser than
/// `params.centres` allows, but routing at all (a few thousand points in 8 partitions).
const FIRST_CENTRES_PER_PARTITION: usize = 8;

/// Points a collection needs before its meta-index is first trained, with
/// [`FIRST_CENTRES_PER_PARTITION`] centres per partition (or `params.centres` if fewer).
pub fn train_at(params: &PyramidParams) -> u64 {
    POINTS_PER_CENTRE * (FIRST_CENTRES_PER_PARTITION * params.partitions).min(params.centres) as u64
}

/// Centres of a training at `points` points: as many as the points can place, from the first
/// training's up to `params.centres`.
pub fn centres_for(params: &PyramidParams, points: u64) -> usize {
    let first = (FIRST_CENTRES_PER_PARTITION * params.partitions).min(params.centres);
    ((points / POINTS_PER_CENTRE) as usize).clamp(first, params.centres)
}

impl Routing {
    /// The state before any training.
    pub fn untrained() -> Self {
        Self {
            phase: Phase::Untrained,
            meta_index: None,
            trained_at_points: 0,
            sample_points: 0,
        }
    }

    /// Where a point with this vector goes.
    pub fn assign(&self, vector: &[f32]) -> Result<Assignment> {
        match &self.meta_index {
            None => Ok(Assignment::One(0)),
            Some(r) => r
                .assign(vector)
                .map_err(|e| ServerError::Internal(format!("routing: {e}"))),
        }
    }

    /// Routing-table version (0 before the first training).
    pub fn version(&self) -> u64 {
        self.meta_index.as_ref().map_or(0, |r| r.version())
    }

    /// Reads the record from partition 0 (untrained when there is none).
    pub fn load(meta: &MetaStore, settings: &CollectionSettings) -> Result<Self> {
        let Some(bytes) = meta.get(ROUTING_KEY)? else {
            return Ok(Self::untrained());
        };
        let corrupt = |e: String| ServerError::Internal(format!("routing record: {e}"));
        let mut d = Decoder::new(&bytes);
        let format = d.u64().map_err(|e| corrupt(e.to_string()))?;
        if format != FORMAT {
            return Err(corrupt(format!(
                "layout {format} is not the {FORMAT} this build reads"
            )));
        }
        let phase = match d.u8().map_err(|e| corrupt(e.to_string()))? {
            1 => Phase::Migrating,
            2 => Phase::Routed,
            other => return Err(corrupt(format!("unknown phase {other}"))),
        };
        let trained_at_points = d.u64().map_err(|e| corrupt(e.to_string()))?;
        let sample_points = d.u64().map_err(|e| corrupt(e.to_string()))?;
        let meta_index = MetaIndex::read_from(d.bytes().map_err(|e| corrupt(e.to_string()))?)
            .map_err(|e| corrupt(e.to_string()))?;
        d.finish().map_err(|e| corrupt(e.to_string()))?;
        if meta_index.partitions() != settings.partitions() || meta_index.dim() != settings.dim {
            return Err(corrupt(format!(
                "meta_index for {} partitions of dimension {}, collection has {} of {}",
                meta_index.partitions(),
                meta_index.dim(),
                settings.partitions(),
                settings.dim
            )));
        }
        Ok(Self {
            phase,
            meta_index: Some(Arc::new(meta_index)),
            trained_at_points,
            sample_points,
        })
    }

    /// Stores the record durably in partition 0.
    pub fn store(&self, meta: &MetaStore) -> Result<()> {
        let Some(meta_index) = &self.meta_index else {
            return Err(ServerError::Internal(
                "an untrained routing state is never stored".into(),
            ));
        };
        let mut meta_index_bytes = Vec::new();
        meta_index.write_to(&mut meta_index_bytes);
        let mut out = Vec::with_capacity(meta_index_bytes.len() + 64);
        let mut e = Encoder::new(&mut out);
        e.u64(FORMAT);
        e.u8(self.phase.tag());
        e.u64(self.trained_at_points);
        e.u64(self.sample_points);
        e.bytes(&meta_index_bytes);
        meta.put(ROUTING_KEY, &out)
    }
}

/// A rewrite of a stored point that touches more than one partition, recorded before its
/// first step: `to` is its home partition (`None`: every partition), `also` its spilled copy,
/// `from` the partitions that held the point before.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Move {
    /// The point.
    pub id: PointId,
    to: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    also: Option<u32>,
    /// Absent in records written before spilling: read as "unknown", and such a move is
    /// finished the old way (see the collection's `redo_moves`).
    #[serde(default)]
    from: Option<Vec<u32>>,
}

impl Move {
    /// A rewrite of `id` to `to`, held before in the partitions `from`.
    pub fn new(id: PointId, to: Assignment, from: Vec<u32>) -> Self {
        let (to, also) = match to {
            Assignment::One(t) => (Some(t), None),
            Assignment::Two(t, s) => (Some(t), Some(s)),
            Assignment::All => (None, None),
        };
        Self {
            id,
            to,
            also,
            from: Some(from),
        }
    }

    /// Where the point goes.
    pub fn assignment(&self) -> Assignment {
        match (self.to, self.also) {
            (None, _) => Assignment::All,
            (Some(t), None) => Assignment::One(t),
            (Some(t), Some(s)) => Assignment::Two(t, s),
        }
    }

    /// The partitions that held the point before the rewrite (`None` in old records).
    pub fn from(&self) -> Option<&[u32]> {
        self.from.as_deref()
    }
}

/// Records moves before their first step (synced).
pub fn record_moves(meta: &MetaStore, moves: &[Move]) -> Result<()> {
    let bytes = serde_json::to_vec(moves).map_err(|e| ServerError::Internal(e.to_string()))?;
    meta.put(MOVES_KEY, &bytes)
}

/// Clears the record once both steps are done (an empty record means none).
pub fn clear_moves(meta: &MetaStore) -> Result<()> {
    meta.put(MOVES_KEY, b"[]")
}

/// Moves a crash left unfinished, if any.
pub fn recorded_moves(meta: &MetaStore) -> Result<Option<Vec<Move>>> {
    let Some(bytes) = meta.get(MOVES_KEY)? else {
        return Ok(None);
    };
    let moves: Vec<Move> = serde_json::from_slice(&bytes)
        .map_err(|e| ServerError::Internal(format!("moves record: {e}")))?;
    Ok((!moves.is_empty()).then_some(moves))
}
