//! RFC 8797 RDMA-CM private data for RPC-over-RDMA version 1.
//!
//! Each peer puts an eight-octet message into the connection manager's private data
//! when it connects (client) or accepts (server), advertising its send and receive
//! buffer sizes and whether it tolerates remote invalidation. This module encodes and
//! decodes that message, finds it inside a received private-data buffer that other
//! layers may also have written into (RFC 8797 §5.2), and turns the two advertisements
//! into the connection's inline thresholds (§4.2, §5.1).
//!
//! The message is deliberately not XDR (RFC 8797 §1): after the 32-bit format
//! identifier come four single octets, so it is parsed octet by octet here.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! |                       Format Identifier                       |
//! |    Version    |  Reserved   |R|   Send Size   | Receive Size  |
//! ```
//!
//! Nothing here allocates or panics on received bytes.

use super::rtr::chars::{
    TransportChars, RTRS_SDDP_REPLY, RTRS_XCONT, RTRS_XREQ, RTRS_XRESP, XCHAR_REQRXLIM,
    XCHAR_RESPSXLIM, XCHAR_RTRSUPP,
};
use super::xdr::{BufferTooSmall, XdrCursor};

/// The format identifier that opens an RPC-over-RDMA version 1 private-data message
/// (RFC 8797 §4, IANA "RDMA-CM Private Data Identifiers").
pub const FORMAT_IDENTIFIER: u32 = 0xf6ab_0e18;

/// The only message format version this module understands (RFC 8797 §4).
pub const VERSION_1: u8 = 1;

/// Octets in a version 1 message.
pub const ENCODED_LEN: usize = 8;

/// The smallest inline threshold RPC-over-RDMA version 1 allows, which is also the
/// default for both directions when nothing was exchanged (RFC 8166 §3.3.3).
pub const MIN_INLINE_SIZE: u32 = 1024;

/// The largest size a Send Size or Receive Size octet can express: (255 + 1) * 1024.
pub const MAX_INLINE_SIZE: u32 = 262_144;

const IDENTIFIER_BYTES: [u8; 4] = FORMAT_IDENTIFIER.to_be_bytes();

// Offsets within the message.
const VERSION_OFFSET: usize = 4;
const FLAGS_OFFSET: usize = 5;
const SEND_SIZE_OFFSET: usize = 6;
const RECV_SIZE_OFFSET: usize = 7;

/// R is bit 15 of the second word, i.e. the low bit of the flags octet; the other seven
/// bits are reserved: written as zero, ignored on receipt (RFC 8797 §4).
const REMOTE_INVALIDATE_BIT: u8 = 0x01;

/// A buffer size that the Send Size / Receive Size encoding cannot express.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    /// Below [`MIN_INLINE_SIZE`]: RPC-over-RDMA version 1 cannot run with buffers this
    /// small, so there is nothing safe to advertise.
    #[error("inline size {bytes} is below the RPC-over-RDMA minimum of {MIN_INLINE_SIZE} octets")]
    BelowMinimum {
        /// The size asked for, in octets.
        bytes: u32,
    },
    /// Above [`MAX_INLINE_SIZE`]. Use [`encode_size_saturating`] (or
    /// [`PrivateData::from_buffer_sizes`]) to advertise the maximum instead.
    #[error("inline size {bytes} exceeds the largest encodable size of {MAX_INLINE_SIZE} octets")]
    AboveMaximum {
        /// The size asked for, in octets.
        bytes: u32,
    },
}

