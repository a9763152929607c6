//! Starting a call: choosing its shape (RFC 8166 §3.5), registering its chunks and
//! staging its work requests.

use crate::core::transport::{Transport, COPY_BEHIND_HEADER_MAX};
use std::time::Instant;

use super::slot::{MrState, MrUse, SlotState};
use super::RequesterHalf;
use crate::core::config::{RegMode, MAX_MRS_PER_CALL};
use crate::core::fixed::FixedVec;
use crate::core::regbuf::RegBuf;
use crate::core::wrid::{WrId, WrKind};
use crate::fabric::{Access, SendOp, Sge};
use crate::requester::{CallRequest, Resend, SubmitRefusal, MAX_DDP_ARGS, MAX_WRITE_SINKS};
use crate::wire::header::{
    encode_plain_msg, BodyRepr, ChunkListsRepr, HeaderRepr, ReadSegment, Segment, FIXED_HEADER_LEN,
    READ_LIST_ENTRY_LEN, SEGMENT_LEN, WORD_LEN,
};
use crate::wire::private_data::InlineThresholds;
use crate::wire::xdr::pad4;

/// The shape of a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Plan {
    /// The message goes in a Position-Zero Read chunk (RDMA_NOMSG).
    pub(super) long: bool,
    /// A Reply chunk is offered.
    pub(super) reply_chunk: bool,
    /// Memory registrations needed.
    pub(super) mrs: u32,
    /// The DDP arguments travel inline, padded, in RDMA_MSGP (RFC 5666 §3.9): the
    /// peer's `rdma_align` and the `rdma_thresh` (the shortest argument's length).
    pub(super) msgp: Option<Padded>,
}

/// RDMA_MSGP parameters of a call whose DDP arguments go inline, padded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Padded {
    /// `rdma_align`: the peer's receive-buffer alignment (a power of two).
    pub(super) align: u32,
    /// `rdma_thresh`: the shortest DDP argument; every argument is at least this long.
    pub(super) thresh: u32,
}

/// Octets of the RDMA_MSGP message (transport header of `hlen` octets, the RPC message
/// with the DDP arguments put back at their positions, each preceded by the padding that
/// starts its data `align`-aligned in the receive buffer and followed by its XDR
/// roundup), or `None` when a position does not fit the message. With `out`, the message
/// is also written there after the header (which the caller wrote); `None` too when
/// `out` is too short.
fn compose_msgp(
    req: &CallRequest,
    align: usize,
    hlen: usize,
    mut out: Option<&mut [u8]>,
) -> Option<usize> {
    let msg = req.msg.as_slice();
    let (mut at, mut m, mut moved) = (hlen, 0usize, 0usize);
    let mut put = |at: usize, src: Option<&[u8]>, len: usize| -> Option<()> {
        if let Some(o) = out.as_deref_mut() {
            let dst = o.get_mut(at..at.checked_add(len)?)?;
            match src {
                Some(b) => dst.copy_from_slice(b),
                None => dst.fill(0),
            }
        }
        Some(())
    };
    for a in req.ddp_args.iter().filter(|a| !a.data.is_empty()) {
        // Positions count the arguments before this one (with roundup); the message
        // does not hold them.
        let off = (a.position as usize).checked_sub(moved)?;
        let before = msg.get(m..off)?;
        put(at, Some(before), before.len())?;
        at += before.len();
        let pad = (align - at % align) % align;
        put(at, None, pad)?;
        at += pad;
        let data = a.data.as_slice();
        put(at, Some(data), data.len())?;
        at += data.len();
        let roundup = pad4(data.len()) - data.len();
        put(at, None, roundup)?;
        at += roundup;
        moved += pad4(data.len());
        m = off;
    }
    let rest = msg.get(m..)?;
    put(at, Some(rest), rest.len())?;
    Some(at + rest.len())
}

