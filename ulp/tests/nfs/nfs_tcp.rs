//! ONC RPC over TCP with record marking (RFC 5531 §11) as the NFS server uses it: calls
//! split into fragments, garbage arguments answered while the connection stays up, an
//! oversized record closing the connection, the connection cap, and a large READ inline.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rpcrdma_ulp::ddp::{encode_call, reply_results, ReplyError, XdrCodec};
use rpcrdma_ulp::nfs::server::tcp::{read_record, write_record, TcpConfig, TcpServer};
use rpcrdma_ulp::nfs::server::CreateMode;
use rpcrdma_ulp::nfs::server::{MemFs, NfsBackend, NfsConfig, NfsProgram, NfsShared};
use rpcrdma_ulp::nfs::v3::args::{ReadArgs, StableHow, WriteArgs};
use rpcrdma_ulp::nfs::v3::procs;
use rpcrdma_ulp::nfs::v3::res::{ReadRes, WriteRes};
use rpcrdma_ulp::nfs::v3::types::{NfsFh3, Sattr3};
use rpcrdma_ulp::program::Dispatcher;
use rpcrdma_ulp::rpc::{AcceptStatus, CallHeader, OpaqueAuth};

fn server(cfg: TcpConfig) -> (TcpServer, Arc<NfsShared>, Vec<u8>) {
    let fs = Arc::new(MemFs::default());
    let f = fs
        .create(
            fs.root(),
            b"data",
            CreateMode::Unchecked,
            &Sattr3::default(),
        )
        .unwrap();
    let shared = NfsShared::new(fs, NfsConfig::default());
    let fh = shared.handle(f).as_bytes().to_vec();
    let s = shared.clone();
    let factory = Arc::new(move |_| {
        let mut d = Dispatcher::new();
        d.register(Box::new(NfsProgram::new(s.clone()))).unwrap();
        d
    });
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    (TcpServer::spawn(l, cfg, factory).unwrap(), shared, fh)
}

fn msg<'a, A: XdrCodec<'a>>(procedure: u32, xid: u32, args: &A) -> Vec<u8> {
    let h = CallHeader {
        xid,
        prog: 100_003,
        vers: 3,
        procedure,
        cred: OpaqueAuth::None,
        verf: OpaqueAuth::None,
    };
    let mut buf = vec![0u8; 2 << 20];
    let c = encode_call(&mut buf, &h, args, usize::MAX).unwrap();
    buf.truncate(c.len);
    buf
}

fn rpc(s: &mut TcpStream, m: &[u8]) -> Vec<u8> {
    write_record(s, m).unwrap();
    let mut r = Vec::new();
    assert!(read_record(s, 4 << 20, &mut r).unwrap(), "a reply record");
    r
}

#[test]
fn fragments_garbage_and_large_reads() {
    let (srv, _, fh) = server(TcpConfig::default());
    let mut s = TcpStream::connect(srv.local_addr()).unwrap();
    // 200 KiB WRITE sent as three fragments.
    let data: Vec<u8> = (0..200 * 1024).map(|i| (i % 251) as u8).collect();
    let m = msg(
        procs::WRITE,
        1,
        &WriteArgs {
            file: NfsFh3(&fh),
            offset: 0,
            count: data.len() as u32,
            stable: StableHow::FileSync,
            data: &data,
        },
    );
    let (a, rest) = m.split_at(100);
    let (b, c) = rest.split_at(70_000);
    for (frag, last) in [(a, false), (b, false), (c, true)] {
        let mark = frag.len() as u32 | if last { 0x8000_0000 } else { 0 };
        s.write_all(&mark.to_be_bytes()).unwrap();
        s.write_all(frag).unwrap();
    }
    let mut r = Vec::new();
    assert!(read_record(&mut s, 1 << 20, &mut r).unwrap());
    let (xid, mut cur) = reply_results(&r, &[]).unwrap();
    assert_eq!(xid, 1);
    assert_eq!(
        WriteRes::decode(&mut cur).unwrap().ok().unwrap().count,
        200 * 1024
    );
    // Garbage arguments: GARBAGE_ARGS for that XID, and the connection carries on.
    let mut bad = msg(procs::GETATTR, 2, &NfsFh3(&fh));
    bad.truncate(bad.len() - 3);
    let r = rpc(&mut s, &bad);
    match reply_results(&r, &[]) {
        Err(ReplyError::NotSuccess { xid, status }) => {
            assert_eq!((xid, status), (2, AcceptStatus::GarbageArgs))
        }
        other => panic!("{other:?}"),
    }
    // The whole file back inline in one READ reply.
    let r = rpc(
        &mut s,
        &msg(
            procs::READ,
            3,
            &ReadArgs {
                file: NfsFh3(&fh),
                offset: 0,
                count: 256 * 1024,
            },
        ),
    );
    let (_, mut cur) = reply_results(&r, &[]).unwrap();
    let ok = ReadRes::decode(&mut cur).unwrap().ok().unwrap();
    assert!(ok.eof);
    assert_eq!(ok.data, &data[..]);
    assert_eq!(srv.counters().calls.load(Ordering::Relaxed), 3);
}

#[test]
fn oversized_records_and_the_connection_cap() {
    let (srv, _, _) = server(TcpConfig {
        max_record: 1024,
        reply_buf: 64 * 1024,
        max_connections: 1,
        idle_timeout: Some(Duration::from_millis(1500)),
    });
    // A record over max_record: the server closes the connection.
    let mut s = TcpStream::connect(srv.local_addr()).unwrap();
    s.write_all(&(0x8000_0000u32 | 4096).to_be_bytes()).unwrap();
    s.write_all(&[0u8; 4096]).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut b = [0u8; 4];
    assert_eq!(s.read(&mut b).unwrap_or(0), 0, "closed without a reply");
    let end = Instant::now() + Duration::from_secs(10);
    while srv.counters().active.load(Ordering::Relaxed) != 0 {
        assert!(Instant::now() < end);
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(srv.counters().bad_records.load(Ordering::Relaxed), 1);
    // One connection at a time: a second is closed at once, the first still works.
    let mut first = TcpStream::connect(srv.local_addr()).unwrap();
    let r = rpc(&mut first, &msg(0, 9, &rpcrdma_ulp::ddp::Void));
    assert_eq!(reply_results(&r, &[]).unwrap().0, 9);
    let mut second = TcpStream::connect(srv.local_addr()).unwrap();
    second
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let _ = write_record(&mut second, &msg(0, 10, &rpcrdma_ulp::ddp::Void));
    let mut r = Vec::new();
    assert!(!matches!(
        read_record(&mut second, 1 << 16, &mut r),
        Ok(true)
    ));
    assert_eq!(srv.counters().refused.load(Ordering::Relaxed), 1);
    let r = rpc(&mut first, &msg(0, 11, &rpcrdma_ulp::ddp::Void));
    assert_eq!(reply_results(&r, &[]).unwrap().0, 11);
    // An idle connection is closed after the idle timeout, freeing its slot.
    let end = Instant::now() + Duration::from_secs(10);
    while srv.counters().active.load(Ordering::Relaxed) != 0 {
        assert!(Instant::now() < end, "idle connection never closed");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut third = TcpStream::connect(srv.local_addr()).unwrap();
    let r = rpc(&mut third, &msg(0, 12, &rpcrdma_ulp::ddp::Void));
    assert_eq!(reply_results(&r, &[]).unwrap().0, 12);
}
