//! `hrx caption` on the oracle's tiny model: good and bad files, order, resume, exit codes.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use tinyjson::JsonValue;

fn caption(args: &[&str], model: &Path) -> Output {
    caption_in(None, args, model)
}

/// `hrx caption ARGS` with the tiny model, run in `dir` when given.
fn caption_in(dir: Option<&Path>, args: &[&str], model: &Path) -> Output {
    let m = model.join("qwen3vl-tiny-F16.gguf");
    let mm = model.join("mmproj-qwen3vl-tiny-F16.gguf");
    let mut all = vec!["caption", "-m", m.to_str().unwrap(), "--mmproj", mm.to_str().unwrap()];
    // One image at a time: records in sorted order (tests/caption_batch.rs has the batches,
    // whose records come in the order captions end).
    if !args.contains(&"-n") {
        all.extend(["-n", "3"]);
    }
    all.extend(["--ignore-eos", "--batch", "1"]);
    all.extend(args);
    let mut command = Command::new(env!("CARGO_BIN_EXE_hrx"));
    if let Some(dir) = dir {
        command.current_dir(dir);
    }
    command.args(&all).output().expect("run hrx")
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
    assert_eq!(run.status.code(), Some(3), "images failed in this run: exit code 3");
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(err.contains("[6/6]") && err.contains("4 captioned, 2 failed, 0 skipped; "), "{err}");
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

    // A job killed in the middle of a line: resume cuts the torn line off, captions the cut
    // image again, skips the rest, and does not retry the recorded failures: the run did all
    // it could, exit 0.
    let text = std::fs::read_to_string(&out).unwrap();
    let last_good = first.iter().rposition(|l| field(l, "caption").is_some()).unwrap();
    let kept: Vec<&str> = text.lines().take(last_good).collect();
    let cut = text.lines().nth(last_good).unwrap();
    std::fs::write(&out, format!("{}\n{}", kept.join("\n"), &cut[..cut.len() / 2])).unwrap();
    let failed_before = kept.iter().filter(|l| l.contains("\"error\"")).count();
    let run = caption(&[&d, &at_list, "-o", &o, "--resume"], &model);
    let err = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(0), "{err}");
    assert!(err.contains("removed the last line") && err.contains("cut short"), "{err}");
    let captioned_before = last_good - failed_before;
    let want = format!("1 captioned, 0 failed, {captioned_before} skipped");
    assert!(err.contains(&want), "{want}: {err}");
    if failed_before > 0 {
        assert!(err.contains(&format!("{failed_before} failed before and not retried")), "{err}");
    }
    let after = lines(&out);
    assert_eq!(after.len(), last_good + 1, "every line is JSON, the torn one gone");
    assert_eq!(image_of(after.last().unwrap()), image_of(&first[last_good]), "the cut image is captioned again, last");

    // Resumed again: everything recorded, nothing tried, exit 0 (a nightly job stays green).
    let run = caption(&[&d, &at_list, "-o", &o, "--resume"], &model);
    assert_eq!(run.status.code(), Some(0), "{}", String::from_utf8_lossy(&run.stderr));
    assert_eq!(lines(&out).len(), last_good + 1, "no line added");
    // --retry-failed tries the two bad files again: they fail again, exit 3, and keep their one
    // error record each.
    let run = caption(&[&d, &at_list, "-o", &o, "--resume", "--retry-failed"], &model);
    let err = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(3), "{err}");
    assert!(err.contains("0 captioned, 2 failed") && !err.contains("images/minute"), "{err}");
    assert_eq!(lines(&out).len(), last_good + 1, "one record per image");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn one_image_however_it_is_named() {
    let Some(oracle) = common::oracle() else { return };
    let model = oracle.join("models/tiny");
    let dir = scratch("names");
    std::fs::copy(oracle.join("images/tiny-40x30.png"), dir.join("x.png")).unwrap();
    let abs = dir.join("x.png").display().to_string();
    let run_in = |args: &[&str]| caption_in(Some(&dir), args, &model);
    let run = run_in(&["x.png", "./x.png", &abs, "-o", "c.jsonl"]);
    assert_eq!(run.status.code(), Some(0), "{}", String::from_utf8_lossy(&run.stderr));
    assert_eq!(lines(&dir.join("c.jsonl")).len(), 1, "three names, one image");
    let run = run_in(&[".", "-o", "c.jsonl", "--resume"]);
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(err.contains("0 captioned, 0 failed, 1 skipped"), "found by its folder, recorded by another name: {err}");
    // From another folder, by another name: the same image, recorded by its canonical path.
    let out = dir.join("c.jsonl").display().to_string();
    let run = caption_in(Some(&std::env::temp_dir()), &[&abs, "-o", &out, "--resume"], &model);
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(err.contains("0 captioned, 0 failed, 1 skipped"), "another working directory: {err}");
    let canonical = std::fs::canonicalize(dir.join("x.png")).unwrap().display().to_string();
    assert_eq!(image_of(&lines(&dir.join("c.jsonl"))[0]), canonical);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn all_good_is_exit_0_and_so_is_nothing_found() {
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

    // Nothing to caption is nothing left to do: exit 0, said, the output untouched.
    let empty = scratch("empty");
    let before = std::fs::read(&out).unwrap();
    let run = caption(&[empty.to_str().unwrap(), "-o", out.to_str().unwrap()], &model);
    assert_eq!(run.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&run.stderr).contains("no images found") && std::fs::read(&out).unwrap() == before);
    let run = caption(&[empty.to_str().unwrap()], &model);
    assert_eq!(run.status.code(), Some(2), "-o is required");
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_dir_all(&empty).unwrap();
}

