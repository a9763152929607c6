//! Byte-exact vectors for the iWARP codecs, derived by hand from the RFC figures.
//!
//! Each vector spells out the wire octets field by field; the comments cite the section
//! whose figure gives the layout. CRC values come from RFC 3720 Appendix B.4 (the
//! algorithm MPA adopts, RFC 5044 §4.1) or, for FPDUs, from an independent bit-at-a-time
//! CRC32c whose output tshark 4.0 reported as "Good CRC32".

use rpcrdma::iwarp::crc32c::{crc32c, Crc32c};
use rpcrdma::iwarp::ddp::{DdpControl, MsnCounters, QueueNumber};
use rpcrdma::iwarp::fpdu::{
    crc_from_wire, crc_to_wire, decode_fpdu, encode_fpdu, fpdu_len, mulpdu, pad_len, FpduError,
    MAX_ULPDU_LEN,
};
use rpcrdma::iwarp::mpa::{
    decode_frame, encode_frame, EnhancedData, FrameKind, FrameParams, MpaError, Revision,
};
use rpcrdma::iwarp::rdmap::{
    Opcode, Placement, ReadRequest, SegmentError, SegmentHeader, READ_REQUEST_LEN,
};
use rpcrdma::iwarp::terminate::{
    DdpTaggedError, DdpUntaggedError, MpaLlpError, RdmapOperationError, RdmapProtectionError,
    Terminate, TerminateCode, TerminateError,
};

fn hex(s: &str) -> Vec<u8> {
    let digits: Vec<u8> = s.bytes().filter(u8::is_ascii_hexdigit).collect();
    assert_eq!(digits.len() % 2, 0, "odd hex digit count in {s:?}");
    digits
        .chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).expect("ascii"), 16).expect("hex"))
        .collect()
}

// ---------------------------------------------------------------------------------------
// CRC32c: RFC 3720 B.4 (iSCSI), which RFC 5044 §4.1 uses for MPA.

#[test]
fn crc32c_rfc3720_b4_vectors() {
    // "32 bytes of zeroes": CRC octets aa 36 91 8a.
    assert_eq!(crc32c(&[0u8; 32]), 0x8A91_36AA);
    assert_eq!(crc_to_wire(crc32c(&[0u8; 32])), [0xAA, 0x36, 0x91, 0x8A]);
    // "32 bytes of ones": 43 ab a8 62.
    assert_eq!(crc32c(&[0xFFu8; 32]), 0x62A8_AB43);
    // "32 bytes of incrementing 00..1f": 4e 79 dd 46.
    let inc: Vec<u8> = (0u8..32).collect();
    assert_eq!(crc32c(&inc), 0x46DD_794E);
    // "32 bytes of decrementing 1f..00": 5c db 3f 11.
    let dec: Vec<u8> = (0u8..32).rev().collect();
    assert_eq!(crc32c(&dec), 0x113F_DB5C);
    // "An iSCSI - SCSI Read (10) Command PDU": 56 3a 96 d9.
    let pdu = hex(
        "01c00000 00000000 00000000 00000000 14000000 00000400 00000014 00000018
                   28000000 00000000 02000000 00000000",
    );
    assert_eq!(pdu.len(), 48);
    assert_eq!(crc_to_wire(crc32c(&pdu)), [0x56, 0x3A, 0x96, 0xD9]);
    // The CRC catalogue check value for "123456789".
    assert_eq!(crc32c(b"123456789"), 0xE306_9283);
}

#[test]
fn crc32c_streaming_matches_one_shot_across_every_split() {
    let pdu = hex(
        "01c00000 00000000 00000000 00000000 14000000 00000400 00000014 00000018
                   28000000 00000000 02000000 00000000",
    );
    for a in 0..pdu.len() {
        for b in a..pdu.len() {
            let mut c = Crc32c::new();
            c.update(&pdu[..a]);
            c.update(&pdu[a..b]);
            c.update(&pdu[b..]);
            assert_eq!(c.value(), 0xD996_3A56, "split at {a}/{b}");
        }
    }
    assert_eq!(crc_from_wire([0x56, 0x3A, 0x96, 0xD9]), 0xD996_3A56);
}

