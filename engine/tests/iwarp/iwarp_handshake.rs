//! MPA start-up state machines (RFC 5044 §7.1, RFC 6581 §7): negotiation outcomes,
//! fragmented delivery and every failure path.

use rpcrdma::iwarp::handshake::{
    Established, Initiator, InitiatorConfig, PeerRequest, Progress, Responder, ResponderConfig,
};
use rpcrdma::iwarp::mpa::{
    encode_frame, EnhancedData, FrameHeader, FrameKind, FrameParams, MpaError, Revision,
    MAX_FRAME_LEN,
};

/// Feeds `bytes` in pieces of `chunk` octets, checking every piece is consumed until the
/// machine completes, and returns the outcome and how much was consumed in total.
fn feed_initiator(i: &mut Initiator, bytes: &[u8], chunk: usize) -> (Established, usize) {
    let mut off = 0;
    while off < bytes.len() {
        let end = (off + chunk).min(bytes.len());
        let Progress { consumed, done } = i.feed(&bytes[off..end]).expect("valid reply");
        off += consumed;
        if let Some(e) = done {
            return (e, off);
        }
        assert_eq!(off, end, "an incomplete frame consumes all input");
    }
    panic!("reply never completed");
}

fn feed_responder(r: &mut Responder, bytes: &[u8], chunk: usize) -> (PeerRequest, usize) {
    let mut off = 0;
    while off < bytes.len() {
        let end = (off + chunk).min(bytes.len());
        let Progress { consumed, done } = r.feed(&bytes[off..end]).expect("valid request");
        off += consumed;
        if let Some(req) = done {
            return (req, off);
        }
        assert_eq!(off, end, "an incomplete frame consumes all input");
    }
    panic!("request never completed");
}

#[test]
fn rev2_handshake_negotiates_crc_like_siw_for_every_combination() {
    for (ini_crc, resp_crc) in [(false, false), (true, false), (false, true), (true, true)] {
        let mut ini = Initiator::new(
            InitiatorConfig {
                crc: ini_crc,
                revision: Revision::V2,
                ird: 8,
                ord: 4,
            },
            b"rpcrdma-hello",
        )
        .expect("fits");
        let mut resp = Responder::new(ResponderConfig {
            crc: resp_crc,
            ird: 32,
            ord: 2,
        });

        let request = ini.request().to_vec();
        let (req, used) = feed_responder(&mut resp, &request, 3);
        assert_eq!(used, request.len());
        assert_eq!(req.revision, Revision::V2);
        assert_eq!(req.crc, ini_crc);
        assert_eq!(req.peer, Some(EnhancedData::client_server(8, 4)));
        assert_eq!(resp.peer_private_data(), b"rpcrdma-hello");
        assert_eq!(
            &resp.peer_frame()[req.private_data.clone()],
            b"rpcrdma-hello"
        );

        let (reply, resp_est) = resp.accept(b"ok").expect("fits");
        let reply = reply.to_vec();
        // The reply's C flag says whether CRCs are on.
        assert_eq!(reply[16] & 0x40 != 0, ini_crc || resp_crc);

        // The responder's first FPDU may arrive in the same read as the reply.
        let mut stream = reply.clone();
        stream.extend_from_slice(b"FPDU...");
        let (ini_est, used) = feed_initiator(&mut ini, &stream, 5);
        assert_eq!(
            used,
            reply.len(),
            "bytes after the reply are left for the caller"
        );

        assert_eq!(ini_est.crc, ini_crc || resp_crc);
        assert_eq!(resp_est.crc, ini_est.crc, "both ends agree");
        assert_eq!(ini_est.revision, Revision::V2);
        assert_eq!(ini_est.peer, Some(EnhancedData::client_server(32, 2)));
        assert_eq!(resp_est.peer, Some(EnhancedData::client_server(8, 4)));
        assert_eq!(ini.peer_private_data(), b"ok");
        assert_eq!(&ini.peer_frame()[ini_est.private_data], b"ok");
    }
}

