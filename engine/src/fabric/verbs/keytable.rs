//! Keys to verbs objects, for the data path.
//!
//! Work requests name memory by key (a `u32`), but a verbs memory-window bind needs the
//! `ibv_mw` and the `ibv_mr` themselves. This table maps keys to those pointers with
//! lock-free lookups (linear probing over atomics); insertions and removals happen at
//! registration time and take a mutex among themselves only.
//!
//! A removed entry's object must not be freed while a poster may still hold the pointer
//! it looked up: posters hold a [`ReadGuard`] across lookup and post, and removal waits
//! until no guard is held ([`KeyTable::remove`]), a grace period in the manner of RCU.

use std::ffi::c_void;
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

const EMPTY: u64 = 0;
const TOMBSTONE: u64 = 1;
/// Slots a table starts with: a protection domain of a group connection holds a handful
/// of registrations and its windows, so most tables never grow past a few doublings.
const FIRST_SLOTS: usize = 16;

fn stored(key: u32) -> u64 {
    u64::from(key) + 2
}

struct Slot {
    key: AtomicU64,
    ptr: AtomicPtr<c_void>,
    aux: AtomicU64,
}

fn slots(n: usize) -> Box<[Slot]> {
    (0..n)
        .map(|_| Slot {
            key: AtomicU64::new(EMPTY),
            ptr: AtomicPtr::new(std::ptr::null_mut()),
            aux: AtomicU64::new(0),
        })
        .collect()
}

/// A map from 32-bit keys to a pointer and one extra word, growing by doubling up to a
/// fixed bound.
///
/// A table of the bound's size for every protection domain cost 192 KiB each (8192 slots
/// of 24 octets), two per connection on verbs: most of a connection's memory. So the
/// slots start at [`FIRST_SLOTS`] and double when an insertion finds them three quarters
/// full. Growth happens in `insert` (registration time, never on the data path): the
/// live entries are copied into the new slots, readers are switched over by one pointer
/// store, and the old slots are freed after the same grace period `remove` waits for.
pub(crate) struct KeyTable {
    /// The current slots (a leaked `Box<Box<[Slot]>>`), replaced only under `live`.
    slots: AtomicPtr<Box<[Slot]>>,
    /// Most slots the table grows to (a power of two).
    max_slots: usize,
    /// Live entries; also serialises writers.
    live: Mutex<usize>,
    readers: AtomicUsize,
}

// SAFETY: the slots are atomics; the pointer to them is replaced only under `live` and
// freed only after a grace period with no reader (see `grow`).
unsafe impl Send for KeyTable {}
// SAFETY: as above.
unsafe impl Sync for KeyTable {}

/// Held by a poster between looking pointers up and handing them to the device.
pub(crate) struct ReadGuard<'a>(&'a KeyTable);

impl Drop for ReadGuard<'_> {
    fn drop(&mut self) {
        self.0.readers.fetch_sub(1, Ordering::Release);
    }
}

impl Drop for KeyTable {
    fn drop(&mut self) {
        // SAFETY: made by Box::into_raw and, with `&mut self`, no reader is left.
        drop(unsafe { Box::from_raw(*self.slots.get_mut()) });
    }
}

