//! Property tests: echo codecs round trip through every chunk arrangement, a call's
//! inline bytes plus Read chunks rebuild the all-inline XDR stream (RFC 8166 §3.4.5),
//! reply sizes match the ProcInfo bounds, and no input makes the cursor or the
//! dispatcher panic.

use proptest::prelude::*;

use rpcrdma_ulp::builtin::{
    echo_proc, is_source_pattern, Echo2, EchoData, EchoProgram, SinkRes, SourceArgs, ECHO_PROGRAM,
};
use rpcrdma_ulp::ddp::{
    encode_call, reply_results, DdpCursor, DdpEncodeError, DdpEncoder, ReadItem, XdrCodec,
};
use rpcrdma_ulp::program::{Dispatched, Dispatcher, InboundCall};
use rpcrdma_ulp::rpc::{CallHeader, OpaqueAuth};

fn header(procedure: u32) -> CallHeader<'static> {
    CallHeader {
        xid: 0x55,
        prog: ECHO_PROGRAM,
        vers: 1,
        procedure,
        cred: OpaqueAuth::None,
        verf: OpaqueAuth::None,
    }
}

fn reconstruct(inline: &[u8], reads: &[ReadItem<'_>]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut from = 0;
    for r in reads {
        let inline_at = r.position as usize - (out.len() - from);
        out.extend_from_slice(&inline[from..inline_at]);
        out.extend_from_slice(r.data);
        out.resize(out.len() + (4 - r.data.len() % 4) % 4, 0);
        from = inline_at;
    }
    out.extend_from_slice(&inline[from..]);
    out
}

/// Encodes `args` as a call with chunk threshold `min_len`, checks the reconstruction
/// against an all-inline encoding, and decodes it back as a responder would. (A macro:
/// decoded values borrow the local buffers, so the codec type's lifetime is chosen here.)
macro_rules! call_round_trip {
    ($procedure:expr, $ty:ident, $args:expr, $min_len:expr) => {{
        let args = $args;
        let min_len: usize = $min_len;
        let mut split = vec![0u8; 1024];
        let call = encode_call(&mut split, &header($procedure), &args, min_len).unwrap();
        let mut full = vec![0u8; 1024];
        let n = header($procedure).encode(&mut full).unwrap();
        let mut enc = DdpEncoder::inline(&mut full[n..], n);
        args.encode(&mut enc).unwrap();
        let whole = enc.finish();
        assert_eq!(whole.len, call.xdr_len);
        assert_eq!(
            reconstruct(&split[..call.len], &call.read_chunks),
            &full[..whole.len]
        );
        for r in call.read_chunks.iter() {
            assert!(r.data.len() >= min_len.max(1));
        }
        let reads = call.read_chunks;
        let mut c = DdpCursor::with_read_chunks(&split[..call.len], n, &reads).unwrap();
        let back = $ty::decode(&mut c).unwrap();
        c.finish().unwrap();
        assert_eq!(back, args);
    }};
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn echo_data_calls_round_trip(data in proptest::collection::vec(any::<u8>(), 0..300), min_len in 0usize..64) {
        call_round_trip!(echo_proc::ECHO, EchoData, EchoData { data: &data }, min_len);
    }

    #[test]
    fn echo2_calls_round_trip(
        a in proptest::collection::vec(any::<u8>(), 0..100),
        b in proptest::collection::vec(any::<u8>(), 0..100),
        tag in any::<u32>(),
        min_len in 0usize..40,
    ) {
        call_round_trip!(echo_proc::ECHO2, Echo2, Echo2 { a: &a, tag, b: &b }, min_len);
    }

    #[test]
    fn fixed_codecs_round_trip(len in any::<u32>(), crc in any::<u32>(), want in 0u32..=(1 << 24)) {
        call_round_trip!(echo_proc::SINK, SinkRes, SinkRes { len, crc32c: crc }, 1);
        call_round_trip!(echo_proc::SOURCE, SourceArgs, SourceArgs { len: want }, 1);
    }

    // Results: each Write chunk is absent, empty, too small or big enough; the encoder
    // refuses exactly the too-small case, and otherwise the requester decodes what the
    // responder encoded from the inline reply plus what was written.
    #[test]
    fn echo2_results_through_write_chunks(
        a in proptest::collection::vec(any::<u8>(), 0..64),
        b in proptest::collection::vec(any::<u8>(), 0..64),
        tag in any::<u32>(),
        caps in proptest::collection::vec(prop_oneof![Just(0u64), 0u64..70], 0..3),
    ) {
        let res = Echo2 { a: &a, tag, b: &b };
        let mut buf = vec![0u8; 512];
        let mut enc = DdpEncoder::write_chunks(&mut buf[24..], 24, &caps).unwrap();
        let items = [&a, &b];
        let too_small = items
            .iter()
            .enumerate()
            .find(|(i, d)| caps.get(*i).is_some_and(|&c| c > 0 && (d.len() as u64) > c));
        match (res.encode(&mut enc), too_small) {
            (Err(DdpEncodeError::WriteChunkTooSmall { chunk, .. }), Some((i, _))) => {
                prop_assert_eq!(chunk as usize, i);
            }
            (Ok(()), None) => {
                let done = enc.finish();
                rpcrdma_ulp::rpc::ReplyHeader::success(1).encode(&mut buf).unwrap();
                let mut written: Vec<&[u8]> = vec![&[]; caps.len()];
                for w in done.writes.iter() {
                    written[w.chunk as usize] = w.data;
                }
                let (_, mut c) = reply_results(&buf[..done.len], &written).unwrap();
                prop_assert_eq!(Echo2::decode(&mut c).unwrap(), res);
                c.finish().unwrap();
            }
            (r, t) => prop_assert!(false, "encode {:?} but too-small chunk {:?}", r, t),
        }
    }

    // ECHO through the dispatcher: the reply is as long as ProcInfo's bound for the
    // payload length, inline or with a Write chunk, and carries the payload back.
    #[test]
    fn echo_reply_matches_proc_info_bound(
        data in proptest::collection::vec(any::<u8>(), 0..600),
        chunked in any::<bool>(),
        write_chunk in any::<bool>(),
    ) {
        let mut d = Dispatcher::new();
        d.register(Box::new(EchoProgram::with_source_max(0))).unwrap();
        let info = d.proc_info(ECHO_PROGRAM, 1, echo_proc::ECHO).unwrap();
        let mut msg = vec![0u8; 1024];
        let min_len = if chunked { 1 } else { usize::MAX };
        let call = encode_call(&mut msg, &header(echo_proc::ECHO), &EchoData { data: &data }, min_len).unwrap();
        let caps = [data.len() as u64];
        let inbound = InboundCall {
            msg: &msg[..call.len],
            reads: &call.read_chunks,
            write_chunks: if write_chunk { &caps } else { &[] },
            padding: None,
        };
        let mut out = vec![0u8; 1024];
        let Ok(Dispatched::Reply(r)) = d.dispatch(&inbound, &mut out) else {
            panic!("no reply");
        };
        let ddp_out = write_chunk && !data.is_empty();
        let inline_data = if ddp_out { 0 } else { data.len().div_ceil(4) * 4 };
        prop_assert_eq!(r.len, 24 + 4 + inline_data);
        // The bound is exact, except that it never drops below the 32-octet PROG_MISMATCH
        // reply a requester must also be able to receive.
        prop_assert_eq!(
            info.max_reply_len(data.len() as u32, ddp_out, 0),
            (r.len as u64).max(32)
        );
        let written: Vec<&[u8]> = r.write_chunks.iter().map(|w| w.data).collect();
        let (xid, mut c) = reply_results(&out[..r.len], &written).unwrap();
        prop_assert_eq!(xid, 0x55);
        prop_assert_eq!(EchoData::decode(&mut c).unwrap().data, &data[..]);
        c.finish().unwrap();
    }

    // SOURCE returns the pattern of the requested length.
    #[test]
    fn source_returns_requested_pattern(len in 0u32..2048, write_chunk in any::<bool>()) {
        let mut d = Dispatcher::new();
        d.register(Box::new(EchoProgram::with_source_max(2048))).unwrap();
        let mut msg = [0u8; 64];
        let call = encode_call(&mut msg, &header(echo_proc::SOURCE), &SourceArgs { len }, 1).unwrap();
        let caps = [4096u64];
        let inbound = InboundCall {
            write_chunks: if write_chunk { &caps } else { &[] },
            ..InboundCall::inline(&msg[..call.len])
        };
        let mut out = vec![0u8; 4096];
        let Ok(Dispatched::Reply(r)) = d.dispatch(&inbound, &mut out) else {
            panic!("no reply");
        };
        let written: Vec<&[u8]> = r.write_chunks.iter().map(|w| w.data).collect();
        let (_, mut c) = reply_results(&out[..r.len], &written).unwrap();
        let got = EchoData::decode(&mut c).unwrap().data;
        prop_assert_eq!(got.len(), len as usize);
        prop_assert!(is_source_pattern(got));
    }

    // Arbitrary bytes and chunk lists: decoding may fail, never panic.
    #[test]
    fn arbitrary_input_never_panics(
        msg in proptest::collection::vec(any::<u8>(), 0..200),
        at in 0usize..220,
        positions in proptest::collection::vec(any::<u32>(), 0..4),
        max in any::<u32>(),
    ) {
        let chunk = [0xabu8; 9];
        let reads: Vec<ReadItem<'_>> = positions
            .iter()
            .map(|&p| ReadItem { position: p % 256, data: &chunk[..(p as usize % 10)] })
            .collect();
        let mut c = DdpCursor::with_read_chunks(&msg, at, &reads).unwrap();
        for _ in 0..8 {
            let _ = c.opaque_ddp(max);
            let _ = c.u32();
            let _ = c.opaque(max);
        }
        let _ = c.finish();
        let mut d = Dispatcher::new();
        d.register(Box::new(EchoProgram::with_source_max(16))).unwrap();
        let mut out = [0u8; 128];
        let inbound = InboundCall { reads: &reads, ..InboundCall::inline(&msg) };
        let _ = d.dispatch(&inbound, &mut out);
    }
}
