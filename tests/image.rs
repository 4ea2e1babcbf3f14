//! The image module against the oracle (HF processor output) and against Pillow-made test files
//! (tests/data/image, made by scripts/gen_image_test_data.py): decoding, alpha, orientation, the
//! resize, patch order; every bad input an error naming its file; no input bytes panic.

mod common;

use common::TempDir;
use hrx::image::{
    decode_bytes, decode_file, preprocess, read_from, ImageError, ImageErrorKind, Limits, Patches, PreprocessConfig,
    RgbImage,
};
use std::path::{Path, PathBuf};
use tinyjson::JsonValue;

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/image")
}

fn json(path: &Path) -> JsonValue {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .parse()
        .unwrap_or_else(|e| panic!("{}: {e:?}", path.display()))
}

fn usize_at(v: &JsonValue, key: &str) -> usize {
    *v[key].get::<f64>().unwrap_or_else(|| panic!("{key} is not a number")) as usize
}

fn usizes(v: &JsonValue) -> Vec<usize> {
    v.get::<Vec<JsonValue>>().expect("array").iter().map(|x| *x.get::<f64>().expect("number") as usize).collect()
}

fn read_rgb(path: &Path, width: usize, height: usize) -> RgbImage {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    RgbImage::from_raw(width, height, bytes).unwrap_or_else(|| panic!("{}: not {width}x{height} RGB", path.display()))
}

fn read_f32(path: &Path) -> Vec<f32> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    bytes.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect()
}

/// Absolute differences of two equally long byte sequences: (max, number of differing values).
fn byte_diff(a: &[u8], b: &[u8]) -> (u8, usize) {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).fold((0, 0), |(mx, n), (x, y)| (mx.max(x.abs_diff(*y)), n + usize::from(x != y)))
}

/// `pixel_values` compared in uint8 levels (pixel = (level - 127.5) / 127.5 exactly):
/// (max level difference, values off by exactly one level, values off by more, total).
fn level_diff(ours: &[f32], reference: &[f32]) -> (u32, usize, usize, usize) {
    assert_eq!(ours.len(), reference.len(), "pixel_values lengths differ");
    let level = |v: f32| (v * 127.5 + 127.5).round() as i32;
    let (mut max, mut one, mut more) = (0u32, 0, 0);
    for (&a, &b) in ours.iter().zip(reference) {
        let d = level(a).abs_diff(level(b));
        max = max.max(d);
        one += usize::from(d == 1);
        more += usize::from(d > 1);
    }
    (max, one, more, ours.len())
}

struct OracleImage {
    key: String,
    file: PathBuf,
    rgb: RgbImage,
    resized_hw: (usize, usize),
    grid_thw: Vec<usize>,
    pixel_values: Vec<f32>,
}

fn oracle_images() -> Option<Vec<OracleImage>> {
    let dir = common::oracle()?.join("images");
    let index = json(&dir.join("images.json"));
    let map: &std::collections::HashMap<String, JsonValue> = index.get().expect("images.json is an object");
    let mut keys: Vec<&String> = map.keys().collect();
    keys.sort();
    let images: Vec<OracleImage> = keys
        .into_iter()
        .map(|key| {
            let v = &map[key];
            let shape = usizes(&v["rgb_u8"]["shape"]);
            let hw = usizes(&v["resized_hw"]);
            OracleImage {
                key: key.clone(),
                file: dir.join(v["file"].get::<String>().expect("file")),
                rgb: read_rgb(&dir.join(v["rgb_u8"]["file"].get::<String>().expect("rgb file")), shape[1], shape[0]),
                resized_hw: (hw[0], hw[1]),
                grid_thw: usizes(&v["image_grid_thw"]),
                pixel_values: read_f32(&dir.join(v["pixel_values"]["file"].get::<String>().expect("pv file"))),
            }
        })
        .collect();
    assert!(images.len() >= 6, "images.json lists {} images", images.len());
    Some(images)
}

fn is_jpeg(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "jpg" || e == "jpeg")
}

