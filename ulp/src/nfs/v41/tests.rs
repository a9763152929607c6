//! Codec tests: every operation's arguments and results round trip, and byte vectors
//! worked out by hand from the RFC 8881 XDR.

use super::compound::*;
use super::*;
use crate::ddp::{DdpCursor, DdpEncoder, XdrCodec};
use crate::nfs::v4::ops;

fn enc<'d, T: XdrCodec<'d>>(v: &T) -> Vec<u8> {
    let mut buf = vec![0u8; 1 << 16];
    let mut e = DdpEncoder::inline(&mut buf, 0);
    v.encode(&mut e).expect("encodes");
    let n = e.finish().len;
    buf.truncate(n);
    buf
}

fn round_trip<'d, T: XdrCodec<'d> + PartialEq + core::fmt::Debug>(v: &T, bytes: &'d [u8]) {
    let mut c = DdpCursor::inline(bytes, 0);
    let back = T::decode(&mut c).expect("decodes");
    c.finish().expect("no leftovers");
    assert_eq!(&back, v);
}

fn words(ws: &[u32]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_be_bytes()).collect()
}

const SID: SessionId = [0x11; 16];
const STATEID: Stateid4 = Stateid4 {
    seqid: 1,
    other: [0xab; 12],
};

fn all_args() -> Vec<ArgOp<'static>> {
    vec![
        ArgOp::ExchangeId(ExchangeIdArgs {
            verifier: [1, 2, 3, 4, 5, 6, 7, 8],
            owner: b"rpcrdma/host/1",
            flags: EXCHGID4_FLAG_SUPP_MOVED_REFER,
            impl_id: Some(ImplId {
                domain: b"example.org",
                name: b"rpcrdma",
                date: NfsTime4 {
                    seconds: 1_700_000_000,
                    nseconds: 5,
                },
            }),
        }),
        ArgOp::CreateSession(CreateSessionArgs {
            clientid: 0x0102_0304_0506_0708,
            sequence: 1,
            flags: 0,
            fore: ChannelAttrs4 {
                headerpadsize: 0,
                maxrequestsize: 1 << 20,
                maxresponsesize: 1 << 20,
                maxresponsesize_cached: 4096,
                maxoperations: 16,
                maxrequests: 8,
                rdma_ird: None,
            },
            back: ChannelAttrs4 {
                maxrequestsize: 4096,
                maxresponsesize: 4096,
                maxoperations: 2,
                maxrequests: 1,
                rdma_ird: Some(0),
                ..ChannelAttrs4::default()
            },
            cb_program: 0x4000_0000,
            cb_sec: CbSecParms::AUTH_NONE,
        }),
        ArgOp::Sequence(SequenceArgs {
            sessionid: SID,
            sequenceid: 7,
            slotid: 2,
            highest_slotid: 3,
            cachethis: false,
        }),
        ArgOp::ReclaimComplete(false),
        ArgOp::PutRootFh,
        ArgOp::PutFh(&[9; 28]),
        ArgOp::GetFh,
        ArgOp::Lookup(b"export"),
        ArgOp::Getattr(attrs_request()),
        ArgOp::Open(OpenArgs {
            seqid: 0,
            share_access: OPEN4_SHARE_ACCESS_BOTH | OPEN4_SHARE_ACCESS_WANT_NO_DELEG,
            share_deny: OPEN4_SHARE_DENY_NONE,
            owner_clientid: 42,
            owner: b"owner",
            how: OpenHow::Create(CreateHow::Unchecked(Fattr4 {
                mask: Bitmap4::of(&[attr::SIZE, attr::MODE]),
                vals: &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xa4],
            })),
            claim: OpenClaim::Null(b"file"),
        }),
        ArgOp::Open(OpenArgs {
            seqid: 0,
            share_access: OPEN4_SHARE_ACCESS_READ,
            share_deny: 0,
            owner_clientid: 42,
            owner: b"o",
            how: OpenHow::NoCreate,
            claim: OpenClaim::Null(b"f"),
        }),
        ArgOp::Open(OpenArgs {
            seqid: 0,
            share_access: OPEN4_SHARE_ACCESS_WRITE,
            share_deny: 0,
            owner_clientid: 1,
            owner: b"o",
            how: OpenHow::Create(CreateHow::Exclusive([3; 8])),
            claim: OpenClaim::Null(b"g"),
        }),
        ArgOp::Read(ReadArgs {
            stateid: STATEID,
            offset: 1 << 33,
            count: 65536,
        }),
        ArgOp::Write(WriteArgs {
            stateid: STATEID,
            offset: 4096,
            stable: UNSTABLE4,
            data: b"hello",
        }),
        ArgOp::Commit(0, 0),
        ArgOp::Close(0, STATEID),
        ArgOp::Readdir(ReaddirArgs {
            cookie: 0,
            cookieverf: [0; 8],
            dircount: 8192,
            maxcount: 32768,
            attr_request: attrs_request(),
        }),
        ArgOp::Remove(b"old"),
        ArgOp::DestroySession(SID),
        ArgOp::DestroyClientid(0x0102_0304_0506_0708),
        ArgOp::Access(0x3f),
        ArgOp::Create(CreateArgs {
            objtype: CreateType::Plain(ftype::NF4DIR),
            name: b"d",
            attrs: Fattr4::default(),
        }),
        ArgOp::Create(CreateArgs {
            objtype: CreateType::Link(b"../t"),
            name: b"l",
            attrs: Fattr4::default(),
        }),
        ArgOp::Create(CreateArgs {
            objtype: CreateType::Device(ftype::NF4CHR, 1, 3),
            name: b"c",
            attrs: Fattr4::default(),
        }),
        ArgOp::Link(b"l2"),
        ArgOp::Lookupp,
        ArgOp::OpenDowngrade(OpenDowngradeArgs {
            stateid: STATEID,
            seqid: 0,
            share_access: 1,
            share_deny: 0,
        }),
        ArgOp::Readlink,
        ArgOp::Rename(b"a", b"b"),
        ArgOp::RestoreFh,
        ArgOp::SaveFh,
        ArgOp::SecinfoNoName(0),
        ArgOp::Setattr(
            STATEID,
            Fattr4 {
                mask: Bitmap4::of(&[attr::SIZE]),
                vals: &[0, 0, 0, 0, 0, 0, 0, 9],
            },
        ),
        ArgOp::TestStateid(vec![STATEID, Stateid4::default()]),
        ArgOp::FreeStateid(STATEID),
        ArgOp::Delegreturn(STATEID),
        ArgOp::Open(OpenArgs {
            seqid: 0,
            share_access: OPEN4_SHARE_ACCESS_READ,
            share_deny: 0,
            owner_clientid: 1,
            owner: b"o",
            how: OpenHow::Create(CreateHow::Exclusive41([3; 8], Fattr4::default())),
            claim: OpenClaim::Fh,
        }),
        ArgOp::Open(OpenArgs {
            seqid: 0,
            share_access: OPEN4_SHARE_ACCESS_READ,
            share_deny: 0,
            owner_clientid: 1,
            owner: b"o",
            how: OpenHow::NoCreate,
            claim: OpenClaim::Previous(0),
        }),
    ]
}

