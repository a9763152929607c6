//! Arenas: one large memory mapping, on 2 MiB hugepages when the host has them,
//! optionally backed by a file descriptor that another process can map. Pre-faulted by
//! default; an arena built with [`ArenaOptions::prefault`]`(false)` on 4 KiB pages is
//! mapped lazily instead, so only the pages someone touches become resident (what a
//! server holding many mostly idle connections wants).
//!
//! An arena is the unit a fabric registers: it carries the registration keys whoever
//! registered it stored, so buffers carved from it can become scatter-gather entries
//! without a lookup.
//!
//! A shareable arena's memfd is sealed against shrinking and growing once sized, so a
//! process it is passed to can rely on its length: touching a mapping past the end of a
//! file that another process truncated would kill the toucher with SIGBUS. The
//! receiving side ([`Arena::from_fd`], [`Arena::from_peer_fd`]) checks exactly that
//! before mapping: a regular file (memfd), sealed against shrinking, at least as long
//! as claimed.

use std::fmt;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use memmap2::{MmapOptions, MmapRaw};

/// Size of the hugepages arenas ask for.
pub const HUGEPAGE_SIZE: usize = 2 << 20;
/// Size of ordinary pages on the hosts we run on.
pub const PAGE_SIZE: usize = 4096;

/// Whether an arena should live on hugepages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HugePages {
    /// Use 2 MiB hugepages when available, otherwise 4 KiB pages with a one-time warning.
    #[default]
    Auto,
    /// Fail with [`ArenaError::NoHugePages`] when hugepages cannot be had.
    Require,
    /// Always use 4 KiB pages.
    Never,
}

/// How to build an arena.
#[derive(Debug, Clone)]
pub struct ArenaOptions {
    /// Requested length in bytes; rounded up to the page size actually used.
    pub len: usize,
    /// Hugepage policy.
    pub hugepages: HugePages,
    /// Back the arena with a memfd so it can be handed to another process.
    pub shareable: bool,
    /// Name shown in `/proc/PID/maps` for shareable arenas.
    pub name: &'static str,
    /// Fault every page in at creation (`MAP_POPULATE`), so the first use of a buffer
    /// never takes a page fault. `false` maps lazily: memory becomes resident page by
    /// page as it is first touched. Hugepage arenas are always pre-faulted (and
    /// locked): a hugetlb page that cannot be had must fail here, not as a SIGBUS later.
    pub prefault: bool,
}

impl ArenaOptions {
    /// Options for a private arena of `len` bytes with the default hugepage policy.
    pub fn new(len: usize) -> Self {
        ArenaOptions {
            len,
            hugepages: HugePages::Auto,
            shareable: false,
            name: "rpcrdma-arena",
            prefault: true,
        }
    }

    /// Pre-faults the arena, or maps it lazily (see [`ArenaOptions::prefault`]).
    pub fn prefault(mut self, yes: bool) -> Self {
        self.prefault = yes;
        self
    }

    /// Makes the arena shareable (memfd-backed).
    pub fn shareable(mut self, yes: bool) -> Self {
        self.shareable = yes;
        self
    }

    /// Sets the hugepage policy.
    pub fn hugepages(mut self, h: HugePages) -> Self {
        self.hugepages = h;
        self
    }

    /// Sets the memfd name.
    pub fn name(mut self, name: &'static str) -> Self {
        self.name = name;
        self
    }
}

/// Why an arena could not be created.
#[derive(Debug, thiserror::Error)]
pub enum ArenaError {
    /// A zero-length arena was asked for.
    #[error("an arena cannot be zero bytes long")]
    ZeroLength,
    /// Hugepages were required but none could be had.
    #[error(
        "hugepages required but unavailable ({0}); reserve some with \
         `sysctl -w vm.nr_hugepages=N`"
    )]
    NoHugePages(#[source] io::Error),
    /// The operating system refused the mapping or memfd.
    #[error("arena mapping failed: {0}")]
    Os(#[source] io::Error),
    /// A descriptor passed in is not memory that can be mapped safely: not a regular
    /// file, not sealed against shrinking (its owner could truncate it under the
    /// mapping), shorter than claimed, or longer than allowed.
    #[error("refusing to map a shared arena: {0}")]
    Untrusted(UntrustedFd),
}

/// Why a descriptor passed in is not safe to map ([`ArenaError::Untrusted`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum UntrustedFd {
    /// The announced length is above the bound the receiver allows.
    #[error("announced length above the allowed bound")]
    TooLong,
    /// The descriptor is not a regular file (a memfd).
    #[error("descriptor is not a regular file (memfd)")]
    NotRegularFile,
    /// The file is not sealed against shrinking.
    #[error("file is not sealed against shrinking")]
    NotSealed,
    /// The file is shorter than announced.
    #[error("file is shorter than announced")]
    TooShort,
}

