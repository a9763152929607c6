//! Property tests for the transport header codec: random valid headers survive
//! encode -> decode -> encode unchanged, and arbitrary or damaged input never panics and
//! is classified by the right typed error.

use proptest::prelude::*;
use rpcrdma::wire::header::*;

fn segment() -> impl Strategy<Value = Segment> {
    (any::<u32>(), any::<u32>(), any::<u64>()).prop_map(|(handle, length, offset)| {
        let s = Segment::new(handle, length, offset);
        if s.wraps() {
            // Keep it valid: pull the region back into the address space.
            Segment::new(handle, length, offset >> 8)
        } else {
            s
        }
    })
}

fn position() -> impl Strategy<Value = u32> {
    prop_oneof![
        Just(0u32),
        Just(4),
        Just(0x40),
        any::<u32>().prop_map(|p| p & !3)
    ]
}

/// Up to three Read chunks of up to five segments: runs stay within the default limits
/// even when neighbouring chunks share a position.
fn reads() -> impl Strategy<Value = Vec<ReadSegment>> {
    prop::collection::vec((position(), prop::collection::vec(segment(), 1..=5)), 0..=3).prop_map(
        |chunks| {
            chunks
                .into_iter()
                .flat_map(|(p, segs)| segs.into_iter().map(move |s| ReadSegment::new(p, s)))
                .collect()
        },
    )
}

fn lists() -> impl Strategy<Value = ChunkLists> {
    (
        reads(),
        prop::collection::vec(prop::collection::vec(segment(), 0..=5), 0..=3),
        prop::option::of(prop::collection::vec(segment(), 0..=5)),
    )
        .prop_map(|(reads, writes, reply)| ChunkLists {
            reads,
            writes,
            reply,
        })
}

fn body() -> impl Strategy<Value = HeaderBody> {
    prop_oneof![
        lists().prop_map(HeaderBody::Msg),
        lists().prop_map(|mut l| {
            // RDMA_NOMSG must carry at least one chunk (RFC 8166 §4.5.2).
            if l.reads.is_empty() && l.writes.is_empty() && l.reply.is_none() {
                l.reply = Some(Vec::new());
            }
            HeaderBody::Nomsg(l)
        }),
        (any::<u32>(), any::<u32>(), lists()).prop_map(|(align, thresh, lists)| {
            HeaderBody::Msgp {
                align,
                thresh,
                lists,
            }
        }),
        Just(HeaderBody::Done),
        Just(HeaderBody::Error(RdmaError::Chunk)),
        (any::<u32>(), any::<u32>())
            .prop_map(|(low, high)| HeaderBody::Error(RdmaError::Vers { low, high })),
    ]
}

/// A valid message: header plus, for RDMA_MSG/RDMA_MSGP, an RPC message starting with
/// the same XID.
fn header() -> impl Strategy<Value = Header> {
    (
        any::<u32>(),
        any::<u32>(),
        body(),
        prop::collection::vec(any::<u8>(), 0..24),
    )
        .prop_map(|(xid, credit, body, tail)| {
            let mut h = Header {
                xid,
                credit,
                body,
                payload: Vec::new(),
            };
            if h.procedure().has_inline_message() {
                h.payload.extend(xid.to_be_bytes());
                h.payload.extend(tail);
            }
            h
        })
}