#[test]
fn every_argument_round_trips() {
    for op in all_args() {
        let b = enc(&op);
        round_trip(&op, &b);
    }
    let c = CompoundArgs {
        tag: b"t",
        minorversion: 1,
        ops: all_args(),
    };
    let b = enc(&c);
    round_trip(&c, &b);
}

fn all_results() -> Vec<ResOp<'static>> {
    let ok = |op, body| ResOp {
        op,
        status: Nfsstat4::OK,
        body,
    };
    let fattr = Fattr4 {
        mask: Bitmap4::of(&[attr::TYPE, attr::SIZE]),
        vals: &[0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0x10, 0],
    };
    vec![
        ok(
            ops::EXCHANGE_ID,
            ResBody::ExchangeId(ExchangeIdRes {
                clientid: 77,
                sequenceid: 1,
                flags: EXCHGID4_FLAG_CONFIRMED_R | 0x0001_0000,
                server_minor_id: 3,
                server_major_id: b"server",
                server_scope: b"scope",
                impl_id: None,
            }),
        ),
        ok(
            ops::CREATE_SESSION,
            ResBody::CreateSession(CreateSessionRes {
                sessionid: SID,
                sequence: 1,
                flags: 0,
                fore: ChannelAttrs4 {
                    maxrequests: 4,
                    ..ChannelAttrs4::default()
                },
                back: ChannelAttrs4::default(),
            }),
        ),
        ok(
            ops::SEQUENCE,
            ResBody::Sequence(SequenceRes {
                sessionid: SID,
                sequenceid: 9,
                slotid: 0,
                highest_slotid: 3,
                target_highest_slotid: 3,
                status_flags: 0,
            }),
        ),
        ok(ops::RECLAIM_COMPLETE, ResBody::None),
        ok(ops::PUTROOTFH, ResBody::None),
        ok(ops::PUTFH, ResBody::None),
        ok(ops::GETFH, ResBody::GetFh(&[5; 16])),
        ok(ops::LOOKUP, ResBody::None),
        ok(ops::GETATTR, ResBody::Getattr(fattr.clone())),
        ok(
            ops::OPEN,
            ResBody::Open(OpenRes {
                stateid: STATEID,
                cinfo: ChangeInfo4 {
                    atomic: true,
                    before: 1,
                    after: 2,
                },
                rflags: 4,
                attrset: Bitmap4::of(&[attr::SIZE]),
                delegation: OpenDelegation::NoneExt(0, None),
            }),
        ),
        ok(
            ops::OPEN,
            ResBody::Open(OpenRes {
                stateid: STATEID,
                cinfo: ChangeInfo4::default(),
                rflags: 0,
                attrset: Bitmap4::default(),
                delegation: OpenDelegation::Read(
                    STATEID,
                    false,
                    Nfsace4 {
                        acetype: 0,
                        flag: 0,
                        access_mask: 1,
                        who: b"EVERYONE@",
                    },
                ),
            }),
        ),
        ok(
            ops::OPEN,
            ResBody::Open(OpenRes {
                stateid: STATEID,
                cinfo: ChangeInfo4::default(),
                rflags: 0,
                attrset: Bitmap4::default(),
                delegation: OpenDelegation::Write(
                    STATEID,
                    true,
                    SpaceLimit::Blocks(10, 512),
                    Nfsace4 {
                        acetype: 0,
                        flag: 0,
                        access_mask: 1,
                        who: b"OWNER@",
                    },
                ),
            }),
        ),
        ok(ops::READ, ResBody::Read(true, b"data!")),
        ok(ops::WRITE, ResBody::Write(5, FILE_SYNC4, [7; 8])),
        ok(ops::COMMIT, ResBody::Commit([7; 8])),
        ok(ops::CLOSE, ResBody::Close(STATEID)),
        ok(
            ops::READDIR,
            ResBody::Readdir(ReaddirRes {
                cookieverf: [1; 8],
                entries: vec![
                    DirEntry {
                        cookie: 3,
                        name: b"a",
                        attrs: fattr.clone(),
                    },
                    DirEntry {
                        cookie: 4,
                        name: b"bb",
                        attrs: fattr,
                    },
                ],
                eof: true,
            }),
        ),
        ok(ops::REMOVE, ResBody::Remove(ChangeInfo4::default())),
        ok(ops::DESTROY_SESSION, ResBody::None),
        ok(ops::DESTROY_CLIENTID, ResBody::None),
        ResOp {
            op: ops::LOOKUP,
            status: Nfsstat4::NOENT,
            body: ResBody::None,
        },
        ResOp {
            op: ops::READ,
            status: Nfsstat4::BAD_STATEID,
            body: ResBody::None,
        },
        ok(ops::ACCESS, ResBody::Access(0x3f, 0x1f)),
        ok(
            ops::CREATE,
            ResBody::Create(ChangeInfo4::default(), Bitmap4::of(&[attr::MODE])),
        ),
        ok(ops::LINK, ResBody::Link(ChangeInfo4::default())),
        ok(ops::OPEN_DOWNGRADE, ResBody::OpenDowngrade(STATEID)),
        ok(ops::READLINK, ResBody::Readlink(b"../target")),
        ok(
            ops::RENAME,
            ResBody::Rename(ChangeInfo4::default(), ChangeInfo4::default()),
        ),
        ok(ops::SECINFO_NO_NAME, ResBody::SecinfoNoName(vec![1, 0])),
        ok(ops::SETATTR, ResBody::Setattr(Bitmap4::of(&[attr::SIZE]))),
        ok(
            ops::TEST_STATEID,
            ResBody::TestStateid(vec![Nfsstat4::OK, Nfsstat4::BAD_STATEID]),
        ),
        ResOp {
            op: ops::SETATTR,
            status: Nfsstat4::ACCESS,
            body: ResBody::None,
        },
        // A failed operation this codec has no body for is still a status.
        ResOp {
            op: 60,
            status: Nfsstat4::NOTSUPP,
            body: ResBody::None,
        },
    ]
}

