//! Read delegations and their recall (RFC 8881 §10.2, §10.4, §18.6 DELEGRETURN, §20.2
//! CB_RECALL).
//!
//! - **Grant**: OPEN for reading alone gets OPEN_DELEGATE_READ when the client's
//!   backchannel has been proven (its CB_NULL was answered, §10.2.1: a server must not
//!   grant a delegation it could not recall), the client did not ask for none
//!   (OPEN4_SHARE_ACCESS_WANT_NO_DELEG or WANT_WRITE_DELEG), no other client has the file
//!   open for writing, no recall of the file is in progress, and the client holds none on
//!   it yet (as Linux nfsd, a second OPEN gets no second delegation).
//! - **Conflict**: an operation of another client that would change the file (OPEN for
//!   writing, WRITE, SETATTR, REMOVE, RENAME of it or over it) queues a recall of every
//!   delegation others hold on it and is answered NFS4ERR_DELAY (§10.4.5: "the server
//!   ... returns NFS4ERR_DELAY ... while the recall is in progress") until each is
//!   returned. The holder's own operations never conflict with its delegation.
//! - **Recall**: the connection that carries the holder's backchannel sends CB_COMPOUND
//!   (CB_SEQUENCE, CB_RECALL) for each queued recall, one at a time on its single
//!   backchannel slot; the holder answers, then sends DELEGRETURN.
//! - **Revocation** (the choice §10.4.6 leaves to the server): a recall not answered by
//!   DELEGRETURN within one lease period of being queued, or one whose CB_RECALL failed
//!   (no answer, a transport error, or an error status: the client does not hold it),
//!   revokes the delegation: it stays in the table, marked revoked, so its stateid gets
//!   NFS4ERR_DELEG_REVOKED and the holder's SEQUENCE replies carry
//!   SEQ4_STATUS_RECALLABLE_STATE_REVOKED until it frees it (FREE_STATEID, or
//!   DELEGRETURN, which answers NFS4ERR_DELEG_REVOKED and drops it).

use super::super::backend::FileKey;
use super::state::{StateTable, ACCESS_WRITE};
use crate::nfs::v41::{Nfsstat4, Stateid4};

/// OPEN4_SHARE_ACCESS_WANT_DELEG_MASK: the want bits of `share_access`.
pub const WANT_DELEG_MASK: u32 = 0xff00;
/// OPEN4_SHARE_ACCESS_WANT_NO_PREFERENCE.
pub const WANT_NO_PREFERENCE: u32 = 0;
/// OPEN4_SHARE_ACCESS_WANT_READ_DELEG.
pub const WANT_READ_DELEG: u32 = 0x0100;
/// OPEN4_SHARE_ACCESS_WANT_ANY_DELEG.
pub const WANT_ANY_DELEG: u32 = 0x0300;
/// SEQ4_STATUS_RECALLABLE_STATE_REVOKED (RFC 8881 §18.46.3).
pub const SEQ4_STATUS_RECALLABLE_STATE_REVOKED: u32 = 0x0000_0040;

/// Where a delegation's recall stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recall {
    /// Not recalled.
    None,
    /// A conflicting operation asked for it at this time (seconds); not yet sent.
    Queued(u64),
    /// CB_RECALL went out; queued at this time.
    Sent(u64),
    /// The client answered CB_RECALL with success; queued at this time. DELEGRETURN is
    /// what ends it.
    Answered(u64),
    /// Revoked (recall not honoured in time, or the callback failed).
    Revoked,
}

/// A read delegation (OPEN_DELEGATE_READ).
#[derive(Debug, Clone)]
pub struct Delegation {
    /// Holder.
    pub client: u64,
    /// The file.
    pub file: FileKey,
    /// Its stateid's `seqid` (always 1: a delegation stateid never changes).
    pub seqid: u32,
    /// Its recall.
    pub recall: Recall,
}

/// A recall to send: what CB_RECALL names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecallOrder {
    /// The delegation stateid.
    pub stateid: Stateid4,
    /// The file.
    pub file: FileKey,
}

/// What [`StateTable::conflict`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Conflict {
    /// Delegations of other clients still outstanding on the file.
    pub outstanding: usize,
    /// Of those, recalls queued by this call (the connections carrying backchannels
    /// must look for them).
    pub queued: usize,
    /// Delegations this call revoked (their recall ran past a lease).
    pub revoked: usize,
}

