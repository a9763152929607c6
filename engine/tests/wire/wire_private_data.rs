//! RFC 8797 private data: hand-derived byte vectors, the §5.2 search, size encoding
//! boundaries, §4.2 threshold negotiation and §5.1 fallback, plus property tests.
//!
//! Expected bytes are written out from the RFC 8797 §4 diagram: format identifier
//! f6 ab 0e 18, then version, then the flags octet (R is its low bit), then the send and
//! receive size codes ((octets / 1024) - 1, §4.2).

use proptest::prelude::*;
use rpcrdma::wire::private_data::{
    decode_size, encode_size, encode_size_saturating, find_private_data, InlineThresholds,
    PrivateData, PrivateDataEncodeError, PrivateDataError, SizeError, ENCODED_LEN,
    FORMAT_IDENTIFIER, MAX_INLINE_SIZE, MIN_INLINE_SIZE,
};
use rpcrdma::wire::xdr::BufferTooSmall;

/// R set, send 4 KiB (code 3), receive 8 KiB (code 7).
const MSG_R_4K_8K: [u8; 8] = [0xf6, 0xab, 0x0e, 0x18, 0x01, 0x01, 0x03, 0x07];
const PD_R_4K_8K: PrivateData = PrivateData {
    version: 1,
    remote_invalidate: true,
    send_size: 4096,
    recv_size: 8192,
};

// ---- §4 message layout -------------------------------------------------------------

#[test]
fn identifier_constant_matches_rfc_text() {
    // §4: "the value of this field is always 0xf6ab0e18, in network byte order".
    assert_eq!(FORMAT_IDENTIFIER, 0xf6ab_0e18);
    assert_eq!(ENCODED_LEN, 8);
}

#[test]
fn encode_r_set_4k_8k() {
    let mut out = [0xaau8; 12];
    assert_eq!(PD_R_4K_8K.encode(&mut out), Ok(8));
    assert_eq!(out[..8], MSG_R_4K_8K);
    assert_eq!(
        out[8..],
        [0xaa; 4],
        "octets after the message are untouched"
    );
    assert_eq!(PD_R_4K_8K.to_bytes(), Ok(MSG_R_4K_8K));
}

#[test]
fn encode_defaults_is_all_zero_codes() {
    // §5.1: the assumed message has R clear and both Size fields zero.
    assert_eq!(
        PrivateData::DEFAULT.to_bytes(),
        Ok([0xf6, 0xab, 0x0e, 0x18, 0x01, 0x00, 0x00, 0x00])
    );
    assert_eq!(PrivateData::default(), PrivateData::new(1024, 1024, false));
}

#[test]
fn encode_maximum_sizes() {
    let pd = PrivateData::new(262_144, 262_144, false);
    assert_eq!(
        pd.to_bytes(),
        Ok([0xf6, 0xab, 0x0e, 0x18, 0x01, 0x00, 0xff, 0xff])
    );
}

#[test]
fn encode_asymmetric_sizes_keep_field_order() {
    // Send Size precedes Receive Size (§4): 1 KiB send (0x00), 256 KiB receive (0xff).
    let pd = PrivateData::new(1024, 262_144, true);
    assert_eq!(
        pd.to_bytes(),
        Ok([0xf6, 0xab, 0x0e, 0x18, 0x01, 0x01, 0x00, 0xff])
    );
}

#[test]
fn decode_r_set_4k_8k() {
    assert_eq!(PrivateData::decode(&MSG_R_4K_8K), Ok(PD_R_4K_8K));
}

#[test]
fn decode_ignores_reserved_bits() {
    // §4: receivers MUST ignore the seven reserved bits.
    let mut m = MSG_R_4K_8K;
    m[5] = 0xfe; // all reserved bits set, R clear
    let pd = PrivateData::decode(&m).unwrap();
    assert!(!pd.remote_invalidate);
    m[5] = 0xff; // all reserved bits set, R set
    assert_eq!(PrivateData::decode(&m), Ok(PD_R_4K_8K));
    // The encoder always writes them as zero.
    assert_eq!(
        PrivateData::decode(&m).unwrap().to_bytes().unwrap()[5],
        0x01
    );
}

#[test]
fn decode_ignores_trailing_octets() {
    let mut buf = [0u8; 56];
    buf[..8].copy_from_slice(&MSG_R_4K_8K);
    buf[8..].fill(0x5a);
    assert_eq!(PrivateData::decode(&buf), Ok(PD_R_4K_8K));
}

