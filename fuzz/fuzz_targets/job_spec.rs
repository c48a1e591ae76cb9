#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| formica_fuzz::payloads::job_spec(data));
