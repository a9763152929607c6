//! NFSv3 and MOUNT codecs: every argument and result type round-trips, DDP-eligible
//! items land in chunks, and malformed calls to the real server get GARBAGE_ARGS while
//! well-formed calls with bad handles or offsets get the RFC 1813 status.

use std::sync::Arc;

use rpcrdma_ulp::ddp::{DdpCursor, DdpEncoder, Void, XdrCodec};
use rpcrdma_ulp::nfs::mount::{DirPath, ExportEntry, Exports, MountEntry, MountList, MountRes3};
use rpcrdma_ulp::nfs::server::MemFs;
use rpcrdma_ulp::nfs::v3::args::*;
use rpcrdma_ulp::nfs::v3::procs;
use rpcrdma_ulp::nfs::v3::res::*;
use rpcrdma_ulp::nfs::v3::types::*;
use rpcrdma_ulp::rpc::AcceptStatus;

use crate::nfs_support;
use nfs_support::{decode, header, not_success, Local};

fn attr(id: u64) -> Fattr3 {
    Fattr3 {
        ftype: Ftype3::Reg,
        mode: 0o640,
        nlink: 1,
        uid: 1000,
        gid: 100,
        size: 12345,
        used: 16384,
        rdev: (0, 0),
        fsid: 77,
        fileid: id,
        atime: NfsTime3 {
            seconds: 1,
            nseconds: 2,
        },
        mtime: NfsTime3 {
            seconds: 3,
            nseconds: 4,
        },
        ctime: NfsTime3 {
            seconds: 5,
            nseconds: 6,
        },
    }
}

/// Encodes inline, decodes, compares, and checks the length.
fn round_trip<'a, T: XdrCodec<'a> + PartialEq + core::fmt::Debug>(
    v: &T,
    buf: &'a mut [u8],
) -> usize {
    let mut e = DdpEncoder::inline(buf, 0);
    v.encode(&mut e).unwrap();
    let n = e.finish().len;
    let mut c = DdpCursor::inline(&buf[..n], 0);
    let back = T::decode(&mut c).unwrap();
    c.finish().unwrap();
    assert_eq!(&back, v);
    n
}

macro_rules! rt {
    ($v:expr) => {{
        let mut buf = vec![0u8; 1 << 16];
        round_trip(&$v, &mut buf)
    }};
}

#[test]
fn shared_types_have_rfc_sizes() {
    assert_eq!(rt!(attr(9)), tables_fattr3());
    assert_eq!(rt!(Some(attr(9)) as PostOpAttr), 88);
    let wcc = WccData {
        before: Some(WccAttr::of(&attr(1))),
        after: Some(attr(1)),
    };
    assert_eq!(rt!(wcc), rpcrdma_ulp::nfs::v3::WCC_DATA_LEN as usize);
    assert_eq!(rt!(WccData::default()), 8);
    let s = Sattr3 {
        mode: Some(0o755),
        uid: Some(1),
        gid: None,
        size: Some(1 << 40),
        atime: SetTime::ServerTime,
        mtime: SetTime::ClientTime(NfsTime3 {
            seconds: 9,
            nseconds: 10,
        }),
    };
    // mode 8, uid 8, gid 4, size 12, atime 4, mtime 12.
    assert_eq!(rt!(s), 48);
    assert_eq!(rt!(NfsFh3(&[7u8; 64])), 68);
    assert_eq!(rt!(Verf([1; 8])), 8);
}

fn tables_fattr3() -> usize {
    rpcrdma_ulp::nfs::v3::FATTR3_LEN as usize
}