#[test]
fn every_result_round_trips() {
    for r in all_results() {
        let b = enc(&r);
        round_trip(&r, &b);
    }
    let c = CompoundRes {
        status: Nfsstat4::OK,
        tag: b"",
        results: all_results(),
    };
    let b = enc(&c);
    round_trip(&c, &b);
}

/// SEQUENCE4args: opcode 53, the 16-octet session id, then four words (RFC 8881 §18.46).
#[test]
fn sequence_bytes_by_hand() {
    let op = ArgOp::Sequence(SequenceArgs {
        sessionid: [0xaa; 16],
        sequenceid: 5,
        slotid: 1,
        highest_slotid: 3,
        cachethis: true,
    });
    let mut want = words(&[53]);
    want.extend_from_slice(&[0xaa; 16]);
    want.extend(words(&[5, 1, 3, 1]));
    assert_eq!(enc(&op), want);
}

/// COMPOUND4args { tag "", minorversion 1, [PUTROOTFH, LOOKUP "export", GETFH] }.
#[test]
fn compound_lookup_bytes_by_hand() {
    let c = CompoundArgs {
        tag: b"",
        minorversion: 1,
        ops: vec![ArgOp::PutRootFh, ArgOp::Lookup(b"export"), ArgOp::GetFh],
    };
    let mut want = words(&[0, 1, 3, 24, 15, 6]);
    want.extend_from_slice(b"export\0\0");
    want.extend(words(&[10]));
    assert_eq!(enc(&c), want);
}

