//! Fast-registration slots of a requester: allocated once at setup by the driver,
//! re-keyed for every chunk they cover, so registering caller memory per RPC is a
//! FastReg work request and never a system call.
//!
//! The core holds each slot's key only ([`FastRegSlot`], plain data): the provider's
//! handle stays with the driver, which drops it when the connection has closed
//! (deregistering the slot, so no key the core handed out grants anything after).
//! Providers keep nothing per key generation in the handle (the FastReg work request
//! carries the key), so the core steps keys itself.
//!
//! Each re-key moves a slot to a random generation byte (never its current one) from a
//! seeded generator, not to the next byte: a peer that saw one key of a slot cannot
//! name the key the slot gets next. One splitmix64 step per key, no system call.

use super::fixed::IndexStack;
use crate::fabric::mr::retag_key;

/// One fast-registration slot as the core sees it: the key the provider gave it (index
/// and generation, as `ib_alloc_mr` or `ibv_alloc_mw` return it) and the most bytes one
/// registration through it may cover.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FastRegSlot {
    /// The slot's current key.
    pub key: u32,
    /// Largest region one registration through the slot covers.
    pub max_len: usize,
}

/// The requester's fast-registration slots.
pub(crate) struct MrTable {
    /// Each slot's current key.
    keys: Vec<u32>,
    free: IndexStack,
    max_len: usize,
    /// splitmix64 state for the keys' generation bytes.
    rng: u64,
}

/// A seed from the OS when the configuration names none (setup path): std's hash keys
/// are drawn from the OS's random source once per process and stepped per instance.
pub(crate) fn os_seed() -> u64 {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one(0x5eed_u64)
}

/// One splitmix64 step: the next state and its output.
#[inline]
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl MrTable {
    /// The table of `slots`; their keys' generation bytes come from `seed`.
    pub(crate) fn new(slots: &[FastRegSlot], seed: u64) -> Self {
        let max_len = slots.iter().map(|m| m.max_len).min().unwrap_or(0);
        let n = slots.len() as u32;
        MrTable {
            keys: slots.iter().map(|m| m.key).collect(),
            free: IndexStack::full(n),
            max_len,
            rng: seed,
        }
    }

    /// Largest region one slot covers.
    pub(crate) fn max_len(&self) -> usize {
        self.max_len
    }

    /// Free slots.
    pub(crate) fn available(&self) -> usize {
        if self.keys.is_empty() {
            0
        } else {
            self.free.len()
        }
    }

    /// Takes a free slot and moves it to a fresh key; returns the slot and the key.
    pub(crate) fn take(&mut self) -> Option<(u32, u32)> {
        let i = self.free.pop()?;
        let tag = splitmix64(&mut self.rng) as u8;
        self.keys.get_mut(i as usize).map(|key| {
            *key = retag_key(*key, tag);
            (i, *key)
        })
    }

    /// Returns a slot whose key is invalid (locally or remotely invalidated).
    pub(crate) fn give(&mut self, i: u32) {
        let _ = self.free.push(i);
    }

    /// Forgets every slot: the connection ended, and the slots' keys can no longer be
    /// invalidated with work requests. The driver deregisters the slots themselves (drops
    /// its handles) once the core reports the connection closed.
    pub(crate) fn destroy(&mut self) {
        self.keys.clear();
        self.free = IndexStack::full(0);
    }
}
