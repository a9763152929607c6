//! The NFS binding tables checked against RFC 8267 (quoted where it decides the answer)
//! and, for reply sizes, against worst-case results encoded from the XDR of RFC 1094 and
//! RFC 1813.

use rpcrdma_ulp::binding::{DataBound, ProcInfo};
use rpcrdma_ulp::ddp::DdpEncoder;
use rpcrdma_ulp::nfs::{self, aux, v2, v3, v4};
use rpcrdma_ulp::program::DrcConfig;

fn ddp_names(p: &ProcInfo) -> (Vec<&'static str>, Vec<&'static str>) {
    (
        p.ddp_args.iter().map(|i| i.name).collect(),
        p.ddp_results.iter().map(|i| i.name).collect(),
    )
}

/// Every procedure of a table with any DDP-eligible item: (name, args, results).
fn eligible(table: &[ProcInfo]) -> Vec<(&'static str, Vec<&'static str>, Vec<&'static str>)> {
    table
        .iter()
        .filter(|p| p.has_ddp_args() || p.has_ddp_results())
        .map(|p| {
            let (a, r) = ddp_names(p);
            (p.name, a, r)
        })
        .collect()
}

// RFC 8267 §4: "o the opaque file data argument in the NFS WRITE procedure / o the
// pathname argument in the NFS SYMLINK procedure / o the opaque file data result in the
// NFS READ procedure / o the pathname result in the NFS READLINK procedure. All other
// argument or result data items in NFS versions 2 and 3 are not DDP-eligible."
#[test]
fn legacy_nfs_has_exactly_four_ddp_items() {
    assert_eq!(
        eligible(&v3::PROCEDURES),
        vec![
            ("READLINK", vec![], vec!["READLINK3resok.data"]),
            ("READ", vec![], vec!["READ3resok.data"]),
            ("WRITE", vec!["WRITE3args.data"], vec![]),
            ("SYMLINK", vec!["SYMLINK3args.symlink.symlink_data"], vec![]),
        ]
    );
    assert_eq!(
        eligible(&v2::PROCEDURES),
        vec![
            ("READLINK", vec![], vec!["readlinkres.data"]),
            ("READ", vec![], vec!["readokres.data"]),
            ("WRITE", vec!["writeargs.data"], vec![]),
            ("SYMLINK", vec!["symlinkargs.to"], vec![]),
        ]
    );
    // Tables are indexed by procedure number.
    for (i, p) in v3::PROCEDURES.iter().enumerate() {
        assert_eq!(p.procedure as usize, i, "{}", p.name);
    }
    for (i, p) in v2::PROCEDURES.iter().enumerate() {
        assert_eq!(p.procedure as usize, i, "{}", p.name);
    }
    assert_eq!(
        nfs::proc_info(3, v3::procs::WRITE).map(|p| p.name),
        Some("WRITE")
    );
    assert_eq!(
        nfs::proc_info(2, v2::procs::STATFS).map(|p| p.name),
        Some("STATFS")
    );
    assert_eq!(nfs::proc_info(3, 22), None);
    assert_eq!(nfs::proc_info(5, 0), None);
}

// RFC 1813 §4.5 names CREATE and REMOVE as non-idempotent and warns of a replayed
// truncate (SETATTR) losing writes; Linux nfsd caches the replies of exactly these.
#[test]
fn legacy_nfs_declares_which_procedures_are_not_idempotent() {
    let not = |table: &[ProcInfo]| -> Vec<&'static str> {
        table
            .iter()
            .filter(|p| !p.idempotent)
            .map(|p| p.name)
            .collect()
    };
    assert_eq!(
        not(&v3::PROCEDURES),
        vec![
            "SETATTR", "WRITE", "CREATE", "MKDIR", "SYMLINK", "MKNOD", "REMOVE", "RMDIR", "RENAME",
            "LINK"
        ]
    );
    assert_eq!(
        not(&v2::PROCEDURES),
        vec!["SETATTR", "WRITE", "CREATE", "REMOVE", "RENAME", "LINK", "SYMLINK", "MKDIR", "RMDIR"]
    );
    assert!(nfs::mount::PROCEDURES.iter().all(|p| p.idempotent));
    // Every reply the NFS server caches fits the default cache's largest reply.
    let longest = v3::PROCEDURES
        .iter()
        .filter(|p| !p.idempotent)
        .map(|p| p.max_reply_len(0, false, 0))
        .max();
    assert_eq!(longest, Some(304));
    assert!(304 <= DrcConfig::DEFAULT.max_reply());
    assert!(v3::proc_info(0).is_some_and(|p| p.idempotent), "NULL");
    assert!(!v4::COMPOUND.idempotent);
}

