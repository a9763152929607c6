//! The NFSv3 and MOUNT v3 decoders and the server behind them, on arbitrary arguments.
//!
//! The first octet picks a program and procedure; the rest is the argument body of a
//! well-formed call header. A 37-octet handle at the start of the body is replaced by
//! the real root handle, so the fuzzer reaches the backend (an in-memory file system
//! that persists across inputs) rather than stopping at NFS3ERR_BADHANDLE. Checked:
//!
//! - nothing panics, and every call gets a reply for its XID;
//! - a SUCCESS reply's results decode with the client's codec, to the last octet;
//! - arguments that decode re-encode to exactly the octets they came from (XDR is
//!   canonical: padding is zero, booleans 0 or 1).
#![no_main]

use std::sync::{Arc, Mutex, OnceLock};

use libfuzzer_sys::fuzz_target;
use rpcrdma_ulp::ddp::{reply_results, DdpCursor, DdpEncoder, Void, XdrCodec};
use rpcrdma_ulp::nfs::mount::{self, DirPath, Exports, MountList, MountRes3};
use rpcrdma_ulp::nfs::server::{MemFs, MountProgram, MountShared, NfsConfig, NfsProgram, NfsShared};
use rpcrdma_ulp::nfs::v3::args::*;
use rpcrdma_ulp::nfs::v3::procs;
use rpcrdma_ulp::nfs::v3::res::*;
use rpcrdma_ulp::nfs::v3::types::{DirOpArgs3, NfsFh3};
use rpcrdma_ulp::program::{Dispatched, Dispatcher, InboundCall};
use rpcrdma_ulp::rpc::{CallHeader, OpaqueAuth};

struct World {
    d: Dispatcher,
    root: Vec<u8>,
    reply: Vec<u8>,
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
        let mount = MountShared::new("/", shared.clone());
        let mut d = Dispatcher::new();
        d.register(Box::new(NfsProgram::new(shared.clone()))).unwrap();
        d.register(Box::new(MountProgram::new(mount, "fuzz".into()))).unwrap();
        Mutex::new(World {
            d,
            root: shared.root_handle().as_bytes().to_vec(),
            reply: vec![0; 256 * 1024],
        })
    })
}

/// Decodes `body` as `T`; if it decodes completely, re-encoding gives the same octets.
fn canonical<'a, T: XdrCodec<'a>>(body: &'a [u8]) {
    let mut c = DdpCursor::inline(body, 0);
    let Ok(v) = T::decode(&mut c) else { return };
    if c.finish().is_err() {
        return;
    }
    let mut out = vec![0u8; body.len() + 8];
    let mut e = DdpEncoder::inline(&mut out, 0);
    v.encode(&mut e).expect("a decoded value re-encodes");
    let n = e.finish().len;
    assert_eq!(&out[..n], body, "non-canonical round trip");
}

fn results<'a, T: XdrCodec<'a>>(reply: &'a [u8]) {
    if let Ok((_, mut c)) = reply_results(reply, &[]) {
        T::decode(&mut c).expect("server results decode");
        c.finish().expect("server results have nothing left over");
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, body)) = data.split_first() else { return };
    let (prog, procedure) = if sel & 0x80 == 0 {
        (100_003, u32::from(sel % 23))
    } else {
        (mount::MOUNT_PROGRAM, u32::from(sel % 7))
    };
    let mut w = world().lock().unwrap_or_else(|p| p.into_inner());
    let mut body = body.to_vec();
    if body.len() >= 41 && body[..4] == [0, 0, 0, 37] {
        let root = w.root.clone();
        body[4..41].copy_from_slice(&root);
    }
    if prog == 100_003 {
        match procedure {
            procs::GETATTR | procs::READLINK | procs::FSSTAT | procs::FSINFO | procs::PATHCONF => {
                canonical::<NfsFh3>(&body)
            }
            procs::SETATTR => canonical::<SetattrArgs>(&body),
            procs::LOOKUP | procs::REMOVE | procs::RMDIR => canonical::<DirOpArgs3>(&body),
            procs::ACCESS => canonical::<AccessArgs>(&body),
            procs::READ => canonical::<ReadArgs>(&body),
            procs::WRITE => canonical::<WriteArgs>(&body),
            procs::CREATE => canonical::<CreateArgs>(&body),
            procs::MKDIR => canonical::<MkdirArgs>(&body),
            procs::SYMLINK => canonical::<SymlinkArgs>(&body),
            procs::MKNOD => canonical::<MknodArgs>(&body),
            procs::RENAME => canonical::<RenameArgs>(&body),
            procs::LINK => canonical::<LinkArgs>(&body),
            procs::READDIR => canonical::<ReaddirArgs>(&body),
            procs::READDIRPLUS => canonical::<ReaddirplusArgs>(&body),
            procs::COMMIT => canonical::<CommitArgs>(&body),
            _ => {}
        }
    } else if procedure == mount::procs::MNT || procedure == mount::procs::UMNT {
        canonical::<DirPath>(&body);
    }
    let h = CallHeader {
        xid: 0x0102_0304,
        prog,
        vers: 3,
        procedure,
        cred: OpaqueAuth::None,
        verf: OpaqueAuth::None,
    };
    let mut msg = vec![0u8; 64];
    let n = h.encode(&mut msg).unwrap();
    msg.truncate(n);
    msg.extend_from_slice(&body);
    let World { d, reply, .. } = &mut *w;
    let len = match d.dispatch(&InboundCall::inline(&msg), reply) {
        Ok(Dispatched::Reply(r)) => {
            assert_eq!(r.xid, 0x0102_0304);
            assert!(r.write_chunks.is_empty());
            r.len
        }
        // A reply that does not fit the 256 KiB buffer is an overrun, not a crash.
        Err(_) => return,
        Ok(other) => panic!("a valid call header must be answered: {other:?}"),
    };
    let r = &reply[..len];
    if prog == 100_003 {
        match procedure {
            procs::GETATTR => results::<GetattrRes>(r),
            procs::SETATTR => results::<SetattrRes>(r),
            procs::LOOKUP => results::<LookupRes>(r),
            procs::ACCESS => results::<AccessRes>(r),
            procs::READLINK => results::<ReadlinkRes>(r),
            procs::READ => results::<ReadRes>(r),
            procs::WRITE => results::<WriteRes>(r),
            procs::CREATE | procs::MKDIR | procs::SYMLINK | procs::MKNOD => {
                results::<CreateRes>(r)
            }
            procs::REMOVE | procs::RMDIR => results::<RemoveRes>(r),
            procs::RENAME => results::<RenameRes>(r),
            procs::LINK => results::<LinkRes>(r),
            procs::READDIR => results::<ReaddirRes>(r),
            procs::READDIRPLUS => results::<ReaddirplusRes>(r),
            procs::FSSTAT => results::<FsstatRes>(r),
            procs::FSINFO => results::<FsinfoRes>(r),
            procs::PATHCONF => results::<PathconfRes>(r),
            procs::COMMIT => results::<CommitRes>(r),
            _ => results::<Void>(r),
        }
    } else {
        match procedure {
            mount::procs::MNT => results::<MountRes3>(r),
            mount::procs::DUMP => results::<MountList>(r),
            mount::procs::EXPORT => results::<Exports>(r),
            _ => results::<Void>(r),
        }
    }
});
