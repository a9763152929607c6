//! NFSv4.1 server state (RFC 8881 §2.4, §2.10, §8, §9): client records, sessions with
//! their slot tables and per-slot reply caches, and open states. Everything is bounded
//! by [`StateLimits`]; a full table is a typed error, never growth. Time is passed in
//! (seconds of a monotonic clock), so leases expire under test control.

use std::collections::HashMap;

use super::super::backend::FileKey;
use super::deleg::Delegation;
use crate::nfs::v41::{ChannelAttrs4, Nfsstat4, SessionId, Stateid4, Verifier};

/// Bounds of the state tables and what CREATE_SESSION grants at most.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateLimits {
    /// Client records (confirmed or not).
    pub clients: usize,
    /// Sessions per client.
    pub sessions_per_client: usize,
    /// Slots per session (`ca_maxrequests`).
    pub slots: u32,
    /// Operations per COMPOUND (`ca_maxoperations`).
    pub max_ops: u32,
    /// Largest request (`ca_maxrequestsize`).
    pub max_request: u32,
    /// Largest reply (`ca_maxresponsesize`).
    pub max_response: u32,
    /// Largest cached reply (`ca_maxresponsesize_cached`).
    pub max_cached: u32,
    /// Open states over all clients.
    pub opens: usize,
    /// Lease time in seconds.
    pub lease_secs: u32,
}

impl Default for StateLimits {
    fn default() -> Self {
        StateLimits {
            clients: 1024,
            sessions_per_client: 4,
            slots: 64,
            max_ops: 32,
            max_request: 1024 * 1024 + 8192,
            max_response: 1024 * 1024 + 8192,
            max_cached: 8192,
            opens: 65_536,
            lease_secs: 90,
        }
    }
}

/// What a slot remembers of its last request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotReply {
    /// Nothing yet (the slot's sequence id is 0).
    Unused,
    /// The request is running.
    InProgress,
    /// The complete COMPOUND4res of the last request is in [`Slot::cache`], for a retry
    /// to replay.
    Cached,
    /// The last reply was not cached (too large, or its data went to Write chunks).
    Uncached,
}

/// One slot of a session's fore channel.
#[derive(Debug, Clone)]
pub struct Slot {
    /// Sequence id of the last request seen on the slot.
    pub seqid: u32,
    /// Its reply.
    pub reply: SlotReply,
    /// The cached reply's octets when [`reply`](Self::reply) is `Cached`. The buffer is
    /// kept across requests, so a slot allocates only while it grows to its largest
    /// cached reply (bounded by `ca_maxresponsesize_cached`).
    pub cache: Vec<u8>,
}

/// A session.
#[derive(Debug, Clone)]
pub struct Session {
    /// Owning client id.
    pub client: u64,
    /// Fore channel attributes granted.
    pub fore: ChannelAttrs4,
    /// Back channel attributes as the client asked (recorded for the backchannel).
    pub back: ChannelAttrs4,
    /// `csa_cb_program`: the program of backchannel calls.
    pub cb_program: u32,
    /// `csr_flags` granted.
    pub flags: u32,
    /// The slot table.
    pub slots: Vec<Slot>,
}

/// A client record (EXCHANGE_ID).
#[derive(Debug, Clone)]
pub struct Client {
    /// `co_ownerid`.
    pub owner: Vec<u8>,
    /// `co_verifier`: changes when the client restarts.
    pub verifier: Verifier,
    /// Whether a CREATE_SESSION confirmed it.
    pub confirmed: bool,
    /// The `csa_sequence` the next CREATE_SESSION must carry.
    pub cs_seq: u32,
    /// The last CREATE_SESSION's result, for its retry (RFC 8881 §18.36.4).
    pub cs_cached: Option<(SessionId, ChannelAttrs4, u32)>,
    /// When the lease was last renewed (seconds).
    pub renewed: u64,
    /// RECLAIM_COMPLETE (global) was done.
    pub reclaim_complete: bool,
    /// Its backchannel answered CB_NULL: it can be called back, so it may be given
    /// delegations.
    pub cb_up: bool,
    /// Delegations of its that were revoked and not yet freed (SEQUENCE flags them).
    pub revoked: u32,
}

/// An open state: one per client, open-owner and file.
#[derive(Debug, Clone)]
pub struct OpenState {
    /// Owning client id.
    pub client: u64,
    /// The open-owner (bounded by the codec's opaque limit).
    pub owner: Vec<u8>,
    /// The file.
    pub file: FileKey,
    /// Current `seqid` of the stateid.
    pub seqid: u32,
    /// OPEN4_SHARE_ACCESS_* held.
    pub access: u32,
    /// OPEN4_SHARE_DENY_* held.
    pub deny: u32,
}