impl StateTable {
    /// Whether OPEN by `client` of `file` for `access` with `want` (the
    /// OPEN4_SHARE_ACCESS_WANT_* bits) may be given a read delegation (see the module
    /// documentation); the stateid if so.
    pub fn grant_read_delegation(
        &mut self,
        client: u64,
        file: FileKey,
        access: u32,
        want: u32,
    ) -> Option<Stateid4> {
        if access & ACCESS_WRITE != 0 {
            return None;
        }
        if !matches!(want, WANT_NO_PREFERENCE | WANT_READ_DELEG | WANT_ANY_DELEG) {
            return None;
        }
        if !self.clients.get(&client).is_some_and(|c| c.cb_up) {
            return None;
        }
        let writers = self
            .opens
            .values()
            .any(|o| o.file == file && o.client != client && o.access & ACCESS_WRITE != 0);
        let busy = self
            .delegs
            .values()
            .any(|d| d.file == file && (d.client == client || d.recall != Recall::None));
        if writers || busy || self.delegs.len() >= self.limits.opens {
            return None;
        }
        let other = self.new_other();
        self.delegs.insert(
            other,
            Delegation {
                client,
                file,
                seqid: 1,
                recall: Recall::None,
            },
        );
        Some(Stateid4 { seqid: 1, other })
    }

    /// An operation of `client` (`None`: one outside any NFSv4.1 client) is about to
    /// change `file`: queues the recall of every delegation another client holds on it,
    /// revokes those whose recall ran past a lease, and reports what is outstanding.
    pub fn conflict(&mut self, client: Option<u64>, file: FileKey, now: u64) -> Conflict {
        let lease = u64::from(self.limits.lease_secs);
        let mut c = Conflict::default();
        let mut late = Vec::new();
        for (other, d) in self.delegs.iter_mut() {
            if d.file != file || Some(d.client) == client {
                continue;
            }
            match d.recall {
                Recall::Revoked => continue,
                Recall::None => {
                    d.recall = Recall::Queued(now);
                    c.queued += 1;
                }
                Recall::Queued(t) | Recall::Sent(t) | Recall::Answered(t) => {
                    if now.saturating_sub(t) > lease {
                        late.push(*other);
                        continue;
                    }
                }
            }
            c.outstanding += 1;
        }
        c.revoked = late.len();
        for other in late {
            self.revoke(&other);
        }
        c
    }

    /// Marks a delegation revoked, and its holder as holding a revoked one.
    fn revoke(&mut self, other: &[u8; 12]) {
        let Some(d) = self.delegs.get_mut(other) else {
            return;
        };
        if d.recall == Recall::Revoked {
            return;
        }
        d.recall = Recall::Revoked;
        if let Some(c) = self.clients.get_mut(&d.client) {
            c.revoked += 1;
        }
    }

    /// Removes a delegation (returned or freed), keeping its holder's count of revoked
    /// ones.
    fn remove_delegation(&mut self, other: &[u8; 12]) {
        if let Some(d) = self.delegs.remove(other) {
            if d.recall == Recall::Revoked {
                if let Some(c) = self.clients.get_mut(&d.client) {
                    c.revoked = c.revoked.saturating_sub(1);
                }
            }
        }
    }

    /// The next queued recall for `client`, marked sent.
    pub fn next_recall(&mut self, client: u64) -> Option<RecallOrder> {
        let (other, d) = self
            .delegs
            .iter_mut()
            .find(|(_, d)| d.client == client && matches!(d.recall, Recall::Queued(_)))?;
        if let Recall::Queued(t) = d.recall {
            d.recall = Recall::Sent(t);
        }
        Some(RecallOrder {
            stateid: Stateid4 {
                seqid: d.seqid,
                other: *other,
            },
            file: d.file,
        })
    }

    /// The CB_RECALL of `other` was answered: success (the client will return it) or
    /// not (it does not hold it, or the callback path failed: revoked). True when this
    /// revoked it (it was neither returned nor revoked before).
    pub fn recall_answered(&mut self, other: &[u8; 12], ok: bool) -> bool {
        let Some(d) = self.delegs.get_mut(other) else {
            return false;
        };
        match (d.recall, ok) {
            (Recall::Sent(t), true) => d.recall = Recall::Answered(t),
            (Recall::Revoked, _) | (_, true) => {}
            (_, false) => {
                self.revoke(other);
                return true;
            }
        }
        false
    }

