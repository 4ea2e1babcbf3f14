//! Sidecar files: a caption beside its image, for the tools that read them. `NAME.txt` holds
//! the caption as plain text (the convention of kohya sd-scripts, OneTrainer, taggui and
//! EveryDream); `NAME.xmp` an XMP packet with the caption as `dc:description` and any tags as
//! `dc:subject` (what digiKam, darktable and Lightroom read). Each is written whole or not at
//! all: a temporary file beside it, synced, then renamed over it.

use super::escape_markup as escape;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Txt,
    Xmp,
}

impl Format {
    pub const NAMES: &'static str = "txt|xmp";

    pub fn parse(s: &str) -> Option<Format> {
        match s {
            "txt" => Some(Format::Txt),
            "xmp" => Some(Format::Xmp),
            _ => None,
        }
    }

    fn extension(self) -> &'static str {
        match self {
            Format::Txt => "txt",
            Format::Xmp => "xmp",
        }
    }
}

/// What to do where a sidecar exists already.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Leave it: the image counts as done.
    Skip,
    /// Replace it.
    Overwrite,
    /// Add the caption after what it says (before: `Prepend`).
    Append,
    Prepend,
}

impl Mode {
    pub const NAMES: &'static str = "skip|overwrite|append|prepend";

    pub fn parse(s: &str) -> Option<Mode> {
        match s {
            "skip" => Some(Mode::Skip),
            "overwrite" => Some(Mode::Overwrite),
            "append" => Some(Mode::Append),
            "prepend" => Some(Mode::Prepend),
            _ => None,
        }
    }
}

/// What a sidecar says of its image: the caption, and tags where the answer has them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Caption {
    pub text: String,
    pub tags: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sidecars {
    pub format: Format,
    pub mode: Mode,
}

impl Sidecars {
    /// The sidecar of `image`: its name with the format's extension in place of its own.
    pub fn path(&self, image: &Path) -> PathBuf {
        image.with_extension(self.format.extension())
    }

    /// Whether the image is done already: its sidecar exists and is to be left as it is.
    pub fn skips(&self, image: &Path) -> bool {
        self.mode == Mode::Skip && self.path(image).exists()
    }

    /// Writes the sidecar of `image` as the mode says, atomically.
    pub fn write(&self, image: &Path, caption: &Caption) -> io::Result<()> {
        let path = self.path(image);
        let old = match std::fs::read_to_string(&path) {
            Ok(text) => Some(text),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        let text = match (self.format, old) {
            (Format::Txt, Some(old)) => combine(self.mode, old.trim_end(), &caption.text),
            (Format::Txt, None) => caption.text.clone(),
            (Format::Xmp, Some(old)) if matches!(self.mode, Mode::Append | Mode::Prepend) => {
                let (at, end, said) = xmp_description(&old).ok_or_else(|| {
                    io::Error::other(format!(
                        "{} has no dc:description to add to (--sidecar-mode overwrite replaces it)",
                        path.display()
                    ))
                })?;
                let joined = combine(self.mode, &unescape(said), &caption.text);
                format!("{}{}{}", &old[..at], escape(&joined), &old[end..])
            }
            (Format::Xmp, _) => xmp(caption),
        };
        let mut text = text;
        if !text.ends_with('\n') {
            text.push('\n');
        }
        write_atomically(&path, text.as_bytes())
    }
}

/// `old` and `new` joined as `mode` says (a line apart), `old` kept where it has `new`
/// already: a run killed after writing a sidecar but before recording it adds it once.
fn combine(mode: Mode, old: &str, new: &str) -> String {
    match mode {
        _ if old.is_empty() => new.to_owned(),
        Mode::Append | Mode::Prepend if old.contains(new) => old.to_owned(),
        Mode::Append => format!("{old}\n{new}"),
        Mode::Prepend => format!("{new}\n{old}"),
        Mode::Skip | Mode::Overwrite => new.to_owned(),
    }
}

/// An XMP packet of `caption`.
fn xmp(caption: &Caption) -> String {
    let mut s = String::from(
        "<?xpacket begin=\"\u{feff}\" id=\"W5M0MpCehiHzreSzNTczkc9d\"?>\n\
         <x:xmpmeta xmlns:x=\"adobe:ns:meta/\">\n\
         \x20<rdf:RDF xmlns:rdf=\"http://www.w3.org/1999/02/22-rdf-syntax-ns#\">\n\
         \x20 <rdf:Description rdf:about=\"\" xmlns:dc=\"http://purl.org/dc/elements/1.1/\">\n\
         \x20  <dc:description><rdf:Alt><rdf:li xml:lang=\"x-default\">",
    );
    s += &escape(&caption.text);
    s += "</rdf:li></rdf:Alt></dc:description>\n";
    if !caption.tags.is_empty() {
        s += "   <dc:subject><rdf:Bag>";
        for tag in &caption.tags {
            s += &format!("<rdf:li>{}</rdf:li>", escape(tag));
        }
        s += "</rdf:Bag></dc:subject>\n";
    }
    s += "  </rdf:Description>\n </rdf:RDF>\n</x:xmpmeta>\n<?xpacket end=\"w\"?>\n";
    s
}

/// Where the text of the x-default description of an XMP packet is: (start, end, the text).
fn xmp_description(xmp: &str) -> Option<(usize, usize, &str)> {
    let description = xmp.find("<dc:description>")?;
    let close = description + xmp[description..].find("</dc:description>")?;
    let open = "<rdf:li xml:lang=\"x-default\">";
    let at = description + xmp[description..close].find(open)? + open.len();
    let end = at + xmp[at..close].find("</rdf:li>")?;
    Some((at, end, &xmp[at..end]))
}

fn unescape(text: &str) -> String {
    let text = text.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", "\"").replace("&apos;", "'");
    text.replace("&#39;", "'").replace("&amp;", "&")
}

