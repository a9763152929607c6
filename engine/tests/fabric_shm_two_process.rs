//! shm between two processes. The test binary re-executes itself with
//! `RPCRDMA_SHM_CHILD` naming the parent's listening address; the child connects and
//! both sides run a scripted exchange, each with its own deadlines:
//!
//! 1. child → parent: Send advertising its arena key and a fast-registered region
//!    (FastReg chained before the Send);
//! 2. parent → child: RDMA Write with the arena key, RDMA Write through the fast key,
//!    RDMA Read of the child's memory, then Send With Invalidate of the fast key;
//! 3. child: checks both writes and the invalidated key, registers a second arena
//!    (after connecting, so it must be announced), and Sends from both arenas;
//! 4. parent: checks that Send and disconnects; the child sees Disconnected and exits.
//!
//! `harness = false`: `main` runs the parent, or the child when the variable is set.

use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rpcrdma::fabric::mr::Access;
use rpcrdma::fabric::shm::{ShmAddr, ShmCm, ShmCq, ShmDevice, ShmMr, ShmPd, ShmQp};
use rpcrdma::fabric::{
    CmEvent, Completion, CompletionQueue, ConnectionManager, Device, MemoryRegion,
    ProtectionDomain, QpConfig, QpInit, QueuePair, RecvWr, RemoteAddr, SendFlags, SendOp, SendWr,
    Sge, WcOpcode, WcStatus, RNR_RETRY_INFINITE,
};
use rpcrdma_pools::{Arena, ArenaOptions, HugePages};

const CHILD_ENV: &str = "RPCRDMA_SHM_CHILD";
const STEP: Duration = Duration::from_secs(10);
const CHILD_LIMIT: Duration = Duration::from_secs(30);
const BLOCK: usize = 64 * 1024;

type Res<T> = Result<T, String>;

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

fn arena(len: usize) -> Arc<Arena> {
    let o = ArenaOptions::new(len)
        .shareable(true)
        .hugepages(HugePages::Never);
    Arc::new(Arena::new(&o).expect("arena"))
}

/// One process's side.
struct End {
    qp: Option<ShmQp>,
    cq: ShmCq,
    cm: ShmCm,
    mr: ShmMr,
    arena: Arc<Arena>,
    pd: ShmPd,
    done: Vec<Completion>,
    events: Vec<CmEvent<rpcrdma::fabric::shm::ShmConnRequest>>,
}

impl End {
    fn new() -> End {
        let dev = ShmDevice::new();
        let pd = dev.alloc_pd().expect("pd");
        let cq = dev.create_cq(256).expect("cq");
        let cm = dev.create_cm().expect("cm");
        let arena = arena(1 << 20);
        let mr = pd.reg_arena(&arena, Access::ALL).expect("register");
        End {
            qp: None,
            cq,
            cm,
            mr,
            arena,
            pd,
            done: Vec::new(),
            events: Vec::new(),
        }
    }

    fn qp(&mut self) -> Res<&mut ShmQp> {
        self.qp.as_mut().ok_or_else(|| "no queue pair".to_string())
    }

    fn sge(&self, off: usize, len: usize) -> Sge {
        Sge::new(
            self.arena.base() as u64 + off as u64,
            len as u32,
            self.mr.lkey(),
        )
    }