#[test]
fn one_octet_at_a_time_and_all_at_once_agree() {
    let mk = || Initiator::new(InitiatorConfig::default(), &[7u8; 100]).expect("fits");
    let mut resp = Responder::new(ResponderConfig::default());
    let request = mk().request().to_vec();
    let (req1, _) = feed_responder(&mut resp, &request, 1);
    let mut resp2 = Responder::new(ResponderConfig::default());
    let (req2, _) = feed_responder(&mut resp2, &request, request.len());
    assert_eq!(req1, req2);
    assert_eq!(resp.peer_private_data(), &[7u8; 100][..]);
}

#[test]
fn rev1_initiator_gets_rev1_reply_without_ird_ord() {
    let mut ini = Initiator::new(
        InitiatorConfig {
            crc: true,
            revision: Revision::V1,
            ird: 1,
            ord: 1,
        },
        b"pd",
    )
    .expect("fits");
    // Rev 1: no S flag, private data is all ULP.
    assert_eq!(ini.request()[16], 0x40);
    assert_eq!(ini.request()[17], 1);
    let mut resp = Responder::new(ResponderConfig::default());
    let (req, _) = feed_responder(&mut resp, ini.request(), 64);
    assert_eq!((req.revision, req.peer), (Revision::V1, None));
    let (reply, est) = resp.accept(b"").expect("fits");
    assert_eq!(reply[17], 1);
    assert_eq!(reply[16] & 0x10, 0, "no S flag in a revision 1 reply");
    let reply = reply.to_vec();
    let (ie, _) = feed_initiator(&mut ini, &reply, 64);
    assert!(ie.crc && est.crc);
    assert_eq!((ie.revision, ie.peer), (Revision::V1, None));
}

#[test]
fn rev2_initiator_accepts_a_rev1_reply() {
    let mut ini = Initiator::new(InitiatorConfig::default(), b"").expect("fits");
    let mut reply = [0u8; MAX_FRAME_LEN];
    let n = encode_frame(
        &mut reply,
        &FrameParams {
            kind: FrameKind::Reply,
            crc: false,
            reject: false,
            revision: Revision::V1,
            enhanced: None,
        },
        b"legacy",
    )
    .expect("fits");
    let (est, _) = feed_initiator(&mut ini, &reply[..n], 7);
    assert_eq!(
        (est.revision, est.peer, est.crc),
        (Revision::V1, None, false)
    );
    assert_eq!(ini.peer_private_data(), b"legacy");
}

#[test]
fn rev2_reply_without_enhanced_data_is_refused() {
    let mut ini = Initiator::new(InitiatorConfig::default(), b"").expect("fits");
    let mut reply = [0u8; MAX_FRAME_LEN];
    let n = encode_frame(
        &mut reply,
        &FrameParams {
            kind: FrameKind::Reply,
            crc: false,
            reject: false,
            revision: Revision::V2,
            enhanced: None,
        },
        b"",
    )
    .expect("fits");
    assert_eq!(
        ini.feed(&reply[..n]),
        Err(MpaError::MissingEnhancedData { len: 0 })
    );
    // Errors are sticky.
    assert_eq!(ini.feed(b""), Err(MpaError::MissingEnhancedData { len: 0 }));
}

#[test]
fn reply_revision_above_request_is_refused() {
    let mut ini = Initiator::new(
        InitiatorConfig {
            revision: Revision::V1,
            ..InitiatorConfig::default()
        },
        b"",
    )
    .expect("fits");
    let mut reply = [0u8; MAX_FRAME_LEN];
    let n = encode_frame(
        &mut reply,
        &FrameParams {
            kind: FrameKind::Reply,
            crc: false,
            reject: false,
            revision: Revision::V2,
            enhanced: Some(EnhancedData::client_server(1, 1)),
        },
        b"",
    )
    .expect("fits");
    assert_eq!(
        ini.feed(&reply[..n]),
        Err(MpaError::BadRevision { revision: 2 })
    );
}