/// Encodes a buffer size as a Send Size / Receive Size octet: `bytes / 1024 - 1`
/// (RFC 8797 §4.2).
///
/// Sizes that are not a multiple of 1024 round *down*: a peer trusts the advertised
/// value, so advertising more than we can actually send or receive could make its
/// Receive fail and tear the connection down, whereas advertising less only costs an
/// occasional explicit RDMA transfer.
///
/// # Errors
/// [`SizeError::BelowMinimum`] below 1024 octets, [`SizeError::AboveMaximum`] above
/// 262144 octets.
pub const fn encode_size(bytes: u32) -> Result<u8, SizeError> {
    if bytes < MIN_INLINE_SIZE {
        return Err(SizeError::BelowMinimum { bytes });
    }
    if bytes > MAX_INLINE_SIZE {
        return Err(SizeError::AboveMaximum { bytes });
    }
    // In range, so the quotient is 1..=256 and the code 0..=255.
    Ok((bytes / 1024 - 1) as u8)
}

/// Like [`encode_size`], but a size above [`MAX_INLINE_SIZE`] advertises the maximum.
///
/// That is always safe (we can certainly handle the smaller size), which makes this the
/// right choice when advertising real buffer sizes.
///
/// # Errors
/// [`SizeError::BelowMinimum`] below 1024 octets.
pub const fn encode_size_saturating(bytes: u32) -> Result<u8, SizeError> {
    if bytes > MAX_INLINE_SIZE {
        return Ok(u8::MAX);
    }
    encode_size(bytes)
}

/// Decodes a Send Size / Receive Size octet into octets: `(code + 1) * 1024`
/// (RFC 8797 §4.2). Every code is valid.
pub const fn decode_size(code: u8) -> u32 {
    (code as u32 + 1) * 1024
}

/// Why received private data is not a usable RFC 8797 version 1 message.
///
/// Per RFC 8797 §5.1 every one of these means the same thing to the connection: behave
/// as if the peer sent nothing and use the RFC 8166 defaults (see
/// [`InlineThresholds::negotiate`]). The detail is for logging.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PrivateDataError {
    /// [`PrivateData::decode`] did not find the format identifier at offset 0.
    #[error("private data starts with {found:#010x}, not the RPC-over-RDMA identifier {FORMAT_IDENTIFIER:#010x}")]
    NotPrivateData {
        /// The first word of the buffer.
        found: u32,
    },
    /// The format identifier is followed by a version other than [`VERSION_1`], so the
    /// layout of what follows is unknown (RFC 8797 §5.2, §6).
    #[error("RPC-over-RDMA private data at offset {offset} has unsupported version {version}")]
    UnsupportedVersion {
        /// Offset of the format identifier in the buffer.
        offset: usize,
        /// The version octet found.
        version: u8,
    },
    /// The message would run past the end of the buffer (RFC 8797 §5.2).
    #[error("RPC-over-RDMA private data at offset {offset} needs {needed} octets, buffer has {available}")]
    Overrun {
        /// Offset of the message (its format identifier) in the buffer.
        offset: usize,
        /// Octets the message needs from `offset`.
        needed: usize,
        /// Octets the buffer has from `offset`.
        available: usize,
    },
}