/// Octets of a Write list of `sinks` one-segment chunks.
fn write_list_len(sinks: usize) -> usize {
    WORD_LEN + sinks * (WORD_LEN + WORD_LEN + SEGMENT_LEN)
}

/// RDMA_MSGP parameters for `req` when its DDP arguments fit the send threshold inline
/// with their padding (a header of `hlen` octets before them). Out of line: only calls
/// that allow padding, to a peer whose alignment is known, come here.
#[cold]
#[inline(never)]
fn plan_msgp(req: &CallRequest, th: &InlineThresholds, align: u32, hlen: usize) -> Option<Padded> {
    let len = compose_msgp(req, align as usize, hlen, None)?;
    let thresh = req
        .ddp_args
        .iter()
        .map(|a| a.data.len())
        .filter(|&l| l > 0)
        .min()
        .and_then(|l| u32::try_from(l).ok())?;
    (len <= th.send as usize).then_some(Padded { align, thresh })
}

/// Chooses the call's shape against the negotiated thresholds.
///
/// - A Reply chunk is offered when the largest reply plus its largest inline transport
///   header (the Write list echoed back, no Reply chunk) exceeds what we can receive
///   inline (RFC 8166 §3.5.4).
/// - The message goes in a Position-Zero Read chunk when header plus message exceed
///   what the responder receives inline (RFC 8166 §3.5.3).
///
/// A call with more DDP Read chunks or more Write chunks than `max_chunks` (the
/// connection's `ConnConfig::max_chunks`) is refused here: a responder configured
/// alike answers it with ERR_CHUNK, which would cost a round trip and a credit.
/// Empty DDP arguments are not counted, since they travel as no chunk at all.
/// `read_chunk_replies`: the peer provides Read chunks for replies and the policy is to
/// rely on them, so no Reply chunk is offered.
///
/// `peer_align`: the peer's receive-buffer alignment, when known (RFC 5666 §6's CONF_RDMA
/// results): a call whose upper layer allows it ([`CallRequest::pad_inline_ddp`]) and
/// whose DDP arguments fit inline with their padding goes as RDMA_MSGP, saving the
/// peer an RDMA Read round trip per argument (RFC 5666 §3.9).
#[inline]
pub(super) fn plan(
    req: &CallRequest,
    th: &InlineThresholds,
    max_chunks: usize,
    read_chunk_replies: bool,
    peer_align: Option<u32>,
) -> Result<Plan, SubmitRefusal> {
    let args = req.ddp_args.iter().filter(|a| !a.data.is_empty()).count();
    let sinks = req.write_sinks.len();
    if args > max_chunks || sinks > max_chunks {
        return Err(SubmitRefusal::TooManyChunks);
    }
    let writes = write_list_len(sinks);
    let max_reply_header = FIXED_HEADER_LEN + WORD_LEN + writes + WORD_LEN;
    let reply_chunk =
        !read_chunk_replies && req.max_reply_len as usize + max_reply_header > th.recv as usize;
    let reply = if reply_chunk {
        2 * WORD_LEN + SEGMENT_LEN
    } else {
        WORD_LEN
    };
    let header =
        |reads: usize| FIXED_HEADER_LEN + reads * READ_LIST_ENTRY_LEN + WORD_LEN + writes + reply;
    if let (Some(align), true, true) = (peer_align, req.pad_inline_ddp, args > 0) {
        // `rdma_align` and `rdma_thresh` come before the lists.
        if let Some(msgp) = plan_msgp(req, th, align, header(0) + 2 * WORD_LEN) {
            return Ok(Plan {
                long: false,
                reply_chunk,
                mrs: sinks as u32 + u32::from(reply_chunk),
                msgp: Some(msgp),
            });
        }
    }
    let long = header(args) + req.msg.len() > th.send as usize;
    if long && header(args + 1) > th.send as usize {
        return Err(SubmitRefusal::HeaderTooLarge);
    }
    Ok(Plan {
        long,
        reply_chunk,
        mrs: u32::from(long) + args as u32 + sinks as u32 + u32::from(reply_chunk),
        msgp: None,
    })
}

