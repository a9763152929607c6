//! iWARP codec throughput: CRC32c and the FPDU data path, beside a memcpy baseline.
//!
//! Run: `cargo bench -p rpcrdma-perf --bench iwarp` (a few seconds). Prints GB/s for:
//! - CRC32c over 16 B to 1 MiB (64 B, 4 KiB, 64 KiB and 1 MiB among them), in the same
//!   process, samples interleaved: the engine's path (what every FPDU uses: the path
//!   `rpcrdma::iwarp::crc32c::path()` chose for this CPU, or `RPCRDMA_CRC32C` forced),
//!   the `crc32c` crate called directly (three interleaved `crc32` chains), a
//!   hand-written single chain of SSE4.2 `crc32` instructions (kept in this file, below,
//!   so the comparison can be rerun), the 128-bit PCLMULQDQ fold with 4 and with 8
//!   lanes, and the 256-bit VPCLMULQDQ fold (a fold column reads as the crate's where
//!   the CPU lacks it or the piece is shorter than the fold takes). `engine/crate`
//!   divides the engine's figure by the crate's, `engine/chain` by the single chain's;
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

use rpcrdma::iwarp::crc32c::{crc32c, hardware_accelerated};
use rpcrdma::iwarp::fpdu::mulpdu;
use rpcrdma::iwarp::rdmap::Opcode;
use rpcrdma::iwarp::reader::{FpduEvent, FpduReader};
use rpcrdma::iwarp::segmenter::{MessageTarget, Segmenter};

const RUNS: usize = 7;
const LEN: usize = 64 * 1024;
const ITERS: usize = 2000;
/// Buffer sizes of the CRC rows: an FPDU header, a small Send, either side of the
/// engine's switch to the fold, the crate's switch to three chains, a full FPDU at a
/// 1460-octet MSS, a page, a large FPDU stream, a bulk chunk.
const CRC_SIZES: [usize; 10] = [16, 64, 128, 256, 512, 768, 1454, 4 << 10, 64 << 10, 1 << 20];
/// Samples per CRC figure (the median is reported).
const CRC_RUNS: usize = 15;
/// Octets each CRC sample covers, so that every size is timed over a similar stretch.
const CRC_OCTETS_PER_SAMPLE: usize = 64 << 20;

/// Median GB/s of `RUNS` samples of `iters` calls of `run`, each over `len` octets.
fn gbps_of(len: usize, iters: usize, mut run: impl FnMut()) -> f64 {
    run();
    let mut samples: Vec<f64> = (0..RUNS)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..iters {
                run();
            }
            (len * iters) as f64 / t.elapsed().as_nanos() as f64
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    samples[RUNS / 2]
}

/// GB/s of one sample: `iters` calls of `run`, each over `len` octets.
fn sample(len: usize, iters: usize, mut run: impl FnMut() -> u32) -> f64 {
    let t = Instant::now();
    for _ in 0..iters {
        black_box(run());
    }
    (len * iters) as f64 / t.elapsed().as_nanos() as f64
}

fn gbps(run: impl FnMut()) -> f64 {
    gbps_of(LEN, ITERS, run)
}

/// The CRC32c the engine used before it took the `crc32c` crate, kept here as this
/// bench's baseline: one dependent chain of `crc32` instructions, eight octets each. (The
/// engine still runs this loop on pieces shorter than `FOLD_FROM`.) Off x86-64 it
/// was a slicing-by-8 table; there the baseline is the crate itself, so the ratio is 1.
mod handwritten {
    /// One-shot CRC32c, dispatching as the engine did.
    #[inline]
    pub fn crc32c(data: &[u8]) -> u32 {
        #[cfg(target_arch = "x86_64")]
        {
            if std::is_x86_feature_detected!("sse4.2") {
                // SAFETY: the CPU supports SSE4.2, checked just above.
                return !unsafe { update_sse42(!0, data) };
            }
        }
        ::crc32c::crc32c(data)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "sse4.2")]
    unsafe fn update_sse42(reg: u32, data: &[u8]) -> u32 {
        use core::arch::x86_64::{_mm_crc32_u64, _mm_crc32_u8};
        let mut r = u64::from(reg);
        let mut chunks = data.chunks_exact(8);
        for c in &mut chunks {
            let w = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
            r = _mm_crc32_u64(r, w);
        }
        let mut r = r as u32;
        for &b in chunks.remainder() {
            r = _mm_crc32_u8(r, b);
        }
        r
    }
}

