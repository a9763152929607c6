//! Transport header codec micro-benchmarks, each beside a bare baseline in the same run.
//!
//! Run: `cargo bench -p rpcrdma-perf --bench wire_header` (a few seconds). For three
//! header shapes it prints ns per operation for:
//! - parse: `HeaderView::parse` plus walking every segment through the iterators,
//!   against a baseline that only sums the header's words (touches the same bytes,
//!   validates nothing);
//! - encode: `HeaderRepr::encode` into a send buffer, against `copy_from_slice` of the
//!   already-encoded bytes.
//!
//! Each figure is the median of several timed runs; on a shared 2-core machine expect
//! noise of 10-20 %.

use std::hint::black_box;
use std::time::Instant;

use rpcrdma::wire::header::{
    BodyRepr, ChunkListsRepr, HeaderRepr, HeaderView, Limits, ReadSegment, Segment,
};

const RUNS: usize = 7;
const N: u64 = 2_000_000;

fn ns_per_op(iters: u64, mut run: impl FnMut(u64)) -> f64 {
    run(iters / 10);
    let mut samples: Vec<f64> = (0..RUNS)
        .map(|_| {
            let t = Instant::now();
            run(iters);
            t.elapsed().as_nanos() as f64 / iters as f64
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    samples[RUNS / 2]
}

fn walk(v: &HeaderView<'_>) -> u64 {
    let mut acc = 0u64;
    for r in v.read_list() {
        acc = acc.wrapping_add(r.segment.offset);
    }
    for c in v.write_list() {
        for s in c {
            acc = acc.wrapping_add(s.offset);
        }
    }
    if let Some(c) = v.reply_chunk() {
        for s in c {
            acc = acc.wrapping_add(s.offset);
        }
    }
    acc
}

fn sum_words(b: &[u8]) -> u64 {
    b.chunks_exact(4)
        .map(|w| u64::from(u32::from_be_bytes([w[0], w[1], w[2], w[3]])))
        .fold(0u64, u64::wrapping_add)
}

fn bench(name: &str, repr: &HeaderRepr<'_>) {
    let mut wire = vec![0u8; repr.encoded_len() + 8];
    let n = repr.encode(&mut wire).expect("encode");
    // RDMA_MSG carries the RPC message, starting with the same XID, after the header.
    wire[n..n + 4].copy_from_slice(&repr.xid.to_be_bytes());
    let wire = &wire[..];
    let limits = Limits::DEFAULT;

    let parse = ns_per_op(N, |iters| {
        for _ in 0..iters {
            let v = HeaderView::parse(black_box(wire), &limits).expect("parse");
            black_box(walk(&v));
        }
    });
    let scan = ns_per_op(N, |iters| {
        for _ in 0..iters {
            black_box(sum_words(black_box(&wire[..n])));
        }
    });
    let mut out = [0u8; 1024];
    let encode = ns_per_op(N, |iters| {
        for _ in 0..iters {
            black_box(black_box(repr).encode(&mut out).expect("encode"));
        }
    });
    let copy = ns_per_op(N, |iters| {
        for _ in 0..iters {
            out[..n].copy_from_slice(black_box(&wire[..n]));
            black_box(&out);
        }
    });
    println!(
        "{name:<34} {n:>4} B   parse+walk {parse:>7.2}   word scan {scan:>7.2}   {:>5.2}x   \
         encode {encode:>7.2}   memcpy {copy:>7.2}   {:>5.2}x",
        parse / scan,
        encode / copy
    );
}

fn main() {
    let seg = |i: u32| Segment::new(0x100 + i, 0x1000, 0x7f00_0000_0000 + u64::from(i) * 0x1000);
    let write16: Vec<Segment> = (0..16).map(seg).collect();
    let reads: Vec<ReadSegment> = (0..4).map(|i| ReadSegment::new(0x40, seg(i))).collect();
    let reply: Vec<Segment> = (0..8).map(seg).collect();
    let writes: [&[Segment]; 1] = [&write16];
    let xid = 0x1234_5678;
    println!("ns per operation (median of {RUNS} runs of {N})");
    bench(
        "RDMA_MSG, empty lists",
        &HeaderRepr {
            xid,
            credit: 128,
            body: BodyRepr::Msg(ChunkListsRepr::EMPTY),
        },
    );
    bench(
        "RDMA_MSG, 1 write chunk x 16 segs",
        &HeaderRepr {
            xid,
            credit: 128,
            body: BodyRepr::Msg(ChunkListsRepr {
                reads: &[],
                writes: &writes,
                reply: None,
            }),
        },
    );
    bench(
        "RDMA_MSG, 4 reads + 8-seg reply",
        &HeaderRepr {
            xid,
            credit: 128,
            body: BodyRepr::Msg(ChunkListsRepr {
                reads: &reads,
                writes: &[],
                reply: Some(&reply),
            }),
        },
    );
}
