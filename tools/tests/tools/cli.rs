//! End-to-end tests of the `rpcrdma` binary: decode, encode and info, run as a user would.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use rpcrdma::wire::header::{ChunkLists, Header, HeaderBody, RdmaError, ReadSegment, Segment};
use serde_json::{json, Value};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rpcrdma"))
}

fn run(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = bin()
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn rpcrdma");
    let mut input = child.stdin.take().expect("stdin");
    input.write_all(stdin).expect("write stdin");
    drop(input);
    child.wait_with_output().expect("wait")
}

fn hex(s: &str) -> Vec<u8> {
    let digits: Vec<u8> = s.bytes().filter(|b| b.is_ascii_hexdigit()).collect();
    digits
        .chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
        .collect()
}

fn stdout_json(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "exit {:?}, stderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("stdout is JSON")
}

/// Asserts exit status 1 and exactly one stderr line, and returns that line.
fn one_error_line(out: &Output) -> String {
    assert_eq!(out.status.code(), Some(1), "stdout: {:?}", out.stdout);
    assert!(out.stdout.is_empty(), "nothing on stdout on error");
    let err = String::from_utf8(out.stderr.clone()).expect("utf-8 stderr");
    assert_eq!(err.lines().count(), 1, "one stderr line, got {err:?}");
    assert!(err.starts_with("rpcrdma: "), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    err
}

fn decode_hex(h: &str) -> Value {
    stdout_json(&run(&["decode", "--hex", h], b""))
}

/// decode (binary on stdin) then encode (JSON on stdin) must give the input back.
fn assert_round_trip(wire: &[u8], extra: &[&str]) {
    let mut args = vec!["decode", "--compact"];
    args.extend_from_slice(extra);
    let dec = run(&args, wire);
    stdout_json(&dec);
    let enc = run(&["encode"], &dec.stdout);
    assert!(
        enc.status.success(),
        "{}",
        String::from_utf8_lossy(&enc.stderr)
    );
    assert_eq!(enc.stdout, wire, "encode(decode(x)) == x");
}

// A call to NFS (100003) v3 NULL with AUTH_NONE: the RPC message after RDMA_MSG.
const NFS_NULL_CALL: &str = "11223344 00000000 00000002 000186a3 00000003 00000000 \
                             00000000 00000000 00000000 00000000";

#[test]
fn decodes_rdma_msg_with_all_three_lists_and_the_rpc_call() {
    let wire = format!(
        "11223344 00000001 00000020 00000000
         00000001 00000010 00000001 00000100 00000000 00001000 00000000
         00000001 00000001 00000002 00000200 00000000 00002000 00000000
         00000001 00000001 00000003 00000040 00000000 00003000
         {NFS_NULL_CALL}"
    );
    let v = decode_hex(&wire);
    assert_eq!(v["version"], 1);
    assert_eq!(v["header_len"], 96);
    assert_eq!(v["header"]["xid"], 0x1122_3344);
    assert_eq!(v["header"]["credit"], 32);
    assert_eq!(v["header"]["proc"], "RDMA_MSG");
    assert_eq!(
        v["header"]["reads"],
        json!([{"position": 16, "handle": 1, "length": 256, "offset": 4096}])
    );
    assert_eq!(
        v["header"]["writes"],
        json!([[{"handle": 2, "length": 512, "offset": 8192}]])
    );
    assert_eq!(
        v["header"]["reply"],
        json!([{"handle": 3, "length": 64, "offset": 12288}])
    );
    assert_eq!(v["rpc_message"], json!({"offset": 96, "length": 40}));
    assert_eq!(
        v["rpc"],
        json!({"xid": 0x1122_3344, "type": "CALL", "prog": 100003, "vers": 3, "proc": 0,
               "cred": "AUTH_NONE", "args_offset": 136})
    );
    assert_round_trip(&hex(&wire), &[]);
}

#[test]
fn decodes_rdma_nomsg_with_a_position_zero_read_chunk() {
    let wire = "11223344 00000001 00000010 00000001
                00000001 00000000 00000007 00001000 00000000 00010000 00000000
                00000000 00000000";
    let v = decode_hex(wire);
    assert_eq!(v["header"]["proc"], "RDMA_NOMSG");
    assert_eq!(v["header"]["reads"][0]["position"], 0);
    assert_eq!(v["header"]["reads"][0]["length"], 4096);
    assert_eq!(v["header"]["reply"], Value::Null);
    assert_eq!(v["rpc_message"], Value::Null);
    assert!(v.get("rpc").is_none());
    assert!(v["header"].get("payload").is_none());
    assert_round_trip(&hex(wire), &[]);
}

#[test]
fn decodes_rdma_msgp_with_a_reply_and_notes_it_is_obsolete() {
    let wire = "11223344 00000001 00000001 00000002 00001000 00000400
                00000000 00000000 00000000
                11223344 00000001 00000000 00000000 00000000 00000000";
    let v = decode_hex(wire);
    assert_eq!(v["header"]["proc"], "RDMA_MSGP");
    assert_eq!(v["header"]["align"], 4096);
    assert_eq!(v["header"]["thresh"], 1024);
    assert_eq!(v["header_len"], 36);
    assert_eq!(v["rpc"]["type"], "REPLY");
    assert_eq!(v["rpc"]["stat"], "MSG_ACCEPTED");
    assert_eq!(v["rpc"]["status"], "SUCCESS");
    assert_eq!(v["rpc"]["results_offset"], 60);
    assert!(v["notes"][0].as_str().unwrap().contains("RFC 8166 §4.6.1"));
    assert_round_trip(&hex(wire), &[]);
}

#[test]
fn decodes_rdma_done_and_both_rdma_errors() {
    let v = decode_hex("00000009 00000001 00000000 00000003");
    assert_eq!(
        v["header"],
        json!({"xid": 9, "credit": 0, "proc": "RDMA_DONE"})
    );
    assert_eq!(v["header_len"], 16);

    let v = decode_hex("00000009 00000001 00000005 00000004 00000001 00000001 00000001");
    assert_eq!(
        v["header"],
        json!({"xid": 9, "credit": 5, "proc": "RDMA_ERROR", "err": "ERR_VERS", "low": 1, "high": 1})
    );
    let v = decode_hex("00000009 00000001 00000005 00000004 00000002");
    assert_eq!(
        v["header"],
        json!({"xid": 9, "credit": 5, "proc": "RDMA_ERROR", "err": "ERR_CHUNK"})
    );
    for w in [
        "00000009 00000001 00000000 00000003",
        "00000009 00000001 00000005 00000004 00000001 00000001 00000001",
        "00000009 00000001 00000005 00000004 00000002",
    ] {
        assert_round_trip(&hex(w), &[]);
    }
}

#[test]
fn hex_input_tolerates_colons_and_prefixes_and_compact_is_one_line() {
    let out = run(
        &[
            "decode",
            "--compact",
            "--hex",
            "0x00:00:00:09 0x00000001:00000000 00000003",
        ],
        b"",
    );
    let text = String::from_utf8(out.stdout.clone()).unwrap();
    assert_eq!(text.lines().count(), 1, "{text}");
    assert_eq!(stdout_json(&out)["header"]["proc"], "RDMA_DONE");
    let note = stdout_json(&out)["notes"][0]
        .as_str()
        .unwrap_or("")
        .to_owned();
    assert!(
        note.contains("pull completion notification for XID 0x00000009"),
        "{note}"
    );
    // --hex - reads hex text from stdin.
    let out = run(
        &["decode", "--hex", "-"],
        b"00000009 00000001 00000000 00000003\n",
    );
    assert_eq!(stdout_json(&out)["header"]["xid"], 9);
}

#[test]
fn binary_file_and_stdin_inputs_decode_the_same() {
    let wire = hex("00000009 00000001 00000005 00000004 00000002");
    let path: PathBuf =
        std::env::temp_dir().join(format!("rpcrdma-cli-{}.bin", std::process::id()));
    std::fs::write(&path, &wire).unwrap();
    let from_file = stdout_json(&run(&["decode", path.to_str().unwrap()], b""));
    let from_dash = stdout_json(&run(&["decode", "-"], &wire));
    let from_default = stdout_json(&run(&["decode"], &wire));
    std::fs::remove_file(&path).unwrap();
    assert_eq!(from_file["header"]["err"], "ERR_CHUNK");
    assert_eq!(from_file, from_dash);
    assert_eq!(from_file, from_default);
    let missing = run(&["decode", "/nonexistent/rpcrdma-input.bin"], b"");
    assert!(one_error_line(&missing).contains("cannot read /nonexistent/rpcrdma-input.bin"));
}

#[test]
fn bad_version_names_err_vers() {
    let err = one_error_line(&run(
        &["decode", "--hex", "11223344 00000002 00000020 00000000"],
        b"",
    ));
    assert!(err.contains("version 2"), "{err}");
    assert!(err.contains("ERR_VERS"), "{err}");
    assert!(err.contains("0x11223344"), "{err}");
}

#[test]
fn malformed_bodies_name_err_chunk() {
    for (wire, what) in [
        ("11223344 00000001 00000020 00000007", "unknown procedure 7"),
        (
            "11223344 00000001 00000020 00000001 00000000 00000000 00000000",
            "RDMA_NOMSG without any chunk",
        ),
        (
            "11223344 00000001 00000020 00000000 00000002",
            "discriminator",
        ),
        (
            "11223344 00000001 00000020 00000000 00000000 00000000 00000000 99999999",
            "differs",
        ),
        (
            "11223344 00000001 00000020 00000004 00000003",
            "RDMA_ERROR code 3",
        ),
        ("11223344 00000001 00000020 00000000 00000001", "truncated"),
    ] {
        let err = one_error_line(&run(&["decode", "--hex", wire], b""));
        assert!(err.contains("ERR_CHUNK"), "{wire}: {err}");
        assert!(err.contains(what), "{wire}: {err}");
    }
}

#[test]
fn unreadable_xid_or_version_means_no_reply() {
    for wire in ["", "112233", "11223344 0000"] {
        let err = one_error_line(&run(&["decode", "--hex", wire], b""));
        assert!(err.contains("no reply possible"), "{wire:?}: {err}");
        assert!(!err.contains("ERR_"), "{wire:?}: {err}");
    }
}

#[test]
fn engine_limits_apply_unless_permissive() {
    // 17 segments in one Write chunk: over the engine's 16 (RFC 8267 §6.4.2).
    let mut wire = String::from("11223344 00000001 00000020 00000000 00000000 00000001 00000011");
    for i in 0..17 {
        wire.push_str(&format!(" 00000001 00000010 00000000 {:08x}", i * 16));
    }
    wire.push_str(" 00000000 00000000 11223344");
    let err = one_error_line(&run(&["decode", "--hex", &wire], b""));
    assert!(
        err.contains("ERR_CHUNK") && err.contains("17 segments"),
        "{err}"
    );
    let v = stdout_json(&run(&["decode", "--permissive", "--hex", &wire], b""));
    assert_eq!(v["header"]["writes"][0].as_array().unwrap().len(), 17);
    assert_round_trip(&hex(&wire), &["--permissive"]);
}

#[test]
fn bad_hex_and_bad_json_are_one_line_errors() {
    let err = one_error_line(&run(&["decode", "--hex", "1122 33zz"], b""));
    assert!(err.contains("'z'"), "{err}");
    let err = one_error_line(&run(&["decode", "--hex", "112"], b""));
    assert!(err.contains("3 digits"), "{err}");
    let err = one_error_line(&run(&["encode"], b"{\"xid\": 1}"));
    assert!(err.contains("not a transport header"), "{err}");
    let err = one_error_line(&run(&["encode"], b"not json"));
    assert!(err.contains("rpcrdma decode"), "{err}");
}

#[test]
fn encode_takes_a_bare_header_and_writes_hex_on_request() {
    let out = run(
        &["encode", "--hex"],
        br#"{"xid": 9, "credit": 5, "proc": "RDMA_ERROR", "err": "ERR_CHUNK"}"#,
    );
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        "00000009 00000001 00000005 00000004 00000002\n"
    );
    // A header a receiver would reject is still written, with a warning.
    let out = run(
        &["encode"],
        br#"{"xid": 9, "credit": 5, "proc": "RDMA_NOMSG"}"#,
    );
    assert!(out.status.success());
    assert_eq!(out.stdout.len(), 28);
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("warning") && err.contains("ERR_CHUNK"),
        "{err}"
    );
}