/// What a nightly job must not be told: a folder that vanished is an error on every run, not a
/// failure recorded once and skipped after; a FIFO named as an input is refused, not waited on;
/// a run that forgot --resume does not cut the captions to nothing; a last record that lost
/// only its newline is captioned again, not counted done and then dropped.
#[test]
fn a_cron_job_is_not_told_what_did_not_happen() {
    let Some(oracle) = common::oracle() else { return };
    let model = oracle.join("models/tiny");
    let dir = scratch("cron");
    std::fs::copy(oracle.join("images/tiny-40x30.png"), dir.join("sub/a.png")).unwrap();
    std::fs::copy(oracle.join("images/gray-256x256.png"), dir.join("sub/b.png")).unwrap();
    let (out, gone) = (dir.join("c.jsonl"), dir.join("nothere"));
    let (o, g) = (out.display().to_string(), gone.display().to_string());
    for run in 0..2 {
        let done = caption(&[&g, "-o", &o, "--resume"], &model);
        let err = String::from_utf8_lossy(&done.stderr);
        assert_eq!(done.status.code(), Some(2), "run {run}: {err}");
        assert!(err.contains("nothere") && err.contains("nothing was captioned"), "{err}");
        assert!(!out.exists(), "nothing written");
    }
    #[cfg(unix)]
    {
        let fifo = dir.join("pipe.png");
        let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
        assert!(made.success());
        let done = caption(&[fifo.to_str().unwrap(), "-o", &o], &model);
        assert_eq!(done.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&done.stderr).contains("not a regular file"));
        std::fs::remove_file(&fifo).unwrap();
    }
    let sub = dir.join("sub").display().to_string();
    assert_eq!(caption(&[&sub, "-o", &o], &model).status.code(), Some(0));
    let captioned = std::fs::read_to_string(&out).unwrap();
    assert_eq!(captioned.lines().count(), 2);
    // Without --resume an output that holds captions is refused, unchanged; --overwrite starts it anew.
    let again = caption(&[&sub, "-o", &o], &model);
    assert_eq!(again.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&again.stderr).contains("--resume adds to it, --overwrite starts it anew"));
    assert_eq!(std::fs::read_to_string(&out).unwrap(), captioned);
    assert_eq!(caption(&[&sub, "-o", &o, "--overwrite"], &model).status.code(), Some(0));
    assert_eq!(std::fs::read_to_string(&out).unwrap().lines().count(), 2);
    // The last record without its newline: captioned again, two records in the end.
    std::fs::write(&out, captioned.trim_end_matches('\n')).unwrap();
    let resumed = caption(&[&sub, "-o", &o, "--resume"], &model);
    let err = String::from_utf8_lossy(&resumed.stderr);
    assert_eq!(resumed.status.code(), Some(0), "{err}");
    assert!(err.contains("1 captioned, 0 failed, 1 skipped"), "{err}");
    let records = lines(&out);
    assert_eq!(records.len(), 2, "{records:?}");
    assert_ne!(image_of(&records[0]), image_of(&records[1]));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Options every image would fail with are the run's error before any image (exit 2, the
