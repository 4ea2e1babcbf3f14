//! The GGUF parser: see `hrx_fuzz::gguf`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| hrx_fuzz::gguf(data));