/// Why a [`PrivateData`] could not be encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PrivateDataEncodeError {
    /// Only [`VERSION_1`] has a known layout.
    #[error("cannot encode private data version {0}; only version 1 is defined")]
    UnsupportedVersion(u8),
    /// `send_size` cannot be expressed.
    #[error("send size: {0}")]
    SendSize(#[source] SizeError),
    /// `recv_size` cannot be expressed.
    #[error("receive size: {0}")]
    RecvSize(#[source] SizeError),
    /// The output buffer is shorter than [`ENCODED_LEN`].
    #[error("{0}")]
    BufferTooSmall(#[source] BufferTooSmall),
}

/// One peer's RFC 8797 advertisement.
///
/// Sizes are in octets. A decoded value always has `version == 1` and sizes that are
/// multiples of 1024 in `1024..=262144`; a value built by hand may hold anything, and
/// [`PrivateData::encode`] checks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct PrivateData {
    /// Message format version; only [`VERSION_1`] is defined.
    pub version: u8,
    /// The R flag: this peer can cope with its peer invalidating its STags remotely
    /// (RFC 8797 §3.2, §4.1).
    pub remote_invalidate: bool,
    /// The most this peer will transmit in one RDMA Send.
    pub send_size: u32,
    /// The most this peer can take in one RDMA Receive.
    pub recv_size: u32,
}

impl PrivateData {
    /// What RFC 8797 §5.1 says to assume about a peer that sent no valid message: R clear
    /// and both size codes zero, i.e. the RFC 8166 default of 1024 octets.
    pub const DEFAULT: PrivateData = PrivateData {
        version: VERSION_1,
        remote_invalidate: false,
        send_size: MIN_INLINE_SIZE,
        recv_size: MIN_INLINE_SIZE,
    };

    /// A version 1 advertisement with the given sizes, unchecked until encoding.
    pub const fn new(send_size: u32, recv_size: u32, remote_invalidate: bool) -> Self {
        PrivateData {
            version: VERSION_1,
            remote_invalidate,
            send_size,
            recv_size,
        }
    }

    /// The advertisement to send for real buffer sizes: each is rounded down to a
    /// multiple of 1024 and capped at [`MAX_INLINE_SIZE`], both of which are safe (see
    /// [`encode_size`]). The result encodes without error and decodes to itself.
    ///
    /// # Errors
    /// [`SizeError::BelowMinimum`] if either buffer is smaller than 1024 octets.
    pub const fn from_buffer_sizes(
        send_bytes: u32,
        recv_bytes: u32,
        remote_invalidate: bool,
    ) -> Result<Self, SizeError> {
        let send = match encode_size_saturating(send_bytes) {
            Ok(c) => c,
            Err(e) => return Err(e),
        };
        let recv = match encode_size_saturating(recv_bytes) {
            Ok(c) => c,
            Err(e) => return Err(e),
        };
        Ok(PrivateData::new(
            decode_size(send),
            decode_size(recv),
            remote_invalidate,
        ))
    }

    /// Encodes the message into the first [`ENCODED_LEN`] octets of `out` and returns
    /// that length. Reserved bits are written as zero. Sizes that are not multiples of
    /// 1024 round down (see [`encode_size`]).
    ///
    /// # Errors
    /// A version other than 1, a size outside `1024..=262144`, or a short buffer.
    pub fn encode(&self, out: &mut [u8]) -> Result<usize, PrivateDataEncodeError> {
        let bytes = self.to_bytes()?;
        let available = out.len();
        let dst = out
            .get_mut(..ENCODED_LEN)
            .ok_or(PrivateDataEncodeError::BufferTooSmall(BufferTooSmall {
                needed: ENCODED_LEN,
                available,
            }))?;
        dst.copy_from_slice(&bytes);
        Ok(ENCODED_LEN)
    }

    /// The encoded message as an array, for private-data buffers assembled by value.
    ///
    /// # Errors
    /// As [`PrivateData::encode`], except that there is no buffer to be too small.
    pub const fn to_bytes(&self) -> Result<[u8; ENCODED_LEN], PrivateDataEncodeError> {
        if self.version != VERSION_1 {
            return Err(PrivateDataEncodeError::UnsupportedVersion(self.version));
        }
        let send = match encode_size(self.send_size) {
            Ok(c) => c,
            Err(e) => return Err(PrivateDataEncodeError::SendSize(e)),
        };
        let recv = match encode_size(self.recv_size) {
            Ok(c) => c,
            Err(e) => return Err(PrivateDataEncodeError::RecvSize(e)),
        };
        let flags = if self.remote_invalidate {
            REMOTE_INVALIDATE_BIT
        } else {
            0
        };
        let id = IDENTIFIER_BYTES;
        Ok([id[0], id[1], id[2], id[3], VERSION_1, flags, send, recv])
    }

    /// Decodes a message that starts at offset 0 of `buf`. Octets after the eighth are
    /// ignored (private-data fields are fixed-size and usually zero-padded); reserved
    /// flag bits are ignored (RFC 8797 §4).
    ///
    /// To look for the message anywhere in a received buffer, use
    /// [`find_private_data`].
    ///
    /// # Errors
    /// [`PrivateDataError::NotPrivateData`] if the buffer does not start with
    /// [`FORMAT_IDENTIFIER`]; otherwise as for a candidate in [`find_private_data`].
    pub fn decode(buf: &[u8]) -> Result<Self, PrivateDataError> {
        match buf.get(..4) {
            Some(id) if id == IDENTIFIER_BYTES => parse_after_identifier(buf, 0),
            Some(id) => Err(PrivateDataError::NotPrivateData {
                found: u32::from_be_bytes([id[0], id[1], id[2], id[3]]),
            }),
            None => Err(PrivateDataError::Overrun {
                offset: 0,
                needed: ENCODED_LEN,
                available: buf.len(),
            }),
        }
    }

    /// This value as the peer will see it: what [`PrivateData::decode`] returns for
    /// [`PrivateData::to_bytes`], or `None` if it cannot be encoded (so it cannot have
    /// been sent).
    pub fn as_advertised(&self) -> Option<PrivateData> {
        let bytes = self.to_bytes().ok()?;
        PrivateData::decode(&bytes).ok()
    }
}

impl Default for PrivateData {
    fn default() -> Self {
        PrivateData::DEFAULT
    }
}

/// Parses the octets after a format identifier found at `offset`. The version is checked
/// before the length because the version defines the length (RFC 8797 §4: version 1
/// means exactly eight octets); a version octet that is itself missing is an overrun.
fn parse_after_identifier(buf: &[u8], offset: usize) -> Result<PrivateData, PrivateDataError> {
    let rest = buf.get(offset..).unwrap_or(&[]);
    let overrun = PrivateDataError::Overrun {
        offset,
        needed: ENCODED_LEN,
        available: rest.len(),
    };
    let version = *rest.get(VERSION_OFFSET).ok_or(overrun)?;
    if version != VERSION_1 {
        return Err(PrivateDataError::UnsupportedVersion { offset, version });
    }
    let msg = rest.get(..ENCODED_LEN).ok_or(overrun)?;
    Ok(PrivateData {
        version,
        remote_invalidate: msg[FLAGS_OFFSET] & REMOTE_INVALIDATE_BIT != 0,
        send_size: decode_size(msg[SEND_SIZE_OFFSET]),
        recv_size: decode_size(msg[RECV_SIZE_OFFSET]),
    })
}

/// Searches a received private-data buffer for an RFC 8797 message at any octet offset
/// (RFC 8797 §5.2: other layers, e.g. MPA's IRD/ORD words, may come first, and no
/// alignment is promised).
///
/// Returns the offset and contents of the first occurrence of [`FORMAT_IDENTIFIER`] that
/// is followed by a valid version 1 message, or `Ok(None)` if the identifier does not
/// occur at all.
///
/// An occurrence whose version is not 1, or whose message would overrun the buffer, is
/// not RFC 8797 private data we can use: RFC 8797 §7 warns that other layers' data can
/// contain the identifier by accident, and the §5.2 checks exist to reject such false
/// matches. The search therefore carries on past it, so that a coincidental match in,
/// say, an MPA header cannot hide a genuine message behind it. If no occurrence is
/// valid, the error for the *first* one is returned so that it can be logged.
///
/// # Errors
/// Only when the identifier occurs but no occurrence is valid. Per RFC 8797 §5.1 the
/// caller must then behave exactly as for `Ok(None)`: assume [`PrivateData::DEFAULT`]
/// for the peer. [`InlineThresholds::from_received`] does this.
pub fn find_private_data(buf: &[u8]) -> Result<Option<(usize, PrivateData)>, PrivateDataError> {
    let mut first_rejected = None;
    for (offset, window) in buf.windows(IDENTIFIER_BYTES.len()).enumerate() {
        if window != IDENTIFIER_BYTES {
            continue;
        }
        match parse_after_identifier(buf, offset) {
            Ok(pd) => return Ok(Some((offset, pd))),
            Err(e) => {
                first_rejected.get_or_insert(e);
            }
        }
    }
    match first_rejected {
        Some(e) => Err(e),
        None => Ok(None),
    }
}

/// The inline thresholds of one end of a connection, in octets, and whether remote
/// invalidation may be used (RFC 8797 §4.1, §4.2).
///
/// Both ends compute matching values: one end's `send` is the other's `recv`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct InlineThresholds {
    /// The largest message we may transmit with one RDMA Send.
    pub send: u32,
    /// The largest message the peer may transmit to us with one RDMA Send, so the size
    /// our posted Receive buffers must be able to hold.
    pub recv: u32,
    /// Both peers set R: when this end is the responder it may reply with RDMA Send with
    /// Invalidate (invalidating only STags of that reply's XID); when it is the requester
    /// it must expect its STags to be invalidated that way.
    pub remote_invalidate: bool,
}

