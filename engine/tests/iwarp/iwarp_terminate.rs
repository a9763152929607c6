//! Terminate control words in both layouts seen on the wire: RFC 5040 §5.3 (layer in the
//! high nibble, M/D/R the top bits of the third octet) and Linux siw's (little-endian
//! bitfields: layer in the low nibble, M/D/R bits 0..2). Every vector is written out by
//! hand from the RFC 5040 §7 / RFC 5041 §7 code tables and RFC 5041's header layouts,
//! not produced by our encoder.

use rpcrdma::iwarp::rdmap::{Opcode, SegmentHeader};
use rpcrdma::iwarp::terminate::{
    DdpTaggedError, DdpUntaggedError, MpaLlpError, RdmapOperationError, RdmapProtectionError,
    Terminate, TerminateCode, TerminateError, TerminateLayout, TerminateReason, TerminatedSegment,
};

/// An untagged DDP header (RFC 5041 §4.4) as copied into a Terminate: DDP control T=0,
/// L=1, DV=1 (0x41); RDMAP control RV=1, opcode Send (0x43); reserved word; QN 0; MSN 1;
/// MO 0. Preceded by the segment length field (0x0030).
const SEND_MSN1: [u8; 20] = [
    0x00, 0x30, // segment length
    0x41, 0x43, // DDP control, RDMAP control
    0x00, 0x00, 0x00, 0x00, // RsvdULP (no invalidate STag)
    0x00, 0x00, 0x00, 0x00, // QN 0
    0x00, 0x00, 0x00, 0x01, // MSN 1
    0x00, 0x00, 0x00, 0x00, // MO 0
];

/// A tagged DDP header (RFC 5041 §4.3): T=1, L=1, DV=1 (0xC1); RDMA Write (0x40);
/// STag 0x00001234; TO 0x10. Preceded by the segment length field (0x0400).
const WRITE_STAG_1234: [u8; 16] = [
    0x04, 0x00, // segment length
    0xC1, 0x40, // DDP control, RDMAP control
    0x00, 0x00, 0x12, 0x34, // STag
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, // TO
];

fn body(control: [u8; 4], rest: &[u8]) -> Vec<u8> {
    let mut v = control.to_vec();
    v.extend_from_slice(rest);
    v
}

#[test]
fn the_lab_capture_decodes_as_linux_no_buffer_available() {
    // Kernel siw's Terminate from the lab: DDP(1), untagged(2), code 2, M and D set.
    let b = body([0x21, 0x02, 0x03, 0x00], &SEND_MSN1);
    // Read the RFC way it is an unassigned LLP code with no header bits at all.
    let rfc = Terminate::decode_as(&b, TerminateLayout::Rfc5040);
    assert_eq!(rfc, Err(TerminateError::TrailingOctets { len: 20 }));
    let t = Terminate::decode(&b).expect("decodes");
    assert_eq!(t.layout, TerminateLayout::LinuxSiw);
    assert_eq!(
        t.code,
        TerminateCode::DdpUntagged(DdpUntaggedError::NoBufferAvailable)
    );
    assert_eq!(t.segment_length, Some(0x30));
    assert_eq!(t.ddp_header, Some(&SEND_MSN1[2..]));
    assert_eq!(t.rdma_header, None);
    let (h, _) = SegmentHeader::decode(t.ddp_header.expect("copied")).expect("header");
    assert_eq!(h, SegmentHeader::untagged(Opcode::Send, true, 0, 1, 0));
    let why = t.reason();
    assert_eq!(
        why.segment,
        Some(TerminatedSegment::Untagged { qn: 0, msn: 1 })
    );
    assert_eq!(
        why.to_string(),
        "DDP untagged buffer error: no buffer available (MSN 1, queue 0)"
    );
}

#[test]
fn the_same_error_in_rfc_layout_decodes_as_rfc() {
    let b = body([0x12, 0x02, 0xC0, 0x00], &SEND_MSN1);
    let t = Terminate::decode(&b).expect("decodes");
    assert_eq!(t.layout, TerminateLayout::Rfc5040);
    assert_eq!(
        t.code,
        TerminateCode::DdpUntagged(DdpUntaggedError::NoBufferAvailable)
    );
    assert_eq!(t.segment_length, Some(0x30));
    // Same meaning, so the same owned reason apart from the layout.
    let linux = Terminate::decode(&body([0x21, 0x02, 0x03, 0x00], &SEND_MSN1))
        .expect("decodes")
        .reason();
    assert_eq!(
        t.reason(),
        TerminateReason {
            layout: TerminateLayout::Rfc5040,
            ..linux
        }
    );
}

