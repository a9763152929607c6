//! iWARP codec throughput: CRC32c and the FPDU data path, beside a memcpy baseline.
//!
//! Run: `cargo bench -p rpcrdma-perf --bench iwarp` (a few seconds). Prints GB/s for:
//! - CRC32c over 64 KiB: the dispatching path (SSE4.2 when present) and the portable
//!   slicing-by-8 table path;
//! - segmenting a 64 KiB Send into FPDUs for a 1460-octet MSS (`Segmenter::next_into`,
//!   i.e. header encode plus payload copy) with CRC off and on;
//! - parsing that FPDU stream with `FpduReader` in 64 KiB reads, copying payload out as
//!   placement would, CRC off and on;
//! - a plain `copy_from_slice` of 64 KiB, the floor for any copying path.
//!
//! Each figure is the median of several runs; on a shared 2-core machine expect 10-20 %
//! noise.

use std::hint::black_box;
use std::time::Instant;

use rpcrdma::iwarp::crc32c::{crc32c, crc32c_portable, hardware_accelerated};
use rpcrdma::iwarp::fpdu::mulpdu;
use rpcrdma::iwarp::rdmap::Opcode;
use rpcrdma::iwarp::reader::{FpduEvent, FpduReader};
use rpcrdma::iwarp::segmenter::{MessageTarget, Segmenter};

const RUNS: usize = 7;
const LEN: usize = 64 * 1024;
const ITERS: usize = 2000;

fn gbps(mut run: impl FnMut()) -> f64 {
    run();
    let mut samples: Vec<f64> = (0..RUNS)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..ITERS {
                run();
            }
            (LEN * ITERS) as f64 / t.elapsed().as_nanos() as f64
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    samples[RUNS / 2]
}

fn segment(message: &[u8], out: &mut [u8], crc: bool) -> usize {
    let m = usize::from(mulpdu(1460).unwrap_or(1454));
    let mut seg = Segmenter::new(
        Opcode::Send,
        MessageTarget::Untagged {
            msn: 1,
            inval_stag: 0,
        },
        message,
        m,
        crc,
    )
    .expect("valid");
    let mut n = 0;
    while let Some(r) = seg.next_into(&mut out[n..]) {
        n += r.expect("fits");
    }
    n
}

fn parse(stream: &[u8], sink: &mut [u8], crc: bool) {
    let mut r = FpduReader::new(crc);
    let mut mo = 0usize;
    for piece in stream.chunks(LEN) {
        let mut off = 0;
        loop {
            let s = r.step(&piece[off..]).expect("valid");
            off += s.consumed;
            match s.event {
                None => break,
                Some(FpduEvent::Header { header, .. }) => {
                    if let rpcrdma::iwarp::rdmap::Placement::Untagged { mo: m, .. } =
                        header.placement
                    {
                        mo = m as usize;
                    }
                }
                Some(FpduEvent::Payload { offset, data }) => {
                    sink[mo + offset..mo + offset + data.len()].copy_from_slice(data);
                }
                Some(FpduEvent::End) => {}
            }
        }
    }
}

fn main() {
    let message: Vec<u8> = (0..LEN).map(|i| (i * 13) as u8).collect();
    let mut out = vec![0u8; LEN * 2];
    let mut sink = vec![0u8; LEN];
    println!(
        "GB/s over {} KiB (median of {RUNS} runs of {ITERS}); SSE4.2 CRC: {}",
        LEN / 1024,
        hardware_accelerated()
    );
    let crc_hw = gbps(|| {
        black_box(crc32c(black_box(&message)));
    });
    let crc_sw = gbps(|| {
        black_box(crc32c_portable(black_box(&message)));
    });
    let copy = gbps(|| {
        sink.copy_from_slice(black_box(&message));
        black_box(&sink);
    });
    println!("crc32c (dispatch)       {crc_hw:>7.2}");
    println!("crc32c (portable table) {crc_sw:>7.2}");
    println!("memcpy                  {copy:>7.2}");
    for crc in [false, true] {
        let seg = gbps(|| {
            black_box(segment(black_box(&message), &mut out, crc));
        });
        let n = segment(&message, &mut out, crc);
        let stream = out[..n].to_vec();
        let rd = gbps(|| {
            parse(black_box(&stream), &mut sink, crc);
            black_box(&sink);
        });
        assert_eq!(sink, message, "parse reproduces the message");
        println!("segment, crc {crc:<5}     {seg:>7.2}");
        println!("parse,   crc {crc:<5}     {rd:>7.2}");
    }
}
