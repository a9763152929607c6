//! Sans-IO MPA start-up (RFC 5044 §7.1, RFC 6581 §7): an [`Initiator`] sends a Request and
//! waits for the Reply; a [`Responder`] waits for the Request, lets the caller decide, and
//! answers with an accepting or rejecting Reply.
//!
//! Received bytes are fed in whatever pieces TCP delivers; each call reports how much it
//! consumed, so bytes that follow the frame (the first FPDUs) stay with the caller. No
//! allocation: each machine holds two fixed 532-octet frame buffers.
//!
//! Policy, matching Linux siw (siw_cm.c) unless noted:
//! - We initiate with revision 2 and the S flag, sending our IRD/ORD with peer-to-peer
//!   mode off; a revision 1 initiator is also possible.
//! - The responder accepts revision 1 and 2 requests and replies with the request's
//!   revision; to an enhanced request it replies enhanced.
//! - The initiator accepts a reply of its own revision or lower. A revision 2 reply to an
//!   enhanced request must itself be enhanced (siw treats that as a protocol error too).
//!   A revision 1 reply is a plain RFC 5044 peer: no IRD/ORD are exchanged.
//! - CRCs are used if either side sets C (RFC 5044 §7.1: a side that asks gets them).
//!   The responder's reply sets C whenever CRCs will be used.
//! - Markers are not supported: a request with M is refused with a rejecting reply
//!   ([`Responder::reject`]), a reply with M fails the handshake.
//! - A reply with R set fails with [`MpaError::Rejected`]; its private data stays
//!   readable through [`Initiator::peer_private_data`].

use core::ops::Range;

use super::mpa::{
    decode_frame, encode_frame, EnhancedData, FrameHeader, FrameKind, FrameParams, MpaError,
    Revision, FRAME_HEADER_LEN, KEY_LEN, MAX_FRAME_LEN, REPLY_KEY, REQUEST_KEY,
};

/// Initiator settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InitiatorConfig {
    /// Ask for CRCs (the C flag).
    pub crc: bool,
    /// Revision to request; [`Revision::V2`] sends IRD/ORD.
    pub revision: Revision,
    /// Inbound RDMA Read queue depth we offer (revision 2 only).
    pub ird: u16,
    /// Outbound RDMA Read queue depth we want (revision 2 only).
    pub ord: u16,
}

impl Default for InitiatorConfig {
    fn default() -> Self {
        InitiatorConfig {
            crc: false,
            revision: Revision::V2,
            ird: 16,
            ord: 16,
        }
    }
}

/// Responder settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponderConfig {
    /// Use CRCs even if the initiator does not ask.
    pub crc: bool,
    /// Inbound RDMA Read queue depth we offer (sent to enhanced initiators).
    pub ird: u16,
    /// Outbound RDMA Read queue depth we want (sent to enhanced initiators).
    pub ord: u16,
}

impl Default for ResponderConfig {
    fn default() -> Self {
        ResponderConfig {
            crc: false,
            ird: 16,
            ord: 16,
        }
    }
}

/// The negotiated outcome of a completed handshake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Established {
    /// Whether FPDUs carry CRCs, both directions.
    pub crc: bool,
    /// The revision in effect.
    pub revision: Revision,
    /// The peer's IRD/ORD words, when the exchange was enhanced.
    pub peer: Option<EnhancedData>,
    /// Where the peer's ULP private data sits in [`Initiator::peer_frame`] /
    /// [`Responder::peer_frame`].
    pub private_data: Range<usize>,
}

/// A request the responder has received and must accept or reject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerRequest {
    /// The initiator asked for CRCs.
    pub crc: bool,
    /// The revision requested.
    pub revision: Revision,
    /// The initiator's IRD/ORD words, when the request is enhanced.
    pub peer: Option<EnhancedData>,
    /// Where the ULP private data sits in [`Responder::peer_frame`].
    pub private_data: Range<usize>,
}

/// What a `feed` call did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress<T> {
    /// Input octets consumed; anything after them is not part of the frame.
    pub consumed: usize,
    /// Set once the frame is complete.
    pub done: Option<T>,
}

/// Collects one frame from arbitrary pieces.
#[derive(Debug, Clone)]
struct FrameAssembler {
    buf: [u8; MAX_FRAME_LEN],
    have: usize,
    /// Whole frame length, known once the header is in.
    need: usize,
}

impl FrameAssembler {
    const fn new() -> Self {
        FrameAssembler {
            buf: [0; MAX_FRAME_LEN],
            have: 0,
            need: FRAME_HEADER_LEN,
        }
    }

