#!/usr/bin/env python3
"""Writes tests/data/image/: small images in every PNG/JPEG/WebP variant hrx must read, each with the
RGB that the HF Qwen3-VL processor would see (`<name>.rgb.u8`, uint8 [H, W, 3]) and manifest.json.

The reference RGB follows what the HF pipeline does with a file: Pillow opens it,
`ImageOps.exif_transpose` (transformers' load_image) applies the EXIF orientation, then the
processor's convert_to_rgb: RGB kept, anything else -> RGBA -> alpha_composite onto opaque white ->
RGB. One deliberate exception, marked "hrx_rule" in the manifest: Pillow opens a 16-bit gray PNG as
"I;16" and its I;16 -> RGBA conversion clamps every value above 255 to 255 (a 16-bit photo turns
white); hrx keeps the high byte instead, as Pillow itself does for 16-bit RGB, RGBA and gray+alpha.

PNGs are written by the small encoder below (Pillow cannot write 16-bit colour, interlaced or
low-bit-depth palette PNGs); JPEGs and WebPs by Pillow.

usage: pip install pillow==13.0.0 numpy && python3 scripts/gen_image_test_data.py
(13.0.0 with libjpeg-turbo 3.2.0 is what made the oracle.)
"""
import io
import json
import os
import struct
import zlib

import numpy as np
from PIL import Image, ImageOps, features

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "image")
manifest = {}


# ---------------------------------------------------------------- a minimal PNG encoder

def chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def pack_row(samples: np.ndarray, bit_depth: int) -> bytes:
    """One scanline of samples (already flattened over channels) at the given bit depth."""
    if bit_depth == 16:
        return samples.astype(">u2").tobytes()
    if bit_depth == 8:
        return samples.astype(np.uint8).tobytes()
    per_byte = 8 // bit_depth
    out = bytearray()
    for i in range(0, len(samples), per_byte):
        b = 0
        for j in range(per_byte):
            v = int(samples[i + j]) if i + j < len(samples) else 0
            b |= v << (8 - bit_depth * (j + 1))
        out.append(b)
    return bytes(out)


ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]


def png_bytes(img, color_type, bit_depth, interlace=False, palette=None, trns=None, exif=None,
              size=None) -> bytes:
    """img: [H, W, C] samples (C = 1 gray/palette, 2 gray+alpha, 3 RGB, 4 RGBA). `size` overrides
    the declared IHDR size (for the decompression-bomb file)."""
    h, w = img.shape[:2]
    dw, dh = size or (w, h)
    raw = bytearray()
    passes = ADAM7 if interlace else [(0, 0, 1, 1)]
    for x0, y0, dx, dy in passes:
        sub = img[y0::dy, x0::dx]
        if sub.shape[0] == 0 or sub.shape[1] == 0:
            continue
        for row in sub:
            raw += b"\x00" + pack_row(row.reshape(-1), bit_depth)  # filter type 0 (None)
    out = b"\x89PNG\r\n\x1a\n"
    out += chunk(b"IHDR", struct.pack(">IIBBBBB", dw, dh, bit_depth, color_type, 0, 0, int(interlace)))
    if palette is not None:
        out += chunk(b"PLTE", bytes(np.asarray(palette, np.uint8).reshape(-1)))
    if trns is not None:
        out += chunk(b"tRNS", trns)
    if exif is not None:
        out += chunk(b"eXIf", exif)
    out += chunk(b"IDAT", zlib.compress(bytes(raw), 9))
    out += chunk(b"IEND", b"")
    return out


# ---------------------------------------------------------------- reference conversion

def hf_rgb(data: bytes):
    """What the HF pipeline gives the resizer for these file bytes (see module doc)."""
    im = Image.open(io.BytesIO(data))
    im.load()
    im = ImageOps.exif_transpose(im)
    rule = None
    if im.mode == "I;16":
        rule = "16-bit gray: high byte (Pillow clamps I;16 -> RGB at 255)"
        a = (np.asarray(im).astype(np.uint32) >> 8).astype(np.uint8)
        return np.repeat(a[..., None], 3, axis=2), im.mode, rule
    mode = im.mode
    if im.mode != "RGB":
        rgba = im.convert("RGBA")
        bg = Image.new("RGBA", rgba.size, (255, 255, 255))
        im = Image.alpha_composite(bg, rgba).convert("RGB")
    return np.asarray(im), mode, rule


def emit(name: str, data: bytes, what: str, exact: bool = True):
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)
    rgb, mode, rule = hf_rgb(data)
    stem = name.rsplit(".", 1)[0]
    rgb.astype(np.uint8).tofile(os.path.join(OUT, stem + ".rgb.u8"))
    entry = {"what": what, "pillow_mode": mode, "height": int(rgb.shape[0]), "width": int(rgb.shape[1]),
             "exact": exact}
    if rule:
        entry["hrx_rule"] = rule
    manifest[name] = entry