// RFC 8267 §4.1: "There are no operations in NFS versions 2 or 3 that benefit from short
// Reply chunk retry."
#[test]
fn legacy_nfs_never_uses_short_reply_retry() {
    assert!(v2::PROCEDURES
        .iter()
        .chain(&v3::PROCEDURES)
        .all(|p| !p.short_reply_retry));
}

// RFC 8267 §6.1: "Only the following XDR data items in the COMPOUND procedure of all NFS
// version 4 minor versions are DDP-eligible: the opaque data field in the WRITE4args
// structure; the linkdata field of the NF4LNK arm in the createtype4 union; the opaque
// data field in the READ4resok structure; the linkdata field in the READLINK4resok
// structure."
#[test]
fn nfs4_has_exactly_four_ddp_items() {
    let mut found = Vec::new();
    for op in (3..=71).chain([v4::ops::ILLEGAL]) {
        assert!(v4::op_name(op).is_some(), "op {op}");
        let d = v4::op_ddp(op);
        if let Some(a) = d.arg {
            found.push((v4::op_name(op).unwrap(), "arg", a.name));
        }
        if let Some(r) = d.result {
            found.push((v4::op_name(op).unwrap(), "result", r.name));
        }
    }
    assert_eq!(
        found,
        [
            ("CREATE", "arg", "createtype4.linkdata"),
            ("READ", "result", "READ4resok.data"),
            ("READLINK", "result", "READLINK4resok.linkdata"),
            ("WRITE", "arg", "WRITE4args.data"),
        ]
    );
    // NFSv4.2 additions with bulk data are not on the list.
    assert_eq!(v4::op_name(v4::ops::READ_PLUS), Some("READ_PLUS"));
    assert!(!v4::is_read_operation(v4::ops::READ_PLUS));
    assert_eq!(v4::op_ddp(v4::ops::WRITE_SAME), v4::OpDdp::default());
    assert_eq!(v4::op_name(2), None);
    assert_eq!(v4::op_name(72), None);
    let compound = nfs::proc_info(4, v4::procs::COMPOUND).unwrap();
    assert_eq!(
        ddp_names(compound),
        (
            vec!["WRITE4args.data", "createtype4.linkdata"],
            vec!["READ4resok.data", "READLINK4resok.linkdata"]
        )
    );
    assert_eq!(compound.reply.data, DataBound::Unbounded);
}

// RFC 8267 §6.4.1 and the §6.4.3 example: Write chunks A, B, C serve the first, second
// and third READ operation (READ or READLINK) in COMPOUND order; operations without a
// DDP-eligible result take none; READ operations beyond the last chunk return inline.
#[test]
fn write_chunks_pair_with_read_operations_in_order() {
    use v4::ops::*;
    use v4::ResultPlacement::{Inline, WriteChunk};
    let compound = [
        SEQUENCE, PUTFH, READ, GETATTR, READLINK, GETATTR, READ, READ,
    ];
    let pairs: Vec<_> = v4::WriteChunkPairing::new(&compound, 3).collect();
    assert_eq!(
        pairs,
        [
            (2, WriteChunk(0)),
            (4, WriteChunk(1)),
            (6, WriteChunk(2)),
            (7, Inline)
        ]
    );
    // "If an NFS version 4 client wishes all DDP-eligible items in an NFS Reply to be
    // conveyed inline, it leaves the Write list empty."
    assert!(v4::WriteChunkPairing::new(&compound, 0).all(|(_, p)| p == Inline));
    // WRITE and CREATE have DDP-eligible arguments, not results: they take no chunk.
    assert_eq!(
        v4::WriteChunkPairing::new(&[WRITE, CREATE, GETATTR], 2).count(),
        0
    );
}