/// A small deterministic generator (xorshift64*) so the round trip covers many shapes
/// without a property-testing dependency.
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn segment(&mut self) -> Segment {
        let length = self.next() as u32;
        // Keep the region inside the 64-bit space: the decoder rejects wrapping ones.
        let offset = self.next() >> 1;
        Segment::new(self.next() as u32, length, offset)
    }
    fn chunk(&mut self, max: u64) -> Vec<Segment> {
        (0..self.below(max + 1)).map(|_| self.segment()).collect()
    }
    fn lists(&mut self) -> ChunkLists {
        let reads = (0..self.below(4))
            .map(|_| ReadSegment::new((self.below(4) * 4) as u32, self.segment()))
            .collect();
        let writes = (0..self.below(3)).map(|_| self.chunk(3)).collect();
        let reply = (self.below(2) == 1).then(|| self.chunk(3));
        ChunkLists {
            reads,
            writes,
            reply,
        }
    }
    fn header(&mut self) -> Header {
        let xid = self.next() as u32;
        let mut rpc = xid.to_be_bytes().to_vec();
        rpc.extend((0..self.below(24)).map(|_| self.next() as u8));
        let (body, payload) = match self.below(6) {
            0 => (HeaderBody::Msg(self.lists()), rpc),
            1 => {
                let mut lists = self.lists();
                if lists.reads.is_empty() && lists.writes.is_empty() && lists.reply.is_none() {
                    lists.reply = Some(vec![self.segment()]);
                }
                (HeaderBody::Nomsg(lists), Vec::new())
            }
            2 => (
                HeaderBody::Msgp {
                    align: self.next() as u32,
                    thresh: self.next() as u32,
                    lists: self.lists(),
                },
                rpc,
            ),
            3 => (HeaderBody::Done, Vec::new()),
            4 => (
                HeaderBody::Error(RdmaError::Vers {
                    low: self.next() as u32,
                    high: self.next() as u32,
                }),
                Vec::new(),
            ),
            _ => (HeaderBody::Error(RdmaError::Chunk), Vec::new()),
        };
        Header {
            xid,
            credit: self.next() as u32,
            body,
            payload,
        }
    }
}