impl InlineThresholds {
    /// The RFC 8166 defaults: 1024 octets each way, no remote invalidation.
    pub const DEFAULT: InlineThresholds = InlineThresholds {
        send: MIN_INLINE_SIZE,
        recv: MIN_INLINE_SIZE,
        remote_invalidate: false,
    };

    /// Combines what we advertised with what the peer advertised (RFC 8797 §4.2): our
    /// send threshold is the smaller of our send size and the peer's receive size, our
    /// receive threshold the smaller of the peer's send size and our receive size, and
    /// remote invalidation needs R from both (§4.1).
    ///
    /// `None` on either side means that side sent no valid message; RFC 8797 §5.1 says to
    /// treat it as [`PrivateData::DEFAULT`]. Each side is taken *as the other end saw
    /// it* (see [`PrivateData::as_advertised`]): sizes round down to a multiple of 1024,
    /// and a value that cannot be encoded (wrong version, size out of range) counts as
    /// not sent. That keeps both ends' results consistent.
    pub fn negotiate(local: Option<&PrivateData>, peer: Option<&PrivateData>) -> Self {
        let seen = |pd: Option<&PrivateData>| {
            pd.and_then(PrivateData::as_advertised)
                .unwrap_or(PrivateData::DEFAULT)
        };
        let local = seen(local);
        let peer = seen(peer);
        InlineThresholds {
            send: local.send_size.min(peer.recv_size),
            recv: peer.send_size.min(local.recv_size),
            remote_invalidate: local.remote_invalidate && peer.remote_invalidate,
        }
    }

