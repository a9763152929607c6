//! Property tests for the iWARP codecs: encode→decode equality, stream parsing under
//! arbitrary read boundaries, and no panics on arbitrary bytes.

use proptest::prelude::*;

use rpcrdma::iwarp::crc32c::{crc32c, Crc32c, FOLD_FROM};
use rpcrdma::iwarp::fpdu::{decode_fpdu, encode_fpdu, fpdu_len, MAX_ULPDU_LEN};
use rpcrdma::iwarp::handshake::{Initiator, InitiatorConfig, Responder, ResponderConfig};
use rpcrdma::iwarp::mpa::{
    decode_frame, encode_frame, EnhancedData, FrameKind, FrameParams, Revision,
};
use rpcrdma::iwarp::rdmap::{Opcode, Placement, ReadRequest, SegmentHeader};
use rpcrdma::iwarp::reader::{FpduEvent, FpduReader};
use rpcrdma::iwarp::segmenter::{MessageTarget, Segmenter};
use rpcrdma::iwarp::terminate::{Terminate, TerminateCode, TerminateLayout};

fn opcode() -> impl Strategy<Value = Opcode> {
    prop::sample::select(Opcode::ALL.to_vec())
}

fn header() -> impl Strategy<Value = SegmentHeader> {
    (
        opcode(),
        any::<bool>(),
        any::<u32>(),
        any::<u64>(),
        any::<u32>(),
        any::<u32>(),
    )
        .prop_map(|(op, last, a, to, msn, mo)| {
            if op.is_tagged() {
                SegmentHeader::tagged(op, last, a, to)
            } else {
                let inval = if op.carries_invalidate_stag() { a } else { 0 };
                SegmentHeader::untagged(op, last, inval, msn, mo)
            }
        })
}

fn target_for(op: Opcode) -> impl Strategy<Value = MessageTarget> {
    (any::<u32>(), any::<u32>(), 0u64..(u64::MAX / 2)).prop_map(move |(a, b, to)| {
        if op.is_tagged() {
            MessageTarget::Tagged { stag: a, to }
        } else {
            MessageTarget::Untagged {
                msn: b,
                inval_stag: if op.carries_invalidate_stag() { a } else { 0 },
            }
        }
    })
}

/// A message: opcode, target, payload, MULPDU.
fn message() -> impl Strategy<Value = (Opcode, MessageTarget, Vec<u8>, usize)> {
    opcode().prop_flat_map(|op| {
        (
            Just(op),
            target_for(op),
            prop::collection::vec(any::<u8>(), 0..600),
            22usize..300,
        )
    })
}

/// Splits `data` at the given (sorted, deduplicated) cut points.
fn pieces<'a>(data: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (data.len() + 1)).collect();
    cuts.sort_unstable();
    cuts.dedup();
    let mut out = Vec::new();
    let mut prev = 0;
    for c in cuts {
        out.push(&data[prev..c]);
        prev = c;
    }
    out.push(&data[prev..]);
    out
}

/// CRC32c by its definition, one bit at a time (RFC 3720 §12.1, reflected polynomial
/// 0x82F63B78): the oracle for the engine's CRC, which mixes a hand-written short path
/// and the `crc32c` crate by length.
fn crc32c_bitwise(data: &[u8]) -> u32 {
    let mut reg = !0u32;
    for &b in data {
        reg ^= u32::from(b);
        for _ in 0..8 {
            reg = if reg & 1 != 0 {
                (reg >> 1) ^ 0x82F6_3B78
            } else {
                reg >> 1
            };
        }
    }
    !reg
}

/// Lengths that matter to the CRC's implementations: short pieces (the hand-written
/// path), either side of the switch to the fold (or the crate, on CPUs without
/// VPCLMULQDQ), either side of the crate's switch to three chains (768) and of its long
/// interleaved block (3 x 8 KiB), and anything up to 64 KiB.
fn crc_len() -> impl Strategy<Value = usize> {
    let t = FOLD_FROM;
    prop_oneof![
        0usize..64,
        (t - 16)..(t + 16),
        (768 - 16usize)..(768 + 16),
        (3 * 8192 - 16usize)..(3 * 8192 + 16),
        0usize..(64 << 10),
    ]
}

