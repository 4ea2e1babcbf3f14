//! `hrx caption --batch N`: greedy captions equal to `--batch 1`'s for every oracle image and
//! model, on the CPU and on Vulkan (lavapipe in CI); a batch mixing image sizes and caption
//! lengths; bad files among good ones; a batched job killed with SIGKILL mid-way, resumed to
//! the same captions.

mod common;
mod vulkan_common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use tinyjson::JsonValue;

/// The oracle's models: text model and projector, under models/.
const MODELS: [(&str, &str); 3] = [
    ("tiny/qwen3vl-tiny-F16.gguf", "tiny/mmproj-qwen3vl-tiny-F16.gguf"),
    ("tiny/qwen3vl-tiny-Q8_0.gguf", "tiny/mmproj-qwen3vl-tiny-F16.gguf"),
    ("small/qwen3vl-small-Q4_K_M.gguf", "small/mmproj-qwen3vl-small-F16.gguf"),
];

fn hrx(oracle: &Path, (model, mmproj): (&str, &str), args: &[&str]) -> Command {
    let models = oracle.join("models");
    let mut command = Command::new(env!("CARGO_BIN_EXE_hrx"));
    command.args(["caption", "-m"]).arg(models.join(model)).arg("--mmproj").arg(models.join(mmproj));
    command.args(args).env("RUST_LOG", "hrx=info");
    command
}

fn caption(oracle: &Path, model: (&str, &str), args: &[&str]) -> Output {
    hrx(oracle, model, args).output().expect("run hrx")
}

/// A fresh folder for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hrx-caption-batch-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn field<'a>(v: &'a JsonValue, key: &str) -> Option<&'a JsonValue> {
    v.get::<std::collections::HashMap<String, JsonValue>>()?.get(key)
}

/// The journal's records: image -> (caption, tokens), each image once.
fn records(path: &Path) -> BTreeMap<String, (String, f64)> {
    let mut seen = BTreeMap::new();
    for line in std::fs::read_to_string(path).unwrap().lines() {
        let v: JsonValue = line.parse().unwrap_or_else(|e| panic!("{line}: {e:?}"));
        let image = field(&v, "image").and_then(|i| i.get::<String>()).unwrap().clone();
        let text = field(&v, "caption").and_then(|c| c.get::<String>()).unwrap_or_else(|| panic!("no caption: {line}"));
        let tokens = *field(&v, "tokens").and_then(|t| t.get::<f64>()).unwrap();
        assert!(seen.insert(image.clone(), (text.clone(), tokens)).is_none(), "{image} recorded twice");
    }
    seen
}

/// Runs a job writing `out` anew; checks it captioned everything on the backend `on` names (in
/// its log line, "text model on ...") with the batch `batch` (its summary).
fn run_job(oracle: &Path, model: (&str, &str), args: &[&str], out: &Path, on: &str, batch: usize) {
    let mut all = args.to_vec();
    all.extend(["-o", out.to_str().unwrap(), "--overwrite"]);
    let run = caption(oracle, model, &all);
    let err = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(0), "{model:?} {args:?}: {err}");
    assert!(err.contains(&format!("text model on {on}")), "{model:?} {args:?} ran elsewhere: {err}");
    assert!(err.contains(&format!("; batch {batch}\n")), "{model:?} {args:?}: {err}");
}

