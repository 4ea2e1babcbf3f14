//! A chat request's images, on the model's thread: read (data URLs as sent, files under the
//! allowed folders), sized from their headers against the context and the pixel budget before
//! any pixel is decoded, then decoded within the decode share of the memory budget and encoded.

use super::admission::Budget;
use super::http::HttpError;
use super::image_url::{self, ImageSource};
use super::openai::{self, ChatImage};
use crate::image::{self, Limits};
use crate::runtime::describe::{Describer, EncodedImage, SizedImage};
use crate::runtime::RuntimeError;
use std::borrow::Cow;
use std::path::{Path, PathBuf};

/// Decoding holds an image (up to 4 bytes a pixel) and its RGB copy (3).
const DECODE_BYTES_PER_PIXEL: u64 = 7;

/// Of a memory budget of `limit` bytes, what is kept for decoding the images of the request on
/// the model: what the most pixels a request may send decode to, at most half the budget (the
/// rest is for the bodies of the requests in flight).
pub fn decode_share(limit: u64) -> u64 {
    (limit / 2).min(DECODE_BYTES_PER_PIXEL * openai::MAX_REQUEST_PIXELS)
}

/// Reads, sizes and encodes a request's images on `d` (`prompt`: its template's ids, one pad an
/// image): a prompt too long for the context, or
/// too many pixels, is refused from the images' headers before any pixel is decoded or any
/// token runs; the decoded pixels within `budget`'s decode share (`over_budget`: the refusal
/// where they do not fit, given the bytes they need). `folders`: where `file://` images may be.
pub fn encode(
    d: &mut Describer,
    prompt: &[u32],
    requested: &[ChatImage],
    folders: &[PathBuf],
    budget: &Budget,
    over_budget: impl Fn(u64) -> HttpError,
) -> Result<Vec<EncodedImage>, HttpError> {
    let images = read_images(requested, folders, &d.image_limits())?;
    // The most pixels one request's images may declare together: what the decode share of the
    // memory budget holds, at most `openai::MAX_REQUEST_PIXELS`.
    let sized = size_images(d, &images, requested, budget.decode_share() / DECODE_BYTES_PER_PIXEL)?;
    d.check_counted(prompt, &sized).map_err(HttpError::runtime)?;
    // Within the decode share (the pixels are within what it holds), whatever the requests
    // waiting hold: images are decoded here, one request's at a time.
    let pixels: u64 = sized.iter().map(|s| (s.size.0 * s.size.1) as u64).sum();
    let bytes = DECODE_BYTES_PER_PIXEL * pixels;
    let _decoded = budget.reserve_decode(bytes).ok_or_else(|| over_budget(bytes))?;
    images
        .iter()
        .zip(&sized)
        .map(|(i, s)| d.encode_bytes(&i.name, &i.bytes, s.max_pixels).map_err(|e| i.error(HttpError::runtime(e))))
        .collect()
}

/// A request's image as read: the name errors call it, its bytes, and the file it came from.
struct RequestImage<'a> {
    name: String,
    bytes: Cow<'a, [u8]>,
    file: Option<&'a Path>,
}

impl RequestImage<'_> {
    /// The answer for `e` about this image: for a file, the one message every unusable file
    /// gets (a client learns nothing of the server's files), else `e`.
    fn error(&self, e: HttpError) -> HttpError {
        self.file.map_or(e, image_url::unusable_file)
    }
}

/// The request's images: data URLs as sent, files (under `folders`) read once.
fn read_images<'a>(
    images: &'a [ChatImage],
    folders: &[PathBuf],
    limits: &Limits,
) -> Result<Vec<RequestImage<'a>>, HttpError> {
    images
        .iter()
        .enumerate()
        .map(|(i, image)| match &image.source {
            ImageSource::Bytes(bytes) => Ok(RequestImage {
                name: format!("image {}", i + 1),
                bytes: Cow::Borrowed(bytes.as_slice()),
                file: None,
            }),
            ImageSource::File(path) => {
                let bytes = image_url::read_allowed(path, folders, limits.max_file_bytes)?;
                Ok(RequestImage { name: path.display().to_string(), bytes: Cow::Owned(bytes), file: Some(path) })
            }
        })
        .collect()
}

/// Each image's name and upright size from its header, `max_pixels` for all of them together,
/// and the budget its `detail` asks for.
fn size_images<'a>(
    d: &Describer,
    images: &'a [RequestImage],
    requested: &[ChatImage],
    max_pixels: u64,
) -> Result<Vec<SizedImage<'a>>, HttpError> {
    let limits = d.image_limits();
    let mut pixels = 0u64;
    let mut sized = Vec::with_capacity(images.len());
    for (i, asked) in images.iter().zip(requested) {
        let (name, bytes) = (&i.name, &i.bytes);
        let (w, h) = image::probe_bytes(name, bytes, &limits).map_err(|e| i.error(image_error(e)))?;
        pixels += (w * h) as u64;
        if pixels > max_pixels {
            let why = match max_pixels < openai::MAX_REQUEST_PIXELS {
                true => " (what this server's --memory-budget lets one request decode)",
                false => "",
            };
            return Err(HttpError::new(
                400,
                format!(
                    "the request's images hold more than {max_pixels} pixels{why} (at {name}): send fewer or smaller images"
                ),
            ));
        }
        let budget = asked.detail.max_pixels(d.min_pixels(), d.max_pixels());
        sized.push(SizedImage { name, size: (w, h), max_pixels: budget });
    }
    Ok(sized)
}

fn image_error(e: image::ImageError) -> HttpError {
    HttpError::runtime(RuntimeError::Image(e))
}