#[test]
fn every_argument_type_round_trips() {
    let fh = NfsFh3(b"handle-bytes");
    let place = DirOpArgs3 {
        dir: fh,
        name: b"name.txt",
    };
    let s = Sattr3 {
        mode: Some(0o600),
        ..Sattr3::default()
    };
    rt!(place);
    rt!(SetattrArgs {
        object: fh,
        new_attributes: s,
        guard: Some(NfsTime3 {
            seconds: 1,
            nseconds: 1
        }),
    });
    rt!(AccessArgs {
        object: fh,
        access: 0x3f
    });
    rt!(ReadArgs {
        file: fh,
        offset: 1 << 33,
        count: 4096
    });
    rt!(WriteArgs {
        file: fh,
        offset: 5,
        count: 3,
        stable: StableHow::DataSync,
        data: b"abc"
    });
    for how in [
        CreateHow3::Unchecked(s),
        CreateHow3::Guarded(s),
        CreateHow3::Exclusive(Verf([9; 8])),
    ] {
        rt!(CreateArgs { place, how });
    }
    rt!(MkdirArgs {
        place,
        attributes: s
    });
    rt!(SymlinkArgs {
        place,
        attributes: s,
        target: b"/etc/passwd"
    });
    for what in [
        MknodData::Device(Ftype3::Chr, s, (1, 3)),
        MknodData::Special(Ftype3::Fifo, s),
        MknodData::Other(Ftype3::Reg),
    ] {
        rt!(MknodArgs { place, what });
    }
    rt!(RenameArgs {
        from: place,
        to: place
    });
    rt!(LinkArgs {
        file: fh,
        link: place
    });
    rt!(ReaddirArgs {
        dir: fh,
        cookie: 7,
        cookieverf: Verf([3; 8]),
        count: 8192
    });
    rt!(ReaddirplusArgs {
        dir: fh,
        cookie: 7,
        cookieverf: Verf([3; 8]),
        dircount: 1024,
        maxcount: 8192
    });
    rt!(CommitArgs {
        file: fh,
        offset: 0,
        count: 0
    });
    rt!(DirPath(b"/export"));
}

#[test]
fn every_result_type_round_trips() {
    let fh = NfsFh3(b"0123456789");
    let wcc = WccData {
        before: Some(WccAttr::of(&attr(2))),
        after: Some(attr(2)),
    };
    rt!(GetattrRes::Ok(attr(1)));
    rt!(GetattrRes::Fail(Nfsstat3::STALE, Void));
    rt!(SetattrRes::Fail(Nfsstat3::NOT_SYNC, wcc));
    rt!(LookupRes::Ok(LookupOk {
        object: fh,
        obj_attributes: Some(attr(3)),
        dir_attributes: None
    }));
    rt!(LookupRes::Fail(Nfsstat3::NOENT, Some(attr(1))));
    rt!(AccessRes::Ok(AccessOk {
        obj_attributes: None,
        access: 3
    }));
    rt!(ReadlinkRes::Ok(ReadlinkOk {
        symlink_attributes: None,
        data: b"../x"
    }));
    rt!(ReadlinkRes::Fail(Nfsstat3::INVAL, AttrNoData(None)));
    rt!(ReadRes::Ok(ReadOk {
        file_attributes: Some(attr(4)),
        count: 5,
        eof: true,
        data: b"hello"
    }));
    rt!(ReadRes::Fail(Nfsstat3::ISDIR, AttrNoData(Some(attr(4)))));
    rt!(WriteRes::Ok(WriteOk {
        file_wcc: wcc,
        count: 10,
        committed: StableHow::FileSync,
        verf: Verf([5; 8])
    }));
    rt!(CreateRes::Ok(CreateOk {
        obj: Some(fh),
        obj_attributes: Some(attr(5)),
        dir_wcc: wcc
    }));
    rt!(CreateRes::Fail(Nfsstat3::EXIST, wcc));
    rt!(RemoveRes::Ok(wcc));
    rt!(RenameRes::Ok(RenameWcc {
        fromdir_wcc: wcc,
        todir_wcc: WccData::default()
    }));
    rt!(LinkRes::Fail(
        Nfsstat3::XDEV,
        LinkWcc {
            file_attributes: None,
            linkdir_wcc: wcc
        }
    ));
    let entries = vec![
        Entry3 {
            fileid: 1,
            name: b"a",
            cookie: 1,
        },
        Entry3 {
            fileid: 2,
            name: b"bcdef",
            cookie: 2,
        },
    ];
    let n = rt!(ReaddirRes::Ok(ReaddirOk {
        dir_attributes: Some(attr(6)),
        cookieverf: Verf([1; 8]),
        entries: entries.clone(),
        eof: true
    }));
    // The server's budget arithmetic relies on Entry3::xdr_len.
    assert_eq!(
        n,
        4 + 88 + 8 + Entry3::xdr_len(1) + Entry3::xdr_len(5) + 4 + 4
    );
    let plus = EntryPlus3 {
        fileid: 3,
        name: b"xyz",
        cookie: 3,
        name_attributes: Some(attr(7)),
        name_handle: Some(fh),
    };
    let n = rt!(ReaddirplusRes::Ok(ReaddirplusOk {
        dir_attributes: None,
        cookieverf: Verf([2; 8]),
        entries: vec![plus],
        eof: false
    }));
    assert_eq!(n, 4 + 4 + 8 + plus.xdr_len().0 + 4 + 4);
    rt!(FsstatRes::Ok(FsstatOk {
        obj_attributes: None,
        tbytes: 1,
        fbytes: 2,
        abytes: 3,
        tfiles: 4,
        ffiles: 5,
        afiles: 6,
        invarsec: 7
    }));
    rt!(FsinfoRes::Ok(FsinfoOk {
        obj_attributes: None,
        rtmax: 1,
        rtpref: 2,
        rtmult: 3,
        wtmax: 4,
        wtpref: 5,
        wtmult: 6,
        dtpref: 7,
        maxfilesize: 8,
        time_delta: NfsTime3::default(),
        properties: 0x1b
    }));
    rt!(PathconfRes::Ok(PathconfOk {
        obj_attributes: None,
        linkmax: 1,
        name_max: 255,
        no_trunc: true,
        chown_restricted: true,
        case_insensitive: false,
        case_preserving: true
    }));
    rt!(CommitRes::Ok(CommitOk {
        file_wcc: wcc,
        verf: Verf([8; 8])
    }));
    rt!(MountRes3::Ok {
        fhandle: b"root",
        auth_flavors: vec![1, 0]
    });
    rt!(MountList(vec![MountEntry {
        hostname: b"client",
        directory: b"/"
    }]));
    rt!(Exports(vec![ExportEntry {
        dir: b"/",
        groups: vec![b"g1", b"g2"]
    }]));
}

