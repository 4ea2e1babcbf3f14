//! The output of a caption job: one JSON object a line, appended and flushed per image, so a
//! killed job loses nothing it finished and `--resume` knows what is done.

use crate::json::{self, Json};
use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::Path;

/// What an earlier run's output holds, by image ([`image_key`]): those with a caption and
/// those with only errors. Lines that are not such an object are ignored.
#[derive(Debug, Default, PartialEq)]
pub struct Recorded {
    pub captioned: HashSet<String>,
    pub failed: HashSet<String>,
}

/// One image however it was named: its canonical path where it exists (`x.png`, `./x.png`
/// and `/abs/x.png` are one image), else the name as given.
pub fn image_key(path: &Path) -> String {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned()).display().to_string()
}

/// The images recorded in the output at `path` (a missing file records none).
pub fn recorded(path: &Path) -> io::Result<Recorded> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Recorded::default()),
        Err(e) => return Err(e),
    };
    let text = String::from_utf8_lossy(&bytes);
    // Only whole lines: a last one without its newline is cut off when the journal is opened
    // again, and its image captioned again.
    let whole = text.rfind('\n').map_or("", |end| &text[..end]);
    let mut seen = Recorded::default();
    for line in whole.lines() {
        let Ok(value) = json::parse_untrusted(line, 8) else { continue };
        let Some(fields) = value.get::<std::collections::HashMap<String, tinyjson::JsonValue>>() else { continue };
        let Some(image) = fields.get("image").and_then(|v| v.get::<String>()) else { continue };
        let key = image_key(Path::new(image));
        if fields.contains_key("caption") {
            seen.captioned.insert(key);
        } else if fields.contains_key("error") {
            seen.failed.insert(key);
        }
    }
    seen.failed.retain(|k| !seen.captioned.contains(k));
    Ok(seen)
}

pub struct Journal {
    file: File,
}

impl Journal {
    /// Starts the file anew, or with `append` adds to it. A last line without its newline (a
    /// job killed while writing it) is cut off first, in one truncation; returns how many
    /// bytes that removed.
    pub fn open(path: &Path, append: bool) -> io::Result<(Journal, u64)> {
        if !append {
            return Ok((Journal { file: File::create(path)? }, 0));
        }
        let mut file = OpenOptions::new().read(true).append(true).create(true).open(path)?;
        let len = file.metadata()?.len();
        // The torn line is at most the bytes after the last newline: read back until one.
        let mut end = len;
        let mut chunk = vec![0u8; 4096];
        while end > 0 {
            let start = end.saturating_sub(chunk.len() as u64);
            let part = &mut chunk[..(end - start) as usize];
            file.seek(SeekFrom::Start(start))?;
            file.read_exact(part)?;
            match part.iter().rposition(|&b| b == b'\n') {
                Some(i) => {
                    end = start + i as u64 + 1;
                    break;
                }
                None => end = start,
            }
        }
        if end < len {
            file.set_len(end)?;
        }
        Ok((Journal { file }, len - end))
    }

    /// Writes one line and flushes it.
    pub fn record(&mut self, entry: &Json) -> io::Result<()> {
        let mut line = entry.to_string_compact();
        line.push('\n');
        self.file.write_all(line.as_bytes())?;
        self.file.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resume_reads_captions_and_failures_and_cuts_a_torn_line() {
        let path = std::env::temp_dir().join(format!("hrx-journal-{}.jsonl", std::process::id()));
        // A record whole but for its newline is cut as well: not counted as done.
        let torn = "{\"image\":\"c.png\",\"caption\":\"z\"}";
        let whole = "{\"image\":\"a.png\",\"caption\":\"x\"}\n{\"image\":\"b.png\",\"error\":\"bad\"}\n";
        std::fs::write(&path, format!("{whole}{torn}")).unwrap();
        let seen = recorded(&path).unwrap();
        assert_eq!(seen.captioned, HashSet::from(["a.png".to_string()]));
        assert_eq!(seen.failed, HashSet::from(["b.png".to_string()]));
        let (mut j, cut) = Journal::open(&path, true).unwrap();
        assert_eq!(cut, torn.len() as u64);
        j.record(&Json::obj([("image", Json::str("b.png")), ("caption", Json::str("y"))])).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, format!("{whole}{{\"image\":\"b.png\",\"caption\":\"y\"}}\n"));
        // Captioned after failing: no longer a failure.
        let seen = recorded(&path).unwrap();
        assert_eq!(seen.captioned.len(), 2);
        assert!(seen.failed.is_empty());
        // A file that is one torn line, and one without any newline in its last 4 KiB.
        std::fs::write(&path, "x".repeat(5000)).unwrap();
        assert_eq!(Journal::open(&path, true).unwrap().1, 5000);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
        Journal::open(&path, false).unwrap();
        assert_eq!(recorded(&path).unwrap(), Recorded::default());
        std::fs::remove_file(&path).unwrap();
        assert_eq!(recorded(&path).unwrap(), Recorded::default(), "a missing file records nothing");
    }
}
