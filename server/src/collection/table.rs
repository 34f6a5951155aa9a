//! The searchable state of a collection: an index plus the table that maps its slots back to
//! point ids, versions and payloads. Only the applier thread mutates it; searches read it.

use std::collections::BTreeMap;

use cairn_api::{Payload, PointId};
use cairn_index::{Slot, VectorIndex};
use parking_lot::RwLock;

/// What a live slot holds besides its vector.
#[derive(Debug, Clone, PartialEq)]
pub struct SlotEntry {
    /// The point's id.
    pub id: PointId,
    /// Sequence number of the write that produced this slot.
    pub version: u64,
    /// The payload.
    pub payload: Option<Payload>,
}

/// Slot ↔ id mapping. Slots of deleted or overwritten points are `None` ("dead"): they stay
/// in the graph to route searches until the next vacuum rebuilds the index.
#[derive(Debug, Default)]
pub struct PointTable {
    /// Id → current slot, in id order (scroll walks it).
    pub by_id: BTreeMap<PointId, Slot>,
    /// Slot → entry; `None` for dead slots and for slots added but not yet published.
    pub slots: Vec<Option<SlotEntry>>,
    /// Number of dead slots.
    pub dead: usize,
}

impl PointTable {
    /// The live entry at `slot`, if any.
    #[inline]
    pub fn entry(&self, slot: Slot) -> Option<&SlotEntry> {
        self.slots.get(slot as usize).and_then(Option::as_ref)
    }

    /// The live entry of `id`.
    pub fn get(&self, id: &PointId) -> Option<(Slot, &SlotEntry)> {
        let slot = *self.by_id.get(id)?;
        self.entry(slot).map(|e| (slot, e))
    }

    /// Number of live points.
    pub fn live(&self) -> usize {
        self.by_id.len()
    }

    /// Publishes `entry` at `slot`, killing the id's previous slot.
    pub fn publish(&mut self, slot: Slot, entry: SlotEntry) {
        let index = slot as usize;
        if self.slots.len() <= index {
            self.slots.resize(index + 1, None);
        }
        if let Some(old) = self.by_id.insert(entry.id, slot) {
            self.kill(old);
        }
        self.slots[index] = Some(entry);
    }

    /// Removes `id`; true if it was live.
    pub fn remove(&mut self, id: &PointId) -> bool {
        match self.by_id.remove(id) {
            Some(slot) => {
                self.kill(slot);
                true
            }
            None => false,
        }
    }

    fn kill(&mut self, slot: Slot) {
        if let Some(cell) = self.slots.get_mut(slot as usize) {
            if cell.take().is_some() {
                self.dead += 1;
            }
        }
    }
}

/// An index and its table, swapped as one when a vacuum rebuilds the index.
pub struct LiveIndex {
    /// The vectors and graph.
    pub index: Box<dyn VectorIndex>,
    /// Slot ↔ point mapping.
    pub table: RwLock<PointTable>,
}
