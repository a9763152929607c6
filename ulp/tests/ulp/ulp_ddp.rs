//! XDR positions and roundup of DDP-eligible items (RFC 8166 §3.4.5–§3.4.7; RFC 5666
//! §3.4, §3.7), worked out by hand: positions count from the first octet of the XID in
//! the reconstructed stream, chunks and the inline stream both omit the roundup of a
//! moved item, and later positions still count it.

use rpcrdma::wire::xdr::XdrError;
use rpcrdma::Padding;
use rpcrdma_ulp::builtin::{echo_proc, Echo2, EchoData, ECHO_PROGRAM};
use rpcrdma_ulp::ddp::{
    encode_call, reply_results, CallEncoder, DdpCursor, DdpDecodeError, DdpEncodeError, DdpEncoder,
    ReadItem, ReplyError, WriteItem, XdrCodec,
};
use rpcrdma_ulp::rpc::{AcceptStatus, AuthSys, CallHeader, Gids, OpaqueAuth, ReplyHeader};

fn header(procedure: u32) -> CallHeader<'static> {
    CallHeader {
        xid: 9,
        prog: ECHO_PROGRAM,
        vers: 1,
        procedure,
        cred: OpaqueAuth::None,
        verf: OpaqueAuth::None,
    }
}

fn words(w: &[u32]) -> Vec<u8> {
    w.iter().flat_map(|v| v.to_be_bytes()).collect()
}

// One item: 40-octet header, length word at 40..44, data at position 44. Five octets of
// data occupy 44..52 in the reconstructed stream (three octets of roundup), none inline.
#[test]
fn one_item_odd_length() {
    let data = *b"abcde";
    let mut buf = [0xeeu8; 128];
    let call = encode_call(
        &mut buf,
        &header(echo_proc::ECHO),
        &EchoData { data: &data },
        1,
    )
    .unwrap();
    assert_eq!(call.xid, 9);
    assert_eq!(call.len, 44);
    assert_eq!(call.xdr_len, 52);
    assert_eq!(
        call.read_chunks.as_slice(),
        &[ReadItem {
            position: 44,
            data: &data[..]
        }]
    );
    assert_eq!(&buf[40..44], &[0, 0, 0, 5]);
}

// Two items with inline data between them (ECHO2 a=5, tag, b=3):
//
//   xdr  0..40  header           inline 0..40
//   xdr 40..44  len_a = 5        inline 40..44
//   xdr 44..52  a + 3 roundup    (Read chunk at 44, 5 octets)
//   xdr 52..56  tag              inline 44..48
//   xdr 56..60  len_b = 3        inline 48..52
//   xdr 60..64  b + 1 roundup    (Read chunk at 60, 3 octets)
#[test]
fn two_items_at_different_positions() {
    let (a, b) = (*b"AAAAA", *b"BBB");
    let args = Echo2 {
        a: &a,
        tag: 0x1234_5678,
        b: &b,
    };
    let mut buf = [0u8; 128];
    let call = encode_call(&mut buf, &header(echo_proc::ECHO2), &args, 1).unwrap();
    assert_eq!(call.len, 52);
    assert_eq!(call.xdr_len, 64);
    assert_eq!(
        call.read_chunks.as_slice(),
        &[
            ReadItem {
                position: 44,
                data: &a[..]
            },
            ReadItem {
                position: 60,
                data: &b[..]
            }
        ]
    );
    assert_eq!(&buf[40..52], &words(&[5, 0x1234_5678, 3])[..]);

    // With a threshold of 4, `a` (5 octets) still moves but `b` (3) stays inline with
    // its padding: the inline stream is 40 + 4 + 4 + 4 + 4 = 56 octets.
    let call = encode_call(&mut buf, &header(echo_proc::ECHO2), &args, 4).unwrap();
    assert_eq!(call.len, 56);
    assert_eq!(call.xdr_len, 64);
    assert_eq!(
        call.read_chunks.as_slice(),
        &[ReadItem {
            position: 44,
            data: &a[..]
        }]
    );
    assert_eq!(
        &buf[44..56],
        &[0x12, 0x34, 0x56, 0x78, 0, 0, 0, 3, b'B', b'B', b'B', 0]
    );

    // With a threshold of 6 neither moves: nothing is a chunk.
    let call = encode_call(&mut buf, &header(echo_proc::ECHO2), &args, 6).unwrap();
    assert_eq!((call.len, call.xdr_len), (64, 64));
    assert!(call.read_chunks.is_empty());
}