#[test]
fn ddp_items_use_chunks() {
    // WRITE data becomes a Read chunk right after its length word.
    let data = vec![0x5au8; 10_001];
    let mut buf = vec![0u8; 256];
    let h = header(100_003, 3, procs::WRITE, 1);
    let args = WriteArgs {
        file: NfsFh3(b"fh"),
        offset: 0,
        count: data.len() as u32,
        stable: StableHow::Unstable,
        data: &data,
    };
    let call = rpcrdma_ulp::ddp::encode_call(&mut buf, &h, &args, 1).unwrap();
    assert_eq!(call.read_chunks.len(), 1);
    // 40 header + fh (4 + 4) + offset 8 + count 4 + stable 4 + length word 4.
    assert_eq!(call.read_chunks[0].position, 40 + 8 + 8 + 4 + 4 + 4);
    assert_eq!(call.len, 40 + 8 + 8 + 4 + 4 + 4);
    // READ data goes into an offered Write chunk; the failure arm leaves it empty.
    let mut out = vec![0u8; 512];
    let mut e = DdpEncoder::write_chunks(&mut out, 0, &[1 << 20]).unwrap();
    ReadRes::Ok(ReadOk {
        file_attributes: None,
        count: 5,
        eof: false,
        data: b"abcde",
    })
    .encode(&mut e)
    .unwrap();
    let done = e.finish();
    assert_eq!(done.writes.len(), 1);
    assert_eq!(done.writes[0].data, b"abcde");
    assert_eq!(done.len, 4 + 4 + 4 + 4 + 4);
    let written: [&[u8]; 1] = [b"abcde"];
    let mut c = DdpCursor::with_write_chunks(&out[..done.len], 0, &written).unwrap();
    let back = ReadRes::decode(&mut c).unwrap();
    c.finish().unwrap();
    assert_eq!(back.ok().unwrap().data, b"abcde");
    let mut e = DdpEncoder::write_chunks(&mut out, 0, &[1 << 20]).unwrap();
    ReadRes::Fail(Nfsstat3::STALE, AttrNoData(None))
        .encode(&mut e)
        .unwrap();
    assert!(e.finish().writes.is_empty());
}