/// Share access bits.
pub const ACCESS_READ: u32 = 1;
/// Share access WRITE.
pub const ACCESS_WRITE: u32 = 2;

/// All NFSv4.1 state of a server.
#[derive(Debug)]
pub struct StateTable {
    /// The limits.
    pub limits: StateLimits,
    /// This server instance: part of every client id, session id and stateid, so that
    /// those of an earlier instance are recognised as stale.
    pub boot: u32,
    counter: u64,
    /// Clients by id.
    pub clients: HashMap<u64, Client>,
    /// Sessions by id.
    pub sessions: HashMap<SessionId, Session>,
    /// Open states by stateid `other`.
    pub opens: HashMap<[u8; 12], OpenState>,
    /// Read delegations by stateid `other` ([`super::deleg`]).
    pub delegs: HashMap<[u8; 12], Delegation>,
}

/// How a stateid checks out ([`StateTable::check_stateid`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateidUse {
    /// Reading.
    Read,
    /// Writing (needs write access).
    Write,
}

impl StateTable {
    /// Empty tables under `limits`; `boot` tells this instance apart from earlier ones.
    pub fn new(limits: StateLimits, boot: u32) -> StateTable {
        StateTable {
            limits,
            boot,
            counter: 0,
            clients: HashMap::new(),
            sessions: HashMap::new(),
            opens: HashMap::new(),
            delegs: HashMap::new(),
        }
    }

    fn next(&mut self) -> u64 {
        self.counter += 1;
        self.counter
    }

    fn expired(&self, c: &Client, now: u64) -> bool {
        now.saturating_sub(c.renewed) > u64::from(self.limits.lease_secs)
    }

    /// Drops clients whose lease ran out, with their sessions and opens.
    pub fn expire(&mut self, now: u64) {
        let dead: Vec<u64> = self
            .clients
            .iter()
            .filter(|(_, c)| self.expired(c, now))
            .map(|(&id, _)| id)
            .collect();
        for id in dead {
            self.drop_client(id);
        }
    }

    /// Removes a client and everything it holds.
    pub fn drop_client(&mut self, id: u64) {
        self.clients.remove(&id);
        self.sessions.retain(|_, s| s.client != id);
        self.opens.retain(|_, o| o.client != id);
        self.delegs.retain(|_, d| d.client != id);
    }

    /// EXCHANGE_ID (RFC 8881 §18.35.5, without state protection or trunking): returns
    /// the client id, the sequence id for CREATE_SESSION, and whether it is confirmed.
    pub fn exchange_id(
        &mut self,
        owner: &[u8],
        verifier: Verifier,
        now: u64,
    ) -> Result<(u64, u32, bool), Nfsstat4> {
        let found = self
            .clients
            .iter()
            .find(|(_, c)| c.owner == owner)
            .map(|(&id, c)| (id, c.verifier == verifier));
        match found {
            Some((id, true)) => {
                let c = self.clients.get_mut(&id).ok_or(Nfsstat4::SERVERFAULT)?;
                c.renewed = now;
                return Ok((id, c.cs_seq, c.confirmed));
            }
            // The client restarted: its old state goes (it cannot reclaim here, as this
            // server keeps no state across its own restarts either).
            Some((id, false)) => self.drop_client(id),
            None => {}
        }
        if self.clients.len() >= self.limits.clients {
            self.expire(now);
            if self.clients.len() >= self.limits.clients {
                return Err(Nfsstat4::SERVERFAULT);
            }
        }
        let id = (u64::from(self.boot) << 32) | (self.next() & 0xffff_ffff);
        self.clients.insert(
            id,
            Client {
                owner: owner.to_vec(),
                verifier,
                confirmed: false,
                cs_seq: 1,
                cs_cached: None,
                renewed: now,
                reclaim_complete: false,
                cb_up: false,
                revoked: 0,
            },
        );
        Ok((id, 1, false))
    }

    /// Negotiates fore channel attributes down to the server's limits.
    pub fn negotiate_fore(&self, want: &ChannelAttrs4) -> ChannelAttrs4 {
        let l = &self.limits;
        ChannelAttrs4 {
            headerpadsize: 0,
            maxrequestsize: want.maxrequestsize.min(l.max_request),
            maxresponsesize: want.maxresponsesize.min(l.max_response),
            maxresponsesize_cached: want.maxresponsesize_cached.min(l.max_cached),
            maxoperations: want.maxoperations.clamp(1, l.max_ops),
            maxrequests: want.maxrequests.clamp(1, l.slots),
            rdma_ird: None,
        }
    }

