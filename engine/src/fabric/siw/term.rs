//! What a Terminate means for the work request it names, and building the ones we send.

use crate::fabric::WcStatus;
use crate::iwarp::ddp::MAX_HEADER_LEN;
use crate::iwarp::rdmap::SegmentHeader;
use crate::iwarp::terminate::{
    DdpUntaggedError, Terminate, TerminateCode, MAX_TERMINATED_RDMA_HEADER_LEN, MAX_TERMINATE_LEN,
};

/// The completion status of the request a peer's Terminate names.
///
/// iWARP has no receiver-not-ready retry: a Send that finds no receive is fatal at once,
/// which is what an RC requester reports as [`WcStatus::RnrRetryExceeded`] when its
/// retries run out, so that is the status (whatever `rnr_retry` said).
pub(crate) fn status_for(code: TerminateCode) -> WcStatus {
    match code {
        TerminateCode::RdmapProtection(_) | TerminateCode::DdpTagged(_) => {
            WcStatus::RemoteAccessError
        }
        TerminateCode::DdpUntagged(DdpUntaggedError::NoBufferAvailable) => {
            WcStatus::RnrRetryExceeded
        }
        TerminateCode::DdpUntagged(_) => WcStatus::RemoteInvalidRequest,
        TerminateCode::RdmapOperation(_)
        | TerminateCode::RdmapCatastrophic
        | TerminateCode::DdpCatastrophic
        | TerminateCode::Mpa(_)
        | TerminateCode::Unknown { .. } => WcStatus::RemoteOperationError,
    }
}

/// Whether a Terminate with this code blames one message of ours (rather than the
/// connection as a whole), so that a Terminate without a copied header can still be
/// pinned on the oldest request in flight.
pub(crate) fn blames_a_message(code: TerminateCode) -> bool {
    matches!(
        code,
        TerminateCode::RdmapProtection(_)
            | TerminateCode::DdpTagged(_)
            | TerminateCode::DdpUntagged(_)
    )
}

/// A Terminate body ready to send.
#[derive(Clone, Copy)]
pub(crate) struct TermOut {
    pub(crate) body: [u8; MAX_TERMINATE_LEN],
    pub(crate) len: usize,
}

impl TermOut {
    /// Builds the body: `code`, and when the error concerns a received segment, its
    /// header (`ulpdu_len` goes in the segment length field, as in the FPDU that carried
    /// it) and, for a Read Request, its 28-octet body.
    pub(crate) fn new(
        code: TerminateCode,
        segment: Option<(u16, &SegmentHeader)>,
        rdma_header: Option<&[u8]>,
    ) -> TermOut {
        let mut ddp = [0u8; MAX_HEADER_LEN];
        let copied = segment.and_then(|(len, h)| h.encode(&mut ddp).ok().map(|n| (len, n)));
        let rdma = rdma_header.filter(|r| r.len() <= MAX_TERMINATED_RDMA_HEADER_LEN);
        let t = Terminate {
            code,
            segment_length: copied.map(|(len, _)| len),
            ddp_header: copied.map(|(_, n)| &ddp[..n]),
            rdma_header: if copied.is_some() { rdma } else { None },
            layout: crate::iwarp::terminate::TerminateLayout::Rfc5040,
        };
        let mut out = TermOut {
            body: [0; MAX_TERMINATE_LEN],
            len: 0,
        };
        // The buffer holds the largest body and the parts were sized above, so the only
        // failure left would be a header that does not encode: send it bare instead.
        out.len = match t.encode(&mut out.body) {
            Ok(n) => n,
            Err(_) => Terminate::bare(code).encode(&mut out.body).unwrap_or(0),
        };
        out
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        &self.body[..self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::iwarp::rdmap::Opcode;
    use crate::iwarp::terminate::RdmapProtectionError;

    #[test]
    fn bodies_copy_the_segment_header_and_decode_back() {
        let h = SegmentHeader::untagged(Opcode::Send, true, 0, 7, 0);
        let t = TermOut::new(
            TerminateCode::DdpUntagged(DdpUntaggedError::NoBufferAvailable),
            Some((30, &h)),
            None,
        );
        let d = Terminate::decode(t.bytes()).unwrap();
        assert_eq!(d.segment_length, Some(30));
        let (back, _) = SegmentHeader::decode(d.ddp_header.unwrap()).unwrap();
        assert_eq!(back, h);
        assert_eq!(status_for(d.code), WcStatus::RnrRetryExceeded);
        let bare = TermOut::new(TerminateCode::RdmapCatastrophic, None, Some(&[0; 28]));
        let d = Terminate::decode(bare.bytes()).unwrap();
        assert!(d.ddp_header.is_none() && d.rdma_header.is_none());
        assert_eq!(
            status_for(TerminateCode::RdmapProtection(
                RdmapProtectionError::BaseOrBounds
            )),
            WcStatus::RemoteAccessError
        );
        assert!(!blames_a_message(TerminateCode::RdmapCatastrophic));
    }
}
