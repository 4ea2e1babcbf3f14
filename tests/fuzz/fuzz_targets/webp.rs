//! The WebP decoder: see `hrx_fuzz::image`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| hrx_fuzz::image(data, hrx::image::Format::WebP));
