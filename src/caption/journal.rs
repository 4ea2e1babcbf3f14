//! The output of a caption job: one JSON object a line, appended and flushed per image, so a
//! killed job loses nothing it finished and `--resume` knows what is done.

use crate::json::{self, Json};
use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::Path;

/// The images with a caption in an earlier run's output (a missing file has none). Lines that
/// are not such an object (errors, a line cut short by a kill) are ignored.
pub fn captioned(path: &Path) -> io::Result<HashSet<String>> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(HashSet::new()),
        Err(e) => return Err(e),
    };
    let text = String::from_utf8_lossy(&bytes);
    let mut done = HashSet::new();
    for line in text.lines() {
        let Ok(value) = json::parse_untrusted(line, 8) else { continue };
        let Some(fields) = value.get::<std::collections::HashMap<String, tinyjson::JsonValue>>() else { continue };
        if let (Some(image), Some(_)) = (fields.get("image").and_then(|v| v.get::<String>()), fields.get("caption")) {
            done.insert(image.clone());
        }
    }
    Ok(done)
}

pub struct Journal {
    file: File,
}

impl Journal {
    /// Starts the file anew, or with `append` adds to it (after ending a line cut short).
    pub fn open(path: &Path, append: bool) -> io::Result<Journal> {
        if !append {
            return Ok(Journal { file: File::create(path)? });
        }
        let mut file = OpenOptions::new().read(true).append(true).create(true).open(path)?;
        let len = file.metadata()?.len();
        if len > 0 {
            let mut last = [0u8];
            file.seek(SeekFrom::Start(len - 1))?;
            file.read_exact(&mut last)?;
            if last[0] != b'\n' {
                file.write_all(b"\n")?;
            }
        }
        Ok(Journal { file })
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
    fn resume_reads_captions_and_mends_a_cut_line() {
        let path = std::env::temp_dir().join(format!("hrx-journal-{}.jsonl", std::process::id()));
        std::fs::write(&path, "{\"image\":\"a.png\",\"caption\":\"x\"}\n{\"image\":\"b.png\",\"error\":\"bad\"}\n{\"image\":\"c.png\",\"cap").unwrap();
        assert_eq!(captioned(&path).unwrap(), HashSet::from(["a.png".to_string()]));
        let mut j = Journal::open(&path, true).unwrap();
        j.record(&Json::obj([("image", Json::str("d.png")), ("caption", Json::str("y"))])).unwrap();
        assert_eq!(captioned(&path).unwrap(), HashSet::from(["a.png".to_string(), "d.png".to_string()]));
        Journal::open(&path, false).unwrap();
        assert!(captioned(&path).unwrap().is_empty());
        std::fs::remove_file(&path).unwrap();
        assert!(captioned(&path).unwrap().is_empty(), "a missing file has no captions");
    }
}