type Parsed = Vec<(SegmentHeader, Vec<u8>)>;

/// Feeds the pieces to a reader; returns the FPDUs, or the first error.
fn read_pieces(crc: bool, parts: &[&[u8]]) -> Result<Parsed, rpcrdma::iwarp::fpdu::FpduError> {
    let mut r = FpduReader::new(crc);
    let mut out = Vec::new();
    let mut cur: Option<(SegmentHeader, Vec<u8>)> = None;
    for p in parts {
        let mut off = 0;
        loop {
            let s = r.step(&p[off..])?;
            off += s.consumed;
            match s.event {
                None => break,
                Some(FpduEvent::Header { header, .. }) => cur = Some((header, Vec::new())),
                Some(FpduEvent::Payload { data, .. }) => {
                    if let Some((_, b)) = cur.as_mut() {
                        b.extend_from_slice(data);
                    }
                }
                Some(FpduEvent::End) => {
                    if let Some(c) = cur.take() {
                        out.push(c);
                    }
                }
            }
        }
    }
    Ok(out)
}

proptest! {
    #[test]
    fn segment_header_roundtrip(h in header()) {
        let mut buf = [0u8; 18];
        let n = h.encode(&mut buf).expect("generated headers are valid");
        prop_assert_eq!(n, h.encoded_len());
        prop_assert_eq!(SegmentHeader::decode(&buf[..n]), Ok((h, n)));
    }

    #[test]
    fn fpdu_roundtrip(h in header(), payload in prop::collection::vec(any::<u8>(), 0..400), crc in any::<bool>()) {
        let mut buf = vec![0u8; 500];
        let n = encode_fpdu(&mut buf, &h, &payload, crc).expect("fits");
        prop_assert_eq!(n, fpdu_len(h.encoded_len() + payload.len()));
        prop_assert_eq!(n % 4, 0);
        let f = decode_fpdu(&buf[..n], crc, MAX_ULPDU_LEN).expect("valid");
        prop_assert_eq!(f.header, h);
        prop_assert_eq!(f.payload, &payload[..]);
        prop_assert_eq!(f.len, n);
    }

    #[test]
    fn read_request_roundtrip(a in any::<u32>(), b in any::<u64>(), c in any::<u32>(), d in any::<u32>(), e in any::<u64>()) {
        let rr = ReadRequest { sink_stag: a, sink_to: b, size: c, source_stag: d, source_to: e };
        prop_assert_eq!(ReadRequest::decode(&rr.to_bytes()), Ok(rr));
    }

    #[test]
    fn terminate_roundtrip(
        layer in 0u8..16, etype in 0u8..16, code in any::<u8>(),
        ddp in prop::option::of(header()), m in any::<bool>(), seg_len in any::<u16>(),
        rdma in prop::option::of(prop::collection::vec(any::<u8>(), 0..=28)),
    ) {
        let mut ddp_buf = [0u8; 18];
        let ddp_bytes = ddp.map(|h| h.encode(&mut ddp_buf).expect("valid"));
        let t = Terminate {
            code: TerminateCode::from_parts(layer, etype, code),
            segment_length: if ddp_bytes.is_some() && m { Some(seg_len) } else { None },
            ddp_header: ddp_bytes.map(|n| &ddp_buf[..n]),
            rdma_header: rdma.as_deref(),
            layout: TerminateLayout::Rfc5040,
        };
        let mut out = [0u8; 64];
        let n = t.encode(&mut out).expect("valid");
        prop_assert_eq!(n, t.encoded_len());
        prop_assert_eq!(t.code.to_parts(), (layer, etype, code));
        // Read as RFC 5040 lays it out, every Terminate comes back whole.
        prop_assert_eq!(Terminate::decode_as(&out[..n], TerminateLayout::Rfc5040), Ok(t));
        // The layout-guessing decode may read an unassigned RFC code as Linux siw's
        // nibble-swapped layout, and only when that reading is an assigned code.
        let linux = Terminate::decode_as(&out[..n], TerminateLayout::LinuxSiw);
        let swapped_assigned =
            matches!(&linux, Ok(l) if !matches!(l.code, TerminateCode::Unknown { .. }));
        if matches!(t.code, TerminateCode::Unknown { .. }) && swapped_assigned {
            prop_assert_eq!(Terminate::decode(&out[..n]), linux);
        } else {
            prop_assert_eq!(Terminate::decode(&out[..n]), Ok(t));
        }
    }

    #[test]
    fn mpa_frame_roundtrip(
        reply in any::<bool>(), crc in any::<bool>(), reject in any::<bool>(), v2 in any::<bool>(),
        ird in 0u16..=0x3FFF, ord in 0u16..=0x3FFF, flags in any::<[bool; 4]>(),
        pd in prop::collection::vec(any::<u8>(), 0..=508),
    ) {
        let enhanced = v2.then_some(EnhancedData {
            ird, ord, peer_to_peer: flags[0], send_rtr: flags[1], write_rtr: flags[2], read_rtr: flags[3],
        });
        let params = FrameParams {
            kind: if reply { FrameKind::Reply } else { FrameKind::Request },
            crc, reject,
            revision: if v2 { Revision::V2 } else { Revision::V1 },
            enhanced,
        };
        let mut buf = [0u8; 600];
        let n = encode_frame(&mut buf, &params, &pd).expect("fits");
        let f = decode_frame(&buf[..n]).expect("valid");
        prop_assert_eq!(f.header.kind, params.kind);
        prop_assert_eq!((f.header.crc, f.header.reject, f.header.markers), (crc, reject, false));
        prop_assert_eq!(f.revision, params.revision);
        prop_assert_eq!(f.enhanced, enhanced);
        prop_assert_eq!(f.ulp_private_data, &pd[..]);
        prop_assert_eq!(f.len, n);
    }

    #[test]
    fn crc_is_independent_of_how_data_is_fed(data in prop::collection::vec(any::<u8>(), 0..300), cuts in prop::collection::vec(any::<usize>(), 0..6)) {
        let mut c = Crc32c::new();
        for p in pieces(&data, &cuts) {
            c.update(p);
        }
        prop_assert_eq!(c.value(), crc32c(&data));
    }

    /// The engine's CRC equals the definition and the `crc32c` crate on random octets of
    /// every interesting length, at any alignment, fed whole or in random pieces (the
    /// fixed RFC 3720 B.4 vectors are in iwarp_vectors).
    #[test]
    fn crc_equals_the_definition_and_the_crate(
        len in crc_len(),
        start in 0usize..8,
        seed in any::<u64>(),
        cuts in prop::collection::vec(any::<usize>(), 0..6),
    ) {
        let mut x = seed | 1;
        let backing: Vec<u8> = (0..start + len)
            .map(|_| {
                // xorshift64: cheap random octets, reproducible from the seed.
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let data = &backing[start..];
        let want = crc32c_bitwise(data);
        prop_assert_eq!(crc32c(data), want);
        prop_assert_eq!(::crc32c::crc32c(data), want);
        let mut c = Crc32c::new();
        for p in pieces(data, &cuts) {
            c.update(p);
        }
        prop_assert_eq!(c.value(), want);
    }

    /// Segment a few messages, cut the byte stream anywhere, and the reader still yields
    /// exactly the FPDUs the contiguous decoder sees; each message reassembles from them
    /// with offsets advancing and Last on the final FPDU only.
    #[test]
    fn stream_parse_is_independent_of_read_boundaries(
        msgs in prop::collection::vec(message(), 1..4),
        crc in any::<bool>(),
        cuts in prop::collection::vec(any::<usize>(), 0..40),
    ) {
        let mut stream = Vec::new();
        let mut counts = Vec::new();
        for (op, target, payload, m) in &msgs {
            let mut seg = Segmenter::new(*op, *target, payload, *m, crc).expect("valid");
            counts.push(seg.fpdu_count());
            while let Some(p) = seg.next_parts() {
                stream.extend_from_slice(p.head());
                stream.extend_from_slice(p.payload());
                stream.extend_from_slice(p.trailer());
            }
        }
        let mut contiguous = Vec::new();
        let mut off = 0;
        while off < stream.len() {
            let f = decode_fpdu(&stream[off..], crc, MAX_ULPDU_LEN).expect("valid");
            contiguous.push((f.header, f.payload.to_vec()));
            off += f.len;
        }
        let got = read_pieces(crc, &pieces(&stream, &cuts)).expect("valid stream");
        prop_assert_eq!(&got, &contiguous);

        let mut it = got.iter();
        for ((op, target, payload, _), count) in msgs.iter().zip(counts) {
            let mut whole = Vec::new();
            for i in 0..count {
                let (h, data) = it.next().expect("enough FPDUs");
                prop_assert_eq!(h.opcode, *op);
                prop_assert_eq!(h.last, i + 1 == count);
                match (h.placement, target) {
                    (Placement::Tagged { stag, to }, MessageTarget::Tagged { stag: s, to: t }) => {
                        prop_assert_eq!(stag, *s);
                        prop_assert_eq!(to, t + whole.len() as u64);
                    }
                    (Placement::Untagged { msn, mo, inval_stag, .. }, MessageTarget::Untagged { msn: n, inval_stag: i }) => {
                        prop_assert_eq!((msn, inval_stag), (*n, *i));
                        prop_assert_eq!(mo as usize, whole.len());
                    }
                    other => prop_assert!(false, "model mismatch {:?}", other),
                }
                whole.extend_from_slice(data);
            }
            prop_assert_eq!(&whole, payload);
        }
        prop_assert!(it.next().is_none());
    }

    #[test]
    fn arbitrary_bytes_never_panic_the_stream_reader(
        data in prop::collection::vec(any::<u8>(), 0..400),
        cuts in prop::collection::vec(any::<usize>(), 0..10),
        crc in any::<bool>(),
    ) {
        let _ = read_pieces(crc, &pieces(&data, &cuts));
    }

    #[test]
    fn arbitrary_bytes_never_panic_the_decoders(data in prop::collection::vec(any::<u8>(), 0..600)) {
        let _ = decode_fpdu(&data, true, MAX_ULPDU_LEN);
        let _ = decode_fpdu(&data, false, 100);
        let _ = SegmentHeader::decode(&data);
        let _ = Terminate::decode(&data);
        let _ = ReadRequest::decode(&data);
        let _ = decode_frame(&data);
    }

    /// Frames that start with a valid key reach deep into the handshake code.
    #[test]
    fn arbitrary_frames_never_panic_the_handshake(
        reply in any::<bool>(),
        rest in prop::collection::vec(any::<u8>(), 0..600),
        cuts in prop::collection::vec(any::<usize>(), 0..6),
    ) {
        let mut bytes = if reply { b"MPA ID Rep Frame".to_vec() } else { b"MPA ID Req Frame".to_vec() };
        bytes.extend_from_slice(&rest);
        let mut ini = Initiator::new(InitiatorConfig::default(), b"x").expect("fits");
        let mut resp = Responder::new(ResponderConfig::default());
        for p in pieces(&bytes, &cuts) {
            let _ = ini.feed(p);
            if let Ok(prog) = resp.feed(p) {
                if prog.done.is_some() {
                    let _ = resp.accept(b"y");
                }
            } else {
                let _ = resp.reject(b"z");
            }
        }
    }
}