    fn fill(&self, off: usize, data: &[u8]) {
        assert!(off + data.len() <= self.arena.len());
        // SAFETY: in bounds; only this process's test code and the provider touch it.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.arena.base().add(off), data.len())
        }
    }

    fn read(&self, off: usize, len: usize) -> Vec<u8> {
        assert!(off + len <= self.arena.len());
        let mut v = vec![0u8; len];
        // SAFETY: as in `fill`.
        unsafe { std::ptr::copy_nonoverlapping(self.arena.base().add(off), v.as_mut_ptr(), len) }
        v
    }

    fn pump(&mut self) -> Res<()> {
        let mut buf = [Completion::EMPTY; 8];
        let n = self.cq.poll(&mut buf);
        self.done.extend_from_slice(&buf[..n]);
        if let Some(e) = self.cm.poll_event().map_err(|e| e.to_string())? {
            self.events.push(e);
        }
        Ok(())
    }

    fn wait<T>(&mut self, what: &str, mut f: impl FnMut(&mut End) -> Option<T>) -> Res<T> {
        let end = Instant::now() + STEP;
        loop {
            self.pump()?;
            if let Some(v) = f(self) {
                return Ok(v);
            }
            if Instant::now() > end {
                return Err(format!("timed out waiting for {what}"));
            }
            std::thread::yield_now();
        }
    }

    /// Takes the first completion for which `want` holds. Send-queue and receive-queue
    /// completions sharing a CQ are not ordered with respect to each other.
    fn completion(&mut self, what: &str, want: impl Fn(&Completion) -> bool) -> Res<Completion> {
        let c = self.wait(what, |e| {
            let i = e.done.iter().position(&want)?;
            Some(e.done.remove(i))
        })?;
        if c.status != WcStatus::Success {
            return Err(format!("{what}: {c:?}"));
        }
        Ok(c)
    }

    /// Fails if any completion left over is an error or matches `unexpected`.
    fn no_other(&mut self, unexpected: impl Fn(&Completion) -> bool) -> Res<()> {
        self.pump()?;
        match self
            .done
            .iter()
            .find(|c| c.status != WcStatus::Success || unexpected(c))
        {
            Some(c) => Err(format!("unexpected completion {c:?}")),
            None => Ok(()),
        }
    }

    fn config() -> QpConfig {
        QpConfig {
            rnr_retry: RNR_RETRY_INFINITE,
            ..QpConfig::default()
        }
    }

    fn connect(&mut self, addr: &str) -> Res<()> {
        let init = QpInit {
            pd: &self.pd,
            send_cq: &self.cq,
            recv_cq: &self.cq,
            srq: None,
            config: End::config(),
        };
        let qp = self
            .cm
            .connect(&ShmAddr::abstract_name(addr), init, b"child")
            .map_err(|e| e.to_string())?;
        self.qp = Some(qp);
        Ok(())
    }

    fn accept(&mut self, request: rpcrdma::fabric::shm::ShmConnRequest) -> Res<()> {
        let init = QpInit {
            pd: &self.pd,
            send_cq: &self.cq,
            recv_cq: &self.cq,
            srq: None,
            config: End::config(),
        };
        let qp = self
            .cm
            .accept(request, init, b"parent")
            .map_err(|e| e.to_string())?;
        self.qp = Some(qp);
        Ok(())
    }
}

fn check(cond: bool, what: &str) -> Res<()> {
    cond.then_some(())
        .ok_or_else(|| format!("check failed: {what}"))
}