// RFC 8267 §6.4.2: "The Read list can contain either a Position Zero Read chunk, one Read
// chunk with a non-zero Position, or both. The Write list can contain no more than one
// Write chunk. Any chunk can contain up to sixteen RDMA segments." And, after ERR_CHUNK
// or GARBAGE_ARGS for complexity, the client SHOULD NOT retransmit the failing request.
#[test]
fn nfs4_chunk_complexity_defaults() {
    let c = v4::ChunkComplexity::DEFAULT;
    assert!(c.admits(true, 1, 1, 16));
    assert!(c.admits(false, 0, 0, 1));
    assert!(!c.admits(true, 2, 1, 16));
    assert!(!c.admits(false, 1, 2, 16));
    assert!(!c.admits(false, 1, 1, 17));
    const { assert!(!v4::RETRANSMIT_AFTER_COMPLEXITY_ERROR) };
}

// RFC 8267 §6.2.1: a 4.0 client "can use short Reply chunk retry when an NFS COMPOUND
// containing a GETATTR operation encounters a transport error"; §6.2.2: later minor
// versions have ca_maxresponsesize. §5.2: NFSACL GETACL may use it too.
#[test]
fn short_reply_retry_rules() {
    use v4::ops::*;
    assert!(v4::short_reply_retry(0, &[PUTFH, GETATTR]));
    assert!(!v4::short_reply_retry(0, &[PUTFH, READ]));
    assert!(!v4::short_reply_retry(1, &[SEQUENCE, PUTFH, GETATTR]));
    assert!(aux::nfsacl_proc_info(1).unwrap().short_reply_retry);
    assert_eq!(
        aux::nfsacl_proc_info(1).unwrap().reply.data,
        DataBound::Unbounded
    );
    assert!(v4::UNBOUNDED_RESULT_ITEMS.contains(&"fattr4_acl"));
    assert!(v4::UNBOUNDED_RESULT_ITEMS.contains(&"fs_locations_info4"));
}

// RFC 8267 §9: nfsrdma 20049; §4.2/§6.3: NFS traditionally on 2049. §5: auxiliary
// programs; §5.1 MOUNT, NLM and NSM MUST be offered over TCP.
#[test]
fn ports_netids_and_auxiliary_programs() {
    assert_eq!(nfs::NFS_RDMA_PORT, 20049);
    assert_eq!(nfs::NFS_PORT, 2049);
    assert_eq!(nfs::NFS_PROGRAM, 100_003);
    assert_eq!((nfs::NETID_RDMA, nfs::NETID_RDMA6), ("rdma", "rdma6"));
    let progs: Vec<_> = aux::ALL
        .iter()
        .map(|p| (p.name, p.prog, p.versions))
        .collect();
    assert_eq!(
        progs,
        [
            ("MOUNT", 100_005, &[2, 3][..]),
            ("NLM", 100_021, &[1, 3, 4][..]),
            ("NSM", 100_024, &[1][..]),
            ("NFSACL", 100_227, &[1][..]),
        ]
    );
    assert!(aux::ALL[..3]
        .iter()
        .all(|p| p.carriage == aux::Carriage::Tcp));
    assert_eq!(aux::NFSACL.carriage, aux::Carriage::NfsConnection);
}

// --- Worst-case NFSv3 results, encoded from RFC 1813's XDR ---

