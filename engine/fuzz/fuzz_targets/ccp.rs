#![no_main]
// PLACEHOLDER: the owner of this codec replaces this body with a real target.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = data;
});
