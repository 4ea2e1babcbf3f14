//! Batch captioning (`hrx caption`): finding the images of a job and the JSON Lines file that
//! records each result as soon as it is known, so a killed job resumes where it stopped; the
//! sidecar files other tools read; shards of a job spread over many boxes; the review report.

pub mod discover;
pub mod journal;
pub mod report;
pub mod shard;
pub mod sidecar;

/// `text` as the character data or attribute value of XML or HTML: the five markup characters
/// as references, and the control characters XML 1.0 does not allow (as a model may write
/// them) as U+FFFD.
pub(crate) fn escape_markup(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if (c as u32) < 0x20 && !matches!(c, '\t' | '\n' | '\r') => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}