#[test]
fn decode_then_encode_reproduces_many_generated_headers() {
    let mut g = Gen(0x5eed_1234_abcd_0001);
    for _ in 0..60 {
        let h = g.header();
        let wire = h.to_bytes();
        assert_round_trip(&wire, &[]);
    }
}

#[test]
fn private_data_is_found_at_any_offset_and_negotiated() {
    // Two MPA-like words, then R set, send 4 KiB, receive 8 KiB.
    let v = stdout_json(&run(
        &[
            "decode",
            "--private-data",
            "--hex",
            "0000 0001 00 f6ab0e18 01 01 03 07 00 00",
            "--local",
            "2k,16k",
        ],
        b"",
    ));
    assert_eq!(v["offset"], 5);
    assert_eq!(
        v["peer"],
        json!({"version": 1, "send_size": 4096, "recv_size": 8192, "remote_invalidate": true})
    );
    assert_eq!(v["local"]["send_size"], 2048);
    assert_eq!(
        v["negotiated"],
        json!({"send": 2048, "recv": 4096, "remote_invalidate": false})
    );
    assert!(v["meaning"].as_str().unwrap().contains("4096 octets"));
    assert_eq!(
        v["extensions"],
        json!({"reply_read_chunks": false, "continuation": false})
    );
    // An rpcrdma peer's advertisement: the same message, then its extension word.
    let v = stdout_json(&run(
        &[
            "decode",
            "--private-data",
            "--hex",
            "f6ab0e18 01 01 03 07 72647801 00000001",
        ],
        b"",
    ));
    assert_eq!(v["offset"], 0);
    assert_eq!(v["peer"]["send_size"], 4096);
    assert_eq!(
        v["extensions"],
        json!({"reply_read_chunks": true, "continuation": false})
    );
    assert!(v["meaning"]
        .as_str()
        .unwrap()
        .contains("responder-provided Read chunks"));
    assert_eq!(
        v["characteristics"]["req_rx_limit"], 1,
        "the draft's default"
    );
    // With continuation (flag bit 1) the characteristics follow the flags word.
    let v = stdout_json(&run(
        &[
            "decode",
            "--private-data",
            "--hex",
            "f6ab0e18 01 01 03 07 72647801 00000003 00000003 \
             00000004 00000004 00000007 00000006 00000004 00000008 \
             00000007 00000004 00000010",
        ],
        b"",
    ));
    assert_eq!(
        v["extensions"],
        json!({"reply_read_chunks": true, "continuation": true})
    );
    assert_eq!(v["characteristics"]["rtr_support"], 7);
    assert_eq!(v["characteristics"]["req_rx_limit"], 8);
    assert_eq!(v["characteristics"]["resp_sx_limit"], 16);
    assert!(v["meaning"]
        .as_str()
        .unwrap()
        .contains("accepting requests of up to 8 Sends"));
}

