#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| gapura_fuzz::websocket::websocket(data));
