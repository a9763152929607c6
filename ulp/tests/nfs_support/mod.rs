//! Helpers for the NFS tests: a Dispatcher serving NFSv3 and MOUNT over a real backend,
//! called in-process with messages built by the same codecs a client uses.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;

use rpcrdma_ulp::ddp::{encode_call, reply_results, ReplyError, XdrCodec};
use rpcrdma_ulp::nfs::mount::{self, DirPath, MountRes3, MOUNT_PROGRAM};
use rpcrdma_ulp::nfs::server::{
    MountProgram, MountShared, NfsBackend, NfsConfig, NfsProgram, NfsShared,
};
use rpcrdma_ulp::nfs::v3::args::{CreateArgs, CreateHow3, ReadArgs, StableHow, WriteArgs};
use rpcrdma_ulp::nfs::v3::procs;
use rpcrdma_ulp::nfs::v3::res::{CreateRes, GetattrRes, LookupRes, ReadRes, WriteRes};
use rpcrdma_ulp::nfs::v3::types::{DirOpArgs3, Fattr3, NfsFh3, Nfsstat3, Sattr3};
use rpcrdma_ulp::nfs::NFS_PROGRAM;
use rpcrdma_ulp::program::{Dispatched, Dispatcher, InboundCall};
use rpcrdma_ulp::rpc::{AcceptStatus, CallHeader, OpaqueAuth};

/// A fresh empty directory under the system temp dir, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let p = std::env::temp_dir().join(format!(
            "rpcrdma-nfs-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// NFS and MOUNT in one dispatcher, called in-process.
pub struct Local {
    pub d: Dispatcher,
    pub shared: Arc<NfsShared>,
    pub mount: Arc<MountShared>,
    xid: u32,
    reply: Vec<u8>,
}

pub fn header(prog: u32, vers: u32, procedure: u32, xid: u32) -> CallHeader<'static> {
    CallHeader {
        xid,
        prog,
        vers,
        procedure,
        cred: OpaqueAuth::None,
        verf: OpaqueAuth::None,
    }
}

impl Local {
    pub fn new(backend: Arc<dyn NfsBackend>) -> Local {
        let shared = NfsShared::new(backend, NfsConfig::default());
        let mount = MountShared::new("/", shared.clone());
        let mut d = Dispatcher::new();
        d.register(Box::new(NfsProgram::new(shared.clone())))
            .unwrap();
        d.register(Box::new(MountProgram::new(mount.clone(), "test".into())))
            .unwrap();
        Local {
            d,
            shared,
            mount,
            xid: 1,
            reply: vec![0; 2 << 20],
        }
    }

    /// Sends a raw call message and returns the reply bytes.
    pub fn raw(&mut self, msg: &[u8]) -> Vec<u8> {
        match self.d.dispatch(&InboundCall::inline(msg), &mut self.reply) {
            Ok(Dispatched::Reply(r)) => {
                assert!(r.write_chunks.is_empty());
                self.reply[..r.len].to_vec()
            }
            other => panic!("no reply: {other:?}"),
        }
    }

    /// Calls `prog`/`vers`/`procedure` with `args`.
    pub fn call_prog<'a, A: XdrCodec<'a>>(
        &mut self,
        prog: u32,
        vers: u32,
        procedure: u32,
        args: &A,
    ) -> Vec<u8> {
        self.xid += 1;
        let mut buf = vec![0u8; 2 << 20];
        let h = header(prog, vers, procedure, self.xid);
        let c = encode_call(&mut buf, &h, args, usize::MAX).unwrap();
        let msg = buf[..c.len].to_vec();
        self.raw(&msg)
    }

    /// Calls NFSv3 `procedure`.
    pub fn call<'a, A: XdrCodec<'a>>(&mut self, procedure: u32, args: &A) -> Vec<u8> {
        self.call_prog(NFS_PROGRAM, 3, procedure, args)
    }

    /// The export root's handle through MOUNT.
    pub fn root(&mut self) -> Vec<u8> {
        let r = self.call_prog(MOUNT_PROGRAM, 3, mount::procs::MNT, &DirPath(b"/"));
        match decode::<MountRes3>(&r) {
            MountRes3::Ok { fhandle, .. } => fhandle.to_vec(),
            MountRes3::Fail(s) => panic!("MNT failed: {s:?}"),
        }
    }

    pub fn getattr(&mut self, fh: &[u8]) -> Result<Fattr3, Nfsstat3> {
        let r = self.call(procs::GETATTR, &NfsFh3(fh));
        decode::<GetattrRes>(&r).ok()
    }

    pub fn lookup(&mut self, dir: &[u8], name: &[u8]) -> Result<Vec<u8>, Nfsstat3> {
        let r = self.call(
            procs::LOOKUP,
            &DirOpArgs3 {
                dir: NfsFh3(dir),
                name,
            },
        );
        decode::<LookupRes>(&r).ok().map(|o| o.object.0.to_vec())
    }

    pub fn create(&mut self, dir: &[u8], name: &[u8]) -> Result<Vec<u8>, Nfsstat3> {
        let args = CreateArgs {
            place: DirOpArgs3 {
                dir: NfsFh3(dir),
                name,
            },
            how: CreateHow3::Guarded(Sattr3 {
                mode: Some(0o644),
                ..Sattr3::default()
            }),
        };
        let r = self.call(procs::CREATE, &args);
        decode::<CreateRes>(&r)
            .ok()
            .map(|o| o.obj.expect("handle").0.to_vec())
    }

    pub fn write(&mut self, fh: &[u8], offset: u64, data: &[u8]) -> Result<u32, Nfsstat3> {
        let args = WriteArgs {
            file: NfsFh3(fh),
            offset,
            count: data.len() as u32,
            stable: StableHow::FileSync,
            data,
        };
        let r = self.call(procs::WRITE, &args);
        decode::<WriteRes>(&r).ok().map(|o| o.count)
    }

    pub fn read(
        &mut self,
        fh: &[u8],
        offset: u64,
        count: u32,
    ) -> Result<(Vec<u8>, bool), Nfsstat3> {
        let r = self.call(
            procs::READ,
            &ReadArgs {
                file: NfsFh3(fh),
                offset,
                count,
            },
        );
        decode::<ReadRes>(&r).ok().map(|o| (o.data.to_vec(), o.eof))
    }
}

/// Decodes a SUCCESS reply's results, all of them.
pub fn decode<'a, T: XdrCodec<'a>>(reply: &'a [u8]) -> T {
    let (_, mut c) = reply_results(reply, &[]).expect("SUCCESS reply");
    let v = T::decode(&mut c).expect("results decode");
    c.finish().expect("nothing left over");
    v
}

/// The accept status of a reply that was not SUCCESS.
pub fn not_success(reply: &[u8]) -> AcceptStatus {
    match reply_results(reply, &[]) {
        Err(ReplyError::NotSuccess { status, .. }) => status,
        other => panic!("expected a non-SUCCESS reply, got {other:?}"),
    }
}