#[test]
fn decode_rejects_other_identifier() {
    let m = [0xf6, 0xab, 0x0e, 0x19, 0x01, 0x00, 0x00, 0x00];
    assert_eq!(
        PrivateData::decode(&m),
        Err(PrivateDataError::NotPrivateData { found: 0xf6ab_0e19 })
    );
}

#[test]
fn decode_rejects_short_buffers() {
    for len in 0..8 {
        assert_eq!(
            PrivateData::decode(&MSG_R_4K_8K[..len]),
            Err(PrivateDataError::Overrun {
                offset: 0,
                needed: 8,
                available: len
            }),
            "length {len}"
        );
    }
}

#[test]
fn decode_rejects_wrong_versions() {
    for version in [0u8, 2, 0xff] {
        let mut m = MSG_R_4K_8K;
        m[4] = version;
        assert_eq!(
            PrivateData::decode(&m),
            Err(PrivateDataError::UnsupportedVersion { offset: 0, version })
        );
    }
}

#[test]
fn encode_errors() {
    let mut out = [0u8; 7];
    assert_eq!(
        PD_R_4K_8K.encode(&mut out),
        Err(PrivateDataEncodeError::BufferTooSmall(BufferTooSmall {
            needed: 8,
            available: 7
        }))
    );
    assert_eq!(out, [0; 7], "nothing written on failure");
    let mut out = [0u8; 8];
    let v2 = PrivateData {
        version: 2,
        ..PD_R_4K_8K
    };
    assert_eq!(
        v2.encode(&mut out),
        Err(PrivateDataEncodeError::UnsupportedVersion(2))
    );
    assert_eq!(
        PrivateData::new(1023, 4096, false).encode(&mut out),
        Err(PrivateDataEncodeError::SendSize(SizeError::BelowMinimum {
            bytes: 1023
        }))
    );
    assert_eq!(
        PrivateData::new(4096, 262_145, false).encode(&mut out),
        Err(PrivateDataEncodeError::RecvSize(SizeError::AboveMaximum {
            bytes: 262_145
        }))
    );
    assert_eq!(out, [0; 8], "nothing written on failure");
}

#[test]
fn errors_display_their_details() {
    let e = PrivateDataError::UnsupportedVersion {
        offset: 7,
        version: 2,
    };
    let s = e.to_string();
    assert!(s.contains("offset 7") && s.contains("version 2"), "{s}");
    let s = PrivateDataEncodeError::SendSize(SizeError::BelowMinimum { bytes: 0 }).to_string();
    assert!(s.contains("send size") && s.contains("1024"), "{s}");
}

// ---- §4.2 size encoding -------------------------------------------------------------

#[test]
fn size_boundaries() {
    assert_eq!(MIN_INLINE_SIZE, 1024);
    assert_eq!(MAX_INLINE_SIZE, 262_144);
    assert_eq!(encode_size(1024), Ok(0));
    assert_eq!(encode_size(262_144), Ok(255));
    assert_eq!(
        encode_size(1023),
        Err(SizeError::BelowMinimum { bytes: 1023 })
    );
    assert_eq!(encode_size(0), Err(SizeError::BelowMinimum { bytes: 0 }));
    assert_eq!(
        encode_size(262_145),
        Err(SizeError::AboveMaximum { bytes: 262_145 })
    );
    assert_eq!(
        encode_size(u32::MAX),
        Err(SizeError::AboveMaximum { bytes: u32::MAX })
    );
    assert_eq!(decode_size(0), 1024);
    assert_eq!(decode_size(255), 262_144);
    assert_eq!(decode_size(3), 4096);
}

#[test]
fn size_rounds_down_between_multiples() {
    // Never advertise more than the buffer really holds.
    assert_eq!(encode_size(2047), Ok(0));
    assert_eq!(encode_size(2048), Ok(1));
    assert_eq!(encode_size(262_143), Ok(254));
    assert_eq!(
        PrivateData::new(5000, 9000, false).to_bytes(),
        Ok([0xf6, 0xab, 0x0e, 0x18, 0x01, 0x00, 0x03, 0x07])
    );
}

