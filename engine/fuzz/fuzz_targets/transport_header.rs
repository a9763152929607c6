#![no_main]
//! Parses arbitrary bytes as an RPC-over-RDMA transport header. Whatever parses must
//! re-encode (through the view and through the owned form) to exactly the bytes it was
//! parsed from, and its iterators must agree with its counts; whatever fails must carry a
//! responder reply consistent with how far the XID and version could be read.

use libfuzzer_sys::fuzz_target;
use rpcrdma::wire::header::{Header, HeaderErrorKind, HeaderView, Limits, ResponderAction};

fn check(data: &[u8], limits: &Limits) {
    match HeaderView::parse(data, limits) {
        Ok(v) => {
            let n = v.header_len();
            assert_eq!(v.encoded_len(), n);
            let mut out = vec![0u8; n];
            assert_eq!(v.encode_into(&mut out), Ok(n));
            assert_eq!(&out[..], &data[..n]);

            assert_eq!(v.read_list().count(), v.read_segment_count());
            assert_eq!(
                v.read_chunks().map(|c| c.segments().count()).sum::<usize>(),
                v.read_segment_count()
            );
            assert_eq!(v.read_chunks().count(), v.read_chunk_count());
            assert_eq!(v.write_list().count(), v.write_chunk_count());
            assert_eq!(
                v.write_list().map(|c| c.count()).sum::<usize>(),
                v.write_segment_count()
            );
            assert_eq!(
                v.reply_chunk().map_or(0, |c| c.count()),
                v.reply_segment_count()
            );
            let segments = v
                .read_list()
                .map(|r| r.segment)
                .chain(v.write_list().flatten())
                .chain(v.reply_chunk().into_iter().flatten());
            for s in segments {
                assert!(!s.wraps());
            }
            if let Some(off) = v.rpc_msg_offset() {
                assert_eq!(off, n);
            }

            let owned = Header::from_view(&v);
            assert_eq!(owned.header_len(), n);
            assert_eq!(owned.to_bytes(), data);
        }
        Err(e) => {
            assert_eq!(e.xid().is_none(), data.len() < 4);
            match e.responder_reply() {
                ResponderAction::ErrVers { .. } => {
                    assert!(matches!(e.kind(), HeaderErrorKind::VersionMismatch { .. }))
                }
                ResponderAction::ErrChunk { .. } => assert!(data.len() >= 8),
                ResponderAction::Drop => assert!(data.len() < 8),
            }
            let _ = e.to_string();
        }
    }
}

fuzz_target!(|data: &[u8]| {
    check(data, &Limits::DEFAULT);
    check(data, &Limits::PERMISSIVE);
});