// Positions are the same whichever earlier items moved: with `a` inline (padded to 8)
// and only `b` moved, b's position is still 60.
#[test]
fn positions_do_not_depend_on_which_items_moved() {
    let (a, b) = ([1u8; 5], [2u8; 7]);
    let mut buf = [0u8; 128];
    let mut enc = CallEncoder::with_ddp_threshold(&mut buf, &header(echo_proc::ECHO2), 6).unwrap();
    enc.opaque_ddp(&a).unwrap();
    assert_eq!((enc.position(), enc.xdr_position()), (52, 52));
    enc.u32(0).unwrap();
    enc.opaque_ddp(&b).unwrap();
    assert_eq!((enc.position(), enc.xdr_position()), (60, 68));
    let call = enc.finish();
    assert_eq!(
        call.read_chunks.as_slice(),
        &[ReadItem {
            position: 60,
            data: &b[..]
        }]
    );
}

// A longer header moves every position. AUTH_SYS body: stamp 4, machinename "client"
// 4 + 8 (6 octets padded), uid 4, gid 4, gids 4 + 2 * 4 = 36; the credential adds flavor
// and length: 44. Header: six words (24) + credential (44) + AUTH_NONE verifier (8) = 76.
#[test]
fn positions_count_from_the_xid() {
    let h = CallHeader {
        cred: OpaqueAuth::Sys(AuthSys {
            stamp: 0,
            machinename: b"client",
            uid: 1000,
            gid: 1000,
            gids: Gids::new(&[4, 24]).unwrap(),
        }),
        ..header(echo_proc::ECHO)
    };
    assert_eq!(h.encoded_len(), 76);
    let data = [3u8; 100];
    let mut buf = [0u8; 128];
    let call = encode_call(&mut buf, &h, &EchoData { data: &data }, 1).unwrap();
    assert_eq!(call.len, 80);
    assert_eq!(call.read_chunks[0].position, 80);
}

// Every length from 0 to 8 around a following item: roundup is 0, 3, 2, 1, 0, ...
#[test]
fn roundup_for_each_residue() {
    for len in 0..=8usize {
        let a = vec![9u8; len];
        let b = [8u8; 4];
        let mut buf = [0u8; 128];
        let args = Echo2 {
            a: &a,
            tag: 1,
            b: &b,
        };
        let call = encode_call(&mut buf, &header(echo_proc::ECHO2), &args, 1).unwrap();
        let padded = len.div_ceil(4) * 4;
        // b's data follows len_a, a (padded), tag, len_b.
        let b_pos = 40 + 4 + padded + 4 + 4;
        let last = call.read_chunks.last().unwrap();
        assert_eq!(last.position as usize, b_pos, "len {len}");
        // An empty item never becomes a chunk.
        assert_eq!(call.read_chunks.len(), if len == 0 { 1 } else { 2 });
        assert_eq!(call.xdr_len, b_pos + 4);
        // Inline: header, len_a, tag, len_b (an empty `a` has no data to pad either).
        assert_eq!(call.len, 40 + 12);
    }
}