#[test]
fn saturating_size_caps_at_maximum() {
    assert_eq!(encode_size_saturating(262_145), Ok(255));
    assert_eq!(encode_size_saturating(u32::MAX), Ok(255));
    assert_eq!(encode_size_saturating(4096), Ok(3));
    assert_eq!(
        encode_size_saturating(1023),
        Err(SizeError::BelowMinimum { bytes: 1023 })
    );
    assert_eq!(
        PrivateData::from_buffer_sizes(1 << 20, 9000, true),
        Ok(PrivateData::new(262_144, 8192, true))
    );
    assert_eq!(
        PrivateData::from_buffer_sizes(4096, 0, true),
        Err(SizeError::BelowMinimum { bytes: 0 })
    );
}

// ---- §5.2 searching a received buffer ------------------------------------------------

#[test]
fn find_at_offset_0() {
    let mut buf = [0u8; 56];
    buf[..8].copy_from_slice(&MSG_R_4K_8K);
    assert_eq!(find_private_data(&buf), Ok(Some((0, PD_R_4K_8K))));
}

#[test]
fn find_after_mpa_ird_ord_word() {
    // An MPA v2 (RFC 6581) enhanced-connection word comes first: IRD 16, ORD 16.
    let buf = [
        0x00, 0x10, 0x00, 0x10, // IRD / ORD
        0xf6, 0xab, 0x0e, 0x18, 0x01, 0x01, 0x03, 0x07, // RFC 8797 message
    ];
    assert_eq!(find_private_data(&buf), Ok(Some((4, PD_R_4K_8K))));
}

#[test]
fn find_at_unaligned_offset_7() {
    let buf = [
        0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, // another layer's seven octets
        0xf6, 0xab, 0x0e, 0x18, 0x01, 0x00, 0x1f, 0x3f, // send 32 KiB, receive 64 KiB
        0x00, 0x00,
    ];
    assert_eq!(
        find_private_data(&buf),
        Ok(Some((7, PrivateData::new(32_768, 65_536, false))))
    );
}

#[test]
fn find_message_ending_exactly_at_buffer_end() {
    let buf = [0x00, 0x00, 0xf6, 0xab, 0x0e, 0x18, 0x01, 0x01, 0x03, 0x07];
    assert_eq!(find_private_data(&buf), Ok(Some((2, PD_R_4K_8K))));
}

#[test]
fn find_near_end_is_overrun() {
    // Identifier and version present, the size octets cut off.
    let buf = [0x00, 0x00, 0x00, 0xf6, 0xab, 0x0e, 0x18, 0x01, 0x01];
    assert_eq!(
        find_private_data(&buf),
        Err(PrivateDataError::Overrun {
            offset: 3,
            needed: 8,
            available: 6
        })
    );
    // Identifier is the last word: not even the version is there.
    let buf = [0x00, 0x00, 0xf6, 0xab, 0x0e, 0x18];
    assert_eq!(
        find_private_data(&buf),
        Err(PrivateDataError::Overrun {
            offset: 2,
            needed: 8,
            available: 4
        })
    );
}

#[test]
fn find_reports_version_before_length() {
    // The version decides the length, so a bad version wins over a short buffer.
    let buf = [0x00, 0xf6, 0xab, 0x0e, 0x18, 0x02];
    assert_eq!(
        find_private_data(&buf),
        Err(PrivateDataError::UnsupportedVersion {
            offset: 1,
            version: 2
        })
    );
}

#[test]
fn find_wrong_version_is_an_error() {
    let buf = [
        0x00, 0x10, 0x00, 0x10, //
        0xf6, 0xab, 0x0e, 0x18, 0x02, 0x01, 0x03, 0x07, 0x00, 0x00, 0x00, 0x00,
    ];
    assert_eq!(
        find_private_data(&buf),
        Err(PrivateDataError::UnsupportedVersion {
            offset: 4,
            version: 2
        })
    );
}

#[test]
fn find_skips_false_match_before_genuine_message() {
    // A coincidental identifier (e.g. in an MPA word) followed by the real message: the
    // false match reads the real identifier's first octet, 0xf6, as its version.
    let buf = [
        0xf6, 0xab, 0x0e, 0x18, //
        0xf6, 0xab, 0x0e, 0x18, 0x01, 0x01, 0x03, 0x07,
    ];
    assert_eq!(find_private_data(&buf), Ok(Some((4, PD_R_4K_8K))));
}

