//! Zero-copy DDP results from a service-owned registered buffer
//! (`ReplyWriter::ddp_result_shared`) and from the call itself
//! (`ReplyWriter::ddp_result_from_call`), over shm: the bytes arrive, the engine holds
//! the shared buffer only until the reply is done, and misuse is refused with a typed
//! reason.

use std::sync::Arc;
use std::time::Duration;

use rpcrdma::fabric::shm::{ShmAddr, ShmDevice, ShmProvider};
use rpcrdma::Pair;
use rpcrdma::{CallRequest, CallStatus, Outcome};
use rpcrdma::{CallView, DdpRefusal, ReplyWriter, Service, ServiceError};
use rpcrdma::{ConnConfig, RegBuf};
use rpcrdma_pools::HugePages;

const DEADLINE: Duration = Duration::from_secs(10);
const CALL_HDR: usize = 40;
const PAGE: usize = 8192;

fn page_byte(i: usize) -> u8 {
    (i as u8).wrapping_mul(7).wrapping_add(3)
}

/// Serves `(offset, len)` ranges of one registered "page" it made on the first call.
#[derive(Default)]
struct PageService {
    page: Option<Arc<RegBuf>>,
    refusals: Vec<DdpRefusal>,
}

impl Service for PageService {
    fn handle_call(
        &mut self,
        call: &CallView<'_>,
        w: &mut ReplyWriter<'_>,
    ) -> Result<(), ServiceError> {
        if self.page.is_none() {
            let mut b = w.alloc_buf().map_err(|_| ServiceError::SystemErr)?;
            let bytes: Vec<u8> = (0..PAGE).map(page_byte).collect();
            b.fill(&bytes).map_err(|_| ServiceError::SystemErr)?;
            self.page = Some(Arc::new(b));
        }
        let page = self.page.as_ref().ok_or(ServiceError::SystemErr)?;
        let msg = call.msg();
        let word = |at: usize| -> Result<usize, ServiceError> {
            let b = msg.get(at..at + 4).ok_or(ServiceError::GarbageArgs)?;
            Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize)
        };
        let (off, len) = (word(CALL_HDR)?, word(CALL_HDR + 4)?);
        // Inline call bytes are not held for the Write: refused, nothing consumed.
        if let Err(e) = w.ddp_result_from_call(&msg[..4]) {
            self.refusals.push(e);
        }
        // Past the page's valid bytes: refused.
        if let Err(e) = w.ddp_result_shared(page, PAGE - 1, 2) {
            self.refusals.push(e);
        }
        for v in [call.xid(), 1, 0, 0, 0, 0, len as u32] {
            w.put_u32(v).map_err(|_| ServiceError::SystemErr)?;
        }
        w.ddp_result_shared(page, off, len)
            .map_err(|_| ServiceError::SystemErr)?;
        // Only one Write chunk was offered.
        if let Err(e) = w.ddp_result_shared(page, 0, 1) {
            self.refusals.push(e);
        }
        Ok(())
    }
}

fn config() -> ConnConfig {
    ConnConfig {
        credits: 4,
        large_buf_size: 16 * 1024,
        large_bufs: 16,
        send_bufs: 32,
        queue_len: 16,
        hugepages: HugePages::Never,
        ..ConnConfig::default()
    }
}

fn pair() -> Pair<ShmProvider, PageService> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let addr = ShmAddr::abstract_name(format!("rpcrdma-svc-api-{}-{n}", std::process::id()));
    Pair::connect(
        &ShmDevice::new(),
        ShmDevice::new(),
        &addr,
        &config(),
        &config(),
        PageService::default(),
        DEADLINE,
    )
    .expect("pair connects")
}

fn range_call(p: &mut Pair<ShmProvider, PageService>, off: u32, len: u32) -> Outcome {
    let mut msg = p.requester.alloc_msg().expect("send buffer");
    let mut v = Vec::new();
    for w in [0u32, 0, 2, 0x2000_0098, 1, 1, 0, 0, 0, 0, off, len] {
        v.extend_from_slice(&w.to_be_bytes());
    }
    msg.fill(&v).expect("fits");
    let mut req = CallRequest::new(msg, 256);
    req.push_write_sink(p.requester.alloc_large().expect("sink"))
        .expect("room");
    p.call(req, DEADLINE).expect("outcome before the deadline")
}

#[test]
fn shared_results_are_written_in_place_and_released_after_the_reply() {
    let mut p = pair();
    for (off, len) in [(0u32, 100u32), (1, 4093), (5000, 3192)] {
        let o = range_call(&mut p, off, len);
        assert_eq!(o.status, CallStatus::Success, "range {off}+{len}");
        let want: Vec<u8> = (off as usize..(off + len) as usize)
            .map(page_byte)
            .collect();
        assert_eq!(o.write_result(0), Some(&want[..]));
    }
    let stats = p.responder().expect("responder").stats();
    assert_eq!((stats.ddp_results, stats.ddp_zero_copy), (3, 3));
    // The engine's clones go once the replies' Sends complete: the service gets its
    // buffer back to itself.
    let released = p.run_until(DEADLINE, |p| {
        let svc = p.responder().expect("responder").service();
        svc.page.as_ref().is_some_and(|b| Arc::strong_count(b) == 1)
    });
    assert!(released, "the engine dropped its references");
    let svc = p.responder().expect("responder").service();
    assert_eq!(
        svc.refusals,
        [
            DdpRefusal::NotHeld,
            DdpRefusal::NotHeld,
            DdpRefusal::NoWriteChunk
        ]
        .repeat(3)
    );
}
