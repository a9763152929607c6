//! A live loopback capture of the siw provider, checked by Wireshark: tshark captures
//! from before the TCP handshake, two siw devices run every kind of operation (MPA
//! start-up with private data, Send, Send with Invalidate, multi-FPDU RDMA Write, RDMA
//! Read Request and multi-FPDU Read Response, the zero-length confirmation Reads, and a
//! Terminate provoked by a bad STag), and the test then asserts, FPDU by FPDU and field
//! by field, that tshark decodes exactly the frames each sender logged (through its
//! `WireTap`): MPA keys, flags, revision and private data; ULPDU length, pad and CRC
//! verdict; DDP and RDMAP headers; payload octets; Read Request and Terminate bodies.
//!
//! The capture must hold exactly the logged octets in each direction, so nothing went
//! on the wire that the senders did not log. tshark and capture rights are required: the
//! test fails, with an install hint, without them.

use crate::conformance;

use std::collections::BTreeMap;
use std::fs;
use std::io::Read;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use std::sync::OnceLock;

use conformance::{connect_with, pattern, Fixture, Opts};
use rpcrdma::fabric::mr::next_key;
use rpcrdma::fabric::siw::{SiwConfig, SiwDevice, SiwProvider, WireTap};
use rpcrdma::fabric::{
    Access, MemoryRegion, ProtectionDomain, QueuePair, RecvWr, RemoteAddr, SendFlags, SendOp,
    SendWr, WcOpcode, WcStatus,
};
use rpcrdma::iwarp::rdmap::{Opcode, Placement, ReadRequest, SegmentHeader};
use rpcrdma::iwarp::terminate::Terminate;
use rpcrdma::wire::private_data::find_private_data;

const INSTALL_HINT: &str = "tshark with capture rights on `lo` is required for this test: \
     install it with `DEBIAN_FRONTEND=noninteractive apt-get install -y tshark` and run as \
     root (or give dumpcap CAP_NET_RAW/CAP_NET_ADMIN)";

const DEADLINE: Duration = Duration::from_secs(10);

/// RFC 8797 message the client offers (format id, version 1, no options, sizes 1 KiB).
const RPCRDMA_PD: [u8; 8] = [0xf6, 0xab, 0x0e, 0x18, 0x01, 0x00, 0x03, 0x03];

/// Where the RFC 8797 message sits in the client's private data: after another layer's
/// octets, so that the whole ULP field is the revision 2 maximum of 508 (512 minus the
/// IRD/ORD words) and the receiver has to search for the message (RFC 8797 §5.2).
const RPCRDMA_AT: usize = 500;

/// The client's 508 octets: another layer's bytes, then the RFC 8797 message.
fn client_pd() -> Vec<u8> {
    let mut pd = vec![b'x'; RPCRDMA_AT];
    pd.extend_from_slice(&RPCRDMA_PD);
    pd
}

/// The server's 508 octets.
fn server_pd() -> Vec<u8> {
    pattern(77, 508)
}

// ---------------------------------------------------------------------------------------
// What the senders logged.

#[derive(Debug, Clone)]
enum Logged {
    Mpa {
        frame: Vec<u8>,
    },
    Fpdu {
        head: Vec<u8>,
        payload: Vec<u8>,
        trailer: Vec<u8>,
    },
}

impl Logged {
    fn wire_len(&self) -> usize {
        match self {
            Logged::Mpa { frame } => frame.len(),
            Logged::Fpdu {
                head,
                payload,
                trailer,
            } => head.len() + payload.len() + trailer.len(),
        }
    }
}

#[derive(Default)]
struct Log {
    /// By sending address.
    sent: Mutex<BTreeMap<SocketAddr, Vec<Logged>>>,
}

impl WireTap for Log {
    fn mpa_frame(&self, local: SocketAddr, _peer: SocketAddr, frame: &[u8]) {
        let mut m = self.sent.lock().unwrap();
        m.entry(local).or_default().push(Logged::Mpa {
            frame: frame.to_vec(),
        });
    }