fn child(addr: &str) -> Res<()> {
    let started = Instant::now();
    let mut me = End::new();
    me.connect(addr)?;
    let rb = [me.sge(0, 64)];
    me.qp()?
        .post_recv(&[RecvWr { wr_id: 1, sgl: &rb }])
        .map_err(|e| e.to_string())?;
    let private = me.wait("Established", |e| {
        e.events.iter().find_map(|ev| match ev {
            CmEvent::Established { private_data, .. } => Some(*private_data),
            _ => None,
        })
    })?;
    check(private.as_bytes() == b"parent", "parent's private data")?;

    // 1. Advertise: arena key, and a fast-registered region for the parent to write.
    me.fill(256 * 1024, &pattern(2, BLOCK));
    let mut fmr = me.pd.alloc_fast_mr(BLOCK).map_err(|e| e.to_string())?;
    let fkey = fmr.rekey();
    let fast_at = 512 * 1024;
    let mut adv = Vec::new();
    adv.extend_from_slice(&(me.arena.base() as u64).to_le_bytes());
    adv.extend_from_slice(&me.mr.rkey().to_le_bytes());
    adv.extend_from_slice(&fkey.to_le_bytes());
    me.fill(128, &adv);
    let advs = [me.sge(128, adv.len())];
    let region = me.sge(fast_at, BLOCK);
    let chain = [
        SendWr {
            wr_id: 10,
            op: SendOp::FastReg {
                key: fkey,
                region,
                access: Access::LOCAL_WRITE | Access::REMOTE_WRITE,
            },
            sgl: &[],
            flags: SendFlags::NONE,
        },
        SendWr::send(11, &advs),
    ];
    me.qp()?.post_send(&chain).map_err(|e| e.to_string())?;
    me.completion("advertisement sent", |c| c.opcode == WcOpcode::Send)
        .and_then(|c| check(c.wr_id == 11, &format!("the signaled request: {c:?}")))?;

    // 3. The parent wrote, read, and invalidated the fast key.
    let c = me.completion("parent's Send With Invalidate", |c| {
        c.opcode == WcOpcode::Recv
    })?;
    check(
        c.invalidated_rkey == Some(fkey),
        "the fast key was invalidated",
    )?;
    check(me.read(0, 4) == b"done", "payload")?;
    check(
        me.read(BLOCK, BLOCK) == pattern(4, BLOCK),
        "write with the arena key",
    )?;
    check(
        me.read(fast_at, BLOCK) == pattern(1, BLOCK),
        "write through the fast key",
    )?;

    // An arena registered after connecting: the parent must learn of it.
    let late = arena(1 << 20);
    let late_mr = me
        .pd
        .reg_arena(&late, Access::ALL)
        .map_err(|e| e.to_string())?;
    let data = pattern(3, 70_000);
    // SAFETY: in bounds of the fresh 1 MiB arena.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), late.base(), data.len()) };
    me.fill(768 * 1024, &pattern(5, 100));
    let sg = [
        me.sge(768 * 1024, 100),
        Sge::new(late.base() as u64, data.len() as u32, late_mr.lkey()),
    ];
    me.qp()?
        .post_send(&[SendWr::send(12, &sg)])
        .map_err(|e| e.to_string())?;
    me.completion("two-arena Send", |c| c.wr_id == 12)?;
    me.no_other(|c| c.wr_id == 10)?;

    // 4. The parent disconnects.
    me.wait("Disconnected", |e| {
        e.events
            .iter()
            .any(|ev| matches!(ev, CmEvent::Disconnected { .. }))
            .then_some(())
    })?;
    check(me.qp()?.state().is_error(), "queue pair flushed")?;
    check(
        started.elapsed() < CHILD_LIMIT,
        "child within its time limit",
    )?;
    Ok(())
}