fn fattr3(e: &mut DdpEncoder<'_, '_>) {
    for _ in 0..5 {
        e.u32(u32::MAX).unwrap(); // type, mode, nlink, uid, gid
    }
    for _ in 0..5 {
        e.u64(u64::MAX).unwrap(); // size, used, rdev (specdata3), fsid, fileid
    }
    for _ in 0..3 {
        e.u64(u64::MAX).unwrap(); // atime, mtime, ctime (nfstime3)
    }
}

fn post_op_attr(e: &mut DdpEncoder<'_, '_>) {
    e.bool(true).unwrap();
    fattr3(e);
}

fn wcc_data(e: &mut DdpEncoder<'_, '_>) {
    e.bool(true).unwrap(); // pre_op_attr: wcc_attr = size3 + nfstime3 * 2
    for _ in 0..3 {
        e.u64(0).unwrap();
    }
    post_op_attr(e);
}

fn fh3(e: &mut DdpEncoder<'_, '_>) {
    e.opaque(&[0xfe; 64]).unwrap();
}

/// Length of the results `f` encodes, and the table's bound for them.
fn check(procedure: u32, requested: u32, f: impl FnOnce(&mut DdpEncoder<'_, '_>)) {
    let mut buf = vec![0u8; 70_000];
    let mut e = DdpEncoder::inline(&mut buf, 0);
    e.u32(0).unwrap(); // nfsstat3 NFS3_OK
    f(&mut e);
    let len = e.finish().len as u64;
    let p = v3::proc_info(procedure).unwrap();
    assert_eq!(p.reply.max_results(requested), len, "{}", p.name);
}

#[test]
fn nfs3_reply_sizes_match_the_xdr() {
    use v3::procs::*;
    check(GETATTR, 0, fattr3);
    check(SETATTR, 0, wcc_data);
    check(LOOKUP, 0, |e| {
        fh3(e);
        post_op_attr(e);
        post_op_attr(e);
    });
    check(ACCESS, 0, |e| {
        post_op_attr(e);
        e.u32(0x3f).unwrap();
    });
    for n in [0u32, 1, 1021, 4096] {
        let data = vec![b'p'; n as usize];
        check(READLINK, n, |e| {
            post_op_attr(e);
            e.string(&data).unwrap();
        });
        check(READ, n, |e| {
            post_op_attr(e);
            e.u32(n).unwrap();
            e.bool(true).unwrap();
            e.opaque(&data).unwrap();
        });
    }
    check(WRITE, 0, |e| {
        wcc_data(e);
        e.u32(0).unwrap();
        e.u32(2).unwrap();
        e.u64(0).unwrap();
    });
    for p in [CREATE, MKDIR, SYMLINK, MKNOD] {
        check(p, 0, |e| {
            e.bool(true).unwrap();
            fh3(e);
            post_op_attr(e);
            wcc_data(e);
        });
    }
    check(REMOVE, 0, wcc_data);
    check(RMDIR, 0, wcc_data);
    check(RENAME, 0, |e| {
        wcc_data(e);
        wcc_data(e);
    });
    check(LINK, 0, |e| {
        post_op_attr(e);
        wcc_data(e);
    });
    check(FSSTAT, 0, |e| {
        post_op_attr(e);
        for _ in 0..6 {
            e.u64(0).unwrap();
        }
        e.u32(0).unwrap();
    });
    check(FSINFO, 0, |e| {
        post_op_attr(e);
        for _ in 0..7 {
            e.u32(0).unwrap();
        }
        e.u64(0).unwrap();
        e.u64(0).unwrap();
        e.u32(0).unwrap();
    });
    check(PATHCONF, 0, |e| {
        post_op_attr(e);
        for _ in 0..6 {
            e.u32(0).unwrap();
        }
    });
    check(COMMIT, 0, |e| {
        wcc_data(e);
        e.u64(0).unwrap();
    });
    // READDIR(PLUS): the count covers READDIR3resok including its XDR overhead; the
    // failure arm (status + post_op_attr = 92) dominates small counts.
    let rd = v3::proc_info(READDIR).unwrap().reply;
    assert_eq!(rd.max_results(8192), 4 + 8192);
    assert_eq!(rd.max_results(16), 92);
    assert_eq!(
        v3::proc_info(READDIRPLUS).unwrap().reply.max_results(32768),
        4 + 32768
    );
}

