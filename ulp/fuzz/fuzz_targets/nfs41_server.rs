//! The NFSv4.1 server (COMPOUND of program 100003 version 4) on arbitrary operations.
//!
//! The first octet picks the form: even, the rest is a whole COMPOUND4args (tag, minor
//! version, count, operations); odd, the harness writes the tag, minor version 1 and a
//! count of the second octet (at most 16) plus one, and a SEQUENCE on slot 0 of a session
//! it set up with the slot's next sequence id (the previous one every eighth input, so
//! the reply cache answers), then the rest as operations. The four octets `RTFH` anywhere
//! become the root's handle (`nfs_fh4`), so the fuzzer gets past PUTFH. The in-memory
//! file system and the state persist across inputs. Checked:
//!
//! - nothing panics, and every call gets a reply for its XID;
//! - a SUCCESS reply's results decode with the client's codec, to the last octet.
#![no_main]

use std::sync::{Arc, Mutex, OnceLock};

use libfuzzer_sys::fuzz_target;
use rpcrdma_ulp::ddp::{reply_results, DdpCursor, DdpEncoder, XdrCodec};
use rpcrdma_ulp::nfs::server::{MemFs, NfsConfig, NfsProgram, NfsShared};
use rpcrdma_ulp::nfs::v41::compound::*;
use rpcrdma_ulp::nfs::v41::{ChannelAttrs4, SessionId};
use rpcrdma_ulp::program::{Dispatched, Dispatcher, InboundCall};
use rpcrdma_ulp::rpc::{CallHeader, OpaqueAuth};

struct World {
    d: Dispatcher,
    shared: Arc<NfsShared>,
    root: Vec<u8>,
    sid: SessionId,
    reply: Vec<u8>,
    n: u64,
}

fn call_msg(body: &[u8]) -> Vec<u8> {
    let h = CallHeader {
        xid: 0x0102_0304,
        prog: 100_003,
        vers: 4,
        procedure: 1,
        cred: OpaqueAuth::None,
        verf: OpaqueAuth::None,
    };
    let mut msg = vec![0u8; 64];
    let n = h.encode(&mut msg).unwrap();
    msg.truncate(n);
    msg.extend_from_slice(body);
    msg
}

fn enc(ops: &[ArgOp<'_>]) -> Vec<u8> {
    let args = CompoundArgs {
        tag: b"",
        minorversion: 1,
        ops: ops.to_vec(),
    };
    let mut out = vec![0u8; 4096];
    let mut e = DdpEncoder::inline(&mut out, 0);
    args.encode(&mut e).unwrap();
    let n = e.finish().len;
    out.truncate(n);
    out
}

fn run(d: &mut Dispatcher, reply: &mut [u8], body: &[u8]) -> Option<Vec<u8>> {
    let msg = call_msg(body);
    let len = match d.dispatch(&InboundCall::inline(&msg), reply) {
        Ok(Dispatched::Reply(r)) => {
            assert_eq!(r.xid, 0x0102_0304);
            r.len
        }
        // A reply that does not fit the buffer is an overrun, not a crash.
        Err(_) => return None,
        Ok(other) => panic!("a valid call header must be answered: {other:?}"),
    };
    let (_, c) = reply_results(&reply[..len], &[]).ok()?;
    Some(c.input()[c.position()..].to_vec())
}

fn world() -> &'static Mutex<World> {
    static W: OnceLock<Mutex<World>> = OnceLock::new();
    W.get_or_init(|| {
        let shared = NfsShared::new(
            Arc::new(MemFs::new(16 << 20)),
            NfsConfig {
                max_read: 64 * 1024,
                max_write: 64 * 1024,
                max_readdir: 16 * 1024,
                ..NfsConfig::default()
            },
        );
        let mut d = Dispatcher::new();
        d.register(Box::new(NfsProgram::new(shared.clone())))
            .unwrap();
        let mut reply = vec![0; 256 * 1024];
        let x = run(
            &mut d,
            &mut reply,
            &enc(&[ArgOp::ExchangeId(ExchangeIdArgs {
                verifier: [1; 8],
                owner: b"fuzz",
                flags: 0,
                impl_id: None,
            })]),
        )
        .unwrap();
        let r = CompoundRes::decode(&mut DdpCursor::inline(&x, 0)).unwrap();
        let ResBody::ExchangeId(x) = &r.results[0].body else {
            panic!()
        };
        let attrs = ChannelAttrs4 {
            maxrequestsize: 1 << 20,
            maxresponsesize: 1 << 20,
            maxresponsesize_cached: 8192,
            maxoperations: 32,
            maxrequests: 4,
            ..ChannelAttrs4::default()
        };
        let cs = run(
            &mut d,
            &mut reply,
            &enc(&[ArgOp::CreateSession(CreateSessionArgs {
                clientid: x.clientid,
                sequence: x.sequenceid,
                flags: 0,
                fore: attrs,
                back: attrs,
                cb_program: 1,
                cb_sec: CbSecParms::AUTH_NONE,
            })]),
        )
        .unwrap();
        let r = CompoundRes::decode(&mut DdpCursor::inline(&cs, 0)).unwrap();
        let ResBody::CreateSession(s) = &r.results[0].body else {
            panic!()
        };
        Mutex::new(World {
            d,
            root: shared.root_handle().as_bytes().to_vec(),
            shared,
            sid: s.sessionid,
            reply,
            n: 0,
        })
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let mut w = world().lock().unwrap_or_else(|p| p.into_inner());
    w.n += 1;
    // RTFH -> the root handle.
    let mut ops = Vec::with_capacity(rest.len() + 64);
    let mut i = 0;
    let src = if sel & 1 == 1 {
        rest.get(1..).unwrap_or(&[])
    } else {
        rest
    };
    while i < src.len() {
        if src[i..].starts_with(b"RTFH") {
            ops.extend_from_slice(&(w.root.len() as u32).to_be_bytes());
            ops.extend_from_slice(&w.root);
            i += 4;
        } else {
            ops.push(src[i]);
            i += 1;
        }
    }
    let body = if sel & 1 == 0 {
        ops
    } else {
        let count = u32::from(rest.first().copied().unwrap_or(0) % 17) + 1;
        let next = {
            let t = w.shared.v41().lock();
            t.sessions
                .get(&w.sid)
                .map_or(1, |s| s.slots[0].seqid.wrapping_add(1))
        };
        let seqid = if w.n % 8 == 0 {
            next.wrapping_sub(1)
        } else {
            next
        };
        let mut b = Vec::new();
        b.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 1]);
        b.extend_from_slice(&count.to_be_bytes());
        let mut e_buf = vec![0u8; 64];
        let mut e = DdpEncoder::inline(&mut e_buf, 0);
        ArgOp::Sequence(SequenceArgs {
            sessionid: w.sid,
            sequenceid: seqid,
            slotid: 0,
            highest_slotid: 0,
            cachethis: true,
        })
        .encode(&mut e)
        .unwrap();
        let n = e.finish().len;
        b.extend_from_slice(&e_buf[..n]);
        b.extend_from_slice(&ops);
        b
    };
    let World { d, reply, .. } = &mut *w;
    if let Some(res) = run(d, reply, &body) {
        let mut c = DdpCursor::inline(&res, 0);
        CompoundRes::decode(&mut c).expect("server results decode");
        c.finish().expect("server results have nothing left over");
    }
});