#[test]
fn find_without_identifier_is_none() {
    assert_eq!(find_private_data(&[]), Ok(None));
    assert_eq!(find_private_data(&[0xf6, 0xab, 0x0e]), Ok(None));
    // Identifier octets in the wrong order, and a near miss.
    let buf = [
        0x18, 0x0e, 0xab, 0xf6, 0x01, 0x00, 0xf6, 0xab, 0x0e, 0x17, 0x01, 0x00, 0x00, 0x00,
    ];
    assert_eq!(find_private_data(&buf), Ok(None));
    assert_eq!(find_private_data(&[0u8; 196]), Ok(None));
}

// ---- §4.1 / §4.2 / §5.1 negotiation ---------------------------------------------------

#[test]
fn negotiate_peer_absent_falls_back_to_defaults() {
    let local = PrivateData::new(65_536, 65_536, true);
    let t = InlineThresholds::negotiate(Some(&local), None);
    assert_eq!(
        t,
        InlineThresholds {
            send: 1024,
            recv: 1024,
            remote_invalidate: false
        }
    );
    assert_eq!(t, InlineThresholds::DEFAULT);
}

#[test]
fn negotiate_local_absent_falls_back_to_defaults() {
    let peer = PrivateData::new(65_536, 65_536, true);
    assert_eq!(
        InlineThresholds::negotiate(None, Some(&peer)),
        InlineThresholds::DEFAULT
    );
    assert_eq!(
        InlineThresholds::negotiate(None, None),
        InlineThresholds::default()
    );
}

#[test]
fn negotiate_remote_invalidate_needs_both() {
    let with_r = PrivateData::new(4096, 4096, true);
    let without_r = PrivateData::new(4096, 4096, false);
    let t = |a: &PrivateData, b: &PrivateData| {
        InlineThresholds::negotiate(Some(a), Some(b)).remote_invalidate
    };
    assert!(!t(&with_r, &without_r), "only local R");
    assert!(!t(&without_r, &with_r), "only peer R");
    assert!(!t(&without_r, &without_r));
    assert!(t(&with_r, &with_r), "both R");
}

#[test]
fn negotiate_asymmetric_sizes() {
    // §4.2: client-to-server = min(client send, server receive);
    // server-to-client = min(server send, client receive).
    let client = PrivateData::new(4096, 65_536, false);
    let server = PrivateData::new(32_768, 8192, false);
    let at_client = InlineThresholds::negotiate(Some(&client), Some(&server));
    assert_eq!(
        at_client,
        InlineThresholds {
            send: 4096,
            recv: 32_768,
            remote_invalidate: false
        }
    );
    let at_server = InlineThresholds::negotiate(Some(&server), Some(&client));
    assert_eq!(
        at_server,
        InlineThresholds {
            send: 32_768,
            recv: 4096,
            remote_invalidate: false
        }
    );
}

#[test]
fn negotiate_uses_local_values_as_advertised() {
    // 5000 octets were advertised as 4 KiB; the peer limits itself to that.
    let local = PrivateData::new(5000, 5000, false);
    let peer = PrivateData::new(65_536, 65_536, false);
    let t = InlineThresholds::negotiate(Some(&local), Some(&peer));
    assert_eq!((t.send, t.recv), (4096, 4096));
    // A local value that cannot be encoded was never sent: defaults.
    let bad = PrivateData::new(512, 65_536, true);
    assert_eq!(
        InlineThresholds::negotiate(Some(&bad), Some(&peer)),
        InlineThresholds::DEFAULT
    );
    let v2 = PrivateData { version: 2, ..peer };
    assert_eq!(
        InlineThresholds::negotiate(Some(&peer), Some(&v2)),
        InlineThresholds::DEFAULT
    );
}

#[test]
fn from_received_applies_section_5_1() {
    let local = PrivateData::new(16_384, 16_384, true);
    // A valid message after an MPA word.
    let good = [
        0x00, 0x10, 0x00, 0x10, 0xf6, 0xab, 0x0e, 0x18, 0x01, 0x01, 0x03, 0x07,
    ];
    assert_eq!(
        InlineThresholds::from_received(Some(&local), &good),
        InlineThresholds {
            send: 8192,
            recv: 4096,
            remote_invalidate: true
        }
    );
    // Wrong version, overrun, and nothing at all: all mean defaults.
    let bad_version = [0xf6, 0xab, 0x0e, 0x18, 0x02, 0x01, 0x03, 0x07];
    let overrun = [0xf6, 0xab, 0x0e, 0x18, 0x01, 0x01, 0x03];
    for received in [&bad_version[..], &overrun[..], &[0u8; 56][..], &[][..]] {
        assert_eq!(
            InlineThresholds::from_received(Some(&local), received),
            InlineThresholds::DEFAULT,
            "{received:02x?}"
        );
    }
}