#[test]
fn decode_shows_continuation_messages() {
    // ROPT_XMTREQ of XID 0x11223344: a group of 3, 2 receives lent, 8 payload octets
    // (the start of an ONC RPC call).
    let v = stdout_json(&run(
        &[
            "decode",
            "--hex",
            "11223344 00000001 00000020 00000005 00000005 00000014 \
             00000000 00000000 00000003 00000002 00000008 11223344 00000000",
        ],
        b"",
    ));
    assert_eq!(v["optional"]["opttype"], "ROPT_XMTREQ");
    assert_eq!(v["optional"]["header"]["xid"], 0x1122_3344);
    assert_eq!(
        v["optional"]["header"]["op"]["XmtReq"],
        json!({"count": 3, "rsbuf": 2, "pslen": 8})
    );
    assert_eq!(v["optional"]["payload_len"], 8);
    assert_eq!(v["header_len"], 44);
    // ROPT_XMTERR: OPTXERR_BADSEQ on transmission 2 of a call group.
    let v = stdout_json(&run(
        &[
            "decode",
            "--hex",
            "11223344 00000001 00000020 00000005 00000008 0000001c \
             11223344 00000000 00000002 00000000 00000004 00000001 00000002",
        ],
        b"",
    ));
    assert_eq!(v["optional"]["opttype"], "ROPT_XMTERR");
    assert!(v["notes"][0]
        .as_str()
        .unwrap()
        .contains("OPTXERR_BADSEQ on transmission 2"));
}

