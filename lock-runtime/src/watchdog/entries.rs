//! The watchdog's entries by id: a slab in fixed blocks. An id names a slot and which of its
//! tenants it was given to, so a stale id (a renewal's answer for a lease released meanwhile)
//! finds nothing, as it would in a map; and the table grows a block at a time and never moves
//! what it holds. A hash map grown to ten thousand entries keeps a table with a third of its
//! buckets empty, and the tables it outgrew stay behind as free memory the process does not
//! give back: about 200 bytes per held lock between them, where a slot here is 64.

/// Slots per block: 16 KiB of entries, allocated when the last block is full.
const BLOCK: usize = 256;

pub(super) struct Entries<T> {
    blocks: Vec<Box<[Slot<T>]>>,
    /// Slots handed out at least once: the next new one is this.
    used: usize,
    /// Slots whose tenant was removed, to give out again before new ones.
    free: Vec<u32>,
}

struct Slot<T> {
    /// Counts the tenants of the slot: the high half of their ids.
    tenant: u32,
    value: Option<T>,
}

impl<T> Entries<T> {
    pub(super) const fn new() -> Self {
        Entries {
            blocks: Vec::new(),
            used: 0,
            free: Vec::new(),
        }
    }

    /// Keeps `value`; returns its id, never 0 and never the id of another value before it.
    pub(super) fn insert(&mut self, value: T) -> u64 {
        let index = match self.free.pop() {
            Some(index) => index as usize,
            None => {
                if self.used == self.blocks.len() * BLOCK {
                    self.blocks.push(
                        (0..BLOCK)
                            .map(|_| Slot {
                                tenant: 0,
                                value: None,
                            })
                            .collect(),
                    );
                }
                self.used += 1;
                self.used - 1
            }
        };
        let slot = &mut self.blocks[index / BLOCK][index % BLOCK];
        // Tenant 0 is never given out: an id is never 0.
        slot.tenant = slot.tenant.checked_add(1).unwrap_or(1);
        slot.value = Some(value);
        (u64::from(slot.tenant) << 32) | index as u64
    }

    fn slot(&self, id: u64) -> Option<&Slot<T>> {
        let (index, tenant) = split(id);
        let slot = self.blocks.get(index / BLOCK)?.get(index % BLOCK)?;
        (slot.tenant == tenant).then_some(slot)
    }

    fn slot_mut(&mut self, id: u64) -> Option<&mut Slot<T>> {
        let (index, tenant) = split(id);
        let slot = self.blocks.get_mut(index / BLOCK)?.get_mut(index % BLOCK)?;
        (slot.tenant == tenant).then_some(slot)
    }

    pub(super) fn get(&self, id: &u64) -> Option<&T> {
        self.slot(*id)?.value.as_ref()
    }

    pub(super) fn get_mut(&mut self, id: &u64) -> Option<&mut T> {
        self.slot_mut(*id)?.value.as_mut()
    }

    pub(super) fn remove(&mut self, id: &u64) -> Option<T> {
        let value = self.slot_mut(*id)?.value.take()?;
        self.free.push(split(*id).0 as u32);
        Some(value)
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &T> {
        self.blocks
            .iter()
            .flat_map(|block| block.iter())
            .filter_map(|slot| slot.value.as_ref())
    }

    pub(super) fn values_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.blocks
            .iter_mut()
            .flat_map(|block| block.iter_mut())
            .filter_map(|slot| slot.value.as_mut())
    }

    /// Removes every value, and returns them.
    pub(super) fn drain(&mut self) -> Vec<T> {
        let mut values = Vec::new();
        for (index, slot) in self
            .blocks
            .iter_mut()
            .flat_map(|block| block.iter_mut())
            .enumerate()
        {
            if let Some(value) = slot.value.take() {
                values.push(value);
                self.free.push(index as u32);
            }
        }
        values
    }
}

/// The slot index and tenant an id names.
fn split(id: u64) -> (usize, u32) {
    ((id & u64::from(u32::MAX)) as usize, (id >> 32) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_names_its_value_until_it_is_removed_and_never_another() {
        let mut entries = Entries::new();
        let first = entries.insert("first");
        let second = entries.insert("second");
        assert_ne!(first, 0);
        assert_eq!(entries.get(&first), Some(&"first"));
        assert_eq!(entries.remove(&first), Some("first"));
        assert_eq!(entries.get(&first), None);
        assert_eq!(entries.remove(&first), None);
        // The slot is given out again, under another id: the old one still names nothing.
        let third = entries.insert("third");
        assert_ne!(third, first);
        assert_eq!(split(third).0, split(first).0);
        assert_eq!(entries.get(&first), None);
        assert_eq!(entries.get(&third), Some(&"third"));
        *entries.get_mut(&second).expect("kept") = "second, changed";
        let mut values: Vec<_> = entries.values().copied().collect();
        values.sort_unstable();
        assert_eq!(values, ["second, changed", "third"]);
        // Ids of no slot, or of a slot never given out.
        assert_eq!(entries.get(&0), None);
        assert_eq!(entries.get(&(u64::from(u32::MAX) << 32 | 5)), None);
    }

    #[test]
    fn a_slot_of_the_watchdog_takes_64_bytes() {
        assert!(std::mem::size_of::<Slot<crate::watchdog::Entry>>() <= 64);
    }

    #[test]
    fn it_grows_by_blocks_and_reuses_what_was_removed() {
        let mut entries = Entries::new();
        let ids: Vec<u64> = (0..BLOCK * 2 + 1).map(|i| entries.insert(i)).collect();
        assert_eq!(entries.blocks.len(), 3);
        for (i, id) in ids.iter().enumerate() {
            assert_eq!(entries.get(id), Some(&i));
        }
        for id in &ids[..BLOCK] {
            entries.remove(id);
        }
        for i in 0..BLOCK {
            entries.insert(i);
        }
        assert_eq!(
            entries.blocks.len(),
            3,
            "removed slots are given out again first"
        );
        for value in entries.values_mut() {
            *value += 1;
        }
        let mut drained = entries.drain();
        drained.sort_unstable();
        assert_eq!(drained.len(), BLOCK * 2 + 1);
        assert_eq!(drained.first(), Some(&1));
        assert_eq!(entries.values().count(), 0);
        assert!(ids.iter().all(|id| entries.get(id).is_none()));
    }
}