# ---------------------------------------------------------------- test pictures

rng = np.random.default_rng(7)
H, W = 7, 13  # odd sizes: partial Adam7 passes, partial bytes for low bit depths
yy, xx = np.mgrid[0:H, 0:W]
rgb8 = np.stack([(xx * 19 + yy * 3) % 256, (yy * 37 + xx * 5) % 256, (xx * yy * 11 + 40) % 256], -1).astype(np.uint16)
rgb16 = (rgb8 * 257 + rng.integers(0, 257, rgb8.shape)).astype(np.uint16)  # low bytes must not matter
alpha8 = ((xx * 23 + yy * 31) % 256).astype(np.uint16)
alpha8[0, :4] = 0
alpha8[1, :4] = 255
alpha16 = (alpha8 * 257 + rng.integers(0, 257, alpha8.shape)).astype(np.uint16)
gray8 = ((xx * 17 + yy * 29) % 256).astype(np.uint16)
gray16 = (gray8 * 257 + rng.integers(0, 257, gray8.shape)).astype(np.uint16)

os.makedirs(OUT, exist_ok=True)

# gray: 1, 2, 4, 8, 16 bit
for bits in (1, 2, 4):
    g = (gray8 >> (8 - bits))[..., None]
    emit(f"gray{bits}.png", png_bytes(g, 0, bits), f"gray {bits}-bit")
emit("gray8.png", png_bytes(gray8[..., None], 0, 8), "gray 8-bit")
emit("gray16.png", png_bytes(gray16[..., None], 0, 16), "gray 16-bit")
emit("gray8-trns.png", png_bytes(gray8[..., None], 0, 8, trns=struct.pack(">H", int(gray8[2, 3]))),
     "gray 8-bit, one transparent level (tRNS)")
# gray + alpha
emit("ga8.png", png_bytes(np.stack([gray8, alpha8], -1), 4, 8), "gray+alpha 8-bit")
emit("ga16.png", png_bytes(np.stack([gray16, alpha16], -1), 4, 16), "gray+alpha 16-bit")
# RGB / RGBA
emit("rgb8.png", png_bytes(rgb8, 2, 8), "RGB 8-bit")
emit("rgb16.png", png_bytes(rgb16, 2, 16), "RGB 16-bit")
emit("rgb8-trns.png", png_bytes(rgb8, 2, 8, trns=struct.pack(">HHH", *[int(v) for v in rgb8[3, 5]])),
     "RGB 8-bit, one transparent colour (tRNS)")
emit("rgba8.png", png_bytes(np.concatenate([rgb8, alpha8[..., None]], -1), 6, 8), "RGBA 8-bit")
emit("rgba16.png", png_bytes(np.concatenate([rgb16, alpha16[..., None]], -1), 6, 16), "RGBA 16-bit")
# palette: 1, 2, 4, 8 bit; with and without tRNS
for bits in (1, 2, 4, 8):
    n = 1 << bits
    pal = rng.integers(0, 256, (n, 3))
    idx = ((xx * 7 + yy * 3) % n)[..., None]
    emit(f"pal{bits}.png", png_bytes(idx, 3, bits, palette=pal), f"palette {bits}-bit")
pal = rng.integers(0, 256, (16, 3))
idx = ((xx * 7 + yy * 3) % 16)[..., None]
trns = bytes([0, 255, 128, 64, 200, 1, 254, 30])  # shorter than the palette: the rest are opaque
emit("pal4-trns.png", png_bytes(idx, 3, 4, palette=pal, trns=trns), "palette 4-bit with partial tRNS alpha")
# Adam7 interlaced
emit("rgb8-interlaced.png", png_bytes(rgb8, 2, 8, interlace=True), "RGB 8-bit, Adam7 interlaced")
emit("rgba16-interlaced.png", png_bytes(np.concatenate([rgb16, alpha16[..., None]], -1), 6, 16, interlace=True),
     "RGBA 16-bit, Adam7 interlaced")
emit("pal4-trns-interlaced.png", png_bytes(idx, 3, 4, palette=pal, trns=trns, interlace=True),
     "palette 4-bit + tRNS, Adam7 interlaced")
emit("gray1-interlaced.png", png_bytes((gray8 >> 7)[..., None], 0, 1, interlace=True), "gray 1-bit, Adam7 interlaced")
# EXIF orientation inside a PNG (eXIf chunk, which Pillow's exif_transpose honours)
exif6 = Image.Exif()
exif6[0x0112] = 6
emit("rgb8-exif6.png", png_bytes(rgb8, 2, 8, exif=exif6.tobytes()[6:]), "RGB 8-bit, eXIf orientation 6")

