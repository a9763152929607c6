//! Outbound segmentation and inbound stream parsing, deterministic cases.

use rpcrdma::iwarp::fpdu::{
    crc_to_wire, decode_fpdu, encode_fpdu, fpdu_len, mulpdu, FpduError, MAX_ULPDU_LEN,
};
use rpcrdma::iwarp::rdmap::{Opcode, Placement, ReadRequest, SegmentError, SegmentHeader};
use rpcrdma::iwarp::reader::{FpduEvent, FpduReader};
use rpcrdma::iwarp::segmenter::{MessageTarget, Segmenter};
use rpcrdma::iwarp::terminate::{MpaLlpError, TerminateCode};

/// Runs a reader over `stream` fed in `chunk`-sized reads; returns each FPDU's header and
/// reassembled payload.
fn read_all(
    reader: &mut FpduReader,
    stream: &[u8],
    chunk: usize,
) -> Result<Vec<(SegmentHeader, Vec<u8>)>, FpduError> {
    let mut out: Vec<(SegmentHeader, Vec<u8>)> = Vec::new();
    let mut pending: Option<(SegmentHeader, usize, Vec<u8>)> = None;
    for piece in stream.chunks(chunk.max(1)) {
        let mut off = 0;
        loop {
            let step = reader.step(&piece[off..])?;
            off += step.consumed;
            match step.event {
                None => {
                    assert_eq!(off, piece.len(), "no event means all input was used");
                    break;
                }
                Some(FpduEvent::Header {
                    header,
                    payload_len,
                }) => {
                    assert!(pending.is_none(), "header inside an FPDU");
                    pending = Some((header, payload_len, Vec::new()));
                }
                Some(FpduEvent::Payload { offset, data }) => {
                    let (_, len, buf) = pending.as_mut().expect("payload after header");
                    assert_eq!(offset, buf.len(), "payload arrives in order");
                    buf.extend_from_slice(data);
                    assert!(buf.len() <= *len);
                }
                Some(FpduEvent::End) => {
                    let (h, len, buf) = pending.take().expect("end after header");
                    assert_eq!(buf.len(), len);
                    out.push((h, buf));
                }
            }
        }
    }
    assert!(
        pending.is_none() && reader.at_boundary(),
        "stream ends between FPDUs"
    );
    Ok(out)
}

fn segment_all(seg: &mut Segmenter<'_>) -> Vec<u8> {
    let mut stream = Vec::new();
    while let Some(p) = seg.next_parts() {
        stream.extend_from_slice(p.head());
        stream.extend_from_slice(p.payload());
        stream.extend_from_slice(p.trailer());
    }
    stream
}

#[test]
fn untagged_send_splits_with_advancing_mo_and_one_last_flag() {
    let msg: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
    // MULPDU 1454 would hold it all; use 120 to force splits: payload per FPDU is
    // (120 - 18) rounded down to four = 100.
    let mut seg = Segmenter::new(
        Opcode::SendInvalidate,
        MessageTarget::Untagged {
            msn: 42,
            inval_stag: 0xABCD,
        },
        &msg,
        120,
        true,
    )
    .expect("valid");
    assert_eq!(seg.max_payload(), 100);
    assert_eq!(seg.fpdu_count(), 10);
    let stream = segment_all(&mut seg);
    assert!(seg.is_done() && seg.next_parts().is_none());

    let fpdus = read_all(&mut FpduReader::new(true), &stream, 1500).expect("valid");
    assert_eq!(fpdus.len(), 10);
    let mut whole = Vec::new();
    for (i, (h, payload)) in fpdus.iter().enumerate() {
        assert_eq!(h.opcode, Opcode::SendInvalidate);
        assert_eq!(h.last, i == 9);
        assert_eq!(
            h.placement,
            Placement::Untagged {
                inval_stag: 0xABCD,
                qn: 0,
                msn: 42,
                mo: (i * 100) as u32
            }
        );
        whole.extend_from_slice(payload);
    }
    assert_eq!(whole, msg);
}

