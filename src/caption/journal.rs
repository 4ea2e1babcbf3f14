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

/// The output of a run, held by it alone: an exclusive advisory lock on the file, released
/// when the journal is dropped (or the process dies).
pub struct Journal {
    file: File,
}

/// Why the output could not be opened for this run.
#[derive(Debug)]
pub enum OpenError {
    /// Another run holds it: who, where the system says.
    Busy(Option<String>),
    Io(io::Error),
}

impl From<io::Error> for OpenError {
    fn from(e: io::Error) -> Self {
        OpenError::Io(e)
    }
}

impl Journal {
    /// Opens the output at `path` (created if missing; nothing in it changed yet) and locks
    /// it: another run on the same output is `Busy`, or with `wait` is waited for (`waiting`
    /// called first with who holds it).
    pub fn lock(path: &Path, wait: bool, waiting: impl FnOnce(Option<String>)) -> Result<Journal, OpenError> {
        let file = OpenOptions::new().read(true).append(true).create(true).open(path)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let holder = holder(&file);
                if !wait {
                    return Err(OpenError::Busy(holder));
                }
                waiting(holder);
                file.lock()?;
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(e.into()),
        }
        Ok(Journal { file })
    }

    /// Starts the output anew, or with `resume` keeps it, cutting off a last line without
    /// its newline (a job killed while writing it) in one truncation; returns how many bytes
    /// that removed.
    pub fn start(&mut self, resume: bool) -> io::Result<u64> {
        let len = self.file.metadata()?.len();
        if !resume {
            self.file.set_len(0)?;
            return Ok(0);
        }
        // The torn line is at most the bytes after the last newline: read back until one.
        let mut end = len;
        let mut chunk = vec![0u8; 4096];
        while end > 0 {
            let start = end.saturating_sub(chunk.len() as u64);
            let part = &mut chunk[..(end - start) as usize];
            self.file.seek(SeekFrom::Start(start))?;
            self.file.read_exact(part)?;
            match part.iter().rposition(|&b| b == b'\n') {
                Some(i) => {
                    end = start + i as u64 + 1;
                    break;
                }
                None => end = start,
            }
        }
        if end < len {
            self.file.set_len(end)?;
        }
        Ok(len - end)
    }

    /// Writes one line and flushes it.
    pub fn record(&mut self, entry: &Json) -> io::Result<()> {
        let mut line = entry.to_string_compact();
        line.push('\n');
        self.file.write_all(line.as_bytes())?;
        self.file.flush()
    }
}

/// The process that holds a lock on `file`, as Linux's /proc/locks and the process's command
/// line tell ("process 41 (hrx caption ...)"); None where they do not (another system, a
/// sandbox that hides other processes).
fn holder(file: &File) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let m = file.metadata().ok()?;
    let dev = m.dev();
    // st_dev's major and minor numbers, as the kernel prints them there.
    let (major, minor) = (((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff), (dev & 0xff) | ((dev >> 12) & !0xff));
    let inode = format!("{major:02x}:{minor:02x}:{}", m.ino());
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    // "1: FLOCK  ADVISORY  WRITE 41 08:01:1234 0 EOF"; a waiter's line has "->" after its number.
    let pid = locks.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        (fields.get(1) == Some(&"FLOCK") && fields.get(5) == Some(&inode.as_str())).then(|| fields[4].to_owned())
    })?;
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let words: Vec<String> =
        cmdline.split(|&b| b == 0).filter(|w| !w.is_empty()).map(|w| String::from_utf8_lossy(w).into_owned()).collect();
    Some(match words.is_empty() {
        true => format!("process {pid}"),
        false => format!("process {pid} ({})", words.join(" ")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(path: &Path, resume: bool) -> (Journal, u64) {
        let mut j = Journal::lock(path, false, |_| {}).unwrap();
        let cut = j.start(resume).unwrap();
        (j, cut)
    }

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
        let (mut j, cut) = open(&path, true);
        assert_eq!(cut, torn.len() as u64);
        j.record(&Json::obj([("image", Json::str("b.png")), ("caption", Json::str("y"))])).unwrap();
        drop(j);
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, format!("{whole}{{\"image\":\"b.png\",\"caption\":\"y\"}}\n"));
        // Captioned after failing: no longer a failure.
        let seen = recorded(&path).unwrap();
        assert_eq!(seen.captioned.len(), 2);
        assert!(seen.failed.is_empty());
        // A file that is one torn line, and one without any newline in its last 4 KiB.
        std::fs::write(&path, "x".repeat(5000)).unwrap();
        assert_eq!(open(&path, true).1, 5000);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
        std::fs::write(&path, whole).unwrap();
        open(&path, false);
        assert_eq!(recorded(&path).unwrap(), Recorded::default());
        std::fs::remove_file(&path).unwrap();
        assert_eq!(recorded(&path).unwrap(), Recorded::default(), "a missing file records nothing");
    }

    /// One run holds an output at a time: a second is refused and told who holds it, or
    /// waits; the lock goes with the first journal.
    #[test]
    fn a_second_run_on_the_same_output_is_refused_or_waits() {
        let path = std::env::temp_dir().join(format!("hrx-journal-lock-{}.jsonl", std::process::id()));
        let first = Journal::lock(&path, false, |_| {}).unwrap();
        match Journal::lock(&path, false, |_| {}) {
            Err(OpenError::Busy(Some(who))) => {
                assert!(who.contains(&format!("process {}", std::process::id())), "{who}")
            }
            other => panic!("{:?}", other.map(|_| ())),
        }
        let waiter = std::thread::spawn({
            let path = path.clone();
            move || {
                let mut told = None;
                Journal::lock(&path, true, |who| told = Some(who)).map(|_| told)
            }
        });
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert!(!waiter.is_finished(), "the second run waits while the first holds the output");
        drop(first);
        let told = waiter.join().unwrap().unwrap();
        assert!(told.is_some(), "the waiter was told it waits");
        std::fs::remove_file(&path).unwrap();
    }
}
