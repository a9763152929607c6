use super::chars::*;
use super::*;
use proptest::prelude::*;

fn encode(r: &RtrRepr, payload: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; r.encoded_len() + payload.len()];
    let n = r.encode(&mut buf).expect("fits");
    assert_eq!(n, r.encoded_len());
    buf[n..].copy_from_slice(payload);
    buf
}

#[test]
fn header_lengths_match_the_constants() {
    let req = RtrRepr {
        xid: 1,
        credit: 2,
        op: RtrOp::XmtReq {
            count: 3,
            rsbuf: 4,
            pslen: 5,
        },
    };
    assert_eq!(req.encoded_len(), XMTREQ_HEADER_LEN);
    let resp = RtrRepr {
        op: RtrOp::XmtResp { count: 1, pslen: 0 },
        ..req
    };
    assert_eq!(resp.encoded_len(), XMTRESP_HEADER_LEN);
    let cont = RtrRepr {
        op: RtrOp::XmtCont(XmtCont {
            xnum: 1,
            itype: ROPT_XMTREQ,
            pslen: 0,
        }),
        ..req
    };
    assert_eq!(cont.encoded_len(), XMTCONT_HEADER_LEN);
}

#[test]
fn xmtreq_decodes_field_by_field() {
    let r = RtrRepr {
        xid: 0xdead_beef,
        credit: 32,
        op: RtrOp::XmtReq {
            count: 5,
            rsbuf: 3,
            pslen: 4,
        },
    };
    let buf = encode(&r, b"abcd");
    let words: Vec<u32> = buf[..XMTREQ_HEADER_LEN]
        .chunks(4)
        .map(|w| u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
        .collect();
    // xid, vers, credit, proc, opttype, optinfo length, ddp<>, rsd<>, count, rsbuf, pslen
    assert_eq!(
        words,
        [
            0xdead_beef,
            1,
            32,
            RDMA_OPTIONAL,
            ROPT_XMTREQ,
            20,
            0,
            0,
            5,
            3,
            4
        ]
    );
    let v = RtrView::parse(&buf).expect("parses");
    assert!(is_optional(&buf));
    assert_eq!(v.payload, b"abcd");
    assert_eq!(v.header_len, XMTREQ_HEADER_LEN);
    match v.body {
        RtrBody::XmtReq(q) => {
            assert_eq!((q.count, q.rsbuf, q.pslen), (5, 3, 4));
            assert!(q.ddp.is_empty() && q.rsd.is_empty());
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(v.to_message().header, r);
}

#[test]
fn payload_longer_than_the_message_is_badpl() {
    let r = RtrRepr {
        xid: 7,
        credit: 1,
        op: RtrOp::XmtCont(XmtCont {
            xnum: 1,
            itype: ROPT_XMTREQ,
            pslen: 9,
        }),
    };
    let buf = encode(&r, b"12345678");
    let e = RtrView::parse(&buf).expect_err("short");
    assert_eq!(
        e.optx(),
        Some(OptxInfo::BadPl {
            value: 9,
            min: 0,
            max: 8
        })
    );
}

#[test]
fn unknown_opttype_and_wrong_proc_are_refused() {
    let r = RtrRepr {
        xid: 7,
        credit: 1,
        op: RtrOp::XmtResp { count: 1, pslen: 0 },
    };
    let mut buf = encode(&r, b"");
    buf[16..20].copy_from_slice(&10u32.to_be_bytes());
    assert_eq!(
        RtrView::parse(&buf),
        Err(RtrError::UnknownOptType { opttype: 10 })
    );
    buf[12..16].copy_from_slice(&0u32.to_be_bytes());
    assert!(!is_optional(&buf));
    assert_eq!(
        RtrView::parse(&buf),
        Err(RtrError::NotOptional { found: 0 })
    );
}

#[test]
fn optinfo_length_must_match_its_structure() {
    let r = RtrRepr {
        xid: 7,
        credit: 1,
        op: RtrOp::XmtResp { count: 1, pslen: 0 },
    };
    let mut buf = encode(&r, &[0; 4]);
    buf[20..24].copy_from_slice(&16u32.to_be_bytes());
    assert_eq!(
        RtrView::parse(&buf),
        Err(RtrError::OptInfoLength {
            declared: 16,
            used: 12
        })
    );
}

#[test]
fn nonempty_ddp_arrays_are_walked() {
    // optxrq_ddp with one EXRW item of one segment and one TBSN item of two buffers;
    // optxrq_rsd with one set holding a BYSIZE item.
    let mut info = Vec::new();
    let w = |v: &mut Vec<u8>, x: u32| v.extend_from_slice(&x.to_be_bytes());
    w(&mut info, 2);
    for x in [0, 100, ddp::XMDTYPE_EXRW, 1, 9, 100, 0, 4096] {
        w(&mut info, x);
    }
    for x in [200, 50, ddp::XMDTYPE_TBSN, 8, 2, 0, 1] {
        w(&mut info, x);
    }
    w(&mut info, 1);
    for x in [0, 64, 1, 512, ddp::XMDTYPE_BYSIZE, 4096, 0] {
        w(&mut info, x);
    }
    for x in [1, 0, 0] {
        w(&mut info, x);
    }
    let mut buf = Vec::new();
    for x in [1, 1, 1, RDMA_OPTIONAL, ROPT_XMTREQ, info.len() as u32] {
        w(&mut buf, x);
    }
    buf.extend_from_slice(&info);
    let v = RtrView::parse(&buf).expect("parses");
    let RtrBody::XmtReq(q) = v.body else {
        panic!("not XMTREQ")
    };
    assert_eq!((q.ddp.entries, q.rsd.entries, q.count), (2, 1, 1));
    // NOITEM is a result, not a direction: refused inside optxrq_rsd.
    let at = buf.len() - 12 - 12;
    buf[at..at + 4].copy_from_slice(&ddp::XMDTYPE_NOITEM.to_be_bytes());
    assert!(matches!(
        RtrView::parse(&buf),
        Err(RtrError::BadDdpType {
            value: ddp::XMDTYPE_NOITEM
        })
    ));
}

#[test]
fn every_error_round_trips() {
    let id = XmsId {
        xid: 9,
        dir: MsgDir::Call,
        seq: 2,
    };
    for info in [
        OptxInfo::BadHmt {
            expect: 5,
            current: 0,
        },
        OptxInfo::BadOmt {
            expect: 7,
            current: 5,
        },
        OptxInfo::BadCont,
        OptxInfo::BadSeq {
            expect: 2,
            current: 3,
        },
        OptxInfo::BadXid {
            expect: 9,
            current: 10,
        },
        OptxInfo::BadOff {
            value: 1,
            min: 0,
            max: 0,
        },
        OptxInfo::BadTbsn {
            value: 1,
            min: 0,
            max: 0,
        },
        OptxInfo::BadPl {
            value: 10,
            min: 0,
            max: 8,
        },
    ] {
        for lead in [None, Some(XmsId { seq: 0, ..id })] {
            let e = XmtErr {
                bad: id,
                lead,
                info,
            };
            let r = RtrRepr {
                xid: 9,
                credit: 0,
                op: RtrOp::XmtErr(e),
            };
            let buf = encode(&r, b"");
            let v = RtrView::parse(&buf).expect("parses");
            assert_eq!(v.body, RtrBody::XmtErr(e));
            assert_eq!(v.to_message().opttype, "ROPT_XMTERR");
        }
    }
}

#[test]
fn characteristics_default_and_round_trip() {
    let d = TransportChars::DEFAULT;
    assert!(!d.continuation());
    assert_eq!((d.req_rx_limit, d.resp_sx_limit), (1, 1));
    let c = TransportChars {
        rtr_support: RTRS_XREQ | RTRS_XRESP | RTRS_XCONT,
        recv_buf: Some(RecvBufStructure::single(4096)),
        req_rx_limit: 8,
        resp_sx_limit: 16,
    };
    assert!(c.continuation());
    let mut buf = vec![0u8; c.encoded_len()];
    let mut enc = crate::wire::xdr::XdrEncoder::new(&mut buf);
    c.encode(&mut enc).expect("fits");
    assert_eq!(enc.finish(), c.encoded_len());
    let got = TransportChars::decode(&mut XdrCursor::new(&buf)).expect("decodes");
    assert_eq!(got, c);
    assert_eq!(got.recv_buf.map(|r| r.ddp_segments()), Some(0));
    // An unknown characteristic is skipped; absent ones keep their defaults.
    let list: Vec<u8> = [1u32, 99, 4, 0xffff_ffff]
        .iter()
        .flat_map(|w| w.to_be_bytes())
        .collect();
    assert_eq!(
        TransportChars::decode(&mut XdrCursor::new(&list)),
        Ok(TransportChars::DEFAULT)
    );
    // A two-octet uint32 is malformed.
    let bad: Vec<u8> = [1u32, XCHAR_REQRXLIM, 2, 0]
        .iter()
        .flat_map(|w| w.to_be_bytes())
        .collect();
    assert!(matches!(
        TransportChars::decode(&mut XdrCursor::new(&bad)),
        Err(RtrError::BadCharacteristic { .. })
    ));
}

fn arb_op() -> impl Strategy<Value = RtrOp> {
    let id = (any::<u32>(), any::<bool>(), any::<u32>()).prop_map(|(xid, r, seq)| XmsId {
        xid,
        dir: if r { MsgDir::Reply } else { MsgDir::Call },
        seq,
    });
    let info =
        (0u32..8, any::<u32>(), any::<u32>(), any::<u32>()).prop_map(|(k, a, b, c)| match k {
            0 => OptxInfo::BadHmt {
                expect: a,
                current: b,
            },
            1 => OptxInfo::BadOmt {
                expect: a,
                current: b,
            },
            2 => OptxInfo::BadCont,
            3 => OptxInfo::BadSeq {
                expect: a,
                current: b,
            },
            4 => OptxInfo::BadXid {
                expect: a,
                current: b,
            },
            5 => OptxInfo::BadOff {
                value: a,
                min: b,
                max: c,
            },
            6 => OptxInfo::BadTbsn {
                value: a,
                min: b,
                max: c,
            },
            _ => OptxInfo::BadPl {
                value: a,
                min: b,
                max: c,
            },
        });
    prop_oneof![
        (any::<u32>(), any::<u32>(), 0u32..64).prop_map(|(count, rsbuf, pslen)| {
            RtrOp::XmtReq {
                count,
                rsbuf,
                pslen,
            }
        }),
        (any::<u32>(), 0u32..64).prop_map(|(count, pslen)| RtrOp::XmtResp { count, pslen }),
        (any::<u32>(), any::<u32>(), 0u32..64)
            .prop_map(|(xnum, itype, pslen)| RtrOp::XmtCont(XmtCont { xnum, itype, pslen })),
        (id.clone(), proptest::option::of(id), info)
            .prop_map(|(bad, lead, info)| RtrOp::XmtErr(XmtErr { bad, lead, info })),
        (any::<u32>(), any::<u32>(), any::<u32>()).prop_map(|(rtr_support, rx, sx)| {
            RtrOp::CharsUpdate(TransportChars {
                rtr_support,
                recv_buf: None,
                req_rx_limit: rx,
                resp_sx_limit: sx,
            })
        }),
    ]
}

proptest! {
    #[test]
    fn encode_parse_round_trips(xid: u32, credit: u32, op in arb_op(), extra in 0usize..8) {
        let r = RtrRepr { xid, credit, op };
        let pslen = match op {
            RtrOp::XmtReq { pslen, .. } | RtrOp::XmtResp { pslen, .. } => pslen,
            RtrOp::XmtCont(c) => c.pslen,
            RtrOp::XmtErr(_) | RtrOp::CharsUpdate(_) => 0,
        } as usize;
        let payload: Vec<u8> = (0..pslen + extra).map(|i| i as u8).collect();
        let buf = encode(&r, &payload);
        let v = RtrView::parse(&buf).expect("parses");
        prop_assert_eq!(v.to_message().header, r);
        prop_assert_eq!(v.payload, &payload[..pslen]);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..128)) {
        let _ = RtrView::parse(&bytes);
        let _ = TransportChars::decode(&mut XdrCursor::new(&bytes));
    }
}

#[test]
fn a_characteristics_update_round_trips() {
    let chars = TransportChars {
        rtr_support: RTRS_XREQ | RTRS_XRESP | RTRS_XCONT,
        recv_buf: None,
        req_rx_limit: 2,
        resp_sx_limit: 4,
    };
    let r = RtrRepr {
        xid: 9,
        credit: 3,
        op: RtrOp::CharsUpdate(chars),
    };
    let buf = encode(&r, &[]);
    let v = RtrView::parse(&buf).expect("parses");
    assert_eq!(v.body, RtrBody::CharsUpdate(chars));
    assert_eq!(v.body.opttype(), ROPT_XCHUPD);
    assert!(v.payload.is_empty());
    assert_eq!(v.to_message().header, r);
    assert_eq!(opttype_name(ROPT_XCHUPD), "ROPT_XCHUPD");
}