#[test]
fn tagged_write_splits_with_advancing_to() {
    let msg = vec![0x5Au8; 2 * 1440 + 3];
    let m = usize::from(mulpdu(1460).expect("normal MSS"));
    let mut seg = Segmenter::new(
        Opcode::RdmaWrite,
        MessageTarget::Tagged {
            stag: 0x1000,
            to: 0xFFFF_0000,
        },
        &msg,
        m,
        false,
    )
    .expect("valid");
    // 1454 - 14 = 1440 per FPDU: every non-final FPDU fills the 1460-octet segment.
    assert_eq!(seg.max_payload(), 1440);
    let mut sizes = Vec::new();
    let mut tos = Vec::new();
    while let Some(p) = seg.next_parts() {
        sizes.push(p.len());
        if let Placement::Tagged { to, .. } = p.header().placement {
            tos.push(to);
        }
    }
    assert_eq!(sizes, vec![1460, 1460, 2 + 14 + 3 + 1 + 4]);
    assert_eq!(
        tos,
        vec![0xFFFF_0000, 0xFFFF_0000 + 1440, 0xFFFF_0000 + 2880]
    );
}

#[test]
fn zero_length_message_is_one_fpdu() {
    let mut seg = Segmenter::new(
        Opcode::Send,
        MessageTarget::Untagged {
            msn: 1,
            inval_stag: 0,
        },
        &[],
        1454,
        true,
    )
    .expect("valid");
    assert_eq!(seg.fpdu_count(), 1);
    let stream = segment_all(&mut seg);
    assert_eq!(stream.len(), 24);
    let fpdus = read_all(&mut FpduReader::new(true), &stream, 1).expect("valid");
    assert_eq!(fpdus.len(), 1);
    assert!(fpdus[0].0.last && fpdus[0].1.is_empty());
}

#[test]
fn next_into_retries_after_a_small_buffer_and_matches_parts() {
    let msg = [1u8; 50];
    let target = MessageTarget::Tagged { stag: 9, to: 0 };
    let mut a = Segmenter::new(Opcode::ReadResponse, target, &msg, 40, true).expect("valid");
    let mut b = a.clone();
    let mut small = [0u8; 10];
    assert!(matches!(
        a.next_into(&mut small),
        Some(Err(FpduError::BufferTooSmall(_)))
    ));
    let mut buf = [0u8; 64];
    let mut from_into = Vec::new();
    while let Some(r) = a.next_into(&mut buf) {
        let n = r.expect("fits");
        from_into.extend_from_slice(&buf[..n]);
    }
    assert_eq!(from_into, segment_all(&mut b));
}

#[test]
fn segmenter_rejects_bad_setups() {
    let untagged = MessageTarget::Untagged {
        msn: 1,
        inval_stag: 0,
    };
    assert_eq!(
        Segmenter::new(Opcode::RdmaWrite, untagged, b"x", 1454, false).err(),
        Some(FpduError::Segment(SegmentError::WrongBufferModel {
            opcode: Opcode::RdmaWrite,
            tagged: false
        }))
    );
    assert_eq!(
        Segmenter::new(
            Opcode::Send,
            MessageTarget::Tagged { stag: 1, to: 0 },
            b"x",
            1454,
            false
        )
        .err(),
        Some(FpduError::Segment(SegmentError::WrongBufferModel {
            opcode: Opcode::Send,
            tagged: true
        }))
    );
    assert_eq!(
        Segmenter::new(Opcode::Send, untagged, b"x", 21, false).err(),
        Some(FpduError::MulpduTooSmall {
            mulpdu: 21,
            min: 22
        })
    );
    assert_eq!(
        Segmenter::new(
            Opcode::RdmaWrite,
            MessageTarget::Tagged {
                stag: 1,
                to: u64::MAX - 1
            },
            b"abc",
            1454,
            false
        )
        .err(),
        Some(FpduError::MessageTooLong { len: 3 })
    );
    // A Read Request is one small FPDU carrying its 28-octet body.
    let rr = ReadRequest {
        sink_stag: 1,
        sink_to: 2,
        size: 3,
        source_stag: 4,
        source_to: 5,
    }
    .to_bytes();
    let mut seg = Segmenter::new(Opcode::ReadRequest, untagged, &rr, 1454, false).expect("valid");
    let p = seg.next_parts().expect("one FPDU");
    assert_eq!(
        p.header().placement,
        Placement::Untagged {
            inval_stag: 0,
            qn: 1,
            msn: 1,
            mo: 0
        }
    );
    assert!(seg.next_parts().is_none());
}

