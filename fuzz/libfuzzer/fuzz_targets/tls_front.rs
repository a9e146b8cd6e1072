#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| gapura_fuzz::front::tls_front(data));
