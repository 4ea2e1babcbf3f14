//! The review report of a caption job: one offline HTML file, a grid of thumbnails (PNG, made by
//! hrx's own decoder and resize, embedded as data URLs) each with its caption (a JSON answer's
//! fields as a list), the failures with their reasons, a filter box and the run's summary. It
//! opens from the disk with no server and loads nothing from anywhere.

use super::escape_markup as escape;
use crate::image::{self, Limits};
use crate::json::{self, Json};
use base64::Engine;
use std::collections::BTreeMap;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Thumbnails fit this many pixels a side.
const THUMBNAIL_SIDE: usize = 160;

/// An image as the journal last recorded it.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    pub image: String,
    pub outcome: Outcome,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// The caption, and a JSON answer where the job had a schema.
    Captioned {
        caption: String,
        answer: Option<Json>,
        seconds: Option<f64>,
    },
    Failed(String),
}

/// What the report's header says of the run.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    /// Captions a minute, where the run measured them.
    pub per_minute: Option<f64>,
    /// Where it ran (a GPU's name, or the CPU).
    pub device: Option<String>,
}

/// The images of a journal (JSON Lines of `hrx caption`), each as last recorded: a caption
/// wins over an earlier error (a retry), lines that are no record are skipped, in the order
/// the images first appear.
pub fn read_journal(path: &Path) -> io::Result<Vec<Record>> {
    let text = std::fs::read_to_string(path)?;
    let mut order: Vec<String> = Vec::new();
    let mut last: BTreeMap<String, Outcome> = BTreeMap::new();
    for line in text.lines() {
        let Ok(entry) = json::parse_ordered(line, 64) else { continue };
        let Some(Json::Str(image)) = entry.get("image") else { continue };
        let outcome = match (entry.get("caption"), entry.get("error")) {
            (Some(Json::Str(caption)), _) => Outcome::Captioned {
                caption: caption.clone(),
                answer: entry.get("json").cloned(),
                seconds: match entry.get("seconds") {
                    Some(Json::Num(s)) => Some(*s),
                    Some(Json::Int(s)) => Some(*s as f64),
                    _ => None,
                },
            },
            (_, Some(Json::Str(error))) => Outcome::Failed(error.clone()),
            _ => continue,
        };
        if matches!(outcome, Outcome::Failed(_)) && matches!(last.get(image), Some(Outcome::Captioned { .. })) {
            continue;
        }
        if !last.contains_key(image) {
            order.push(image.clone());
        }
        last.insert(image.clone(), outcome);
    }
    Ok(order.into_iter().filter_map(|image| last.remove(&image).map(|outcome| Record { image, outcome })).collect())
}

/// Writes the report of `records` to `out` (`title`: what it is of, such as the journal's
/// path); thumbnails are made on `threads` threads.
pub fn write(records: &[Record], summary: &Summary, title: &str, out: &Path, threads: usize) -> io::Result<()> {
    let thumbnails = thumbnails(records, threads);
    let captioned: Vec<(&Record, &Option<String>)> =
        records.iter().zip(&thumbnails).filter(|(r, _)| matches!(r.outcome, Outcome::Captioned { .. })).collect();
    let failed: Vec<&Record> = records.iter().filter(|r| matches!(r.outcome, Outcome::Failed(_))).collect();
    let mut html = String::with_capacity(4096 + records.len() * 16_384);
    html += "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
    html +=
        &format!("<title>hrx captions: {}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<header>\n", escape(title));
    html += &format!("<h1>Captions of {} images</h1>\n<p class=\"summary\">", records.len());
    let mut facts = vec![format!("{} captioned", captioned.len()), format!("{} failed", failed.len())];
    match summary.per_minute {
        Some(rate) => facts.push(format!("{rate:.1} captions a minute")),
        None => {
            let seconds: Vec<f64> = captioned
                .iter()
                .filter_map(|(r, _)| match r.outcome {
                    Outcome::Captioned { seconds, .. } => seconds,
                    Outcome::Failed(_) => None,
                })
                .collect();
            if !seconds.is_empty() {
                facts.push(format!("{:.2} s a caption on average", seconds.iter().sum::<f64>() / seconds.len() as f64));
            }
        }
    }
    if let Some(device) = &summary.device {
        facts.push(format!("on {device}"));
    }
    html += &escape(&facts.join(" · "));
    html += &format!("</p>\n<p class=\"source\">{}</p>\n", escape(title));
    html += "<input id=\"filter\" type=\"search\" placeholder=\"Show only the images whose caption or path has these words\" autofocus>\n</header>\n";
    if !failed.is_empty() {
        html += &format!("<section id=\"failures\">\n<h2>{} failed</h2>\n<ul>\n", failed.len());
        for r in &failed {
            let Outcome::Failed(why) = &r.outcome else { continue };
            html += &format!(
                "<li class=\"item\" data-text=\"{}\"><code>{}</code>: {}</li>\n",
                escape(&format!("{} {why}", r.image).to_lowercase()),
                escape(&r.image),
                escape(why)
            );
        }
        html += "</ul>\n</section>\n";
    }
    html += "<main id=\"grid\">\n";
    for (r, thumbnail) in &captioned {
        let Outcome::Captioned { caption, answer, .. } = &r.outcome else { continue };
        let picture = match thumbnail {
            Some(url) => format!("<img src=\"{url}\" alt=\"\">"),
            None => "<div class=\"missing\">(the image cannot be read now)</div>".to_owned(),
        };
        let said = match answer {
            Some(Json::Obj(fields)) => {
                let mut list = String::from("<dl>");
                for (key, value) in fields {
                    let value = match value {
                        Json::Str(s) => s.clone(),
                        other => other.to_string_compact(),
                    };
                    list += &format!("<dt>{}</dt><dd>{}</dd>", escape(key), escape(&value));
                }
                list + "</dl>"
            }
            _ => format!("<p>{}</p>", escape(caption)),
        };
        html += &format!(
            "<figure class=\"item\" data-text=\"{}\">{picture}<figcaption>{said}<code>{}</code></figcaption></figure>\n",
            escape(&format!("{} {caption}", r.image).to_lowercase()),
            escape(&r.image)
        );
    }
    html += "</main>\n<script>";
    html += SCRIPT;
    html += "</script>\n</body>\n</html>\n";
    let temp = out.with_file_name(format!(
        ".{}.hrx-{}.tmp",
        out.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        std::process::id()
    ));
    std::fs::write(&temp, html)?;
    std::fs::rename(&temp, out)
}

