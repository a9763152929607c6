//! Fuzzes the RFC 8797 private-data search and decoder on arbitrary received buffers.
//!
//! Beyond "never panics" it checks that whatever is found re-encodes to the octets it
//! came from (reserved flag bits aside, which receivers must ignore), and that both
//! ends of a connection would compute matching thresholds from it.
#![no_main]
use libfuzzer_sys::fuzz_target;
use rpcrdma::wire::private_data::{
    find_private_data, InlineThresholds, PrivateData, ENCODED_LEN, FORMAT_IDENTIFIER,
};

/// Receivers ignore the seven reserved bits of the flags octet (RFC 8797 §4); only R
/// survives a decode/encode round trip.
const FLAGS_OFFSET: usize = 5;
const R_BIT: u8 = 0x01;

fn check_reencodes(src: &[u8], pd: &PrivateData) {
    let mut expected = [0u8; ENCODED_LEN];
    expected.copy_from_slice(&src[..ENCODED_LEN]);
    expected[FLAGS_OFFSET] &= R_BIT;
    let mut out = [0u8; ENCODED_LEN];
    assert_eq!(pd.encode(&mut out), Ok(ENCODED_LEN));
    assert_eq!(out, expected);
}

fuzz_target!(|data: &[u8]| {
    let id = FORMAT_IDENTIFIER.to_be_bytes();

    if let Ok(pd) = PrivateData::decode(data) {
        check_reencodes(data, &pd);
    }

    match find_private_data(data) {
        Ok(Some((off, pd))) => {
            assert_eq!(data[off..off + 4], id);
            check_reencodes(&data[off..], &pd);
            // Nothing valid may come before the first valid message.
            for earlier in 0..off {
                assert!(PrivateData::decode(&data[earlier..]).is_err());
            }
            let at_peer = InlineThresholds::negotiate(Some(&pd), None);
            let here = InlineThresholds::negotiate(None, Some(&pd));
            assert_eq!(at_peer.send, here.recv);
            assert_eq!(at_peer.recv, here.send);
        }
        Ok(None) => assert!(!data.windows(4).any(|w| w == id)),
        Err(_) => {
            assert!(data.windows(4).any(|w| w == id));
            assert_eq!(
                InlineThresholds::from_received(None, data),
                InlineThresholds::DEFAULT
            );
        }
    }
});
