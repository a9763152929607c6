//! [`MountProgram`]: MOUNT version 3 (program 100005) over the same [`NfsShared`], so the
//! handle MNT returns is the one the NFS program accepts.

use std::sync::{Arc, Mutex};

use super::counters::bump;
use super::program::NfsShared;
use crate::binding::ProcInfo;
use crate::ddp::{DdpCursor, DdpEncoder, Void, XdrCodec};
use crate::nfs::mount::{
    self, procs, DirPath, ExportEntry, Exports, MountEntry, MountList, MountRes3, MountStat3,
    MOUNT_PROGRAM,
};
use crate::nfs::v3::types::Nfsstat3;
use crate::program::{ProcError, Program};
use crate::rpc::CallHeader;

/// What every connection's MOUNT program shares: the export and who mounted it.
#[derive(Debug)]
pub struct MountShared {
    export: Vec<u8>,
    nfs: Arc<NfsShared>,
    mounts: Mutex<Vec<(String, Vec<u8>)>>,
}

impl MountShared {
    /// Exports `nfs`'s root under the MOUNT path `export` (e.g. `/` or `/srv/data`).
    pub fn new(export: &str, nfs: Arc<NfsShared>) -> Arc<MountShared> {
        Arc::new(MountShared {
            export: normalize(export.as_bytes()).to_vec(),
            nfs,
            mounts: Mutex::new(Vec::new()),
        })
    }

    /// The export path.
    pub fn export(&self) -> &[u8] {
        &self.export
    }

    /// The handle for MOUNT path `path`: the export itself, or a directory below it
    /// reached by LOOKUPs (never `..`, never through a symbolic link).
    pub fn resolve(&self, path: &[u8]) -> Result<Vec<u8>, MountStat3> {
        let path = normalize(path);
        let rest = if path == self.export.as_slice() {
            &b""[..]
        } else if self.export == b"/" {
            path.strip_prefix(b"/").ok_or(MountStat3::NOENT)?
        } else {
            path.strip_prefix(self.export.as_slice())
                .and_then(|r| r.strip_prefix(b"/"))
                .ok_or(MountStat3::NOENT)?
        };
        let b = self.nfs.backend();
        let mut k = b.root();
        for comp in rest.split(|&c| c == b'/').filter(|c| !c.is_empty()) {
            if comp == b"." || comp == b".." {
                return Err(MountStat3::NOENT);
            }
            k = b.lookup(k, comp).map_err(|s| match s {
                Nfsstat3::NOTDIR => MountStat3::NOTDIR,
                Nfsstat3::ACCES => MountStat3::ACCES,
                _ => MountStat3::NOENT,
            })?;
        }
        let a = b.getattr(k).map_err(|_| MountStat3::NOENT)?;
        if a.ftype != crate::nfs::v3::types::Ftype3::Dir {
            return Err(MountStat3::NOTDIR);
        }
        Ok(self.nfs.handle(k).as_bytes().to_vec())
    }

    fn mounts(&self) -> std::sync::MutexGuard<'_, Vec<(String, Vec<u8>)>> {
        self.mounts.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Trailing slashes do not matter to a path (`/srv/` is `/srv`), except for `/`.
fn normalize(p: &[u8]) -> &[u8] {
    let mut p = p;
    while p.len() > 1 && p.ends_with(b"/") {
        p = &p[..p.len() - 1];
    }
    p
}

/// MOUNT v3 for one connection from `peer`.
#[derive(Debug)]
pub struct MountProgram {
    shared: Arc<MountShared>,
    peer: String,
    fh: Vec<u8>,
    list: Vec<(String, Vec<u8>)>,
}

impl MountProgram {
    /// MOUNT for a client known as `peer` (its address, for DUMP).
    pub fn new(shared: Arc<MountShared>, peer: String) -> MountProgram {
        MountProgram {
            shared,
            peer,
            fh: Vec::new(),
            list: Vec::new(),
        }
    }
}

fn put<'d, T: XdrCodec<'d>>(e: &mut DdpEncoder<'_, 'd>, v: &T) -> Result<(), ProcError> {
    v.encode(e).map_err(ProcError::Results)
}

impl Program for MountProgram {
    fn prog(&self) -> u32 {
        MOUNT_PROGRAM
    }

    fn versions(&self) -> (u32, u32) {
        (3, 3)
    }

    fn proc_info(&self, vers: u32, procedure: u32) -> Option<&'static ProcInfo> {
        (vers == 3).then(|| mount::proc_info(procedure)).flatten()
    }

    fn call<'d>(
        &'d mut self,
        call: &CallHeader<'d>,
        c: &mut DdpCursor<'d>,
        e: &mut DdpEncoder<'_, 'd>,
    ) -> Result<(), ProcError> {
        let sh = &self.shared;
        let p = call.procedure;
        let mut failed = false;
        match p {
            procs::MNT => {
                let path = DirPath::decode(c)?;
                c.finish()?;
                match sh.resolve(path.0) {
                    Ok(fh) => {
                        self.fh = fh;
                        // One entry per client and path, however often it mounts.
                        let mut m = sh.mounts();
                        if !m
                            .iter()
                            .any(|(h, d)| *h == self.peer && d.as_slice() == path.0)
                        {
                            m.push((self.peer.clone(), path.0.to_vec()));
                        }
                        drop(m);
                        // AUTH_SYS first (what Linux clients use), AUTH_NONE too.
                        put(
                            e,
                            &MountRes3::Ok {
                                fhandle: &self.fh,
                                auth_flavors: vec![1, 0],
                            },
                        )?;
                    }
                    Err(s) => {
                        failed = true;
                        put(e, &MountRes3::Fail(s))?;
                    }
                }
            }
            procs::DUMP => {
                Void::decode(c)?;
                c.finish()?;
                self.list = sh.mounts().clone();
                let list = MountList(
                    self.list
                        .iter()
                        .map(|(h, d)| MountEntry {
                            hostname: h.as_bytes(),
                            directory: d,
                        })
                        .collect(),
                );
                put(e, &list)?;
            }
            procs::UMNT => {
                let path = DirPath::decode(c)?;
                c.finish()?;
                let peer = &self.peer;
                sh.mounts()
                    .retain(|(h, d)| !(h == peer && d.as_slice() == path.0));
            }
            procs::UMNTALL => {
                c.finish()?;
                let peer = &self.peer;
                sh.mounts().retain(|(h, _)| h != peer);
            }
            procs::EXPORT => {
                c.finish()?;
                put(
                    e,
                    &Exports(vec![ExportEntry {
                        dir: &sh.export,
                        groups: Vec::new(),
                    }]),
                )?;
            }
            _ => return Err(ProcError::ProcUnavail),
        }
        if let Some(k) = sh.nfs.counters.mount.get(p as usize) {
            bump(&k.calls);
            if failed {
                bump(&k.errors);
            }
        }
        Ok(())
    }
}