/// Greedy captions of every oracle image by every oracle model with `--batch 1` and with
/// `--batch 3` (fewer sequences than images: finished ones make room for the next) agree.
fn batch_agrees_with_one_at_a_time(device: &str, on: &str) {
    let Some(oracle) = common::oracle() else { return };
    let dir = scratch(&format!("agree-{device}"));
    let images = oracle.join("images");
    let n_images = std::fs::read_dir(&images)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "png" || x == "jpg"))
        .count();
    for model in MODELS {
        let args = ["--device", device, "-n", "8", "--ignore-eos", images.to_str().unwrap()];
        let (one, three) = (dir.join("one.jsonl"), dir.join("three.jsonl"));
        run_job(&oracle, model, &[&args[..], &["--batch", "1"]].concat(), &one, on, 1);
        run_job(&oracle, model, &[&args[..], &["--batch", "3"]].concat(), &three, on, 3);
        let (one, three) = (records(&one), records(&three));
        assert_eq!(one.len(), n_images, "{model:?}: every image");
        assert!(one.values().all(|(_, tokens)| *tokens == 8.0), "{model:?}: {one:?}");
        assert_eq!(three, one, "{model:?} on {device}: --batch 3 and --batch 1");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn batched_captions_match_one_at_a_time_on_the_cpu() {
    batch_agrees_with_one_at_a_time("cpu", "cpu");
}

#[test]
fn batched_captions_match_one_at_a_time_on_vulkan() {
    if vulkan_common::device().is_none() {
        return;
    }
    // The device the Vulkan tests run on: HRX_DEVICE's index, else the first (lavapipe in CI,
    // which `auto` would pass over for the CPU backend).
    let index = std::env::var("HRX_DEVICE").ok().filter(|v| v.parse::<usize>().is_ok()).unwrap_or_else(|| "0".into());
    batch_agrees_with_one_at_a_time(&index, "vulkan");
}

/// Without --batch the job takes the default for the machine's memory and the model (1 to
/// `MAX_DEFAULT_SEQUENCES`, said in the summary), and captions as one at a time does.
#[test]
fn the_default_batch_is_said_and_captions_alike() {
    let Some(oracle) = common::oracle() else { return };
    let dir = scratch("default");
    let images = oracle.join("images");
    let args = ["--device", "cpu", "-n", "6", "--ignore-eos", images.to_str().unwrap()];
    let one = dir.join("one.jsonl");
    run_job(&oracle, MODELS[0], &[&args[..], &["--batch", "1"]].concat(), &one, "cpu", 1);
    let out = dir.join("default.jsonl");
    let run = caption(&oracle, MODELS[0], &[&args[..], &["-o", out.to_str().unwrap()]].concat());
    let err = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(0), "{err}");
    let batch: usize = err
        .rsplit("; batch ")
        .next()
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no batch in the summary: {err}"));
    assert!((1..=hrx::runtime::batch::MAX_DEFAULT_SEQUENCES).contains(&batch), "{err}");
    assert_eq!(records(&out), records(&one));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Images from 40x30 to 448x448 pixels (9 to 196 prompt tokens of image) and captions of very
/// different lengths (stop strings that end some of them after a few tokens, others not at
/// all) in batches of 2 and 4: each caption is the one it gets alone.
#[test]
fn a_batch_mixes_image_sizes_and_caption_lengths() {
    let Some(oracle) = common::oracle() else { return };
    let dir = scratch("mixed");
    let images = oracle.join("images");
    let model = MODELS[0];
    let stops = ["--stop", "풀", "--stop", "Sponge", "--stop", "同城同城", "--stop", "para", "--stop", "armor"];
    let args = [&["--device", "cpu", "-n", "24", "--ignore-eos", images.to_str().unwrap()][..], &stops].concat();
    let one = dir.join("one.jsonl");
    run_job(&oracle, model, &[&args[..], &["--batch", "1"]].concat(), &one, "cpu", 1);
    let one = records(&one);
    let lengths: std::collections::BTreeSet<u64> = one.values().map(|(_, t)| *t as u64).collect();
    assert!(lengths.len() >= 4 && lengths.contains(&24), "captions of several lengths, some whole: {one:?}");
    for batch in ["2", "4"] {
        let out = dir.join(format!("batch-{batch}.jsonl"));
        run_job(&oracle, model, &[&args[..], &["--batch", batch]].concat(), &out, "cpu", batch.parse().unwrap());
        assert_eq!(records(&out), one, "--batch {batch}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A batched job killed (SIGKILL) while captions are under way loses nothing `--resume` cannot
/// redo: the resumed job ends with every image captioned once, as a job never killed does.
#[test]
fn a_batched_job_killed_mid_way_resumes_to_the_same_captions() {
    let Some(oracle) = common::oracle() else { return };
    let dir = scratch("killed");
    let (images, model) = (dir.join("images"), MODELS[0]);
    std::fs::create_dir_all(&images).unwrap();
    let originals: Vec<PathBuf> = std::fs::read_dir(oracle.join("images"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "png" || x == "jpg"))
        .collect();
    // Eight copies of each: the job takes long enough to be killed in the middle.
    let mut copy_of = BTreeMap::new();
    for (i, original) in originals.iter().enumerate() {
        for c in 0..8 {
            let name = format!("{c}-{i}.{}", original.extension().unwrap().to_str().unwrap());
            std::fs::copy(original, images.join(&name)).unwrap();
            copy_of.insert(images.join(&name).display().to_string(), original.display().to_string());
        }
    }
    let common_args = ["--device", "cpu", "-n", "64", "--ignore-eos", "--batch", "4"];
    let reference = dir.join("reference.jsonl");
    let originals_args: Vec<&str> = originals.iter().map(|p| p.to_str().unwrap()).collect();
    run_job(&oracle, model, &[&common_args[..], &originals_args].concat(), &reference, "cpu", 4);
    let reference = records(&reference);

    let out = dir.join("captions.jsonl");
    let o = out.to_str().unwrap();
    let args = [&common_args[..], &[images.to_str().unwrap(), "-o", o]].concat();
    let mut child = hrx(&oracle, model, &args).stderr(Stdio::null()).spawn().expect("run hrx");
    let lines = || std::fs::read_to_string(&out).map_or(0, |t| t.lines().count());
    let t0 = Instant::now();
    while lines() < 3 {
        assert!(t0.elapsed() < Duration::from_secs(120), "no caption recorded in two minutes");
        assert!(child.try_wait().unwrap().is_none(), "the job ended before it could be killed");
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let before = lines();
    assert!(before < copy_of.len(), "killed in the middle: {before} of {} recorded", copy_of.len());

    let run = caption(&oracle, model, &[&common_args[..], &[images.to_str().unwrap(), "-o", o, "--resume"]].concat());
    let err = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(0), "{err}");
    let after = records(&out);
    assert_eq!(after.len(), copy_of.len(), "every image once: {err}");
    for (image, caption) in &after {
        assert_eq!(Some(caption), reference.get(&copy_of[image]), "{image}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Bad files among good ones in a batch (`--batch 3`: a corrupt PNG whose header reads, so it
/// fails in the vision run's company, and a text file called .jpg) fail alone, with their names;
/// the good ones get the captions `--batch 1` gives them; the job exits 3.
#[test]
fn bad_images_in_a_batch_fail_alone() {
    let Some(oracle) = common::oracle() else { return };
    let dir = scratch("bad");
    let images = dir.join("images");
    std::fs::create_dir_all(&images).unwrap();
    for name in ["gray-256x256.png", "shapes-448.png", "tie-400x272.png", "tiny-40x30.png"] {
        std::fs::copy(oracle.join("images").join(name), images.join(name)).unwrap();
    }
    let mut corrupt = std::fs::read(oracle.join("images/tiny-40x30.png")).unwrap();
    corrupt[40..60].fill(0xAB);
    std::fs::write(images.join("rgba-corrupt.png"), corrupt).unwrap();
    std::fs::write(images.join("notes.jpg"), b"a text file called .jpg\n").unwrap();
    let outcome = |batch: &str| {
        let out = dir.join(format!("batch-{batch}.jsonl"));
        let args = ["--device", "cpu", "-n", "4", "--ignore-eos", "--batch", batch, images.to_str().unwrap()];
        let run = caption(&oracle, MODELS[0], &[&args[..], &["-o", out.to_str().unwrap()]].concat());
        let err = String::from_utf8_lossy(&run.stderr).into_owned();
        assert_eq!(run.status.code(), Some(3), "--batch {batch}: images failed: exit code 3: {err}");
        assert!(err.contains("4 captioned, 2 failed, 0 skipped; "), "--batch {batch}: {err}");
        let mut seen = BTreeMap::new();
        for line in std::fs::read_to_string(&out).unwrap().lines() {
            let v: JsonValue = line.parse().unwrap_or_else(|e| panic!("{line}: {e:?}"));
            let text = |key: &str| field(&v, key).and_then(|t| t.get::<String>()).cloned();
            let image = text("image").unwrap();
            let said = match (text("caption"), text("error")) {
                (Some(c), None) => Ok(c),
                (None, Some(e)) => Err(e),
                _ => panic!("a caption or an error: {line}"),
            };
            assert!(seen.insert(image, said).is_none(), "{line}: recorded twice");
        }
        seen
    };
    let (one, three) = (outcome("1"), outcome("3"));
    assert_eq!(three.len(), 6, "{three:?}");
    for (image, said) in &three {
        if image.ends_with("rgba-corrupt.png") || image.ends_with("notes.jpg") {
            assert!(said.as_ref().is_err_and(|e| e.contains(image.as_str())), "{image}: {said:?}");
        } else {
            assert!(said.is_ok(), "{image}: {said:?}");
            assert_eq!(Some(said), one.get(image), "{image}: --batch 3 and --batch 1");
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
