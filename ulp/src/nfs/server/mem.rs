//! [`MemFs`]: an [`NfsBackend`] held entirely in memory, for tests, demos and as a model
//! of the semantics the host-directory backend follows.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use super::super::v3::args::StableHow;
use super::super::v3::types::{Fattr3, Ftype3, NfsTime3, Nfsstat3, Sattr3, SetTime, Verf, WccAttr};
use super::backend::{
    CreateMode, DirEntry, FileKey, FsLimits, FsSpace, NfsBackend, ReadDone, WriteDone,
};

const ROOT_ID: u64 = 1;

#[derive(Debug)]
enum Kind {
    File {
        data: Vec<u8>,
        /// The EXCLUSIVE create verifier it was made with, until attributes are set.
        verf: Option<Verf>,
    },
    Dir {
        parent: u64,
        entries: BTreeMap<Vec<u8>, u64>,
    },
    Symlink(Vec<u8>),
}

#[derive(Debug)]
struct Node {
    gen: u32,
    mode: u32,
    uid: u32,
    gid: u32,
    nlink: u32,
    atime: NfsTime3,
    mtime: NfsTime3,
    ctime: NfsTime3,
    kind: Kind,
}

impl Node {
    fn new(gen: u32, mode: u32, kind: Kind) -> Node {
        let now = NfsTime3::now();
        let nlink = if matches!(kind, Kind::Dir { .. }) {
            2
        } else {
            1
        };
        Node {
            gen,
            mode,
            uid: 0,
            gid: 0,
            nlink,
            atime: now,
            mtime: now,
            ctime: now,
            kind,
        }
    }

    fn size(&self) -> u64 {
        match &self.kind {
            Kind::File { data, .. } => data.len() as u64,
            Kind::Dir { entries, .. } => 4096 + 32 * entries.len() as u64,
            Kind::Symlink(t) => t.len() as u64,
        }
    }

    fn touch(&mut self) {
        let now = NfsTime3::now();
        self.mtime = now;
        self.ctime = now;
    }
}

#[derive(Debug)]
struct Inner {
    nodes: HashMap<u64, Node>,
    next_id: u64,
    next_gen: u32,
    /// Octets of file data held.
    used: u64,
}

/// An in-memory file system. The root directory is mode 0777 so that any client
/// credential may use it; the backend does not check permissions (like an appliance
/// that exports to trusted hosts).
#[derive(Debug)]
pub struct MemFs {
    inner: Mutex<Inner>,
    fsid: u64,
    capacity: u64,
    verf: Verf,
}