// ---------------------------------------------------------------------------------------
// MPA frames: RFC 5044 §7.1 (key, M C R Res, Rev, PD_Length), RFC 6581 §7.1 (S, IRD/ORD).

const REQ_KEY_HEX: &str = "4d504120494420526571204672616d65"; // "MPA ID Req Frame"
const REP_KEY_HEX: &str = "4d504120494420526570204672616d65"; // "MPA ID Rep Frame"

#[test]
fn mpa_request_rev2_enhanced_with_crc() {
    let expected = hex(&format!(
        "{REQ_KEY_HEX}
         50        # M=0 C=1 R=0 S=1 Res=0
         02        # Rev 2
         0007      # PD_Length: 4 IRD/ORD + 3
         0010      # A=0 B=0 IRD=16
         0004      # C=0 D=0 ORD=4
         616263    # 'abc'"
    )
    .lines()
    .map(|l| l.split('#').next().unwrap_or(""))
    .collect::<String>());
    let mut buf = [0u8; 64];
    let n = encode_frame(
        &mut buf,
        &FrameParams {
            kind: FrameKind::Request,
            crc: true,
            reject: false,
            revision: Revision::V2,
            enhanced: Some(EnhancedData::client_server(16, 4)),
        },
        b"abc",
    )
    .expect("fits");
    assert_eq!(&buf[..n], &expected[..]);

    let f = decode_frame(&expected).expect("valid");
    assert_eq!(f.header.kind, FrameKind::Request);
    assert!(f.header.crc && f.header.enhanced && !f.header.markers && !f.header.reject);
    assert_eq!(f.revision, Revision::V2);
    assert_eq!(f.enhanced, Some(EnhancedData::client_server(16, 4)));
    assert_eq!(f.ulp_private_data, b"abc");
    assert_eq!(f.len, 27);
}

#[test]
fn mpa_request_rev1_plain() {
    let expected = hex(&format!("{REQ_KEY_HEX} 00 01 0002 6869"));
    let mut buf = [0u8; 64];
    let n = encode_frame(
        &mut buf,
        &FrameParams {
            kind: FrameKind::Request,
            crc: false,
            reject: false,
            revision: Revision::V1,
            enhanced: None,
        },
        b"hi",
    )
    .expect("fits");
    assert_eq!(&buf[..n], &expected[..]);
    let f = decode_frame(&expected).expect("valid");
    assert_eq!(
        (f.revision, f.enhanced, f.ulp_private_data),
        (Revision::V1, None, &b"hi"[..])
    );
}

#[test]
fn mpa_reply_rev2_and_reject_rev1() {
    // Accepting reply: C and S, Rev 2, IRD 32, ORD 16, no ULP data.
    let accept = hex(&format!("{REP_KEY_HEX} 50 02 0004 0020 0010"));
    let mut buf = [0u8; 64];
    let n = encode_frame(
        &mut buf,
        &FrameParams {
            kind: FrameKind::Reply,
            crc: true,
            reject: false,
            revision: Revision::V2,
            enhanced: Some(EnhancedData::client_server(32, 16)),
        },
        b"",
    )
    .expect("fits");
    assert_eq!(&buf[..n], &accept[..]);

    // Rejecting reply: R only, Rev 1, no private data.
    let reject = hex(&format!("{REP_KEY_HEX} 20 01 0000"));
    let n = encode_frame(
        &mut buf,
        &FrameParams {
            kind: FrameKind::Reply,
            crc: false,
            reject: true,
            revision: Revision::V1,
            enhanced: None,
        },
        b"",
    )
    .expect("fits");
    assert_eq!(&buf[..n], &reject[..]);
    let f = decode_frame(&reject).expect("valid");
    assert!(f.header.reject && f.header.kind == FrameKind::Reply);
}

#[test]
fn mpa_enhanced_words_carry_peer_to_peer_and_rtr_bits() {
    // RFC 6581 §7.1: A B IRD(14) | C D ORD(14).
    let e = EnhancedData {
        ird: 5,
        ord: 3,
        peer_to_peer: true,
        send_rtr: true,
        write_rtr: true,
        read_rtr: false,
    };
    assert_eq!(e.to_bytes().expect("in range"), [0xC0, 0x05, 0x80, 0x03]);
    assert_eq!(EnhancedData::from_bytes(&[0xC0, 0x05, 0x80, 0x03]), Ok(e));
    assert_eq!(
        EnhancedData::client_server(0x3FFF, 0).to_bytes(),
        Ok([0x3F, 0xFF, 0x00, 0x00])
    );
    assert_eq!(
        EnhancedData::client_server(0x4000, 0).to_bytes(),
        Err(MpaError::IrdOrdOutOfRange { value: 0x4000 })
    );
}