/// GETATTR of type, change, size, fileid and mode: bitmap4 is two words, bit 20 of word
/// 0 is fileid and bit 1 of word 1 is mode (33).
#[test]
fn getattr_bitmap_by_hand() {
    let b = Bitmap4::of(&[
        attr::TYPE,
        attr::CHANGE,
        attr::SIZE,
        attr::FILEID,
        attr::MODE,
    ]);
    assert_eq!(
        enc(&ArgOp::Getattr(b.clone())),
        words(&[9, 2, 0x0010_001a, 0x0000_0002])
    );
    assert_eq!(b.bits().collect::<Vec<_>>(), [1, 3, 4, 20, 33]);
}

/// CREATE_SESSION4args with one AUTH_NONE callback security entry (RFC 8881 §18.36).
#[test]
fn create_session_bytes_by_hand() {
    let attrs = ChannelAttrs4 {
        headerpadsize: 0,
        maxrequestsize: 0x1000,
        maxresponsesize: 0x2000,
        maxresponsesize_cached: 0x400,
        maxoperations: 8,
        maxrequests: 4,
        rdma_ird: None,
    };
    let op = ArgOp::CreateSession(CreateSessionArgs {
        clientid: 0x0000_0001_0000_0002,
        sequence: 1,
        flags: 0,
        fore: attrs,
        back: attrs,
        cb_program: 0x4000_0000,
        cb_sec: CbSecParms::AUTH_NONE,
    });
    let a = [0, 0x1000, 0x2000, 0x400, 8, 4, 0];
    let mut w = vec![43, 1, 2, 1, 0];
    w.extend(a);
    w.extend(a);
    w.extend([0x4000_0000, 1, 0]);
    assert_eq!(enc(&op), words(&w));
}