    /// The delegation a stateid of `client` names, or why not: `None` when `s` names
    /// no delegation of this server instance at all (it may be an open stateid).
    pub fn find_delegation(
        &self,
        client: u64,
        s: &Stateid4,
    ) -> Option<Result<&Delegation, Nfsstat4>> {
        let d = self.delegs.get(&s.other)?;
        Some(if d.client != client {
            Err(Nfsstat4::BAD_STATEID)
        } else if d.recall == Recall::Revoked {
            Err(Nfsstat4::DELEG_REVOKED)
        } else if s.seqid != 0 && s.seqid != d.seqid {
            Err(if s.seqid < d.seqid {
                Nfsstat4::OLD_STATEID
            } else {
                Nfsstat4::BAD_STATEID
            })
        } else {
            Ok(d)
        })
    }

    /// DELEGRETURN (RFC 8881 §18.6) of `s` on the current file `file`.
    pub fn delegreturn(
        &mut self,
        client: u64,
        s: &Stateid4,
        file: FileKey,
    ) -> Result<(), Nfsstat4> {
        match self.find_delegation(client, s) {
            None => Err(if s.other[..4] != self.boot.to_be_bytes() {
                Nfsstat4::STALE_STATEID
            } else {
                Nfsstat4::BAD_STATEID
            }),
            Some(Err(Nfsstat4::DELEG_REVOKED)) => {
                // Returned all the same: the client knows now; nothing left to free.
                self.remove_delegation(&s.other);
                Err(Nfsstat4::DELEG_REVOKED)
            }
            Some(Err(e)) => Err(e),
            Some(Ok(d)) if d.file != file => Err(Nfsstat4::BAD_STATEID),
            Some(Ok(_)) => {
                self.remove_delegation(&s.other);
                Ok(())
            }
        }
    }

    /// FREE_STATEID of a delegation stateid: only a revoked one can be freed.
    pub fn free_delegation(&mut self, client: u64, s: &Stateid4) -> Option<Result<(), Nfsstat4>> {
        let d = self.delegs.get(&s.other)?;
        Some(if d.client != client {
            Err(Nfsstat4::BAD_STATEID)
        } else if d.recall == Recall::Revoked {
            self.remove_delegation(&s.other);
            Ok(())
        } else {
            Err(Nfsstat4::LOCKS_HELD)
        })
    }

    /// SEQUENCE's status flags for `client` (a count kept per client: no scan).
    pub fn status_flags(&self, client: u64) -> u32 {
        let revoked = self.clients.get(&client).is_some_and(|c| c.revoked > 0);
        if revoked {
            SEQ4_STATUS_RECALLABLE_STATE_REVOKED
        } else {
            0
        }
    }