#[test]
fn mpa_frame_errors() {
    let mut bad_key = hex(&format!("{REQ_KEY_HEX} 00 01 0000"));
    bad_key[0] = b'X';
    assert_eq!(decode_frame(&bad_key), Err(MpaError::BadKey));
    let rev3 = hex(&format!("{REQ_KEY_HEX} 00 03 0000"));
    assert_eq!(
        decode_frame(&rev3),
        Err(MpaError::BadRevision { revision: 3 })
    );
    let rev0 = hex(&format!("{REP_KEY_HEX} 00 00 0000"));
    assert_eq!(
        decode_frame(&rev0),
        Err(MpaError::BadRevision { revision: 0 })
    );
    let too_long = hex(&format!("{REQ_KEY_HEX} 00 01 0201"));
    assert_eq!(
        decode_frame(&too_long),
        Err(MpaError::PrivateDataTooLong { len: 513, max: 512 })
    );
    let enhanced_short = hex(&format!("{REQ_KEY_HEX} 10 02 0002 0000"));
    assert_eq!(
        decode_frame(&enhanced_short),
        Err(MpaError::MissingEnhancedData { len: 2 })
    );
    // S in a revision 1 frame means nothing: the private data is all ULP data.
    let s_in_rev1 = hex(&format!("{REQ_KEY_HEX} 10 01 0002 abcd"));
    let f = decode_frame(&s_in_rev1).expect("valid");
    assert_eq!((f.enhanced, f.ulp_private_data), (None, &[0xAB, 0xCD][..]));
    let partial = hex(&format!("{REQ_KEY_HEX} 00 01 0004 01"));
    assert_eq!(
        decode_frame(&partial),
        Err(MpaError::Incomplete {
            needed: 24,
            available: 21
        })
    );
    let mut buf = [0u8; 600];
    let params = FrameParams {
        kind: FrameKind::Request,
        crc: false,
        reject: false,
        revision: Revision::V2,
        enhanced: Some(EnhancedData::client_server(1, 1)),
    };
    assert_eq!(
        encode_frame(&mut buf, &params, &[0u8; 509]),
        Err(MpaError::PrivateDataTooLong { len: 513, max: 512 })
    );
    assert_eq!(encode_frame(&mut buf, &params, &[0u8; 508]), Ok(532));
    assert_eq!(
        encode_frame(
            &mut buf,
            &FrameParams {
                revision: Revision::V1,
                ..params
            },
            b""
        ),
        Err(MpaError::EnhancedNeedsRevision2)
    );
}

// ---------------------------------------------------------------------------------------
// DDP/RDMAP headers: RFC 5041 §4.2-4.4 (control T L Rsvd DV, tagged STag/TO, untagged
// QN/MSN/MO), RFC 5040 §4.2-4.4 (RV, opcode, Invalidate STag, Read Request body).

fn check_header(h: SegmentHeader, wire: &str) {
    let expected = hex(wire);
    let mut buf = [0u8; 32];
    let n = h.encode(&mut buf).expect("valid header");
    assert_eq!(&buf[..n], &expected[..], "{h:?}");
    assert_eq!(SegmentHeader::decode(&expected), Ok((h, expected.len())));
}