    /// CREATE_SESSION (RFC 8881 §18.36.4): a new session for `clientid`, or the cached
    /// result of a retry. Returns the session id, the fore channel granted and flags.
    #[allow(clippy::too_many_arguments)]
    pub fn create_session(
        &mut self,
        clientid: u64,
        sequence: u32,
        flags: u32,
        fore: &ChannelAttrs4,
        back: &ChannelAttrs4,
        cb_program: u32,
        now: u64,
    ) -> Result<(SessionId, ChannelAttrs4, u32), Nfsstat4> {
        let granted = self.negotiate_fore(fore);
        let boot = self.boot;
        let per_client = self.limits.sessions_per_client;
        let open_sessions = self
            .sessions
            .values()
            .filter(|s| s.client == clientid)
            .count();
        let n = self.next();
        let expired = match self.clients.get(&clientid) {
            Some(c) => self.expired(c, now),
            None => return Err(Nfsstat4::STALE_CLIENTID),
        };
        if expired {
            self.drop_client(clientid);
            return Err(Nfsstat4::STALE_CLIENTID);
        }
        let c = self
            .clients
            .get_mut(&clientid)
            .ok_or(Nfsstat4::STALE_CLIENTID)?;
        if sequence == c.cs_seq.wrapping_sub(1) {
            if let Some(cached) = c.cs_cached {
                return Ok(cached);
            }
        }
        if sequence != c.cs_seq {
            return Err(Nfsstat4::SEQ_MISORDERED);
        }
        if open_sessions >= per_client {
            return Err(Nfsstat4::NOSPC);
        }
        // Only CONN_BACK_CHAN (0x2) is granted: no persistent reply caches (0x1), and
        // RDMA mode (0x4) is not asked of an RPC-over-RDMA connection.
        let flags = flags & 0x2;
        let mut id: SessionId = [0; 16];
        id[..8].copy_from_slice(&clientid.to_be_bytes());
        id[8..12].copy_from_slice(&boot.to_be_bytes());
        id[12..].copy_from_slice(&(n as u32).to_be_bytes());
        c.confirmed = true;
        c.renewed = now;
        c.cs_seq = c.cs_seq.wrapping_add(1);
        c.cs_cached = Some((id, granted, flags));
        let slots = (0..granted.maxrequests)
            .map(|_| Slot {
                seqid: 0,
                reply: SlotReply::Unused,
                cache: Vec::new(),
            })
            .collect();
        let back = ChannelAttrs4 {
            maxrequests: back.maxrequests.clamp(1, 16),
            ..*back
        };
        self.sessions.insert(
            id,
            Session {
                client: clientid,
                fore: granted,
                back,
                cb_program,
                flags,
                slots,
            },
        );
        Ok((id, granted, flags))
    }

    /// DESTROY_CLIENTID (RFC 8881 §18.50).
    pub fn destroy_clientid(&mut self, id: u64) -> Result<(), Nfsstat4> {
        if !self.clients.contains_key(&id) {
            return Err(Nfsstat4::STALE_CLIENTID);
        }
        if self.sessions.values().any(|s| s.client == id) {
            return Err(Nfsstat4::CLIENTID_BUSY);
        }
        self.drop_client(id);
        Ok(())
    }

    /// A new stateid `other` for an open state or a delegation.
    pub(super) fn new_other(&mut self) -> [u8; 12] {
        let mut o = [0u8; 12];
        o[..4].copy_from_slice(&self.boot.to_be_bytes());
        o[4..].copy_from_slice(&self.next().to_be_bytes());
        o
    }

    /// OPEN's share reservation and open state (RFC 8881 §9.7, §18.16): the open of
    /// `owner` on `file` is created or upgraded. Returns its stateid.
    pub fn open(
        &mut self,
        client: u64,
        owner: &[u8],
        file: FileKey,
        access: u32,
        deny: u32,
    ) -> Result<Stateid4, Nfsstat4> {
        let mut mine = None;
        for (other, o) in &self.opens {
            if o.file != file {
                continue;
            }
            if o.client == client && o.owner == owner {
                mine = Some(*other);
                continue;
            }
            if access & o.deny != 0 || deny & o.access != 0 {
                return Err(Nfsstat4::SHARE_DENIED);
            }
        }
        if let Some(other) = mine {
            let o = self.opens.get_mut(&other).ok_or(Nfsstat4::SERVERFAULT)?;
            o.access |= access;
            o.deny |= deny;
            o.seqid = o.seqid.wrapping_add(1).max(1);
            return Ok(Stateid4 {
                seqid: o.seqid,
                other,
            });
        }
        if self.opens.len() >= self.limits.opens {
            return Err(Nfsstat4::SERVERFAULT);
        }
        let other = self.new_other();
        self.opens.insert(
            other,
            OpenState {
                client,
                owner: owner.to_vec(),
                file,
                seqid: 1,
                access,
                deny,
            },
        );
        Ok(Stateid4 { seqid: 1, other })
    }

