//! A driver for fuzzing the protocol cores from the peer's side: a [`RequesterCore`]
//! and a [`ResponderCore`] wired back to back through an in-memory queue pair, with an
//! input of arbitrary bytes choosing every step: calls submitted, Sends carried (or
//! mangled) from one core to the other, arbitrary bytes delivered as received messages,
//! arbitrary completions (any `wr_id`, opcode, status, length), time passing and
//! disconnects.
//!
//! Used by the `core_peer` fuzz target (`engine/fuzz`) and by a unit test that runs it
//! over seeded random inputs. It checks the cores' promises to the application: no
//! panic, every accepted call gets at most one outcome, no outcome for a call never
//! accepted, and (when only well-formed completions were injected) every accepted call
//! gets exactly one outcome once the connection is torn down.
//!
//! Hidden from the documentation: a test harness, not part of the engine's API.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rpcrdma_pools::{HugePages, Pool, PoolConfig, RegKeys};

use super::wire::{completion_of, Wire};
use crate::core::{ConnConfig, CorePools, RegBuf, RequesterCore, ResponderCore};
use crate::credits::{CreditTable, GrantPolicy};
use crate::fabric::{Completion, SendOp, WcOpcode, WcStatus};
use crate::requester::CallRequest;
use crate::service::{CallView, ReplyWriter, Service, ServiceError};
use crate::wire::private_data::PrivateData;

/// What one run did, for a test to see that inputs reach the interesting paths.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Report {
    /// Calls the requester accepted.
    pub accepted: u64,
    /// Outcomes delivered.
    pub outcomes: u64,
    /// Outcomes that were a successful reply.
    pub replies: u64,
    /// Messages delivered to either core.
    pub delivered: u64,
}

/// Reads the input as a stream of small numbers; zeros once it is used up. Shared with
/// the `sim_peer_fuzz` driver, so both read their inputs alike.
pub(super) struct Input<'a> {
    pub(super) data: &'a [u8],
}

impl<'a> Input<'a> {
    pub(super) fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    pub(super) fn u8(&mut self) -> u8 {
        match self.data.split_first() {
            Some((b, rest)) => {
                self.data = rest;
                *b
            }
            None => 0,
        }
    }

    pub(super) fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }

    pub(super) fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }

    pub(super) fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | (u64::from(self.u32()) << 32)
    }

    pub(super) fn bytes(&mut self, n: usize) -> &'a [u8] {
        let n = n.min(self.data.len());
        let (b, rest) = self.data.split_at(n);
        self.data = rest;
        b
    }
}

const STATUSES: [WcStatus; 8] = [
    WcStatus::Success,
    WcStatus::WrFlushed,
    WcStatus::RemoteAccessError,
    WcStatus::LocalProtectionError,
    WcStatus::LocalLengthError,
    WcStatus::RetryExceeded,
    WcStatus::RemoteOperationError,
    WcStatus::GeneralError,
];

const OPCODES: [WcOpcode; 6] = [
    WcOpcode::Send,
    WcOpcode::RdmaWrite,
    WcOpcode::RdmaRead,
    WcOpcode::FastReg,
    WcOpcode::LocalInvalidate,
    WcOpcode::Recv,
];

/// The responder's service: what it does is chosen by the call's procedure number
/// (modulo 4): reply with the RPC header, drop the call, decline, or reply with as many
/// zero bytes as the first argument word says (possibly more than fits).
struct FuzzService;

