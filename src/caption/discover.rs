//! Which files a caption job covers: files given by name, images found in folders (recursively,
//! by extension or by their first bytes), and the paths listed in `@LIST` files.

use crate::image;
use std::io::Read;
use std::path::{Path, PathBuf};

const EXTENSIONS: &[&str] = &["png", "jpg", "jpeg", "webp"];

/// The images of a job, sorted and each once, and the inputs that could not be read.
#[derive(Debug, Default, PartialEq)]
pub struct Found {
    pub images: Vec<PathBuf>,
    pub problems: Vec<(PathBuf, String)>,
    /// The folders named as inputs (on the command line or in lists).
    pub roots: Vec<PathBuf>,
}

impl Found {
    /// An image's path within the input folder it was found in (the innermost, where named
    /// folders nest), else as it was named: the same on every box that mounts the folder
    /// elsewhere.
    pub fn relative<'a>(&self, image: &'a Path) -> &'a Path {
        let within = self.roots.iter().filter_map(|root| image.strip_prefix(root).ok());
        within.min_by_key(|rest| rest.as_os_str().len()).unwrap_or(image)
    }
}

/// Expands `inputs`: a folder gives its images (symbolic links to folders are not followed), a
/// regular file is taken as it is (a bad one fails when it is read), `@LIST` gives the paths in
/// LIST, one a line (blank lines skipped), each expanded like a command-line input. An input
/// that is missing, or neither a folder nor a regular file (a FIFO would block its reader for
/// ever), is a problem of the run, as is a list or folder that cannot be read.
pub fn find_images(inputs: &[String]) -> Found {
    let mut found = Found::default();
    for input in inputs {
        match input.strip_prefix('@') {
            Some(list) => match std::fs::read_to_string(list) {
                Ok(text) => {
                    for line in text.lines().map(str::trim_end).filter(|l| !l.is_empty()) {
                        add(Path::new(line), &mut found);
                    }
                }
                Err(e) => found.problems.push((PathBuf::from(list), format!("cannot read the list {list}: {e}"))),
            },
            None => add(Path::new(input), &mut found),
        }
    }
    found.images.sort();
    // One image however it was named (`x.png`, `./x.png`, `/abs/x.png`): the first spelling.
    let mut seen = std::collections::HashSet::new();
    found.images.retain(|p| seen.insert(super::journal::image_key(p)));
    found
}

fn add(path: &Path, found: &mut Found) {
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => {
            found.roots.push(path.to_owned());
            walk(path, found)
        }
        Ok(m) if m.is_file() => found.images.push(path.to_owned()),
        Ok(_) => found.problems.push((path.to_owned(), format!("{} is not a regular file", path.display()))),
        Err(e) => found.problems.push((path.to_owned(), format!("cannot read {}: {e}", path.display()))),
    }
}

fn walk(dir: &Path, found: &mut Found) {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) => {
            return found.problems.push((dir.to_owned(), format!("cannot read the folder {}: {e}", dir.display())))
        }
    };
    for entry in entries {
        let entry = match entry {
            Ok(entry) => entry,
            Err(e) => {
                return found.problems.push((dir.to_owned(), format!("cannot read the folder {}: {e}", dir.display())))
            }
        };
        let path = entry.path();
        let Ok(kind) = entry.file_type() else { continue };
        if kind.is_dir() {
            walk(&path, found);
        } else if path.is_file() && looks_like_image(&path) {
            found.images.push(path);
        }
    }
}

/// An image extension (any case), or the first bytes of PNG, JPEG or WebP.
fn looks_like_image(path: &Path) -> bool {
    let by_name =
        path.extension().and_then(|e| e.to_str()).is_some_and(|e| EXTENSIONS.iter().any(|x| e.eq_ignore_ascii_case(x)));
    by_name || first_bytes(path).is_some_and(|head| image::sniff(&head).is_ok())
}

fn first_bytes(path: &Path) -> Option<Vec<u8>> {
    let mut head = Vec::with_capacity(16);
    std::fs::File::open(path).ok()?.take(16).read_to_end(&mut head).ok()?;
    Some(head)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_images_by_extension_and_content_sorted_once() {
        let dir = std::env::temp_dir().join(format!("hrx-discover-{}", std::process::id()));
        let sub = dir.join("sub");
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::write(dir.join("b.JPG"), b"not really").unwrap();
        std::fs::write(sub.join("noext"), b"\x89PNG\r\n\x1a\nrest").unwrap();
        std::fs::write(dir.join("notes.txt"), b"hello").unwrap();
        std::fs::write(dir.join("a.webp"), b"").unwrap();
        let list = dir.join("list.txt");
        std::fs::write(&list, format!("{}\n\n{}\n", dir.join("a.webp").display(), dir.join("missing.png").display()))
            .unwrap();
        let d = dir.display().to_string();
        let found = find_images(&[d.clone(), format!("@{}", list.display()), format!("@{d}/nope.txt")]);
        let want: Vec<PathBuf> = vec![dir.join("a.webp"), dir.join("b.JPG"), sub.join("noext")];
        assert_eq!(found.images, want);
        assert_eq!(found.problems.len(), 2, "{:?}", found.problems);
        assert!(found.problems[0].1.contains("missing.png"), "{:?}", found.problems);
        assert!(found.problems[1].1.contains("nope.txt"), "{:?}", found.problems);
        // Paths within the input folder (the innermost named), the same wherever it is mounted.
        assert_eq!(found.relative(&sub.join("noext")), Path::new("sub/noext"));
        let nested = find_images(&[d.clone(), sub.display().to_string()]);
        assert_eq!(nested.relative(&sub.join("noext")), Path::new("noext"));
        assert_eq!(nested.relative(Path::new("/elsewhere/x.png")), Path::new("/elsewhere/x.png"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
