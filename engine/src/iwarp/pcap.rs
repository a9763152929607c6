//! Test support: classic pcap files holding a synthetic TCP/IPv4 conversation, so that
//! bytes produced by these codecs can be checked by Wireshark/tshark before a real
//! provider exists.
//!
//! Each call to [`TcpFlow::send`] becomes one TCP segment with correct sequence and
//! acknowledgement numbers and correct IPv4 and TCP checksums. Wireshark's MPA dissector
//! assumes one FPDU per segment (it checks ULPDU_LENGTH against the segment length), so
//! callers send exactly one frame or FPDU per call.
//!
//! This is not a hot-path module: it writes through `std::io::Write` and builds each
//! packet in a `Vec`.

use std::io::{self, Write};
use std::net::SocketAddrV4;

/// Link-layer header type of the capture (the pcap `LINKTYPE_*` value).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkType {
    /// `LINKTYPE_ETHERNET` (1): Ethernet II frames.
    Ethernet,
    /// `LINKTYPE_IPV4` (228): bare IPv4 packets.
    Ipv4,
}

impl LinkType {
    /// The value in the pcap file header.
    pub const fn value(self) -> u32 {
        match self {
            LinkType::Ethernet => 1,
            LinkType::Ipv4 => 228,
        }
    }
}

/// Writes a classic (microsecond, little-endian) pcap file.
#[derive(Debug)]
pub struct PcapWriter<W: Write> {
    out: W,
    link: LinkType,
    /// Synthetic clock: a fixed start, one millisecond per packet, so files are
    /// reproducible.
    ts_usec: u64,
}

const PCAP_MAGIC: u32 = 0xA1B2_C3D4;
const SNAPLEN: u32 = 262_144;
const EPOCH_USEC: u64 = 1_700_000_000_000_000;

impl<W: Write> PcapWriter<W> {
    /// Writes the file header.
    pub fn new(mut out: W, link: LinkType) -> io::Result<Self> {
        let mut h = [0u8; 24];
        h[0..4].copy_from_slice(&PCAP_MAGIC.to_le_bytes());
        h[4..6].copy_from_slice(&2u16.to_le_bytes());
        h[6..8].copy_from_slice(&4u16.to_le_bytes());
        // thiszone and sigfigs stay zero.
        h[16..20].copy_from_slice(&SNAPLEN.to_le_bytes());
        h[20..24].copy_from_slice(&link.value().to_le_bytes());
        out.write_all(&h)?;
        Ok(PcapWriter {
            out,
            link,
            ts_usec: EPOCH_USEC,
        })
    }

    /// The capture's link type.
    pub fn link(&self) -> LinkType {
        self.link
    }

    /// Appends one packet record.
    pub fn write_packet(&mut self, packet: &[u8]) -> io::Result<()> {
        let len = u32::try_from(packet.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "packet too large"))?;
        let mut h = [0u8; 16];
        h[0..4].copy_from_slice(&((self.ts_usec / 1_000_000) as u32).to_le_bytes());
        h[4..8].copy_from_slice(&((self.ts_usec % 1_000_000) as u32).to_le_bytes());
        h[8..12].copy_from_slice(&len.to_le_bytes());
        h[12..16].copy_from_slice(&len.to_le_bytes());
        self.out.write_all(&h)?;
        self.out.write_all(packet)?;
        self.ts_usec += 1000;
        Ok(())
    }

    /// Flushes and returns the underlying writer.
    pub fn finish(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

/// Which way a segment travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Client (MPA initiator) to server (responder).
    ToServer,
    /// Server to client.
    ToClient,
}

const TCP_FIN: u8 = 0x01;
const TCP_SYN: u8 = 0x02;
const TCP_PSH: u8 = 0x08;
const TCP_ACK: u8 = 0x10;

/// One TCP connection's state for synthesising its segments.
#[derive(Debug, Clone)]
pub struct TcpFlow {
    client: SocketAddrV4,
    server: SocketAddrV4,
    /// Next sequence number, indexed by sender (0 client, 1 server).
    next_seq: [u32; 2],
    ip_id: u16,
}