#[test]
fn nfs2_reply_sizes() {
    use v2::procs::*;
    let r = |p| v2::proc_info(p).unwrap().reply;
    assert_eq!(r(GETATTR).max_results(0), 72);
    assert_eq!(r(LOOKUP).max_results(0), 104);
    // readlinkres with a MAXPATHLEN path: status + length + 1024.
    assert_eq!(r(READLINK).max_results(0), 1032);
    assert_eq!(r(READLINK).max_inline_results(0, true), 8);
    // readres: status + fattr + length + data.
    assert_eq!(r(READ).max_results(8192), 76 + 8192);
    assert_eq!(r(READ).max_inline_results(8192, true), 76);
    assert_eq!(r(STATFS).max_results(0), 24);
    assert_eq!(r(REMOVE).max_results(0), 4);
    assert_eq!(r(READDIR).max_results(1024), 12 + 1024);
}

// The full reply a requester provisions for: the accepted header (24 octets with an
// AUTH_NONE verifier, plus a padded verifier body otherwise) and the inline results; the
// longest header-only reply (PROG_MISMATCH, 32) is the floor.
#[test]
fn max_reply_len_for_reply_chunk_decisions() {
    let read = v3::proc_info(v3::procs::READ).unwrap();
    assert_eq!(read.max_reply_len(4096, false, 0), 24 + 104 + 4096);
    // With a Write chunk the data and its roundup leave the inline reply.
    assert_eq!(read.max_reply_len(4097, true, 0), 24 + 104);
    // An RPCSEC_GSS verifier of 37 octets is padded to 40.
    assert_eq!(read.max_reply_len(0, true, 37), 24 + 40 + 104);
    let getattr = v3::proc_info(v3::procs::GETATTR).unwrap();
    assert_eq!(getattr.max_reply_len(0, false, 0), 24 + 88);
    assert_eq!(ProcInfo::NULL.max_reply_len(0, false, 0), 32);
    // NFSv4 COMPOUND: the caller's ca_maxresponsesize bounds the results.
    let compound = nfs::proc_info(4, 1).unwrap();
    assert_eq!(compound.max_reply_len(1 << 20, false, 0), 24 + (1 << 20));
}

/// Which procedures leave the Reply chunk out when the responder provides Read chunks
/// (draft-cel-nfsv4-rpcrdma-reliable-reply §5.3.1): those whose reply maximum is unknown
/// (NFSv4 COMPOUND, NFSACL GETACL) or that usually reply small (MOUNT DUMP and EXPORT);
/// never one whose maximum the call bounds (READ, READDIR) or that is fixed.
#[test]
fn read_chunk_reply_preference_follows_the_declarations() {
    assert!(v4::COMPOUND.prefers_read_chunk_reply());
    assert!(aux::NFSACL_GETACL.prefers_read_chunk_reply());
    let mount = |p| nfs::mount::proc_info(p).expect("MOUNT procedure");
    assert!(mount(nfs::mount::procs::DUMP).prefers_read_chunk_reply());
    assert!(mount(nfs::mount::procs::EXPORT).prefers_read_chunk_reply());
    assert!(!mount(nfs::mount::procs::MNT).prefers_read_chunk_reply());
    let preferring: Vec<&str> = (0..22)
        .filter_map(v3::proc_info)
        .filter(|p| p.prefers_read_chunk_reply())
        .map(|p| p.name)
        .collect();
    assert!(preferring.is_empty(), "{preferring:?}");
    assert!(!ProcInfo::NULL.prefers_read_chunk_reply());
}