#[test]
fn unknown_revision_is_refused_by_both_sides() {
    let mut frame = [0u8; 20];
    let h = FrameHeader {
        kind: FrameKind::Request,
        markers: false,
        crc: false,
        reject: false,
        enhanced: false,
        reserved: 0,
        revision: 3,
        private_data_len: 0,
    };
    h.encode(&mut frame).expect("fits");
    let mut resp = Responder::new(ResponderConfig::default());
    assert_eq!(
        resp.feed(&frame),
        Err(MpaError::BadRevision { revision: 3 })
    );
    assert_eq!(resp.accept(b""), Err(MpaError::InvalidState));
    assert_eq!(resp.reject(b""), Err(MpaError::InvalidState));

    let mut ini = Initiator::new(InitiatorConfig::default(), b"").expect("fits");
    FrameHeader {
        kind: FrameKind::Reply,
        ..h
    }
    .encode(&mut frame)
    .expect("fits");
    assert_eq!(ini.feed(&frame), Err(MpaError::BadRevision { revision: 3 }));
}

#[test]
fn markers_request_is_rejected_with_a_reply() {
    let mut frame = [0u8; 24];
    FrameHeader {
        kind: FrameKind::Request,
        markers: true,
        crc: false,
        reject: false,
        enhanced: false,
        reserved: 0,
        revision: 1,
        private_data_len: 4,
    }
    .encode(&mut frame)
    .expect("fits");
    frame[20..].copy_from_slice(b"mark");
    let mut resp = Responder::new(ResponderConfig::default());
    assert_eq!(resp.feed(&frame[..10]).map(|p| p.consumed), Ok(10));
    assert_eq!(resp.feed(&frame[10..]), Err(MpaError::MarkersRequired));
    assert_eq!(resp.peer_private_data(), b"mark");
    assert_eq!(
        resp.accept(b""),
        Err(MpaError::InvalidState),
        "cannot accept markers"
    );
    let reply = resp.reject(b"no markers").expect("fits").to_vec();
    assert_eq!(reply[16], 0x20, "R set, nothing else");
    assert_eq!(reply[17], 1);

    // An initiator seeing that reply fails with Rejected and can read the reason.
    let mut ini = Initiator::new(
        InitiatorConfig {
            revision: Revision::V1,
            ..InitiatorConfig::default()
        },
        b"",
    )
    .expect("fits");
    assert_eq!(ini.feed(&reply), Err(MpaError::Rejected));
    assert_eq!(ini.peer_private_data(), b"no markers");
}

#[test]
fn reply_requiring_markers_fails_the_initiator() {
    let mut frame = [0u8; 24];
    FrameHeader {
        kind: FrameKind::Reply,
        markers: true,
        crc: false,
        reject: false,
        enhanced: true,
        reserved: 0,
        revision: 2,
        private_data_len: 4,
    }
    .encode(&mut frame)
    .expect("fits");
    let mut ini = Initiator::new(InitiatorConfig::default(), b"").expect("fits");
    assert_eq!(ini.feed(&frame), Err(MpaError::MarkersRequired));
}

#[test]
fn responder_rejects_on_request_after_looking_at_private_data() {
    let ini = Initiator::new(InitiatorConfig::default(), b"version 9").expect("fits");
    let mut resp = Responder::new(ResponderConfig::default());
    let (req, _) = feed_responder(&mut resp, ini.request(), 64);
    assert!(req.peer.is_some());
    let reply = resp.reject(b"unsupported").expect("fits").to_vec();
    // Rev 2 with S, IRD/ORD still present, then the reason.
    assert_eq!(reply[16], 0x30);
    assert_eq!(&reply[24..], b"unsupported");
    let mut ini = ini;
    assert_eq!(ini.feed(&reply), Err(MpaError::Rejected));
    assert_eq!(ini.peer_private_data(), b"unsupported");
    assert_eq!(
        resp.accept(b""),
        Err(MpaError::InvalidState),
        "decision is final"
    );
}

