//! Device settings, and the optional tap that shows a test what went on the wire.

use core::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::fabric::PrivateDataLimits;
use crate::iwarp::mpa::{Revision, MAX_PRIVATE_DATA_LEN, MAX_ULP_PRIVATE_DATA_LEN};

/// Sees every MPA frame and FPDU a device writes, for tests that compare the wire with
/// a packet capture. Called on the poller thread, inside `poll`, when the frame is
/// built (before it is written); an implementation may allocate (the device does not
/// when no tap is set).
pub trait WireTap: Send + Sync {
    /// An MPA Request or Reply frame, whole.
    fn mpa_frame(&self, local: SocketAddr, peer: SocketAddr, frame: &[u8]);
    /// One FPDU: `head` is the MPA length field and DDP/RDMAP header, `payload` the
    /// segment payload in pieces (their concatenation), `trailer` the pad and CRC.
    fn fpdu(
        &self,
        local: SocketAddr,
        peer: SocketAddr,
        head: &[u8],
        payload: &[&[u8]],
        trailer: &[u8],
    );
}

/// Settings of a siw device.
#[derive(Clone)]
pub struct SiwConfig {
    /// Ask for MPA CRCs. CRCs are used when either side asks (RFC 5044 §7.1), so with
    /// `false` they are still used towards a peer that wants them.
    pub crc: bool,
    /// MPA revision to initiate with; revision 2 (RFC 6581) exchanges IRD/ORD.
    /// Both revisions are accepted as responder.
    pub revision: Revision,
    /// Inbound RDMA Read Requests we accept outstanding per connection (our IRD).
    pub ird: u16,
    /// Outbound RDMA Reads we want outstanding per connection (our ORD); the peer's IRD
    /// caps it.
    pub ord: u16,
    /// Clamp the TCP maximum segment size of our sockets (`TCP_MAXSEG`, set before
    /// connecting or listening), which also shrinks the MULPDU. `None` keeps the route's.
    pub mss: Option<u32>,
    /// `SO_SNDBUF` and `SO_RCVBUF` of every siw socket, in octets, set before connecting
    /// or listening (an accepted socket inherits its listener's, and TCP picks its
    /// window scale from the receive buffer at that point). The kernel caps them at
    /// `net.core.wmem_max` / `rmem_max` and doubles them for its bookkeeping; a set size
    /// also turns that socket's buffer autotuning off. They are limits, not allocations:
    /// an idle connection holds nothing. The default, 4 MiB, lets a long message's
    /// writes and reads run a whole MiB or more ahead of the other side from the first
    /// message on, where autotuning starts at 16 KiB (send) and 128 KiB (receive) and
    /// grows with what was read (engine/DESIGN.md, "siw: socket buffers"). `None`
    /// leaves the kernel's autotuning. Not on the wire beyond the advertised window.
    pub socket_buffers: Option<u32>,
    /// When a Send or RDMA Write completes. With `false` (the default, as Linux siw) a
    /// Send or Write completes once its last FPDU is written to the socket: TCP has
    /// copied the octets, so the buffer is the application's again, and the stream
    /// delivers them in order or the connection fails. A remote failure (a bad STag, no
    /// receive, a receive too short) then moves the queue pair to the error state with
    /// the peer's Terminate (`QueuePair::peer_abort`), and what was posted after the
    /// failing message flushes, but the request it belongs to has already completed
    /// successfully. See [`SiwConfig::strict`] for the other answer.
    ///
    /// With `true` (strict RC semantics, [`SiwConfig::strict`]) a signaled Send or Write
    /// completes only once the peer has provably executed it, as RC hardware reports
    /// it, so that a remote failure reaches the request it belongs to. iWARP has no
    /// acknowledgements, so after signaled Sends and Writes the device issues a
    /// zero-length RDMA Read (legal per RFC 5040; RFC 6581 uses one as its RTR message):
    /// its response proves that everything before it was executed. It costs a message
    /// each way per signaled request, most of siw's round-trip latency (issue 14), and a
    /// userspace peer answers the Read only while it polls.
    ///
    /// Why the RPC engine does not need it (engine/DESIGN.md, "siw: what a completion
    /// means"): a reply proves the call's Send was executed, a lost connection is
    /// covered by the requester's retransmission, and a reply context or registration
    /// released on a Send's completion only needs the octets out of its buffer.
    pub confirm_completions: bool,
    /// With strict completions: write a confirmation Read with its own `sendmsg`, so it travels in a TCP segment
    /// of its own and a capture shows exactly one FPDU per segment (the default; the
    /// wire rule of issue 7). With `false` it shares the write, and so the segment, of
    /// the FPDU it confirms.
    ///
    /// Sharing makes the two reach the peer in one piece, so a peer that stops polling as
    /// soon as it has seen a message has, in that same poll, also answered the Read that
    /// confirms it. In their own segments they arrive back to back (the first is held
    /// with `MSG_MORE` until the second is written) but not atomically: a userspace peer
    /// that reads between the two and then stops polling for good leaves the completion
    /// waiting, since unlike RC hardware it acknowledges nothing unless polled. Peers
    /// that keep polling while the other side may need them (any server does) are safe.
    pub confirmation_own_segment: bool,
    /// Coalesce consecutive posted Sends into one `sendmsg` while their FPDUs, whole,
    /// fit one TCP segment (the default), as Linux siw packs FPDUs into a segment with
    /// `MSG_MORE` while room is left. A group of Sends posted together (message
    /// continuation) then costs the peer one read and one wake-up, not one per Send.
    /// With `false` every FPDU is written, and travels, alone: a capture shows one FPDU
    /// per segment even for back-to-back Sends (Wireshark's MPA dissector hands only
    /// the first FPDU of a segment on).
    pub coalesce_sends: bool,
    /// Write up to eight consecutive FPDUs of one long message (a Send, Write or Read
    /// Response longer than a segment) with one `sendmsg` (the default; off in
    /// [`strict`](Self::strict)). Each FPDU is still sized to the EMSS, and TCP cuts the
    /// write into segments of that size, so they mostly stay one FPDU per segment, but
    /// a write no longer ends each FPDU with `MSG_EOR`. One system call per FPDU
    /// (33 per MiB on loopback, whose MSS is 32741) was most of what a 1 MiB Send cost
    /// beyond a TCP stream's (issue 14; engine/DESIGN.md, "siw: a long message's FPDUs
    /// in one write"). With `false` every FPDU of a long message is a write of its own,
    /// so a capture shows exactly one FPDU per segment.
    pub batch_message_fpdus: bool,
    /// Read several FPDUs of one long Send or Read Response with one `readv` (the
    /// default; off in [`strict`](Self::strict)): after the rest of the current
    /// segment's payload, the read also takes the next FPDUs' headers into a scratch
    /// area and their payloads straight into the receive (or the Read's sink), where
    /// the next segments would put them if they are the size of the current one
    /// (engine/DESIGN.md, "siw: reading several FPDUs of a Send at once"). Every header
    /// is still parsed and checked, with its CRC, before the payload behind it counts;
    /// octets that were not where predicted are parsed again from a copy. What it
    /// changes for the application: a receive's octets past the received length (its
    /// completion's `byte_len`), up to one FPDU's worth in the scatter entry the message
    /// ended in, may be overwritten with stream octets (pad, CRC, the next message's
    /// header) instead of keeping what they held; a Read's sink is never written past
    /// the Read's size. With `false` each FPDU's payload is one read, and nothing past a
    /// message is written.
    pub predict_fpdus: bool,
    /// Registrations plus fast-registration slots.
    pub max_mr: u32,
    /// Largest queue depth.
    pub max_qp_wr: u32,
    /// Largest completion-queue depth.
    pub max_cq_depth: u32,
    /// Bytes of the per-connection receive buffer (one `read` at most).
    pub rx_buffer: usize,
    /// Sees every frame on the wire (tests).
    pub tap: Option<Arc<dyn WireTap>>,
    /// How long a connection may take from TCP accept (or connect) to the end of the MPA
    /// exchange; past it the socket is closed (a connect fails as unreachable or
    /// rejected). Bounds what a peer that connects and says nothing can hold.
    pub handshake_timeout: Duration,
    /// Accepted TCP connections whose MPA Request has not arrived yet; one beyond this
    /// is closed at once.
    pub max_pending_handshakes: usize,
    /// TCP keepalive on every siw socket, so a peer host that vanished without a reset
    /// is noticed; also sets `TCP_USER_TIMEOUT` to the same total, so unacknowledged
    /// data times out alike. `None` leaves the kernel's defaults (no keepalive).
    pub keepalive: Option<TcpKeepalive>,
    /// Where STags come from: `None` (the default) draws them under a secret from the
    /// OS, so peers cannot predict them; a seed makes them reproducible.
    pub key_seed: Option<u64>,
}

