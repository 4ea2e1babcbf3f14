//! What every fuzz target checks, one function per input kind; the targets in fuzz_targets/
//! only pick one (libFuzzer takes a panic, here or in hrx, as a crash: its hook aborts before
//! hrx's `catch_unwind` around the decoders can turn it into an error).

use hrx::image::{decode_bytes, probe_bytes, sniff, Format, Limits};

/// Any bytes handed to the GGUF parser give a header or an error, never a panic, and what
/// parses reads back consistently (every tensor's data slice has its declared length).
pub fn gguf(data: &[u8]) {
    if let Ok(file) = hrx::gguf::GgufFile::from_bytes("fuzz.gguf", data.to_vec()) {
        for t in file.tensors() {
            assert_eq!(file.tensor_data(t).len() as u64, t.n_bytes);
        }
        for (_, v) in file.metadata() {
            let _ = v.to_string();
        }
    }
}

/// Small enough that one input decodes in milliseconds; the limits are checked before any
/// pixel is decoded, so larger declared sizes only exercise the refusal.
const LIMITS: Limits = Limits { max_pixels: 1 << 22, max_file_bytes: 1 << 20 };

/// Bytes of `format` (others are left to that format's target) decode to an image or an error,
/// never a panic; an image has the size `probe_bytes` gives from its headers alone (what a
/// server counts the image's tokens and memory by before decoding it), and its bytes are
/// exactly width x height x 3.
pub fn image(data: &[u8], format: Format) {
    if sniff(data) != Ok(format) {
        return;
    }
    let probed = probe_bytes("fuzz", data, &LIMITS);
    if let Ok(image) = decode_bytes("fuzz", data, &LIMITS) {
        let size = (image.width(), image.height());
        assert_eq!(probed.ok(), Some(size), "a decoded image's size from its headers");
        assert_eq!(image.data().len(), size.0 * size.1 * 3);
    }
}
