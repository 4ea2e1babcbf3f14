//! Where a request's images come from: base64 `data:` URLs, and `file://` paths when the
//! server allows them. hrx is offline, so http(s) URLs are refused, never fetched.

use super::http::HttpError;
use base64::Engine;
use std::path::PathBuf;

#[derive(Debug, PartialEq)]
pub enum ImageSource {
    Bytes(Vec<u8>),
    File(PathBuf),
}

/// Reads an `image_url`'s `url`.
pub fn resolve(url: &str, allow_files: bool) -> Result<ImageSource, HttpError> {
    let bad = |m: String| HttpError::new(400, m);
    let scheme = url.split_once(':').map(|(s, _)| s.to_ascii_lowercase()).unwrap_or_default();
    match scheme.as_str() {
        "data" => data_url(url).map(ImageSource::Bytes).map_err(bad),
        "file" if allow_files => file_url(url).map(ImageSource::File).map_err(bad),
        "file" => Err(bad("file:// image URLs are off: start hrx serve with --allow-files, or send a data:image/...;base64 URL".into())),
        "http" | "https" => Err(bad(
            "hrx serve is offline and does not fetch http(s) image URLs: send the image as a data:image/png;base64,... URL".into(),
        )),
        _ => Err(bad("an image_url must be a data:image/...;base64,... URL".into())),
    }
}

/// `data:[image/TYPE];base64,DATA` → the bytes (the type is not trusted: the decoder sniffs).
fn data_url(url: &str) -> Result<Vec<u8>, String> {
    let rest = url.get(5..).unwrap_or_default();
    let (meta, data) = rest.split_once(',').ok_or("a data URL needs a comma before its data")?;
    let mime = meta
        .len()
        .checked_sub(7)
        .filter(|&at| meta.get(at..).is_some_and(|m| m.eq_ignore_ascii_case(";base64")))
        .map(|at| &meta[..at]);
    let Some(mime) = mime else {
        return Err("image data URLs must be base64 (data:image/png;base64,...)".into());
    };
    if !(mime.is_empty() || mime.get(..6).is_some_and(|m| m.eq_ignore_ascii_case("image/"))) {
        return Err(format!("a data URL of type {mime:?} is not an image"));
    }
    base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .map_err(|e| format!("the image's base64 data is not valid: {e}"))
}

/// `file:///abs/path` or `file://localhost/abs/path`, percent-escapes decoded.
fn file_url(url: &str) -> Result<PathBuf, String> {
    let rest = url.get(7..).filter(|_| url.get(5..7) == Some("//")).ok_or("a file URL is file:///absolute/path")?;
    let rest = rest.strip_prefix("localhost").unwrap_or(rest);
    if !rest.starts_with('/') {
        return Err("a file URL is file:///absolute/path (no other host)".into());
    }
    let mut bytes = Vec::with_capacity(rest.len());
    let mut it = rest.bytes();
    while let Some(b) = it.next() {
        if b != b'%' {
            bytes.push(b);
            continue;
        }
        let hex = [it.next(), it.next()];
        let value = match hex {
            [Some(h), Some(l)] => std::str::from_utf8(&[h, l]).ok().and_then(|s| u8::from_str_radix(s, 16).ok()),
            _ => None,
        };
        bytes.push(value.ok_or("a file URL has a bad %-escape")?);
    }
    String::from_utf8(bytes).map(PathBuf::from).map_err(|_| "a file URL's path is not UTF-8".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_urls_decode_strictly() {
        assert_eq!(resolve("data:image/png;base64,aGk=", false), Ok(ImageSource::Bytes(b"hi".to_vec())));
        assert_eq!(resolve("DATA:;BASE64,aGk=", false), Ok(ImageSource::Bytes(b"hi".to_vec())));
        for bad in [
            "data:image/png;base64,aGk",
            "data:image/png;base64,a*k=",
            "data:image/png,hi",
            "data:text/plain;base64,aGk=",
            "data:x",
            "data:",
        ] {
            assert_eq!(resolve(bad, false).unwrap_err().status, 400, "{bad}");
        }
    }

    #[test]
    fn only_allowed_file_urls_and_never_http() {
        assert!(resolve("https://example.com/a.png", true).unwrap_err().message.contains("offline"));
        assert!(resolve("file:///tmp/a.png", false).unwrap_err().message.contains("--allow-files"));
        assert_eq!(resolve("file:///tmp/a%20b.png", true), Ok(ImageSource::File("/tmp/a b.png".into())));
        assert_eq!(resolve("file://localhost/x", true), Ok(ImageSource::File("/x".into())));
        for bad in ["file://host/x", "file:relative", "file:///a%zz", "file:///a%4", "/etc/passwd", "ftp://x"] {
            assert_eq!(resolve(bad, true).unwrap_err().status, 400, "{bad}");
        }
    }
}
