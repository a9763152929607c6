//! Byte-exact RPC-over-RDMA Version 1 transport header vectors, each derived by hand from
//! the XDR in RFC 5666 §4.3 / RFC 8166 §4.1.2 and the section cited in the test, plus the
//! typed errors and responder replies of RFC 8166 §4.5.

use rpcrdma::wire::header::*;
use rpcrdma::wire::xdr::BufferTooSmall;

/// Hex digits with any whitespace in between.
fn hex(s: &str) -> Vec<u8> {
    let digits: Vec<u8> = s.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    assert!(digits.len() & 1 == 0, "odd number of hex digits");
    digits
        .chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
        .collect()
}

/// Checks that `wire` parses under the default limits, that the header part is exactly
/// `header_len` octets, and that all three encoders reproduce it.
fn check_round_trip<'a>(
    wire: &'a [u8],
    header_len: usize,
    repr: &HeaderRepr<'_>,
) -> HeaderView<'a> {
    let view = HeaderView::parse(wire, &Limits::DEFAULT).expect("vector parses");
    assert_eq!(view.header_len(), header_len);
    assert_eq!(view.header_bytes(), &wire[..header_len]);

    assert_eq!(repr.encoded_len(), header_len);
    let mut out = vec![0xa5u8; header_len + 8];
    assert_eq!(repr.encode(&mut out), Ok(header_len));
    assert_eq!(
        &out[..header_len],
        &wire[..header_len],
        "HeaderRepr::encode"
    );
    assert!(
        out[header_len..].iter().all(|&b| b == 0xa5),
        "wrote past the header"
    );

    assert_eq!(view.encoded_len(), header_len);
    let mut out2 = vec![0u8; header_len];
    assert_eq!(view.encode_into(&mut out2), Ok(header_len));
    assert_eq!(&out2[..], &wire[..header_len], "HeaderView::encode_into");

    let owned = Header::from_view(&view);
    assert_eq!(owned.header_len(), header_len);
    assert_eq!(owned.to_bytes(), wire, "Header::to_bytes");
    view
}

const XID: u32 = 0x1122_3344;
const CREDIT: u32 = 32;