    /// [`InlineThresholds::negotiate`] with the peer's message searched for in the
    /// private-data buffer it sent; anything but a valid message means defaults
    /// (RFC 8797 §5.1). Use [`find_private_data`] directly to log why a message was
    /// rejected.
    pub fn from_received(local: Option<&PrivateData>, received: &[u8]) -> Self {
        let peer = find_private_data(received).ok().flatten().map(|(_, pd)| pd);
        InlineThresholds::negotiate(local, peer.as_ref())
    }
}

impl Default for InlineThresholds {
    fn default() -> Self {
        InlineThresholds::DEFAULT
    }
}

/// The identifier that opens this engine's extension advertisement, the eight octets it
/// appends after its RFC 8797 version 1 message.
///
/// RFC 8797 §6 foresees new formats "that use a different value for the first four
/// bytes", and §5.2 has a receiver search the whole private-data buffer for the
/// identifier it knows, because other layers put data there too. So the version 1
/// message stays exactly as RFC 8797 §4 defines it (Reserved bits zero, octets 0-7),
/// and a peer that knows only version 1 (the Linux client and server read the first
/// eight octets and ignore the rest of the buffer) never sees the extensions: to it
/// they are some other layer's private data. Two rpcrdma peers find each other's word.
/// The value spells "rdx" and a format number 1.
pub const EXTENSIONS_IDENTIFIER: u32 = 0x7264_7801;