#[cfg(feature = "serde")]
#[test]
fn serde_json_round_trip() {
    let json = serde_json::to_string(&PD_R_4K_8K).unwrap();
    assert_eq!(
        json,
        r#"{"version":1,"remote_invalidate":true,"send_size":4096,"recv_size":8192}"#
    );
    assert_eq!(
        serde_json::from_str::<PrivateData>(&json).unwrap(),
        PD_R_4K_8K
    );
    let peer = PrivateData::new(16_384, 16_384, true);
    let t = InlineThresholds::negotiate(Some(&PD_R_4K_8K), Some(&peer));
    let json = serde_json::to_string(&t).unwrap();
    assert_eq!(
        json,
        r#"{"send":4096,"recv":8192,"remote_invalidate":true}"#
    );
    assert_eq!(serde_json::from_str::<InlineThresholds>(&json).unwrap(), t);
}

// ---- properties ---------------------------------------------------------------------

fn valid_private_data() -> impl Strategy<Value = PrivateData> {
    (any::<u8>(), any::<u8>(), any::<bool>())
        .prop_map(|(s, r, ri)| PrivateData::new(decode_size(s), decode_size(r), ri))
}

fn buffer_without_identifier(max: usize) -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..max).prop_map(|mut v| {
        // Break every accidental identifier so that only the one we plant is found.
        for i in 0..v.len().saturating_sub(3) {
            if v[i..i + 4] == FORMAT_IDENTIFIER.to_be_bytes() {
                v[i] = 0;
            }
        }
        v
    })
}

proptest! {
    #[test]
    fn prop_encode_decode_round_trip(pd in valid_private_data()) {
        let mut out = [0u8; 8];
        prop_assert_eq!(pd.encode(&mut out), Ok(8));
        prop_assert_eq!(PrivateData::decode(&out), Ok(pd));
        prop_assert_eq!(pd.as_advertised(), Some(pd));
    }

    #[test]
    fn prop_size_code_round_trip(code in any::<u8>()) {
        prop_assert_eq!(encode_size(decode_size(code)), Ok(code));
    }

    #[test]
    fn prop_size_never_rounds_up(bytes in any::<u32>()) {
        match encode_size_saturating(bytes) {
            Ok(code) => {
                prop_assert!(decode_size(code) <= bytes);
                prop_assert!(bytes < MAX_INLINE_SIZE || code == 255);
                // Rounding loses less than one kilo-octet.
                prop_assert!(bytes > MAX_INLINE_SIZE || bytes - decode_size(code) < 1024);
            }
            Err(e) => {
                prop_assert!(bytes < 1024);
                prop_assert_eq!(e, SizeError::BelowMinimum { bytes });
            }
        }
    }

    #[test]
    fn prop_find_planted_message(
        prefix in buffer_without_identifier(64),
        suffix in proptest::collection::vec(any::<u8>(), 0..64),
        pd in valid_private_data(),
    ) {
        let mut buf = prefix.clone();
        buf.extend_from_slice(&pd.to_bytes().unwrap());
        buf.extend_from_slice(&suffix);
        prop_assert_eq!(find_private_data(&buf), Ok(Some((prefix.len(), pd))));
    }

    #[test]
    fn prop_arbitrary_bytes_never_panic(buf in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = PrivateData::decode(&buf);
        let id = FORMAT_IDENTIFIER.to_be_bytes();
        match find_private_data(&buf) {
            Ok(Some((off, pd))) => {
                prop_assert_eq!(&buf[off..off + 4], &id[..]);
                prop_assert_eq!(PrivateData::decode(&buf[off..]), Ok(pd));
            }
            Ok(None) => prop_assert!(!buf.windows(4).any(|w| w == id)),
            Err(_) => prop_assert!(buf.windows(4).any(|w| w == id)),
        }
        let _ = InlineThresholds::from_received(None, &buf);
    }

    #[test]
    fn prop_identifier_dense_buffers_never_panic(
        words in proptest::collection::vec((any::<bool>(), any::<u8>()), 0..40),
    ) {
        // Mostly identifiers and versions, to hit candidates at every offset and length.
        let mut buf = Vec::new();
        for (id, b) in words {
            if id { buf.extend_from_slice(&FORMAT_IDENTIFIER.to_be_bytes()); } else { buf.push(b % 3); }
        }
        if let Ok(Some((off, pd))) = find_private_data(&buf) {
            prop_assert_eq!(PrivateData::decode(&buf[off..]), Ok(pd));
        }
    }

    #[test]
    fn prop_both_ends_agree(a in valid_private_data(), b in valid_private_data(),
                            a_sent in any::<bool>(), b_sent in any::<bool>()) {
        let a = a_sent.then_some(a);
        let b = b_sent.then_some(b);
        let at_a = InlineThresholds::negotiate(a.as_ref(), b.as_ref());
        let at_b = InlineThresholds::negotiate(b.as_ref(), a.as_ref());
        prop_assert_eq!(at_a.send, at_b.recv);
        prop_assert_eq!(at_a.recv, at_b.send);
        prop_assert_eq!(at_a.remote_invalidate, at_b.remote_invalidate);
        prop_assert!(at_a.send >= 1024 && at_a.recv >= 1024);
    }
}