impl Service for FuzzService {
    fn handle_call(
        &mut self,
        call: &CallView<'_>,
        w: &mut ReplyWriter<'_>,
    ) -> Result<(), ServiceError> {
        let msg = call.msg();
        let word = |i: usize| {
            msg.get(4 * i..4 * i + 4)
                .map_or(0, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        };
        let over = |_| ServiceError::SystemErr;
        match word(5) % 4 {
            0 => {
                for v in [call.xid(), 1, 0, 0, 0, 0] {
                    w.put_u32(v).map_err(over)?;
                }
                Ok(())
            }
            1 => {
                w.no_reply();
                Ok(())
            }
            2 => Err(ServiceError::GarbageArgs),
            _ => {
                for v in [call.xid(), 1, 0, 0, 0, 0] {
                    w.put_u32(v).map_err(over)?;
                }
                w.put_zeros((word(10) % (1 << 18)) as usize).map_err(over)
            }
        }
    }
}

fn pools(base_key: u32) -> Option<CorePools> {
    let mk = |name, size, count, key| {
        let p = Pool::new(
            &PoolConfig::new(name, size, count)
                .cache_size(4)
                .hugepages(HugePages::Never),
        )
        .ok()?;
        p.arena().set_keys(RegKeys {
            lkey: key,
            rkey: key,
        });
        Some(p)
    };
    Some(CorePools {
        recv: mk("fuzz-recv", 1024, 64, base_key)?,
        send: mk("fuzz-send", 1024, 64, base_key + 1)?,
        large: mk("fuzz-large", 65536, 16, base_key + 2)?,
        headers: None,
    })
}

fn config(seed: u64) -> ConnConfig {
    ConnConfig {
        inline_send: 1024,
        inline_recv: 1024,
        credits: 4,
        large_buf_size: 65536,
        large_bufs: 16,
        send_bufs: 64,
        queue_len: 8,
        call_timeout: Duration::from_millis(500),
        credit_reclaim: Some(Duration::from_secs(2)),
        keepalive: Some(Duration::from_secs(1)),
        probe_timeout: Duration::from_millis(300),
        hugepages: HugePages::Never,
        seed: Some(seed),
        ..ConnConfig::default()
    }
}

/// Outcomes seen per accepted call; panics on a second one or one for no call.
pub(super) struct Ledger {
    pub(super) seen: Vec<u8>,
}

impl Ledger {
    pub(super) fn accept(&mut self) -> u64 {
        self.seen.push(0);
        (self.seen.len() - 1) as u64
    }

