#![no_main]
//! Arbitrary bytes as the inbound side of an iWARP connection: the MPA responder
//! handshake, then the FPDU stream (with and without CRC), then any Terminate bodies.
//! Nothing may panic, and the reader must account for every octet it is given.
use libfuzzer_sys::fuzz_target;
use rpcrdma::iwarp::handshake::{Responder, ResponderConfig};
use rpcrdma::iwarp::reader::{FpduEvent, FpduReader};
use rpcrdma::iwarp::terminate::Terminate;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, data)) = data.split_first() else {
        return;
    };
    let crc = mode & 1 == 1;

    // The handshake must consume no more than it was given.
    let mut responder = Responder::new(ResponderConfig::default());
    if let Ok(p) = responder.feed(data) {
        assert!(p.consumed <= data.len());
    }

    // Feed the stream in pieces whose sizes come from the mode octet.
    let piece = usize::from(mode >> 1).max(1);
    let mut reader = FpduReader::new(crc);
    let mut rest = data;
    let mut steps = 0usize;
    'outer: while !rest.is_empty() {
        let take = piece.min(rest.len());
        let mut chunk = &rest[..take];
        rest = &rest[take..];
        while !chunk.is_empty() {
            steps += 1;
            assert!(steps < 4 * data.len() + 16, "reader made no progress");
            match reader.step(chunk) {
                Ok(step) => {
                    assert!(step.consumed <= chunk.len());
                    if let Some(FpduEvent::Payload { data: d, .. }) = step.event {
                        assert!(!d.is_empty());
                    }
                    if step.consumed == 0 && step.event.is_none() {
                        break;
                    }
                    chunk = &chunk[step.consumed..];
                }
                Err(_) => break 'outer,
            }
        }
    }

    // Terminate bodies decode or fail cleanly, and what decodes re-encodes.
    if let Ok(t) = Terminate::decode(data) {
        let mut out = [0u8; 256];
        let _ = t.encode(&mut out);
    }
});