    /// Returns octets consumed and whether the frame is complete.
    fn feed(&mut self, input: &[u8]) -> Result<(usize, bool), MpaError> {
        let mut used = 0;
        if self.have < FRAME_HEADER_LEN {
            let n = (FRAME_HEADER_LEN - self.have).min(input.len());
            self.buf[self.have..self.have + n].copy_from_slice(&input[..n]);
            self.have += n;
            used = n;
            // Fail fast on a peer that is not speaking MPA at all.
            let k = self.have.min(KEY_LEN);
            if self.buf[..k] != REQUEST_KEY[..k] && self.buf[..k] != REPLY_KEY[..k] {
                return Err(MpaError::BadKey);
            }
            if self.have < FRAME_HEADER_LEN {
                return Ok((used, false));
            }
            let h = FrameHeader::decode(&self.buf[..FRAME_HEADER_LEN])?;
            self.need = FRAME_HEADER_LEN + usize::from(h.private_data_len);
        }
        let n = (self.need - self.have).min(input.len() - used);
        self.buf[self.have..self.have + n].copy_from_slice(&input[used..used + n]);
        self.have += n;
        used += n;
        Ok((used, self.have == self.need))
    }

    fn frame(&self) -> &[u8] {
        &self.buf[..self.have]
    }
}