/// EXCHANGE_ID4args: verifier (8 fixed octets), owner opaque, flags, SP4_NONE, and an
/// empty implementation id array.
#[test]
fn exchange_id_bytes_by_hand() {
    let op = ArgOp::ExchangeId(ExchangeIdArgs {
        verifier: *b"verifier",
        owner: b"abcde",
        flags: 0,
        impl_id: None,
    });
    let mut want = words(&[42]);
    want.extend_from_slice(b"verifier");
    want.extend(words(&[5]));
    want.extend_from_slice(b"abcde\0\0\0");
    want.extend(words(&[0, 0, 0]));
    assert_eq!(enc(&op), want);
}

/// OPEN4args with OPEN4_CREATE UNCHECKED4 (size 0, mode 0644) and CLAIM_NULL.
#[test]
fn open_create_bytes_by_hand() {
    let (mask, vals) = Attrs {
        size: Some(0),
        mode: Some(0o644),
        ..Attrs::default()
    }
    .encode_settable();
    let op = ArgOp::Open(OpenArgs {
        seqid: 0,
        share_access: OPEN4_SHARE_ACCESS_BOTH,
        share_deny: 0,
        owner_clientid: 0x0000_0001_0000_0002,
        owner: b"me",
        how: OpenHow::Create(CreateHow::Unchecked(Fattr4 { mask, vals: &vals })),
        claim: OpenClaim::Null(b"x"),
    });
    let mut want = words(&[18, 0, 3, 0, 1, 2, 2]);
    want.extend_from_slice(b"me\0\0");
    // OPEN4_CREATE, UNCHECKED4, bitmap {0x10, 0x2}, 12 octets: size 0, mode 0644.
    want.extend(words(&[1, 0, 2, 0x10, 0x2, 12, 0, 0, 0o644]));
    want.extend(words(&[0, 1]));
    want.extend_from_slice(b"x\0\0\0");
    assert_eq!(enc(&op), want);
}

