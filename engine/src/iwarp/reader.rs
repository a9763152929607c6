//! Incremental FPDU parser for an inbound byte stream.
//!
//! TCP hands over bytes in arbitrary pieces; an FPDU may span reads and a read may hold
//! many FPDUs. [`FpduReader`] takes whatever arrived and reports, one step at a time:
//!
//! 1. [`FpduEvent::Header`] once the length field and the DDP/RDMAP header are complete
//!    (these few octets are the only ones it copies, into a fixed array);
//! 2. zero or more [`FpduEvent::Payload`] slices of the caller's input, each with its
//!    offset inside the segment, so data can be placed straight into the target buffer
//!    (tagged: STag/TO, untagged: the posted buffer at MO), as DDP intends;
//! 3. [`FpduEvent::End`] once pad and CRC have been read and the CRC checked.
//!
//! Because payload is handed out before the CRC arrives, a CRC failure is only known at
//! the end of the segment: the caller must then treat the connection as broken (RFC 5044
//! §8: send a Terminate and close), which also makes whatever was placed irrelevant.
//!
//! After any error the reader stays failed and returns the same error; the stream has
//! lost framing and cannot be resynchronised without markers.

use super::crc32c::Crc32c;
use super::ddp::DdpControl;
use super::fpdu::{
    check_ulpdu_len, crc_from_wire, pad_len, FpduError, CRC_LEN, LENGTH_FIELD_LEN, MAX_HEAD_LEN,
    MAX_TRAILER_LEN, MAX_ULPDU_LEN,
};
use super::octets::be16;
use super::rdmap::{SegmentError, SegmentHeader};

/// What one [`FpduReader::step`] produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FpduEvent<'a> {
    /// A segment's header is complete.
    Header {
        /// The DDP/RDMAP header.
        header: SegmentHeader,
        /// Payload octets this segment carries.
        payload_len: usize,
    },
    /// Payload octets, in order.
    Payload {
        /// Offset of `data[0]` within this segment's payload.
        offset: usize,
        /// The octets (a slice of the input passed to `step`).
        data: &'a [u8],
    },
    /// The segment is complete and its CRC (if enabled) is correct.
    End,
}

/// Result of one [`FpduReader::step`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step<'a> {
    /// Input octets used; pass the rest to the next call.
    pub consumed: usize,
    /// What happened, or `None` when all input was used up without completing anything
    /// (then `consumed` equals the input length).
    pub event: Option<FpduEvent<'a>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Collecting length field and header into `head`.
    Head,
    /// Handing out payload.
    Payload,
    /// Collecting pad and CRC into `trailer`.
    Trailer,
}

/// Sans-IO FPDU stream parser. Holds no allocation; about 60 bytes of state.
#[derive(Debug, Clone)]
pub struct FpduReader {
    crc_enabled: bool,
    max_ulpdu: usize,
    phase: Phase,
    head: [u8; MAX_HEAD_LEN],
    head_have: usize,
    /// Length field plus header once known; 0 until the control octet arrives.
    head_need: usize,
    ulpdu_len: usize,
    payload_len: usize,
    payload_done: usize,
    trailer: [u8; MAX_TRAILER_LEN],
    trailer_have: usize,
    crc: Crc32c,
    /// `crc` already covers the current FPDU up to its CRC field (payload and pad
    /// included): the FPDU was whole in the input its header came in, so it was fed in
    /// one piece (issue 14: one call instead of one each for header, payload and pad).
    crc_ahead: bool,
    /// The consumer excused a CRC mismatch of the current FPDU ([`FpduReader::waive_crc`]).
    crc_waived: bool,
    /// CRC mismatches excused so far.
    waived_mismatches: u64,
    failed: Option<FpduError>,
}

impl FpduReader {
    /// A reader for a stream on which CRCs were (`crc`) or were not negotiated, accepting
    /// any ULPDU length the field can express.
    pub fn new(crc: bool) -> Self {
        Self::with_max_ulpdu(crc, MAX_ULPDU_LEN)
    }