#[test]
fn reader_reports_crc_failure_at_the_end_and_stays_failed() {
    let h = SegmentHeader::untagged(Opcode::Send, true, 0, 1, 0);
    let mut buf = [0u8; 64];
    let n = encode_fpdu(&mut buf, &h, b"payload!", true).expect("fits");
    buf[25] ^= 0x80;
    let mut r = FpduReader::new(true);
    let mut off = 0;
    let mut events = 0;
    let err = loop {
        match r.step(&buf[off..n]) {
            Ok(s) => {
                off += s.consumed;
                events += usize::from(s.event.is_some());
                assert!(s.event.is_some(), "the FPDU is all there");
            }
            Err(e) => break e,
        }
    };
    assert_eq!(
        events, 2,
        "header and payload were delivered before the CRC"
    );
    assert!(matches!(err, FpduError::CrcMismatch { .. }));
    assert_eq!(
        err.terminate_code(),
        TerminateCode::Mpa(MpaLlpError::CrcError)
    );
    assert_eq!(r.step(b"more"), Err(err), "sticky");
    // Without CRC the same octets parse.
    assert_eq!(
        read_all(&mut FpduReader::new(false), &buf[..n], 3).map(|v| v.len()),
        Ok(1)
    );
}

#[test]
fn a_waived_crc_mismatch_ends_only_that_fpdu_and_is_counted() {
    // Two FPDUs, both with a corrupted payload octet: the first is waived once its
    // header is seen, the second is not (the waiver lapses at the next header).
    let h = SegmentHeader::tagged(Opcode::ReadResponse, true, 0, 0);
    let mut buf = [0u8; 128];
    let n = encode_fpdu(&mut buf, &h, b"stale octets", true).expect("fits");
    let m = encode_fpdu(&mut buf[n..], &h, b"stale octets", true).expect("fits");
    buf[n - 8] ^= 0x01;
    buf[n + m - 8] ^= 0x01;
    let mut r = FpduReader::new(true);
    let mut off = 0;
    let mut ends = 0;
    let err = loop {
        match r.step(&buf[off..n + m]) {
            Ok(s) => {
                off += s.consumed;
                match s.event {
                    Some(FpduEvent::Header { .. }) if ends == 0 => r.waive_crc(),
                    Some(FpduEvent::End) => ends += 1,
                    _ => {}
                }
            }
            Err(e) => break e,
        }
    };
    assert_eq!(ends, 1, "the waived FPDU ended normally");
    assert_eq!(r.waived_mismatches(), 1);
    assert!(matches!(err, FpduError::CrcMismatch { .. }), "{err:?}");
    // A waived FPDU whose CRC is right is not counted.
    let mut r = FpduReader::new(true);
    let k = encode_fpdu(&mut buf, &h, b"fine", true).expect("fits");
    let mut off = 0;
    while off < k {
        let s = r.step(&buf[off..k]).expect("valid");
        off += s.consumed;
        if matches!(s.event, Some(FpduEvent::Header { .. })) {
            r.waive_crc();
        }
    }
    assert!(r.at_boundary());
    assert_eq!(r.waived_mismatches(), 0);
}

#[test]
fn reader_validates_lengths_and_headers_early() {
    // Length below a tagged header.
    assert_eq!(
        FpduReader::new(false).step(&[0x00, 0x0D]),
        Err(FpduError::UlpduTooShort { len: 13, min: 14 })
    );
    // Untagged control octet with a ULPDU too short for its 18-octet header.
    assert_eq!(
        FpduReader::new(false).step(&[0x00, 0x10, 0x41]),
        Err(FpduError::UlpduTooShort { len: 16, min: 18 })
    );
    // Above a configured limit, detected from the length field alone.
    assert_eq!(
        FpduReader::with_max_ulpdu(false, 1454).step(&[0x05, 0xFF]),
        Err(FpduError::UlpduTooLong {
            len: 0x5FF,
            max: 1454
        })
    );
    // A bad header is reported once it is complete.
    let mut r = FpduReader::new(false);
    let bad = [
        0x00, 0x12, 0x41, 0x40, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0,
    ];
    assert_eq!(r.step(&bad[..10]).map(|s| s.event), Ok(None));
    assert_eq!(
        r.step(&bad[10..]),
        Err(FpduError::Segment(SegmentError::WrongBufferModel {
            opcode: Opcode::RdmaWrite,
            tagged: false
        }))
    );
}

