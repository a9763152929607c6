//! Connection-manager messages of the shm provider, one per seqpacket message, modelled
//! on the InfiniBand CM exchange: REQ → REP (or REJ) → RTU, then DREQ to disconnect.
//! REQ and REP carry two descriptors: the sender's connection segment and the receiving
//! end of its arena-announcement socket pair.

use crate::fabric::FabricError;
use crate::fabric::{CmPrivateData, MAX_PRIVATE_DATA};

const MAGIC: [u8; 4] = *b"RSCM";
const VERSION: u16 = 1;
/// Largest encoded message: a REQ/REP header (22 bytes), the private-data length and
/// the largest private data.
pub(crate) const MSG_MAX: usize = 24 + MAX_PRIVATE_DATA;

const K_REQ: u16 = 1;
const K_REP: u16 = 2;
const K_REJ: u16 = 3;
const K_RTU: u16 = 4;
const K_DREQ: u16 = 5;

/// What each side tells the other in REQ and REP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Hello {
    /// Length of the sender's connection segment.
    pub seg_len: u64,
    /// The sender's queue-pair number.
    pub qp_num: u32,
    /// The sender's RNR retry count (the receiver enforces it on the sender's Sends).
    pub rnr_retry: u8,
    /// The consumer's private data.
    pub private: CmPrivateData,
}

/// One message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Msg {
    Req(Hello),
    Rep(Hello),
    Rej(CmPrivateData),
    Rtu,
    Dreq,
}

fn put_private(buf: &mut [u8; MSG_MAX], at: usize, p: &CmPrivateData) -> usize {
    buf[at..at + 2].copy_from_slice(&(p.len() as u16).to_le_bytes());
    buf[at + 2..at + 2 + p.len()].copy_from_slice(p.as_bytes());
    at + 2 + p.len()
}

fn get_private(b: &[u8], at: usize) -> Result<CmPrivateData, FabricError> {
    let len = b
        .get(at..at + 2)
        .map(|s| usize::from(u16::from_le_bytes([s[0], s[1]])))
        .ok_or(FabricError::Protocol("truncated private data length"))?;
    if len > MAX_PRIVATE_DATA {
        return Err(FabricError::Protocol("private data too long"));
    }
    let bytes = b
        .get(at + 2..at + 2 + len)
        .ok_or(FabricError::Protocol("truncated private data"))?;
    CmPrivateData::new(bytes)
}

impl Msg {
    /// Encodes into `buf`; returns the length.
    pub(crate) fn encode(&self, buf: &mut [u8; MSG_MAX]) -> usize {
        buf[..4].copy_from_slice(&MAGIC);
        buf[4..6].copy_from_slice(&VERSION.to_le_bytes());
        let kind = match self {
            Msg::Req(_) => K_REQ,
            Msg::Rep(_) => K_REP,
            Msg::Rej(_) => K_REJ,
            Msg::Rtu => K_RTU,
            Msg::Dreq => K_DREQ,
        };
        buf[6..8].copy_from_slice(&kind.to_le_bytes());
        match self {
            Msg::Req(h) | Msg::Rep(h) => {
                buf[8..16].copy_from_slice(&h.seg_len.to_le_bytes());
                buf[16..20].copy_from_slice(&h.qp_num.to_le_bytes());
                buf[20] = h.rnr_retry;
                buf[21] = 0;
                put_private(buf, 22, &h.private)
            }
            Msg::Rej(p) => put_private(buf, 8, p),
            Msg::Rtu | Msg::Dreq => 8,
        }
    }

    /// Decodes one message.
    pub(crate) fn decode(b: &[u8]) -> Result<Msg, FabricError> {
        if b.len() < 8 || b[..4] != MAGIC {
            return Err(FabricError::Protocol("not a shm CM message"));
        }
        if u16::from_le_bytes([b[4], b[5]]) != VERSION {
            return Err(FabricError::Protocol("unsupported shm CM version"));
        }
        let kind = u16::from_le_bytes([b[6], b[7]]);
        let hello = |b: &[u8]| -> Result<Hello, FabricError> {
            let f = b
                .get(8..22)
                .ok_or(FabricError::Protocol("truncated REQ/REP"))?;
            let mut seg = [0u8; 8];
            seg.copy_from_slice(&f[..8]);
            Ok(Hello {
                seg_len: u64::from_le_bytes(seg),
                qp_num: u32::from_le_bytes([f[8], f[9], f[10], f[11]]),
                rnr_retry: f[12],
                private: get_private(b, 22)?,
            })
        };
        match kind {
            K_REQ => Ok(Msg::Req(hello(b)?)),
            K_REP => Ok(Msg::Rep(hello(b)?)),
            K_REJ => Ok(Msg::Rej(get_private(b, 8)?)),
            K_RTU => Ok(Msg::Rtu),
            K_DREQ => Ok(Msg::Dreq),
            _ => Err(FabricError::Protocol("unknown shm CM message kind")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(m: Msg) {
        let mut buf = [0u8; MSG_MAX];
        let n = m.encode(&mut buf);
        assert_eq!(Msg::decode(&buf[..n]).unwrap(), m);
        // Every strict prefix of a message with a body is refused, never misread.
        for cut in 0..n {
            if let Ok(short) = Msg::decode(&buf[..cut]) {
                assert_ne!(short, m);
            }
        }
    }

    #[test]
    fn messages_round_trip() {
        let h = Hello {
            seg_len: 1 << 20,
            qp_num: 77,
            rnr_retry: 7,
            private: CmPrivateData::new(&[9; MAX_PRIVATE_DATA]).unwrap(),
        };
        round_trip(Msg::Req(h));
        round_trip(Msg::Rep(Hello {
            private: CmPrivateData::EMPTY,
            ..h
        }));
        round_trip(Msg::Rej(CmPrivateData::new(b"no").unwrap()));
        round_trip(Msg::Rtu);
        round_trip(Msg::Dreq);
    }

    #[test]
    fn garbage_is_refused() {
        assert!(Msg::decode(b"").is_err());
        assert!(Msg::decode(b"XXXX\x01\x00\x01\x00").is_err());
        assert!(Msg::decode(b"RSCM\x02\x00\x04\x00").is_err());
        assert!(Msg::decode(b"RSCM\x01\x00\x09\x00").is_err());
        // A REJ claiming 300 bytes of private data.
        assert!(Msg::decode(b"RSCM\x01\x00\x03\x00\x2c\x01").is_err());
    }
}