/// COMPOUND4res of SEQUENCE then a failing LOOKUP: decoded by hand.
#[test]
fn compound_res_by_hand() {
    let mut b = words(&[2, 0, 2, 53, 0]);
    b.extend_from_slice(&[0x22; 16]);
    b.extend(words(&[4, 0, 7, 7, 0x20, 15, 2]));
    let mut c = DdpCursor::inline(&b, 0);
    let r = CompoundRes::decode(&mut c).unwrap();
    c.finish().unwrap();
    assert_eq!(r.status, Nfsstat4::NOENT);
    assert_eq!(r.status.to_string(), "NFS4ERR_NOENT");
    assert_eq!(r.results.len(), 2);
    match &r.results[0].body {
        ResBody::Sequence(s) => {
            assert_eq!(s.sequenceid, 4);
            assert_eq!(s.highest_slotid, 7);
            assert_eq!(s.status_flags, 0x20);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(r.results[1].op, ops::LOOKUP);
    assert_eq!(r.results[1].status, Nfsstat4::NOENT);
}

#[test]
fn attrs_decode_and_refuse_unknown() {
    let mut vals = words(&[ftype::NF4REG, 0, 9, 0, 0x100, 0, 77, 0o755]);
    vals.extend(words(&[1]));
    vals.extend_from_slice(b"0\0\0\0");
    let f = Fattr4 {
        mask: Bitmap4::of(&[
            attr::TYPE,
            attr::CHANGE,
            attr::SIZE,
            attr::FILEID,
            attr::MODE,
        ]),
        vals: &vals[..32],
    };
    let a = Attrs::decode(&f).unwrap();
    assert_eq!(a.ftype, Some(ftype::NF4REG));
    assert_eq!(a.change, Some(9));
    assert_eq!(a.size, Some(0x100));
    assert_eq!(a.fileid, Some(77));
    assert_eq!(a.mode, Some(0o755));
    // Leftover octets are refused.
    let f2 = Fattr4 {
        vals: &vals[..36],
        ..f.clone()
    };
    assert!(Attrs::decode(&f2).is_err());
    // An attribute not asked for (fsid, 8) cannot be skipped.
    let f3 = Fattr4 {
        mask: Bitmap4::of(&[8]),
        vals: &vals,
    };
    assert!(Attrs::decode(&f3).is_err());
    // owner string.
    let f4 = Fattr4 {
        mask: Bitmap4::of(&[attr::OWNER]),
        vals: &vals[32..],
    };
    assert_eq!(Attrs::decode(&f4).unwrap().owner.as_deref(), Some("0"));
}

#[test]
fn truncated_and_unknown_input_is_an_error() {
    let c = CompoundRes {
        status: Nfsstat4::OK,
        tag: b"",
        results: all_results(),
    };
    let b = enc(&c);
    for cut in [0, 3, 7, 12, 40, b.len() / 2, b.len() - 1] {
        let mut cur = DdpCursor::inline(&b[..cut], 0);
        assert!(CompoundRes::decode(&mut cur).is_err(), "cut at {cut}");
    }
    // An operation number the codec does not know.
    let b = words(&[0, 0, 1, 1, 0]);
    assert!(CompoundRes::decode(&mut DdpCursor::inline(&b, 0)).is_err());
    let b = words(&[0, 1, 1, 1]);
    assert!(CompoundArgs::decode(&mut DdpCursor::inline(&b, 0)).is_err());
    assert_eq!(Nfsstat4(99_999).to_string(), "nfsstat4(99999)");
    assert_eq!(Nfsstat4::DELAY.to_string(), "NFS4ERR_DELAY");
}

/// RFC 8267 §6.4.1: the Nth Write chunk pairs with the Nth READ. A reply with a failed
/// READ then a good one: the first chunk comes back empty, the second holds the data.
#[test]
fn write_chunks_pair_with_reads_in_order() {
    let data = [0x5au8; 3000];
    let res = CompoundRes {
        status: Nfsstat4::OK,
        tag: b"",
        results: vec![
            ResOp {
                op: ops::READ,
                status: Nfsstat4::OK,
                body: ResBody::Read(false, &data[..1000]),
            },
            ResOp {
                op: ops::PUTFH,
                status: Nfsstat4::OK,
                body: ResBody::None,
            },
            ResOp {
                op: ops::READ,
                status: Nfsstat4::OK,
                body: ResBody::Read(true, &data),
            },
        ],
    };
    let mut buf = vec![0u8; 4096];
    let mut e = DdpEncoder::write_chunks(&mut buf, 0, &[4096, 4096]).unwrap();
    res.encode(&mut e).unwrap();
    let out = e.finish();
    assert_eq!(out.writes.len(), 2);
    assert_eq!(out.writes[0].chunk, 0);
    assert_eq!(out.writes[0].data.len(), 1000);
    assert_eq!(out.writes[1].chunk, 1);
    assert_eq!(out.writes[1].data.len(), 3000);
    // Data is not inline.
    assert!(out.len < 200);
    let written: [&[u8]; 2] = [out.writes[0].data, out.writes[1].data];
    let inline = buf[..out.len].to_vec();
    let mut c = DdpCursor::with_write_chunks(&inline, 0, &written).unwrap();
    let back = CompoundRes::decode(&mut c).unwrap();
    c.finish().unwrap();
    assert_eq!(back, res);

    // A failed first READ: its chunk is returned empty and the second READ still gets
    // the second chunk.
    let failed = CompoundRes {
        status: Nfsstat4::OK,
        tag: b"",
        results: vec![
            ResOp {
                op: ops::READ,
                status: Nfsstat4::BAD_STATEID,
                body: ResBody::None,
            },
            ResOp {
                op: ops::READ,
                status: Nfsstat4::OK,
                body: ResBody::Read(true, &data),
            },
        ],
    };
    let mut buf = vec![0u8; 4096];
    let mut e = DdpEncoder::write_chunks(&mut buf, 0, &[4096, 4096]).unwrap();
    failed.encode(&mut e).unwrap();
    let out = e.finish();
    assert_eq!(out.writes.len(), 1);
    assert_eq!(out.writes[0].chunk, 1);
    let written: [&[u8]; 2] = [&[], out.writes[0].data];
    let inline = buf[..out.len].to_vec();
    let mut c = DdpCursor::with_write_chunks(&inline, 0, &written).unwrap();
    assert_eq!(CompoundRes::decode(&mut c).unwrap(), failed);
    c.finish().unwrap();
}

/// WRITE data becomes a Read chunk at its XDR position: just after its length word.
#[test]
fn write_data_goes_in_a_read_chunk() {
    let data = vec![1u8; 5000];
    let c = CompoundArgs {
        tag: b"",
        minorversion: 1,
        ops: vec![
            ArgOp::PutFh(&[1; 8]),
            ArgOp::Write(WriteArgs {
                stateid: STATEID,
                offset: 0,
                stable: UNSTABLE4,
                data: &data,
            }),
            ArgOp::Commit(0, 0),
        ],
    };
    let mut buf = vec![0u8; 1024];
    let mut e = DdpEncoder::read_chunks(&mut buf, 100, 1024);
    c.encode(&mut e).unwrap();
    let out = e.finish();
    assert_eq!(out.reads.len(), 1);
    // 100 (header) + tag 4 + minor 4 + count 4 + PUTFH (4+4+8) + WRITE op 4 + stateid 16
    // + offset 8 + stable 4 + length word 4.
    assert_eq!(out.reads[0].position, 100 + 12 + 16 + 4 + 16 + 8 + 4 + 4);
    assert_eq!(out.reads[0].data.len(), 5000);
    // COMMIT follows inline after the length word.
    assert_eq!(out.len, out.reads[0].position as usize + 16);
}

/// Decodes `b` as `T`; when it decodes to the last octet, re-encoding must give `b` back
/// (XDR is canonical: padding zero, booleans 0 or 1), and a value's attributes decode or
/// fail without panicking.
fn canonical<'d, T: XdrCodec<'d> + core::fmt::Debug>(b: &'d [u8]) -> Result<(), String> {
    let mut c = DdpCursor::inline(b, 0);
    if let Ok(v) = T::decode(&mut c) {
        if c.finish().is_ok() {
            let again = enc(&v);
            if again != b {
                return Err(format!("{v:?} re-encodes differently"));
            }
        }
    }
    Ok(())
}

fn mutate(mut b: Vec<u8>, edits: &[(usize, u8)], cut: usize) -> Vec<u8> {
    for &(at, v) in edits {
        let n = b.len();
        if n > 0 {
            b[at % n] = v;
        }
    }
    let keep = b.len().saturating_sub(cut);
    b.truncate(keep);
    b
}

proptest::proptest! {
    #[test]
    fn mutated_compounds_never_panic_and_stay_canonical(
        edits in proptest::collection::vec((0usize..4096, 0u8..=255), 0..4),
        cut in 0usize..64,
        which in 0usize..2,
    ) {
        if which == 0 {
            let base = enc(&CompoundRes { status: Nfsstat4::OK, tag: b"", results: all_results() });
            let b = mutate(base, &edits, cut);
            canonical::<CompoundRes<'_>>(&b).map_err(proptest::test_runner::TestCaseError::fail)?;
            let mut c = DdpCursor::inline(&b, 0);
            if let Ok(r) = CompoundRes::decode(&mut c) {
                for op in &r.results {
                    if let ResBody::Getattr(f) = &op.body {
                        let _ = Attrs::decode(f);
                    }
                }
            }
        } else {
            let base = enc(&CompoundArgs { tag: b"t", minorversion: 1, ops: all_args() });
            let b = mutate(base, &edits, cut);
            canonical::<CompoundArgs<'_>>(&b).map_err(proptest::test_runner::TestCaseError::fail)?;
        }
    }

    #[test]
    fn random_words_never_panic(ws in proptest::collection::vec(
        proptest::prop_oneof![0u32..80, proptest::prelude::any::<u32>()], 0..64)) {
        let b = words(&ws);
        canonical::<CompoundRes<'_>>(&b).map_err(proptest::test_runner::TestCaseError::fail)?;
        canonical::<CompoundArgs<'_>>(&b).map_err(proptest::test_runner::TestCaseError::fail)?;
        let _ = Attrs::decode(&Fattr4 { mask: Bitmap4(ws.clone()), vals: &b });
    }
}