/// output as it was), not an error record per image that --resume then skips for ever: a
/// schema whose shortest document does not fit -n, a context too small for the smallest
/// image. describe says it once, not once per image.
#[test]
fn a_job_every_image_would_fail_is_refused_before_any_image() {
    let Some(oracle) = common::oracle() else { return };
    let model = oracle.join("models/tiny");
    let dir = scratch("config");
    std::fs::copy(oracle.join("images/tiny-40x30.png"), dir.join("sub/a.png")).unwrap();
    std::fs::copy(oracle.join("images/gray-256x256.png"), dir.join("sub/b.png")).unwrap();
    let schema = dir.join("schema.json");
    let key = "a_rather_long_property_name";
    std::fs::write(
        &schema,
        format!(r#"{{"type":"object","properties":{{"{key}":{{"type":"string"}}}},"required":["{key}"]}}"#),
    )
    .unwrap();
    let (out, sub, s) = (dir.join("c.jsonl"), dir.join("sub").display().to_string(), schema.display().to_string());
    let o = out.display().to_string();
    std::fs::write(&out, "").unwrap();
    for args in [vec!["--json-schema", &s], vec!["--ctx", "64"]] {
        let all = [vec![sub.as_str(), "-o", &o, "--resume"], args.clone()].concat();
        let run = caption(&all, &model);
        let err = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("every image would fail") && err.contains("nothing was captioned"), "{err}");
        assert!(!err.contains("[1/2]"), "no image was tried: {err}");
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "", "{args:?}: nothing written");
    }
    // Fixed, the same output resumes and captions both.
    let run = caption(&[&sub, "-o", &o, "--resume", "--json-schema", &s, "-n", "64"], &model);
    assert_eq!(run.status.code(), Some(0), "{}", String::from_utf8_lossy(&run.stderr));
    assert_eq!(lines(&out).len(), 2);
    // describe: one refusal, no image tried.
    let m = model.join("qwen3vl-tiny-F16.gguf");
    let mm = model.join("mmproj-qwen3vl-tiny-F16.gguf");
    let a = dir.join("sub/a.png").display().to_string();
    let run = Command::new(env!("CARGO_BIN_EXE_hrx"))
        .args(["describe", &a, &a, "-m", m.to_str().unwrap(), "--mmproj", mm.to_str().unwrap()])
        .args(["-n", "3", "--json-schema", &s])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(2), "{err}");
    assert_eq!(err.matches("every image would fail").count(), 1, "{err}");
    assert!(run.stdout.is_empty());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Two runs on one output (cron overlapping a slow night): the second is refused with exit 4