#[test]
fn untagged_headers_for_every_untagged_opcode() {
    // Send, Last, QN 0, MSN 1, MO 0.
    check_header(
        SegmentHeader::untagged(Opcode::Send, true, 0, 1, 0),
        "41 43 00000000 00000000 00000001 00000000",
    );
    // Send with Invalidate, not Last, Invalidate STag 0x12345678, MSN 7, MO 0x100.
    check_header(
        SegmentHeader::untagged(Opcode::SendInvalidate, false, 0x1234_5678, 7, 0x100),
        "01 44 12345678 00000000 00000007 00000100",
    );
    check_header(
        SegmentHeader::untagged(Opcode::SendSolicitedEvent, true, 0, 2, 0),
        "41 45 00000000 00000000 00000002 00000000",
    );
    check_header(
        SegmentHeader::untagged(
            Opcode::SendSolicitedEventInvalidate,
            true,
            0xCAFE_F00D,
            3,
            8,
        ),
        "41 46 cafef00d 00000000 00000003 00000008",
    );
    // RDMA Read Request on QN 1.
    check_header(
        SegmentHeader::untagged(Opcode::ReadRequest, true, 0, 1, 0),
        "41 41 00000000 00000001 00000001 00000000",
    );
    // Terminate on QN 2.
    check_header(
        SegmentHeader::untagged(Opcode::Terminate, true, 0, 1, 0),
        "41 47 00000000 00000002 00000001 00000000",
    );
}

#[test]
fn tagged_headers() {
    // RDMA Write, Last: T=1 L=1 DV=1 -> c1; RV=1 opcode 0 -> 40.
    check_header(
        SegmentHeader::tagged(Opcode::RdmaWrite, true, 0xDEAD_BEEF, 0x0001_0203_0405_0607),
        "c1 40 deadbeef 0001020304050607",
    );
    // RDMA Read Response, not Last: 81 42.
    check_header(
        SegmentHeader::tagged(Opcode::ReadResponse, false, 7, u64::MAX),
        "81 42 00000007 ffffffffffffffff",
    );
}

#[test]
fn ddp_control_octet() {
    assert_eq!(DdpControl::new(true, true).to_octet(), 0xC1);
    assert_eq!(DdpControl::new(false, false).to_octet(), 0x01);
    let c = DdpControl::from_octet(0xBE); // T=1 L=0 Rsvd=1111 DV=2
    assert!(c.tagged && !c.last);
    assert_eq!((c.reserved, c.version), (0xF, 2));
    assert_eq!(c.to_octet(), 0xBE);
}

#[test]
fn segment_header_rejections() {
    let dec = |s: &str| SegmentHeader::decode(&hex(s)).map(|(h, _)| h);
    // DDP version 0 (untagged, tagged), RDMAP version 2.
    assert_eq!(
        dec("40 43 00000000 00000000 00000001 00000000"),
        Err(SegmentError::DdpVersion {
            version: 0,
            tagged: false
        })
    );
    assert_eq!(
        dec("c2 40 00000000 0000000000000000"),
        Err(SegmentError::DdpVersion {
            version: 2,
            tagged: true
        })
    );
    assert_eq!(
        dec("41 83 00000000 00000000 00000001 00000000"),
        Err(SegmentError::RdmapVersion { version: 2 })
    );
    // Opcode 8 is reserved in RFC 5040.
    assert_eq!(
        dec("41 48 00000000 00000000 00000001 00000000"),
        Err(SegmentError::UnknownOpcode { opcode: 8 })
    );
    // Send in a tagged segment; Write in an untagged one.
    assert_eq!(
        dec("c1 43 00000000 0000000000000000"),
        Err(SegmentError::WrongBufferModel {
            opcode: Opcode::Send,
            tagged: true
        })
    );
    assert_eq!(
        dec("41 40 00000000 00000000 00000001 00000000"),
        Err(SegmentError::WrongBufferModel {
            opcode: Opcode::RdmaWrite,
            tagged: false
        })
    );
    // Send on QN 1.
    assert_eq!(
        dec("41 43 00000000 00000001 00000001 00000000"),
        Err(SegmentError::WrongQueue {
            opcode: Opcode::Send,
            qn: 1
        })
    );
    // A short untagged header.
    assert_eq!(
        dec("41 43 00000000 00000000 000000"),
        Err(SegmentError::Truncated {
            needed: 18,
            available: 13
        })
    );
    // Reserved bits are ignored on receipt: DDP Rsvd set, RDMAP Rsv set, and a nonzero
    // reserved word on a plain Send.
    let h = dec("7d 73 ffffffff 00000000 00000009 00000000").expect("reserved bits ignored");
    assert_eq!(h.opcode, Opcode::Send);
    assert!(h.last);
    assert_eq!(
        h.placement,
        Placement::Untagged {
            inval_stag: 0xFFFF_FFFF,
            qn: 0,
            msn: 9,
            mo: 0
        }
    );
    // ...but we never send one.
    let mut buf = [0u8; 18];
    assert_eq!(
        h.encode(&mut buf),
        Err(SegmentError::UnexpectedInvalidateStag {
            opcode: Opcode::Send
        })
    );
    assert_eq!(
        SegmentError::WrongQueue {
            opcode: Opcode::Send,
            qn: 1
        }
        .terminate_code(),
        TerminateCode::DdpUntagged(DdpUntaggedError::InvalidQn)
    );
}