#[test]
fn a_tagged_error_whose_first_octet_reads_alike_is_told_apart_by_its_header_bits() {
    // DDP(1) / tagged(1) / invalid STag(0): 0x11 either way round. Linux's M|D is 0x03,
    // which the RFC way announces no headers, leaving 16 octets unexplained.
    let linux = body([0x11, 0x00, 0x03, 0x00], &WRITE_STAG_1234);
    let t = Terminate::decode(&linux).expect("decodes");
    assert_eq!(t.layout, TerminateLayout::LinuxSiw);
    assert_eq!(
        t.code,
        TerminateCode::DdpTagged(DdpTaggedError::InvalidStag)
    );
    assert_eq!(t.segment_length, Some(0x400));
    assert_eq!(
        t.reason().to_string(),
        "DDP tagged buffer error: invalid STag (STag 0x00001234, TO 0x10)"
    );
    let rfc = body([0x11, 0x00, 0xC0, 0x00], &WRITE_STAG_1234);
    let t = Terminate::decode(&rfc).expect("decodes");
    assert_eq!(t.layout, TerminateLayout::Rfc5040);
    assert_eq!(
        t.code,
        TerminateCode::DdpTagged(DdpTaggedError::InvalidStag)
    );
}

#[test]
fn linux_layout_rdmap_and_mpa_errors_decode() {
    // RDMAP(0) / remote protection(1) / access rights(2): Linux 0x10, RFC would be
    // DDP catastrophic with a nonzero code, which is unassigned.
    let t = Terminate::decode(&[0x10, 0x02, 0x00, 0x00]).expect("decodes");
    assert_eq!(
        (t.layout, t.code),
        (
            TerminateLayout::LinuxSiw,
            TerminateCode::RdmapProtection(RdmapProtectionError::AccessRights)
        )
    );
    // RDMAP(0) / remote operation(2) / STag cannot be invalidated(9): Linux 0x20.
    let t = Terminate::decode(&[0x20, 0x09, 0x00, 0x00]).expect("decodes");
    assert_eq!(
        (t.layout, t.code),
        (
            TerminateLayout::LinuxSiw,
            TerminateCode::RdmapOperation(RdmapOperationError::CannotInvalidate)
        )
    );
    // LLP(2) / MPA(0) / CRC error(2): Linux 0x02; RFC would be RDMAP remote operation
    // code 2, unassigned.
    let t = Terminate::decode(&[0x02, 0x02, 0x00, 0x00]).expect("decodes");
    assert_eq!(
        (t.layout, t.code),
        (
            TerminateLayout::LinuxSiw,
            TerminateCode::Mpa(MpaLlpError::CrcError)
        )
    );
    assert_eq!(t.reason().to_string(), "MPA error: CRC error");
}

#[test]
fn when_both_readings_are_valid_the_rfc_one_wins() {
    // 0x01 / 0x00 is RDMAP protection "invalid STag" the RFC way and DDP catastrophic
    // the Linux way; with no header bits to tell them apart, RFC 5040 is the standard.
    let t = Terminate::decode(&[0x01, 0x00, 0x00, 0x00]).expect("decodes");
    assert_eq!(t.layout, TerminateLayout::Rfc5040);
    assert_eq!(
        t.code,
        TerminateCode::RdmapProtection(RdmapProtectionError::InvalidStag)
    );
}

#[test]
fn nonsense_in_both_readings_stays_an_unassigned_rfc_code() {
    let t = Terminate::decode(&[0xF7, 0x33, 0x00, 0x00]).expect("decodes");
    assert_eq!(t.layout, TerminateLayout::Rfc5040);
    assert_eq!(
        t.code,
        TerminateCode::Unknown {
            layer: 0x0F,
            etype: 0x07,
            code: 0x33
        }
    );
    assert_eq!(
        t.reason().to_string(),
        "unassigned Terminate error (layer 15, type 7, code 0x33)"
    );
    // And a body neither reading can frame reports the RFC reading's error.
    assert_eq!(
        Terminate::decode(&[0x12, 0x02, 0x00, 0x00, 0xAA]),
        Err(TerminateError::TrailingOctets { len: 1 })
    );
}

#[test]
fn encoding_in_the_linux_layout_reproduces_the_capture() {
    let t = Terminate {
        code: TerminateCode::DdpUntagged(DdpUntaggedError::NoBufferAvailable),
        segment_length: Some(0x30),
        ddp_header: Some(&SEND_MSN1[2..]),
        rdma_header: None,
        layout: TerminateLayout::LinuxSiw,
    };
    let mut out = [0u8; 64];
    let n = t.encode(&mut out).expect("encodes");
    assert_eq!(&out[..n], &body([0x21, 0x02, 0x03, 0x00], &SEND_MSN1)[..]);
    let rfc = Terminate {
        layout: TerminateLayout::Rfc5040,
        ..t
    };
    let n = rfc.encode(&mut out).expect("encodes");
    assert_eq!(&out[..4], &[0x12, 0x02, 0xC0, 0x00]);
    assert_eq!(Terminate::decode(&out[..n]), Ok(rfc));
}