#[test]
fn reader_and_contiguous_decoder_agree_on_a_mixed_stream() {
    let mut stream = Vec::new();
    let mut buf = [0u8; 256];
    let headers = [
        SegmentHeader::untagged(Opcode::Send, true, 0, 1, 0),
        SegmentHeader::tagged(Opcode::RdmaWrite, false, 5, 0),
        SegmentHeader::tagged(Opcode::RdmaWrite, true, 5, 3),
        SegmentHeader::untagged(Opcode::ReadRequest, true, 0, 1, 0),
        SegmentHeader::tagged(Opcode::ReadResponse, true, 6, 100),
        SegmentHeader::untagged(Opcode::Terminate, true, 0, 1, 0),
    ];
    let payloads: [&[u8]; 6] = [b"a", b"bcd", b"efghi", &[0u8; 28], b"", b"\0\0\0\0"];
    for (h, p) in headers.iter().zip(payloads) {
        let n = encode_fpdu(&mut buf, h, p, true).expect("fits");
        stream.extend_from_slice(&buf[..n]);
    }
    let mut contiguous = Vec::new();
    let mut off = 0;
    while off < stream.len() {
        let f = decode_fpdu(&stream[off..], true, MAX_ULPDU_LEN).expect("valid");
        contiguous.push((f.header, f.payload.to_vec()));
        off += f.len;
    }
    for chunk in [1, 2, 3, 5, 7, 64, 4096] {
        let got = read_all(&mut FpduReader::new(true), &stream, chunk).expect("valid");
        assert_eq!(got, contiguous, "chunk {chunk}");
    }
    assert_eq!(contiguous.len(), 6);
    assert_eq!(crc_to_wire(0x0102_0304), [4, 3, 2, 1]);
}

/// Payload the caller reads past the reader (straight into the target) still counts
/// for the CRC: taking the exact octets ends the segment cleanly, one flipped octet
/// fails it, and what follows the payload is parsed as usual.
#[test]
fn payload_taken_outside_the_reader_is_still_crc_checked() {
    let payload: Vec<u8> = (0..5000u32).map(|i| (i * 7) as u8).collect();
    let h = SegmentHeader::tagged(Opcode::RdmaWrite, true, 0x1234, 0);
    let mut f = vec![0u8; fpdu_len(h.encoded_len() + payload.len())];
    let n = encode_fpdu(&mut f, &h, &payload, true).expect("FPDU");
    let hdr_end = 2 + h.encoded_len();
    for flip in [false, true] {
        let mut r = FpduReader::new(true);
        let step = r.step(&f[..hdr_end]).expect("header");
        assert_eq!(step.consumed, hdr_end);
        assert!(matches!(
            step.event,
            Some(FpduEvent::Header {
                payload_len: 5000,
                ..
            })
        ));
        assert_eq!((r.payload_remaining(), r.payload_offset()), (5000, 0));
        let mut placed = payload.clone();
        if flip {
            placed[4321] ^= 1;
        }
        assert_eq!(r.take_payload(&placed[..1000]), 0);
        assert_eq!((r.payload_remaining(), r.payload_offset()), (4000, 1000));
        // Octets past the payload are not taken.
        let mut longer = placed[1000..].to_vec();
        longer.extend_from_slice(&[0xEE; 8]);
        assert_eq!(r.take_payload(&longer), 1000);
        assert_eq!(r.payload_remaining(), 0);
        let rest = &f[hdr_end + 5000..n];
        let mut at = 0;
        let mut end = None;
        while at < rest.len() {
            match r.step(&rest[at..]) {
                Ok(s) => {
                    at += s.consumed;
                    if s.event == Some(FpduEvent::End) {
                        end = Some(Ok(()));
                    }
                }
                Err(e) => {
                    end = Some(Err(e));
                    break;
                }
            }
        }
        match (flip, end) {
            (false, Some(Ok(()))) => {}
            (true, Some(Err(FpduError::CrcMismatch { .. }))) => {}
            (flip, other) => panic!("flip {flip}: {other:?}"),
        }
    }
}
