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

fn stored(key: u32) -> u64 {
    u64::from(key) + 2
}

struct Slot {
    key: AtomicU64,
    ptr: AtomicPtr<c_void>,
    aux: AtomicU64,
}

/// A fixed-capacity map from 32-bit keys to a pointer and one extra word.
pub(crate) struct KeyTable {
    slots: Box<[Slot]>,
    /// Live entries; also serialises writers.
    live: Mutex<usize>,
    readers: AtomicUsize,
}

/// Held by a poster between looking pointers up and handing them to the device.
pub(crate) struct ReadGuard<'a>(&'a KeyTable);

impl Drop for ReadGuard<'_> {
    fn drop(&mut self) {
        self.0.readers.fetch_sub(1, Ordering::Release);
    }
}

impl KeyTable {
    /// A table with `capacity` slots (rounded up to a power of two); it holds up to
    /// three quarters of that.
    pub(crate) fn new(capacity: usize) -> KeyTable {
        let n = capacity.next_power_of_two().max(8);
        KeyTable {
            slots: (0..n)
                .map(|_| Slot {
                    key: AtomicU64::new(EMPTY),
                    ptr: AtomicPtr::new(std::ptr::null_mut()),
                    aux: AtomicU64::new(0),
                })
                .collect(),
            live: Mutex::new(0),
            readers: AtomicUsize::new(0),
        }
    }

    /// Most entries the table takes.
    pub(crate) fn max_entries(&self) -> usize {
        self.slots.len() / 4 * 3
    }

    fn start(&self, key: u32) -> usize {
        // Fibonacci hashing: device keys differ mostly in their middle bits.
        (u64::from(key).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as usize & (self.slots.len() - 1)
    }

    /// Starts a read-side critical section.
    pub(crate) fn read(&self) -> ReadGuard<'_> {
        self.readers.fetch_add(1, Ordering::SeqCst);
        ReadGuard(self)
    }

    /// The pointer and extra word stored for `key`.
    pub(crate) fn get(&self, _guard: &ReadGuard<'_>, key: u32) -> Option<(*mut c_void, u64)> {
        let want = stored(key);
        let mask = self.slots.len() - 1;
        let mut i = self.start(key);
        for _ in 0..self.slots.len() {
            let s = &self.slots[i];
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

    /// Adds `key`; false when the table is full. Keys must be unique (device keys of
    /// live objects are).
    pub(crate) fn insert(&self, key: u32, ptr: *mut c_void, aux: u64) -> bool {
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        if *live >= self.max_entries() {
            return false;
        }
        let mask = self.slots.len() - 1;
        let mut i = self.start(key);
        loop {
            let s = &self.slots[i];
            let k = s.key.load(Ordering::Relaxed);
            if k == EMPTY || k == TOMBSTONE {
                s.ptr.store(ptr, Ordering::Release);
                s.aux.store(aux, Ordering::Release);
                s.key.store(stored(key), Ordering::SeqCst);
                *live += 1;
                return true;
            }
            i = (i + 1) & mask;
        }
    }

    /// Removes `key` and returns once no reader can still be using its pointer.
    pub(crate) fn remove(&self, key: u32) {
        let want = stored(key);
        {
            let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
            let mask = self.slots.len() - 1;
            let mut i = self.start(key);
            for _ in 0..self.slots.len() {
                let s = &self.slots[i];
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
        // Grace period: a reader that found the entry incremented `readers` before its
        // lookup; once the count is seen at zero, every such reader is done.
        while self.readers.load(Ordering::SeqCst) != 0 {
            std::thread::yield_now();
        }
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