#[test]
fn non_mpa_peer_fails_fast() {
    let mut resp = Responder::new(ResponderConfig::default());
    assert_eq!(resp.feed(b"GET"), Err(MpaError::BadKey));
    let mut ini = Initiator::new(InitiatorConfig::default(), b"").expect("fits");
    assert_eq!(ini.feed(b"SSH-2.0"), Err(MpaError::BadKey));
}

#[test]
fn wrong_frame_kind_is_a_bad_key() {
    // A responder receiving a Reply, an initiator receiving a Request.
    let ini = Initiator::new(InitiatorConfig::default(), b"").expect("fits");
    let mut ini2 = Initiator::new(InitiatorConfig::default(), b"").expect("fits");
    assert_eq!(ini2.feed(ini.request()), Err(MpaError::BadKey));

    let mut reply = [0u8; MAX_FRAME_LEN];
    let n = encode_frame(
        &mut reply,
        &FrameParams {
            kind: FrameKind::Reply,
            crc: false,
            reject: false,
            revision: Revision::V1,
            enhanced: None,
        },
        b"",
    )
    .expect("fits");
    let mut resp = Responder::new(ResponderConfig::default());
    assert_eq!(resp.feed(&reply[..n]), Err(MpaError::BadKey));
}

#[test]
fn private_data_limits() {
    assert_eq!(
        Initiator::new(InitiatorConfig::default(), &[0u8; 509]).err(),
        Some(MpaError::PrivateDataTooLong { len: 513, max: 512 })
    );
    assert!(Initiator::new(InitiatorConfig::default(), &[0u8; 508]).is_ok());
    assert!(Initiator::new(
        InitiatorConfig {
            revision: Revision::V1,
            ..InitiatorConfig::default()
        },
        &[0u8; 512]
    )
    .is_ok());
    // PD_Length 513 announced by the peer is refused as soon as the header is in.
    let mut frame = [0u8; 20];
    FrameHeader {
        kind: FrameKind::Request,
        markers: false,
        crc: false,
        reject: false,
        enhanced: false,
        reserved: 0,
        revision: 1,
        private_data_len: 513,
    }
    .encode(&mut frame)
    .expect("fits");
    let mut resp = Responder::new(ResponderConfig::default());
    assert_eq!(
        resp.feed(&frame),
        Err(MpaError::PrivateDataTooLong { len: 513, max: 512 })
    );
    // Accepting with too much private data fails without changing state.
    let ini = Initiator::new(InitiatorConfig::default(), b"").expect("fits");
    let mut resp = Responder::new(ResponderConfig::default());
    feed_responder(&mut resp, ini.request(), 64);
    assert_eq!(
        resp.accept(&[0u8; 509]).map(|(r, _)| r.len()),
        Err(MpaError::PrivateDataTooLong { len: 513, max: 512 })
    );
    assert!(resp.accept(&[0u8; 508]).is_ok());
}

#[test]
fn established_machines_take_no_more_input() {
    let mut ini = Initiator::new(InitiatorConfig::default(), b"").expect("fits");
    let mut resp = Responder::new(ResponderConfig::default());
    feed_responder(&mut resp, ini.request(), 64);
    let reply = resp.accept(b"").expect("fits").0.to_vec();
    feed_initiator(&mut ini, &reply, 64);
    assert_eq!(ini.feed(b"x"), Err(MpaError::InvalidState));
    assert_eq!(resp.feed(b"x"), Err(MpaError::InvalidState));
    assert_eq!(resp.accept(b"").map(|_| ()), Err(MpaError::InvalidState));
}