/// naming the process that writes it, or with --wait starts when the first ends.
#[test]
fn one_run_writes_an_output_at_a_time() {
    let Some(oracle) = common::oracle() else { return };
    let model = oracle.join("models/tiny");
    let dir = scratch("lock");
    std::fs::copy(oracle.join("images/tiny-40x30.png"), dir.join("sub/a.png")).unwrap();
    let (out, sub) = (dir.join("c.jsonl"), dir.join("sub").display().to_string());
    let o = out.display().to_string();
    // This test process holds the output as a running caption job would.
    let held = std::fs::OpenOptions::new().append(true).create(true).open(&out).unwrap();
    held.try_lock().unwrap();
    let run = caption(&[&sub, "-o", &o, "--resume"], &model);
    let err = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(4), "{err}");
    assert!(err.contains(&format!("is being written by process {}", std::process::id())), "{err}");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "", "nothing written");
    // --wait: waits while the output is held, then captions.
    let m = model.join("qwen3vl-tiny-F16.gguf");
    let mm = model.join("mmproj-qwen3vl-tiny-F16.gguf");
    let mut waiting = Command::new(env!("CARGO_BIN_EXE_hrx"))
        .args(["caption", &sub, "-o", &o, "--resume", "--wait", "-n", "3", "--batch", "1"])
        .args(["-m", m.to_str().unwrap(), "--mmproj", mm.to_str().unwrap()])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert!(waiting.try_wait().unwrap().is_none(), "--wait waits while the output is held");
    drop(held);
    let done = waiting.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&done.stderr);
    assert_eq!(done.status.code(), Some(0), "{err}");
    assert!(err.contains("waiting for it"), "{err}");
    assert_eq!(lines(&out).len(), 1);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--sidecar txt`: each caption beside its image as the JSON Lines record says it; an image
/// with a sidecar already is left alone (skip, the default), or its sidecar gets the caption
/// added (append) or replaced (overwrite); two images that would share one are refused.
#[test]
fn sidecars_hold_the_captions_as_each_mode_says() {
    let Some(oracle) = common::oracle() else { return };
    let model = oracle.join("models/tiny");
    let dir = scratch("sidecar");
    std::fs::copy(oracle.join("images/tiny-40x30.png"), dir.join("sub/a.png")).unwrap();
    std::fs::copy(oracle.join("images/gray-256x256.png"), dir.join("sub/b.png")).unwrap();
    std::fs::write(dir.join("sub/b.txt"), "written by a person\n").unwrap();
    let (out, sub) = (dir.join("c.jsonl"), dir.join("sub").display().to_string());
    let o = out.display().to_string();
    let run = caption(&[&sub, "-o", &o, "--sidecar", "txt"], &model);
    let err = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(0), "{err}");
    assert!(err.contains("1 captioned, 0 failed, 0 skipped, 1 with a sidecar already"), "{err}");
    let records = lines(&out);
    assert_eq!(records.len(), 1);
    let caption_of = |v: &JsonValue| field(v, "caption").and_then(|c| c.get::<String>()).unwrap().clone();
    let a = caption_of(&records[0]);
    assert_eq!(std::fs::read_to_string(dir.join("sub/a.txt")).unwrap(), format!("{a}\n"));
    assert_eq!(std::fs::read_to_string(dir.join("sub/b.txt")).unwrap(), "written by a person\n", "left alone");
    // append: the person's text, then the caption; a second run adds nothing it has.
    for _ in 0..2 {
        let run = caption(&[&sub, "-o", &o, "--overwrite", "--sidecar", "txt", "--sidecar-mode", "append"], &model);
        assert_eq!(run.status.code(), Some(0), "{}", String::from_utf8_lossy(&run.stderr));
    }
    let b = lines(&out).iter().find(|r| image_of(r).ends_with("b.png")).map(caption_of).unwrap();
    assert_eq!(std::fs::read_to_string(dir.join("sub/b.txt")).unwrap(), format!("written by a person\n{b}\n"));
    assert_eq!(std::fs::read_to_string(dir.join("sub/a.txt")).unwrap(), format!("{a}\n"));
    let run = caption(&[&sub, "-o", &o, "--overwrite", "--sidecar", "txt", "--sidecar-mode", "overwrite"], &model);
    assert_eq!(run.status.code(), Some(0));
    assert_eq!(std::fs::read_to_string(dir.join("sub/b.txt")).unwrap(), format!("{b}\n"));
    // Flags it does not take, and a.png beside a.jpg.
    for (args, says) in [
        (vec!["--sidecar", "json"], "--sidecar json: one of txt|xmp"),
        (vec!["--sidecar-mode", "append"], "--sidecar-mode goes with --sidecar"),
        (vec!["--sidecar", "txt", "--sidecar-mode", "merge"], "--sidecar-mode merge: one of"),
    ] {
        let run = caption(&[[sub.as_str(), "-o", &o, "--overwrite"].as_slice(), &args].concat(), &model);
        assert_eq!(run.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&run.stderr).contains(says), "{says}");
    }
    std::fs::copy(dir.join("sub/a.png"), dir.join("sub/a.jpg")).unwrap();
    let before = std::fs::read_to_string(&out).unwrap();
    let run = caption(&[&sub, "-o", &o, "--resume", "--sidecar", "txt"], &model);
    assert_eq!(run.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&run.stderr).contains("would share the sidecar"));
    assert_eq!(std::fs::read_to_string(&out).unwrap(), before);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--sidecar xmp` with a schema that has tags: an XMP packet an XML parser (xmllint) accepts,