# JPEG: photo-like content (gradients + noise + an edge), several encodings
JH, JW = 48, 64
jy, jx = np.mgrid[0:JH, 0:JW]
photo = np.stack([jx * 4, jy * 5, 128 + 60 * np.sin(jx / 5.0) * np.cos(jy / 7.0)], -1)
photo = photo + rng.normal(0, 12, photo.shape)
photo[20:30, 10:40] = [250, 30, 20]
photo = np.clip(photo, 0, 255).astype(np.uint8)
pim = Image.fromarray(photo)


def jpeg(im, **kw) -> bytes:
    b = io.BytesIO()
    im.save(b, "JPEG", **kw)
    return b.getvalue()


emit("photo-420.jpg", jpeg(pim, quality=90), "JPEG baseline 4:2:0 q90", exact=False)
emit("photo-422.jpg", jpeg(pim, quality=90, subsampling=1), "JPEG baseline 4:2:2 q90", exact=False)
emit("photo-444.jpg", jpeg(pim, quality=95, subsampling=0), "JPEG baseline 4:4:4 q95", exact=False)
emit("photo-progressive.jpg", jpeg(pim, quality=85, progressive=True), "JPEG progressive 4:2:0 q85",
     exact=False)
emit("photo-gray.jpg", jpeg(pim.convert("L"), quality=90), "JPEG grayscale", exact=False)
emit("photo-cmyk.jpg", jpeg(pim.convert("CMYK"), quality=95), "JPEG CMYK (Adobe, inverted)", exact=False)
# odd size, not a multiple of the MCU
emit("photo-odd-420.jpg", jpeg(pim.crop((0, 0, 37, 23)), quality=90), "JPEG 4:2:0 37x23", exact=False)

# EXIF orientation 1..8 on a picture whose 8x8 blocks have clearly different colours, so that a
# wrong rotation or flip is far beyond any decoder difference.
block = np.array([[[255, 0, 0], [0, 255, 0], [0, 0, 255], [255, 255, 0]],
                  [[0, 255, 255], [255, 0, 255], [0, 0, 0], [255, 255, 255]]], np.uint8)
oim = Image.fromarray(np.kron(block, np.ones((8, 8, 1), np.uint8)))  # 32 x 16
for k in range(1, 9):
    e = Image.Exif()
    e[0x0112] = k
    emit(f"orient{k}.jpg", jpeg(oim, quality=95, subsampling=0, exif=e.tobytes()),
         f"JPEG with EXIF orientation {k} (little-endian TIFF)", exact=False)
# big-endian TIFF header, orientation 8 (Pillow itself writes little-endian)
mm = b"Exif\x00\x00" + b"MM\x00\x2a\x00\x00\x00\x08" + struct.pack(">HHHIHH", 1, 0x0112, 3, 1, 8, 0) + b"\x00\x00\x00\x00"
emit("orient8-be.jpg", jpeg(oim, quality=95, subsampling=0, exif=mm), "JPEG, EXIF orientation 8 (big-endian)",
     exact=False)

# WebP
def webp(im, **kw) -> bytes:
    b = io.BytesIO()
    im.save(b, "WEBP", **kw)
    return b.getvalue()


rgba_small = Image.fromarray(np.concatenate([rgb8, alpha8[..., None]], -1).astype(np.uint8), "RGBA")
emit("rgba-lossless.webp", webp(rgba_small, lossless=True), "WebP lossless RGBA")
emit("rgb-lossless.webp", webp(Image.fromarray(rgb8.astype(np.uint8)), lossless=True), "WebP lossless RGB")
emit("photo-lossy.webp", webp(pim, quality=90), "WebP lossy RGB", exact=False)
emit("rgba-lossy.webp", webp(rgba_small, quality=90), "WebP lossy with alpha", exact=False)

# ---------------------------------------------------------------- bad inputs (no reference RGB)
bad = {}
bomb = png_bytes(np.zeros((1, 1, 3), np.uint16), 2, 8, size=(100000, 100000))
open(os.path.join(OUT, "bomb-100000x100000.png"), "wb").write(bomb)
bad["bomb-100000x100000.png"] = "PNG header declaring 100000 x 100000 RGB (10 gigapixels), 1 pixel of data"
j = bytearray(jpeg(oim, quality=95))
sof = j.find(b"\xff\xc0")
struct.pack_into(">HH", j, sof + 5, 60000, 60000)
open(os.path.join(OUT, "bomb-60000x60000.jpg"), "wb").write(bytes(j))
bad["bomb-60000x60000.jpg"] = "JPEG whose SOF0 declares 60000 x 60000"

with open(os.path.join(OUT, "manifest.json"), "w") as f:
    json.dump({"made_by": "scripts/gen_image_test_data.py",
               "pillow": Image.__version__ if hasattr(Image, "__version__") else None,
               "libjpeg_turbo": features.version("libjpeg_turbo"),
               "webp": features.version("webp"),
               "images": manifest, "bad": bad}, f, indent=1, sort_keys=True)
print(f"wrote {len(manifest)} images + {len(bad)} bad files to {OUT}")
