//! The EXIF Orientation tag, read from the TIFF structure inside a JPEG APP1, PNG eXIf or WebP EXIF
//! chunk. Only IFD0 tag 0x0112 matters here; every read is bounds-checked, so any bytes are safe.

use super::orient::Orientation;

const TAG_ORIENTATION: u16 = 0x0112;
const TYPE_SHORT: u16 = 3;

/// The orientation recorded in `exif` (TIFF header first; a leading `Exif\0\0` is skipped, as some
/// writers keep it). Missing, malformed or out-of-range values mean "as stored", as in Pillow.
pub fn orientation(exif: &[u8]) -> Orientation {
    let tiff = exif.strip_prefix(b"Exif\0\0").unwrap_or(exif);
    read_orientation(tiff).and_then(Orientation::from_exif).unwrap_or(Orientation::Normal)
}

fn read_orientation(tiff: &[u8]) -> Option<u16> {
    let big_endian = match tiff.get(..2)? {
        b"II" => false,
        b"MM" => true,
        _ => return None,
    };
    let u16_at = |at: usize| -> Option<u16> {
        let b: [u8; 2] = tiff.get(at..at.checked_add(2)?)?.try_into().ok()?;
        Some(if big_endian { u16::from_be_bytes(b) } else { u16::from_le_bytes(b) })
    };
    let u32_at = |at: usize| -> Option<u32> {
        let b: [u8; 4] = tiff.get(at..at.checked_add(4)?)?.try_into().ok()?;
        Some(if big_endian { u32::from_be_bytes(b) } else { u32::from_le_bytes(b) })
    };
    if u16_at(2)? != 42 {
        return None;
    }
    let ifd0 = usize::try_from(u32_at(4)?).ok()?;
    let entries = usize::from(u16_at(ifd0)?);
    (0..entries).find_map(|i| {
        let entry = ifd0.checked_add(2)?.checked_add(i.checked_mul(12)?)?;
        let field = |offset: usize| entry.checked_add(offset);
        // A SHORT with count 1 is stored left-justified in the 4-byte value field.
        (u16_at(entry)? == TAG_ORIENTATION && u16_at(field(2)?)? == TYPE_SHORT && u32_at(field(4)?)? >= 1)
            .then(|| u16_at(field(8)?))
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A TIFF header and IFD0 with an unrelated tag, then `tag` of type `typ` = `value`.
    fn tiff(big_endian: bool, tag: u16, typ: u16, value: u16) -> Vec<u8> {
        let mut t: Vec<u8> = if big_endian { b"MM".to_vec() } else { b"II".to_vec() };
        let fields: [(u32, usize); 14] = [
            (42, 2),
            (8, 4),
            (2, 2),
            (0x010F, 2),
            (2, 2),
            (4, 4),
            (0, 4),
            (tag.into(), 2),
            (typ.into(), 2),
            (1, 4),
            (value.into(), 2),
            (0, 2),
            (0, 4),
            (0, 0),
        ];
        for (v, n) in fields {
            let bytes = if big_endian { v.to_be_bytes() } else { v.to_le_bytes() };
            t.extend(if big_endian { &bytes[4 - n..] } else { &bytes[..n] });
        }
        t
    }

    #[test]
    fn reads_both_byte_orders_and_the_exif_prefix() {
        assert_eq!(orientation(&tiff(false, 0x0112, 3, 6)), Orientation::Rotate270);
        assert_eq!(orientation(&tiff(true, 0x0112, 3, 8)), Orientation::Rotate90);
        let mut prefixed = b"Exif\0\0".to_vec();
        prefixed.extend(tiff(true, 0x0112, 3, 3));
        assert_eq!(orientation(&prefixed), Orientation::Rotate180);
    }

    #[test]
    fn anything_else_is_normal() {
        assert_eq!(orientation(&tiff(false, 0x0112, 3, 9)), Orientation::Normal); // out of range
        assert_eq!(orientation(&tiff(false, 0x0112, 4, 6)), Orientation::Normal); // not a SHORT
        assert_eq!(orientation(&tiff(false, 0x0111, 3, 6)), Orientation::Normal); // other tag
        let t = tiff(false, 0x0112, 3, 6);
        for cut in 0..t.len() - 6 {
            assert_eq!(orientation(&t[..cut]), Orientation::Normal, "truncated at {cut}");
        }
        assert_eq!(orientation(b"II\x2a\0\xff\xff\xff\xff"), Orientation::Normal);
        // IFD past the end
    }
}