/// TCP keepalive settings (`SO_KEEPALIVE`, `TCP_KEEPIDLE`, `TCP_KEEPINTVL`,
/// `TCP_KEEPCNT`): a connection silent for `idle` is probed every `interval`, and
/// declared dead after `count` unanswered probes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpKeepalive {
    /// Silence before the first probe (whole seconds, at least one).
    pub idle: Duration,
    /// Between probes (whole seconds, at least one).
    pub interval: Duration,
    /// Unanswered probes before the connection is dropped.
    pub count: u32,
}

impl TcpKeepalive {
    /// How long a dead peer can go unnoticed: `idle + interval * count`.
    pub fn total(&self) -> Duration {
        self.idle + self.interval * self.count
    }
}

impl Default for TcpKeepalive {
    fn default() -> Self {
        TcpKeepalive {
            idle: Duration::from_secs(30),
            interval: Duration::from_secs(5),
            count: 4,
        }
    }
}

/// The default [`SiwConfig::socket_buffers`]: 4 MiB. The kernel caps it at
/// `net.core.wmem_max`/`rmem_max` (212992 octets on a stock kernel; raise them for the
/// full size).
pub const SOCKET_BUFFERS: u32 = 4 * 1024 * 1024;

impl Default for SiwConfig {
    fn default() -> Self {
        SiwConfig {
            crc: true,
            revision: Revision::V2,
            ird: 16,
            ord: 16,
            mss: None,
            socket_buffers: Some(SOCKET_BUFFERS),
            confirm_completions: false,
            confirmation_own_segment: true,
            coalesce_sends: true,
            batch_message_fpdus: true,
            predict_fpdus: true,
            max_mr: 16 * 1024,
            max_qp_wr: 4096,
            max_cq_depth: 1 << 20,
            rx_buffer: 64 * 1024,
            tap: None,
            handshake_timeout: Duration::from_secs(10),
            max_pending_handshakes: 128,
            keepalive: Some(TcpKeepalive::default()),
            key_seed: None,
        }
    }
}

