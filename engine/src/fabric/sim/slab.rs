//! A generational slab: the world's tables of queue pairs, completion queues and
//! connection managers. Handles hold an [`Idx`]; a stale one (its object destroyed,
//! the slot reused) no longer resolves.

/// Index plus generation of a slab entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Idx {
    pub(super) slot: u32,
    pub(super) gen: u32,
}

#[derive(Debug)]
struct Entry<T> {
    gen: u32,
    value: Option<T>,
}

#[derive(Debug)]
pub(super) struct Slab<T> {
    entries: Vec<Entry<T>>,
    free: Vec<u32>,
}

impl<T> Slab<T> {
    pub(super) fn new() -> Self {
        Slab {
            entries: Vec::new(),
            free: Vec::new(),
        }
    }

    pub(super) fn insert(&mut self, value: T) -> Idx {
        if let Some(slot) = self.free.pop() {
            let e = &mut self.entries[slot as usize];
            e.value = Some(value);
            return Idx { slot, gen: e.gen };
        }
        let slot = u32::try_from(self.entries.len()).unwrap_or(u32::MAX);
        self.entries.push(Entry {
            gen: 0,
            value: Some(value),
        });
        Idx { slot, gen: 0 }
    }

    pub(super) fn remove(&mut self, idx: Idx) -> Option<T> {
        let e = self.entries.get_mut(idx.slot as usize)?;
        if e.gen != idx.gen || e.value.is_none() {
            return None;
        }
        e.gen = e.gen.wrapping_add(1);
        self.free.push(idx.slot);
        e.value.take()
    }

    pub(super) fn get(&self, idx: Idx) -> Option<&T> {
        let e = self.entries.get(idx.slot as usize)?;
        if e.gen != idx.gen {
            return None;
        }
        e.value.as_ref()
    }

    pub(super) fn get_mut(&mut self, idx: Idx) -> Option<&mut T> {
        let e = self.entries.get_mut(idx.slot as usize)?;
        if e.gen != idx.gen {
            return None;
        }
        e.value.as_mut()
    }

    /// Live entries in slot order (deterministic).
    pub(super) fn iter(&self) -> impl Iterator<Item = (Idx, &T)> {
        self.entries.iter().enumerate().filter_map(|(i, e)| {
            e.value.as_ref().map(|v| {
                (
                    Idx {
                        slot: i as u32,
                        gen: e.gen,
                    },
                    v,
                )
            })
        })
    }

    /// Number of slots ever allocated (live or free); for index-based scans.
    pub(super) fn slots(&self) -> usize {
        self.entries.len()
    }

    /// The live entry in `slot`, with its index.
    pub(super) fn at_slot(&self, slot: usize) -> Option<(Idx, &T)> {
        let e = self.entries.get(slot)?;
        e.value.as_ref().map(|v| {
            (
                Idx {
                    slot: slot as u32,
                    gen: e.gen,
                },
                v,
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_index_does_not_resolve_after_reuse() {
        let mut s = Slab::new();
        let a = s.insert(1);
        assert_eq!(s.remove(a), Some(1));
        let b = s.insert(2);
        assert_eq!(b.slot, a.slot);
        assert!(s.get(a).is_none());
        assert_eq!(s.get(b), Some(&2));
        assert_eq!(s.remove(a), None);
        assert_eq!(s.iter().count(), 1);
    }
}