/// Octets in an extension advertisement's head: the identifier, then a 32-bit flags
/// word in network byte order. With [`EXT_CONTINUATION`] set the head is followed by
/// the sender's transport characteristics ([`CHARS_LEN`] octets).
pub const EXTENSIONS_LEN: usize = 8;

/// Octets of the characteristics that follow the flags word when message continuation
/// is offered: the `xcharvals` list of draft-dnoveck-rpcrdma-rtrext §8 with RTR support,
/// the request transmission receive limit and the response transmission send limit
/// (count word, then three entries of id, length 4, value).
pub const CHARS_LEN: usize = 4 + 3 * 12;

/// Octets an [`Advertisement`] can hold: the version 1 message, the extension head and
/// the characteristics (56: what an InfiniBand REQ leaves the RDMA CM).
pub const ADVERTISEMENT_MAX: usize = ENCODED_LEN + EXTENSIONS_LEN + CHARS_LEN;

/// Octets the receive buffer structure (XCHAR_RBSTRUCT, draft-dnoveck-rpcrdma-rtrext
/// §7.2) adds to an advertisement at most: id, length, `xmrbuf_length`, the group
/// count and [`MAX_RBS_GROUPS`](super::rtr::chars::MAX_RBS_GROUPS) groups. Only an
/// accept carries it (an InfiniBand REP leaves 196 octets; a REQ only 56).
pub const RBS_CHAR_MAX: usize = 8 + 8 + 16 * super::rtr::chars::MAX_RBS_GROUPS;

/// Octets of the largest advertisement: [`ADVERTISEMENT_MAX`] and a receive buffer
/// structure.
const ADVERTISEMENT_BUF: usize = ADVERTISEMENT_MAX + RBS_CHAR_MAX;

/// The most transmissions this engine puts in one message's continuation group, and
/// accepts in one: its XCHAR_REQRXLIM and XCHAR_RESPSXLIM.
pub const CONTINUATION_GROUP_MAX: u32 = 16;

const EXTENSIONS_ID_BYTES: [u8; 4] = EXTENSIONS_IDENTIFIER.to_be_bytes();

/// Flag bit: responder-provided Read chunks with RDMA_DONE pull completion
/// (draft-cel-nfsv4-rpcrdma-reliable-reply §4).
const EXT_REPLY_READ_CHUNKS: u32 = 0x1;

/// Flag bit: message continuation (draft-dnoveck-rpcrdma-rtrext §4: ROPT_XMTREQ,
/// ROPT_XMTRESP, ROPT_XMTCONT, ROPT_XMTERR); the characteristics follow the flags.
pub const EXT_CONTINUATION: u32 = 0x2;

/// Protocol extensions beyond RPC-over-RDMA version 1 that one peer supports, or (after
/// [`Extensions::negotiate`]) that both do and so may be used (the draft's §6: "MUST
/// be used only when both peers support them").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Extensions {
    /// Responder-provided Position-Zero Read chunks in replies, answered with
    /// RDMA_DONE (draft-cel-nfsv4-rpcrdma-reliable-reply §4.1).
    pub reply_read_chunks: bool,
    /// Message continuation: a call or reply over several Sends
    /// (draft-dnoveck-rpcrdma-rtrext §4).
    pub continuation: bool,
}

impl Extensions {
    /// No extension: plain RPC-over-RDMA version 1.
    pub const NONE: Extensions = Extensions {
        reply_read_chunks: false,
        continuation: false,
    };

    /// Every extension this engine implements.
    pub const ALL: Extensions = Extensions {
        reply_read_chunks: true,
        continuation: true,
    };