#[test]
fn read_request_body() {
    let rr = ReadRequest {
        sink_stag: 0x0102_0304,
        sink_to: 0x1111_2222_3333_4444,
        size: 0x0001_0000,
        source_stag: 0xA0B0_C0D0,
        source_to: 0x0000_0000_0000_1000,
    };
    let wire = hex("01020304 1111222233334444 00010000 a0b0c0d0 0000000000001000");
    assert_eq!(rr.to_bytes().to_vec(), wire);
    let mut buf = [0u8; READ_REQUEST_LEN];
    assert_eq!(rr.encode(&mut buf), Ok(28));
    assert_eq!(&buf[..], &wire[..]);
    assert_eq!(ReadRequest::decode(&wire), Ok(rr));
    assert!(ReadRequest::decode(&wire[..27]).is_err());
}

#[test]
fn msn_counters_start_at_one_per_queue() {
    let mut m = MsnCounters::new();
    assert_eq!(m.take(QueueNumber::Send), 1);
    assert_eq!(m.take(QueueNumber::Send), 2);
    assert_eq!(m.take(QueueNumber::ReadRequest), 1);
    assert_eq!(m.peek(QueueNumber::Terminate), 1);
    assert_eq!(QueueNumber::from_qn(2), Some(QueueNumber::Terminate));
    assert_eq!(QueueNumber::from_qn(3), None);
}

// ---------------------------------------------------------------------------------------
// Terminate: RFC 5040 §4.8 (control, header control bits, copied headers) and the code
// tables (RFC 5040 §7 for RDMAP and DDP, RFC 5044 §8 and RFC 6581 §8 for MPA).

