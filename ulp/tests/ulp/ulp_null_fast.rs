//! The dispatcher's NULL fast path (a NULL call with nothing after its header and no Read
//! chunks answered without building an argument cursor) and the calls it must leave to
//! the general path: a NULL with inline arguments or with a Read chunk is GARBAGE_ARGS
//! (RFC 5531 §9, accept_stat 4), and a NULL of an unknown program or version still gets
//! PROG_UNAVAIL / PROG_MISMATCH, as those are checked first.

use rpcrdma_ulp::builtin::{EchoProgram, ECHO_PROGRAM};
use rpcrdma_ulp::ddp::ReadItem;
use rpcrdma_ulp::program::{Dispatched, Dispatcher, InboundCall};
use rpcrdma_ulp::rpc::{CallHeader, OpaqueAuth};

const XID: u32 = 0x5566_7788;

fn words(w: &[u32]) -> Vec<u8> {
    w.iter().flat_map(|v| v.to_be_bytes()).collect()
}

fn null_call(prog: u32, vers: u32) -> Vec<u8> {
    let h = CallHeader {
        xid: XID,
        prog,
        vers,
        procedure: 0,
        cred: OpaqueAuth::None,
        verf: OpaqueAuth::None,
    };
    let mut buf = vec![0u8; h.encoded_len()];
    let n = h.encode(&mut buf).expect("header encodes");
    buf.truncate(n);
    buf
}

fn echo_dispatcher() -> Dispatcher {
    let mut d = Dispatcher::new();
    d.register(Box::new(EchoProgram::new())).expect("registers");
    d
}

/// The reply bytes and the dispatcher's NULL count after answering `call`.
fn answer(d: &mut Dispatcher, call: &InboundCall<'_>) -> (Vec<u8>, u64) {
    let mut out = [0u8; 128];
    let len = match d.dispatch(call, &mut out) {
        Ok(Dispatched::Reply(r)) => {
            assert_eq!(r.xid, XID);
            r.len
        }
        other => panic!("expected a reply, got {other:?}"),
    };
    (out[..len].to_vec(), d.stats().nulls)
}

/// MSG_ACCEPTED, AUTH_NONE verifier, `stat`, then `rest`.
fn accepted(stat: u32, rest: &[u32]) -> Vec<u8> {
    let mut w = vec![XID, 1, 0, 0, 0, stat];
    w.extend_from_slice(rest);
    words(&w)
}

#[test]
fn bare_null_is_success_and_counted() {
    let mut d = echo_dispatcher();
    let msg = null_call(ECHO_PROGRAM, 1);
    for n in 1..=3 {
        assert_eq!(
            answer(&mut d, &InboundCall::inline(&msg)),
            (accepted(0, &[]), n)
        );
    }
}

#[test]
fn null_with_a_read_chunk_is_garbage_args() {
    let mut d = echo_dispatcher();
    let msg = null_call(ECHO_PROGRAM, 1);
    let data = [7u8; 8];
    let reads = [ReadItem {
        position: msg.len() as u32,
        data: &data,
    }];
    let call = InboundCall {
        reads: &reads,
        ..InboundCall::inline(&msg)
    };
    assert_eq!(answer(&mut d, &call), (accepted(4, &[]), 0));
}

#[test]
fn null_with_one_trailing_word_is_garbage_args() {
    let mut d = echo_dispatcher();
    let mut msg = null_call(ECHO_PROGRAM, 1);
    msg.extend_from_slice(&[0, 0, 0, 0]);
    assert_eq!(
        answer(&mut d, &InboundCall::inline(&msg)),
        (accepted(4, &[]), 0)
    );
}

#[test]
fn null_of_unknown_program_or_version_is_refused_before_the_fast_path() {
    let mut d = echo_dispatcher();
    let msg = null_call(0x3fff_fff0, 1);
    assert_eq!(
        answer(&mut d, &InboundCall::inline(&msg)),
        (accepted(1, &[]), 0)
    );
    let msg = null_call(ECHO_PROGRAM, 9);
    assert_eq!(
        answer(&mut d, &InboundCall::inline(&msg)),
        (accepted(2, &[1, 1]), 0)
    );
}
