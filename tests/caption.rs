//! `hrx caption` on the oracle's tiny model: good and bad files, order, resume, exit codes.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use tinyjson::JsonValue;

fn caption(args: &[&str], model: &Path) -> Output {
    let m = model.join("qwen3vl-tiny-F16.gguf");
    let mm = model.join("mmproj-qwen3vl-tiny-F16.gguf");
    let mut all: Vec<&str> =
        vec!["caption", "-m", m.to_str().unwrap(), "--mmproj", mm.to_str().unwrap(), "-n", "3", "--ignore-eos"];
    all.extend(args);
    Command::new(env!("CARGO_BIN_EXE_hrx")).args(&all).output().expect("run hrx")
}

fn lines(path: &Path) -> Vec<JsonValue> {
    std::fs::read_to_string(path).unwrap().lines().map(|l| l.parse().unwrap_or_else(|e| panic!("{l}: {e:?}"))).collect()
}

fn field<'a>(v: &'a JsonValue, key: &str) -> Option<&'a JsonValue> {
    v.get::<std::collections::HashMap<String, JsonValue>>().unwrap().get(key)
}

fn image_of(v: &JsonValue) -> String {
    field(v, "image").and_then(|i| i.get::<String>()).unwrap().clone()
}

/// A fresh folder for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hrx-caption-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    dir
}

#[test]
fn captions_good_images_records_bad_ones_and_resumes() {
    let Some(oracle) = common::oracle() else { return };
    let (images, model) = (oracle.join("images"), oracle.join("models/tiny"));
    let dir = scratch("batch");
    std::fs::copy(images.join("tiny-40x30.png"), dir.join("b.png")).unwrap();
    std::fs::copy(images.join("pattern-333x517.jpg"), dir.join("sub/a.JPEG")).unwrap();
    std::fs::copy(images.join("gray-256x256.png"), dir.join("sub/no-extension")).unwrap();
    std::fs::write(dir.join("notes.jpg"), b"a text file called .jpg\n").unwrap();
    std::fs::write(dir.join("readme.txt"), b"not an image, not looked at\n").unwrap();
    let mut corrupt = std::fs::read(images.join("tiny-40x30.png")).unwrap();
    corrupt[40..60].fill(0xAB);
    std::fs::write(dir.join("sub/corrupt.png"), corrupt).unwrap();
    let list = dir.join("list.txt");
    std::fs::write(&list, format!("{}\n{}\n", images.join("rgba-300x200.png").display(), dir.join("b.png").display()))
        .unwrap();
    let out = dir.join("captions.jsonl");
    let (d, o, at_list) = (dir.display().to_string(), out.display().to_string(), format!("@{}", list.display()));

    let run = caption(&[&d, &at_list, "-o", &o], &model);
    assert_eq!(run.status.code(), Some(1), "a failed image makes the exit code 1");
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(err.contains("[6/6]") && err.contains("4 captioned, 2 failed, 0 skipped"), "{err}");
    let first = lines(&out);
    let names: Vec<String> = first.iter().map(image_of).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted, "sorted order");
    assert_eq!(names.len(), 6, "every image once (b.png is listed twice): {names:?}");
    for line in &first {
        let name = image_of(line);
        let bad = name.ends_with("notes.jpg") || name.ends_with("corrupt.png");
        if bad {
            assert!(field(line, "error").and_then(|e| e.get::<String>()).is_some_and(|e| e.contains(&name)), "{name}");
        } else {
            assert!(field(line, "caption").and_then(|c| c.get::<String>()).is_some(), "{name}");
            assert_eq!(field(line, "tokens").and_then(|t| t.get::<f64>()), Some(&3.0), "{name}");
            assert!(field(line, "seconds").and_then(|s| s.get::<f64>()).is_some_and(|&s| s >= 0.0), "{name}");
        }
    }

    // Greedy decoding: a second job from scratch writes the same captions.
    let again = dir.join("again.jsonl");
    caption(&[&d, &at_list, "-o", again.to_str().unwrap()], &model);
    let captions = |v: &[JsonValue]| v.iter().map(|l| field(l, "caption").cloned()).collect::<Vec<_>>();
    assert_eq!(captions(&lines(&again)), captions(&first));

    // A job killed in the middle of a line: resume mends the line, retries the failures and
    // the cut image, and skips the rest.
    let text = std::fs::read_to_string(&out).unwrap();
    let last_good = first.iter().rposition(|l| field(l, "caption").is_some()).unwrap();
    let kept: Vec<&str> = text.lines().take(last_good).collect();
    let cut = text.lines().nth(last_good).unwrap();
    std::fs::write(&out, format!("{}\n{}", kept.join("\n"), &cut[..cut.len() / 2])).unwrap();
    let run = caption(&[&d, &at_list, "-o", &o, "--resume"], &model);
    assert_eq!(run.status.code(), Some(1));
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(err.contains("1 captioned, 2 failed, 3 skipped"), "{err}");
    let text = std::fs::read_to_string(&out).unwrap();
    assert_eq!(text.lines().filter(|l| l.parse::<JsonValue>().is_err()).count(), 1, "only the cut line is not JSON");
    let after: Vec<JsonValue> = text.lines().filter_map(|l| l.parse().ok()).collect();
    assert_eq!(after.len(), last_good + 3);
    assert_eq!(image_of(after.last().unwrap()), image_of(&first[last_good]), "the cut image is captioned again, last");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn all_good_is_exit_0_and_nothing_found_is_an_error() {
    let Some(oracle) = common::oracle() else { return };
    let model = oracle.join("models/tiny");
    let dir = scratch("good");
    std::fs::copy(oracle.join("images/tiny-40x30.png"), dir.join("sub/x.png")).unwrap();
    let out = dir.join("c.jsonl");
    let run = caption(&[dir.to_str().unwrap(), "-o", out.to_str().unwrap()], &model);
    assert_eq!(run.status.code(), Some(0), "{}", String::from_utf8_lossy(&run.stderr));
    assert_eq!(lines(&out).len(), 1);
    // Everything already done: nothing to load, still success.
    let run = caption(&[dir.to_str().unwrap(), "-o", out.to_str().unwrap(), "--resume"], &model);
    assert_eq!(run.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&run.stderr).contains("0 captioned, 0 failed, 1 skipped"));

    let empty = scratch("empty");
    let run = caption(&[empty.to_str().unwrap(), "-o", out.to_str().unwrap()], &model);
    assert_eq!(run.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&run.stderr).contains("no images found"));
    let run = caption(&[empty.to_str().unwrap()], &model);
    assert_eq!(run.status.code(), Some(2), "-o is required");
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_dir_all(&empty).unwrap();
}