    fn fpdu(
        &self,
        local: SocketAddr,
        _peer: SocketAddr,
        head: &[u8],
        payload: &[&[u8]],
        trailer: &[u8],
    ) {
        let mut m = self.sent.lock().unwrap();
        m.entry(local).or_default().push(Logged::Fpdu {
            head: head.to_vec(),
            payload: payload.concat(),
            trailer: trailer.to_vec(),
        });
    }
}

// ---------------------------------------------------------------------------------------
// The capture.

struct Capture {
    child: Child,
    path: PathBuf,
}

impl Capture {
    fn start(port: u16) -> Capture {
        let path =
            std::env::temp_dir().join(format!("rpcrdma-siw-live-{}.pcap", std::process::id()));
        let _ = fs::remove_file(&path);
        let child = Command::new("tshark")
            .args(["-i", "lo", "-q", "-F", "pcap", "-w"])
            .arg(&path)
            .args(["-f", &format!("tcp port {port}")])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run tshark ({e}); {INSTALL_HINT}"));
        let mut cap = Capture { child, path };
        // tshark writes the file header once the interface is open and capturing.
        let end = Instant::now() + DEADLINE;
        loop {
            if fs::metadata(&cap.path).is_ok_and(|m| m.len() >= 24) {
                return cap;
            }
            if let Ok(Some(status)) = cap.child.try_wait() {
                let mut err = String::new();
                if let Some(mut e) = cap.child.stderr.take() {
                    let _ = e.read_to_string(&mut err);
                }
                panic!("tshark exited ({status}) before capturing: {err}\n{INSTALL_HINT}");
            }
            assert!(
                Instant::now() < end,
                "tshark did not start capturing within {DEADLINE:?}; {INSTALL_HINT}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until the file holds `want` TCP payload octets from each sending port, then
    /// stops tshark.
    fn finish(mut self, want: &BTreeMap<u16, usize>) -> PathBuf {
        let end = Instant::now() + DEADLINE;
        loop {
            let got = payload_per_port(&self.path);
            if want
                .iter()
                .all(|(p, n)| got.get(p).copied().unwrap_or(0) >= *n)
            {
                break;
            }
            assert!(
                Instant::now() < end,
                "capture incomplete: want {want:?} payload octets per port, have {got:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        // SAFETY: plain signal to our own child.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGINT) };
        let end = Instant::now() + DEADLINE;
        while self.child.try_wait().ok().flatten().is_none() {
            if Instant::now() > end {
                let _ = self.child.kill();
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.path.clone()
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// TCP payload octets per source port in a classic pcap of Ethernet (loopback) frames,
/// counted by sequence number: a loaded loopback receiver may drop a segment whose
/// retransmission the capture then holds twice, and the stream carries it once.
fn payload_per_port(path: &Path) -> BTreeMap<u16, usize> {
    crate::siw_rpc_tshark::tcp_payload_per_port(path)
}

// ---------------------------------------------------------------------------------------
// PDML: per packet, fields in document order.

#[derive(Debug, Clone)]
struct Field {
    name: String,
    show: String,
    showname: String,
    value: String,
}

fn unescape(s: &str) -> String {
    s.replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}

fn attr(tag: &str, name: &str) -> Option<String> {
    let key = format!(" {name}=\"");
    let start = tag.find(&key)? + key.len();
    let end = tag[start..].find('"')? + start;
    Some(unescape(&tag[start..end]))
}

fn parse_pdml(xml: &str) -> Vec<Vec<Field>> {
    xml.split("<packet>")
        .skip(1)
        .map(|p| {
            p.split('<')
                .filter(|t| t.starts_with("field ") || t.starts_with("proto "))
                .filter_map(|tag| {
                    Some(Field {
                        name: attr(tag, "name")?,
                        show: attr(tag, "show").unwrap_or_default(),
                        showname: attr(tag, "showname").unwrap_or_default(),
                        value: attr(tag, "value").unwrap_or_default(),
                    })
                })
                .collect()
        })
        .collect()
}

fn run_tshark(path: &Path) -> Vec<Vec<Field>> {
    let out = Command::new("tshark")
        .arg("-n")
        .arg("-r")
        .arg(path)
        .args(["-T", "pdml"])
        // A retransmitted segment (see payload_per_port) is the same bytes again.
        .args(["-Y", "not tcp.analysis.retransmission"])
        .args(["--disable-protocol", "rpcordma"])
        .args(["--disable-protocol", "smb_direct"])
        .output()
        .unwrap_or_else(|e| panic!("running tshark: {e}; {INSTALL_HINT}"));
    assert!(
        out.status.success(),
        "tshark failed on {}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    parse_pdml(&String::from_utf8_lossy(&out.stdout))
}

// ---------------------------------------------------------------------------------------
// The traffic.

/// Devices with the shared tap, a 1460-octet MSS (so messages of a few kilobytes take
/// several FPDUs, as on Ethernet) and CRCs; the listener on the captured port.
struct Live;

static LOG: OnceLock<Arc<Log>> = OnceLock::new();
static ADDR: OnceLock<SocketAddr> = OnceLock::new();

impl Fixture for Live {
    type P = SiwProvider;

    fn open_device() -> SiwDevice {
        let tap: Arc<dyn WireTap> = LOG.get().expect("log set").clone();
        SiwDevice::with_config(SiwConfig {
            crc: true,
            mss: Some(1460),
            confirmation_own_segment: true,
            tap: Some(tap),
            ..SiwConfig::strict()
        })
        .expect("open siw device")
    }

    fn unique_addr() -> SocketAddr {
        *ADDR.get().expect("address chosen")
    }
}

fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    l.local_addr().expect("local address").port()
}

/// Runs every operation once and returns the tap's log.
fn run_traffic() {
    let (mut p, at_server, at_client) =
        connect_with::<Live>(&Opts::default(), &client_pd(), &server_pd());
    assert_eq!(at_server.as_bytes(), &client_pd()[..]);
    assert_eq!(at_client.as_bytes(), &server_pd()[..]);
    // The RFC 8797 message is found where it was put, after the other layer's bytes
    // (the IRD/ORD words are not part of what the connection manager hands up).
    let found = find_private_data(at_server.as_bytes()).expect("a well-formed search");
    let (at, msg) = found.expect("the RFC 8797 message is found");
    assert_eq!(at, RPCRDMA_AT);
    assert_eq!(msg.to_bytes().expect("encodes"), RPCRDMA_PD);

    // Send of 3000 octets: three FPDUs.
    let rb = [p.s.sge(0, 4000)];
    p.s.qp.post_recv(&[RecvWr { wr_id: 1, sgl: &rb }]).unwrap();
    p.c.fill(0, &pattern(1, 3000));
    let sb = [p.c.sge(0, 3000)];
    p.c.qp.post_send(&[SendWr::send(2, &sb)]).unwrap();
    let (s, c) = p.completions(1, 1);
    assert_eq!(
        (s[0].status, c[0].status),
        (WcStatus::Success, WcStatus::Success)
    );

    // Send with Invalidate of a key the client fast-registered.
    let mut fmr = p.c.pd.alloc_fast_mr(4096).expect("fast slot");
    let key = fmr.rekey();
    let region = p.c.sge(65536, 4096);
    p.c.qp
        .post_send(&[SendWr {
            wr_id: 3,
            op: SendOp::FastReg {
                key,
                region,
                access: Access::LOCAL_WRITE | Access::REMOTE_WRITE,
            },
            sgl: &[],
            flags: SendFlags::SIGNALED,
        }])
        .unwrap();
    p.completions(0, 1);
    let crb = [p.c.sge(8192, 64)];
    p.c.qp
        .post_recv(&[RecvWr {
            wr_id: 4,
            sgl: &crb,
        }])
        .unwrap();
    p.s.fill(100, b"invalidate!");
    let ib = [p.s.sge(100, 11)];
    p.s.qp
        .post_send(&[SendWr {
            wr_id: 5,
            op: SendOp::SendWithInvalidate { rkey: key },
            sgl: &ib,
            flags: SendFlags::SIGNALED,
        }])
        .unwrap();
    let (s, c) = p.completions(1, 1);
    assert_eq!(s[0].status, WcStatus::Success);
    assert_eq!(
        (c[0].status, c[0].invalidated_rkey),
        (WcStatus::Success, Some(key))
    );

    // RDMA Write of 5000 octets: four FPDUs.
    p.c.fill(10_000, &pattern(3, 5000));
    let wb = [p.c.sge(10_000, 5000)];
    p.c.qp
        .post_send(&[SendWr::write(6, &wb, p.s.remote(200_000))])
        .unwrap();
    let (_, c) = p.completions(0, 1);
    assert_eq!(c[0].status, WcStatus::Success);
    assert_eq!(p.s.read(200_000, 5000), pattern(3, 5000));

    // RDMA Read of 4000 octets: a Read Request, three Read Response FPDUs.
    p.s.fill(300_000, &pattern(4, 4000));
    let rdb = [p.c.sge(20_000, 4000)];
    p.c.qp
        .post_send(&[SendWr::read(7, &rdb, p.s.remote(300_000))])
        .unwrap();
    let (_, c) = p.completions(0, 1);
    assert_eq!(c[0].status, WcStatus::Success);
    assert_eq!(p.c.read(20_000, 4000), pattern(4, 4000));

    // A Write through a key the server never issued: the server answers with a Terminate.
    let bad = RemoteAddr {
        addr: p.s.addr(0),
        rkey: next_key(p.s.mr.rkey()),
    };
    let b8 = [p.c.sge(0, 8)];
    p.c.qp.post_send(&[SendWr::write(8, &b8, bad)]).unwrap();
    let (_, c) = p.completions(0, 1);
    assert_eq!(
        (c[0].wr_id, c[0].opcode, c[0].status),
        (8, WcOpcode::RdmaWrite, WcStatus::RemoteAccessError)
    );
    p.wait_both_failed();
    drop(fmr);
}

// ---------------------------------------------------------------------------------------
// The comparison.

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// One MPA frame or FPDU as tshark shows it: its fields in order.
#[derive(Debug)]
struct Unit {
    packet: usize,
    fields: Vec<Field>,
}

impl Unit {
    fn all(&self, name: &str) -> Vec<&Field> {
        self.fields.iter().filter(|f| f.name == name).collect()
    }
    fn one(&self, name: &str) -> &Field {
        let v = self.all(name);
        assert_eq!(
            v.len(),
            1,
            "frame {}: expected one {name}, found {v:?}",
            self.packet + 1
        );
        v[0]
    }
    fn num(&self, name: &str) -> u64 {
        let s = &self.one(name).show;
        let parsed = match s.strip_prefix("0x") {
            Some(h) => u64::from_str_radix(h, 16),
            None => s.parse(),
        };
        parsed.unwrap_or_else(|_| panic!("{name} = {s:?} is not a number"))
    }
    fn flag(&self, name: &str) -> bool {
        self.num(name) != 0
    }
    fn bytes(&self, name: &str) -> &str {
        &self.one(name).value
    }
}

/// Splits each packet into its MPA frames and FPDUs, per sending port.
fn units_by_port(packets: &[Vec<Field>]) -> BTreeMap<u16, Vec<Unit>> {
    let mut out: BTreeMap<u16, Vec<Unit>> = BTreeMap::new();
    for (i, p) in packets.iter().enumerate() {
        assert!(
            p.iter().all(|f| f.name != "_ws.malformed"),
            "frame {} is malformed",
            i + 1
        );
        let port = p
            .iter()
            .find(|f| f.name == "tcp.srcport")
            .and_then(|f| f.show.parse::<u16>().ok())
            .unwrap_or_else(|| panic!("frame {} has no TCP source port", i + 1));
        let mut cur: Option<Unit> = None;
        for f in p {
            let starts = matches!(
                f.name.as_str(),
                "iwarp_mpa.req" | "iwarp_mpa.rep" | "iwarp_mpa.fpdu"
            );
            if starts {
                if let Some(u) = cur.take() {
                    out.entry(port).or_default().push(u);
                }
                cur = Some(Unit {
                    packet: i,
                    fields: Vec::new(),
                });
            }
            if let Some(u) = cur.as_mut() {
                u.fields.push(f.clone());
            }
        }
        if let Some(u) = cur {
            out.entry(port).or_default().push(u);
        }
    }
    out
}

fn check_mpa(u: &Unit, frame: &[u8], ctx: &str) {
    let request = frame[..16] == *b"MPA ID Req Frame";
    if request {
        assert_eq!(u.bytes("iwarp_mpa.key.req"), hex(&frame[..16]), "{ctx}");
    } else {
        assert_eq!(
            u.bytes("iwarp_mpa.key.rep"),
            hex(b"MPA ID Rep Frame"),
            "{ctx}"
        );
    }
    assert!(!u.flag("iwarp_mpa.marker_flag"), "{ctx}: no markers");
    assert!(u.flag("iwarp_mpa.crc_flag"), "{ctx}: CRCs asked for");
    assert!(!u.flag("iwarp_mpa.rej_flag"), "{ctx}");
    // Wireshark 4.0 predates RFC 6581 and shows the S flag as reserved bit 0x10.
    assert_eq!(u.num("iwarp_mpa.res"), 0x10, "{ctx}: enhanced (S)");
    assert_eq!(u.num("iwarp_mpa.rev"), 2, "{ctx}");
    assert_eq!(
        u.num("iwarp_mpa.pdlength") as usize,
        frame.len() - 20,
        "{ctx}"
    );
    let pd = u.bytes("iwarp_mpa.privatedata");
    assert_eq!(pd, hex(&frame[20..]), "{ctx}: private data as logged");
    // IRD 16, ORD 16 (RFC 6581 words), then the ULP's private data.
    let ulp = if request { client_pd() } else { server_pd() };
    assert_eq!(pd, format!("00100010{}", hex(&ulp)), "{ctx}");
    assert_eq!(
        frame.len() - 20,
        512,
        "{ctx}: the whole 512-octet MPA field"
    );
}

/// A Send message being followed across FPDUs.
#[derive(Default)]
struct SendAssembly {
    fragments: Vec<Vec<u8>>,
}

fn check_fpdu(
    u: &Unit,
    head: &[u8],
    payload: &[u8],
    trailer: &[u8],
    sends: &mut SendAssembly,
    ctx: &str,
) -> SegmentHeader {
    let ulpdu = usize::from(u16::from_be_bytes([head[0], head[1]]));
    let (h, hlen) = SegmentHeader::decode(&head[2..]).expect("logged header decodes");
    assert_eq!(hlen + payload.len(), ulpdu, "{ctx}: logged lengths agree");
    assert_eq!(u.num("iwarp_mpa.ulpdulength") as usize, ulpdu, "{ctx}");
    let pad = trailer.len() - 4;
    if pad == 0 {
        assert!(u.all("iwarp_mpa.pad").is_empty(), "{ctx}: no pad expected");
    } else {
        assert_eq!(u.bytes("iwarp_mpa.pad"), "00".repeat(pad), "{ctx}");
    }
    let crc = u.one("iwarp_mpa.crc_check");
    assert_eq!(crc.value, hex(&trailer[pad..]), "{ctx}: CRC octets");
    assert!(
        crc.showname.contains("(Good CRC32)"),
        "{ctx}: {:?}",
        crc.showname
    );

    assert_eq!(u.flag("iwarp_ddp.tagged_flag"), h.is_tagged(), "{ctx}");
    assert_eq!(u.flag("iwarp_ddp.last_flag"), h.last, "{ctx}");
    assert_eq!(u.num("iwarp_ddp.rsvd"), 0, "{ctx}");
    assert_eq!(u.num("iwarp_ddp.dv"), 1, "{ctx}");
    assert_eq!(u.num("iwarp_rdma.version"), 1, "{ctx}");
    assert_eq!(u.num("iwarp_rdma.opcode"), h.opcode as u64, "{ctx}");
    match h.placement {
        Placement::Tagged { stag, to } => {
            assert_eq!(u.num("iwarp_ddp.stag"), u64::from(stag), "{ctx}");
            assert_eq!(u.num("iwarp_ddp.tagged_offset"), to, "{ctx}");
            if payload.is_empty() {
                assert!(u.all("data.data").is_empty(), "{ctx}");
            } else {
                assert_eq!(u.bytes("data.data"), hex(payload), "{ctx}: payload");
            }
        }
        Placement::Untagged {
            inval_stag,
            qn,
            msn,
            mo,
        } => {
            assert_eq!(u.num("iwarp_ddp.qn"), u64::from(qn), "{ctx}");
            assert_eq!(u.num("iwarp_ddp.msn"), u64::from(msn), "{ctx}");
            assert_eq!(u.num("iwarp_ddp.mo"), u64::from(mo), "{ctx}");
            if h.opcode.carries_invalidate_stag() {
                assert_eq!(
                    u.num("iwarp_rdma.inval_stag"),
                    u64::from(inval_stag),
                    "{ctx}"
                );
            } else {
                assert_eq!(u.bytes("iwarp_rdma.reserved"), "00000000", "{ctx}");
            }
        }
    }
    match h.opcode {
        Opcode::Send | Opcode::SendInvalidate => {
            sends.fragments.push(payload.to_vec());
            if h.last {
                let frags = std::mem::take(&mut sends.fragments);
                if frags.len() == 1 {
                    assert_eq!(u.bytes("data.data"), hex(payload), "{ctx}: payload");
                } else {
                    // Wireshark reassembles the message in its last FPDU.
                    let shown: Vec<&str> = u
                        .all("iwarp_rdma.send.fragment")
                        .iter()
                        .map(|f| f.value.as_str())
                        .collect();
                    let want: Vec<String> = frags.iter().map(|f| hex(f)).collect();
                    assert_eq!(shown, want, "{ctx}: fragments");
                    assert_eq!(
                        u.one("iwarp_rdma.send.reassembled.data").value,
                        hex(&frags.concat()),
                        "{ctx}: reassembled Send"
                    );
                }
            }
        }
        Opcode::ReadRequest => {
            let rr = ReadRequest::decode(payload).expect("logged Read Request decodes");
            assert_eq!(
                u.num("iwarp_rdma.sinkstag"),
                u64::from(rr.sink_stag),
                "{ctx}"
            );
            assert_eq!(u.num("iwarp_rdma.sinkto"), rr.sink_to, "{ctx}");
            assert_eq!(u.num("iwarp_rdma.rdmardsz"), u64::from(rr.size), "{ctx}");
            assert_eq!(
                u.num("iwarp_rdma.srcstag"),
                u64::from(rr.source_stag),
                "{ctx}"
            );
            assert_eq!(u.num("iwarp_rdma.srcto"), rr.source_to, "{ctx}");
        }
        Opcode::Terminate => {
            let t = Terminate::decode(payload).expect("logged Terminate decodes");
            let (layer, etype, code) = t.code.to_parts();
            assert_eq!(u.num("iwarp_rdma.term_layer"), u64::from(layer), "{ctx}");
            let (etype_field, code_field) = match (layer, etype) {
                (0, _) => ("iwarp_rdma.term_etype_rdma", "iwarp_rdma.term_errcode_rdma"),
                (1, 1) => (
                    "iwarp_rdma.term_etype_ddp",
                    "iwarp_rdma.term_errcode_ddp_tagged",
                ),
                (1, 2) => (
                    "iwarp_rdma.term_etype_ddp",
                    "iwarp_rdma.term_errcode_ddp_untagged",
                ),
                (1, _) => ("iwarp_rdma.term_etype_ddp", "iwarp_rdma.term_errcode"),
                _ => ("iwarp_rdma.term_etype_llp", "iwarp_rdma.term_errcode_llp"),
            };
            assert_eq!(u.num(etype_field), u64::from(etype), "{ctx}");
            assert_eq!(u.num(code_field), u64::from(code), "{ctx}");
            assert_eq!(
                u.flag("iwarp_rdma.term_hdrct_m"),
                t.segment_length.is_some(),
                "{ctx}"
            );
            assert_eq!(
                u.flag("iwarp_rdma.hdrct_d"),
                t.ddp_header.is_some(),
                "{ctx}"
            );
            assert_eq!(
                u.flag("iwarp_rdma.hdrct_r"),
                t.rdma_header.is_some(),
                "{ctx}"
            );
            if let Some(d) = t.ddp_header {
                assert_eq!(
                    u.bytes("iwarp_rdma.term_ddp_seg_len"),
                    format!("{:04x}", t.segment_length.unwrap_or(0)),
                    "{ctx}"
                );
                // Wireshark 4.0 sizes the copied DDP header from the error type (1 means
                // "tagged" to it) rather than from the header's own T bit.
                let ws_len = if etype == 1 { 14 } else { 18 };
                let mut ours = d.to_vec();
                ours.extend_from_slice(t.rdma_header.unwrap_or(&[]));
                assert_eq!(
                    u.bytes("iwarp_rdma.term_ddp_h"),
                    hex(&ours[..ws_len]),
                    "{ctx}"
                );
            }
        }
        _ => {}
    }
    h
}

#[test]
fn tshark_decodes_a_live_siw_conversation_field_by_field() {
    let log = Arc::new(Log::default());
    assert!(LOG.set(log.clone()).is_ok());
    let port = free_port();
    assert!(ADDR.set(SocketAddr::from(([127, 0, 0, 1], port))).is_ok());
    let cap = Capture::start(port);
    run_traffic();
    let sent = log.sent.lock().unwrap().clone();
    let want: BTreeMap<u16, usize> = sent
        .iter()
        .map(|(a, l)| (a.port(), l.iter().map(Logged::wire_len).sum()))
        .collect();
    assert_eq!(want.len(), 2, "both sides logged what they sent");
    let path = cap.finish(&want);
    assert_eq!(
        payload_per_port(&path),
        want,
        "the capture holds exactly the logged octets in each direction"
    );
    let packets = run_tshark(&path);
    let units = units_by_port(&packets);

    let mut opcodes: BTreeMap<u8, usize> = BTreeMap::new();
    let mut multi_fpdu: BTreeMap<u8, usize> = BTreeMap::new();
    let mut zero_length_reads = 0;
    for (addr, logged) in &sent {
        let shown = units.get(&addr.port()).map_or(&[][..], Vec::as_slice);
        assert_eq!(
            shown.len(),
            logged.len(),
            "port {}: tshark shows {} frames and FPDUs, the sender logged {}",
            addr.port(),
            shown.len(),
            logged.len()
        );
        let mut sends = SendAssembly::default();
        let mut in_packet: BTreeMap<usize, usize> = BTreeMap::new();
        for (k, (u, l)) in shown.iter().zip(logged).enumerate() {
            let ctx = format!("port {} unit {k} (frame {})", addr.port(), u.packet + 1);
            *in_packet.entry(u.packet).or_insert(0) += 1;
            match l {
                Logged::Mpa { frame } => check_mpa(u, frame, &ctx),
                Logged::Fpdu {
                    head,
                    payload,
                    trailer,
                } => {
                    let h = check_fpdu(u, head, payload, trailer, &mut sends, &ctx);
                    *opcodes.entry(h.opcode as u8).or_insert(0) += 1;
                    if !h.last {
                        *multi_fpdu.entry(h.opcode as u8).or_insert(0) += 1;
                    }
                    if h.opcode == Opcode::ReadRequest && payload.len() == 28 {
                        let rr = ReadRequest::decode(payload).expect("decodes");
                        if rr.size == 0 {
                            zero_length_reads += 1;
                        }
                    }
                }
            }
        }
        // Every segment carries exactly one MPA frame or FPDU, confirmation Reads
        // included: each went out with its own write.
        for (packet, n) in &in_packet {
            assert_eq!(
                *n,
                1,
                "port {}: frame {} carries {n} MPA units",
                addr.port(),
                packet + 1
            );
        }
    }
    for op in [
        Opcode::Send,
        Opcode::SendInvalidate,
        Opcode::RdmaWrite,
        Opcode::ReadRequest,
        Opcode::ReadResponse,
        Opcode::Terminate,
    ] {
        assert!(
            opcodes.contains_key(&(op as u8)),
            "no {op} on the wire: {opcodes:?}"
        );
    }
    for op in [Opcode::Send, Opcode::RdmaWrite, Opcode::ReadResponse] {
        assert!(
            multi_fpdu.contains_key(&(op as u8)),
            "no multi-FPDU {op} message: {multi_fpdu:?}"
        );
    }
    assert!(zero_length_reads > 0, "no confirmation Read on the wire");
    // Left behind only when an assertion above fails, for inspection.
    let _ = fs::remove_file(&path);
}