fn parent(child: &mut std::process::Child, mut me: End) -> Res<()> {
    let (request, private) = {
        let end = Instant::now() + STEP;
        loop {
            me.pump()?;
            if let Some(i) = me
                .events
                .iter()
                .position(|e| matches!(e, CmEvent::ConnectRequest { .. }))
            {
                match me.events.remove(i) {
                    CmEvent::ConnectRequest {
                        request,
                        private_data,
                    } => break (request, private_data),
                    _ => return Err("event vanished".into()),
                }
            }
            if let Ok(Some(st)) = child.try_wait() {
                return Err(format!("child exited early: {st}"));
            }
            if Instant::now() > end {
                return Err("no connect request from the child".into());
            }
            std::thread::yield_now();
        }
    };
    check(private.as_bytes() == b"child", "child's private data")?;
    me.accept(request)?;
    let rb = [me.sge(0, 64)];
    let rb2 = [me.sge(4096, 80_000)];
    me.qp()?
        .post_recv(&[
            RecvWr { wr_id: 1, sgl: &rb },
            RecvWr {
                wr_id: 2,
                sgl: &rb2,
            },
        ])
        .map_err(|e| e.to_string())?;
    me.wait("Established", |e| {
        e.events
            .iter()
            .any(|ev| matches!(ev, CmEvent::Established { .. }))
            .then_some(())
    })?;

    // 1. The advertisement.
    let c = me.completion("advertisement", |c| c.wr_id == 1)?;
    check(c.wr_id == 1 && c.byte_len == 16, "advertisement size")?;
    let adv = me.read(0, 16);
    let base = u64::from_le_bytes(adv[..8].try_into().map_err(|_| "adv")?);
    let rkey = u32::from_le_bytes(adv[8..12].try_into().map_err(|_| "adv")?);
    let fkey = u32::from_le_bytes(adv[12..16].try_into().map_err(|_| "adv")?);

    // 2. Write, write through the fast key, read, Send With Invalidate.
    me.fill(100_000, &pattern(4, BLOCK));
    me.fill(200_000, &pattern(1, BLOCK));
    me.fill(300, b"done");
    let w1 = [me.sge(100_000, BLOCK)];
    let w2 = [me.sge(200_000, BLOCK)];
    let rd = [me.sge(400_000, BLOCK)];
    let msg = [me.sge(300, 4)];
    let chain = [
        SendWr::write(
            20,
            &w1,
            RemoteAddr {
                addr: base + BLOCK as u64,
                rkey,
            },
        )
        .with_flags(SendFlags::NONE),
        SendWr::write(
            21,
            &w2,
            RemoteAddr {
                addr: base + 512 * 1024,
                rkey: fkey,
            },
        )
        .with_flags(SendFlags::NONE),
        SendWr::read(
            22,
            &rd,
            RemoteAddr {
                addr: base + 256 * 1024,
                rkey,
            },
        ),
        SendWr {
            wr_id: 23,
            op: SendOp::SendWithInvalidate { rkey: fkey },
            sgl: &msg,
            flags: SendFlags::SIGNALED,
        },
    ];
    me.qp()?.post_send(&chain).map_err(|e| e.to_string())?;
    let c = me.completion("read", |c| c.wr_id == 22)?;
    check(
        c.wr_id == 22 && c.byte_len as usize == BLOCK,
        "read completion",
    )?;
    check(me.read(400_000, BLOCK) == pattern(2, BLOCK), "read data")?;
    me.completion("send with invalidate", |c| c.wr_id == 23)?;

    // 3. The two-arena Send.
    let c = me.completion("two-arena Send", |c| c.wr_id == 2)?;
    check(c.byte_len == 70_100, "two-arena Send size")?;
    me.no_other(|c| c.wr_id == 20 || c.wr_id == 21)?;
    let mut expect = pattern(5, 100);
    expect.extend_from_slice(&pattern(3, 70_000));
    check(me.read(4096, 70_100) == expect, "two-arena Send data")?;

    // 4. Disconnect.
    let conn = me.qp()?.conn_id();
    me.cm.disconnect(conn).map_err(|e| e.to_string())?;
    let end = Instant::now() + STEP;
    loop {
        me.pump()?;
        if let Some(st) = child.try_wait().map_err(|e| e.to_string())? {
            return check(st.success(), "child exited successfully");
        }
        if Instant::now() > end {
            return Err("child did not exit".into());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn main() -> ExitCode {
    if let Ok(addr) = std::env::var(CHILD_ENV) {
        return match child(&addr) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("shm two-process child: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let name = format!("rpcrdma-two-process-{}", std::process::id());
    // Listen before the child exists, so its connect cannot find nobody.
    let mut me = End::new();
    if let Err(e) = me.cm.listen(&ShmAddr::abstract_name(name.clone())) {
        eprintln!("cannot listen: {e}");
        return ExitCode::FAILURE;
    }
    let exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("cannot find the test binary: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut child = match Command::new(exe)
        .env(CHILD_ENV, &name)
        .stdin(Stdio::null())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("cannot start the child: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = parent(&mut child, me);
    if result.is_err() {
        // Never leave a busy-polling child behind.
        let _ = child.kill();
    }
    let _ = child.wait();
    match result {
        Ok(()) => {
            println!("test shm_two_process ... ok");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("test shm_two_process ... FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}