// RFC 8166 §4.2 fixed fields, RFC 5666 §4.1: RDMA_MSG with three null lists (one zero word
// each), followed by the RPC message, which begins with the same XID.
#[test]
fn msg_with_empty_lists() {
    let wire = hex("
        11223344 00000001 00000020 00000000
        00000000
        00000000
        00000000
        11223344 00000000 00000002");
    let repr = HeaderRepr {
        xid: XID,
        credit: CREDIT,
        body: BodyRepr::Msg(ChunkListsRepr::EMPTY),
    };
    let v = check_round_trip(&wire, MIN_MSG_HEADER_LEN, &repr);
    assert_eq!(v.xid(), XID);
    assert_eq!(v.version(), 1);
    assert_eq!(v.credit(), CREDIT);
    assert_eq!(v.procedure(), Procedure::Msg);
    assert_eq!(v.read_segment_count(), 0);
    assert_eq!(v.read_chunk_count(), 0);
    assert_eq!(v.write_chunk_count(), 0);
    assert_eq!(v.reply_segment_count(), 0);
    assert!(v.reply_chunk().is_none());
    assert_eq!(v.rpc_msg_offset(), Some(28));
    assert_eq!(v.rpc_message(), Some(&wire[28..]));
    assert_eq!(v.padding(), None);
    assert_eq!(v.error(), None);
}

// RFC 8166 §4.3.1 / §3.4.5: one Read segment at a non-zero XDR position. Each list entry
// is a "present" word (1), the position, and the segment (handle, length, 64-bit offset);
// the list ends with a zero word.
#[test]
fn msg_with_one_read_segment() {
    let wire = hex("
        11223344 00000001 00000020 00000000
        00000001 00000040 aabbccdd 00001000 00000001 00002000
        00000000
        00000000
        00000000
        11223344");
    let reads = [ReadSegment::new(
        0x40,
        Segment::new(0xaabb_ccdd, 0x1000, 0x1_0000_2000),
    )];
    let repr = HeaderRepr {
        xid: XID,
        credit: CREDIT,
        body: BodyRepr::Msg(ChunkListsRepr {
            reads: &reads,
            writes: &[],
            reply: None,
        }),
    };
    let v = check_round_trip(&wire, 52, &repr);
    assert_eq!(v.read_list().collect::<Vec<_>>(), reads);
    assert_eq!(v.read_segment_count(), 1);
    assert_eq!(v.read_chunk_count(), 1);
    let chunk = v.read_chunks().next().unwrap();
    assert_eq!(chunk.position(), 0x40);
    assert_eq!(chunk.len(), 1);
    assert_eq!(chunk.total_length(), 0x1000);
    assert_eq!(v.rpc_msg_offset(), Some(52));
}

// RFC 8166 §3.4.5: segments sharing a position form one Read chunk; this Read list holds
// two chunks (position 0x20 with two segments, position 0x80 with one). The last segment
// ends exactly at the top of the 64-bit address space, which is valid (it does not wrap).
#[test]
fn msg_with_read_segments_at_different_positions() {
    let wire = hex("
        11223344 00000001 00000020 00000000
        00000001 00000020 00000101 00000800 00000000 10000000
        00000001 00000020 00000102 00000400 00000000 20000000
        00000001 00000080 00000103 00000010 ffffffff fffffff0
        00000000
        00000000
        00000000
        11223344");
    let reads = [
        ReadSegment::new(0x20, Segment::new(0x101, 0x800, 0x1000_0000)),
        ReadSegment::new(0x20, Segment::new(0x102, 0x400, 0x2000_0000)),
        ReadSegment::new(0x80, Segment::new(0x103, 0x10, 0xffff_ffff_ffff_fff0)),
    ];
    let repr = HeaderRepr {
        xid: XID,
        credit: CREDIT,
        body: BodyRepr::Msg(ChunkListsRepr {
            reads: &reads,
            writes: &[],
            reply: None,
        }),
    };
    let v = check_round_trip(&wire, 100, &repr);
    assert_eq!(v.read_list().collect::<Vec<_>>(), reads);
    assert_eq!(v.read_list().next_back(), Some(reads[2]));
    assert_eq!(v.read_segment_count(), 3);
    assert_eq!(v.read_chunk_count(), 2);
    let chunks: Vec<_> = v.read_chunks().collect();
    assert_eq!(chunks.len(), 2);
    assert_eq!(chunks[0].position(), 0x20);
    assert_eq!(
        chunks[0].segments().collect::<Vec<_>>(),
        [reads[0].segment, reads[1].segment]
    );
    assert_eq!(chunks[0].total_length(), 0xc00);
    assert_eq!(chunks[1].position(), 0x80);
    assert_eq!(chunks[1].segments().collect::<Vec<_>>(), [reads[2].segment]);
}

// RFC 8166 §3.5.3 (Long Call): RDMA_NOMSG whose Position-Zero Read chunk carries the
// whole RPC call; nothing follows the header.
#[test]
fn nomsg_with_position_zero_read_chunk() {
    let wire = hex("
        11223344 00000001 00000020 00000001
        00000001 00000000 00000007 00001000 00007f00 00000000
        00000001 00000000 00000007 00000200 00007f00 00001000
        00000000
        00000000
        00000000");
    let reads = [
        ReadSegment::new(0, Segment::new(7, 0x1000, 0x7f00_0000_0000)),
        ReadSegment::new(0, Segment::new(7, 0x200, 0x7f00_0000_1000)),
    ];
    let repr = HeaderRepr {
        xid: XID,
        credit: CREDIT,
        body: BodyRepr::Nomsg(ChunkListsRepr {
            reads: &reads,
            writes: &[],
            reply: None,
        }),
    };
    let v = check_round_trip(&wire, 76, &repr);
    assert_eq!(v.procedure(), Procedure::Nomsg);
    assert_eq!(v.rpc_msg_offset(), None);
    assert_eq!(v.rpc_message(), None);
    assert_eq!(v.read_chunk_count(), 1);
    let chunk = v.read_chunks().next().unwrap();
    assert_eq!(chunk.position(), 0);
    assert_eq!(chunk.total_length(), 0x1200);
}

// RFC 8166 §4.3.2 / §3.4.6: one Write chunk is a counted array of three segments.
#[test]
fn msg_with_multi_segment_write_chunk() {
    let wire = hex("
        11223344 00000001 00000020 00000000
        00000000
        00000001 00000003
            00000011 00001000 00000000 00010000
            00000012 00001000 00000000 00020000
            00000013 00000800 00000000 00030000
        00000000
        00000000
        11223344");
    let segs = [
        Segment::new(0x11, 0x1000, 0x1_0000),
        Segment::new(0x12, 0x1000, 0x2_0000),
        Segment::new(0x13, 0x800, 0x3_0000),
    ];
    let writes: [&[Segment]; 1] = [&segs];
    let repr = HeaderRepr {
        xid: XID,
        credit: CREDIT,
        body: BodyRepr::Msg(ChunkListsRepr {
            reads: &[],
            writes: &writes,
            reply: None,
        }),
    };
    let v = check_round_trip(&wire, 84, &repr);
    assert_eq!(v.write_chunk_count(), 1);
    assert_eq!(v.write_segment_count(), 3);
    let chunk = v.write_list().next().unwrap();
    assert_eq!(chunk.len(), 3);
    assert_eq!(chunk.get(1), Some(segs[1]));
    assert_eq!(chunk.get(3), None);
    assert_eq!(chunk.total_length(), 0x2800);
    assert_eq!(chunk.collect::<Vec<_>>(), segs);
}

// RFC 8166 §4.3.2: a Write list with two Write chunks of one and two segments.
#[test]
fn msg_with_several_write_chunks() {
    let wire = hex("
        11223344 00000001 00000020 00000000
        00000000
        00000001 00000001
            00000021 00000100 00000000 0000a000
        00000001 00000002
            00000022 00000200 00000000 0000b000
            00000023 00000300 00000000 0000c000
        00000000
        00000000
        11223344");
    let first = [Segment::new(0x21, 0x100, 0xa000)];
    let second = [
        Segment::new(0x22, 0x200, 0xb000),
        Segment::new(0x23, 0x300, 0xc000),
    ];
    let writes: [&[Segment]; 2] = [&first, &second];
    let repr = HeaderRepr {
        xid: XID,
        credit: CREDIT,
        body: BodyRepr::Msg(ChunkListsRepr {
            reads: &[],
            writes: &writes,
            reply: None,
        }),
    };
    let v = check_round_trip(&wire, 92, &repr);
    assert_eq!(v.write_chunk_count(), 2);
    assert_eq!(v.write_segment_count(), 3);
    let chunks: Vec<Vec<Segment>> = v.write_list().map(|c| c.collect()).collect();
    assert_eq!(chunks, vec![first.to_vec(), second.to_vec()]);
    assert_eq!(v.write_list().len(), 2);
}

// RFC 8166 §3.4.6: a Write chunk whose segment count is zero (an empty chunk) is still a
// list entry: "present" word then a zero count.
#[test]
fn msg_with_empty_write_chunk() {
    let wire = hex("
        11223344 00000001 00000020 00000000
        00000000
        00000001 00000000
        00000000
        00000000
        11223344");
    let writes: [&[Segment]; 1] = [&[]];
    let repr = HeaderRepr {
        xid: XID,
        credit: CREDIT,
        body: BodyRepr::Msg(ChunkListsRepr {
            reads: &[],
            writes: &writes,
            reply: None,
        }),
    };
    let v = check_round_trip(&wire, 36, &repr);
    assert_eq!(v.write_chunk_count(), 1);
    assert_eq!(v.write_segment_count(), 0);
    let chunk = v.write_list().next().unwrap();
    assert_eq!(chunk.len(), 0);
    assert_eq!(chunk.total_length(), 0);
}

// RFC 8166 §3.5.3 (Long Reply) / §4.3.3: RDMA_NOMSG call offering a Reply chunk of three
// segments: "present" word, count, segments.
#[test]
fn nomsg_with_multi_segment_reply_chunk() {
    let wire = hex("
        11223344 00000001 00000020 00000001
        00000000
        00000000
        00000001 00000003
            00000031 00001000 00000000 00100000
            00000032 00001000 00000000 00200000
            00000033 00000400 00000000 00300000");
    let reply = [
        Segment::new(0x31, 0x1000, 0x10_0000),
        Segment::new(0x32, 0x1000, 0x20_0000),
        Segment::new(0x33, 0x400, 0x30_0000),
    ];
    let repr = HeaderRepr {
        xid: XID,
        credit: CREDIT,
        body: BodyRepr::Nomsg(ChunkListsRepr {
            reads: &[],
            writes: &[],
            reply: Some(&reply),
        }),
    };
    let v = check_round_trip(&wire, 80, &repr);
    assert_eq!(v.reply_segment_count(), 3);
    let chunk = v.reply_chunk().unwrap();
    assert_eq!(chunk.total_length(), 0x2400);
    assert_eq!(
        chunk.rev().collect::<Vec<_>>(),
        [reply[2], reply[1], reply[0]]
    );
}

// RFC 8166 §4.3: all three lists at once, in order Read list, Write list, Reply chunk.
#[test]
fn msg_with_all_three_lists() {
    let wire = hex("
        11223344 00000001 00000020 00000000
        00000001 00000010 00000001 00000100 00000000 00001000
        00000000
        00000001 00000001 00000002 00000200 00000000 00002000
        00000000
        00000001 00000000
        11223344");
    let reads = [ReadSegment::new(0x10, Segment::new(1, 0x100, 0x1000))];
    let w = [Segment::new(2, 0x200, 0x2000)];
    let writes: [&[Segment]; 1] = [&w];
    let repr = HeaderRepr {
        xid: XID,
        credit: CREDIT,
        body: BodyRepr::Msg(ChunkListsRepr {
            reads: &reads,
            writes: &writes,
            reply: Some(&[]),
        }),
    };
    let v = check_round_trip(&wire, 80, &repr);
    assert_eq!(v.read_segment_count(), 1);
    assert_eq!(v.write_chunk_count(), 1);
    assert_eq!(v.reply_chunk().map(|c| c.len()), Some(0));
    assert_eq!(v.reply_segment_count(), 0);
}

// RFC 5666 §4.3 `rpc_rdma_header_padded` and §3.9: rdma_align and rdma_thresh come
// before the chunk lists, and the (padded) RPC message follows the header.
#[test]
fn msgp_with_align_and_thresh() {
    let wire = hex("
        11223344 00000001 00000020 00000002
        00001000 00000400
        00000000
        00000000
        00000000
        11223344 00000000");
    let repr = HeaderRepr {
        xid: XID,
        credit: CREDIT,
        body: BodyRepr::Msgp {
            align: 4096,
            thresh: 1024,
            lists: ChunkListsRepr::EMPTY,
        },
    };
    let v = check_round_trip(&wire, MIN_MSGP_HEADER_LEN, &repr);
    assert_eq!(v.procedure(), Procedure::Msgp);
    assert_eq!(v.padding(), Some((4096, 1024)));
    assert_eq!(v.rpc_msg_offset(), Some(36));
}

// RFC 5666 §4.3: RDMA_DONE has a void body.
#[test]
fn done() {
    let wire = hex("11223344 00000001 00000020 00000003");
    let repr = HeaderRepr {
        xid: XID,
        credit: CREDIT,
        body: BodyRepr::Done,
    };
    let v = check_round_trip(&wire, DONE_HEADER_LEN, &repr);
    assert_eq!(v.procedure(), Procedure::Done);
    assert_eq!(v.chunk_lists(), None);
    assert_eq!(v.read_list().len(), 0);
    assert_eq!(v.write_list().len(), 0);
    let mut out = [0u8; 16];
    assert_eq!(encode_done(XID, CREDIT, &mut out), Ok(16));
    assert_eq!(out[..], wire[..]);
}

// RFC 8166 §4.5.1 / §4.1.2: RDMA_ERROR, ERR_VERS (1), rdma_vers_low = rdma_vers_high = 1.
#[test]
fn error_err_vers() {
    let wire = hex("
        11223344 00000001 00000020 00000004
        00000001 00000001 00000001");
    let repr = HeaderRepr {
        xid: XID,
        credit: CREDIT,
        body: BodyRepr::Error(RdmaError::Vers { low: 1, high: 1 }),
    };
    let v = check_round_trip(&wire, ERR_VERS_HEADER_LEN, &repr);
    assert_eq!(v.error(), Some(RdmaError::Vers { low: 1, high: 1 }));
    let mut out = [0u8; 28];
    assert_eq!(encode_err_vers(XID, CREDIT, &mut out), Ok(28));
    assert_eq!(out[..], wire[..]);
}

// RFC 8166 §4.5.2 / §4.1.2: RDMA_ERROR, ERR_CHUNK (2), void.
#[test]
fn error_err_chunk() {
    let wire = hex("11223344 00000001 00000020 00000004 00000002");
    let repr = HeaderRepr {
        xid: XID,
        credit: CREDIT,
        body: BodyRepr::Error(RdmaError::Chunk),
    };
    let v = check_round_trip(&wire, ERR_CHUNK_HEADER_LEN, &repr);
    assert_eq!(v.error(), Some(RdmaError::Chunk));
    let mut out = [0u8; 20];
    assert_eq!(encode_err_chunk(XID, CREDIT, &mut out), Ok(20));
    assert_eq!(out[..], wire[..]);
}

// ---- errors ---------------------------------------------------------------------------

fn parse_err(wire: &[u8]) -> HeaderError {
    HeaderView::parse(wire, &Limits::DEFAULT).expect_err("must be rejected")
}

// RFC 8166 §4.5: without an XID no reply can be matched to the request, so drop.
#[test]
fn too_short_for_xid_is_dropped() {
    for len in 0..4 {
        let e = parse_err(&[0x11, 0x22, 0x33][..len.min(3)]);
        assert_eq!(e.xid(), None);
        assert!(matches!(
            e.kind(),
            HeaderErrorKind::Truncated {
                field: Field::Xid,
                offset: 0,
                needed: 4,
                ..
            }
        ));
        assert_eq!(e.responder_reply(), ResponderAction::Drop);
        assert_eq!(e.responder_reply().reply(CREDIT), None);
    }
}

// RFC 8166 §4.5.1/§4.5.2: with no version word there is neither an unsupported version
// to report nor a recognized one under which to report ERR_CHUNK.
#[test]
fn truncated_version_is_dropped() {
    let e = parse_err(&hex("11223344 0000"));
    assert_eq!(e.xid(), Some(XID));
    assert!(matches!(
        e.kind(),
        HeaderErrorKind::Truncated {
            field: Field::Version,
            ..
        }
    ));
    assert_eq!(e.responder_reply(), ResponderAction::Drop);
}

// RFC 8166 §4.5.1: an unsupported version gets ERR_VERS echoing the XID, advertising 1..1;
// the rest of the header (here garbage) is not looked at.
#[test]
fn version_mismatch_answers_err_vers() {
    let e = parse_err(&hex("11223344 00000002 00000020 000000ff 00000009"));
    assert_eq!(e.xid(), Some(XID));
    assert_eq!(e.kind(), &HeaderErrorKind::VersionMismatch { version: 2 });
    assert_eq!(e.responder_reply(), ResponderAction::ErrVers { xid: XID });
    let reply = e.responder_reply().reply(7).unwrap();
    let mut out = [0u8; 64];
    let n = reply.encode(&mut out).unwrap();
    assert_eq!(
        out[..n],
        hex("11223344 00000001 00000007 00000004 00000001 00000001 00000001")[..]
    );
    assert!(e.to_string().contains("version 2"), "{e}");
}

// RFC 8166 §4.5.2 names an invalid rdma_proc as an XDR error: ERR_CHUNK.
#[test]
fn unknown_procedure_answers_err_chunk() {
    let e = parse_err(&hex("11223344 00000001 00000020 00000005"));
    assert_eq!(e.kind(), &HeaderErrorKind::UnknownProcedure { proc: 5 });
    assert_eq!(e.responder_reply(), ResponderAction::ErrChunk { xid: XID });
    let reply = e.responder_reply().reply(CREDIT).unwrap();
    let mut out = [0u8; 20];
    assert_eq!(reply.encode(&mut out), Ok(20));
    assert_eq!(
        out[..],
        hex("11223344 00000001 00000020 00000004 00000002")[..]
    );
}

// RFC 4506 §4.19 optional-data: the list and Reply chunk words must be 0 or 1.
#[test]
fn bad_discriminators() {
    let e = parse_err(&hex("11223344 00000001 00000020 00000000 00000002"));
    assert_eq!(
        e.kind(),
        &HeaderErrorKind::BadDiscriminant {
            field: Field::ReadList,
            offset: 16,
            value: 2
        }
    );
    assert_eq!(e.responder_reply(), ResponderAction::ErrChunk { xid: XID });
    let e = parse_err(&hex(
        "11223344 00000001 00000020 00000000 00000000 80000000",
    ));
    assert_eq!(
        e.kind(),
        &HeaderErrorKind::BadDiscriminant {
            field: Field::WriteList,
            offset: 20,
            value: 0x8000_0000
        }
    );
    let e = parse_err(&hex(
        "11223344 00000001 00000020 00000001 00000000 00000000 00000007",
    ));
    assert_eq!(
        e.kind(),
        &HeaderErrorKind::BadDiscriminant {
            field: Field::ReplyChunk,
            offset: 24,
            value: 7
        }
    );
}

#[test]
fn truncation_inside_each_list() {
    // Inside a Read entry (position read, segment cut).
    let e = parse_err(&hex(
        "11223344 00000001 00000020 00000000 00000001 00000040 aabbccdd",
    ));
    assert_eq!(
        e.kind(),
        &HeaderErrorKind::Truncated {
            field: Field::ReadList,
            offset: 20,
            needed: 20,
            available: 8
        }
    );
    assert_eq!(e.responder_reply(), ResponderAction::ErrChunk { xid: XID });
    // A Write chunk announcing two segments with only one present: caught from the count,
    // before any segment is read.
    let e = parse_err(&hex("
        11223344 00000001 00000020 00000000 00000000
        00000001 00000002 00000011 00001000 00000000 00010000"));
    assert_eq!(
        e.kind(),
        &HeaderErrorKind::Truncated {
            field: Field::WriteList,
            offset: 28,
            needed: 32,
            available: 16
        }
    );
    // The Reply chunk word missing entirely.
    let e = parse_err(&hex(
        "11223344 00000001 00000020 00000001 00000000 00000000",
    ));
    assert!(matches!(
        e.kind(),
        HeaderErrorKind::Truncated {
            field: Field::ReplyChunk,
            offset: 24,
            ..
        }
    ));
    // RDMA_MSGP threshold missing.
    let e = parse_err(&hex("11223344 00000001 00000020 00000002 00001000"));
    assert!(matches!(
        e.kind(),
        HeaderErrorKind::Truncated {
            field: Field::Padding,
            offset: 20,
            ..
        }
    ));
    // ERR_VERS range cut.
    let e = parse_err(&hex(
        "11223344 00000001 00000020 00000004 00000001 00000001",
    ));
    assert!(matches!(
        e.kind(),
        HeaderErrorKind::Truncated {
            field: Field::VersionRange,
            ..
        }
    ));
}

// A count near u32::MAX must be rejected from the count alone (no iteration, no overflow),
// even with limits switched off.
#[test]
fn huge_segment_count_is_rejected_before_iterating() {
    let wire = hex("11223344 00000001 00000020 00000001 00000000 00000000 00000001 ffffffff");
    let e = HeaderView::parse(&wire, &Limits::PERMISSIVE).unwrap_err();
    assert_eq!(
        e.kind(),
        &HeaderErrorKind::Truncated {
            field: Field::ReplyChunk,
            offset: 32,
            needed: 0xffff_ffff * 16,
            available: 0
        }
    );
    let e = parse_err(&wire);
    assert_eq!(
        e.kind(),
        &HeaderErrorKind::TooManySegments {
            field: Field::ReplyChunk,
            offset: 28,
            count: u32::MAX,
            max: 16
        }
    );
    assert_eq!(e.responder_reply(), ResponderAction::ErrChunk { xid: XID });
}

fn nomsg_with_write_chunks(chunks: usize, segs_per_chunk: usize) -> Vec<u8> {
    let mut w = hex("11223344 00000001 00000020 00000001 00000000");
    for c in 0..chunks {
        w.extend(hex("00000001"));
        w.extend((segs_per_chunk as u32).to_be_bytes());
        for s in 0..segs_per_chunk {
            w.extend(((c * 100 + s) as u32).to_be_bytes());
            w.extend(hex("00001000"));
            w.extend(((s as u64) << 12).to_be_bytes());
        }
    }
    w.extend(hex("00000000 00000000"));
    w
}

fn nomsg_with_reads(positions: &[u32]) -> Vec<u8> {
    let mut w = hex("11223344 00000001 00000020 00000001");
    for (i, p) in positions.iter().enumerate() {
        w.extend(hex("00000001"));
        w.extend(p.to_be_bytes());
        w.extend((i as u32).to_be_bytes());
        w.extend(hex("00000100 00000000 00001000"));
    }
    w.extend(hex("00000000 00000000 00000000"));
    w
}

// RFC 8267 §6.4.2: chunk-list complexity beyond what the receiver handles is ERR_CHUNK.
#[test]
fn limits_are_enforced_at_their_boundaries() {
    // 16 segments per Write chunk pass, 17 fail.
    assert!(HeaderView::parse(&nomsg_with_write_chunks(1, 16), &Limits::DEFAULT).is_ok());
    let e = parse_err(&nomsg_with_write_chunks(1, 17));
    assert_eq!(
        e.kind(),
        &HeaderErrorKind::TooManySegments {
            field: Field::WriteList,
            offset: 24,
            count: 17,
            max: 16
        }
    );
    // 8 Write chunks pass, 9 fail.
    let eight = nomsg_with_write_chunks(8, 2);
    let v = HeaderView::parse(&eight, &Limits::DEFAULT).unwrap();
    assert_eq!(v.write_chunk_count(), 8);
    assert_eq!(v.write_segment_count(), 16);
    let e = parse_err(&nomsg_with_write_chunks(9, 2));
    assert!(matches!(
        e.kind(),
        HeaderErrorKind::TooManyWriteChunks { max: 8, .. }
    ));
    assert_eq!(e.responder_reply(), ResponderAction::ErrChunk { xid: XID });
    // 32 Read segments in two chunks of 16 pass; a 33rd fails.
    let mut positions = vec![0u32; 16];
    positions.extend([0x40; 16]);
    let reads = nomsg_with_reads(&positions);
    let v = HeaderView::parse(&reads, &Limits::DEFAULT).unwrap();
    assert_eq!(v.read_segment_count(), 32);
    assert_eq!(v.read_chunk_count(), 2);
    positions.push(0x80);
    let e = parse_err(&nomsg_with_reads(&positions));
    assert_eq!(
        e.kind(),
        &HeaderErrorKind::TooManyReadSegments {
            offset: 16 + 32 * 24,
            max: 32
        }
    );
    // A run of 17 Read segments at one position is one chunk too many segments.
    let e = parse_err(&nomsg_with_reads(&[0x40; 17]));
    assert_eq!(
        e.kind(),
        &HeaderErrorKind::ReadChunkTooLong {
            position: 0x40,
            max: 16
        }
    );
    // Configurable.
    let tight = Limits {
        max_write_chunks: 1,
        ..Limits::DEFAULT
    };
    assert!(matches!(
        HeaderView::parse(&nomsg_with_write_chunks(2, 1), &tight)
            .unwrap_err()
            .kind(),
        HeaderErrorKind::TooManyWriteChunks { max: 1, .. }
    ));
    assert!(HeaderView::parse(&nomsg_with_write_chunks(40, 20), &Limits::PERMISSIVE).is_ok());
}

#[test]
fn wrapping_segments_are_rejected() {
    // offset 0xffff_ffff_ffff_fff0 + length 0x20 wraps u64.
    let e = parse_err(&hex("
        11223344 00000001 00000020 00000001
        00000001 00000000 00000009 00000020 ffffffff fffffff0
        00000000 00000000 00000000"));
    assert_eq!(
        e.kind(),
        &HeaderErrorKind::SegmentWraps {
            field: Field::ReadList,
            offset: 24,
            segment: Segment::new(9, 0x20, 0xffff_ffff_ffff_fff0)
        }
    );
    let e = parse_err(&hex(
        "
        11223344 00000001 00000020 00000001 00000000 00000000 00000001
        00000002 00000001 00000001 00000000 00000000 00000001 00000002 ffffffff ffffffff",
    ));
    assert!(matches!(
        e.kind(),
        HeaderErrorKind::SegmentWraps {
            field: Field::ReplyChunk,
            offset: 48,
            ..
        }
    ));
    assert_eq!(e.responder_reply(), ResponderAction::ErrChunk { xid: XID });
}

// RFC 8166 §4.1.2's rpc_rdma_error union has only ERR_VERS and ERR_CHUNK.
#[test]
fn unknown_error_code() {
    let e = parse_err(&hex("11223344 00000001 00000020 00000004 00000003"));
    assert_eq!(e.kind(), &HeaderErrorKind::UnknownErrorCode { code: 3 });
    assert_eq!(e.responder_reply(), ResponderAction::ErrChunk { xid: XID });
}

// RFC 8166 §4.5.2 names RDMA_NOMSG with all lists absent as an XDR error.
#[test]
fn nomsg_without_chunks() {
    let e = parse_err(&hex(
        "11223344 00000001 00000020 00000001 00000000 00000000 00000000",
    ));
    assert_eq!(e.kind(), &HeaderErrorKind::NomsgWithoutChunks);
    assert_eq!(e.responder_reply(), ResponderAction::ErrChunk { xid: XID });
}

// RFC 8166 §4.2.1 (the XIDs must match) and §4.5.2 (a mismatch is an XDR error).
#[test]
fn rpc_message_must_carry_the_same_xid() {
    let header = "11223344 00000001 00000020 00000000 00000000 00000000 00000000";
    let e = parse_err(&hex(header));
    assert_eq!(
        e.kind(),
        &HeaderErrorKind::MissingRpcMessage { available: 0 }
    );
    let e = parse_err(&hex(&format!("{header} 1122")));
    assert_eq!(
        e.kind(),
        &HeaderErrorKind::MissingRpcMessage { available: 2 }
    );
    let e = parse_err(&hex(&format!("{header} 11223345")));
    assert_eq!(
        e.kind(),
        &HeaderErrorKind::RpcXidMismatch {
            rpc_xid: 0x1122_3345
        }
    );
    assert_eq!(e.responder_reply(), ResponderAction::ErrChunk { xid: XID });
    let lax = Limits {
        require_rpc_xid: false,
        ..Limits::DEFAULT
    };
    let bare = hex(header);
    let v = HeaderView::parse(&bare, &lax).unwrap();
    assert_eq!(v.rpc_message(), Some(&[][..]));
}

#[test]
fn encoders_report_short_buffers_without_writing_past_them() {
    let reply = [Segment::new(1, 2, 3)];
    let repr = HeaderRepr {
        xid: XID,
        credit: CREDIT,
        body: BodyRepr::Nomsg(ChunkListsRepr {
            reads: &[],
            writes: &[],
            reply: Some(&reply),
        }),
    };
    assert_eq!(repr.encoded_len(), 16 + 4 + 4 + 4 + 4 + 16);
    let mut out = [0u8; 47];
    assert_eq!(
        repr.encode(&mut out),
        Err(BufferTooSmall {
            needed: 48,
            available: 47
        })
    );
    let mut out = [0u8; 19];
    assert_eq!(
        encode_err_chunk(XID, 1, &mut out),
        Err(BufferTooSmall {
            needed: 20,
            available: 19
        })
    );
    let wire = hex("11223344 00000001 00000020 00000004 00000002");
    let v = HeaderView::parse(&wire, &Limits::DEFAULT).unwrap();
    let mut out = [0u8; 19];
    assert_eq!(
        v.encode_into(&mut out),
        Err(BufferTooSmall {
            needed: 20,
            available: 19
        })
    );
    let owned = Header::from_view(&v);
    assert_eq!(
        owned.encode(&mut out),
        Err(BufferTooSmall {
            needed: 20,
            available: 19
        })
    );
}

#[test]
fn trailing_bytes_after_nomsg_are_kept_but_not_a_message() {
    let wire = hex("
        11223344 00000001 00000020 00000001
        00000000 00000000 00000001 00000000
        deadbeef");
    let v = HeaderView::parse(&wire, &Limits::DEFAULT).unwrap();
    assert_eq!(v.header_len(), 32);
    assert_eq!(v.rpc_message(), None);
    assert_eq!(v.after_header(), &hex("deadbeef")[..]);
    assert_eq!(Header::from_view(&v).to_bytes(), wire);
}

#[test]
fn errors_display_their_context() {
    let e = parse_err(&hex(
        "11223344 00000001 00000020 00000000 00000000 00000002",
    ));
    let s = e.to_string();
    assert!(s.contains("0x11223344"), "{s}");
    assert!(s.contains("write list"), "{s}");
    let e: Box<dyn std::error::Error> = Box::new(parse_err(&[]));
    assert!(e.to_string().contains("truncated in xid"), "{e}");
}