/// Registration keys a fabric stored on an arena.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegKeys {
    /// Local key (used in scatter-gather entries).
    pub lkey: u32,
    /// Remote key (advertised to peers), if the registration allows remote access.
    pub rkey: u32,
}

const NO_KEYS: u64 = u64::MAX;

static HUGEPAGE_WARNING: AtomicBool = AtomicBool::new(false);

fn warn_no_hugepages(err: &io::Error) {
    if !HUGEPAGE_WARNING.swap(true, Ordering::Relaxed) {
        eprintln!(
            "rpcrdma: no 2 MiB hugepages available ({err}); using 4 KiB pages. \
             Reserve hugepages with `sysctl -w vm.nr_hugepages=N` for lower TLB pressure."
        );
    }
}

/// True when the one-time "no hugepages" warning has been printed by this process.
pub fn hugepage_warning_issued() -> bool {
    HUGEPAGE_WARNING.load(Ordering::Relaxed)
}

/// One large pre-faulted mapping.
pub struct Arena {
    map: MmapRaw,
    fd: Option<OwnedFd>,
    huge: bool,
    /// Created here (not mapped from another process's descriptor): only then may its
    /// pages be released ([`Arena::release`]).
    own: bool,
    keys: AtomicU64,
}

// SAFETY: the arena only hands out raw pointers; what is done with them is the caller's
// contract (pools hand each slot to exactly one owner).
unsafe impl Send for Arena {}
unsafe impl Sync for Arena {}

impl fmt::Debug for Arena {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Arena")
            .field("base", &self.base())
            .field("len", &self.len())
            .field("hugepages", &self.huge)
            .field("shareable", &self.fd.is_some())
            .field("keys", &self.keys())
            .finish()
    }
}

fn round_up(len: usize, to: usize) -> usize {
    len.div_ceil(to) * to
}