#[test]
fn malformed_arguments_are_garbage_args() {
    let mut l = Local::new(Arc::new(MemFs::default()));
    let root = l.root();
    let fh_words = |fh: &[u8]| {
        let mut v = (fh.len() as u32).to_be_bytes().to_vec();
        v.extend_from_slice(fh);
        while !v.len().is_multiple_of(4) {
            v.push(0);
        }
        v
    };
    let msg = |procedure: u32, body: &[u8]| {
        let mut buf = vec![0u8; 64];
        let n = header(100_003, 3, procedure, 9).encode(&mut buf).unwrap();
        let mut m = buf[..n].to_vec();
        m.extend_from_slice(body);
        m
    };
    let mut cases: Vec<(&str, Vec<u8>)> = Vec::new();
    cases.push(("GETATTR without a handle", msg(procs::GETATTR, &[])));
    cases.push((
        "handle longer than 64",
        msg(procs::GETATTR, &fh_words(&[1u8; 65])),
    ));
    let mut trailing = fh_words(&root);
    trailing.extend_from_slice(&[0, 0, 0, 1]);
    cases.push(("trailing octets", msg(procs::GETATTR, &trailing)));
    let mut bad_stable = fh_words(&root);
    bad_stable.extend_from_slice(&0u64.to_be_bytes());
    bad_stable.extend_from_slice(&3u32.to_be_bytes());
    bad_stable.extend_from_slice(&7u32.to_be_bytes()); // stable_how 7
    bad_stable.extend_from_slice(&3u32.to_be_bytes());
    bad_stable.extend_from_slice(b"abc\0");
    cases.push(("stable_how 7", msg(procs::WRITE, &bad_stable)));
    let mut mismatch = fh_words(&root);
    mismatch.extend_from_slice(&0u64.to_be_bytes());
    mismatch.extend_from_slice(&100u32.to_be_bytes()); // count 100, data 3
    mismatch.extend_from_slice(&2u32.to_be_bytes());
    mismatch.extend_from_slice(&3u32.to_be_bytes());
    mismatch.extend_from_slice(b"abc\0");
    cases.push(("WRITE count != data", msg(procs::WRITE, &mismatch)));
    let mut bad_pad = fh_words(&root);
    bad_pad.extend_from_slice(&1u32.to_be_bytes());
    bad_pad.extend_from_slice(b"a\x01\0\0");
    cases.push(("non-zero padding in a name", msg(procs::LOOKUP, &bad_pad)));
    let mut huge_name = fh_words(&root);
    huge_name.extend_from_slice(&0x7fff_ffffu32.to_be_bytes());
    cases.push((
        "name length past the message",
        msg(procs::LOOKUP, &huge_name),
    ));
    let mut bad_time = fh_words(&root);
    bad_time.extend_from_slice(&[0u8; 16]); // mode, uid, gid, size: unset
    bad_time.extend_from_slice(&3u32.to_be_bytes()); // time_how 3
    bad_time.extend_from_slice(&0u32.to_be_bytes());
    bad_time.extend_from_slice(&0u32.to_be_bytes()); // no guard
    cases.push(("time_how 3", msg(procs::SETATTR, &bad_time)));
    let mut bad_bool = fh_words(&root);
    bad_bool.extend_from_slice(&[0, 0, 0, 2]);
    cases.push(("set_mode boolean 2", msg(procs::SETATTR, &bad_bool)));
    let mut bad_type = fh_words(&root);
    bad_type.extend_from_slice(&1u32.to_be_bytes());
    bad_type.extend_from_slice(b"n\0\0\0");
    bad_type.extend_from_slice(&9u32.to_be_bytes()); // ftype3 9
    cases.push(("ftype3 9", msg(procs::MKNOD, &bad_type)));
    cases.push(("MNT without a path", {
        let mut buf = vec![0u8; 64];
        let n = header(100_005, 3, 1, 9).encode(&mut buf).unwrap();
        buf[..n].to_vec()
    }));
    for (what, m) in &cases {
        let r = l.raw(m);
        assert_eq!(not_success(&r), AcceptStatus::GarbageArgs, "{what}");
    }
    // The server is unharmed: the root still answers.
    assert_eq!(l.getattr(&root).unwrap().ftype, Ftype3::Dir);
    // Unknown procedures and versions are the RPC's answers, not garbage.
    let r = l.raw(&msg(22, &[]));
    assert_eq!(not_success(&r), AcceptStatus::ProcUnavail);
    let mut m = msg(procs::GETATTR, &fh_words(&root));
    m[16..20].copy_from_slice(&4u32.to_be_bytes());
    // Version 4 is served too: its procedure 1 is COMPOUND, which a v3 handle is not.
    assert_eq!(not_success(&l.raw(&m)), AcceptStatus::GarbageArgs);
    m[20..24].copy_from_slice(&2u32.to_be_bytes());
    assert_eq!(not_success(&l.raw(&m)), AcceptStatus::ProcUnavail);
    m[16..20].copy_from_slice(&5u32.to_be_bytes());
    assert_eq!(
        not_success(&l.raw(&m)),
        AcceptStatus::ProgMismatch { low: 3, high: 4 }
    );
}