/// Offsets of `inner` within `outer` (both from the same frame buffer).
fn range_in(outer: &[u8], inner: &[u8]) -> Range<usize> {
    let start = (inner.as_ptr() as usize).saturating_sub(outer.as_ptr() as usize);
    start..start + inner.len()
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum InitiatorState {
    AwaitingReply,
    Established,
    Failed(MpaError),
}

/// The active side of the start-up exchange.
#[derive(Debug, Clone)]
pub struct Initiator {
    config: InitiatorConfig,
    request: [u8; MAX_FRAME_LEN],
    request_len: usize,
    rx: FrameAssembler,
    private_data: Range<usize>,
    state: InitiatorState,
}

impl Initiator {
    /// Builds the Request carrying `ulp_private_data` (at most 508 octets with revision 2,
    /// 512 with revision 1).
    pub fn new(config: InitiatorConfig, ulp_private_data: &[u8]) -> Result<Self, MpaError> {
        let mut request = [0u8; MAX_FRAME_LEN];
        let enhanced = match config.revision {
            Revision::V2 => Some(EnhancedData::client_server(config.ird, config.ord)),
            Revision::V1 => None,
        };
        let request_len = encode_frame(
            &mut request,
            &FrameParams {
                kind: FrameKind::Request,
                crc: config.crc,
                reject: false,
                revision: config.revision,
                enhanced,
            },
            ulp_private_data,
        )?;
        Ok(Initiator {
            config,
            request,
            request_len,
            rx: FrameAssembler::new(),
            private_data: 0..0,
            state: InitiatorState::AwaitingReply,
        })
    }

    /// The Request frame to write to the connection.
    #[inline]
    pub fn request(&self) -> &[u8] {
        &self.request[..self.request_len]
    }

    /// Feeds bytes received from the responder.
    pub fn feed(&mut self, input: &[u8]) -> Result<Progress<Established>, MpaError> {
        match &self.state {
            InitiatorState::AwaitingReply => {}
            InitiatorState::Established => return Err(MpaError::InvalidState),
            InitiatorState::Failed(e) => return Err(*e),
        }
        match self.feed_inner(input) {
            Ok(p) => Ok(p),
            Err(e) => {
                self.state = InitiatorState::Failed(e);
                Err(e)
            }
        }
    }

    fn feed_inner(&mut self, input: &[u8]) -> Result<Progress<Established>, MpaError> {
        let (consumed, complete) = self.rx.feed(input)?;
        if !complete {
            return Ok(Progress {
                consumed,
                done: None,
            });
        }
        let frame = decode_frame(self.rx.frame())?;
        if frame.header.kind != FrameKind::Reply {
            return Err(MpaError::BadKey);
        }
        if frame.revision > self.config.revision {
            return Err(MpaError::BadRevision {
                revision: frame.header.revision,
            });
        }
        self.private_data = range_in(self.rx.frame(), frame.ulp_private_data);
        if frame.header.reject {
            return Err(MpaError::Rejected);
        }
        if frame.header.markers {
            return Err(MpaError::MarkersRequired);
        }
        if self.config.revision == Revision::V2
            && frame.revision == Revision::V2
            && frame.enhanced.is_none()
        {
            return Err(MpaError::MissingEnhancedData {
                len: usize::from(frame.header.private_data_len),
            });
        }
        let est = Established {
            crc: self.config.crc || frame.header.crc,
            revision: frame.revision,
            peer: frame.enhanced,
            private_data: self.private_data.clone(),
        };
        self.state = InitiatorState::Established;
        Ok(Progress {
            consumed,
            done: Some(est),
        })
    }

    /// The Reply frame received so far.
    #[inline]
    pub fn peer_frame(&self) -> &[u8] {
        self.rx.frame()
    }

    /// The responder's ULP private data (after IRD/ORD), once the Reply is complete;
    /// also after [`MpaError::Rejected`]. Empty before.
    #[inline]
    pub fn peer_private_data(&self) -> &[u8] {
        self.rx
            .frame()
            .get(self.private_data.clone())
            .unwrap_or(&[])
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum ResponderState {
    AwaitingRequest,
    /// A request is in; accept or reject it.
    Deciding(PeerRequest),
    /// The request needs markers; only a rejection can be sent.
    MustReject(PeerRequest),
    Replied,
    Failed(MpaError),
}

/// The passive side of the start-up exchange.
#[derive(Debug, Clone)]
pub struct Responder {
    config: ResponderConfig,
    rx: FrameAssembler,
    reply: [u8; MAX_FRAME_LEN],
    reply_len: usize,
    private_data: Range<usize>,
    state: ResponderState,
}

impl Responder {
    /// A responder waiting for a Request.
    pub fn new(config: ResponderConfig) -> Self {
        Responder {
            config,
            rx: FrameAssembler::new(),
            reply: [0; MAX_FRAME_LEN],
            reply_len: 0,
            private_data: 0..0,
            state: ResponderState::AwaitingRequest,
        }
    }

    /// Feeds bytes received from the initiator. When the Request is complete, returns it
    /// for a decision. A Request that needs markers fails with
    /// [`MpaError::MarkersRequired`]; the caller should then send [`Responder::reject`].
    pub fn feed(&mut self, input: &[u8]) -> Result<Progress<PeerRequest>, MpaError> {
        match &self.state {
            ResponderState::AwaitingRequest => {}
            ResponderState::Failed(e) => return Err(*e),
            _ => return Err(MpaError::InvalidState),
        }
        let r = self.feed_inner(input);
        if let Err(e) = r {
            if !matches!(self.state, ResponderState::MustReject(_)) {
                self.state = ResponderState::Failed(e);
            }
        }
        r
    }

    fn feed_inner(&mut self, input: &[u8]) -> Result<Progress<PeerRequest>, MpaError> {
        let (consumed, complete) = self.rx.feed(input)?;
        if !complete {
            return Ok(Progress {
                consumed,
                done: None,
            });
        }
        let frame = decode_frame(self.rx.frame())?;
        if frame.header.kind != FrameKind::Request {
            return Err(MpaError::BadKey);
        }
        let req = PeerRequest {
            crc: frame.header.crc,
            revision: frame.revision,
            peer: frame.enhanced,
            private_data: range_in(self.rx.frame(), frame.ulp_private_data),
        };
        self.private_data = req.private_data.clone();
        if frame.header.markers {
            self.state = ResponderState::MustReject(req);
            return Err(MpaError::MarkersRequired);
        }
        self.state = ResponderState::Deciding(req.clone());
        Ok(Progress {
            consumed,
            done: Some(req),
        })
    }

    /// The Request frame received so far.
    #[inline]
    pub fn peer_frame(&self) -> &[u8] {
        self.rx.frame()
    }

    /// The initiator's ULP private data (after IRD/ORD), once the Request is complete;
    /// empty before.
    #[inline]
    pub fn peer_private_data(&self) -> &[u8] {
        self.rx
            .frame()
            .get(self.private_data.clone())
            .unwrap_or(&[])
    }

    /// Accepts the Request: returns the Reply to write and the negotiated outcome.
    pub fn accept(&mut self, ulp_private_data: &[u8]) -> Result<(&[u8], Established), MpaError> {
        let ResponderState::Deciding(req) = &self.state else {
            return Err(MpaError::InvalidState);
        };
        let req = req.clone();
        let crc = self.config.crc || req.crc;
        self.reply_len = encode_frame(
            &mut self.reply,
            &FrameParams {
                kind: FrameKind::Reply,
                crc,
                reject: false,
                revision: req.revision,
                enhanced: req
                    .peer
                    .map(|_| EnhancedData::client_server(self.config.ird, self.config.ord)),
            },
            ulp_private_data,
        )?;
        self.state = ResponderState::Replied;
        let est = Established {
            crc,
            revision: req.revision,
            peer: req.peer,
            private_data: req.private_data,
        };
        Ok((&self.reply[..self.reply_len], est))
    }

    /// Rejects the Request (R flag) with `ulp_private_data` as the reason; returns the
    /// Reply to write. The caller then closes the connection.
    pub fn reject(&mut self, ulp_private_data: &[u8]) -> Result<&[u8], MpaError> {
        let (ResponderState::Deciding(req) | ResponderState::MustReject(req)) = &self.state else {
            return Err(MpaError::InvalidState);
        };
        let revision = req.revision;
        let enhanced = req
            .peer
            .map(|_| EnhancedData::client_server(self.config.ird, self.config.ord));
        self.reply_len = encode_frame(
            &mut self.reply,
            &FrameParams {
                kind: FrameKind::Reply,
                crc: false,
                reject: true,
                revision,
                enhanced,
            },
            ulp_private_data,
        )?;
        self.state = ResponderState::Replied;
        Ok(&self.reply[..self.reply_len])
    }
}
