//! Fuzzes the worker protocol's frame decoder: any byte string must decode
//! or fail with a `ProtocolError`, never panic or allocate past the limit.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let max = 64 * 1024;
    let _ = cordon_starlark_protocol::frame::decode_frames(data, max);
    let _ = cordon_starlark_protocol::frame::read_message(&mut &data[..], max);
});