#[test]
fn handles_and_offsets_get_rfc1813_statuses() {
    let mut l = Local::new(Arc::new(MemFs::default()));
    let root = l.root();
    let f = l.create(&root, b"f").unwrap();
    assert_eq!(l.write(&f, 0, b"0123456789").unwrap(), 10);
    // Reads past EOF are empty with eof; a read reaching EOF says so.
    assert_eq!(l.read(&f, 100, 10).unwrap(), (vec![], true));
    assert_eq!(l.read(&f, 4, 100).unwrap(), (b"456789".to_vec(), true));
    assert_eq!(l.read(&f, 0, 4).unwrap(), (b"0123".to_vec(), false));
    // An oversized count is clamped to rtmax rather than refused.
    let big = vec![1u8; 300 * 1024];
    let g = l.create(&root, b"g").unwrap();
    l.write(&g, 0, &big[..200 * 1024]).unwrap();
    l.write(&g, 200 * 1024, &big[200 * 1024..]).unwrap();
    let (data, eof) = l.read(&g, 0, u32::MAX).unwrap();
    assert_eq!(data.len(), 256 * 1024);
    assert!(!eof);
    // Forged handles: wrong length, a flipped bit, someone else's key.
    for bad in [
        vec![],
        root[..20].to_vec(),
        {
            let mut x = f.clone();
            x[12] ^= 1;
            x
        },
        {
            let mut x = f.clone();
            *x.last_mut().unwrap() ^= 0x80;
            x
        },
    ] {
        assert_eq!(l.getattr(&bad), Err(Nfsstat3::BADHANDLE), "{bad:?}");
        assert_eq!(l.read(&bad, 0, 1), Err(Nfsstat3::BADHANDLE));
    }
    let other = Local::new(Arc::new(MemFs::default())).root();
    assert_eq!(l.getattr(&other), Err(Nfsstat3::BADHANDLE));
    // A removed file's handle is stale.
    let r = l.call(
        procs::REMOVE,
        &DirOpArgs3 {
            dir: NfsFh3(&root),
            name: b"f",
        },
    );
    assert_eq!(decode::<RemoveRes>(&r).status(), Nfsstat3::OK);
    assert_eq!(l.getattr(&f), Err(Nfsstat3::STALE));
    assert_eq!(l.read(&f, 0, 1), Err(Nfsstat3::STALE));
    // Names: slash, too long, dot-dot at the root.
    assert_eq!(l.lookup(&root, b"a/b"), Err(Nfsstat3::ACCES));
    assert_eq!(l.lookup(&root, &[b'x'; 256]), Err(Nfsstat3::NAMETOOLONG));
    assert_eq!(l.create(&root, b".."), Err(Nfsstat3::EXIST));
    let up = l.lookup(&root, b"..").unwrap();
    assert_eq!(
        l.getattr(&up).unwrap().fileid,
        l.getattr(&root).unwrap().fileid
    );
    // READ of a directory, LOOKUP in a file.
    assert_eq!(l.read(&root, 0, 1), Err(Nfsstat3::ISDIR));
    assert_eq!(l.lookup(&g, b"x"), Err(Nfsstat3::NOTDIR));
    // MKNOD is not supported by this backend.
    let r = l.call(
        procs::MKNOD,
        &MknodArgs {
            place: DirOpArgs3 {
                dir: NfsFh3(&root),
                name: b"fifo",
            },
            what: MknodData::Special(Ftype3::Fifo, Sattr3::default()),
        },
    );
    assert_eq!(decode::<CreateRes>(&r).status(), Nfsstat3::NOTSUPP);
}