    /// True when no extension is set.
    pub const fn is_empty(&self) -> bool {
        !self.reply_read_chunks && !self.continuation
    }

    /// What both ends may use: each extension needs both advertisements.
    pub const fn negotiate(local: Extensions, peer: Extensions) -> Extensions {
        Extensions {
            reply_read_chunks: local.reply_read_chunks && peer.reply_read_chunks,
            continuation: local.continuation && peer.continuation,
        }
    }

    const fn flags(&self) -> u32 {
        let mut flags = 0;
        if self.reply_read_chunks {
            flags |= EXT_REPLY_READ_CHUNKS;
        }
        if self.continuation {
            flags |= EXT_CONTINUATION;
        }
        flags
    }

    /// The advertisement's head (identifier, flags word).
    pub const fn to_bytes(&self) -> [u8; EXTENSIONS_LEN] {
        let id = EXTENSIONS_ID_BYTES;
        let f = self.flags().to_be_bytes();
        [id[0], id[1], id[2], id[3], f[0], f[1], f[2], f[3]]
    }

    /// The offset just after the first extension head in `buf`, and its flags.
    fn find_head(buf: &[u8]) -> Option<(usize, u32)> {
        for (offset, window) in buf.windows(EXTENSIONS_ID_BYTES.len()).enumerate() {
            if window != EXTENSIONS_ID_BYTES {
                continue;
            }
            if let Some(f) = buf.get(offset + 4..offset + EXTENSIONS_LEN) {
                return Some((
                    offset + EXTENSIONS_LEN,
                    u32::from_be_bytes([f[0], f[1], f[2], f[3]]),
                ));
            }
        }
        None
    }

    /// Searches a received private-data buffer for an extension advertisement, at any
    /// octet offset (as RFC 8797 §5.2 does for its own identifier). Absent, or cut short
    /// by the end of the buffer: no extensions. Flag bits this engine does not know are
    /// ignored, so a later format can add some. Continuation whose characteristics do
    /// not decode counts as not offered.
    pub fn find(buf: &[u8]) -> Extensions {
        match Extensions::find_head(buf) {
            Some((at, flags)) => Extensions {
                reply_read_chunks: flags & EXT_REPLY_READ_CHUNKS != 0,
                continuation: flags & EXT_CONTINUATION != 0
                    && Extensions::chars_at(buf, at).is_some(),
            },
            None => Extensions::NONE,
        }
    }

    fn chars_at(buf: &[u8], at: usize) -> Option<TransportChars> {
        let mut cur = XdrCursor::new(buf.get(at..)?);
        TransportChars::decode(&mut cur).ok()
    }

    /// The peer's transport characteristics in a received private-data buffer: those it
    /// advertised with continuation, else the draft's defaults (§8.1: no RTR support,
    /// one transmission each way).
    pub fn find_chars(buf: &[u8]) -> TransportChars {
        match Extensions::find_head(buf) {
            Some((at, flags)) if flags & EXT_CONTINUATION != 0 => {
                Extensions::chars_at(buf, at).unwrap_or(TransportChars::DEFAULT)
            }
            _ => TransportChars::DEFAULT,
        }
    }
}

/// The characteristics this engine advertises with continuation: all three RTR
/// operations, [`CONTINUATION_GROUP_MAX`] transmissions each way, no receive buffer
/// structure (so the default: one non-DDP segment, no send-based DDP).
pub const LOCAL_CHARS: TransportChars = TransportChars {
    rtr_support: RTRS_XREQ | RTRS_XRESP | RTRS_XCONT | RTRS_SDDP_REPLY,
    recv_buf: None,
    req_rx_limit: CONTINUATION_GROUP_MAX,
    resp_sx_limit: CONTINUATION_GROUP_MAX,
};