/// A registration to make: the region and what the peer may do with it. `rkey` is the
/// buffer's persistent remote key (used in persistent mode only).
#[derive(Clone, Copy)]
struct Reg {
    region: Sge,
    access: Access,
    rkey: Option<u32>,
}

impl RequesterHalf {
    /// Registers the chunks of `req` and stages its work requests on `slot`, in the
    /// shape `plan` (from [`plan`] for this request and the connection's thresholds,
    /// computed once by the caller). True when staged: the caller then hands the
    /// request's buffers to the slot (`adopt!`). False on any shortage:
    /// nothing is staged and the request stays the caller's. The request is borrowed,
    /// not moved, so the few hundred octets of it are copied once (into the slot's
    /// fields by `adopt!`) rather than at every call on the way.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn stage_call(
        &mut self,
        t: &mut Transport,
        slot: u32,
        xid: u32,
        plan: Plan,
        req: &mut CallRequest,
        tag: u64,
        deadline: Option<Instant>,
        now: Instant,
    ) -> bool {
        let sq_need = self.sq_need(&plan);
        if self.regs_short(&plan) || t.sq.free() < sq_need {
            return false;
        }
        let mut reply_buf = None;
        if plan.reply_chunk {
            match RegBuf::from_cache(&mut self.large) {
                Ok(b) => reply_buf = Some(b),
                Err(_) => return false,
            }
        }
        if let Some(x) = req.msg.storage_mut().get_mut(..4) {
            x.copy_from_slice(&xid.to_be_bytes());
        }
        if plan.mrs == 0 && !plan.long && plan.msgp.is_none() {
            return self.stage_plain(t, slot, xid, req, tag, deadline, now);
        }

        // What to register, in the order the chunks appear in the header.
        let mut regs: FixedVec<Reg, MAX_MRS_PER_CALL> = FixedVec::new();
        let mut reads = [ReadSegment::default(); 1 + MAX_DDP_ARGS];
        let mut n_reads = 0;
        let read_access = Access::REMOTE_READ;
        let write_access = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
        let sge_of = |b: &RegBuf, len: usize| b.sge(0, len).ok();
        let rkey_of = |b: &RegBuf| b.rkey().ok();
        let mut all_registered = true;
        if plan.long {
            let Some(region) = sge_of(&req.msg, req.msg.len()) else {
                return false;
            };
            let _ = regs.push(Reg {
                region,
                access: read_access,
                rkey: rkey_of(&req.msg),
            });
            reads[n_reads].position = 0;
            n_reads += 1;
        }
        for a in req.ddp_args.iter() {
            // Empty arguments travel as no chunk; under RDMA_MSGP none does.
            if a.data.is_empty() || plan.msgp.is_some() {
                continue;
            }
            let Some(region) = sge_of(&a.data, a.data.len()) else {
                all_registered = false;
                break;
            };
            let _ = regs.push(Reg {
                region,
                access: read_access,
                rkey: rkey_of(&a.data),
            });
            reads[n_reads].position = a.position;
            n_reads += 1;
        }
        let mut sink_caps = [0u32; MAX_WRITE_SINKS];
        for (i, s) in req.write_sinks.iter().enumerate() {
            let Some(region) = sge_of(s, s.capacity()) else {
                all_registered = false;
                break;
            };
            sink_caps[i] = region.length;
            let _ = regs.push(Reg {
                region,
                access: write_access,
                rkey: rkey_of(s),
            });
        }
        if !all_registered {
            return false;
        }
        let mut reply_cap = 0u32;
        if let Some(rb) = &reply_buf {
            let len = pad4(req.max_reply_len as usize).min(rb.capacity());
            let Some(region) = sge_of(rb, len) else {
                return false;
            };
            reply_cap = region.length;
            let _ = regs.push(Reg {
                region,
                access: write_access,
                rkey: rkey_of(rb),
            });
        }

        // Keys (fresh ones per chunk, or the pools' persistent ones), then the header
        // that advertises them.
        let mut uses: FixedVec<MrUse, MAX_MRS_PER_CALL> = FixedVec::new();
        let mut keys = [0u32; MAX_MRS_PER_CALL];
        for (i, r) in regs.iter().enumerate() {
            let key = match self.mode {
                RegMode::Persistent => match r.rkey {
                    Some(k) => k,
                    None => return false,
                },
                RegMode::FastReg => {
                    let Some((mr, key)) = self.mrs.take() else {
                        for u in uses.drain() {
                            self.mrs.give(u.mr);
                        }
                        return false;
                    };
                    let _ = uses.push(MrUse {
                        mr,
                        key,
                        state: MrState::Registered,
                    });
                    key
                }
            };
            if let Some(k) = keys.get_mut(i) {
                *k = key;
            }
        }
        let seg = |i: usize| match (regs.get(i), keys.get(i)) {
            (Some(r), Some(&k)) => Segment::new(k, r.region.length, r.region.addr),
            _ => Segment::default(),
        };
        for (i, r) in reads[..n_reads].iter_mut().enumerate() {
            r.segment = seg(i);
        }
        let mut write_segs = [[Segment::default(); 1]; MAX_WRITE_SINKS];
        for (i, w) in write_segs
            .iter_mut()
            .take(req.write_sinks.len())
            .enumerate()
        {
            w[0] = seg(n_reads + i);
        }
        let write_refs: [&[Segment]; MAX_WRITE_SINKS] =
            core::array::from_fn(|i| &write_segs[i][..]);
        let reply_seg = [seg(n_reads + req.write_sinks.len())];
        let lists = ChunkListsRepr {
            reads: &reads[..n_reads],
            writes: &write_refs[..req.write_sinks.len()],
            reply: reply_buf.as_ref().map(|_| &reply_seg[..]),
        };
        let repr = HeaderRepr {
            xid,
            credit: self.params.credits_requested,
            body: match (plan.long, plan.msgp) {
                (true, _) => BodyRepr::Nomsg(lists),
                (false, None) => BodyRepr::Msg(lists),
                (false, Some(p)) => BodyRepr::Msgp {
                    align: p.align,
                    thresh: p.thresh,
                    lists,
                },
            },
        };
        let s = &mut self.slots[slot as usize];
        // `encode` returns the octets written, which is the header's encoded length.
        // Under RDMA_MSGP the padded message is copied in behind it (it fits the send
        // threshold, hence the send buffer), and one gather entry carries both.
        let hdr_sge = repr.encode(s.header.storage_mut()).ok().and_then(|hlen| {
            let len = match plan.msgp {
                Some(p) => compose_msgp(req, p.align as usize, hlen, Some(s.header.storage_mut()))?,
                None => hlen,
            };
            s.header.sge(0, len).ok()
        });
        let Some(hdr_sge) = hdr_sge else {
            for u in uses.drain() {
                self.mrs.give(u.mr);
            }
            return false;
        };
        let mut sgl = [hdr_sge, Sge::default()];
        let mut n_sge = 1;
        if !plan.long && plan.msgp.is_none() {
            match req.msg.sge(0, req.msg.len()) {
                Ok(m) => {
                    sgl[1] = m;
                    n_sge = 2;
                }
                Err(_) => {
                    for u in uses.drain() {
                        self.mrs.give(u.mr);
                    }
                    return false;
                }
            }
        }
        if !t.sq.take(sq_need) {
            for u in uses.drain() {
                self.mrs.give(u.mr);
            }
            return false;
        }

        // One chain: the registrations (none in persistent mode, where `uses` is
        // empty), then the Send that advertises them.
        let mut staged = 0u32;
        for (i, (r, u)) in regs.iter().zip(uses.iter()).enumerate() {
            let wr_id = WrId::new(WrKind::FastReg, slot).with_aux(i as u32).encode();
            let op = SendOp::FastReg {
                key: u.key,
                region: r.region,
                access: r.access,
            };
            staged += u32::from(t.stage(wr_id, op, &[]));
        }
        let wr_id = WrId::new(WrKind::CallSend, slot).encode();
        staged += u32::from(t.stage(wr_id, SendOp::Send, &sgl[..n_sge]));
        // Room for what was not staged (never, see `Transport::stage`) goes back; the
        // rest of `sq_need` stays reserved for the LocalInvalidates.
        let invalidations = uses.len() as u32;
        t.sq.give((sq_need - invalidations).saturating_sub(staged));

        s.state = SlotState::Sent;
        s.xid = xid;
        s.tag = tag;
        s.mrs = uses;
        s.wrs = staged;
        s.reserved = invalidations;
        s.sink_caps = sink_caps;
        s.reply_cap = reply_cap;
        s.reply_buf = reply_buf;
        s.deadline = deadline;
        s.started = Some(now);
        s.resend = Resend::of(req);
        s.plain = false;
        self.stats.calls_sent += 1;
        self.stats.call_messages += 1;
        self.stats.long_calls += u64::from(plan.long);
        self.stats.padded_calls += u64::from(plan.msgp.is_some());
        self.stats.reply_chunks += u64::from(plan.reply_chunk);
        true
    }

    /// [`stage_call`](Self::stage_call) for the common shape: an inline RDMA_MSG with
    /// no chunks (and so no registrations, whatever the mode). Its transport header is
    /// seven words of which only the XID and the credit request vary, so it is written
    /// directly instead of going through the general encoder. The caller has checked
    /// send-queue room for `plan`; `req` has only empty DDP-argument and sink lists
    /// (`plan.mrs == 0`), or ones with empty arguments only.
    #[allow(clippy::too_many_arguments)]
    fn stage_plain(
        &mut self,
        t: &mut Transport,
        slot: u32,
        xid: u32,
        req: &CallRequest,
        tag: u64,
        deadline: Option<Instant>,
        now: Instant,
    ) -> bool {
        let msg = req.msg.as_slice();
        // A short message is copied behind its header, and the Send gathers one piece
        // instead of two: a copy of a few dozen octets costs less than a second gather
        // entry (another key lookup and copy on shm, a longer work request on a NIC).
        if msg.len() > COPY_BEHIND_HEADER_MAX || !self.stage_plain_msg(t, slot, xid, msg) {
            let s = &mut self.slots[slot as usize];
            let Some(hlen) =
                encode_plain_msg(s.header.storage_mut(), xid, self.params.credits_requested)
            else {
                return false;
            };
            let (Ok(hdr_sge), Ok(msg_sge)) = (s.header.sge(0, hlen), req.msg.sge(0, msg.len()))
            else {
                return false;
            };
            if !t.sq.take(1) {
                return false;
            }
            let wr_id = WrId::new(WrKind::CallSend, slot).encode();
            let staged = t.stage(wr_id, SendOp::Send, &[hdr_sge, msg_sge]);
            // Room for a Send that was not staged (never, see `Transport::stage`) goes
            // back.
            t.sq.give(u32::from(!staged));
            s.wrs = u32::from(staged);
        }
        let s = &mut self.slots[slot as usize];
        s.sent_without_chunks(xid, tag, s.wrs, deadline, now, Resend::of(req));
        // Its reply may take the plain path, unless it is the probe (whose answer is an
        // event) or has (empty) DDP arguments to hand back.
        s.plain = !s.is_probe && req.ddp_args.is_empty() && req.write_sinks.is_empty();
        self.stats.calls_sent += 1;
        self.stats.call_messages += 1;
        true
    }
}
