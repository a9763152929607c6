//! The iWARP data path must not allocate: segmenting a message into FPDUs, parsing an
//! inbound stream, the contiguous codecs and the MPA handshake. This binary counts the
//! calling thread's heap allocations around those operations.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use rpcrdma::iwarp::crc32c::crc32c;
use rpcrdma::iwarp::fpdu::{decode_fpdu, encode_fpdu, MAX_ULPDU_LEN};
use rpcrdma::iwarp::handshake::{Initiator, InitiatorConfig, Responder, ResponderConfig};
use rpcrdma::iwarp::rdmap::{Opcode, Placement, ReadRequest, SegmentHeader};
use rpcrdma::iwarp::reader::{FpduEvent, FpduReader};
use rpcrdma::iwarp::segmenter::{MessageTarget, Segmenter};
use rpcrdma::iwarp::terminate::{DdpUntaggedError, Terminate, TerminateCode};

struct CountingAlloc;

thread_local! {
    static ALLOCS: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: defers every operation to the system allocator; only counts.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

fn allocations_during(f: impl FnOnce()) -> usize {
    let before = ALLOCS.with(Cell::get);
    f();
    ALLOCS.with(Cell::get) - before
}

#[test]
fn segment_and_parse_a_message_without_allocating() {
    let message: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
    let mut stream = vec![0u8; 32 * 1024];
    let mut got = vec![0u8; message.len()];
    let mut fpdus = 0usize;
    let mut stream_len = 0usize;
    let n = allocations_during(|| {
        let mut seg = Segmenter::new(
            Opcode::Send,
            MessageTarget::Untagged {
                msn: 1,
                inval_stag: 0,
            },
            &message,
            1454,
            true,
        )
        .expect("valid");
        while let Some(r) = seg.next_into(&mut stream[stream_len..]) {
            stream_len += r.expect("fits");
        }
        let mut reader = FpduReader::new(true);
        let mut mo = 0usize;
        // Reads of 1000 octets, so FPDUs straddle reads.
        for piece in stream[..stream_len].chunks(1000) {
            let mut off = 0;
            loop {
                let step = reader.step(&piece[off..]).expect("valid stream");
                off += step.consumed;
                match step.event {
                    None => break,
                    Some(FpduEvent::Header { header, .. }) => {
                        fpdus += 1;
                        if let Placement::Untagged { mo: m, .. } = header.placement {
                            mo = m as usize;
                        }
                    }
                    // Placed straight into the receive buffer at MO + offset.
                    Some(FpduEvent::Payload { offset, data }) => {
                        got[mo + offset..mo + offset + data.len()].copy_from_slice(data);
                    }
                    Some(FpduEvent::End) => {}
                }
            }
        }
    });
    assert_eq!(n, 0, "the data path allocated {n} times");
    assert_eq!(fpdus, 14, "20000 octets in 1436-octet FPDUs");
    assert_eq!(got, message);
}

#[test]
fn contiguous_codecs_and_handshake_do_not_allocate() {
    let mut buf = [0u8; 256];
    let mut body = [0u8; 64];
    let ddp = [0x41u8, 0x43, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0];
    let n = allocations_during(|| {
        let rr = ReadRequest {
            sink_stag: 1,
            sink_to: 2,
            size: 3,
            source_stag: 4,
            source_to: 5,
        };
        let h = SegmentHeader::untagged(Opcode::ReadRequest, true, 0, 1, 0);
        let len = encode_fpdu(&mut buf, &h, &rr.to_bytes(), true).expect("fits");
        let f = decode_fpdu(&buf[..len], true, MAX_ULPDU_LEN).expect("valid");
        assert_eq!(ReadRequest::decode(f.payload), Ok(rr));

        let t = Terminate {
            code: TerminateCode::DdpUntagged(DdpUntaggedError::InvalidMo),
            segment_length: Some(4),
            ddp_header: Some(&ddp),
            rdma_header: None,
            layout: rpcrdma::iwarp::terminate::TerminateLayout::Rfc5040,
        };
        let tl = t.encode(&mut body).expect("fits");
        assert_eq!(Terminate::decode(&body[..tl]), Ok(t));
        assert_ne!(crc32c(&buf[..len]), 0);

        let mut ini = Initiator::new(InitiatorConfig::default(), b"pd").expect("fits");
        let mut resp = Responder::new(ResponderConfig::default());
        let req = resp.feed(ini.request()).expect("valid");
        assert!(req.done.is_some());
        let (reply, _) = resp.accept(b"ok").expect("fits");
        let est = ini.feed(reply).expect("valid").done.expect("complete");
        assert!(est.peer.is_some());
    });
    assert_eq!(n, 0, "allocated {n} times");
}
