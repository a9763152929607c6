//! XIDs the upper layer chose, mapped to the call slots that carry them.
//!
//! An engine-assigned XID names its slot in its low bits, so a reply finds its call with
//! a mask. A caller-chosen XID (an NFS client keeps its own, for the server's duplicate
//! request cache) says nothing about the slot, so those calls are found through this
//! table: open addressing with linear probing, sized at connection setup to at least
//! twice the number of slots (load factor <= 1/2), never resized, backward-shift
//! deletion (no tombstones). It is consulted only while such a call is outstanding.

/// A fixed-capacity map from XID to call slot.
pub(super) struct XidMap {
    keys: Box<[u32]>,
    /// Slot + 1; 0 marks an empty bucket.
    vals: Box<[u32]>,
    shift: u32,
    len: u32,
}

impl XidMap {
    /// A map for at most `slots` entries.
    pub(super) fn new(slots: usize) -> XidMap {
        let cap = (slots.max(4) * 2).next_power_of_two();
        XidMap {
            keys: vec![0; cap].into_boxed_slice(),
            vals: vec![0; cap].into_boxed_slice(),
            shift: 32 - cap.trailing_zeros(),
            len: 0,
        }
    }

    /// How many XIDs are mapped.
    #[cfg(test)]
    fn len(&self) -> u32 {
        self.len
    }

    #[inline(always)]
    fn mask(&self) -> usize {
        self.keys.len() - 1
    }

    /// The bucket an XID hashes to (Fibonacci hashing: callers often count XIDs up,
    /// and the multiply spreads consecutive ones).
    #[inline(always)]
    fn home(&self, xid: u32) -> usize {
        (xid.wrapping_mul(0x9E37_79B1) >> self.shift) as usize
    }

    /// The slot carrying `xid`.
    #[inline]
    pub(super) fn get(&self, xid: u32) -> Option<u32> {
        if self.len == 0 {
            return None;
        }
        let mut i = self.home(xid);
        loop {
            let v = self.vals[i];
            if v == 0 {
                return None;
            }
            if self.keys[i] == xid {
                return Some(v - 1);
            }
            i = (i + 1) & self.mask();
        }
    }

    /// Maps `xid` to `slot`; false when `xid` is already mapped or the map is full.
    pub(super) fn insert(&mut self, xid: u32, slot: u32) -> bool {
        if self.len as usize >= self.keys.len() / 2 {
            return false;
        }
        let mut i = self.home(xid);
        loop {
            if self.vals[i] == 0 {
                self.keys[i] = xid;
                self.vals[i] = slot + 1;
                self.len += 1;
                return true;
            }
            if self.keys[i] == xid {
                return false;
            }
            i = (i + 1) & self.mask();
        }
    }

    /// Unmaps `xid`, returning its slot.
    pub(super) fn remove(&mut self, xid: u32) -> Option<u32> {
        if self.len == 0 {
            return None;
        }
        let mask = self.mask();
        let mut hole = self.home(xid);
        loop {
            if self.vals[hole] == 0 {
                return None;
            }
            if self.keys[hole] == xid {
                break;
            }
            hole = (hole + 1) & mask;
        }
        let slot = self.vals[hole] - 1;
        self.vals[hole] = 0;
        self.len -= 1;
        // Backward shift: pull later members of the probe run into the hole when their
        // home bucket does not lie strictly between the hole and them (cyclically).
        let mut j = hole;
        loop {
            j = (j + 1) & mask;
            if self.vals[j] == 0 {
                return Some(slot);
            }
            let home = self.home(self.keys[j]);
            let dist_j = j.wrapping_sub(home) & mask;
            let dist_hole = j.wrapping_sub(hole) & mask;
            if dist_j >= dist_hole {
                self.keys[hole] = self.keys[j];
                self.vals[hole] = self.vals[j];
                self.vals[j] = 0;
                hole = j;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::XidMap;
    use proptest::prelude::*;
    use std::collections::HashMap;

    #[test]
    fn insert_get_remove() {
        let mut m = XidMap::new(8);
        assert!(m.insert(7, 1));
        assert!(!m.insert(7, 2), "a duplicate XID is refused");
        assert_eq!(m.get(7), Some(1));
        assert_eq!(m.get(8), None);
        assert_eq!(m.remove(7), Some(1));
        assert_eq!(m.get(7), None);
        assert_eq!(m.remove(7), None);
        assert_eq!(m.len(), 0);
    }

    #[test]
    fn refuses_past_half_full() {
        let mut m = XidMap::new(4);
        let cap = 8;
        for x in 0..cap / 2 {
            assert!(m.insert(x, x));
        }
        assert!(!m.insert(1000, 0));
        assert_eq!(m.len(), cap / 2);
    }

    #[test]
    fn colliding_xids_survive_removal_of_earlier_ones() {
        // XIDs that share a home bucket form one probe run; removing the first must
        // keep the rest reachable.
        let mut m = XidMap::new(16);
        let home = m.home(1);
        let same: Vec<u32> = (2..1_000_000u32)
            .filter(|&x| m.home(x) == home)
            .take(5)
            .collect();
        assert!(m.insert(1, 0));
        for (i, &x) in same.iter().enumerate() {
            assert!(m.insert(x, i as u32 + 1));
        }
        assert_eq!(m.remove(1), Some(0));
        for (i, &x) in same.iter().enumerate() {
            assert_eq!(m.get(x), Some(i as u32 + 1), "xid {x} lost");
        }
    }

    proptest! {
        #[test]
        fn behaves_like_a_hashmap(ops in proptest::collection::vec((0u8..3, 0u32..64), 0..400)) {
            let mut m = XidMap::new(32);
            let mut model: HashMap<u32, u32> = HashMap::new();
            for (n, (op, x)) in ops.into_iter().enumerate() {
                // Spread the keys so some share buckets and some wrap around.
                let xid = x.wrapping_mul(0x0100_0193);
                match op {
                    0 => {
                        let fits = model.len() < 32 && !model.contains_key(&xid);
                        prop_assert_eq!(m.insert(xid, n as u32), fits);
                        if fits {
                            model.insert(xid, n as u32);
                        }
                    }
                    1 => prop_assert_eq!(m.remove(xid), model.remove(&xid)),
                    _ => prop_assert_eq!(m.get(xid), model.get(&xid).copied()),
                }
                prop_assert_eq!(m.len() as usize, model.len());
            }
            for (k, v) in &model {
                prop_assert_eq!(m.get(*k), Some(*v));
            }
        }
    }
}