// ---- the engine's extension advertisement ---------------------------------------------

mod extensions {
    use rpcrdma::wire::private_data::{
        find_private_data, Advertisement, Extensions, InlineThresholds, PrivateData,
        EXTENSIONS_IDENTIFIER,
    };

    use super::{MSG_R_4K_8K, PD_R_4K_8K};

    /// The first format: Read-chunk replies only (16 octets, no characteristics).
    const READ_CHUNKS_ONLY: Extensions = Extensions {
        reply_read_chunks: true,
        continuation: false,
    };

    /// With extensions: the version 1 message unchanged in octets 0..8 (Reserved bits
    /// still zero), then the identifier and the flags word.
    #[test]
    fn the_version_1_message_comes_first_unchanged() {
        let a = Advertisement::new(&PD_R_4K_8K, READ_CHUNKS_ONLY).expect("encodes");
        let b = a.as_bytes();
        assert_eq!(b.len(), 16);
        assert_eq!(b[..8], MSG_R_4K_8K);
        assert_eq!(b[5] & 0xfe, 0, "no Reserved bit set (RFC 8797 §4)");
        assert_eq!(b[8..12], EXTENSIONS_IDENTIFIER.to_be_bytes());
        assert_eq!(b[12..], [0, 0, 0, 1]);
        // Without extensions the bare eight octets.
        let plain = Advertisement::new(&PD_R_4K_8K, Extensions::NONE).expect("encodes");
        assert_eq!(plain.as_bytes(), &MSG_R_4K_8K[..]);
    }

    /// What a version-1-only peer makes of it: exactly what it makes of the bare message
    /// (the same thresholds and R), as the Linux client and server read only the first
    /// eight octets, and RFC 8797 §5.2 searches find the same message.
    #[test]
    fn a_version_1_peer_sees_only_version_1() {
        let a = Advertisement::new(&PD_R_4K_8K, Extensions::ALL).expect("encodes");
        assert_eq!(PrivateData::decode(a.as_bytes()), Ok(PD_R_4K_8K));
        assert_eq!(find_private_data(a.as_bytes()), Ok(Some((0, PD_R_4K_8K))));
        let local = PrivateData::new(4096, 4096, true);
        assert_eq!(
            InlineThresholds::from_received(Some(&local), a.as_bytes()),
            InlineThresholds::from_received(Some(&local), &MSG_R_4K_8K),
        );
    }

    /// Found at any offset (MPA or other layers first), padded with zeros after (IB's
    /// fixed-size private data); absent, cut short or in a Linux peer's zero padding:
    /// none. Unknown flag bits are ignored.
    #[test]
    fn found_anywhere_ignored_when_absent_or_short() {
        let a = Advertisement::new(&PD_R_4K_8K, Extensions::ALL).expect("encodes");
        for lead in [0usize, 3, 8, 40] {
            let mut buf = vec![0x55u8; lead];
            buf.extend_from_slice(a.as_bytes());
            buf.resize(buf.len() + 40, 0);
            assert_eq!(Extensions::find(&buf), Extensions::ALL, "lead {lead}");
        }
        let mut linux = MSG_R_4K_8K.to_vec();
        linux.resize(56, 0);
        assert_eq!(Extensions::find(&linux), Extensions::NONE);
        assert_eq!(Extensions::find(&a.as_bytes()[..14]), Extensions::NONE);
        let mut future = a.as_bytes().to_vec();
        future[12..16].copy_from_slice(&[0x80, 0, 0, 0]);
        assert_eq!(Extensions::find(&future), Extensions::NONE);
        future[15] = 0x81;
        assert_eq!(Extensions::find(&future), READ_CHUNKS_ONLY);
        future[15] = 0x83;
        assert_eq!(Extensions::find(&future), Extensions::ALL);
    }