/// Writes `bytes` to `path` whole or not at all: into a hidden temporary file beside it,
/// synced, then renamed over it (a rename within a folder is atomic).
fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let temp = path.with_file_name(format!(".{name}.hrx-{}.tmp", std::process::id()));
    let written = (|| {
        let mut file = std::fs::File::create(&temp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&temp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("hrx-sidecar-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn caption(text: &str) -> Caption {
        Caption { text: text.into(), tags: Vec::new() }
    }

    #[test]
    fn each_mode_treats_an_existing_txt_sidecar_as_it_says() {
        let dir = scratch("txt");
        let image = dir.join("a.photo.png");
        let sidecars = |mode| Sidecars { format: Format::Txt, mode };
        assert_eq!(sidecars(Mode::Skip).path(&image), dir.join("a.photo.txt"));
        assert!(!sidecars(Mode::Skip).skips(&image), "no sidecar yet");
        sidecars(Mode::Skip).write(&image, &caption("first")).unwrap();
        let read = || std::fs::read_to_string(dir.join("a.photo.txt")).unwrap();
        assert_eq!(read(), "first\n");
        assert!(sidecars(Mode::Skip).skips(&image));
        assert!(!sidecars(Mode::Overwrite).skips(&image));
        sidecars(Mode::Append).write(&image, &caption("second")).unwrap();
        assert_eq!(read(), "first\nsecond\n");
        sidecars(Mode::Append).write(&image, &caption("second")).unwrap();
        assert_eq!(read(), "first\nsecond\n", "a caption it has already is not added again");
        sidecars(Mode::Prepend).write(&image, &caption("zeroth")).unwrap();
        assert_eq!(read(), "zeroth\nfirst\nsecond\n");
        sidecars(Mode::Overwrite).write(&image, &caption("only")).unwrap();
        assert_eq!(read(), "only\n");
        let names: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names.len(), 1, "no temporary file left: {names:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_xmp_sidecar_holds_the_caption_escaped_and_the_tags() {
        let dir = scratch("xmp");
        let image = dir.join("b.jpg");
        let with_tags = Caption { text: "A <cat> & \"dog\"\u{1}".into(), tags: vec!["cat".into(), "R&D".into()] };
        let sidecars = |mode| Sidecars { format: Format::Xmp, mode };
        sidecars(Mode::Overwrite).write(&image, &with_tags).unwrap();
        let text = std::fs::read_to_string(dir.join("b.xmp")).unwrap();
        assert!(
            text.contains("<rdf:li xml:lang=\"x-default\">A &lt;cat&gt; &amp; &quot;dog&quot;\u{fffd}</rdf:li>"),
            "{text}"
        );
        assert!(
            text.contains("<dc:subject><rdf:Bag><rdf:li>cat</rdf:li><rdf:li>R&amp;D</rdf:li></rdf:Bag></dc:subject>")
        );
        sidecars(Mode::Append).write(&image, &caption("more")).unwrap();
        let text = std::fs::read_to_string(dir.join("b.xmp")).unwrap();
        assert_eq!(xmp_description(&text).unwrap().2, "A &lt;cat&gt; &amp; &quot;dog&quot;\u{fffd}\nmore");
        assert!(text.contains("<rdf:li>R&amp;D</rdf:li>"), "the rest of the packet kept");
        // An XMP file of another tool without a description: refused, left as it was.
        std::fs::write(dir.join("b.xmp"), "<x:xmpmeta/>").unwrap();
        let e = sidecars(Mode::Prepend).write(&image, &caption("x")).unwrap_err();
        assert!(e.to_string().contains("no dc:description"), "{e}");
        assert_eq!(std::fs::read_to_string(dir.join("b.xmp")).unwrap(), "<x:xmpmeta/>");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
