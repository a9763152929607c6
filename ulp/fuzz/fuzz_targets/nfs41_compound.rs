//! The NFSv4.1 COMPOUND codecs on arbitrary octets: what a hostile server can send our
//! client (`CompoundRes`, with READ data from Write chunks) and what a client can send a
//! server (`CompoundArgs`). Checked:
//!
//! - nothing panics;
//! - what decodes completely re-encodes to exactly the octets it came from (XDR is
//!   canonical), for arguments and for results without Write-chunk data.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rpcrdma_ulp::ddp::{DdpCursor, DdpEncoder, XdrCodec};
use rpcrdma_ulp::nfs::v41::compound::{CompoundArgs, CompoundRes};

fn canonical<'a, T: XdrCodec<'a>>(body: &'a [u8]) {
    let mut c = DdpCursor::inline(body, 0);
    let Ok(v) = T::decode(&mut c) else { return };
    if c.finish().is_err() {
        return;
    }
    let mut out = vec![0u8; body.len() + 8];
    let mut e = DdpEncoder::inline(&mut out, 0);
    v.encode(&mut e).expect("a decoded value re-encodes");
    let n = e.finish().len;
    assert_eq!(&out[..n], body, "non-canonical round trip");
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, body)) = data.split_first() else { return };
    match sel % 3 {
        0 => canonical::<CompoundArgs>(body),
        1 => canonical::<CompoundRes>(body),
        _ => {
            // READ results whose data sits in Write chunks: the first two octets say how
            // long the two chunks' data is.
            let (a, b, rest) = match body {
                [a, b, rest @ ..] => (usize::from(*a), usize::from(*b), rest),
                _ => return,
            };
            let data = vec![0x5a; a + b];
            let written = [&data[..a], &data[a..]];
            let Ok(mut c) = DdpCursor::with_write_chunks(rest, 0, &written) else {
                return;
            };
            if CompoundRes::decode(&mut c).is_ok() {
                let _ = c.finish();
            }
        }
    }
});