/// the answer's description as dc:description and its tags as dc:subject.
#[test]
fn an_xmp_sidecar_is_xml_with_the_description_and_tags() {
    let Some(oracle) = common::oracle() else { return };
    let model = oracle.join("models/tiny");
    let dir = scratch("xmp");
    std::fs::copy(oracle.join("images/tiny-40x30.png"), dir.join("sub/a.png")).unwrap();
    let schema = dir.join("schema.json");
    std::fs::write(
        &schema,
        r#"{"type":"object","properties":{"description":{"type":"string","maxLength":12},"tags":{"type":"array","items":{"type":"string","maxLength":6},"minItems":2,"maxItems":2}},"required":["description","tags"]}"#,
    )
    .unwrap();
    let (out, sub) = (dir.join("c.jsonl"), dir.join("sub").display().to_string());
    let args = [&sub, "-o", out.to_str().unwrap(), "--sidecar", "xmp", "--json-schema", schema.to_str().unwrap()];
    let run = caption(&[args.as_slice(), &["-n", "200"]].concat(), &model);
    assert_eq!(run.status.code(), Some(0), "{}", String::from_utf8_lossy(&run.stderr));
    let record = &lines(&out)[0];
    let answer = field(record, "json").unwrap();
    let description = field(answer, "description").and_then(|d| d.get::<String>()).unwrap();
    let tags: Vec<String> = field(answer, "tags")
        .and_then(|t| t.get::<Vec<JsonValue>>())
        .unwrap()
        .iter()
        .map(|t| t.get::<String>().unwrap().clone())
        .collect();
    let xmp = dir.join("sub/a.xmp");
    let lint = Command::new("xmllint").args(["--noout", xmp.to_str().unwrap()]).output();
    let lint = lint.expect("xmllint (Debian's libxml2-utils; scripts/test installs it)");
    assert!(lint.status.success(), "{}", String::from_utf8_lossy(&lint.stderr));
    let xpath = |path: &str| {
        let q = Command::new("xmllint").args(["--xpath", path, xmp.to_str().unwrap()]).output().unwrap();
        // xmllint ends what it prints with a newline.
        let text = String::from_utf8(q.stdout).unwrap();
        text.strip_suffix('\n').unwrap_or(&text).to_owned()
    };
    let rdf = "*[local-name()='RDF']/*[local-name()='Description']";
    let got = xpath(&format!("string(/*/{rdf}/*[local-name()='description']/*/*[local-name()='li'])"));
    assert_eq!(&got, description);
    let subjects: Vec<String> = (1..=tags.len())
        .map(|i| xpath(&format!("string(/*/{rdf}/*[local-name()='subject']/*/*[local-name()='li'][{i}])")))
        .collect();
    assert_eq!(subjects, tags);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A job killed (SIGKILL) while it writes sidecars leaves none half written: every sidecar
/// there is the caption its image gets, and a resumed run completes the rest.
#[cfg(unix)]
#[test]
fn a_killed_job_leaves_no_partial_sidecar() {
    let Some(oracle) = common::oracle() else { return };
    let model = oracle.join("models/tiny");
    let dir = scratch("killed");
    for i in 0..40 {
        std::fs::copy(oracle.join("images/gray-256x256.png"), dir.join(format!("sub/{i:02}.png"))).unwrap();
    }
    let (out, sub) = (dir.join("c.jsonl"), dir.join("sub").display().to_string());
    let o = out.display().to_string();
    let m = model.join("qwen3vl-tiny-F16.gguf");
    let mm = model.join("mmproj-qwen3vl-tiny-F16.gguf");
    let mut job = Command::new(env!("CARGO_BIN_EXE_hrx"))
        .args(["caption", &sub, "-o", &o, "--sidecar", "txt", "-n", "24", "--ignore-eos", "--batch", "1"])
        .args(["-m", m.to_str().unwrap(), "--mmproj", mm.to_str().unwrap()])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Killed once some sidecars are there (or after 20 s, whatever it has done).
    let t = std::time::Instant::now();
    while t.elapsed() < std::time::Duration::from_secs(20) {
        let written = std::fs::read_dir(dir.join("sub"))
            .unwrap()
            .filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "txt"));
        if written.count() >= 5 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    job.kill().unwrap();
    job.wait().unwrap();
    let before: Vec<(PathBuf, String)> = std::fs::read_dir(dir.join("sub"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "txt"))
        .map(|p| (p.clone(), std::fs::read_to_string(&p).unwrap()))
        .collect();
    assert!(!before.is_empty(), "the job was killed before it wrote a sidecar");
    // Greedy decoding: the same caption for every copy of one image.
    let run = caption(&[&sub, "-o", &o, "--resume", "--sidecar", "txt", "-n", "24"], &model);
    assert_eq!(run.status.code(), Some(0), "{}", String::from_utf8_lossy(&run.stderr));
    let want = field(&lines(&out)[0], "caption").and_then(|c| c.get::<String>()).unwrap().clone();
    for (path, text) in &before {
        assert_eq!(text, &format!("{want}\n"), "{} was whole when the job was killed", path.display());
    }
    for i in 0..40 {
        let text = std::fs::read_to_string(dir.join(format!("sub/{i:02}.txt"))).unwrap();
        assert_eq!(text, format!("{want}\n"));
    }
    let stray: Vec<_> = std::fs::read_dir(dir.join("sub"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.ends_with(".png") && !n.ends_with(".txt"))
        .collect();
    assert!(stray.len() <= 1, "at most the killed write's temporary file: {stray:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Shards: `--shard K/N` runs over one folder caption every image exactly once between them,
/// each into its own `-o captions-{shard}.jsonl`; `--shard auto` takes a Slurm array task's
/// index and refuses to guess without a scheduler.
#[test]
fn shards_caption_every_image_once_between_them() {
    let Some(oracle) = common::oracle() else { return };
    let model = oracle.join("models/tiny");
    let dir = scratch("shards");
    for i in 0..12 {
        std::fs::copy(oracle.join("images/tiny-40x30.png"), dir.join(format!("sub/{i:02}.png"))).unwrap();
    }
    let sub = dir.join("sub").display().to_string();
    let pattern = dir.join("captions-{shard}.jsonl").display().to_string();
    let mut seen = Vec::new();
    for k in 0..3 {
        let run = caption(&[&sub, "-o", &pattern, "--shard", &format!("{k}/3")], &model);
        let err = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(0), "{err}");
        assert!(err.contains(&format!("shard {k} of 3: ")), "{err}");
        seen.extend(lines(&dir.join(format!("captions-{k}.jsonl"))).iter().map(image_of));
    }
    seen.sort();
    let mut want: Vec<String> = (0..12)
        .map(|i| std::fs::canonicalize(dir.join(format!("sub/{i:02}.png"))).unwrap().display().to_string())
        .collect();
    want.sort();
    assert_eq!(seen, want, "every image in exactly one shard");
    // The same share from a Slurm array task (ids 1..3): task 2 is shard 1.
    let m = model.join("qwen3vl-tiny-F16.gguf");
    let mm = model.join("mmproj-qwen3vl-tiny-F16.gguf");
    let slurm = dir.join("slurm-{shard}.jsonl").display().to_string();
    let run = Command::new(env!("CARGO_BIN_EXE_hrx"))
        .args(["caption", &sub, "-o", &slurm, "--shard", "auto", "-n", "3", "--batch", "1"])
        .args(["-m", m.to_str().unwrap(), "--mmproj", mm.to_str().unwrap()])
        .env("SLURM_ARRAY_TASK_ID", "2")
        .env("SLURM_ARRAY_TASK_COUNT", "3")
        .env("SLURM_ARRAY_TASK_MIN", "1")
        .env_remove("JOB_COMPLETION_INDEX")
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(0), "{}", String::from_utf8_lossy(&run.stderr));
    let images = |path: &Path| lines(path).iter().map(image_of).collect::<std::collections::BTreeSet<_>>();
    assert_eq!(images(&dir.join("slurm-1.jsonl")), images(&dir.join("captions-1.jsonl")));
    // No scheduler: no guess.
    let run = Command::new(env!("CARGO_BIN_EXE_hrx"))
        .args(["caption", &sub, "-o", &slurm, "--shard", "auto", "--shards", "3"])
        .args(["-m", m.to_str().unwrap(), "--mmproj", mm.to_str().unwrap()])
        .env_remove("SLURM_ARRAY_TASK_ID")
        .env_remove("JOB_COMPLETION_INDEX")
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&run.stderr).contains("found no scheduler's index"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A run that cannot run (here: its model is not a GGUF file) is exit 1, with the output as it
/// was: each exit code of `caption --help` has its test (0, 2, 3 and 4 above).
#[test]
fn a_run_that_cannot_load_its_model_is_exit_1() {
    let Some(oracle) = common::oracle() else { return };
    let dir = scratch("nomodel");
    std::fs::copy(oracle.join("images/tiny-40x30.png"), dir.join("sub/a.png")).unwrap();
    std::fs::write(dir.join("model.gguf"), b"not a model").unwrap();
    let out = dir.join("c.jsonl");
    std::fs::write(&out, "{\"image\":\"x.png\",\"caption\":\"kept\"}\n").unwrap();
    let mm = oracle.join("models/tiny/mmproj-qwen3vl-tiny-F16.gguf");
    let run = Command::new(env!("CARGO_BIN_EXE_hrx"))
        .args(["caption", dir.join("sub").to_str().unwrap(), "-o", out.to_str().unwrap(), "--resume"])
        .args(["-m", dir.join("model.gguf").to_str().unwrap(), "--mmproj", mm.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(1), "{}", String::from_utf8_lossy(&run.stderr));
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "{\"image\":\"x.png\",\"caption\":\"kept\"}\n");
    let help = Command::new(env!("CARGO_BIN_EXE_hrx")).args(["caption", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout).split_whitespace().collect::<Vec<_>>().join(" ");
    for code in
        ["0 the run captioned", "3 it finished", "1 it could not run", "2 a wrong command line", "4 another run"]
    {
        assert!(help.contains(code), "caption --help: {code}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--report`: after the run, an HTML page of every image with its caption and every failure
/// with its reason, thumbnails embedded; `hrx report` makes the same from a journal later.
#[test]
fn a_report_shows_every_image_and_failure() {
    let Some(oracle) = common::oracle() else { return };
    let model = oracle.join("models/tiny");
    let dir = scratch("report");
    std::fs::copy(oracle.join("images/tiny-40x30.png"), dir.join("sub/a.png")).unwrap();
    std::fs::copy(oracle.join("images/pattern-333x517.jpg"), dir.join("sub/b.jpg")).unwrap();
    std::fs::write(dir.join("sub/bad.png"), b"not a png").unwrap();
    let (out, report, sub) = (dir.join("c.jsonl"), dir.join("r.html"), dir.join("sub").display().to_string());
    let run = caption(&[&sub, "-o", out.to_str().unwrap(), "--report", report.to_str().unwrap()], &model);
    let err = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(3), "{err}");
    assert!(err.contains("wrote the report") && err.contains("(3 images)"), "{err}");
    let html = std::fs::read_to_string(&report).unwrap();
    assert!(html.contains("Captions of 3 images") && html.contains("2 captioned · 1 failed"), "{html}");
    assert!(html.contains(" captions a minute · on cpu"), "the run's rate and device");
    assert_eq!(html.matches("<img src=\"data:image/png;base64,").count(), 2);
    for record in lines(&out) {
        let image = image_of(&record);
        assert!(html.contains(&format!("<code>{image}</code>")), "{image}");
    }
    // The same from the journal, later.
    let again = dir.join("again.html");
    let hrx = |args: &[&str]| Command::new(env!("CARGO_BIN_EXE_hrx")).args(args).output().unwrap();
    let made = hrx(&["report", out.to_str().unwrap(), "-o", again.to_str().unwrap()]);
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let later = std::fs::read_to_string(&again).unwrap();
    assert!(later.contains("2 captioned · 1 failed") && later.matches("<img src=\"data:").count() == 2);
    assert_eq!(hrx(&["report", out.to_str().unwrap()]).status.code(), Some(2), "-o is required");
    assert_eq!(hrx(&["report", "nothere.jsonl", "-o", again.to_str().unwrap()]).status.code(), Some(1));
    std::fs::remove_dir_all(&dir).unwrap();
}