    /// Each extension needs both peers.
    #[test]
    fn negotiation_needs_both() {
        use Extensions as E;
        assert_eq!(E::negotiate(E::ALL, E::ALL), E::ALL);
        assert_eq!(E::negotiate(E::ALL, E::NONE), E::NONE);
        assert_eq!(E::negotiate(E::NONE, E::ALL), E::NONE);
    }
}

// ---- the engine's extension advertisement (engine/DESIGN.md) ------------------------

mod continuation_advertisement {
    use rpcrdma::wire::private_data::{
        Advertisement, Extensions, PrivateData, ADVERTISEMENT_MAX, CONTINUATION_GROUP_MAX,
        ENCODED_LEN, EXTENSIONS_LEN, LOCAL_CHARS,
    };
    use rpcrdma::wire::rtr::TransportChars;
    use rpcrdma::wire::xdr::XdrEncoder;

    #[test]
    fn continuation_carries_the_characteristics_encoded_by_the_codec() {
        let a = Advertisement::new(&PrivateData::DEFAULT, Extensions::ALL).expect("encodes");
        assert_eq!(a.len(), ADVERTISEMENT_MAX);
        assert_eq!(
            ADVERTISEMENT_MAX, 56,
            "fits an InfiniBand REQ's RDMA CM private data"
        );
        // The hand-encoded constant is what the characteristics codec writes.
        let mut want = [0u8; ADVERTISEMENT_MAX - ENCODED_LEN - EXTENSIONS_LEN];
        let mut enc = XdrEncoder::new(&mut want);
        LOCAL_CHARS.encode(&mut enc).expect("fits");
        assert_eq!(enc.finish(), want.len());
        assert_eq!(&a[ENCODED_LEN + EXTENSIONS_LEN..], &want[..]);
        // Flags word: bit 0 Read-chunk replies, bit 1 continuation.
        assert_eq!(&a[12..16], &[0, 0, 0, 3]);
        assert_eq!(Extensions::find(&a), Extensions::ALL);
        let c = Extensions::find_chars(&a);
        assert!(c.continuation());
        assert_eq!(c.req_rx_limit, CONTINUATION_GROUP_MAX);
        assert_eq!(c.resp_sx_limit, CONTINUATION_GROUP_MAX);
    }

    #[test]
    fn read_chunks_alone_keep_the_sixteen_octet_format() {
        let only = Extensions {
            reply_read_chunks: true,
            continuation: false,
        };
        let a = Advertisement::new(&PrivateData::DEFAULT, only).expect("encodes");
        assert_eq!(a.len(), ENCODED_LEN + EXTENSIONS_LEN);
        assert_eq!(Extensions::find(&a), only);
        assert_eq!(Extensions::find_chars(&a), TransportChars::DEFAULT);
        let none = Advertisement::new(&PrivateData::DEFAULT, Extensions::NONE).expect("encodes");
        assert_eq!(none.len(), ENCODED_LEN);
        assert_eq!(Extensions::find(&none), Extensions::NONE);
    }

    #[test]
    fn continuation_cut_short_or_malformed_is_not_offered() {
        let a = Advertisement::new(&PrivateData::DEFAULT, Extensions::ALL).expect("encodes");
        let cut = &a[..a.len() - 2];
        assert_eq!(
            Extensions::find(cut),
            Extensions {
                reply_read_chunks: true,
                continuation: false
            }
        );
        assert_eq!(Extensions::find_chars(cut), TransportChars::DEFAULT);
        // A peer with an older format (flags only) but the bit set: not offered either.
        let mut old = a.to_vec();
        old.truncate(ENCODED_LEN + EXTENSIONS_LEN);
        assert!(!Extensions::find(&old).continuation);
        // Negotiation needs both.
        let both = Extensions::negotiate(Extensions::ALL, Extensions::find(&old));
        assert!(!both.continuation && both.reply_read_chunks);
    }
}
