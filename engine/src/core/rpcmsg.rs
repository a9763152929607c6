//! The little ONC RPC (RFC 5531) the transport itself needs: the NULL call of the
//! keepalive probe, accepted error replies for handlers that decline a call, and a peek
//! at a reply's status to sort outcomes. Everything else about RPC belongs to the ULP.

use crate::requester::RpcReplyError;
use crate::service::ServiceError;
use crate::wire::xdr::{BufferTooSmall, XdrCursor, XdrEncoder};

const CALL: u32 = 0;
const REPLY: u32 = 1;
const RPC_VERSION: u32 = 2;
const MSG_ACCEPTED: u32 = 0;
const MSG_DENIED: u32 = 1;
const AUTH_NONE: u32 = 0;
const SUCCESS: u32 = 0;
/// Largest `opaque_auth` body (RFC 5531 §8.2).
const MAX_AUTH_BYTES: u32 = 400;

/// Octets of [`encode_null_call`]'s output.
pub(crate) const NULL_CALL_LEN: usize = 40;

/// Writes a NULL call (procedure 0, AUTH_NONE) of `prog`/`vers` and returns its length.
pub(crate) fn encode_null_call(
    xid: u32,
    prog: u32,
    vers: u32,
    buf: &mut [u8],
) -> Result<usize, BufferTooSmall> {
    let mut e = XdrEncoder::new(buf);
    for w in [
        xid,
        CALL,
        RPC_VERSION,
        prog,
        vers,
        0,
        AUTH_NONE,
        0,
        AUTH_NONE,
        0,
    ] {
        e.u32(w)?;
    }
    Ok(e.finish())
}

/// Writes the accepted reply that reports `err` for `xid`, with an AUTH_NONE verifier.
pub(crate) fn encode_accepted_error(
    xid: u32,
    err: ServiceError,
    buf: &mut [u8],
) -> Result<usize, BufferTooSmall> {
    let mut e = XdrEncoder::new(buf);
    for w in [xid, REPLY, MSG_ACCEPTED, AUTH_NONE, 0, err.accept_stat()] {
        e.u32(w)?;
    }
    if let ServiceError::ProgMismatch { low, high } = err {
        e.u32(low)?;
        e.u32(high)?;
    }
    Ok(e.finish())
}

/// Octets of an accepted SUCCESS reply header with an empty verifier: XID, REPLY,
/// MSG_ACCEPTED, verifier flavor, verifier length 0, SUCCESS.
const PLAIN_SUCCESS_LEN: usize = 24;

/// Sorts an RPC reply: `Ok` for MSG_ACCEPTED/SUCCESS, otherwise what it is.
#[inline]
pub(crate) fn classify_reply(msg: &[u8]) -> Result<(), RpcReplyError> {
    // Nearly every reply is a success with an empty verifier (AUTH_NONE or a flavor
    // without body): six fixed words, checked without the general decoder.
    // Two eight-octet looks: REPLY and MSG_ACCEPTED, then the verifier's length and
    // SUCCESS (the verifier's flavor, between them, is not looked at).
    if let Some(w) = msg.first_chunk::<PLAIN_SUCCESS_LEN>() {
        let pair = |i: usize| {
            u64::from_be_bytes([
                w[i],
                w[i + 1],
                w[i + 2],
                w[i + 3],
                w[i + 4],
                w[i + 5],
                w[i + 6],
                w[i + 7],
            ])
        };
        const ACCEPTED: u64 = ((REPLY as u64) << 32) | MSG_ACCEPTED as u64;
        const EMPTY_SUCCESS: u64 = SUCCESS as u64;
        if pair(4) == ACCEPTED && pair(16) == EMPTY_SUCCESS {
            return Ok(());
        }
    }
    classify_reply_general(msg)
}