/// [`LOCAL_CHARS`] encoded, by hand so that [`Advertisement::new`] stays `const`
/// (`wire_private_data` checks it against the codec).
const fn local_chars_bytes() -> [u8; CHARS_LEN] {
    let words = [
        3,
        XCHAR_RTRSUPP,
        4,
        LOCAL_CHARS.rtr_support,
        XCHAR_REQRXLIM,
        4,
        LOCAL_CHARS.req_rx_limit,
        XCHAR_RESPSXLIM,
        4,
        LOCAL_CHARS.resp_sx_limit,
    ];
    let mut out = [0u8; CHARS_LEN];
    let mut i = 0;
    while i < words.len() {
        let b = words[i].to_be_bytes();
        out[4 * i] = b[0];
        out[4 * i + 1] = b[1];
        out[4 * i + 2] = b[2];
        out[4 * i + 3] = b[3];
        i += 1;
    }
    out
}

/// What one end puts into the CM private data: the RFC 8797 version 1 message, followed
/// by the extension advertisement when any extension is offered (see
/// [`EXTENSIONS_IDENTIFIER`] for why a version-1-only peer never notices it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Advertisement {
    bytes: [u8; ADVERTISEMENT_BUF],
    len: u8,
}

impl Advertisement {
    /// [`PrivateData::DEFAULT`] and no extensions.
    pub const DEFAULT: Advertisement =
        match Advertisement::new(&PrivateData::DEFAULT, Extensions::NONE) {
            Ok(a) => a,
            // Evaluated at compile time: the default always encodes.
            Err(_) => panic!("the default private data encodes"),
        };

    /// `pd` (which must encode), then `ext` unless it is empty.
    ///
    /// # Errors
    /// As [`PrivateData::to_bytes`].
    pub const fn new(pd: &PrivateData, ext: Extensions) -> Result<Self, PrivateDataEncodeError> {
        let v1 = match pd.to_bytes() {
            Ok(b) => b,
            Err(e) => return Err(e),
        };
        let mut bytes = [0u8; ADVERTISEMENT_BUF];
        let mut i = 0;
        while i < ENCODED_LEN {
            bytes[i] = v1[i];
            i += 1;
        }
        if ext.is_empty() {
            return Ok(Advertisement {
                bytes,
                len: ENCODED_LEN as u8,
            });
        }
        let e = ext.to_bytes();
        let mut j = 0;
        while j < EXTENSIONS_LEN {
            bytes[ENCODED_LEN + j] = e[j];
            j += 1;
        }
        if !ext.continuation {
            return Ok(Advertisement {
                bytes,
                len: (ENCODED_LEN + EXTENSIONS_LEN) as u8,
            });
        }
        let c = local_chars_bytes();
        let mut k = 0;
        while k < CHARS_LEN {
            bytes[ENCODED_LEN + EXTENSIONS_LEN + k] = c[k];
            k += 1;
        }
        Ok(Advertisement {
            bytes,
            len: ADVERTISEMENT_MAX as u8,
        })
    }

    /// [`Advertisement::new`] with `chars` in place of [`LOCAL_CHARS`] when
    /// continuation is offered, its receive buffer structure included when set (a
    /// responder's, in the accept: [`RBS_CHAR_MAX`] octets more than a REQ holds).
    ///
    /// # Errors
    /// As [`PrivateData::to_bytes`].
    pub fn with_chars(
        pd: &PrivateData,
        ext: Extensions,
        chars: &TransportChars,
    ) -> Result<Self, PrivateDataEncodeError> {
        let mut a = Advertisement::new(pd, ext)?;
        if ext.continuation {
            let at = ENCODED_LEN + EXTENSIONS_LEN;
            let mut enc = super::xdr::XdrEncoder::new(&mut a.bytes[at..]);
            chars
                .encode(&mut enc)
                .map_err(PrivateDataEncodeError::BufferTooSmall)?;
            a.len = (at + enc.finish()) as u8;
        }
        Ok(a)
    }

    /// The octets to send.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

impl core::ops::Deref for Advertisement {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_bytes()
    }
}