/// Each captioned image's thumbnail as a data URL (None: not readable now), on `threads`
/// threads taking the images in turn.
fn thumbnails(records: &[Record], threads: usize) -> Vec<Option<String>> {
    let next = AtomicUsize::new(0);
    let limits = Limits::default();
    let mut made: Vec<Option<String>> = vec![None; records.len()];
    let results = std::sync::Mutex::new(&mut made);
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(r) = records.get(i) else { break };
                if !matches!(r.outcome, Outcome::Captioned { .. }) {
                    continue;
                }
                let Ok(img) = image::decode_file(Path::new(&r.image), &limits) else { continue };
                let png = image::thumbnail_png(&img, THUMBNAIL_SIDE);
                let url = format!("data:image/png;base64,{}", base64::engine::general_purpose::STANDARD.encode(png));
                if let Ok(mut made) = results.lock() {
                    made[i] = Some(url);
                }
            });
        }
    });
    made
}

const STYLE: &str = "body{margin:0;font-family:system-ui,sans-serif;background:#fafafa;color:#222}\
header{position:sticky;top:0;background:#fff;border-bottom:1px solid #ddd;padding:12px 20px;z-index:1}\
h1{margin:0 0 4px;font-size:20px}.summary{margin:0 0 4px}.source{margin:0 0 8px;color:#777;font-size:12px}\
#filter{width:100%;max-width:640px;font-size:16px;padding:6px 8px}\
#failures{padding:8px 20px;background:#fff3f2}#failures h2{font-size:16px;margin:4px 0}\
#grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(220px,1fr));gap:14px;padding:20px}\
figure{margin:0;background:#fff;border:1px solid #e2e2e2;border-radius:6px;padding:8px}\
figure img{display:block;margin:0 auto 6px;max-width:100%}.missing{color:#999;font-size:12px;padding:20px 0;text-align:center}\
figcaption p{margin:0 0 6px}figcaption code{font-size:11px;color:#888;word-break:break-all}\
dl{margin:0 0 6px}dt{font-weight:600;font-size:12px}dd{margin:0 0 4px}.hidden{display:none}";

const SCRIPT: &str = "const items=document.querySelectorAll('.item');\
document.getElementById('filter').addEventListener('input',e=>{\
const words=e.target.value.toLowerCase().split(/\\s+/).filter(w=>w);\
for(const item of items){const text=item.dataset.text;\
item.classList.toggle('hidden',!words.every(w=>text.includes(w)));}});";

#[cfg(test)]
mod tests {
    use super::*;

    /// A journal read back: each image once, as last recorded (a retry's caption over its error),
    /// and the page holding every caption and failure, escaped, with nothing loaded from elsewhere.
    #[test]
    fn a_journal_becomes_a_page_of_its_images() {
        let dir = std::env::temp_dir().join(format!("hrx-report-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let journal = dir.join("c.jsonl");
        std::fs::write(
            &journal,
            "{\"image\":\"a.png\",\"error\":\"bad <file>\"}\n\
             {\"image\":\"b.png\",\"caption\":\"A \\\"cat\\\" & a dog\",\"seconds\":2}\n\
             not json\n\
             {\"image\":\"a.png\",\"caption\":\"fixed\",\"json\":{\"description\":\"fixed\",\"tags\":[\"x\"]}}\n\
             {\"image\":\"c.png\",\"error\":\"gone\"}\n",
        )
        .unwrap();
        let records = read_journal(&journal).unwrap();
        let images: Vec<&str> = records.iter().map(|r| r.image.as_str()).collect();
        assert_eq!(images, ["a.png", "b.png", "c.png"]);
        assert!(
            matches!(&records[0].outcome, Outcome::Captioned { caption, answer: Some(_), .. } if caption == "fixed")
        );
        assert_eq!(records[2].outcome, Outcome::Failed("gone".into()));
        let out = dir.join("r.html");
        write(&records, &Summary::default(), "c.jsonl", &out, 2).unwrap();
        let html = std::fs::read_to_string(&out).unwrap();
        assert!(html.contains("2 captioned · 1 failed · 2.00 s a caption on average"), "{html}");
        assert!(
            html.contains("A &quot;cat&quot; &amp; a dog") && html.contains("<dt>tags</dt><dd>[&quot;x&quot;]</dd>")
        );
        assert!(html.contains("<code>c.png</code>: gone") && html.contains("(the image cannot be read now)"));
        assert!(!html.contains("http://") && !html.contains("https://") && !html.contains("src=\"/"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
