//! Where a request's images come from: base64 `data:` URLs, and `file://` paths under the
//! folders the server allows (`--allow-files DIR`). hrx is offline, so http(s) URLs are refused,
//! never fetched.

use super::http::HttpError;
use base64::Engine;
use std::io::Read;
use std::path::{Path, PathBuf};

#[derive(Debug, PartialEq)]
pub enum ImageSource {
    Bytes(Vec<u8>),
    File(PathBuf),
}

/// Reads an `image_url`'s `url`; `file://` URLs only where `allow_files` (folders are checked
/// when the file is read: `read_allowed`).
pub fn resolve(url: &str, allow_files: bool) -> Result<ImageSource, HttpError> {
    let bad = |m: String| HttpError::new(400, m);
    let scheme = url.split_once(':').map(|(s, _)| s.to_ascii_lowercase()).unwrap_or_default();
    match scheme.as_str() {
        "data" => data_url(url).map(ImageSource::Bytes).map_err(bad),
        "file" if allow_files => file_url(url).map(ImageSource::File).map_err(bad),
        "file" => Err(bad("file:// image URLs are off: start hrx serve with --allow-files DIR, or send a data:image/...;base64 URL".into())),
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

/// The one answer for a file image that cannot be used, whatever the reason (outside the
/// folders, missing, a directory, a FIFO, unreadable, too large, not an image): a client
/// learns nothing of the server's files from it.
pub fn unusable_file(path: &Path) -> HttpError {
    HttpError::new(
        400,
        format!(
            "{} is not an image file hrx serve may read (regular image files under --allow-files folders)",
            path.display()
        ),
    )
}

/// The bytes of image file `path` if it is a regular file under one of `folders` (canonical
/// paths: symbolic links are followed before the check) of at most `max_bytes`. Opened without
/// blocking (a FIFO would wait for a writer forever) and checked on the opened file, so a file
/// swapped after the check is not read.
pub fn read_allowed(path: &Path, folders: &[PathBuf], max_bytes: u64) -> Result<Vec<u8>, HttpError> {
    use std::os::unix::fs::OpenOptionsExt;
    // Linux's O_NONBLOCK (the same on x86-64 and AArch64).
    const O_NONBLOCK: i32 = 0o4000;
    let unusable = || unusable_file(path);
    let real = std::fs::canonicalize(path).map_err(|_| unusable())?;
    if !folders.iter().any(|f| real.starts_with(f)) {
        return Err(unusable());
    }
    let file = std::fs::OpenOptions::new().read(true).custom_flags(O_NONBLOCK).open(&real).map_err(|_| unusable())?;
    let meta = file.metadata().map_err(|_| unusable())?;
    if !meta.is_file() || meta.len() == 0 || meta.len() > max_bytes {
        return Err(unusable());
    }
    let mut bytes = Vec::new();
    file.take(max_bytes.saturating_add(1)).read_to_end(&mut bytes).map_err(|_| unusable())?;
    if bytes.len() as u64 > max_bytes {
        return Err(unusable());
    }
    Ok(bytes)
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
        assert!(resolve("file:///tmp/a.png", false).unwrap_err().message.contains("--allow-files DIR"));
        assert_eq!(resolve("file:///tmp/a%20b.png", true), Ok(ImageSource::File("/tmp/a b.png".into())));
        assert_eq!(resolve("file://localhost/x", true), Ok(ImageSource::File("/x".into())));
        for bad in ["file://host/x", "file:relative", "file:///a%zz", "file:///a%4", "/etc/passwd", "ftp://x"] {
            assert_eq!(resolve(bad, true).unwrap_err().status, 400, "{bad}");
        }
    }

    #[test]
    fn files_are_read_only_when_regular_and_under_an_allowed_folder() {
        let root = std::env::temp_dir().join(format!("hrx-allow-{}", std::process::id()));
        let (inside, outside) = (root.join("in"), root.join("out"));
        std::fs::create_dir_all(&inside).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(inside.join("a.png"), b"bytes").unwrap();
        std::fs::write(outside.join("b.png"), b"bytes").unwrap();
        std::os::unix::fs::symlink(outside.join("b.png"), inside.join("link.png")).unwrap();
        let fifo = inside.join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status().is_ok_and(|s| s.success());
        let folders = [std::fs::canonicalize(&inside).unwrap()];
        assert_eq!(read_allowed(&inside.join("a.png"), &folders, 100).unwrap(), b"bytes");
        // One message for everything else: outside, through a link out, a folder, missing,
        // too large, a FIFO (which must not block).
        let message = |p: &Path, max| read_allowed(p, &folders, max).unwrap_err().message;
        let mut cases = vec![
            (outside.join("b.png"), 100),
            (inside.join("link.png"), 100),
            (inside.clone(), 100),
            (inside.join("missing.png"), 100),
            (inside.join("a.png"), 3),
            (inside.join("../out/b.png"), 100),
        ];
        if made {
            cases.push((fifo.clone(), 100));
        }
        for (p, max) in cases {
            assert_eq!(message(&p, max), unusable_file(&p).message, "{}", p.display());
        }
        std::fs::remove_dir_all(&root).unwrap();
    }
}
