#![no_main]
//! Arbitrary bytes as the MPA Reply an initiator reads (RFC 5044 §7, RFC 6581): fed in
//! pieces whose size comes from the first octet, to an initiator asking for revision 1
//! or 2, with or without CRCs. Nothing may panic, no piece may be over-consumed, and an
//! established exchange must describe the frame it came from (private data inside it,
//! CRCs and revision no more than asked for).
use libfuzzer_sys::fuzz_target;
use rpcrdma::iwarp::handshake::{Initiator, InitiatorConfig};
use rpcrdma::iwarp::mpa::Revision;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, reply)) = data.split_first() else {
        return;
    };
    let revision = if mode & 1 == 1 { Revision::V2 } else { Revision::V1 };
    let config = InitiatorConfig {
        crc: mode & 2 == 2,
        revision,
        ird: 16,
        ord: 16,
    };
    let Ok(mut ini) = Initiator::new(config, b"fuzz") else {
        return;
    };
    assert!(!ini.request().is_empty());
    let piece = usize::from(mode >> 2).max(1);
    let mut fed = 0usize;
    for chunk in reply.chunks(piece) {
        match ini.feed(chunk) {
            Ok(p) => {
                assert!(p.consumed <= chunk.len(), "consumed more than it was given");
                fed += p.consumed;
                if let Some(est) = p.done {
                    assert!(est.revision <= revision, "a revision above the one asked for");
                    let frame = ini.peer_frame().len();
                    assert!(frame <= fed, "a frame longer than what was fed");
                    assert!(est.private_data.end <= frame, "private data outside the frame");
                    assert!(est.private_data.start <= est.private_data.end);
                    // Once established, more input is refused, never reinterpreted.
                    assert!(ini.feed(b"more").is_err());
                    return;
                }
            }
            Err(_) => {
                // A failed initiator stays failed.
                assert!(ini.feed(chunk).is_err());
                return;
            }
        }
    }
});