    /// Finds the open state a client's stateid names, checking its sequence id (0: the
    /// current one, RFC 8881 §8.2.2) and owner.
    pub fn find_open(&self, client: u64, s: &Stateid4) -> Result<&OpenState, Nfsstat4> {
        let Some(o) = self.opens.get(&s.other) else {
            return Err(if s.other[..4] != self.boot.to_be_bytes() {
                Nfsstat4::STALE_STATEID
            } else {
                Nfsstat4::BAD_STATEID
            });
        };
        if o.client != client {
            return Err(Nfsstat4::BAD_STATEID);
        }
        if s.seqid != 0 && s.seqid != o.seqid {
            return Err(if s.seqid < o.seqid {
                Nfsstat4::OLD_STATEID
            } else {
                Nfsstat4::BAD_STATEID
            });
        }
        Ok(o)
    }

    /// Checks a stateid for READ, WRITE or SETATTR of `file` (RFC 8881 §8.2.3): the
    /// anonymous and READ-bypass special stateids pass (a server without mandatory
    /// locks or deny reservations in the way lets them); an open stateid must be
    /// current, the caller's, for this file, and allow the use.
    pub fn check_stateid(
        &self,
        client: u64,
        s: &Stateid4,
        file: FileKey,
        use_: StateidUse,
    ) -> Result<(), Nfsstat4> {
        let anonymous = s.seqid == 0 && s.other == [0; 12];
        let bypass = s.seqid == u32::MAX && s.other == [0xff; 12];
        if anonymous || bypass {
            // Anyone else's deny reservation still applies.
            let want = match use_ {
                StateidUse::Read => ACCESS_READ,
                StateidUse::Write => ACCESS_WRITE,
            };
            if !bypass || use_ == StateidUse::Write {
                let denied = self
                    .opens
                    .values()
                    .any(|o| o.file == file && o.deny & want != 0);
                if denied {
                    return Err(Nfsstat4::LOCKED);
                }
            }
            return Ok(());
        }
        // A read delegation's stateid serves READ of its file (RFC 8881 §8.2.2); a
        // write with it exceeds what it grants.
        if let Some(d) = self.find_delegation(client, s) {
            let d = d?;
            if d.file != file {
                return Err(Nfsstat4::BAD_STATEID);
            }
            if use_ == StateidUse::Write {
                return Err(Nfsstat4::OPENMODE);
            }
            return Ok(());
        }
        let o = self.find_open(client, s)?;
        if o.file != file {
            return Err(Nfsstat4::BAD_STATEID);
        }
        if use_ == StateidUse::Write && o.access & ACCESS_WRITE == 0 {
            return Err(Nfsstat4::OPENMODE);
        }
        Ok(())
    }

    /// CLOSE: ends the open state.
    pub fn close(&mut self, client: u64, s: &Stateid4, file: FileKey) -> Result<(), Nfsstat4> {
        let o = self.find_open(client, s)?;
        if o.file != file {
            return Err(Nfsstat4::BAD_STATEID);
        }
        self.opens.remove(&s.other);
        Ok(())
    }

    /// OPEN_DOWNGRADE (RFC 8881 §18.18): access and deny become subsets of what is held.
    pub fn downgrade(
        &mut self,
        client: u64,
        s: &Stateid4,
        file: FileKey,
        access: u32,
        deny: u32,
    ) -> Result<Stateid4, Nfsstat4> {
        let o = self.find_open(client, s)?;
        if o.file != file {
            return Err(Nfsstat4::BAD_STATEID);
        }
        if access == 0 || access & !o.access != 0 || deny & !o.deny != 0 {
            return Err(Nfsstat4::INVAL);
        }
        let o = self.opens.get_mut(&s.other).ok_or(Nfsstat4::BAD_STATEID)?;
        o.access = access;
        o.deny = deny;
        o.seqid = o.seqid.wrapping_add(1).max(1);
        Ok(Stateid4 {
            seqid: o.seqid,
            other: s.other,
        })
    }
}
