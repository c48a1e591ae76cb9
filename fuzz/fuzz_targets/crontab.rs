#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| formica_fuzz::crontab::check(data));