    /// As [`FpduReader::new`], rejecting ULPDUs longer than `max_ulpdu`.
    pub fn with_max_ulpdu(crc: bool, max_ulpdu: usize) -> Self {
        FpduReader {
            crc_enabled: crc,
            max_ulpdu: max_ulpdu.min(MAX_ULPDU_LEN),
            phase: Phase::Head,
            head: [0; MAX_HEAD_LEN],
            head_have: 0,
            head_need: 0,
            ulpdu_len: 0,
            payload_len: 0,
            payload_done: 0,
            trailer: [0; MAX_TRAILER_LEN],
            trailer_have: 0,
            crc: Crc32c::new(),
            crc_ahead: false,
            crc_waived: false,
            waived_mismatches: 0,
            failed: None,
        }
    }

    /// Excuses a CRC mismatch of the FPDU whose header was just handed out: its trailer
    /// is still checked, but a mismatch is counted ([`waived_mismatches`]) and the FPDU
    /// ends normally instead of failing the stream. For a consumer that places nothing
    /// of this FPDU's payload and has checked its header against what it expects; the
    /// waiver lapses at the next header.
    ///
    /// [`waived_mismatches`]: Self::waived_mismatches
    pub fn waive_crc(&mut self) {
        self.crc_waived = true;
    }

    /// CRC mismatches excused by [`waive_crc`](Self::waive_crc) so far.
    pub fn waived_mismatches(&self) -> u64 {
        self.waived_mismatches
    }

    /// Whether the reader sits exactly between FPDUs (no partial FPDU buffered).
    #[inline]
    pub fn at_boundary(&self) -> bool {
        self.failed.is_none() && self.phase == Phase::Head && self.head_have == 0
    }

    /// Payload octets of the current segment not handed out yet (0 outside a payload).
    #[inline]
    pub fn payload_remaining(&self) -> usize {
        if self.failed.is_none() && self.phase == Phase::Payload {
            self.payload_len - self.payload_done
        } else {
            0
        }
    }

    /// Offset within the current segment's payload of its next octet.
    #[inline]
    pub fn payload_offset(&self) -> usize {
        self.payload_done
    }

    /// Accounts for payload the caller took off the stream itself (read from the socket
    /// straight into its destination): `data` is the next octets of the payload, and
    /// goes into the CRC as if [`step`](Self::step) had handed it out. Octets past
    /// [`payload_remaining`](Self::payload_remaining) are not payload and are ignored.
    /// Returns the offset of `data[0]` within the payload.
    pub fn take_payload(&mut self, data: &[u8]) -> usize {
        let n = data.len().min(self.payload_remaining());
        if self.crc_enabled && !self.crc_ahead {
            self.crc.update(&data[..n]);
        }
        let offset = self.payload_done;
        self.payload_done += n;
        if n > 0 && self.payload_done == self.payload_len {
            self.phase = Phase::Trailer;
        }
        offset
    }

