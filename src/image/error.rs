//! The one error type of the image module: what went wrong, and with which file.

use std::fmt;

/// An image could not be read or preprocessed. `Display` is one line that names the file.
#[derive(Debug)]
pub struct ImageError {
    /// The file (path or caller-given name); `None` for errors of pure functions such as
    /// [`smart_resize`](super::smart_resize) until a caller attaches one with [`ImageError::named`].
    pub name: Option<String>,
    pub kind: ImageErrorKind,
}

#[derive(Debug)]
pub enum ImageErrorKind {
    /// The file could not be opened or read.
    Io(std::io::Error),
    /// The file (or stream) has no bytes at all.
    Empty,
    /// The file is larger than [`Limits::max_file_bytes`](super::Limits).
    FileTooLarge { bytes: u64, max: u64 },
    /// The first bytes are not PNG, JPEG or WebP; `looks_like` says what they resemble, if known.
    UnknownFormat { looks_like: Option<&'static str> },
    /// The header declares more pixels than [`Limits::max_pixels`](super::Limits); nothing was decoded.
    TooManyPixels { width: u64, height: u64, max_pixels: u64 },
    /// A width or height of zero.
    ZeroSize { width: u64, height: u64 },
    /// The data ends before the image does (a file cut short in a copy or a download).
    Truncated { format: &'static str },
    /// The decoder rejected the data (corrupt, unsupported variant).
    Corrupt { format: &'static str, detail: String },
    /// The decoder crate panicked on this input; the panic was contained.
    DecoderPanicked { format: &'static str },
    /// Longer side / shorter side exceeds what the processor accepts (200 for Qwen-VL).
    AspectRatio { height: usize, width: usize, max_ratio: f64 },
    /// Preprocessing parameters that cannot work (zero patch size, min_pixels > max_pixels, ...).
    BadConfig(String),
}

impl ImageError {
    pub(crate) fn new(name: &str, kind: ImageErrorKind) -> Self {
        Self { name: Some(name.to_owned()), kind }
    }

    pub(crate) fn unnamed(kind: ImageErrorKind) -> Self {
        Self { name: None, kind }
    }

    /// Attaches the file name, e.g. to a preprocessing error of an image that came from a file.
    pub fn named(mut self, name: &str) -> Self {
        self.name = Some(name.to_owned());
        self
    }
}

impl fmt::Display for ImageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(name) = &self.name {
            write!(f, "{name}: ")?;
        }
        write!(f, "{}", self.kind)
    }
}

impl fmt::Display for ImageErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io(e) => write!(f, "cannot read the file: {}", one_line(&e.to_string())),
            Self::Empty => write!(f, "empty (0 bytes): there is no image in it"),
            // A stream is read one byte past the limit and no further: its size is unknown.
            Self::FileTooLarge { bytes, max } if *bytes == max.saturating_add(1) => {
                write!(f, "more than the limit of {max} bytes")
            }
            Self::FileTooLarge { bytes, max } => write!(f, "the file has {bytes} bytes, more than the limit of {max}"),
            Self::UnknownFormat { looks_like: Some(what) } => {
                write!(f, "not a PNG, JPEG or WebP image (the data looks like {what})")
            }
            Self::UnknownFormat { looks_like: None } => write!(f, "not a PNG, JPEG or WebP image (unknown signature)"),
            Self::TooManyPixels { width, height, max_pixels } => write!(
                f,
                "the image declares {width}x{height} = {} pixels, more than the limit of {max_pixels}; not decoded",
                u128::from(*width) * u128::from(*height)
            ),
            Self::ZeroSize { width, height } => write!(f, "the image declares an empty size {width}x{height}"),
            Self::Truncated { format } => write!(f, "truncated {format}: the data ends before the image does"),
            Self::Corrupt { format, detail } => write!(f, "corrupt or unsupported {format}: {}", one_line(detail)),
            Self::DecoderPanicked { format } => write!(f, "corrupt {format}: the decoder failed on this data"),
            Self::AspectRatio { height, width, max_ratio } => write!(
                f,
                "aspect ratio of {width}x{height} is more than {max_ratio}:1, which the model's processor refuses"
            ),
            Self::BadConfig(what) => write!(f, "bad preprocessing configuration: {what}"),
        }
    }
}

impl std::error::Error for ImageError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.kind {
            ImageErrorKind::Io(e) => Some(e),
            _ => None,
        }
    }
}

/// Decoder messages may carry newlines or control bytes; the error stays on one line.
fn one_line(s: &str) -> String {
    s.split(|c: char| c.is_control()).filter(|p| !p.trim().is_empty()).map(str::trim).collect::<Vec<_>>().join(" ")
}