#[test]
fn decode_shows_a_characteristics_update() {
    // ROPT_XCHUPD: RTR support 7, requests of up to 2 Sends, responses of up to 16.
    let v = stdout_json(&run(
        &[
            "decode",
            "--hex",
            "00000007 00000001 00000020 00000005 00000009 00000028 00000003 \
             00000004 00000004 00000007 00000006 00000004 00000002 00000007 00000004 00000010",
        ],
        b"",
    ));
    assert_eq!(v["optional"]["opttype"], "ROPT_XCHUPD");
    assert_eq!(
        v["optional"]["header"]["op"]["CharsUpdate"]["req_rx_limit"],
        2
    );
    assert!(v["notes"][0]
        .as_str()
        .unwrap()
        .contains("requests of up to 2 Sends accepted"));
}

#[test]
fn decode_shows_send_based_ddp_items() {
    // ROPT_XMTREQ of a group of 8 whose 1 MiB bulk item (at 0x28 in the XDR stream)
    // was placed by send-based DDP into target buffer segments 0 and 1 from offset 0,
    // and a second item left in the payload stream (too short).
    let v = stdout_json(&run(
        &[
            "decode",
            "--hex",
            "11223344 00000001 00000020 00000005 00000005 0000003c              00000002 00000028 00100000 00000002 00000000 00000002 00000000 00000001              00000040 00000004 00000005              00000000 00000008 00000000 00000008 11223344 00000000",
        ],
        b"",
    ));
    assert_eq!(v["optional"]["opttype"], "ROPT_XMTREQ");
    assert_eq!(v["optional"]["ddp_items"], 2);
    assert_eq!(
        v["send_ddp_items"],
        json!([
            {"disp": 40, "length": 1048576, "placement": "XMDTYPE_TBSN", "offset": 0,
             "segments": [0, 1]},
            {"disp": 64, "length": 4, "placement": "XMDTYPE_TOOSHORT"}
        ])
    );
    assert!(v["notes"][1]
        .as_str()
        .unwrap()
        .contains("XMDTYPE_TBSN from offset 0 in segments [0, 1]"));
}

#[test]
fn unusable_or_missing_private_data_falls_back_to_defaults() {
    let err = one_error_line(&run(
        &["decode", "--private-data", "--hex", "f6ab0e18 02000000"],
        b"",
    ));
    assert!(err.contains("1024-octet"), "{err}");
    let err = one_error_line(&run(
        &["decode", "--private-data", "--hex", "00000000"],
        b"",
    ));
    assert!(err.contains("not found"), "{err}");
    let err = one_error_line(&run(
        &[
            "decode",
            "--private-data",
            "--hex",
            "f6ab0e18 01000000",
            "--local",
            "5,5",
        ],
        b"",
    ));
    assert!(err.contains("--local"), "{err}");
}

#[test]
fn info_reports_providers_devices_hugepages_and_cpus() {
    let out = run(&["info"], b"");
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for want in ["shm", "built in", "rdma devices:", "hugepages:", "cpus:"] {
        assert!(text.contains(want), "{want} missing from {text}");
    }
    let v = stdout_json(&run(&["info", "--json"], b""));
    assert!(v["cpus_usable"].as_u64().unwrap() >= 1);
    assert_eq!(v["providers"][0]["name"], "shm");
    assert!(v["hugepages"]["how_to_reserve"]
        .as_str()
        .unwrap()
        .contains("vm.nr_hugepages"));
    // A root without /sys/class/infiniband has no devices.
    let v = stdout_json(&run(
        &["info", "--json", "--root", "/nonexistent-rpcrdma-root"],
        b"",
    ));
    assert_eq!(v["rdma_devices"], json!([]));
}