    /// Consumes input up to the next event.
    // `always`: the consumer's loop calls this three times per FPDU, and the event it
    // returns is matched right there (issue 14).
    #[inline(always)]
    pub fn step<'a>(&mut self, input: &'a [u8]) -> Result<Step<'a>, FpduError> {
        if let Some(e) = self.failed {
            return Err(e);
        }
        let r = match self.phase {
            Phase::Head => self.step_head(input),
            Phase::Payload => Ok(self.step_payload(input)),
            Phase::Trailer => self.step_trailer(input),
        };
        if let Err(e) = r {
            self.failed = Some(e);
        }
        r
    }

    fn step_head<'a>(&mut self, input: &'a [u8]) -> Result<Step<'a>, FpduError> {
        if self.head_have == 0 {
            if let Some(step) = self.whole_head(input) {
                return step;
            }
        }
        let mut used = 0;
        loop {
            let want = if self.head_need != 0 {
                self.head_need
            } else if self.head_have < LENGTH_FIELD_LEN {
                LENGTH_FIELD_LEN
            } else {
                LENGTH_FIELD_LEN + 1
            };
            let n = (want - self.head_have).min(input.len() - used);
            self.head[self.head_have..self.head_have + n].copy_from_slice(&input[used..used + n]);
            self.head_have += n;
            used += n;
            if self.head_have < want {
                return Ok(Step {
                    consumed: used,
                    event: None,
                });
            }
            if self.head_need == 0 {
                if self.head_have == LENGTH_FIELD_LEN {
                    self.ulpdu_len = usize::from(be16(&self.head, 0));
                    check_ulpdu_len(self.ulpdu_len, self.max_ulpdu)?;
                    continue;
                }
                let hlen = DdpControl::from_octet(self.head[LENGTH_FIELD_LEN]).header_len();
                if self.ulpdu_len < hlen {
                    return Err(FpduError::UlpduTooShort {
                        len: self.ulpdu_len,
                        min: hlen,
                    });
                }
                self.head_need = LENGTH_FIELD_LEN + hlen;
                continue;
            }
            // Header complete (checked again there, as the gathering went).
            let (head, need) = (self.head, self.head_need);
            return self
                .head_decoded(&head[..need], need - LENGTH_FIELD_LEN, &[])
                .map(|s| Step {
                    consumed: used,
                    ..s
                });
        }
    }

    /// The common case of [`step_head`](Self::step_head): a whole header at the front
    /// of `input`, decoded where it lies instead of being gathered octet group by octet
    /// group into `head` (issue 14: a third of a small FPDU's parsing). `None` when the
    /// input holds less than a header, for the gathering path; the checks and errors are
    /// the same.
    #[inline]
    fn whole_head<'a>(&mut self, input: &'a [u8]) -> Option<Result<Step<'a>, FpduError>> {
        let control = *input.get(LENGTH_FIELD_LEN)?;
        let hlen = DdpControl::from_octet(control).header_len();
        let need = LENGTH_FIELD_LEN + hlen;
        let head = input.get(..need)?;
        Some(self.head_decoded(head, hlen, input))
    }

    /// Takes a complete length field and header (`head`, `hlen` octets of header).
    /// `input` is where `head` lies at the front of (empty if it was gathered): when it
    /// holds the FPDU up to its CRC field, the CRC is fed all of that at once.
    fn head_decoded<'a>(
        &mut self,
        head: &[u8],
        hlen: usize,
        input: &[u8],
    ) -> Result<Step<'a>, FpduError> {
        let ulpdu_len = usize::from(be16(head, 0));
        check_ulpdu_len(ulpdu_len, self.max_ulpdu)?;
        if ulpdu_len < hlen {
            return Err(FpduError::UlpduTooShort {
                len: ulpdu_len,
                min: hlen,
            });
        }
        let (header, hlen) = SegmentHeader::decode(&head[LENGTH_FIELD_LEN..])
            .map_err(|e: SegmentError| FpduError::Segment(e))?;
        self.ulpdu_len = ulpdu_len;
        self.crc = Crc32c::new();
        self.crc_waived = false;
        self.crc_ahead = false;
        if self.crc_enabled {
            // The octets the CRC covers: length field, header, payload and pad.
            let covered = LENGTH_FIELD_LEN + ulpdu_len + pad_len(ulpdu_len);
            match input.get(..covered) {
                Some(all) => {
                    self.crc.update(all);
                    self.crc_ahead = true;
                }
                None => self.crc.update(head),
            }
        }
        self.payload_len = ulpdu_len - hlen;
        self.payload_done = 0;
        self.phase = if self.payload_len == 0 {
            Phase::Trailer
        } else {
            Phase::Payload
        };
        Ok(Step {
            consumed: head.len(),
            event: Some(FpduEvent::Header {
                header,
                payload_len: self.payload_len,
            }),
        })
    }

    fn step_payload<'a>(&mut self, input: &'a [u8]) -> Step<'a> {
        let n = (self.payload_len - self.payload_done).min(input.len());
        if n == 0 {
            return Step {
                consumed: 0,
                event: None,
            };
        }
        let data = &input[..n];
        if self.crc_enabled && !self.crc_ahead {
            self.crc.update(data);
        }
        let offset = self.payload_done;
        self.payload_done += n;
        if self.payload_done == self.payload_len {
            self.phase = Phase::Trailer;
        }
        Step {
            consumed: n,
            event: Some(FpduEvent::Payload { offset, data }),
        }
    }

    fn step_trailer<'a>(&mut self, input: &'a [u8]) -> Result<Step<'a>, FpduError> {
        let pad = pad_len(self.ulpdu_len);
        let want = pad + CRC_LEN;
        let n = (want - self.trailer_have).min(input.len());
        self.trailer[self.trailer_have..self.trailer_have + n].copy_from_slice(&input[..n]);
        self.trailer_have += n;
        if self.trailer_have < want {
            return Ok(Step {
                consumed: n,
                event: None,
            });
        }
        if self.crc_enabled {
            if !self.crc_ahead {
                self.crc.update(&self.trailer[..pad]);
            }
            let received = crc_from_wire([
                self.trailer[pad],
                self.trailer[pad + 1],
                self.trailer[pad + 2],
                self.trailer[pad + 3],
            ]);
            if self.crc.value() != received && self.crc_waived {
                self.waived_mismatches += 1;
            } else if self.crc.value() != received {
                return Err(FpduError::CrcMismatch {
                    computed: self.crc.value(),
                    received,
                });
            }
        }
        self.phase = Phase::Head;
        self.head_have = 0;
        self.head_need = 0;
        self.trailer_have = 0;
        Ok(Step {
            consumed: n,
            event: Some(FpduEvent::End),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::iwarp::fpdu::encode_fpdu;
    use crate::iwarp::rdmap::Opcode;

    /// Steps `input` (fed `chunk` octets at a time) to the end or the first error;
    /// returns the payload and whether an End was seen.
    fn run(r: &mut FpduReader, input: &[u8], chunk: usize) -> Result<(Vec<u8>, usize), FpduError> {
        let mut payload = Vec::new();
        let mut ends = 0;
        for piece in input.chunks(chunk) {
            let mut off = 0;
            while off < piece.len() {
                let s = r.step(&piece[off..])?;
                off += s.consumed;
                match s.event {
                    Some(FpduEvent::Payload { data, .. }) => payload.extend_from_slice(data),
                    Some(FpduEvent::End) => ends += 1,
                    _ => {}
                }
            }
        }
        Ok((payload, ends))
    }

    /// Two FPDUs with pad, fed whole (the CRC fed the FPDU in one piece: `crc_ahead`)
    /// and an octet at a time (fed piece by piece): both parse, and a flipped octet in
    /// either FPDU's payload, pad or CRC is a CRC mismatch either way.
    #[test]
    fn a_whole_fpdu_is_crc_checked_in_one_piece_as_when_split() {
        let mut stream = [0u8; 128];
        let h1 = SegmentHeader::untagged(Opcode::Send, true, 0, 1, 0);
        let h2 = SegmentHeader::untagged(Opcode::Send, true, 0, 2, 0);
        let n1 = encode_fpdu(&mut stream, &h1, b"hello", true).expect("fits");
        let n2 = encode_fpdu(&mut stream[n1..], &h2, b"worlds!", true).expect("fits");
        let all = &stream[..n1 + n2];
        for chunk in [all.len(), 1] {
            let got = run(&mut FpduReader::new(true), all, chunk).expect("valid");
            assert_eq!(got, (b"helloworlds!".to_vec(), 2), "chunk {chunk}");
        }
        // Past the 20-octet length field and header of each FPDU: payload, pad, CRC.
        let covered: Vec<usize> = (20..n1).chain(n1 + 20..n1 + n2).collect();
        for at in covered {
            let mut bad = all.to_vec();
            bad[at] ^= 0x01;
            for chunk in [bad.len(), 1] {
                match run(&mut FpduReader::new(true), &bad, chunk) {
                    Err(FpduError::CrcMismatch { .. }) => {}
                    other => panic!("octet {at}, chunk {chunk}: {other:?}"),
                }
            }
        }
    }
}