impl MemFs {
    /// An empty file system holding at most `capacity` octets of file data.
    pub fn new(capacity: u64) -> MemFs {
        let mut nodes = HashMap::new();
        nodes.insert(
            ROOT_ID,
            Node::new(
                1,
                0o777,
                Kind::Dir {
                    parent: ROOT_ID,
                    entries: BTreeMap::new(),
                },
            ),
        );
        let t = NfsTime3::now();
        let mut verf = [0u8; 8];
        verf[..4].copy_from_slice(&t.seconds.to_be_bytes());
        verf[4..].copy_from_slice(&t.nseconds.to_be_bytes());
        MemFs {
            inner: Mutex::new(Inner {
                nodes,
                next_id: ROOT_ID + 1,
                next_gen: 2,
                used: 0,
            }),
            fsid: 0x6d65_6d66_7300_0001,
            capacity,
            verf: Verf(verf),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic elsewhere while holding the lock leaves consistent data (every
        // mutation below completes before returning), so a poisoned lock is usable.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Default for MemFs {
    fn default() -> Self {
        MemFs::new(1 << 30)
    }
}

impl Inner {
    fn node(&self, k: FileKey) -> Result<&Node, Nfsstat3> {
        match self.nodes.get(&k.id) {
            Some(n) if n.gen == k.gen => Ok(n),
            _ => Err(Nfsstat3::STALE),
        }
    }

    fn node_mut(&mut self, k: FileKey) -> Result<&mut Node, Nfsstat3> {
        match self.nodes.get_mut(&k.id) {
            Some(n) if n.gen == k.gen => Ok(n),
            _ => Err(Nfsstat3::STALE),
        }
    }

    fn key(&self, id: u64) -> FileKey {
        FileKey {
            id,
            gen: self.nodes.get(&id).map_or(0, |n| n.gen),
        }
    }

    fn entries(&self, dir: FileKey) -> Result<&BTreeMap<Vec<u8>, u64>, Nfsstat3> {
        match &self.node(dir)?.kind {
            Kind::Dir { entries, .. } => Ok(entries),
            _ => Err(Nfsstat3::NOTDIR),
        }
    }

    fn entries_mut(&mut self, dir: FileKey) -> Result<&mut BTreeMap<Vec<u8>, u64>, Nfsstat3> {
        match &mut self.node_mut(dir)?.kind {
            Kind::Dir { entries, .. } => Ok(entries),
            _ => Err(Nfsstat3::NOTDIR),
        }
    }

    fn attr(&self, fsid: u64, id: u64, n: &Node) -> Fattr3 {
        let (ftype, rdev) = match n.kind {
            Kind::File { .. } => (Ftype3::Reg, (0, 0)),
            Kind::Dir { .. } => (Ftype3::Dir, (0, 0)),
            Kind::Symlink(_) => (Ftype3::Lnk, (0, 0)),
        };
        let size = n.size();
        Fattr3 {
            ftype,
            mode: n.mode & 0o7777,
            nlink: n.nlink,
            uid: n.uid,
            gid: n.gid,
            size,
            used: size.div_ceil(4096) * 4096,
            rdev,
            fsid,
            fileid: id,
            atime: n.atime,
            mtime: n.mtime,
            ctime: n.ctime,
        }
    }

    fn add(&mut self, dir: FileKey, name: &[u8], mut node: Node) -> Result<FileKey, Nfsstat3> {
        if self.entries(dir)?.contains_key(name) {
            return Err(Nfsstat3::EXIST);
        }
        let id = self.next_id;
        self.next_id += 1;
        node.gen = self.next_gen;
        self.next_gen = self.next_gen.wrapping_add(1).max(2);
        let is_dir = matches!(node.kind, Kind::Dir { .. });
        let gen = node.gen;
        self.nodes.insert(id, node);
        let parent = self.node_mut(dir)?;
        if is_dir {
            parent.nlink += 1;
        }
        parent.touch();
        self.entries_mut(dir)?.insert(name.to_vec(), id);
        Ok(FileKey { id, gen })
    }

    /// Drops one link to `id`; frees the node at zero.
    fn unlink_node(&mut self, id: u64) {
        let Some(n) = self.nodes.get_mut(&id) else {
            return;
        };
        n.nlink = n.nlink.saturating_sub(1);
        n.ctime = NfsTime3::now();
        let gone = match n.kind {
            Kind::Dir { .. } => true,
            _ => n.nlink == 0,
        };
        if gone {
            if let Some(Node {
                kind: Kind::File { data, .. },
                ..
            }) = self.nodes.remove(&id)
            {
                self.used -= data.len() as u64;
            }
        }
    }

    fn is_dir(&self, id: u64) -> bool {
        matches!(self.nodes.get(&id).map(|n| &n.kind), Some(Kind::Dir { .. }))
    }

    fn apply(&mut self, k: FileKey, a: &Sattr3, capacity: u64) -> Result<(), Nfsstat3> {
        if let Some(size) = a.size {
            let used = self.used;
            let n = self.node_mut(k)?;
            let Kind::File { data, .. } = &mut n.kind else {
                return Err(if matches!(n.kind, Kind::Dir { .. }) {
                    Nfsstat3::ISDIR
                } else {
                    Nfsstat3::INVAL
                });
            };
            let old = data.len() as u64;
            // Saturating: the size is the client's, up to 2^64 - 1.
            if size > old && used.saturating_add(size - old) > capacity {
                return Err(Nfsstat3::NOSPC);
            }
            let size_us = usize::try_from(size).map_err(|_| Nfsstat3::FBIG)?;
            data.resize(size_us, 0);
            n.mtime = NfsTime3::now();
            self.used = used + size - old;
        }
        let n = self.node_mut(k)?;
        if let Some(m) = a.mode {
            n.mode = m & 0o7777;
        }
        if let Some(u) = a.uid {
            n.uid = u;
        }
        if let Some(g) = a.gid {
            n.gid = g;
        }
        let now = NfsTime3::now();
        match a.atime {
            SetTime::DontChange => {}
            SetTime::ServerTime => n.atime = now,
            SetTime::ClientTime(t) => n.atime = t,
        }
        match a.mtime {
            SetTime::DontChange => {}
            SetTime::ServerTime => n.mtime = now,
            SetTime::ClientTime(t) => n.mtime = t,
        }
        n.ctime = now;
        if let Kind::File { verf, .. } = &mut n.kind {
            *verf = None;
        }
        Ok(())
    }
}

impl NfsBackend for MemFs {
    fn root(&self) -> FileKey {
        FileKey {
            id: ROOT_ID,
            gen: 1,
        }
    }

    fn fsid(&self) -> u64 {
        self.fsid
    }

    fn limits(&self) -> FsLimits {
        FsLimits {
            max_file_size: self.capacity,
            ..FsLimits::default()
        }
    }

    fn getattr(&self, file: FileKey) -> Result<Fattr3, Nfsstat3> {
        let g = self.lock();
        let n = g.node(file)?;
        Ok(g.attr(self.fsid, file.id, n))
    }

    fn setattr(&self, file: FileKey, attrs: &Sattr3) -> Result<Fattr3, Nfsstat3> {
        let mut g = self.lock();
        g.apply(file, attrs, self.capacity)?;
        let n = g.node(file)?;
        Ok(g.attr(self.fsid, file.id, n))
    }

    fn lookup(&self, dir: FileKey, name: &[u8]) -> Result<FileKey, Nfsstat3> {
        let g = self.lock();
        let n = g.node(dir)?;
        let Kind::Dir { parent, entries } = &n.kind else {
            return Err(Nfsstat3::NOTDIR);
        };
        match name {
            b"." => Ok(dir),
            b".." => Ok(g.key(*parent)),
            _ => entries
                .get(name)
                .map(|&id| g.key(id))
                .ok_or(Nfsstat3::NOENT),
        }
    }

    fn readlink(&self, link: FileKey, out: &mut Vec<u8>) -> Result<(), Nfsstat3> {
        let g = self.lock();
        match &g.node(link)?.kind {
            Kind::Symlink(t) => {
                out.extend_from_slice(t);
                Ok(())
            }
            _ => Err(Nfsstat3::INVAL),
        }
    }

    fn read(&self, file: FileKey, offset: u64, buf: &mut [u8]) -> Result<ReadDone, Nfsstat3> {
        let g = self.lock();
        let node = g.node(file)?;
        let attr = Some(g.attr(self.fsid, file.id, node));
        match &node.kind {
            Kind::File { data, .. } => {
                let len = data.len() as u64;
                if offset >= len {
                    return Ok(ReadDone {
                        len: 0,
                        eof: true,
                        attr,
                    });
                }
                let start = offset as usize;
                let n = buf.len().min(data.len() - start);
                buf[..n].copy_from_slice(&data[start..start + n]);
                Ok(ReadDone {
                    len: n,
                    eof: (start + n) as u64 == len,
                    attr,
                })
            }
            Kind::Dir { .. } => Err(Nfsstat3::ISDIR),
            Kind::Symlink(_) => Err(Nfsstat3::INVAL),
        }
    }

    fn write(
        &self,
        file: FileKey,
        offset: u64,
        data: &[u8],
        _stable: StableHow,
    ) -> Result<WriteDone, Nfsstat3> {
        let mut g = self.lock();
        let before = g
            .node(file)
            .map(|n| WccAttr::of(&g.attr(self.fsid, file.id, n)))?;
        let end = offset
            .checked_add(data.len() as u64)
            .filter(|&e| e <= self.capacity)
            .ok_or(Nfsstat3::FBIG)?;
        let used = g.used;
        let n = g.node_mut(file)?;
        let Kind::File { data: d, .. } = &mut n.kind else {
            return Err(if matches!(n.kind, Kind::Dir { .. }) {
                Nfsstat3::ISDIR
            } else {
                Nfsstat3::INVAL
            });
        };
        let old = d.len() as u64;
        let grow = end.saturating_sub(old);
        if used.saturating_add(grow) > self.capacity {
            return Err(Nfsstat3::NOSPC);
        }
        if grow > 0 {
            d.resize(end as usize, 0);
        }
        d[offset as usize..end as usize].copy_from_slice(data);
        n.touch();
        g.used = used + grow;
        let after = g.node(file).map(|n| g.attr(self.fsid, file.id, n)).ok();
        Ok(WriteDone {
            // Memory is as durable as this backend gets.
            committed: StableHow::FileSync,
            before: Some(before),
            after,
        })
    }

    fn create(
        &self,
        dir: FileKey,
        name: &[u8],
        mode: CreateMode,
        attrs: &Sattr3,
    ) -> Result<FileKey, Nfsstat3> {
        let mut g = self.lock();
        if let Some(&id) = g.entries(dir)?.get(name) {
            let k = g.key(id);
            return match (mode, &g.nodes.get(&id).map(|n| &n.kind)) {
                (CreateMode::Unchecked, Some(Kind::File { .. })) => {
                    if attrs.size.is_some() {
                        let size_only = Sattr3 {
                            size: attrs.size,
                            ..Sattr3::default()
                        };
                        g.apply(k, &size_only, self.capacity)?;
                    }
                    Ok(k)
                }
                (CreateMode::Exclusive(v), Some(Kind::File { verf: Some(w), .. })) if *w == v => {
                    Ok(k)
                }
                _ => Err(Nfsstat3::EXIST),
            };
        }
        let verf = match mode {
            CreateMode::Exclusive(v) => Some(v),
            _ => None,
        };
        let k = g.add(
            dir,
            name,
            Node::new(
                0,
                attrs.mode.unwrap_or(0o644),
                Kind::File {
                    data: Vec::new(),
                    verf,
                },
            ),
        )?;
        if verf.is_none() {
            g.apply(k, attrs, self.capacity)?;
        }
        Ok(k)
    }

    fn mkdir(&self, dir: FileKey, name: &[u8], attrs: &Sattr3) -> Result<FileKey, Nfsstat3> {
        let mut g = self.lock();
        let k = g.add(
            dir,
            name,
            Node::new(
                0,
                attrs.mode.unwrap_or(0o755),
                Kind::Dir {
                    parent: dir.id,
                    entries: BTreeMap::new(),
                },
            ),
        )?;
        g.apply(
            k,
            &Sattr3 {
                size: None,
                ..*attrs
            },
            self.capacity,
        )?;
        Ok(k)
    }

    fn symlink(
        &self,
        dir: FileKey,
        name: &[u8],
        target: &[u8],
        attrs: &Sattr3,
    ) -> Result<FileKey, Nfsstat3> {
        let mut g = self.lock();
        g.add(
            dir,
            name,
            Node::new(
                0,
                attrs.mode.unwrap_or(0o777),
                Kind::Symlink(target.to_vec()),
            ),
        )
    }

    fn remove(&self, dir: FileKey, name: &[u8]) -> Result<(), Nfsstat3> {
        let mut g = self.lock();
        let id = *g.entries(dir)?.get(name).ok_or(Nfsstat3::NOENT)?;
        if g.is_dir(id) {
            return Err(Nfsstat3::ISDIR);
        }
        g.entries_mut(dir)?.remove(name);
        g.node_mut(dir)?.touch();
        g.unlink_node(id);
        Ok(())
    }

    fn rmdir(&self, dir: FileKey, name: &[u8]) -> Result<(), Nfsstat3> {
        let mut g = self.lock();
        if name == b"." {
            return Err(Nfsstat3::INVAL);
        }
        if name == b".." {
            return Err(Nfsstat3::NOTEMPTY);
        }
        let id = *g.entries(dir)?.get(name).ok_or(Nfsstat3::NOENT)?;
        match &g.nodes.get(&id).map(|n| &n.kind) {
            Some(Kind::Dir { entries, .. }) if entries.is_empty() => {}
            Some(Kind::Dir { .. }) => return Err(Nfsstat3::NOTEMPTY),
            _ => return Err(Nfsstat3::NOTDIR),
        }
        g.entries_mut(dir)?.remove(name);
        let d = g.node_mut(dir)?;
        d.nlink -= 1;
        d.touch();
        g.unlink_node(id);
        Ok(())
    }

    fn rename(
        &self,
        from_dir: FileKey,
        from_name: &[u8],
        to_dir: FileKey,
        to_name: &[u8],
    ) -> Result<(), Nfsstat3> {
        let mut g = self.lock();
        let id = *g.entries(from_dir)?.get(from_name).ok_or(Nfsstat3::NOENT)?;
        g.entries(to_dir)?;
        if from_dir == to_dir && from_name == to_name {
            return Ok(());
        }
        let moving_dir = g.is_dir(id);
        if moving_dir {
            // A directory must not move under itself.
            let mut at = to_dir.id;
            loop {
                if at == id {
                    return Err(Nfsstat3::INVAL);
                }
                match g.nodes.get(&at).map(|n| &n.kind) {
                    Some(Kind::Dir { parent, .. }) if *parent != at => at = *parent,
                    _ => break,
                }
            }
        }
        if let Some(&old) = g.entries(to_dir)?.get(to_name) {
            if old == id {
                return Ok(());
            }
            match (moving_dir, &g.nodes.get(&old).map(|n| &n.kind)) {
                (true, Some(Kind::Dir { entries, .. })) if entries.is_empty() => {
                    g.node_mut(to_dir)?.nlink -= 1;
                }
                (true, Some(Kind::Dir { .. })) => return Err(Nfsstat3::NOTEMPTY),
                (true, _) => return Err(Nfsstat3::NOTDIR),
                (false, Some(Kind::Dir { .. })) => return Err(Nfsstat3::ISDIR),
                (false, _) => {}
            }
            g.unlink_node(old);
        }
        g.entries_mut(from_dir)?.remove(from_name);
        g.entries_mut(to_dir)?.insert(to_name.to_vec(), id);
        if moving_dir {
            g.node_mut(from_dir)?.nlink -= 1;
            g.node_mut(to_dir)?.nlink += 1;
            if let Some(Node {
                kind: Kind::Dir { parent, .. },
                ..
            }) = g.nodes.get_mut(&id)
            {
                *parent = to_dir.id;
            }
        }
        g.node_mut(from_dir)?.touch();
        g.node_mut(to_dir)?.touch();
        if let Some(n) = g.nodes.get_mut(&id) {
            n.ctime = NfsTime3::now();
        }
        Ok(())
    }

    fn link(&self, file: FileKey, dir: FileKey, name: &[u8]) -> Result<(), Nfsstat3> {
        let mut g = self.lock();
        if matches!(g.node(file)?.kind, Kind::Dir { .. }) {
            return Err(Nfsstat3::ISDIR);
        }
        if g.entries(dir)?.contains_key(name) {
            return Err(Nfsstat3::EXIST);
        }
        g.entries_mut(dir)?.insert(name.to_vec(), file.id);
        g.node_mut(dir)?.touch();
        let n = g.node_mut(file)?;
        n.nlink += 1;
        n.ctime = NfsTime3::now();
        Ok(())
    }

    fn readdir(
        &self,
        dir: FileKey,
        cookie: u64,
        max: usize,
        out: &mut Vec<DirEntry>,
    ) -> Result<bool, Nfsstat3> {
        let g = self.lock();
        let entries = g.entries(dir)?;
        // Cookies are positions in name order (1-based), valid while the cookie
        // verifier (the directory's mtime) is unchanged.
        let skip = usize::try_from(cookie).map_err(|_| Nfsstat3::BAD_COOKIE)?;
        if skip > entries.len() {
            return Err(Nfsstat3::BAD_COOKIE);
        }
        for (i, (name, &id)) in entries.iter().enumerate().skip(skip).take(max) {
            out.push(DirEntry {
                key: g.key(id),
                name: name.clone(),
                cookie: i as u64 + 1,
            });
        }
        Ok(skip + max >= entries.len())
    }

    fn fsstat(&self, file: FileKey) -> Result<FsSpace, Nfsstat3> {
        let g = self.lock();
        g.node(file)?;
        let free = self.capacity.saturating_sub(g.used);
        let files = g.nodes.len() as u64;
        Ok(FsSpace {
            tbytes: self.capacity,
            fbytes: free,
            abytes: free,
            tfiles: 1 << 32,
            ffiles: (1u64 << 32) - files,
            afiles: (1u64 << 32) - files,
        })
    }

    fn commit(&self, file: FileKey) -> Result<(), Nfsstat3> {
        self.lock().node(file).map(|_| ())
    }

    fn write_verifier(&self) -> Verf {
        self.verf
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A size near 2^64 (SETATTR, or CREATE UNCHECKED of an existing file) is NOSPC,
    /// not an overflow (found by the `nfs_server` fuzz target).
    #[test]
    fn a_huge_size_is_nospc_not_an_overflow() {
        let fs = MemFs::new(1 << 20);
        let root = fs.root();
        let huge = Sattr3 {
            size: Some(u64::MAX - 1),
            ..Sattr3::default()
        };
        // Another file holds octets, so what is used exceeds this file's length.
        let other = fs
            .create(root, b"g", CreateMode::Unchecked, &Sattr3::default())
            .expect("created");
        fs.write(other, 0, b"some", StableHow::Unstable)
            .expect("written");
        let k = fs
            .create(root, b"f", CreateMode::Unchecked, &Sattr3::default())
            .expect("created");
        assert_eq!(fs.setattr(k, &huge).err(), Some(Nfsstat3::NOSPC));
        assert_eq!(
            fs.create(root, b"f", CreateMode::Unchecked, &huge).err(),
            Some(Nfsstat3::NOSPC)
        );
    }
}