    pub(super) fn outcome(&mut self, tag: u64) {
        let n = self
            .seen
            .get_mut(tag as usize)
            .unwrap_or_else(|| panic!("outcome for tag {tag}, never accepted"));
        *n += 1;
        assert_eq!(*n, 1, "a second outcome for tag {tag}");
    }
}

/// Runs the two cores over `data`; panics when a promise breaks.
pub fn run(data: &[u8]) -> Report {
    let mut input = Input { data };
    let persistent = input.u8() & 1 == 1;
    let seed = input.u64();
    // The steps come from their own stream, their parameters from the rest, so a
    // change to one step's parameters does not reshuffle the steps after it.
    let n_ops = usize::from(input.u16());
    let mut ops = Input {
        data: input.bytes(n_ops),
    };
    let (Some(rp), Some(sp)) = (pools(0x100), pools(0x200)) else {
        return Report::default();
    };
    let cfg = config(seed);
    let credits = Arc::new(CreditTable::new(cfg.credits, true));
    let req = if persistent {
        RequesterCore::requester_persistent(&cfg, &rp, credits)
    } else {
        RequesterCore::requester(&cfg, &rp, &super::fast_reg_slots(1, 24), credits)
    };
    let policy = Arc::new(GrantPolicy::new(4, 8));
    let (Ok(mut req), Ok(mut resp)) = (
        req,
        ResponderCore::responder(&cfg, &sp, FuzzService, policy),
    ) else {
        return Report::default();
    };
    let pd = PrivateData::new(1024, 1024, true)
        .to_bytes()
        .unwrap_or_default();
    let start = Instant::now();
    let mut now = start;
    let mut rq = Wire::new([&rp.recv, &rp.send, &rp.large]);
    let mut sq = Wire::new([&sp.recv, &sp.send, &sp.large]);
    req.on_established(&pd, now);
    resp.on_established(&pd, now);
    let mut ledger = Ledger { seen: Vec::new() };
    let mut report = Report::default();
    // Arbitrary completions may name requests twice, as no device would: then a call
    // may end without an outcome, and only "at most one" is checked.
    let mut well_formed = true;
    let mut scratch = Vec::new();
    let mut steps = 0;
    while !ops.is_empty() && steps < 4096 {
        steps += 1;
        match ops.u8() % 12 {
            0 => {
                let Some(call) = call_request(&mut input, &rp) else {
                    continue;
                };
                if req.submit(call, ledger.seen.len() as u64, now).is_ok() {
                    ledger.accept();
                    report.accepted += 1;
                }
            }
            1 => {
                // The requester's oldest request executes: a Send reaches the responder
                // (perhaps with one byte changed); anything else just completes.
                let flip = (input.u16(), input.u8());
                if let Some(p) = rq.sends.pop_front() {
                    if matches!(p.op, SendOp::Send | SendOp::SendWithInvalidate { .. }) {
                        scratch.clear();
                        scratch.extend_from_slice(&p.bytes);
                        mangle(&mut scratch, flip);
                        if let Some(wc) = sq.deliver_invalidating(&scratch, None) {
                            report.delivered += 1;
                            resp.handle_completion(&wc, now);
                        }
                    }
                    req.handle_completion(&completion_of(&p, WcStatus::Success), now);
                }
            }
            2 => {
                let flip = (input.u16(), input.u8());
                let tell = input.u8() & 1 == 1;
                if let Some(p) = sq.sends.pop_front() {
                    if let SendOp::Send | SendOp::SendWithInvalidate { .. } = p.op {
                        let swi = match p.op {
                            SendOp::SendWithInvalidate { rkey } if tell => Some(rkey),
                            _ => None,
                        };
                        scratch.clear();
                        scratch.extend_from_slice(&p.bytes);
                        mangle(&mut scratch, flip);
                        if let Some(wc) = rq.deliver_invalidating(&scratch, swi) {
                            report.delivered += 1;
                            req.handle_completion(&wc, now);
                        }
                    }
                    resp.handle_completion(&completion_of(&p, WcStatus::Success), now);
                }
            }
            3 => {
                let n = usize::from(input.u16() % 1100);
                let swi = (input.u8() & 1 == 1).then(|| input.u32());
                let msg = input.bytes(n).to_vec();
                if let Some(wc) = rq.deliver_invalidating(&msg, swi) {
                    report.delivered += 1;
                    req.handle_completion(&wc, now);
                }
            }
            4 => {
                let n = usize::from(input.u16() % 1100);
                let msg = input.bytes(n).to_vec();
                if let Some(wc) = sq.deliver_invalidating(&msg, None) {
                    report.delivered += 1;
                    resp.handle_completion(&wc, now);
                }
            }
            5 => {
                let st = STATUSES[usize::from(input.u8()) % STATUSES.len()];
                if let Some(wc) = rq.complete_send(st) {
                    req.handle_completion(&wc, now);
                }
            }
            6 => {
                let st = STATUSES[usize::from(input.u8()) % STATUSES.len()];
                if let Some(wc) = sq.complete_send(st) {
                    resp.handle_completion(&wc, now);
                }
            }
            op @ (7 | 8) => {
                well_formed = false;
                let wc = Completion {
                    wr_id: input.u64(),
                    opcode: OPCODES[usize::from(input.u8()) % OPCODES.len()],
                    status: STATUSES[usize::from(input.u8()) % STATUSES.len()],
                    byte_len: input.u32(),
                    qp_num: 1,
                    invalidated_rkey: (input.u8() & 1 == 1).then(|| input.u32()),
                };
                if op == 7 {
                    req.handle_completion(&wc, now);
                } else {
                    resp.handle_completion(&wc, now);
                }
            }
            9 => {
                now += Duration::from_millis(u64::from(input.u8()) * 20);
                if req.next_timeout().is_some_and(|t| t <= now) {
                    req.handle_timeout(now);
                }
                if resp.next_timeout().is_some_and(|t| t <= now) {
                    resp.handle_timeout(now);
                }
            }
            10 => {
                if input.u8() == 0xff {
                    req.on_disconnected();
                    resp.on_disconnected();
                }
            }
            _ => {
                let _ = req.health_check(now);
            }
        }
        step(&mut req, &mut rq, &mut resp, &mut sq, now);
        drain(&mut req, &mut resp, &mut ledger, &mut report);
    }
    // Tear down: the connection ends and both queue pairs flush everything posted.
    req.on_disconnected();
    resp.on_disconnected();
    for _ in 0..8 {
        for wc in rq.flush() {
            req.handle_completion(&wc, now);
        }
        for wc in sq.flush() {
            resp.handle_completion(&wc, now);
        }
        step(&mut req, &mut rq, &mut resp, &mut sq, now);
        drain(&mut req, &mut resp, &mut ledger, &mut report);
    }
    if well_formed {
        if let Some(tag) = ledger.seen.iter().position(|&n| n == 0) {
            panic!("accepted call {tag} never got an outcome");
        }
    }
    // Every entry either core staged lay inside its own pools.
    assert_eq!(rq.faults, [], "requester staged memory outside its pools");
    assert_eq!(sq.faults, [], "responder staged memory outside its pools");
    report
}

/// A call from the input: an RPC call header (procedure chosen by the input, which
/// tells [`FuzzService`] what to do), payload, a reply size, and perhaps a write sink
/// or a DDP argument.
fn call_request(input: &mut Input<'_>, pools: &CorePools) -> Option<CallRequest> {
    let shape = input.u8();
    let proc_ = u32::from(input.u8());
    let extra = usize::from(input.u16() % 3000);
    let arg = input.u32();
    let mut msg = RegBuf::from_pool(if extra > 900 {
        &pools.large
    } else {
        &pools.send
    })
    .ok()?;
    let mut v = Vec::with_capacity(44 + extra);
    for w in [0u32, 0, 2, 0x2000_0099, 1, proc_, 0, 0, 0, 0, arg] {
        v.extend_from_slice(&w.to_be_bytes());
    }
    v.resize(44 + extra, 0xa5);
    msg.fill(&v).ok()?;
    let mut call = CallRequest::new(msg, u32::from(input.u16()));
    if shape & 1 == 1 {
        if let Ok(sink) = RegBuf::from_pool(&pools.large) {
            let _ = call.push_write_sink(sink);
        }
    }
    if shape & 2 == 2 {
        if let Ok(mut data) = RegBuf::from_pool(&pools.large) {
            let n = usize::from(input.u16()) % 4096;
            if data.fill(&vec![0x5a; n]).is_ok() {
                let _ = call.push_ddp_arg(44, data);
            }
        }
    }
    if shape & 4 == 4 {
        call = call.with_timeout(Duration::from_millis(u64::from(input.u8()) * 10 + 1));
    }
    Some(call)
}

/// One time in sixteen (`how`'s high nibble all ones), flips the bits of byte
/// `at % len` that `how`'s low nibble names; otherwise the message goes through intact,
/// so most calls can complete and the deeper states are reached.
fn mangle(b: &mut [u8], (at, how): (u16, u8)) {
    if how >> 4 == 0xf && !b.is_empty() {
        let i = usize::from(at) % b.len();
        b[i] ^= (how & 0x0f) | 1;
    }
}

fn step(
    req: &mut RequesterCore,
    rq: &mut Wire,
    resp: &mut ResponderCore<FuzzService>,
    sq: &mut Wire,
    now: Instant,
) {
    rq.pump(req, now);
    sq.pump(resp, now);
}

fn drain(
    req: &mut RequesterCore,
    resp: &mut ResponderCore<FuzzService>,
    ledger: &mut Ledger,
    report: &mut Report,
) {
    while let Some(o) = req.poll_outcome() {
        ledger.outcome(o.tag);
        report.outcomes += 1;
        report.replies += u64::from(o.status == crate::requester::CallStatus::Success);
    }
    while req.poll_event().is_some() {}
    while resp.poll_event().is_some() {}
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A splitmix64 stream of input bytes for `seed`, `len` long.
    fn input(seed: u64, len: usize) -> Vec<u8> {
        let mut s = seed;
        (0..len)
            .map(|_| {
                s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
                let mut z = s;
                z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                (z ^ (z >> 31)) as u8
            })
            .collect()
    }

    /// An input whose steps mostly submit calls and carry traffic, so replies happen
    /// and the states after them are reached; `len` parameter bytes.
    fn traffic(seed: u64, steps: u16, len: usize) -> Vec<u8> {
        let mut v = input(seed, 9);
        v.extend_from_slice(&steps.to_le_bytes());
        let picks = input(seed ^ 0xdead_beef, usize::from(steps));
        v.extend(
            picks
                .iter()
                .map(|b| [0, 1, 1, 2, 2, 1, 2, 5, 6, 9, 3, 11][usize::from(*b) % 12]),
        );
        v.extend(input(seed.wrapping_mul(3), len));
        v
    }

    #[test]
    fn random_inputs_keep_every_promise() {
        let mut total = Report::default();
        for seed in 0..300 {
            let data = [
                input(seed, 64 + (seed as usize % 7) * 200),
                traffic(seed, 400, 4000),
            ];
            for data in data {
                let r = run(&data);
                total.accepted += r.accepted;
                total.outcomes += r.outcomes;
                total.replies += r.replies;
                total.delivered += r.delivered;
            }
        }
        eprintln!("{total:?}");
        assert!(total.accepted > 100, "{total:?}");
        assert!(total.delivered > 100, "{total:?}");
        assert!(total.replies > 0, "some calls complete: {total:?}");
    }

    #[test]
    fn empty_and_tiny_inputs_are_fine() {
        assert_eq!(run(&[]).accepted, 0);
        run(&[1]);
        run(&[0; 64]);
        run(&[0xff; 64]);
    }
}
