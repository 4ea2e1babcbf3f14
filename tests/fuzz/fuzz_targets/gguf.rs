//! Any bytes handed to the GGUF parser give a header or an error, never a panic, and what
//! parses reads back consistently (every tensor's data slice has its declared length).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(file) = hrx::gguf::GgufFile::from_bytes("fuzz.gguf", data.to_vec()) {
        for t in file.tensors() {
            assert_eq!(file.tensor_data(t).len() as u64, t.n_bytes);
        }
        for (_, v) in file.metadata() {
            let _ = v.to_string();
        }
    }
});