impl TcpFlow {
    /// A connection between `client` and `server` with the given initial sequence numbers.
    pub fn new(
        client: SocketAddrV4,
        server: SocketAddrV4,
        client_isn: u32,
        server_isn: u32,
    ) -> Self {
        TcpFlow {
            client,
            server,
            next_seq: [client_isn, server_isn],
            ip_id: 1,
        }
    }

    /// Writes the three-way handshake (SYN, SYN-ACK, ACK).
    pub fn open<W: Write>(&mut self, w: &mut PcapWriter<W>) -> io::Result<()> {
        self.segment(w, Direction::ToServer, TCP_SYN, &[])?;
        self.segment(w, Direction::ToClient, TCP_SYN | TCP_ACK, &[])?;
        self.segment(w, Direction::ToServer, TCP_ACK, &[])
    }

    /// Writes one data segment (PSH, ACK) carrying `payload`.
    pub fn send<W: Write>(
        &mut self,
        w: &mut PcapWriter<W>,
        dir: Direction,
        payload: &[u8],
    ) -> io::Result<()> {
        self.segment(w, dir, TCP_PSH | TCP_ACK, payload)
    }

    /// Writes the client's FIN and the server's FIN-ACK, for a tidy end of capture.
    pub fn close<W: Write>(&mut self, w: &mut PcapWriter<W>) -> io::Result<()> {
        self.segment(w, Direction::ToServer, TCP_FIN | TCP_ACK, &[])?;
        self.segment(w, Direction::ToClient, TCP_FIN | TCP_ACK, &[])?;
        self.segment(w, Direction::ToServer, TCP_ACK, &[])
    }

    /// The sequence number the next segment from `dir`'s sender will carry.
    pub fn next_seq(&self, dir: Direction) -> u32 {
        self.next_seq[sender(dir)]
    }

    fn segment<W: Write>(
        &mut self,
        w: &mut PcapWriter<W>,
        dir: Direction,
        flags: u8,
        payload: &[u8],
    ) -> io::Result<()> {
        let (src, dst) = match dir {
            Direction::ToServer => (self.client, self.server),
            Direction::ToClient => (self.server, self.client),
        };
        let s = sender(dir);
        let seq = self.next_seq[s];
        // The peer's next sequence number is everything it has sent, so far acked in full.
        let ack = if flags & TCP_ACK != 0 {
            self.next_seq[1 - s]
        } else {
            0
        };
        let ip = ipv4_tcp_packet(src, dst, self.ip_id, seq, ack, flags, payload)?;
        self.ip_id = self.ip_id.wrapping_add(1);
        let consumed_seq = payload.len() as u32 + u32::from(flags & (TCP_SYN | TCP_FIN) != 0);
        self.next_seq[s] = seq.wrapping_add(consumed_seq);
        match w.link() {
            LinkType::Ipv4 => w.write_packet(&ip),
            LinkType::Ethernet => {
                let mut f = Vec::with_capacity(14 + ip.len());
                let (smac, dmac) = match dir {
                    Direction::ToServer => (CLIENT_MAC, SERVER_MAC),
                    Direction::ToClient => (SERVER_MAC, CLIENT_MAC),
                };
                f.extend_from_slice(&dmac);
                f.extend_from_slice(&smac);
                f.extend_from_slice(&0x0800u16.to_be_bytes());
                f.extend_from_slice(&ip);
                w.write_packet(&f)
            }
        }
    }
}

const CLIENT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
const SERVER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];

const fn sender(dir: Direction) -> usize {
    match dir {
        Direction::ToServer => 0,
        Direction::ToClient => 1,
    }
}

/// RFC 1071 one's-complement sum, folded, not yet inverted.
fn ones_sum(mut acc: u32, data: &[u8]) -> u32 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        acc += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        acc += u32::from(*last) << 8;
    }
    while acc > 0xFFFF {
        acc = (acc & 0xFFFF) + (acc >> 16);
    }
    acc
}