fn check_layout(img: &OracleImage, p: &Patches) {
    assert_eq!(p.resized_hw, img.resized_hw, "{}: resized_hw", img.key);
    assert_eq!(p.grid_thw.to_vec(), img.grid_thw, "{}: grid_thw", img.key);
    assert_eq!(p.patch_dim, 1536, "{}", img.key);
    assert_eq!(p.pixel_values.len(), p.n_patches() * 1536, "{}", img.key);
}

// ------------------------------------------------------------------------------------------
// Against the oracle

#[test]
fn oracle_decode_matches_hf_rgb() {
    let Some(images) = oracle_images() else { return };
    for img in &images {
        let ours = decode_file(&img.file, &Limits::default()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((ours.width(), ours.height()), (img.rgb.width(), img.rgb.height()), "{}", img.key);
        let (max, n) = byte_diff(ours.data(), img.rgb.data());
        let total = ours.data().len();
        eprintln!("decode {} {}: max diff {max}, {n} of {total} values differ", img.key, img.file.display());
        if is_jpeg(&img.file) {
            // jpeg-decoder vs libjpeg-turbo: measured max 3, 7.8% of values off, mean 0.10 level
            // (zune-jpeg, used before: max 4, 27%).
            assert!(max <= 3 && n * 10 < total, "{}: JPEG decode too far from libjpeg-turbo: max {max}, {n}", img.key);
        } else {
            assert_eq!((max, n), (0, 0), "{}: PNG decode must be bit-exact", img.key);
        }
    }
}

#[test]
fn oracle_resize_of_hf_rgb_matches_pixel_values() {
    let Some(images) = oracle_images() else { return };
    for img in &images {
        let p = preprocess(&img.rgb, &PreprocessConfig::hf()).unwrap_or_else(|e| panic!("{}: {e}", img.key));
        check_layout(img, &p);
        let (max, one, more, total) = level_diff(&p.pixel_values, &img.pixel_values);
        let exact = p.pixel_values == img.pixel_values;
        eprintln!(
            "resize {}: max {max} levels, {one} values off by 1, {more} by more, of {total}; bit-exact: {exact}",
            img.key
        );
        assert!(max <= 2 && more == 0, "{}: max {max} levels", img.key);
        assert!(one * 1000 <= total, "{}: {one} of {total} values off by one level", img.key);
        assert!(exact, "{}: not bit-exact (max {max} levels, {one} off by one)", img.key);
    }
}

#[test]
fn oracle_end_to_end_from_file() {
    let Some(images) = oracle_images() else { return };
    for img in &images {
        let rgb = decode_file(&img.file, &Limits::default()).unwrap_or_else(|e| panic!("{e}"));
        let p = preprocess(&rgb, &PreprocessConfig::hf()).unwrap_or_else(|e| panic!("{}: {e}", img.key));
        check_layout(img, &p);
        let (max, one, more, total) = level_diff(&p.pixel_values, &img.pixel_values);
        eprintln!("end-to-end {}: max {max} levels, {one} off by 1, {more} by more, of {total}", img.key);
        if is_jpeg(&img.file) {
            // The decoder's few-level differences, smoothed by the resize.
            assert!(max <= 4 && (one + more) * 2 < total, "{}: max {max}, {one}+{more} of {total}", img.key);
        } else {
            assert_eq!(p.pixel_values, img.pixel_values, "{}: PNG end to end must be bit-exact", img.key);
        }
    }
}

#[test]
fn patch_positions_follow_the_merge_blocks_of_the_oracle_grid() {
    let Some(images) = oracle_images() else { return };
    // I6: grid 16 x 24. Row k of pixel_values is patch positions()[k]; checking the pixels of a
    // few rows against the resized image pins the order.
    let img = images.iter().find(|i| i.key == "I6").expect("I6");
    let p = preprocess(&img.rgb, &PreprocessConfig::hf()).unwrap();
    let pos = p.positions();
    assert_eq!(pos.len(), p.n_patches());
    assert_eq!(&pos[..6], &[(0, 0), (0, 1), (1, 0), (1, 1), (0, 2), (0, 3)]);
    assert_eq!(pos[48], (2, 0), "the second block row starts after 12 blocks of 4");
    let resized = hrx::image::resize_bicubic_aa(&img.rgb, 256, 384);
    for k in [0, 5, 77, 383] {
        let (row, col) = pos[k];
        let (y, x) = (row * 16 + 3, col * 16 + 7); // pixel (3, 7) inside the patch, red channel
        let expect = (f32::from(resized.data()[(y * 384 + x) * 3]) - 127.5) / 127.5;
        assert_eq!(img.pixel_values[k * 1536 + 3 * 16 + 7], expect, "row {k} = patch {row},{col}");
        assert_eq!(img.pixel_values[k * 1536 + 256 + 3 * 16 + 7], expect, "temporal copy of row {k}");
    }
    assert_eq!(p.n_image_tokens(), 96);
}

/// The synthetic input of scripts/gen_resize_reference.py: a hard-edged checkerboard (ringing
/// and clamping), a gradient and xorshift noise.
fn synth(h: usize, w: usize, mut s: u64) -> RgbImage {
    let mut data = Vec::with_capacity(h * w * 3);
    for y in 0..h {
        for x in 0..w {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            data.extend([
                if (x / 5 + y / 7) % 2 == 1 { 255 } else { 0 },
                ((x * 7 + y * 13) & 255) as u8,
                (s >> 56) as u8,
            ]);
        }
    }
    RgbImage::from_raw(w, h, data).unwrap()
}

/// Sizes the oracle does not cover (10x down, 10x up, one axis only, 2x3 outputs), against
/// torchvision 0.26 / torch 2.11, whose AVX2, AVX-512 and generic kernels all gave these bytes.
#[test]
fn resize_matches_torchvision_at_extreme_scales() {
    let dir = data_dir().join("resize");
    let meta = json(&dir.join("cases.json"));
    let cases: &Vec<JsonValue> = meta["cases"].get().expect("cases");
    assert_eq!(cases.len(), 10);
    for (i, case) in cases.iter().enumerate() {
        let (input, out) = (usizes(&case["in_hw"]), usizes(&case["out_hw"]));
        let reference = read_rgb(&dir.join(case["file"].get::<String>().unwrap()), out[1], out[0]);
        let ours = hrx::image::resize_bicubic_aa(&synth(input[0], input[1], 1000 + i as u64), out[0], out[1]);
        let (max, n) = byte_diff(ours.data(), reference.data());
        assert_eq!((max, n), (0, 0), "case {i}: {input:?} -> {out:?}");
    }
}

// ------------------------------------------------------------------------------------------
// Against Pillow on generated files

struct Generated {
    name: String,
    width: usize,
    height: usize,
    exact: bool,
}

fn generated() -> Vec<Generated> {
    let manifest = json(&data_dir().join("manifest.json"));
    let images: &std::collections::HashMap<String, JsonValue> = manifest["images"].get().expect("images");
    let mut out: Vec<Generated> = images
        .iter()
        .map(|(name, v)| Generated {
            name: name.clone(),
            width: usize_at(v, "width"),
            height: usize_at(v, "height"),
            exact: *v["exact"].get::<bool>().expect("exact"),
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// Decodes a generated file and compares it with Pillow's RGB: (max diff, differing values).
fn decode_generated(g: &Generated) -> (u8, usize) {
    let path = data_dir().join(&g.name);
    let ours = decode_file(&path, &Limits::default()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((ours.width(), ours.height()), (g.width, g.height), "{}: size", g.name);
    let stem = g.name.rsplit_once('.').expect("extension").0;
    let reference = read_rgb(&data_dir().join(format!("{stem}.rgb.u8")), g.width, g.height);
    byte_diff(ours.data(), reference.data())
}

fn assert_like_pillow(prefix: &str) {
    let files: Vec<Generated> = generated().into_iter().filter(|g| g.name.starts_with(prefix)).collect();
    assert!(!files.is_empty(), "no generated file starts with {prefix}");
    for g in &files {
        assert!(g.exact, "{} is lossy; use the lossy checks", g.name);
        assert_eq!(decode_generated(g), (0, 0), "{} differs from Pillow", g.name);
    }
}

#[test]
fn every_generated_image_decodes_like_pillow() {
    for g in generated() {
        let (max, n) = decode_generated(&g);
        let total = g.width * g.height * 3;
        eprintln!("{:28} max diff {max:3}, {n:5} of {total:5} values differ", g.name);
        if g.exact {
            assert_eq!((max, n), (0, 0), "{} must match Pillow exactly", g.name);
        } else {
            // Lossy decoders (jpeg-decoder / zune-jpeg, image-webp vs libjpeg-turbo, libwebp) round differently
            // by a few levels; a wrong orientation, colour space or alpha would be off by ~100+.
            assert!(max <= 8, "{}: max diff {max}", g.name);
        }
    }
}

#[test]
fn palette_png_with_and_without_transparency() {
    assert_like_pillow("pal");
}

#[test]
fn sixteen_bit_png_keeps_the_high_byte() {
    for prefix in ["rgb16", "rgba16", "ga16", "gray16"] {
        assert_like_pillow(prefix);
    }
}

#[test]
fn interlaced_png() {
    for name in ["rgb8-interlaced", "rgba16-interlaced", "pal4-trns-interlaced", "gray1-interlaced"] {
        assert_like_pillow(name);
    }
}

#[test]
fn gray_gray_alpha_and_low_bit_depth_png() {
    for prefix in ["gray1", "gray2", "gray4", "gray8", "ga8"] {
        assert_like_pillow(prefix);
    }
}

#[test]
fn rgba_png_is_composited_onto_white_and_rgb_trns_is_ignored_like_hf() {
    assert_like_pillow("rgba8");
    assert_like_pillow("rgb8-trns");
}

#[test]
fn exif_orientation_is_applied_for_all_eight_values() {
    let reference = read_rgb(&data_dir().join("orient1.rgb.u8"), 32, 16);
    for k in 1..=8 {
        for name in [format!("orient{k}.jpg"), format!("orient{k}-be.jpg")] {
            let path = data_dir().join(&name);
            if !path.exists() {
                continue;
            }
            let img = decode_file(&path, &Limits::default()).unwrap();
            let expect = if k >= 5 { (16, 32) } else { (32, 16) };
            assert_eq!((img.width(), img.height()), expect, "{name}");
            let (max, _) =
                decode_generated(&Generated { name: name.clone(), width: expect.0, height: expect.1, exact: false });
            assert!(max <= 8, "{name}: max diff {max} against Pillow's exif_transpose");
            // The blocks are saturated colours: any orientation but the right one is far off.
            let off = byte_diff(img.data(), reference.data()).0;
            assert!(if k == 1 { off <= 8 } else { off > 100 }, "{name}: {off} from the upright picture");
        }
    }
    assert_like_pillow("rgb8-exif6.png"); // eXIf chunk in a PNG
}

#[test]
fn webp_lossless_is_exact_and_lossy_is_close() {
    assert_like_pillow("rgb-lossless");
    assert_like_pillow("rgba-lossless");
    for g in generated().iter().filter(|g| g.name.ends_with("-lossy.webp")) {
        let (max, _) = decode_generated(g);
        assert!(max <= 8, "{}: max diff {max}", g.name);
    }
}

#[test]
fn format_comes_from_the_bytes_not_the_name() {
    let dir = TempDir::new("image-sniff");
    let png_as_jpg = dir.join("really-a-png.jpg");
    std::fs::copy(data_dir().join("rgb8.png"), &png_as_jpg).unwrap();
    let img = decode_file(&png_as_jpg, &Limits::default()).unwrap();
    assert_eq!(img, decode_file(&data_dir().join("rgb8.png"), &Limits::default()).unwrap());
}

#[test]
fn data_after_the_jpeg_end_marker_is_ignored() {
    // Motion photos and some cameras append data after EOI; libjpeg ignores it, so must we.
    let mut bytes = std::fs::read(data_dir().join("photo-420.jpg")).unwrap();
    let clean = decode_bytes("photo", &bytes, &Limits::default()).unwrap();
    bytes.extend_from_slice(b"\0\0\0\x18ftypmp42 trailing video bytes \xff\xd8\xff\xe0");
    assert_eq!(decode_bytes("photo+trailer", &bytes, &Limits::default()).unwrap(), clean);
}

// ------------------------------------------------------------------------------------------
// Bad input: an error naming the file, on one line, before any big allocation

fn decode_err(path: &Path, limits: &Limits) -> ImageError {
    let err = decode_file(path, limits).expect_err("must not decode");
    let msg = err.to_string();
    assert!(msg.contains(&path.display().to_string()), "message does not name the file: {msg}");
    assert!(!msg.contains('\n') && !msg.is_empty(), "message is not one line: {msg:?}");
    eprintln!("{msg}");
    err
}

#[test]
fn zero_byte_file() {
    let dir = TempDir::new("image-empty");
    let path = dir.join("empty.png");
    std::fs::write(&path, b"").unwrap();
    assert!(matches!(decode_err(&path, &Limits::default()).kind, ImageErrorKind::Empty));
}

#[test]
fn text_file_named_jpg() {
    let dir = TempDir::new("image-text");
    let path = dir.join("notes.jpg");
    std::fs::write(&path, "Shopping list:\n- milk\n- bread ✓\n").unwrap();
    let err = decode_err(&path, &Limits::default());
    assert!(matches!(err.kind, ImageErrorKind::UnknownFormat { looks_like: Some("text") }), "{err}");
}

#[test]
fn missing_file() {
    let dir = TempDir::new("image-missing");
    let path = dir.join("nope.png");
    assert!(matches!(decode_err(&path, &Limits::default()).kind, ImageErrorKind::Io(_)));
}

#[test]
fn corrupt_png() {
    let mut bytes = std::fs::read(data_dir().join("rgb8.png")).unwrap();
    let idat = bytes.windows(4).position(|w| w == b"IDAT").unwrap();
    bytes[idat + 10] ^= 0x55; // inside the compressed data: CRC and zlib both break
    let dir = TempDir::new("image-corrupt");
    let path = dir.join("corrupt.png");
    std::fs::write(&path, &bytes).unwrap();
    let err = decode_err(&path, &Limits::default());
    assert!(matches!(err.kind, ImageErrorKind::Corrupt { format: "PNG", .. }), "{err}");
}

/// A JPEG cut short says so (jpeg-decoder's own words were "failed to fill whole buffer").
#[test]
fn truncated_jpeg_and_png() {
    let dir = TempDir::new("image-truncated");
    for (source, keep) in [("photo-420.jpg", 2), ("photo-progressive.jpg", 2), ("rgb8.png", 2), ("photo-444.jpg", 5)] {
        let bytes = std::fs::read(data_dir().join(source)).unwrap();
        let path = dir.join(format!("truncated-{source}"));
        std::fs::write(&path, &bytes[..bytes.len() * (keep - 1) / keep]).unwrap();
        let err = decode_err(&path, &Limits::default());
        if source.ends_with(".jpg") {
            assert!(matches!(err.kind, ImageErrorKind::Truncated { format: "JPEG" }), "{err}");
            assert!(err.to_string().contains("truncated JPEG"), "{err}");
        } else {
            assert!(matches!(err.kind, ImageErrorKind::Corrupt { .. }), "{err}");
        }
    }
}

#[test]
fn decompression_bomb_headers_are_refused_before_decoding() {
    for (name, w, h) in [("bomb-100000x100000.png", 100_000, 100_000), ("bomb-60000x60000.jpg", 60_000, 60_000)] {
        let err = decode_err(&data_dir().join(name), &Limits::default());
        match err.kind {
            ImageErrorKind::TooManyPixels { width, height, max_pixels } => {
                assert_eq!((width, height, max_pixels), (w, h, Limits::DEFAULT_MAX_PIXELS), "{name}");
            }
            other => panic!("{name}: {other}"),
        }
    }
}

#[test]
fn limits_are_configurable() {
    let path = data_dir().join("rgb8.png"); // 13 x 7 = 91 pixels
    let tight = Limits { max_pixels: 90, ..Limits::default() };
    assert!(matches!(decode_err(&path, &tight).kind, ImageErrorKind::TooManyPixels { .. }));
    assert!(decode_file(&path, &Limits { max_pixels: 91, ..Limits::default() }).is_ok());
    let size = std::fs::metadata(&path).unwrap().len();
    let small = Limits { max_file_bytes: size - 1, ..Limits::default() };
    assert!(matches!(decode_err(&path, &small).kind, ImageErrorKind::FileTooLarge { .. }));
}

/// Truncations and bit flips of every test image: each is decoded or refused, never a panic
/// (a contained decoder panic counts as a failure here too).
/// A stream (`hrx describe -`'s standard input) is read within the file size limit, however
/// long it is: an endless one stops one byte past the limit; an empty one is refused.
#[test]
fn streams_are_read_within_the_file_size_limit() {
    let limits = Limits { max_file_bytes: 100, ..Limits::default() };
    assert_eq!(read_from("pipe", &[7u8; 100][..], &limits).unwrap(), vec![7u8; 100]);
    let endless = read_from("pipe", std::io::repeat(0), &limits).unwrap_err();
    assert!(matches!(endless.kind, ImageErrorKind::FileTooLarge { bytes: 101, max: 100 }), "{endless}");
    assert_eq!(endless.to_string(), "pipe: more than the limit of 100 bytes");
    let empty = read_from("standard input", std::io::empty(), &limits).unwrap_err();
    assert!(matches!(empty.kind, ImageErrorKind::Empty), "{empty}");
    assert_eq!(empty.to_string(), "standard input: empty (0 bytes): there is no image in it");
}

/// Found by scripts/fuzz (its CRCs made right: fuzz builds skip them): a palette PNG whose PLTE chunk is 49 bytes (16 entries and one byte)
/// made the `png` crate panic expanding it (the panic was contained, as "the decoder failed");
/// refused before decoding now, saying what is wrong. A tRNS longer than the palette likewise.
#[test]
fn a_palette_of_broken_entries_is_refused_not_a_decoder_panic() {
    const PLTE_49: &[u8] = &[
        0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52, 0x00, 0x00,
        0x00, 0x0e, 0x00, 0x00, 0x00, 0x07, 0x04, 0x03, 0x00, 0x00, 0x01, 0xbd, 0x6e, 0x51, 0xbc, 0x00, 0x00, 0x00,
        0x31, 0x50, 0x4c, 0x54, 0x45, 0x60, 0x7d, 0xb9, 0x2a, 0xb2, 0x24, 0x63, 0x1f, 0x06, 0x53, 0xf6, 0x8f, 0xb6,
        0x3a, 0x34, 0xe7, 0xbb, 0x28, 0x7d, 0x47, 0xdc, 0x78, 0x0d, 0xdc, 0x6a, 0x72, 0x61, 0x49, 0x99, 0x4e, 0x82,
        0x13, 0xd5, 0x38, 0x9a, 0x45, 0x2f, 0x2c, 0xb4, 0x10, 0xcb, 0x77, 0x74, 0x35, 0x5b, 0xbd, 0xe3, 0xec, 0x9f,
        0x1b, 0xf2, 0x94, 0xef, 0x00, 0x00, 0x00, 0x08, 0x74, 0x52, 0x4e, 0x53, 0x00, 0xff, 0x6a, 0x40, 0xc8, 0x01,
        0xfe, 0x1e, 0x16, 0x46, 0x31, 0x6a, 0x00, 0x00, 0x00, 0x46, 0x49, 0x44, 0x41, 0x54, 0x78, 0xda, 0x63, 0xe0,
        0x60, 0x38, 0xc2, 0x70, 0xc2, 0x81, 0xe1, 0x55, 0x02, 0xc3, 0x32, 0x05, 0x86, 0x14, 0x85, 0x37, 0x0b, 0x18,
        0x14, 0xde, 0xac, 0x48, 0x60, 0x2e, 0x39, 0xfc, 0xcb, 0x70, 0x7b, 0x7a, 0x30, 0x83, 0xe1, 0xdf, 0x9d, 0x0c,
        0x42, 0x60, 0x82,
    ];
    let err = decode_bytes("fuzzed.png", PLTE_49, &Limits::default()).unwrap_err();
    assert!(matches!(err.kind, ImageErrorKind::Corrupt { format: "PNG", .. }), "{err}");
    assert!(err.to_string().contains("a PLTE chunk of 49 bytes, not 1 to 256 RGB entries"), "{err}");
}

#[test]
fn damaged_files_never_panic() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(data_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "png" || e == "jpg" || e == "webp"))
        .collect();
    files.sort();
    let limits = Limits { max_pixels: 1 << 20, ..Limits::default() };
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut rand = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let (mut tried, mut refused) = (0, 0);
    for path in &files {
        let original = std::fs::read(path).unwrap();
        let mut cases: Vec<Vec<u8>> = (1..24).map(|k| original[..original.len() * k / 24].to_vec()).collect();
        for _ in 0..120 {
            let mut b = original.clone();
            for _ in 0..1 + rand() % 3 {
                let i = (rand() % b.len() as u64) as usize;
                b[i] ^= 1 << (rand() % 8);
            }
            cases.push(b);
        }
        for case in cases {
            tried += 1;
            if let Err(e) = decode_bytes("fuzz", &case, &limits) {
                refused += 1;
                assert!(!matches!(e.kind, ImageErrorKind::DecoderPanicked { .. }), "{}: {e}", path.display());
            }
        }
    }
    eprintln!("{tried} damaged inputs, {refused} refused, none panicked");
    assert!(refused > tried / 4, "suspiciously few damaged inputs refused: {refused} of {tried}");
}

// ------------------------------------------------------------------------------------------
// Preprocessing settings

#[test]
fn kiosk_budget_caps_the_patch_count() {
    let big = RgbImage::from_raw(1500, 1000, vec![128; 1500 * 1000 * 3]).unwrap();
    let p = preprocess(&big, &PreprocessConfig::kiosk()).unwrap();
    assert!(p.resized_hw.0 * p.resized_hw.1 <= PreprocessConfig::KIOSK_MAX_PIXELS, "{:?}", p.resized_hw);
    assert!(p.n_patches() <= 4096 && p.n_image_tokens() <= 1024);
    assert!(p.pixel_values.iter().all(|&v| v == 0.5 / 127.5));
    let hf = preprocess(&big, &PreprocessConfig::hf()).unwrap();
    assert_eq!(hf.resized_hw, (992, 1504)); // within HF's 16.7 MP: only snapped to 32
}

#[test]
fn preprocess_refuses_extreme_aspect_ratio_and_bad_config() {
    let strip = RgbImage::from_raw(300, 1, vec![0; 900]).unwrap();
    let err = preprocess(&strip, &PreprocessConfig::hf()).unwrap_err();
    assert!(matches!(err.kind, ImageErrorKind::AspectRatio { .. }), "{err}");
    assert!(err.named("strip.png").to_string().starts_with("strip.png: "));
    let img = RgbImage::from_raw(64, 64, vec![0; 64 * 64 * 3]).unwrap();
    let zero = PreprocessConfig { patch_size: 0, ..PreprocessConfig::hf() };
    assert!(matches!(preprocess(&img, &zero).unwrap_err().kind, ImageErrorKind::BadConfig(_)));
}

#[test]
fn other_patch_and_merge_sizes_follow_the_parameters() {
    // Qwen2-VL-style 14 x 14 patches: factor 28, rows of 3 * 2 * 14 * 14 = 1176.
    let img = RgbImage::from_raw(100, 60, vec![7; 100 * 60 * 3]).unwrap();
    let cfg = PreprocessConfig { patch_size: 14, min_pixels: 3136, ..PreprocessConfig::hf() };
    let p = preprocess(&img, &cfg).unwrap();
    assert_eq!(p.resized_hw, (56, 112));
    assert_eq!(p.grid_thw, [1, 4, 8]);
    assert_eq!(p.patch_dim, 1176);
    assert_eq!(p.pixel_values.len(), 32 * 1176);
}