fn start(key: u32, len: usize) -> usize {
    // Fibonacci hashing: device keys differ mostly in their middle bits.
    (u64::from(key).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as usize & (len - 1)
}

/// Where `key` goes in `slots` (the first free or tombstone slot of its probe run).
fn place(slots: &[Slot], key: u32, ptr: *mut c_void, aux: u64) {
    let mask = slots.len() - 1;
    let mut i = start(key, slots.len());
    loop {
        let s = &slots[i];
        let k = s.key.load(Ordering::Relaxed);
        if k == EMPTY || k == TOMBSTONE {
            s.ptr.store(ptr, Ordering::Release);
            s.aux.store(aux, Ordering::Release);
            s.key.store(stored(key), Ordering::SeqCst);
            return;
        }
        i = (i + 1) & mask;
    }
}

impl KeyTable {
    /// A table that grows up to `capacity` slots (rounded up to a power of two); it holds
    /// up to three quarters of that.
    pub(crate) fn new(capacity: usize) -> KeyTable {
        let max_slots = capacity.next_power_of_two().max(8);
        let first = FIRST_SLOTS.min(max_slots);
        KeyTable {
            slots: AtomicPtr::new(Box::into_raw(Box::new(slots(first)))),
            max_slots,
            live: Mutex::new(0),
            readers: AtomicUsize::new(0),
        }
    }

    /// Most entries the table takes.
    pub(crate) fn max_entries(&self) -> usize {
        self.max_slots / 4 * 3
    }

    /// Slots allocated now (what the table costs: 24 octets each).
    #[cfg(test)]
    pub(crate) fn allocated_slots(&self) -> usize {
        let g = self.read();
        self.current(&g).len()
    }

    /// The slots readers use now.
    fn current<'a>(&'a self, _guard: &ReadGuard<'a>) -> &'a [Slot] {
        // SAFETY: the pointer is always a live Box; a replaced one is freed only once no
        // guard taken before the replacement is held, and this guard is held.
        unsafe { &*self.slots.load(Ordering::SeqCst) }
    }

    /// Starts a read-side critical section.
    pub(crate) fn read(&self) -> ReadGuard<'_> {
        self.readers.fetch_add(1, Ordering::SeqCst);
        ReadGuard(self)
    }

    /// The pointer and extra word stored for `key`.
    pub(crate) fn get(&self, guard: &ReadGuard<'_>, key: u32) -> Option<(*mut c_void, u64)> {
        let slots = self.current(guard);
        let want = stored(key);
        let mask = slots.len() - 1;
        let mut i = start(key, slots.len());
        for _ in 0..slots.len() {
            let s = &slots[i];
            match s.key.load(Ordering::SeqCst) {
                EMPTY => return None,
                k if k == want => {
                    return Some((s.ptr.load(Ordering::Acquire), s.aux.load(Ordering::Acquire)))
                }
                _ => i = (i + 1) & mask,
            }
        }
        None
    }

    /// Waits until no reader that may have loaded an old slot pointer is left.
    fn grace_period(&self) {
        // A reader that found an entry (or the old slots) incremented `readers` before
        // its lookup; once the count is seen at zero, every such reader is done.
        while self.readers.load(Ordering::SeqCst) != 0 {
            std::thread::yield_now();
        }
    }

    /// Adds `key`; false when the table is full at its bound. Keys must be unique
    /// (device keys of live objects are).
    pub(crate) fn insert(&self, key: u32, ptr: *mut c_void, aux: u64) -> bool {
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        if *live >= self.max_entries() {
            return false;
        }
        // Writers hold `live`, so the slots cannot change under this reference.
        // SAFETY: only writers replace or free the slots, and this one holds the lock.
        let cur: &[Slot] = unsafe { &*self.slots.load(Ordering::SeqCst) };
        let mut retired = None;
        if *live + 1 > cur.len() / 4 * 3 {
            let bigger = slots(cur.len() * 2);
            for s in cur.iter() {
                let k = s.key.load(Ordering::Relaxed);
                if k != EMPTY && k != TOMBSTONE {
                    place(
                        &bigger,
                        (k - 2) as u32,
                        s.ptr.load(Ordering::Relaxed),
                        s.aux.load(Ordering::Relaxed),
                    );
                }
            }
            let new = Box::into_raw(Box::new(bigger));
            retired = Some(self.slots.swap(new, Ordering::SeqCst));
        }
        // SAFETY: as above (possibly the slots just stored).
        let cur: &[Slot] = unsafe { &*self.slots.load(Ordering::SeqCst) };
        place(cur, key, ptr, aux);
        *live += 1;
        drop(live);
        if let Some(old) = retired {
            self.grace_period();
            // SAFETY: made by Box::into_raw, no longer reachable from `slots`, and no
            // reader that loaded it before the swap is left.
            drop(unsafe { Box::from_raw(old) });
        }
        true
    }

    /// Removes `key` and returns once no reader can still be using its pointer.
    pub(crate) fn remove(&self, key: u32) {
        let want = stored(key);
        {
            let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
            // SAFETY: writers hold `live`, so these slots stay as they are.
            let slots: &[Slot] = unsafe { &*self.slots.load(Ordering::SeqCst) };
            let mask = slots.len() - 1;
            let mut i = start(key, slots.len());
            for _ in 0..slots.len() {
                let s = &slots[i];
                match s.key.load(Ordering::Relaxed) {
                    EMPTY => break,
                    k if k == want => {
                        s.key.store(TOMBSTONE, Ordering::SeqCst);
                        *live -= 1;
                        break;
                    }
                    _ => i = (i + 1) & mask,
                }
            }
        }
        self.grace_period();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(n: usize) -> *mut c_void {
        n as *mut c_void
    }

    #[test]
    fn insert_get_remove_and_reuse() {
        let t = KeyTable::new(8);
        assert_eq!(t.max_entries(), 6);
        for k in 0..6u32 {
            assert!(t.insert(k << 8 | 0x11, p(k as usize + 1), u64::from(k) * 10));
        }
        assert!(!t.insert(0xffff_ff00, p(99), 0), "full at three quarters");
        let g = t.read();
        for k in 0..6u32 {
            assert_eq!(
                t.get(&g, k << 8 | 0x11),
                Some((p(k as usize + 1), u64::from(k) * 10))
            );
        }
        assert_eq!(t.get(&g, 3 << 8 | 0x12), None, "other generation");
        drop(g);
        t.remove(2 << 8 | 0x11);
        assert!(t.insert(0xffff_ff00, p(99), 7));
        let g = t.read();
        assert_eq!(t.get(&g, 2 << 8 | 0x11), None);
        assert_eq!(t.get(&g, 0xffff_ff00), Some((p(99), 7)));
        assert_eq!(
            t.get(&g, 5 << 8 | 0x11),
            Some((p(6), 50)),
            "found past a tombstone"
        );
    }

    #[test]
    fn grows_by_registrations_up_to_its_bound() {
        let t = KeyTable::new(8192);
        assert_eq!(
            t.allocated_slots(),
            FIRST_SLOTS,
            "a new domain's table is small"
        );
        assert_eq!(t.max_entries(), 6144);
        for k in 0..12u32 {
            assert!(t.insert(k << 8 | 1, p(k as usize + 1), u64::from(k)));
        }
        assert_eq!(t.allocated_slots(), 16, "twelve fit in sixteen slots");
        assert!(t.insert(12 << 8 | 1, p(13), 12));
        assert_eq!(t.allocated_slots(), 32, "the thirteenth doubles it");
        t.remove(3 << 8 | 1);
        for k in 13..6145u32 {
            assert!(t.insert(k << 8 | 1, p(k as usize + 1), u64::from(k)));
        }
        assert_eq!(t.allocated_slots(), 8192);
        assert!(!t.insert(0xffff_ff01, p(1), 0), "full at its bound");
        let g = t.read();
        for k in 0..6145u32 {
            let want = (k != 3).then(|| (p(k as usize + 1), u64::from(k)));
            assert_eq!(t.get(&g, k << 8 | 1), want, "key {k} after growing");
        }
    }

    #[test]
    fn readers_find_entries_while_the_table_grows() {
        let t = std::sync::Arc::new(KeyTable::new(1 << 14));
        assert!(t.insert(7, p(7), 70));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (t2, stop2) = (t.clone(), stop.clone());
        let (started_tx, started) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            let mut seen = 0u64;
            // Bounded: the writer below finishes in far fewer rounds, and stops us.
            for _ in 0..50_000_000u64 {
                if stop2.load(Ordering::Relaxed) {
                    break;
                }
                let g = t2.read();
                assert_eq!(t2.get(&g, 7), Some((p(7), 70)), "lost during a growth");
                seen += 1;
                if seen == 1 {
                    started_tx.send(()).expect("the writer waits for this");
                }
            }
            seen
        });
        // The insertions (ten doublings) start once the reader is looking.
        started
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("reader started");
        for k in 1..10_000u32 {
            assert!(t.insert(k << 8 | 3, p(k as usize), 0));
        }
        stop.store(true, Ordering::Relaxed);
        assert!(reader.join().expect("reader") > 0);
        assert_eq!(t.allocated_slots(), 16384);
    }

    #[test]
    fn remove_waits_for_readers() {
        let t = std::sync::Arc::new(KeyTable::new(16));
        assert!(t.insert(5, p(5), 0));
        let g = t.read();
        let t2 = t.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let h = std::thread::spawn(move || {
            t2.remove(5);
            tx.send(()).expect("main thread waits");
        });
        // The remover cannot finish while the guard is held. This does not rely on
        // timing: whatever the interleaving, no message may be there yet.
        assert!(rx.try_recv().is_err());
        drop(g);
        rx.recv_timeout(std::time::Duration::from_secs(10))
            .expect("remove returns once the guard is gone");
        h.join().expect("remover");
        assert_eq!(t.get(&t.read(), 5), None);
    }
}