/// [`classify_reply`] for any verifier.
#[cold]
fn classify_reply_general(msg: &[u8]) -> Result<(), RpcReplyError> {
    let mut c = XdrCursor::new(msg);
    let mut word = || c.u32().map_err(|_| RpcReplyError::Malformed);
    let _xid = word()?;
    if word()? != REPLY {
        return Err(RpcReplyError::Malformed);
    }
    match word()? {
        MSG_ACCEPTED => {}
        MSG_DENIED => return Err(RpcReplyError::Denied),
        _ => return Err(RpcReplyError::Malformed),
    }
    let _flavor = c.u32().map_err(|_| RpcReplyError::Malformed)?;
    c.opaque(MAX_AUTH_BYTES)
        .map_err(|_| RpcReplyError::Malformed)?;
    match c.u32().map_err(|_| RpcReplyError::Malformed)? {
        SUCCESS => Ok(()),
        stat => Err(RpcReplyError::Accepted(stat)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_call_layout() {
        let mut b = [0u8; NULL_CALL_LEN];
        assert_eq!(encode_null_call(0x11223344, 100_003, 3, &mut b), Ok(40));
        assert_eq!(&b[..4], &[0x11, 0x22, 0x33, 0x44]);
        assert_eq!(&b[12..16], &100_003u32.to_be_bytes());
        assert!(encode_null_call(1, 1, 1, &mut [0u8; 39]).is_err());
    }

    /// The two-look fast path answers as the general decode does for a plain success
    /// and for every one-bit change of it, and for every truncation.
    #[test]
    fn the_fast_classify_matches_the_general_one() {
        let ok = [
            0, 0, 0, 5, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        ];
        assert_eq!(classify_reply(&ok), Ok(()));
        for bit in 0..ok.len() * 8 {
            let mut m = ok;
            m[bit / 8] ^= 1 << (bit % 8);
            assert_eq!(classify_reply(&m), classify_reply_general(&m), "bit {bit}");
        }
        for cut in 0..ok.len() {
            assert_eq!(
                classify_reply(&ok[..cut]),
                classify_reply_general(&ok[..cut])
            );
        }
    }

    #[test]
    fn accepted_errors_classify_back() {
        let mut b = [0u8; 32];
        let n = encode_accepted_error(5, ServiceError::GarbageArgs, &mut b).unwrap();
        assert_eq!(n, 24, "an accepted error reply is six words");
        assert_eq!(classify_reply(&b[..n]), Err(RpcReplyError::Accepted(4)));
        let n = encode_accepted_error(5, ServiceError::ProgMismatch { low: 2, high: 3 }, &mut b)
            .unwrap();
        assert_eq!(n, 32);
        assert_eq!(classify_reply(&b[..n]), Err(RpcReplyError::Accepted(2)));
        let ok = [
            0, 0, 0, 5, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        ];
        assert_eq!(classify_reply(&ok), Ok(()));
        assert_eq!(classify_reply(&ok[..20]), Err(RpcReplyError::Malformed));
        // A verifier with a body takes the general path and still classifies.
        let with_verf = [
            0, 0, 0, 5, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 6, 0, 0, 0, 4, 1, 2, 3, 4, 0, 0, 0, 0,
        ];
        assert_eq!(classify_reply(&with_verf), Ok(()));
        let mut failed = with_verf;
        failed[27] = 3;
        assert_eq!(classify_reply(&failed), Err(RpcReplyError::Accepted(3)));
        // Six words that only look like a plain success.
        let mut not_reply = ok;
        not_reply[7] = 0;
        assert_eq!(classify_reply(&not_reply), Err(RpcReplyError::Malformed));
        let mut not_success = ok;
        not_success[23] = 1;
        assert_eq!(
            classify_reply(&not_success),
            Err(RpcReplyError::Accepted(1))
        );
        let denied = [0, 0, 0, 5, 0, 0, 0, 1, 0, 0, 0, 1];
        assert_eq!(classify_reply(&denied), Err(RpcReplyError::Denied));
        let call = [0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(classify_reply(&call), Err(RpcReplyError::Malformed));
    }
}