/// The invariants every parse result must satisfy, whatever the input.
fn check_outcome(bytes: &[u8], limits: &Limits) -> Result<(), TestCaseError> {
    match HeaderView::parse(bytes, limits) {
        Ok(v) => {
            let n = v.header_len();
            prop_assert!(n <= bytes.len());
            let mut out = vec![0u8; v.encoded_len()];
            prop_assert_eq!(v.encode_into(&mut out), Ok(n));
            prop_assert_eq!(&out[..], &bytes[..n]);
            // The iterators agree with the counts.
            prop_assert_eq!(v.read_list().count(), v.read_segment_count());
            prop_assert_eq!(
                v.read_chunks().map(|c| c.len()).sum::<usize>(),
                v.read_segment_count()
            );
            prop_assert_eq!(v.read_chunks().count(), v.read_chunk_count());
            prop_assert_eq!(v.write_list().count(), v.write_chunk_count());
            prop_assert_eq!(
                v.write_list().map(|c| c.count()).sum::<usize>(),
                v.write_segment_count()
            );
            prop_assert_eq!(
                v.reply_chunk().map_or(0, |c| c.count()),
                v.reply_segment_count()
            );
            for s in v
                .read_list()
                .map(|r| r.segment)
                .chain(v.write_list().flatten())
                .chain(v.reply_chunk().into_iter().flatten())
            {
                prop_assert!(!s.wraps());
            }
            prop_assert_eq!(Header::from_view(&v).to_bytes(), bytes);
        }
        Err(e) => {
            prop_assert_eq!(e.xid().is_none(), bytes.len() < 4);
            let is_vers = matches!(e.kind(), HeaderErrorKind::VersionMismatch { .. });
            match e.responder_reply() {
                ResponderAction::ErrVers { xid } => {
                    prop_assert!(is_vers);
                    prop_assert_eq!(Some(xid), e.xid());
                }
                ResponderAction::ErrChunk { xid } => {
                    prop_assert!(!is_vers);
                    prop_assert_eq!(Some(xid), e.xid());
                    prop_assert!(bytes.len() >= 8);
                }
                ResponderAction::Drop => prop_assert!(bytes.len() < 8),
            }
            prop_assert!(!e.to_string().is_empty());
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn encode_decode_round_trip(h in header()) {
        let bytes = h.to_bytes();
        prop_assert_eq!(bytes.len(), h.encoded_len());
        let v = HeaderView::parse(&bytes, &Limits::DEFAULT).expect("valid header parses");
        prop_assert_eq!(v.header_len(), h.header_len());
        prop_assert_eq!(v.procedure(), h.procedure());
        prop_assert_eq!(Header::from_view(&v), h.clone());
        // The borrowed repr and the view encode the same bytes.
        let from_repr = h.with_repr(|r| {
            let mut out = vec![0u8; r.encoded_len()];
            r.encode(&mut out).map(|n| out[..n].to_vec())
        });
        prop_assert_eq!(from_repr.as_deref(), Ok(v.header_bytes()));
        check_outcome(&bytes, &Limits::DEFAULT)?;
    }

    #[test]
    fn limits_admit_exactly_the_counts_present(h in header()) {
        let bytes = h.to_bytes();
        let v = HeaderView::parse(&bytes, &Limits::PERMISSIVE).expect("valid header parses");
        let longest_run = v
            .read_chunks()
            .map(|c| c.len())
            .chain(v.write_list().map(|c| c.len()))
            .chain(v.reply_chunk().map(|c| c.len()))
            .max()
            .unwrap_or(0) as u32;
        let exact = Limits {
            max_read_segments: v.read_segment_count() as u32,
            max_write_chunks: v.write_chunk_count() as u32,
            max_segments_per_chunk: longest_run,
            require_rpc_xid: true,
        };
        prop_assert!(HeaderView::parse(&bytes, &exact).is_ok());
        prop_assert!(bytes.len() <= exact.max_header_len() + h.payload.len());
        if exact.max_read_segments > 0 {
            let tight = Limits { max_read_segments: exact.max_read_segments - 1, ..exact };
            let e = HeaderView::parse(&bytes, &tight).unwrap_err();
            prop_assert!(matches!(e.kind(), HeaderErrorKind::TooManyReadSegments { .. }), "{}", e);
        }
        if exact.max_write_chunks > 0 {
            let tight = Limits { max_write_chunks: exact.max_write_chunks - 1, ..exact };
            let e = HeaderView::parse(&bytes, &tight).unwrap_err();
            prop_assert!(matches!(e.kind(), HeaderErrorKind::TooManyWriteChunks { .. }), "{}", e);
        }
        if longest_run > 0 {
            let tight = Limits { max_segments_per_chunk: longest_run - 1, ..exact };
            let e = HeaderView::parse(&bytes, &tight).unwrap_err();
            prop_assert!(
                matches!(
                    e.kind(),
                    HeaderErrorKind::ReadChunkTooLong { .. } | HeaderErrorKind::TooManySegments { .. }
                ),
                "{}", e
            );
        }
    }

    #[test]
    fn truncated_headers_are_truncated(h in header(), cut in any::<prop::sample::Index>()) {
        let bytes = h.to_bytes();
        let cut = cut.index(h.header_len());
        let e = HeaderView::parse(&bytes[..cut], &Limits::DEFAULT).unwrap_err();
        prop_assert!(matches!(e.kind(), HeaderErrorKind::Truncated { .. }), "{}", e);
        prop_assert_eq!(e.xid(), if cut >= 4 { Some(h.xid) } else { None });
        if let HeaderErrorKind::Truncated { offset, needed, available, .. } = *e.kind() {
            prop_assert!(offset <= cut || available == 0);
            prop_assert!(needed > available);
        }
        check_outcome(&bytes[..cut], &Limits::DEFAULT)?;
    }

    #[test]
    fn other_versions_are_version_mismatch(h in header(), version in any::<u32>()) {
        prop_assume!(version != RPCRDMA_VERSION);
        let mut bytes = h.to_bytes();
        bytes[4..8].copy_from_slice(&version.to_be_bytes());
        let e = HeaderView::parse(&bytes, &Limits::DEFAULT).unwrap_err();
        prop_assert_eq!(e.kind(), &HeaderErrorKind::VersionMismatch { version });
        prop_assert_eq!(e.responder_reply(), ResponderAction::ErrVers { xid: h.xid });
    }

    #[test]
    fn unknown_procedures_are_rejected(h in header(), proc in 5u32..) {
        let mut bytes = h.to_bytes();
        bytes[12..16].copy_from_slice(&proc.to_be_bytes());
        let e = HeaderView::parse(&bytes, &Limits::DEFAULT).unwrap_err();
        prop_assert_eq!(e.kind(), &HeaderErrorKind::UnknownProcedure { proc });
        prop_assert_eq!(e.responder_reply(), ResponderAction::ErrChunk { xid: h.xid });
    }

    #[test]
    fn mutated_headers_never_panic(
        h in header(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), 1u8..), 1..4),
    ) {
        let mut bytes = h.to_bytes();
        let len = bytes.len();
        for (at, x) in flips {
            bytes[at.index(len)] ^= x;
        }
        check_outcome(&bytes, &Limits::DEFAULT)?;
        check_outcome(&bytes, &Limits::PERMISSIVE)?;
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        check_outcome(&bytes, &Limits::DEFAULT)?;
        check_outcome(&bytes, &Limits::PERMISSIVE)?;
    }

    // Random words drawn mostly from small values reach deep into the lists, where
    // uniformly random bytes rarely get.
    #[test]
    fn arbitrary_small_words_never_panic(
        words in prop::collection::vec(
            prop_oneof![4 => 0u32..3, 1 => 0u32..32, 1 => any::<u32>()],
            0..64,
        ),
        xid in any::<u32>(),
    ) {
        let mut bytes = Vec::with_capacity(4 * (words.len() + 2));
        bytes.extend(xid.to_be_bytes());
        bytes.extend(RPCRDMA_VERSION.to_be_bytes());
        for w in words {
            bytes.extend(w.to_be_bytes());
        }
        check_outcome(&bytes, &Limits::DEFAULT)?;
        check_outcome(&bytes, &Limits::PERMISSIVE)?;
    }
}
