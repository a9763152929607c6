#![no_main]
//! Arbitrary bytes as the FPDU stream a running siw connection receives: the real
//! receive engine (FPDU framing, DDP/RDMAP dispatch, key checks, placement) over a
//! protection domain with one registration, a fast-registered key and posted receives.
//! The first octet picks CRCs and the piece size the stream arrives in. Nothing may
//! panic, and no octet outside the registered memory may change (checked by canaries
//! around it inside `rx_stream`).
use libfuzzer_sys::fuzz_target;
use rpcrdma::fabric::siw::fuzzing::rx_stream;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, stream)) = data.split_first() else {
        return;
    };
    rx_stream(stream, usize::from(mode >> 1).max(1), mode & 1 == 1);
});
