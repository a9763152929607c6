//! Decoding, iterating and encoding transport headers must not allocate: this binary
//! counts the calling thread's heap allocations around those operations.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use rpcrdma::wire::header::*;

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
fn parse_iterate_and_encode_do_not_allocate() {
    let reads = [
        ReadSegment::new(0, Segment::new(1, 0x1000, 0x10_0000)),
        ReadSegment::new(0, Segment::new(2, 0x1000, 0x20_0000)),
        ReadSegment::new(0x80, Segment::new(3, 0x200, 0x30_0000)),
    ];
    let w0 = [Segment::new(4, 0x1000, 0x40_0000), Segment::new(5, 0x10, 0)];
    let w1: [Segment; 0] = [];
    let writes: [&[Segment]; 2] = [&w0, &w1];
    let reply = [Segment::new(6, 0x400, 0x60_0000)];
    let repr = HeaderRepr {
        xid: 0xfeed_f00d,
        credit: 128,
        body: BodyRepr::Msg(ChunkListsRepr {
            reads: &reads,
            writes: &writes,
            reply: Some(&reply),
        }),
    };
    let mut buf = [0u8; 512];
    let mut again = [0u8; 512];
    let mut sum = 0u64;
    let n = repr.encoded_len();
    let allocs = allocations_during(|| {
        let len = repr.encode(&mut buf).unwrap();
        assert_eq!(len, n);
        buf[len..len + 4].copy_from_slice(&0xfeed_f00du32.to_be_bytes());
        let v = HeaderView::parse(&buf[..len + 4], &Limits::DEFAULT).unwrap();
        for r in v.read_list() {
            sum += r.segment.offset;
        }
        for c in v.read_chunks() {
            sum += c.total_length();
        }
        for c in v.write_list() {
            for s in c {
                sum += u64::from(s.length);
            }
        }
        sum += v.reply_chunk().map_or(0, |c| c.total_length());
        assert_eq!(v.encode_into(&mut again), Ok(len));
        let e = HeaderView::parse(&buf[..len - 1], &Limits::DEFAULT).unwrap_err();
        let reply = e.responder_reply().reply(1).unwrap();
        reply.encode(&mut again).unwrap();
        encode_err_vers(1, 1, &mut again).unwrap();
        encode_err_chunk(1, 1, &mut again).unwrap();
        encode_done(1, 1, &mut again).unwrap();
    });
    assert_eq!(allocs, 0);
    assert_eq!(
        sum,
        0x60_0000 + 0x2200 + 0x1010 + 0x400,
        "the iterators saw every segment"
    );
    // The counter works: the owned form allocates.
    let owned = allocations_during(|| {
        let h = Header::parse(&buf[..n + 4], &Limits::DEFAULT).unwrap();
        assert_eq!(h.to_bytes().len(), n + 4);
    });
    assert!(owned > 0);
}