#[test]
fn terminate_code_table() {
    use DdpTaggedError as T;
    use DdpUntaggedError as U;
    use MpaLlpError as M;
    use RdmapOperationError as O;
    use RdmapProtectionError as P;
    let table: [(TerminateCode, (u8, u8, u8)); 33] = [
        (TerminateCode::RdmapCatastrophic, (0, 0, 0x00)),
        (TerminateCode::RdmapProtection(P::InvalidStag), (0, 1, 0x00)),
        (
            TerminateCode::RdmapProtection(P::BaseOrBounds),
            (0, 1, 0x01),
        ),
        (
            TerminateCode::RdmapProtection(P::AccessRights),
            (0, 1, 0x02),
        ),
        (
            TerminateCode::RdmapProtection(P::StagNotAssociated),
            (0, 1, 0x03),
        ),
        (TerminateCode::RdmapProtection(P::ToWrap), (0, 1, 0x04)),
        (
            TerminateCode::RdmapProtection(P::CannotInvalidate),
            (0, 1, 0x09),
        ),
        (TerminateCode::RdmapProtection(P::Unspecified), (0, 1, 0xFF)),
        (
            TerminateCode::RdmapOperation(O::InvalidRdmapVersion),
            (0, 2, 0x05),
        ),
        (
            TerminateCode::RdmapOperation(O::UnexpectedOpcode),
            (0, 2, 0x06),
        ),
        (
            TerminateCode::RdmapOperation(O::CatastrophicStream),
            (0, 2, 0x07),
        ),
        (
            TerminateCode::RdmapOperation(O::CatastrophicGlobal),
            (0, 2, 0x08),
        ),
        (
            TerminateCode::RdmapOperation(O::CannotInvalidate),
            (0, 2, 0x09),
        ),
        (TerminateCode::RdmapOperation(O::Unspecified), (0, 2, 0xFF)),
        (TerminateCode::DdpCatastrophic, (1, 0, 0x00)),
        (TerminateCode::DdpTagged(T::InvalidStag), (1, 1, 0x00)),
        (TerminateCode::DdpTagged(T::BaseOrBounds), (1, 1, 0x01)),
        (TerminateCode::DdpTagged(T::StagNotAssociated), (1, 1, 0x02)),
        (TerminateCode::DdpTagged(T::ToWrap), (1, 1, 0x03)),
        (TerminateCode::DdpTagged(T::InvalidDdpVersion), (1, 1, 0x04)),
        (TerminateCode::DdpUntagged(U::InvalidQn), (1, 2, 0x01)),
        (
            TerminateCode::DdpUntagged(U::NoBufferAvailable),
            (1, 2, 0x02),
        ),
        (TerminateCode::DdpUntagged(U::MsnRange), (1, 2, 0x03)),
        (TerminateCode::DdpUntagged(U::InvalidMo), (1, 2, 0x04)),
        (TerminateCode::DdpUntagged(U::MessageTooLong), (1, 2, 0x05)),
        (
            TerminateCode::DdpUntagged(U::InvalidDdpVersion),
            (1, 2, 0x06),
        ),
        (TerminateCode::Mpa(M::ConnectionLost), (2, 0, 0x01)),
        (TerminateCode::Mpa(M::CrcError), (2, 0, 0x02)),
        (TerminateCode::Mpa(M::MarkerOrLengthMismatch), (2, 0, 0x03)),
        (TerminateCode::Mpa(M::InvalidRequestOrReply), (2, 0, 0x04)),
        (TerminateCode::Mpa(M::LocalCatastrophic), (2, 0, 0x05)),
        (TerminateCode::Mpa(M::InsufficientIrd), (2, 0, 0x06)),
        (TerminateCode::Mpa(M::NoMatchingRtr), (2, 0, 0x07)),
    ];
    for (code, parts) in table {
        assert_eq!(code.to_parts(), parts, "{code:?}");
        assert_eq!(TerminateCode::from_parts(parts.0, parts.1, parts.2), code);
    }
    assert_eq!(
        TerminateCode::from_parts(3, 0, 0),
        TerminateCode::Unknown {
            layer: 3,
            etype: 0,
            code: 0
        }
    );
    assert_eq!(
        TerminateCode::from_parts(1, 2, 0x00),
        TerminateCode::Unknown {
            layer: 1,
            etype: 2,
            code: 0
        }
    );
}

#[test]
fn terminate_bare_codes() {
    let mut buf = [0u8; 64];
    // RDMAP Local Catastrophic: layer 0 type 0 code 0, no headers.
    let n = Terminate::bare(TerminateCode::RdmapCatastrophic)
        .encode(&mut buf)
        .expect("fits");
    assert_eq!(&buf[..n], &hex("00 00 00 00")[..]);
    // MPA CRC error: layer 2 type 0 -> 20, code 02.
    let n = Terminate::bare(TerminateCode::Mpa(MpaLlpError::CrcError))
        .encode(&mut buf)
        .expect("fits");
    assert_eq!(&buf[..n], &hex("20 02 00 00")[..]);
    assert_eq!(
        Terminate::decode(&hex("20 02 00 00")),
        Ok(Terminate::bare(TerminateCode::Mpa(MpaLlpError::CrcError)))
    );
}

#[test]
fn terminate_untagged_error_with_copied_ddp_header() {
    // DDP Untagged "Invalid MSN - no buffer available" (1/2/0x02), M and D set, segment
    // length 0x0010 and the offending Send header (MSN 5).
    let ddp = hex("41 43 00000000 00000000 00000005 00000000");
    let wire = hex("12 02 c0 00 0010 41 43 00000000 00000000 00000005 00000000");
    let t = Terminate {
        code: TerminateCode::DdpUntagged(DdpUntaggedError::NoBufferAvailable),
        segment_length: Some(0x10),
        ddp_header: Some(&ddp),
        rdma_header: None,
        layout: rpcrdma::iwarp::terminate::TerminateLayout::Rfc5040,
    };
    let mut buf = [0u8; 64];
    let n = t.encode(&mut buf).expect("fits");
    assert_eq!(&buf[..n], &wire[..]);
    assert_eq!(Terminate::decode(&wire), Ok(t));
}