/// Rebuilds the full XDR stream from the inline bytes and Read chunks, inserting each
/// chunk's data and zero roundup where its position says.
fn reconstruct(inline: &[u8], reads: &[ReadItem<'_>]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut from = 0;
    for r in reads {
        let inline_at = r.position as usize - (out.len() - from);
        out.extend_from_slice(&inline[from..inline_at]);
        out.extend_from_slice(r.data);
        out.resize(out.len() + (4 - r.data.len() % 4) % 4, 0);
        from = inline_at;
    }
    out.extend_from_slice(&inline[from..]);
    out
}

// The inline stream plus chunks reconstruct exactly what an all-inline encoder writes,
// and the responder's cursor decodes the same values from either.
#[test]
fn reconstructed_stream_equals_inline_encoding() {
    let (a, b) = (*b"hello, world", *b"x");
    let args = Echo2 {
        a: &a,
        tag: 77,
        b: &b,
    };
    let mut split = [0u8; 128];
    let call = encode_call(&mut split, &header(echo_proc::ECHO2), &args, 1).unwrap();
    let mut full = [0u8; 128];
    let n = header(echo_proc::ECHO2).encode(&mut full).unwrap();
    let mut enc = DdpEncoder::inline(&mut full[n..], n);
    args.encode(&mut enc).unwrap();
    let whole = enc.finish();
    assert_eq!(whole.len, call.xdr_len);
    assert_eq!(
        reconstruct(&split[..call.len], &call.read_chunks),
        &full[..whole.len]
    );

    let mut c = DdpCursor::with_read_chunks(&split[..call.len], 40, &call.read_chunks).unwrap();
    assert_eq!(Echo2::decode(&mut c).unwrap(), args);
    c.finish().unwrap();
    let mut c = DdpCursor::inline(&full[..whole.len], 40);
    assert_eq!(Echo2::decode(&mut c).unwrap(), args);
    c.finish().unwrap();
}

// Responder side: results go to Write chunks in order; an empty or missing chunk means
// inline (RFC 8267 §6.4.1); the requester decodes them back from what was written.
#[test]
fn write_chunks_pair_with_results_in_order() {
    let (a, b) = (*b"first", *b"second!");
    let res = Echo2 {
        a: &a,
        tag: 5,
        b: &b,
    };
    for caps in [&[][..], &[0], &[64], &[0, 64], &[64, 64], &[64, 0, 64]] {
        let mut buf = [0u8; 128];
        let mut enc = DdpEncoder::write_chunks(&mut buf[24..], 24, caps).unwrap();
        res.encode(&mut enc).unwrap();
        let done = enc.finish();
        let expect: Vec<(u32, &[u8])> = [&a[..], &b[..]]
            .iter()
            .enumerate()
            .filter(|(i, _)| caps.get(*i).is_some_and(|&c| c > 0))
            .map(|(i, d)| (i as u32, *d))
            .collect();
        let got: Vec<(u32, &[u8])> = done.writes.iter().map(|w| (w.chunk, w.data)).collect();
        assert_eq!(got, expect, "caps {caps:?}");
        // Inline: 3 words, plus each inlined payload padded.
        let inline_a = if caps.first().is_some_and(|&c| c > 0) {
            0
        } else {
            8
        };
        let inline_b = if caps.get(1).is_some_and(|&c| c > 0) {
            0
        } else {
            8
        };
        assert_eq!(done.len, 24 + 12 + inline_a + inline_b, "caps {caps:?}");
        assert_eq!(done.xdr_len, 24 + 12 + 16);

        // Requester: build the reply header in front, then decode.
        ReplyHeader::success(3).encode(&mut buf).unwrap();
        let mut written: Vec<&[u8]> = vec![&[]; caps.len()];
        for w in done.writes.iter() {
            written[w.chunk as usize] = w.data;
        }
        let (xid, mut c) = reply_results(&buf[..done.len], &written).unwrap();
        assert_eq!(xid, 3);
        assert_eq!(Echo2::decode(&mut c).unwrap(), res);
        c.finish().unwrap();
    }
}

#[test]
fn write_chunk_too_small_and_skips() {
    let data = [1u8; 10];
    let mut buf = [0u8; 64];
    let mut enc = DdpEncoder::write_chunks(&mut buf, 24, &[9, 10]).unwrap();
    assert_eq!(
        enc.opaque_ddp(&data),
        Err(DdpEncodeError::WriteChunkTooSmall {
            chunk: 0,
            capacity: 9,
            len: 10
        })
    );
    assert_eq!(enc.position(), 24, "nothing written");
    // A union arm without the item leaves chunk 0 empty; the data goes to chunk 1.
    enc.skip_ddp();
    enc.opaque_ddp(&data).unwrap();
    assert_eq!(
        enc.write_items(),
        &[WriteItem {
            chunk: 1,
            data: &data[..],
            at: 28,
        }]
    );
    assert_eq!(
        DdpEncoder::write_chunks(&mut buf, 0, &[1; 9]).err(),
        Some(DdpEncodeError::TooManyChunks { capacity: 8 })
    );
}

#[test]
fn encoder_errors() {
    // Buffer too small: offsets count from the start of the message.
    let mut buf = [0u8; 44];
    let mut enc = CallEncoder::new(&mut buf, &header(echo_proc::ECHO)).unwrap();
    enc.u32(1).unwrap();
    assert_eq!(
        enc.opaque(b"abc"),
        Err(DdpEncodeError::BufferTooSmall {
            needed: 48,
            available: 44
        })
    );
    assert_eq!(
        CallEncoder::new(&mut buf[..39], &header(1)).err(),
        Some(DdpEncodeError::BufferTooSmall {
            needed: 40,
            available: 39
        })
    );
    // More Read chunks than the list holds.
    let mut buf = [0u8; 128];
    let mut enc = CallEncoder::new(&mut buf, &header(echo_proc::ECHO)).unwrap();
    let d = [0u8; 1];
    for _ in 0..8 {
        enc.opaque_ddp(&d).unwrap();
    }
    let at = enc.position();
    assert_eq!(
        enc.opaque_ddp(&d),
        Err(DdpEncodeError::TooManyChunks { capacity: 8 })
    );
    assert_eq!(enc.position(), at, "nothing written");
    // A position past 2^32 - 1.
    let mut enc = DdpEncoder::read_chunks(&mut buf, u32::MAX as usize - 4, 1);
    enc.opaque_ddp(&d).unwrap();
    assert_eq!(enc.read_items()[0].position, u32::MAX);
    let mut enc = DdpEncoder::read_chunks(&mut buf, u32::MAX as usize - 3, 1);
    assert_eq!(
        enc.opaque_ddp(&d),
        Err(DdpEncodeError::TooLong { value: 1 << 32 })
    );
    assert_eq!(enc.position(), u32::MAX as usize - 3);
}

// RFC 5666 §3.7 lets a sender leave the roundup inside a chunk; RFC 8166 does not, and
// the cursor takes either, but nothing shorter or longer.
#[test]
fn chunk_length_must_match_length_word() {
    let msg = [vec![0u8; 40], words(&[5])].concat();
    let check = |chunk: &[u8]| {
        let reads = [ReadItem {
            position: 44,
            data: chunk,
        }];
        let mut c = DdpCursor::with_read_chunks(&msg, 40, &reads).unwrap();
        let r = c.opaque_ddp(100).map(<[u8]>::to_vec);
        if r.is_err() {
            assert_eq!(c.position(), 40, "cursor unmoved on error");
        }
        r
    };
    assert_eq!(check(b"abcde"), Ok(b"abcde".to_vec()));
    assert_eq!(check(b"abcde\0\0\0"), Ok(b"abcde".to_vec()));
    assert_eq!(
        check(b"abcd"),
        Err(DdpDecodeError::ChunkLength {
            offset: 40,
            len: 5,
            chunk_len: 4
        })
    );
    assert_eq!(
        check(b"abcdefghi"),
        Err(DdpDecodeError::ChunkLength {
            offset: 40,
            len: 5,
            chunk_len: 9
        })
    );
}

#[test]
fn cursor_leftovers() {
    let msg = [vec![0u8; 40], words(&[4]), b"abcd".to_vec()].concat();
    // A chunk nobody asked for.
    let reads = [ReadItem {
        position: 100,
        data: b"zz",
    }];
    let mut c = DdpCursor::with_read_chunks(&msg, 40, &reads).unwrap();
    assert_eq!(c.opaque_ddp(8), Ok(&b"abcd"[..]));
    assert_eq!(c.finish(), Err(DdpDecodeError::UnusedChunk { index: 0 }));
    // Inline octets left over.
    let mut c = DdpCursor::inline(&msg, 40);
    c.u32().unwrap();
    assert_eq!(
        c.finish(),
        Err(DdpDecodeError::TrailingBytes {
            offset: 44,
            count: 4
        })
    );
    // Too many chunks to track.
    let many = [ReadItem::default(); 9];
    assert_eq!(
        DdpCursor::with_read_chunks(&msg, 40, &many).err(),
        Some(DdpDecodeError::TooManyChunks { count: 9 })
    );
    // Bounds and truncation are XDR errors at message offsets; the cursor stays put.
    let mut c = DdpCursor::inline(&msg, 40);
    assert_eq!(
        c.opaque_ddp(3),
        Err(DdpDecodeError::Xdr(XdrError::TooLong {
            offset: 40,
            len: 4,
            max: 3
        }))
    );
    assert_eq!(c.position(), 40);
    let mut c = DdpCursor::inline(&msg[..46], 40);
    assert!(matches!(
        c.opaque(8),
        Err(DdpDecodeError::Xdr(XdrError::Truncated { offset: 44, .. }))
    ));
    assert_eq!(c.position(), 40);
}

// Requester side: data in a Write chunk where the results have no item for it.
#[test]
fn write_chunk_leftovers() {
    let msg = [vec![0u8; 24], words(&[0])].concat();
    let written: [&[u8]; 2] = [b"", b"data"];
    let mut c = DdpCursor::with_write_chunks(&msg, 24, &written).unwrap();
    assert_eq!(c.opaque_ddp(8), Ok(&b""[..]));
    assert_eq!(c.finish(), Err(DdpDecodeError::UnusedChunk { index: 1 }));
    let mut c = DdpCursor::with_write_chunks(&msg, 24, &written[1..]).unwrap();
    assert_eq!(
        c.skip_ddp(),
        Err(DdpDecodeError::UnexpectedChunkData { index: 0 })
    );
}

// RDMA_MSGP (RFC 5666 §3.9): opaque data at or above the threshold is preceded by
// padding up to the alignment of its buffer address; it is skipped and is not part of
// the XDR stream, so later Read chunk positions do not count it.
#[test]
fn msgp_padding_is_skipped() {
    // Receive buffer holds the message at offset 28 (after a transport header). The
    // first opaque (8 octets, threshold 8) has its length word at 40..44; its data would
    // start at buffer offset 28 + 44 = 72, so 56 octets of padding bring it to 128.
    let padding = Padding {
        align: 64,
        thresh: 8,
        base: 28,
    };
    let mut msg = [vec![0u8; 40], words(&[8])].concat();
    msg.extend_from_slice(&[0xff; 56]);
    msg.extend_from_slice(b"12345678");
    // Then a tag and a second DDP item in a Read chunk: XDR position 40 + 4 + 8 + 4 + 4.
    msg.extend_from_slice(&words(&[7, 2]));
    let b = *b"zz";
    let reads = [ReadItem {
        position: 60,
        data: &b,
    }];
    let mut c = DdpCursor::with_read_chunks(&msg, 40, &reads)
        .unwrap()
        .with_padding(Some(padding));
    let got = Echo2::decode(&mut c).unwrap();
    assert_eq!(
        got,
        Echo2 {
            a: b"12345678",
            tag: 7,
            b: &b
        }
    );
    c.finish().unwrap();
    // Below the threshold nothing is skipped.
    let short = [vec![0u8; 40], words(&[4]), b"abcd".to_vec()].concat();
    let mut c = DdpCursor::inline(&short, 40).with_padding(Some(padding));
    assert_eq!(c.opaque(8), Ok(&b"abcd"[..]));
}

// A reply that is not SUCCESS has no results to open.
#[test]
fn reply_results_reports_errors() {
    let mut buf = [0u8; 64];
    let n = ReplyHeader::garbage_args(4).encode(&mut buf).unwrap();
    assert_eq!(
        reply_results(&buf[..n], &[]).err(),
        Some(ReplyError::NotSuccess {
            xid: 4,
            status: AcceptStatus::GarbageArgs
        })
    );
    let n = ReplyHeader::rpc_mismatch(4).encode(&mut buf).unwrap();
    assert!(matches!(
        reply_results(&buf[..n], &[]),
        Err(ReplyError::Denied { xid: 4, .. })
    ));
    assert!(matches!(
        reply_results(&buf[..3], &[]),
        Err(ReplyError::Header(_))
    ));
}