    /// Records that `client`'s backchannel answered CB_NULL: delegations may be given.
    pub fn callback_up(&mut self, client: u64) {
        if let Some(c) = self.clients.get_mut(&client) {
            c.cb_up = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::state::{StateLimits, StateTable, ACCESS_READ};
    use super::*;

    const F: FileKey = FileKey { id: 5, gen: 1 };

    /// Two confirmed clients, 1 with its backchannel proven, 2 without.
    fn table() -> (StateTable, u64, u64) {
        let mut t = StateTable::new(StateLimits::default(), 9);
        let (a, ..) = t.exchange_id(b"a", [1; 8], 0).unwrap();
        let (b, ..) = t.exchange_id(b"b", [2; 8], 0).unwrap();
        t.callback_up(a);
        (t, a, b)
    }

    #[test]
    fn granted_only_where_nothing_stands_in_the_way() {
        let (mut t, a, b) = table();
        // No proven backchannel, writing, or a wish for none: no delegation.
        assert_eq!(t.grant_read_delegation(b, F, ACCESS_READ, 0), None);
        assert_eq!(
            t.grant_read_delegation(a, F, ACCESS_READ | ACCESS_WRITE, 0),
            None
        );
        assert_eq!(t.grant_read_delegation(a, F, ACCESS_READ, 0x0400), None);
        assert_eq!(t.grant_read_delegation(a, F, ACCESS_READ, 0x0200), None);
        // Another client has it open for writing: none.
        t.open(b, b"o", F, ACCESS_WRITE, 0).unwrap();
        assert_eq!(t.grant_read_delegation(a, F, ACCESS_READ, 0), None);
        t.opens.clear();
        let s = t
            .grant_read_delegation(a, F, ACCESS_READ, WANT_READ_DELEG)
            .unwrap();
        assert_eq!(s.seqid, 1);
        // One per client and file.
        assert_eq!(t.grant_read_delegation(a, F, ACCESS_READ, 0), None);
        assert!(t.find_delegation(a, &s).unwrap().is_ok());
        assert_eq!(
            t.find_delegation(b, &s).unwrap().err(),
            Some(Nfsstat4::BAD_STATEID)
        );
    }

    #[test]
    fn a_recall_not_honoured_within_a_lease_revokes() {
        let (mut t, a, b) = table();
        let s = t.grant_read_delegation(a, F, ACCESS_READ, 0).unwrap();
        // The holder's own change conflicts with nothing.
        assert_eq!(t.conflict(Some(a), F, 0), Conflict::default());
        // Another client's: queued once, outstanding until returned or revoked.
        let queued = Conflict {
            outstanding: 1,
            queued: 1,
            revoked: 0,
        };
        assert_eq!(t.conflict(Some(b), F, 10), queued);
        assert_eq!(t.conflict(None, F, 11).queued, 0);
        assert_eq!(t.next_recall(b), None);
        let order = t.next_recall(a).unwrap();
        assert_eq!((order.stateid, order.file), (s, F));
        assert_eq!(t.next_recall(a), None, "sent once");
        assert!(!t.recall_answered(&s.other, true));
        assert_eq!(
            t.conflict(Some(b), F, 100).outstanding,
            1,
            "90 s lease not over"
        );
        let c = t.conflict(Some(b), F, 101);
        assert_eq!((c.outstanding, c.revoked), (0, 1));
        // Revoked: its stateid says so, SEQUENCE flags it, DELEGRETURN is refused.
        assert_eq!(
            t.find_delegation(a, &s).unwrap().err(),
            Some(Nfsstat4::DELEG_REVOKED)
        );
        assert_eq!(t.status_flags(a), SEQ4_STATUS_RECALLABLE_STATE_REVOKED);
        assert_eq!(t.status_flags(b), 0);
        assert_eq!(t.free_delegation(b, &s), Some(Err(Nfsstat4::BAD_STATEID)));
        assert_eq!(t.free_delegation(a, &s), Some(Ok(())));
        assert_eq!(t.status_flags(a), 0);
        assert_eq!(t.free_delegation(a, &s), None);
    }

    #[test]
    fn a_failed_recall_revokes_at_once_and_returns_are_checked() {
        let (mut t, a, b) = table();
        let s = t.grant_read_delegation(a, F, ACCESS_READ, 0).unwrap();
        // A live delegation cannot be freed, only returned.
        assert_eq!(t.free_delegation(a, &s), Some(Err(Nfsstat4::LOCKS_HELD)));
        t.conflict(Some(b), F, 0);
        t.next_recall(a).unwrap();
        assert!(t.recall_answered(&s.other, false));
        assert!(!t.recall_answered(&s.other, false));
        assert_eq!(t.clients[&a].revoked, 1, "revoked once");
        assert_eq!(t.status_flags(a), SEQ4_STATUS_RECALLABLE_STATE_REVOKED);
        assert_eq!(t.conflict(Some(b), F, 1).outstanding, 0);
        assert_eq!(t.delegreturn(a, &s, F), Err(Nfsstat4::DELEG_REVOKED));
        assert_eq!(t.status_flags(a), 0);
        assert_eq!(
            t.delegreturn(a, &s, F),
            Err(Nfsstat4::BAD_STATEID),
            "dropped"
        );
        // Returns of another file, an old seqid, another instance, another client.
        let g = FileKey { id: 6, gen: 1 };
        let s = t.grant_read_delegation(a, g, ACCESS_READ, 0).unwrap();
        assert_eq!(t.delegreturn(a, &s, F), Err(Nfsstat4::BAD_STATEID));
        let newer = Stateid4 { seqid: 2, ..s };
        assert_eq!(t.delegreturn(a, &newer, g), Err(Nfsstat4::BAD_STATEID));
        let mut foreign = s;
        foreign.other[0] ^= 1;
        assert_eq!(t.delegreturn(a, &foreign, g), Err(Nfsstat4::STALE_STATEID));
        assert_eq!(t.delegreturn(b, &s, g), Err(Nfsstat4::BAD_STATEID));
        assert_eq!(t.delegreturn(a, &Stateid4 { seqid: 0, ..s }, g), Ok(()));
        // A client that goes takes its delegations with it.
        t.grant_read_delegation(a, g, ACCESS_READ, 0).unwrap();
        t.drop_client(a);
        assert!(t.delegs.is_empty());
    }
}