#[test]
fn terminate_protection_error_with_read_request_headers() {
    // RDMAP Remote Protection "Base or bounds violation" (0/1/0x01); M, D and R set; the
    // Read Request's untagged header and its 28-octet body, as Linux siw sends it.
    let ddp = hex("41 41 00000000 00000001 00000001 00000000");
    let rr = hex("00000011 0000000000002000 00001000 00000022 0000000000003000");
    let wire = hex("01 01 e0 00 001c
         41 41 00000000 00000001 00000001 00000000
         00000011 0000000000002000 00001000 00000022 0000000000003000");
    let t = Terminate {
        code: TerminateCode::RdmapProtection(RdmapProtectionError::BaseOrBounds),
        segment_length: Some(28),
        ddp_header: Some(&ddp),
        rdma_header: Some(&rr),
        layout: rpcrdma::iwarp::terminate::TerminateLayout::Rfc5040,
    };
    let mut buf = [0u8; 64];
    let n = t.encode(&mut buf).expect("fits");
    assert_eq!(n, 52);
    assert_eq!(&buf[..n], &wire[..]);
    assert_eq!(Terminate::decode(&wire), Ok(t));
}

#[test]
fn terminate_tagged_error_with_ddp_header_only() {
    // DDP Tagged "Invalid STag" (1/1/0x00); D without M: the length field is present but
    // not valid, sent as zero; a 14-octet tagged header follows.
    let ddp = hex("c1 40 deadbeef 0000000000000000");
    let wire = hex("11 00 40 00 0000 c1 40 deadbeef 0000000000000000");
    let t = Terminate {
        code: TerminateCode::DdpTagged(DdpTaggedError::InvalidStag),
        segment_length: None,
        ddp_header: Some(&ddp),
        rdma_header: None,
        layout: rpcrdma::iwarp::terminate::TerminateLayout::Rfc5040,
    };
    let mut buf = [0u8; 64];
    let n = t.encode(&mut buf).expect("fits");
    assert_eq!(&buf[..n], &wire[..]);
    assert_eq!(Terminate::decode(&wire), Ok(t));
}

#[test]
fn terminate_rejections() {
    // M without D.
    assert_eq!(
        Terminate::decode(&hex("12 02 80 00")),
        Err(TerminateError::SegmentLengthWithoutDdpHeader)
    );
    // D with a truncated untagged header.
    assert_eq!(
        Terminate::decode(&hex("12 02 40 00 0000 41 43 0000")),
        Err(TerminateError::Truncated {
            needed: 24,
            available: 10
        })
    );
    // Trailing octets without R.
    assert_eq!(
        Terminate::decode(&hex("00 00 00 00 ff")),
        Err(TerminateError::TrailingOctets { len: 1 })
    );
    // R with more than 28 octets.
    let mut long = hex("00 00 20 00");
    long.extend_from_slice(&[0u8; 29]);
    assert_eq!(
        Terminate::decode(&long),
        Err(TerminateError::RdmaHeaderTooLong { len: 29 })
    );
    assert_eq!(
        Terminate::decode(&hex("12 02")),
        Err(TerminateError::Truncated {
            needed: 4,
            available: 2
        })
    );
    // Encoding: a DDP header whose length disagrees with its T bit.
    let short = hex("41 43 00000000 00000000 00000005");
    let mut buf = [0u8; 64];
    assert_eq!(
        Terminate {
            code: TerminateCode::DdpCatastrophic,
            segment_length: None,
            ddp_header: Some(&short),
            rdma_header: None,
            layout: rpcrdma::iwarp::terminate::TerminateLayout::Rfc5040,
        }
        .encode(&mut buf),
        Err(TerminateError::DdpHeaderLength {
            len: 14,
            expected: 18
        })
    );
}

// ---------------------------------------------------------------------------------------
// FPDU framing: RFC 5044 §4.1 (ULPDU_LENGTH, PAD to four octets, CRC), §7.1 (MULPDU).

#[test]
fn fpdu_send_with_crc() {
    // ULPDU = 18-octet untagged header + "hello" = 23 (0x0017); 2 + 23 = 25 so three pad
    // octets; CRC over the 28 octets before it, least significant octet first.
    let wire = hex("0017
         41 43 00000000 00000000 00000001 00000000
         68656c6c6f
         000000
         b990b10c");
    let h = SegmentHeader::untagged(Opcode::Send, true, 0, 1, 0);
    let mut buf = [0u8; 64];
    let n = encode_fpdu(&mut buf, &h, b"hello", true).expect("fits");
    assert_eq!(&buf[..n], &wire[..]);
    let f = decode_fpdu(&wire, true, MAX_ULPDU_LEN).expect("valid");
    assert_eq!((f.header, f.payload, f.len), (h, &b"hello"[..], 32));

    // CRC off: same octets, zero CRC field.
    let n = encode_fpdu(&mut buf, &h, b"hello", false).expect("fits");
    assert_eq!(&buf[..n - 4], &wire[..28]);
    assert_eq!(&buf[n - 4..n], &[0, 0, 0, 0]);

    // A flipped payload bit is caught.
    let mut bad = wire.clone();
    bad[22] ^= 1;
    assert!(matches!(
        decode_fpdu(&bad, true, MAX_ULPDU_LEN),
        Err(FpduError::CrcMismatch { .. })
    ));
    // ...but not checked when CRC is off.
    assert!(decode_fpdu(&bad, false, MAX_ULPDU_LEN).is_ok());
}

#[test]
fn fpdu_rdma_write_without_pad() {
    // ULPDU = 14 + 4 = 18 (0x0012); 2 + 18 = 20: no pad.
    let wire = hex("0012 c1 40 deadbeef 0001020304050607 64617461 ab8bfc22");
    let h = SegmentHeader::tagged(Opcode::RdmaWrite, true, 0xDEAD_BEEF, 0x0001_0203_0405_0607);
    let mut buf = [0u8; 64];
    let n = encode_fpdu(&mut buf, &h, b"data", true).expect("fits");
    assert_eq!(&buf[..n], &wire[..]);
}

#[test]
fn fpdu_lengths_and_mulpdu() {
    assert_eq!(
        (pad_len(14), pad_len(15), pad_len(16), pad_len(17)),
        (0, 3, 2, 1)
    );
    assert_eq!(fpdu_len(23), 32);
    // EMSS 1460 (Ethernet, no TCP options): 1460 - 6 = 1454, and the FPDU fills it.
    assert_eq!(mulpdu(1460), Some(1454));
    assert_eq!(fpdu_len(1454), 1460);
    // EMSS 1448 (timestamps): 1442. An odd EMSS rounds down to four.
    assert_eq!(mulpdu(1448), Some(1442));
    assert_eq!(mulpdu(1461), Some(1454));
    assert_eq!(mulpdu(9000), Some(8994));
    // Capped where the 16-bit length field ends.
    assert_eq!(mulpdu(u32::MAX), Some(65534));
    assert_eq!(fpdu_len(65534), 65540);
    // Too small to carry an empty tagged segment.
    assert_eq!(mulpdu(20), Some(14));
    assert_eq!(mulpdu(19), None);
}

#[test]
fn fpdu_length_errors() {
    // ULPDU_LENGTH 13: below any DDP header.
    assert_eq!(
        decode_fpdu(&hex("000d 00"), false, MAX_ULPDU_LEN),
        Err(FpduError::UlpduTooShort { len: 13, min: 14 })
    );
    // ULPDU_LENGTH 16 with an untagged control octet: below the 18-octet header.
    let mut short = hex("0010 41 43");
    short.resize(2 + 16 + 2 + 4, 0);
    assert_eq!(
        decode_fpdu(&short, false, MAX_ULPDU_LEN),
        Err(FpduError::UlpduTooShort { len: 16, min: 18 })
    );
    // Above the receiver's limit.
    assert_eq!(
        decode_fpdu(&hex("05ff"), false, 1454),
        Err(FpduError::UlpduTooLong {
            len: 0x5FF,
            max: 1454
        })
    );
    assert_eq!(
        decode_fpdu(&hex("0012 c1"), false, MAX_ULPDU_LEN),
        Err(FpduError::Incomplete {
            needed: 24,
            available: 3
        })
    );
    assert_eq!(
        FpduError::CrcMismatch {
            computed: 1,
            received: 2
        }
        .terminate_code(),
        TerminateCode::Mpa(MpaLlpError::CrcError)
    );
}