fn memfd(name: &str, huge: bool) -> io::Result<OwnedFd> {
    let cname = std::ffi::CString::new(name).unwrap_or_default();
    // Sealable, so that its size can be fixed for whoever maps it (see `seal_size`).
    let mut flags = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
    if huge {
        // MFD_HUGE_2MB = 21 << MFD_HUGE_SHIFT(26)
        flags |= libc::MFD_HUGETLB | (21 << 26);
    }
    // SAFETY: cname is a valid NUL-terminated string; memfd_create has no other inputs.
    let fd = unsafe { libc::memfd_create(cname.as_ptr(), flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd was just returned by memfd_create and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Fixes a sized memfd's length for good: no process holding it can shrink or grow
/// it, nor lift or add seals.
fn seal_size(fd: &OwnedFd) -> io::Result<()> {
    let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
    // SAFETY: fcntl on a descriptor we own, with an integer argument.
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Checks that `fd` is safe to map for `len` bytes (at most `max_len`): a regular
/// file (a memfd), sealed against shrinking, holding at least `len` bytes.
fn check_shared_fd(fd: &OwnedFd, len: usize, max_len: usize) -> Result<(), ArenaError> {
    if len == 0 {
        return Err(ArenaError::ZeroLength);
    }
    if len > max_len {
        return Err(ArenaError::Untrusted(UntrustedFd::TooLong));
    }
    // SAFETY: all-zero is a valid `stat`; fstat fills it for a valid descriptor.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: st is valid for writes of a `stat`.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(ArenaError::Os(io::Error::last_os_error()));
    }
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(ArenaError::Untrusted(UntrustedFd::NotRegularFile));
    }
    // SAFETY: fcntl with no argument on a valid descriptor.
    let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
    if seals < 0 || seals & libc::F_SEAL_SHRINK == 0 {
        return Err(ArenaError::Untrusted(UntrustedFd::NotSealed));
    }
    if (st.st_size as u128) < len as u128 || st.st_size < 0 {
        return Err(ArenaError::Untrusted(UntrustedFd::TooShort));
    }
    Ok(())
}

fn map_fd(fd: &OwnedFd, len: usize, populate: bool) -> io::Result<MmapRaw> {
    let file = File::from(fd.try_clone()?);
    let mut o = MmapOptions::new();
    o.len(len);
    if populate {
        o.populate();
    }
    o.map_raw(&file)
}

impl Arena {
    /// Creates an arena as `opts` says. The memory is zeroed, and pre-faulted unless
    /// `opts.prefault` is false (and the arena is not on hugepages).
    pub fn new(opts: &ArenaOptions) -> Result<Arena, ArenaError> {
        if opts.len == 0 {
            return Err(ArenaError::ZeroLength);
        }
        if opts.hugepages != HugePages::Never {
            match Self::try_new(opts, true) {
                Ok(a) => return Ok(a),
                Err(e) if opts.hugepages == HugePages::Require => {
                    return Err(ArenaError::NoHugePages(e))
                }
                Err(e) => warn_no_hugepages(&e),
            }
        }
        Self::try_new(opts, false).map_err(ArenaError::Os)
    }

    fn try_new(opts: &ArenaOptions, huge: bool) -> io::Result<Arena> {
        let len = round_up(opts.len, if huge { HUGEPAGE_SIZE } else { PAGE_SIZE });
        let populate = opts.prefault || huge;
        let (map, fd) = if opts.shareable {
            let fd = memfd(opts.name, huge)?;
            let flen = libc::off_t::try_from(len).map_err(|_| io::ErrorKind::InvalidInput)?;
            // SAFETY: fd is a valid memfd we own.
            if unsafe { libc::ftruncate(fd.as_raw_fd(), flen) } != 0 {
                return Err(io::Error::last_os_error());
            }
            seal_size(&fd)?;
            (map_fd(&fd, len, populate)?, Some(fd))
        } else {
            let mut o = MmapOptions::new();
            o.len(len);
            if populate {
                o.populate();
            }
            if huge {
                o.huge(Some(21));
            }
            (MmapRaw::from(o.map_anon()?), None)
        };
        if huge {
            // With MAP_POPULATE a hugetlb mapping without reserved pages can still
            // succeed lazily on some kernels; touching it would SIGBUS. Check that the
            // pages really are there.
            // SAFETY: map is a fresh mapping of len bytes.
            let r = unsafe { libc::mlock(map.as_ptr() as *const libc::c_void, len) };
            if r != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(Arena {
            map,
            fd,
            huge,
            own: true,
            keys: AtomicU64::new(NO_KEYS),
        })
    }

    /// Maps an arena another process created and passed as `fd` (e.g. over a Unix
    /// socket), pre-faulted like a local one.
    ///
    /// `len` is the length the creator reported. The descriptor must be a regular file
    /// (a memfd) sealed against shrinking and at least `len` bytes long, so nobody can
    /// pull the memory out from under the mapping; anything else is refused with
    /// [`ArenaError::Untrusted`].
    pub fn from_fd(fd: OwnedFd, len: usize) -> Result<Arena, ArenaError> {
        check_shared_fd(&fd, len, usize::MAX)?;
        Self::map_shared(fd, len, true)
    }

    /// Like [`Arena::from_fd`] for a descriptor from a process that is not trusted to
    /// size it: `len` must also be at most `max_len`, and the mapping is not
    /// pre-faulted, so a claimed length costs memory only where it is used.
    pub fn from_peer_fd(fd: OwnedFd, len: usize, max_len: usize) -> Result<Arena, ArenaError> {
        check_shared_fd(&fd, len, max_len)?;
        Self::map_shared(fd, len, false)
    }

    fn map_shared(fd: OwnedFd, len: usize, populate: bool) -> Result<Arena, ArenaError> {
        let map = map_fd(&fd, len, populate).map_err(ArenaError::Os)?;
        Ok(Arena {
            map,
            fd: Some(fd),
            huge: false,
            own: false,
            keys: AtomicU64::new(NO_KEYS),
        })
    }

    /// First byte of the arena.
    #[inline]
    pub fn base(&self) -> *mut u8 {
        self.map.as_mut_ptr()
    }

    /// Length in bytes (a multiple of the page size in use).
    #[inline]
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Arenas are never empty; provided for API symmetry.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.map.len() == 0
    }

    /// True when backed by hugepages.
    #[inline]
    pub fn is_hugepage(&self) -> bool {
        self.huge
    }

    /// The backing file descriptor of a shareable arena.
    #[inline]
    pub fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.fd.as_ref().map(|f| f.as_fd())
    }

    /// True when `[ptr, ptr+len)` lies inside the arena.
    #[inline]
    pub fn contains(&self, ptr: *const u8, len: usize) -> bool {
        let base = self.base() as usize;
        let p = ptr as usize;
        p >= base
            && p.checked_add(len)
                .is_some_and(|end| end <= base + self.len())
    }

    /// Offset of `ptr` from the base, if it lies inside the arena.
    #[inline]
    pub fn offset_of(&self, ptr: *const u8) -> Option<usize> {
        let base = self.base() as usize;
        let p = ptr as usize;
        (p >= base && p < base + self.len()).then(|| p - base)
    }

    /// Gives the pages of `[offset, offset + len)` back to the operating system: they
    /// read as zero afterwards, and become resident again only when touched. A
    /// shareable arena's range is punched out of its memfd, so the memory is freed for
    /// every process mapping it; a private one is dropped with `MADV_DONTNEED`.
    ///
    /// Only whole 4 KiB pages inside the arena are released (the range is shrunk to
    /// them); nothing is done for hugepage arenas (locked, 2 MiB granular) or arenas
    /// mapped from another process's descriptor (their memory is not ours to free).
    /// Returns the bytes released.
    ///
    /// The caller must own the range: nobody may be using that memory, since its
    /// contents are lost. Do not release memory an RDMA device has pinned (a verbs
    /// registration): the device would keep the old pages while the process sees new
    /// ones.
    pub fn release(&self, offset: usize, len: usize) -> Result<usize, ArenaError> {
        if self.huge || !self.own {
            return Ok(0);
        }
        let end = offset.saturating_add(len).min(self.len());
        let start = round_up(offset.min(end), PAGE_SIZE);
        let end = end / PAGE_SIZE * PAGE_SIZE;
        if end <= start {
            return Ok(0);
        }
        let n = end - start;
        let r = match &self.fd {
            Some(fd) => {
                let (off, len) = match (libc::off_t::try_from(start), libc::off_t::try_from(n)) {
                    (Ok(o), Ok(l)) => (o, l),
                    _ => return Err(ArenaError::Os(io::ErrorKind::InvalidInput.into())),
                };
                let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
                // SAFETY: fallocate on a memfd we created, inside its length (the range
                // was clamped to the mapping, which is the file's length).
                unsafe { libc::fallocate(fd.as_raw_fd(), mode, off, len) }
            }
            // SAFETY: the range is inside our private mapping (clamped above) and page
            // aligned; the caller owns the memory, whose contents may go.
            None => unsafe {
                libc::madvise(
                    self.base().add(start).cast::<libc::c_void>(),
                    n,
                    libc::MADV_DONTNEED,
                )
            },
        };
        if r != 0 {
            return Err(ArenaError::Os(io::Error::last_os_error()));
        }
        Ok(n)
    }

    /// Stores the keys a fabric registration produced.
    pub fn set_keys(&self, keys: RegKeys) {
        let v = (u64::from(keys.lkey) << 32) | u64::from(keys.rkey);
        self.keys.store(v, Ordering::Release);
    }

    /// Forgets the stored keys (after deregistration).
    pub fn clear_keys(&self) {
        self.keys.store(NO_KEYS, Ordering::Release);
    }

    /// The stored registration keys, if any.
    #[inline]
    pub fn keys(&self) -> Option<RegKeys> {
        let v = self.keys.load(Ordering::Acquire);
        (v != NO_KEYS).then_some(RegKeys {
            lkey: (v >> 32) as u32,
            rkey: v as u32,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_arena_is_zeroed_and_writable() {
        let a = Arena::new(&ArenaOptions::new(10_000)).unwrap();
        assert!(a.len() >= 10_000);
        assert_eq!(a.len() % PAGE_SIZE, 0);
        // SAFETY: the arena is len bytes and owned by this test.
        let s = unsafe { std::slice::from_raw_parts_mut(a.base(), a.len()) };
        assert!(s.iter().all(|&b| b == 0));
        s[a.len() - 1] = 7;
        assert!(a.contains(a.base(), a.len()));
        assert!(!a.contains(a.base(), a.len() + 1));
        assert_eq!(a.offset_of(a.base().wrapping_add(5)), Some(5));
    }

    #[test]
    fn shared_arena_maps_twice() {
        let a = Arena::new(&ArenaOptions::new(PAGE_SIZE).shareable(true)).unwrap();
        let fd = a.fd().unwrap().try_clone_to_owned().unwrap();
        let b = Arena::from_fd(fd, a.len()).unwrap();
        // SAFETY: both mappings are at least one page.
        unsafe {
            *a.base().add(100) = 0x5a;
            assert_eq!(*b.base().add(100), 0x5a);
        }
        assert!(
            Arena::from_fd(a.fd().unwrap().try_clone_to_owned().unwrap(), a.len() * 2).is_err()
        );
    }

    fn raw_memfd(len: i64, seal: bool) -> OwnedFd {
        let flags = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
        // SAFETY: a valid NUL-terminated name.
        let fd = unsafe { libc::memfd_create(c"arena-test".as_ptr(), flags) };
        assert!(fd >= 0);
        // SAFETY: fresh descriptor, ours.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: a memfd we own.
        assert_eq!(unsafe { libc::ftruncate(fd.as_raw_fd(), len) }, 0);
        if seal {
            seal_size(&fd).unwrap();
        }
        fd
    }

    #[test]
    fn shareable_arenas_cannot_be_resized() {
        let a = Arena::new(&ArenaOptions::new(PAGE_SIZE).shareable(true)).unwrap();
        let fd = a.fd().unwrap().as_raw_fd();
        // SAFETY: ftruncate on a live descriptor; it must fail.
        assert_ne!(unsafe { libc::ftruncate(fd, 0) }, 0);
        // SAFETY: as above.
        assert_ne!(unsafe { libc::ftruncate(fd, 1 << 30) }, 0);
    }

    #[test]
    fn unsafe_descriptors_are_refused() {
        let untrusted = |r: Result<Arena, ArenaError>| match r {
            Err(ArenaError::Untrusted(_)) => {}
            other => panic!("expected Untrusted, got {other:?}"),
        };
        // Unsealed: its owner could truncate it under our mapping.
        untrusted(Arena::from_fd(raw_memfd(8192, false), 8192));
        // Sealed, but shorter than claimed (the truncated-memfd case).
        untrusted(Arena::from_fd(raw_memfd(4096, true), 8192));
        // Longer than the receiver allows, however big the file.
        untrusted(Arena::from_peer_fd(
            raw_memfd(1 << 40, true),
            1 << 40,
            1 << 30,
        ));
        // Not a regular file.
        let mut p = [0; 2];
        // SAFETY: p has room for two descriptors.
        assert_eq!(unsafe { libc::pipe(p.as_mut_ptr()) }, 0);
        // SAFETY: both are fresh and ours.
        let (r, _w) = unsafe { (OwnedFd::from_raw_fd(p[0]), OwnedFd::from_raw_fd(p[1])) };
        untrusted(Arena::from_fd(r, 4096));
        // Sealed and long enough: mapped, lazily for a peer.
        let ok = Arena::from_peer_fd(raw_memfd(8192, true), 8192, 1 << 30).unwrap();
        assert_eq!(ok.len(), 8192);
    }

    /// Pages of `[base, base + len)` in memory (`mincore`: for a memfd, whether the
    /// file has the page at all), unaffected by what other tests map meanwhile.
    fn resident_pages(a: &Arena, len: usize) -> usize {
        let mut v = vec![0u8; len.div_ceil(PAGE_SIZE)];
        // SAFETY: the range is inside the mapping; v has one byte per page.
        let r = unsafe { libc::mincore(a.base().cast(), len, v.as_mut_ptr()) };
        assert_eq!(r, 0, "mincore");
        v.iter().filter(|b| **b & 1 != 0).count()
    }

    #[test]
    fn lazy_arenas_become_resident_where_touched_and_release_gives_pages_back() {
        const LEN: usize = 64 << 20;
        let opts = ArenaOptions::new(LEN)
            .shareable(true)
            .hugepages(HugePages::Never)
            .prefault(false);
        let a = Arena::new(&opts).unwrap();
        assert_eq!(resident_pages(&a, LEN), 0, "nothing resident before use");
        // SAFETY: inside the arena, which this test owns.
        unsafe { a.base().add(5 * PAGE_SIZE + 7).write(0x5a) };
        assert_eq!(resident_pages(&a, LEN), 1, "one page touched, one resident");
        // SAFETY: as above.
        let s = unsafe { std::slice::from_raw_parts_mut(a.base(), LEN) };
        s[..16 << 20].fill(1);
        assert_eq!(resident_pages(&a, LEN), (16 << 20) / PAGE_SIZE);
        // Not page aligned at either end: only the whole pages inside go.
        let n = a.release(100, (16 << 20) - 200).unwrap();
        assert_eq!(n, (16 << 20) - 2 * PAGE_SIZE);
        assert_eq!(
            resident_pages(&a, LEN),
            2,
            "only the partial end pages stay"
        );
        assert_eq!(s[100], 1, "the partial first page is kept");
        assert_eq!(s[PAGE_SIZE], 0, "a released page reads as zero");
        assert_eq!(s[(16 << 20) - 1], 1, "the partial last page is kept");
        s[PAGE_SIZE] = 3;
        assert_eq!(s[PAGE_SIZE], 3, "and is usable again");
        assert_eq!(resident_pages(&a, LEN), 3);
        // Past the end: clamped, nothing beyond the arena.
        s[LEN - 1] = 1;
        assert_eq!(a.release(LEN - PAGE_SIZE, 1 << 40).unwrap(), PAGE_SIZE);
        assert_eq!(a.release(LEN, 4096).unwrap(), 0);
        assert_eq!(resident_pages(&a, LEN), 3);
        // A peer's arena is never released by us.
        let fd = a.fd().unwrap().try_clone_to_owned().unwrap();
        let peer = Arena::from_peer_fd(fd, a.len(), usize::MAX).unwrap();
        assert_eq!(peer.release(0, a.len()).unwrap(), 0);
        assert_eq!(s[100], 1);
        // A private arena releases with MADV_DONTNEED: zero afterwards.
        let p = Arena::new(&ArenaOptions::new(4 * PAGE_SIZE).hugepages(HugePages::Never)).unwrap();
        // SAFETY: inside the arena.
        unsafe { p.base().add(PAGE_SIZE).write(9) };
        assert_eq!(p.release(0, p.len()).unwrap(), p.len());
        // SAFETY: as above.
        assert_eq!(unsafe { p.base().add(PAGE_SIZE).read() }, 0);
    }

    #[test]
    fn keys_round_trip() {
        let a = Arena::new(&ArenaOptions::new(1)).unwrap();
        assert_eq!(a.keys(), None);
        let k = RegKeys {
            lkey: 0x1234,
            rkey: 0xabcd_ef01,
        };
        a.set_keys(k);
        assert_eq!(a.keys(), Some(k));
        a.clear_keys();
        assert_eq!(a.keys(), None);
    }

    #[test]
    fn required_hugepages_fail_cleanly_or_work() {
        match Arena::new(&ArenaOptions::new(1).hugepages(HugePages::Require)) {
            Ok(a) => assert!(a.is_hugepage()),
            Err(ArenaError::NoHugePages(_)) => {}
            Err(e) => panic!("unexpected error {e}"),
        }
    }
}
