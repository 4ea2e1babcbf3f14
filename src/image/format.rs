//! Which decoder to use, from the first bytes of the file (never from its name: a PNG called
//! `photo.jpg` is still a PNG, and a text file called `photo.jpg` is not an image).

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Png,
    Jpeg,
    WebP,
}

impl Format {
    pub fn name(self) -> &'static str {
        match self {
            Format::Png => "PNG",
            Format::Jpeg => "JPEG",
            Format::WebP => "WebP",
        }
    }
}

/// The format of `bytes`, or `Err(what they look like)` for anything hrx cannot decode.
pub fn sniff(bytes: &[u8]) -> Result<Format, Option<&'static str>> {
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        return Ok(Format::Png);
    }
    // SOI followed by the start of any marker segment.
    if bytes.starts_with(&[0xFF, 0xD8, 0xFF]) {
        return Ok(Format::Jpeg);
    }
    if bytes.len() >= 12 && bytes.starts_with(b"RIFF") && &bytes[8..12] == b"WEBP" {
        return Ok(Format::WebP);
    }
    Err(looks_like(bytes))
}

/// A hint for the error message about an unsupported file.
fn looks_like(bytes: &[u8]) -> Option<&'static str> {
    const SIGNATURES: &[(&[u8], &str)] = &[
        (b"GIF87a", "a GIF image, which is not supported"),
        (b"GIF89a", "a GIF image, which is not supported"),
        (b"BM", "a BMP image, which is not supported"),
        (b"II*\0", "a TIFF image, which is not supported"),
        (b"MM\0*", "a TIFF image, which is not supported"),
        (b"%PDF", "a PDF document"),
    ];
    if let Some((_, what)) = SIGNATURES.iter().find(|(sig, _)| bytes.starts_with(sig)) {
        return Some(what);
    }
    if bytes.get(4..8) == Some(b"ftyp") {
        return Some("an ISO media file (HEIC/AVIF/MP4), which is not supported");
    }
    let head = &bytes[..bytes.len().min(512)];
    let texty = |&b: &u8| b == b'\n' || b == b'\r' || b == b'\t' || (0x20..0x7F).contains(&b) || b >= 0x80;
    // UTF-8 that is valid up to the 512-byte cut (which may split a character).
    let utf8 = std::str::from_utf8(head).map_or_else(|e| e.error_len().is_none(), |_| true);
    if !head.is_empty() && head.iter().all(texty) && utf8 {
        return Some("text");
    }
    None
}