fn ipv4_tcp_packet(
    src: SocketAddrV4,
    dst: SocketAddrV4,
    id: u16,
    seq: u32,
    ack: u32,
    flags: u8,
    payload: &[u8],
) -> io::Result<Vec<u8>> {
    let total = 20 + 20 + payload.len();
    let total16 = u16::try_from(total)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "segment exceeds IPv4 size"))?;
    let mut p = Vec::with_capacity(total);
    // IPv4 header: version 4, IHL 5, DF, TTL 64, protocol 6 (TCP).
    p.extend_from_slice(&[0x45, 0]);
    p.extend_from_slice(&total16.to_be_bytes());
    p.extend_from_slice(&id.to_be_bytes());
    p.extend_from_slice(&0x4000u16.to_be_bytes());
    p.extend_from_slice(&[64, 6, 0, 0]);
    p.extend_from_slice(&src.ip().octets());
    p.extend_from_slice(&dst.ip().octets());
    let ip_sum = !(ones_sum(0, &p[..20]) as u16);
    p[10..12].copy_from_slice(&ip_sum.to_be_bytes());
    // TCP header, 20 octets, no options.
    p.extend_from_slice(&src.port().to_be_bytes());
    p.extend_from_slice(&dst.port().to_be_bytes());
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend_from_slice(&ack.to_be_bytes());
    p.extend_from_slice(&[5 << 4, flags]);
    p.extend_from_slice(&65535u16.to_be_bytes());
    p.extend_from_slice(&[0, 0, 0, 0]);
    p.extend_from_slice(payload);
    let tcp_len = (20 + payload.len()) as u16;
    let mut pseudo = [0u8; 12];
    pseudo[0..4].copy_from_slice(&src.ip().octets());
    pseudo[4..8].copy_from_slice(&dst.ip().octets());
    pseudo[9] = 6;
    pseudo[10..12].copy_from_slice(&tcp_len.to_be_bytes());
    let sum = ones_sum(ones_sum(0, &pseudo), &p[20..]);
    let tcp_sum = !(sum as u16);
    p[36..38].copy_from_slice(&tcp_sum.to_be_bytes());
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn checksums_verify_to_zero() {
        let a = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 1), 1234);
        let b = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 2), 5678);
        for payload in [&b""[..], b"x", b"hello world"] {
            let p = ipv4_tcp_packet(a, b, 7, 100, 200, TCP_ACK, payload).expect("small");
            assert_eq!(ones_sum(0, &p[..20]), 0xFFFF, "IPv4 header checksum");
            let mut pseudo = [0u8; 12];
            pseudo[0..4].copy_from_slice(&a.ip().octets());
            pseudo[4..8].copy_from_slice(&b.ip().octets());
            pseudo[9] = 6;
            pseudo[10..12].copy_from_slice(&((p.len() - 20) as u16).to_be_bytes());
            assert_eq!(
                ones_sum(ones_sum(0, &pseudo), &p[20..]),
                0xFFFF,
                "TCP checksum"
            );
        }
    }

    #[test]
    fn sequence_numbers_advance_by_payload_and_syn() {
        let a = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 1), 1234);
        let b = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 2), 5678);
        let mut w = PcapWriter::new(Vec::new(), LinkType::Ipv4).expect("vec");
        let mut f = TcpFlow::new(a, b, 1000, 5000);
        f.open(&mut w).expect("vec");
        assert_eq!(f.next_seq(Direction::ToServer), 1001);
        assert_eq!(f.next_seq(Direction::ToClient), 5001);
        f.send(&mut w, Direction::ToServer, b"abcd").expect("vec");
        assert_eq!(f.next_seq(Direction::ToServer), 1005);
        let bytes = w.finish().expect("vec");
        // 24-octet file header, then 4 records of 16 + 40 (+4) octets.
        assert_eq!(bytes.len(), 24 + 4 * (16 + 40) + 4);
        assert_eq!(&bytes[20..24], &228u32.to_le_bytes());
    }
}
