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
    /// One bit per slot, set while the slot is live. Unfiltered searches test this instead of
    /// `slots`: 100k slots fit in 12.5 KB of cache, where touching a 64-byte entry per
    /// candidate cost a cache miss each (measured ~60 µs per query at 100k points).
    live_bits: Vec<u64>,
}

impl PointTable {
    /// The live entry at `slot`, if any.
    #[inline]
    pub fn entry(&self, slot: Slot) -> Option<&SlotEntry> {
        self.slots.get(slot as usize).and_then(Option::as_ref)
    }

    /// Whether `slot` holds a live point (cheap: one bit).
    #[inline]
    pub fn is_live(&self, slot: Slot) -> bool {
        let slot = slot as usize;
        self.live_bits
            .get(slot / 64)
            .is_some_and(|word| word & (1 << (slot % 64)) != 0)
    }

    fn set_live(&mut self, slot: usize, live: bool) {
        if self.live_bits.len() <= slot / 64 {
            self.live_bits.resize(slot / 64 + 1, 0);
        }
        if live {
            self.live_bits[slot / 64] |= 1 << (slot % 64);
        } else {
            self.live_bits[slot / 64] &= !(1 << (slot % 64));
        }
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
        self.set_live(index, true);
    }

    /// Marks `count` slots from `first`, added to the index but never published (their write
    /// failed), as dead, so that the table covers every index slot and the vacuum reclaims them.
    pub fn abandon(&mut self, first: Slot, count: usize) {
        let end = first as usize + count;
        if self.slots.len() < end {
            self.slots.resize(end, None);
        }
        self.dead += count;
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
            self.set_live(slot as usize, false);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: u64) -> SlotEntry {
        SlotEntry {
            id: PointId::Num(id),
            version: 1,
            payload: None,
        }
    }

    #[test]
    fn overwrite_and_delete_track_liveness() {
        let mut t = PointTable::default();
        t.publish(0, entry(7));
        t.publish(1, entry(8));
        t.publish(70, entry(7)); // overwrite: slot 0 dies
        assert!(!t.is_live(0) && t.is_live(1) && t.is_live(70));
        assert_eq!((t.live(), t.dead), (2, 1));
        assert!(t.remove(&PointId::Num(8)));
        assert!(!t.is_live(1) && !t.remove(&PointId::Num(8)));
        assert_eq!(t.get(&PointId::Num(7)).map(|(s, _)| s), Some(70));
        assert!(!t.is_live(5000));
    }

    #[test]
    fn abandoned_slots_are_dead_and_covered() {
        let mut t = PointTable::default();
        t.publish(0, entry(1));
        t.abandon(1, 3);
        assert_eq!((t.slots.len(), t.live(), t.dead), (4, 1, 3));
        assert!(!t.is_live(2));
        t.publish(4, entry(2));
        assert_eq!((t.slots.len(), t.live(), t.dead), (5, 2, 3));
    }
}