impl fmt::Debug for SiwConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SiwConfig")
            .field("crc", &self.crc)
            .field("revision", &self.revision)
            .field("ird", &self.ird)
            .field("ord", &self.ord)
            .field("mss", &self.mss)
            .field("socket_buffers", &self.socket_buffers)
            .field("confirm_completions", &self.confirm_completions)
            .field("confirmation_own_segment", &self.confirmation_own_segment)
            .field("coalesce_sends", &self.coalesce_sends)
            .field("batch_message_fpdus", &self.batch_message_fpdus)
            .field("predict_fpdus", &self.predict_fpdus)
            .field("max_mr", &self.max_mr)
            .field("max_qp_wr", &self.max_qp_wr)
            .field("max_cq_depth", &self.max_cq_depth)
            .field("rx_buffer", &self.rx_buffer)
            .field("tap", &self.tap.is_some())
            .field("handshake_timeout", &self.handshake_timeout)
            .field("max_pending_handshakes", &self.max_pending_handshakes)
            .field("keepalive", &self.keepalive)
            .field("key_seed", &self.key_seed)
            .finish()
    }
}

impl SiwConfig {
    /// The default settings with strict completions ([`SiwConfig::confirm_completions`]
    /// `true`): a signaled Send or Write completes once a zero-length Read proves the
    /// peer executed it, so a remote failure is reported on the request it belongs to,
    /// as the fabric conformance suite checks. Wire-compatible with Linux siw either way.
    pub fn strict() -> SiwConfig {
        SiwConfig {
            confirm_completions: true,
            batch_message_fpdus: false,
            predict_fpdus: false,
            ..SiwConfig::default()
        }
    }

    /// What the driver sets on a socket before connecting or listening.
    pub(crate) fn sock_opts(&self) -> super::sock::SockOpts {
        super::sock::SockOpts {
            mss: self.mss,
            buffers: self.socket_buffers,
        }
    }

    /// Private data this configuration carries per connection message.
    ///
    /// The MPA private-data field holds at most 512 octets (RFC 5044 §7.1), and in
    /// revision 2 the RFC 6581 IRD/ORD words are the first 4 of them, so the upper layer
    /// gets 508 there and 512 in revision 1. A connect request uses our own revision;
    /// accept and reject answer in the peer's, which we cannot know in advance, so they
    /// are held to 508. Linux siw refuses frames with more than 256 octets
    /// (`MPA_MAX_PRIVDATA`), so stay within 252 to reach a kernel peer.
    pub fn private_data_limits(&self) -> PrivateDataLimits {
        let connect = match self.revision {
            Revision::V1 => MAX_PRIVATE_DATA_LEN,
            Revision::V2 => MAX_ULP_PRIVATE_DATA_LEN,
        };
        PrivateDataLimits {
            connect,
            accept: MAX_ULP_PRIVATE_DATA_LEN,
            reject: MAX_ULP_PRIVATE_DATA_LEN,
            reject_padded: false,
        }
    }
}