/// The 128-bit carry-less fold with `LANES` lanes, one-shot, where the CPU has it (else
/// the crate, so the column reads as the crate's).
fn fold128<const LANES: usize>(data: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    {
        use rpcrdma::iwarp::crc32c::fold;
        if fold::narrow_available() && data.len() >= 16 * LANES {
            // SAFETY: the CPU has PCLMULQDQ and SSE4.2 (checked); the length is enough.
            return !unsafe { fold::narrow_lanes::<LANES>(!0, data) };
        }
    }
    ::crc32c::crc32c(data)
}

/// The 256-bit carry-less fold where the CPU has it (else the crate).
fn fold256(data: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    {
        use rpcrdma::iwarp::crc32c::fold;
        if fold::wide_available() && data.len() >= fold::WIDE_MIN {
            // SAFETY: the CPU has VPCLMULQDQ and AVX2 (checked); the length is enough.
            return !unsafe { fold::wide(!0, data) };
        }
    }
    ::crc32c::crc32c(data)
}

/// The CRC rows: each implementation over each size, same buffers, same process.
fn crc_rows() {
    #[cfg(target_arch = "x86_64")]
    let (wide, narrow) = {
        use rpcrdma::iwarp::crc32c::fold;
        (fold::wide_available(), fold::narrow_available())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let (wide, narrow) = (false, false);
    println!(
        "CRC32c GB/s (median of {CRC_RUNS} interleaved runs of {} MiB each); SSE4.2: {}; \
         PCLMULQDQ fold: {narrow}; VPCLMULQDQ fold: {wide}; the engine's path: {:?}",
        CRC_OCTETS_PER_SAMPLE >> 20,
        hardware_accelerated(),
        rpcrdma::iwarp::crc32c::path(),
    );
    println!(
        "(fold128x4/x8: the 128-bit fold with 4 or 8 lanes, from 64/128 B; below that and \
         where the CPU lacks a fold the column is the crate's)"
    );
    type Impl = (&'static str, fn(&[u8]) -> u32);
    let impls: [Impl; 6] = [
        ("engine", crc32c),
        ("crate", ::crc32c::crc32c),
        ("chain", handwritten::crc32c),
        ("fold128x4", fold128::<4>),
        ("fold128x8", fold128::<8>),
        ("fold256", fold256),
    ];
    print!("{:>8}", "size");
    for (name, _) in &impls {
        print!(" {name:>9}");
    }
    println!(
        " {:>12} {:>12} {:>11}",
        "engine/crate", "engine/chain", "best engine"
    );
    let data: Vec<u8> = (0..*CRC_SIZES.iter().max().unwrap_or(&0))
        .map(|i| (i * 13 + (i >> 9)) as u8)
        .collect();
    for len in CRC_SIZES {
        let buf = &data[..len];
        let want = handwritten::crc32c(buf);
        // Same results first: a faster CRC that disagrees is no CRC.
        for (name, f) in &impls {
            assert_eq!(f(buf), want, "{name} vs hand-written, {len} octets");
        }
        let iters = (CRC_OCTETS_PER_SAMPLE / len).max(1);
        // Samples of all alternate, so load from other work on the machine falls on all
        // of them alike and the ratios stay meaningful when the absolute figures move.
        let mut samples = vec![[0f64; CRC_RUNS]; impls.len()];
        for run in 0..=CRC_RUNS {
            for (i, (_, f)) in impls.iter().enumerate() {
                let v = sample(len, iters, || f(black_box(buf)));
                // The first round warms caches and branch predictors and is dropped.
                if run > 0 {
                    samples[i][run - 1] = v;
                }
            }
        }
        // The median, and the best sample: on a machine shared with other work the
        // fastest run is the one least disturbed.
        let stats: Vec<(f64, f64)> = samples
            .into_iter()
            .map(|mut v| {
                v.sort_by(f64::total_cmp);
                (v[CRC_RUNS / 2], v[CRC_RUNS - 1])
            })
            .collect();
        let size = if len % (1 << 20) == 0 {
            format!("{} MiB", len >> 20)
        } else if len % (1 << 10) == 0 {
            format!("{} KiB", len >> 10)
        } else {
            format!("{len} B")
        };
        print!("{size:>8}");
        for (median, _) in &stats {
            print!(" {median:>9.2}");
        }
        println!(
            " {:>11.2}x {:>11.2}x {:>11.2}",
            stats[0].0 / stats[1].0,
            stats[0].0 / stats[2].0,
            stats[0].1
        );
    }
    println!();
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
    crc_rows();
    println!(
        "GB/s over {} KiB (median of {RUNS} runs of {ITERS})",
        LEN / 1024
    );
    let copy = gbps(|| {
        sink.copy_from_slice(black_box(&message));
        black_box(&sink);
    });
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
