//! The command line as users meet it: plans of the oracle models, errors for bad input.

mod common;

use common::TempDir;
use std::process::{Command, Output};
use tinyjson::JsonValue;

fn hrx(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hrx")).args(args).output().expect("run hrx")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn plan_of_the_oracle_models_has_no_refusals_and_skips_the_deepstack_windows() {
    let Some(oracle) = common::oracle() else { return };
    for (model, deepstack_used, layers) in
        [("tiny/qwen3vl-tiny-F16.gguf", 2.0, 2.0), ("small/qwen3vl-small-Q4_K_M.gguf", 3.0, 4.0)]
    {
        let path = oracle.join("models").join(model);
        let out = hrx(&["plan", "-m", path.to_str().unwrap(), "--json"]);
        assert!(out.status.success(), "{}", stderr(&out));
        let json: JsonValue = String::from_utf8(out.stdout).unwrap().parse().unwrap();
        let graphs: &Vec<JsonValue> = json["graphs"].get().unwrap();
        assert_eq!(graphs.len(), 2);
        for g in graphs {
            let num = |k: &str| *g[k].get::<f64>().unwrap();
            assert_eq!(num("refused"), 0.0);
            // Each deepstack slice and each layer's K and V cache views: windows on storage the
            // graph does not hold.
            assert_eq!(num("skipped"), deepstack_used + 2.0 * layers, "{model}");
            assert_eq!(
                num("cpu_nodes") + num("gpu_nodes"),
                num("nodes") - num("elided") - num("skipped") - num("bound")
            );
        }
    }
}

#[test]
fn bad_input_gives_one_line_errors_and_exit_codes() {
    let out = hrx(&["generate", "-m", "/nonexistent.gguf", "-p", "hi"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("/nonexistent.gguf"), "{}", stderr(&out));
    let out = hrx(&["generate", "--bogus"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("unknown option --bogus") || stderr(&out).contains("needs -m"), "{}", stderr(&out));
    let out = hrx(&["frobnicate"]);
    assert_eq!(out.status.code(), Some(2));
    // No command is a usage error naming the commands; `hrx help --help` is the main help.
    let out = hrx(&[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("no command given: one of describe"), "{}", stderr(&out));
    for args in [&["help", "--help"][..], &["help", "help"], &["--help"]] {
        let out = hrx(args);
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        assert!(String::from_utf8_lossy(&out.stdout).contains("commands:"), "{args:?}");
    }
    let out = hrx(&["inspect", "Cargo.toml"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("not a GGUF file"), "{}", stderr(&out));
}

/// The reference of every command is one text: `hrx help C` is `hrx C --help`, for each command
/// the main help lists; `hrx help env` lists the environment's variables.
#[test]
fn hrx_help_command_is_the_commands_own_help() {
    let main = String::from_utf8(hrx(&["--help"]).stdout).unwrap();
    let commands: Vec<&str> = main
        .lines()
        .skip_while(|l| *l != "commands:")
        .skip(1)
        .take_while(|l| !l.is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    assert!(commands.len() >= 10 && commands.contains(&"serve"), "{commands:?}");
    for c in commands {
        let (help, own) = (hrx(&["help", c]), hrx(&[c, "--help"]));
        assert!(help.status.success() && !help.stdout.is_empty(), "hrx help {c}");
        assert_eq!(help.stdout, own.stdout, "hrx help {c} differs from hrx {c} --help");
    }
    let env = String::from_utf8(hrx(&["help", "env"]).stdout).unwrap();
    assert!(env.contains("HRX_DEVICE=") && env.contains("HRX_VK_TIMEOUT=SECONDS  (default 120)"), "{env}");
}

#[test]
fn generate_rejects_bad_prompt_ids_and_settings() {
    let Some(oracle) = common::oracle() else { return };
    let model = oracle.join("models/tiny/qwen3vl-tiny-F16.gguf");
    let m = model.to_str().unwrap();
    let out = hrx(&["generate", "-m", m, "--prompt-ids", "1,999999999", "-n", "1"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("outside the vocabulary"), "{}", stderr(&out));
    let out = hrx(&["generate", "-m", m, "--prompt-ids", "1,x"]);
    assert_eq!(out.status.code(), Some(2));
    let out = hrx(&["generate", "-m", m, "-p", "hi", "--top-p", "0"]);
    assert_eq!(out.status.code(), Some(2));
    let out = hrx(&["generate", "-m", m, "-p", "hi", "--presence-penalty", "2.5"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--presence-penalty 2.5 must be in [-2, 2]"), "{}", stderr(&out));
    let out = hrx(&["generate", "-m", m, "-p", "hi", "--ctx", "4", "-n", "4"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("context"), "{}", stderr(&out));
}

#[test]
fn every_command_has_help() {
    for cmd in [
        "describe", "caption", "serve", "generate", "plan", "inspect", "tokenize", "synth", "bench", "models", "doctor",
    ] {
        let out = hrx(&[cmd, "--help"]);
        assert!(out.status.success());
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(text.contains("usage: hrx") && text.contains("example"), "{cmd}");
    }
}

#[test]
fn models_finds_files_in_hrx_models() {
    let dir = TempDir::new("cli-models");
    std::fs::write(dir.join("Qwen3VL-2B-Instruct-Q4_K_M.gguf"), b"x").unwrap();
    let models = |verify: bool| {
        let mut args = vec!["models", "--json"];
        args.extend(verify.then_some("--verify"));
        let out = Command::new(env!("CARGO_BIN_EXE_hrx")).args(args).env("HRX_MODELS", &dir).output().unwrap();
        let json: JsonValue = String::from_utf8(out.stdout).unwrap().parse().unwrap();
        let two_b = json["models"].get::<Vec<JsonValue>>().unwrap()[0].clone();
        (out.status.code(), two_b)
    };
    let (code, two_b) = models(false);
    assert_eq!(code, Some(0));
    assert_eq!(two_b["model_state"].get::<String>().unwrap(), "present");
    assert_eq!(two_b["mmproj_state"].get::<String>().unwrap(), "missing");
    assert!(two_b["defaults"].get::<String>().unwrap().starts_with("temperature 0.7, top_p 0.8, top_k 20"));
    // Verified, a file that is not a GGUF fails (exit 1), its line saying why.
    let (code, two_b) = models(true);
    assert_eq!(code, Some(1));
    assert!(two_b["model_state"].get::<String>().unwrap().starts_with("MISMATCH: "), "{two_b:?}");
}

#[test]
fn a_file_named_as_a_known_model_is_checked_against_models_toml_on_load_and_by_verify() {
    // The oracle's 41 k-parameter tiny model under the 2B's names: not taken for the 2B, by any
    // path (the default model, -m for describe and generate, models --verify), one line naming
    // the field.
    let Some(oracle) = common::oracle() else { return };
    let dir = TempDir::new("cli-impostor");
    let (m, mm) = (dir.join("Qwen3VL-2B-Instruct-Q4_K_M.gguf"), dir.join("mmproj-Qwen3VL-2B-Instruct-F16.gguf"));
    std::fs::copy(oracle.join("models/tiny/qwen3vl-tiny-F16.gguf"), &m).unwrap();
    std::fs::copy(oracle.join("models/tiny/mmproj-qwen3vl-tiny-F16.gguf"), &mm).unwrap();
    let image = oracle.join("images/tie-400x272.png");
    let run =
        |args: &[&str]| Command::new(env!("CARGO_BIN_EXE_hrx")).args(args).env("HRX_MODELS", &dir).output().unwrap();
    let (ms, mms, img) = (m.to_str().unwrap(), mm.to_str().unwrap(), image.to_str().unwrap());
    let want =
        format!("{ms} is not models.toml's qwen3-vl-2b-instruct: its model_block_count is 2, models.toml records 28");
    for args in [
        &["describe", img][..],
        &["describe", img, "-m", ms, "--mmproj", mms],
        &["generate", "-m", ms, "-p", "hi"],
        &["serve", "-m", ms, "--mmproj", mms, "--port", "0"],
    ] {
        let out = run(args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = stderr(&out);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(&want), "{args:?}: {err}");
    }
    let out = run(&["models", "--verify"]);
    assert_eq!(out.status.code(), Some(1));
    let listing = String::from_utf8_lossy(&out.stdout);
    assert!(listing.contains("MISMATCH: its model_block_count is 2, models.toml records 28"), "{listing}");
    assert!(listing.contains("MISMATCH: its mmproj_projection_dim is 64, models.toml records 2048"), "{listing}");
    // Under a name models.toml does not know, the same file is hrx's to run with its own defaults.
    let mine = dir.join("mine.gguf");
    std::fs::rename(&m, &mine).unwrap();
    let out = run(&["generate", "-m", mine.to_str().unwrap(), "-p", "hi", "-n", "1"]);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn help_gives_the_real_defaults_of_known_models_and_of_other_files() {
    for command in ["describe", "caption", "serve", "generate"] {
        let help = String::from_utf8(hrx(&[command, "--help"]).stdout).unwrap();
        let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
        for want in [
            "0 = greedy (default 0.7 for the models of models.toml, else 0)",
            "(default 20 for the models of models.toml, else 40)",
            "(default 0.8 for the models of models.toml, else 0.95)",
            "about N pixels (default 1048576;",
        ] {
            assert!(help.contains(want), "{command}: no {want:?} in {help}");
        }
        assert!(!help.contains("greedy (default 0)") && !help.contains("default: greedy"), "{command}");
    }
}

#[test]
fn describe_reports_each_bad_image_on_one_line_and_still_describes_the_good_one() {
    let Some(oracle) = common::oracle() else { return };
    let good = oracle.join("images/tiny-40x30.png");
    let png = std::fs::read(&good).unwrap();
    let mut corrupt = png.clone();
    corrupt[40..60].fill(0xAB);
    let jpg = std::fs::read(oracle.join("images/pattern-333x517.jpg")).unwrap();
    let dir = TempDir::new("cli-bad-images");
    let bad = [
        dir.file("corrupt.png", &corrupt),
        dir.file("truncated.jpg", &jpg[..jpg.len() / 2]),
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/image/bomb-100000x100000.png"),
        dir.file("empty.png", b""),
        dir.file("notes.jpg", b"this is a text file, not a picture\n"),
    ];
    let mut args: Vec<String> = vec!["describe".into()];
    args.extend(bad.iter().map(|p| p.display().to_string()));
    args.push(good.display().to_string());
    let m = oracle.join("models/tiny/qwen3vl-tiny-F16.gguf");
    let mm = oracle.join("models/tiny/mmproj-qwen3vl-tiny-F16.gguf");
    args.extend([
        "-m".into(),
        m.display().to_string(),
        "--mmproj".into(),
        mm.display().to_string(),
        "-n".into(),
        "4".into(),
        "--json".into(),
    ]);
    let out = Command::new(env!("CARGO_BIN_EXE_hrx")).args(&args).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "a failed image makes the exit code 1");
    let err = stderr(&out);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), bad.len() + 1, "one line per bad image and a summary: {err}");
    for (line, path) in lines.iter().zip(&bad) {
        assert!(line.starts_with("hrx: error: ") && line.contains(&path.display().to_string()), "{line}");
    }
    let stdout = String::from_utf8(out.stdout).unwrap();
    let last: JsonValue = stdout.lines().last().unwrap().parse().unwrap();
    assert_eq!(last["image"].get::<String>().unwrap(), &good.display().to_string());
    let tokens: &Vec<JsonValue> = last["tokens"].get().unwrap();
    assert_eq!(tokens.len(), 4, "the good image after the bad ones is described");
}

#[test]
fn describe_refuses_a_prompt_over_the_context_with_its_real_size() {
    // The image's tokens are counted from its header before it is decoded, and the whole
    // prompt is reported, not where a prefill chunk overflowed: a 1500 x 1000 image is about
    // 1,000 tokens at the 1 MP budget, four prefill chunks of 256.
    let Some(oracle) = common::oracle() else { return };
    let model = oracle.join("models/tiny");
    let (m, mm) = (model.join("qwen3vl-tiny-F16.gguf"), model.join("mmproj-qwen3vl-tiny-F16.gguf"));
    let dir = TempDir::new("cli-over-context");
    let image = dir.file("big-1500x1000.png", &common::black_png(1500, 1000));
    let describe = |ctx: &str| {
        hrx(&[
            "describe",
            image.to_str().unwrap(),
            "-n",
            "1",
            "--json",
            "--ctx",
            ctx,
            "-m",
            m.to_str().unwrap(),
            "--mmproj",
            mm.to_str().unwrap(),
        ])
    };
    let ok = describe("4096");
    assert!(ok.status.success(), "{}", stderr(&ok));
    let answer: JsonValue = String::from_utf8(ok.stdout).unwrap().trim().parse().unwrap();
    let prompt = answer["prompt_ids"].get::<Vec<JsonValue>>().unwrap().len();
    assert!(prompt > 900, "{prompt} prompt tokens");
    let refused = describe("300");
    assert!(!refused.status.success());
    let message = stderr(&refused);
    assert!(message.contains(&format!("the context holds 300 tokens and {prompt} are needed")), "{message}");
    // Counted before decoding: the same file cut short after its header (its pixels could not
    // be decoded) gets the same answer, not a decoding error.
    let png = std::fs::read(&image).unwrap();
    std::fs::write(&image, &png[..png.len().min(100)]).unwrap();
    let cut = stderr(&describe("300"));
    assert!(cut.contains(&format!("the context holds 300 tokens and {prompt} are needed")), "{cut}");
    assert!(!stderr(&describe("4096")).contains("are needed"), "a roomy context decodes it, and fails there");

    // generate --image has the same image budget (1 MP for a file models.toml does not list),
    // so the same prompt.
    let generated = hrx(&[
        "generate",
        "-m",
        m.to_str().unwrap(),
        "--mmproj",
        mm.to_str().unwrap(),
        "--image",
        dir.file("big-1500x1000-again.png", &common::black_png(1500, 1000)).to_str().unwrap(),
        "-p",
        "Describe this image.",
        "-n",
        "1",
        "--json",
    ]);
    assert!(generated.status.success(), "{}", stderr(&generated));
    let answer: JsonValue = String::from_utf8(generated.stdout).unwrap().trim().parse().unwrap();
    assert_eq!(answer["prompt_ids"].get::<Vec<JsonValue>>().unwrap().len(), prompt);
    let help = String::from_utf8(hrx(&["generate", "--help"]).stdout).unwrap();
    let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(help.contains("about N pixels (default 1048576"), "{help}");
}

#[test]
fn generate_with_an_image_makes_hf_prompt_ids() {
    let Some(oracle) = common::oracle() else { return };
    let case: JsonValue = std::fs::read_to_string(oracle.join("cases/tiny/I6.json")).unwrap().parse().unwrap();
    let want = common::cases::ids_of(&case["input_ids"]);
    let m = oracle.join("models/tiny/qwen3vl-tiny-F16.gguf");
    let mm = oracle.join("models/tiny/mmproj-qwen3vl-tiny-F16.gguf");
    let img = oracle.join("images/tie-400x272.png");
    let out = hrx(&[
        "generate",
        "-m",
        m.to_str().unwrap(),
        "--mmproj",
        mm.to_str().unwrap(),
        "--image",
        img.to_str().unwrap(),
        "--prompt",
        "Describe this image.",
        "-n",
        "2",
        "--json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let json: JsonValue = String::from_utf8(out.stdout).unwrap().parse().unwrap();
    assert_eq!(common::cases::ids_of(&json["prompt_ids"]), want);
}

/// `hrx plan --device`: on the CPU every compute node is a CPU node; for the Vulkan kernels
/// (where a Vulkan device exists: lavapipe in CI) both text graphs and the vision graph have
/// none. A bad device is a usage error.
#[test]
fn plan_for_the_cpu_and_for_vulkan() {
    let Some(oracle) = common::oracle() else { return };
    let m = oracle.join("models/small/qwen3vl-small-Q4_K_M.gguf");
    let mmproj = oracle.join("models/small/mmproj-qwen3vl-small-F16.gguf");
    let census = |device: &str| -> Vec<(f64, f64)> {
        let out = hrx(&[
            "plan",
            "-m",
            m.to_str().unwrap(),
            "--mmproj",
            mmproj.to_str().unwrap(),
            "--device",
            device,
            "--json",
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
        let json: JsonValue = String::from_utf8(out.stdout).unwrap().parse().unwrap();
        let graphs: &Vec<JsonValue> = json["graphs"].get().unwrap();
        assert_eq!(graphs.len(), 3);
        graphs.iter().map(|g| (*g["cpu_nodes"].get::<f64>().unwrap(), *g["gpu_nodes"].get::<f64>().unwrap())).collect()
    };
    for (cpu, gpu) in census("cpu") {
        assert!(cpu > 0.0 && gpu == 0.0, "cpu {cpu} gpu {gpu}");
    }
    let has_vulkan = hrx(&["doctor"]).status.success();
    if has_vulkan {
        for (cpu, gpu) in census("0") {
            assert!(cpu == 0.0 && gpu > 0.0, "cpu {cpu} gpu {gpu}");
        }
        // The text plan names what the recording dispatches: the fused kernels and the
        // device's variants (lavapipe has subgroup arithmetic: the subgroup mat-vec kernels;
        // 32 KiB of shared memory: query-tiled attention for prefill and vision, on the matrix
        // units where the device has cooperative matrices; the split kernel for decode).
        let out = hrx(&["plan", "-m", m.to_str().unwrap(), "--mmproj", mmproj.to_str().unwrap(), "--device", "0"]);
        let text = String::from_utf8(out.stdout).unwrap();
        for kernel in
            ["rms_norm_rope (RMS_NORM+ROPE)", "(MUL_MAT+ADD)", "(subgroup ", "flash_attn_split", "dispatches per run"]
        {
            assert!(text.contains(kernel), "{kernel} missing from:\n{text}");
        }
        assert!(text.contains("mul_mat_vec_wide4_q") || text.contains("mul_mat_vec_sg_q"), "{text}");
        assert!(text.contains("flash_attn_tiled_") || text.contains("flash_attn_cm_"), "{text}");
    } else {
        eprintln!("\n!!!!! no Vulkan device: the Vulkan plan is not checked !!!!!\n");
    }
    let out = hrx(&["plan", "-m", m.to_str().unwrap(), "--device", "banana"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

/// Whether `hrx doctor` finds a Vulkan device; without one (a failure under CI=true, which has
/// lavapipe) says loudly that `what` is not checked.
fn vulkan_present(what: &str) -> bool {
    if hrx(&["doctor"]).status.success() {
        return true;
    }
    assert!(!std::env::var("CI").is_ok_and(|v| v == "true"), "no Vulkan device under CI=true");
    eprintln!("\n!!!!! no Vulkan device: {what} is not checked !!!!!\n");
    false
}

/// Models of every weight type `hrx synth` writes (F16, BF16, Q8_0, the Q4_K_M and Q5_K_M mixes) plan
/// with no CPU node on Vulkan (lavapipe in CI) and give the CPU's prompt logits there.
#[test]
fn every_weight_type_runs_wholly_on_vulkan_with_the_cpus_logits() {
    if !vulkan_present("the weight types on Vulkan") {
        return;
    }
    let dir = TempDir::new("cli-weight-types");
    for kind in ["f16", "bf16", "q8_0", "q4_k_m", "q5_k_m"] {
        let model = dir.file(&format!("types-{kind}.gguf"), b"");
        let m = model.to_str().unwrap();
        let out = hrx(&["synth", "-o", m, "--type", kind]);
        assert!(out.status.success(), "{kind}: {}", stderr(&out));
        let out = hrx(&["plan", "-m", m, "--device", "0", "--json"]);
        assert!(out.status.success(), "{kind}: {}", stderr(&out));
        let json: JsonValue = String::from_utf8(out.stdout).unwrap().parse().unwrap();
        let graphs: &Vec<JsonValue> = json["graphs"].get().unwrap();
        for g in graphs {
            assert_eq!(*g["cpu_nodes"].get::<f64>().unwrap(), 0.0, "{kind}: a node left to the CPU");
        }
        let logits = |device: &str| -> Vec<f32> {
            let dump = dir.file(&format!("types-{kind}-{device}.f32"), b"");
            let out = hrx(&[
                "generate",
                "-m",
                m,
                "--device",
                device,
                "-n",
                "2",
                "--prompt",
                "a picture of",
                "--dump-logits",
                dump.to_str().unwrap(),
            ]);
            assert!(out.status.success(), "{kind} on {device}: {}", stderr(&out));
            std::fs::read(&dump)
                .unwrap()
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect()
        };
        let (gpu, cpu) = (logits("0"), logits("cpu"));
        assert_eq!(gpu.len(), cpu.len(), "{kind}");
        let err: f64 = gpu.iter().zip(&cpu).map(|(a, b)| f64::from(a - b).powi(2)).sum::<f64>()
            / cpu.iter().map(|b| f64::from(*b).powi(2)).sum::<f64>();
        eprintln!("{kind}: Vulkan vs CPU prompt logits nmse {err:.2e}");
        // The CPU's fast path rounds activations to 16 bits: ~1e-8 on quantized weights.
        assert!(err < 1e-6, "{kind}: nmse {err:.2e}");
    }
}

/// `HRX_VK_PROFILE=1 hrx bench` on a Vulkan device (lavapipe in CI) prints each graph's GPU
/// time by kernel, and puts it in --json, with nonzero totals.
#[test]
fn bench_with_vk_profile_prints_gpu_time_per_kernel() {
    if !vulkan_present("the GPU profile") {
        return;
    }
    let dir = TempDir::new("cli-profile");
    let model = dir.file("profile-synth.gguf", b"");
    let out = hrx(&["synth", "-o", model.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let bench = |json: bool| {
        let mut args = vec!["bench", "-m", model.to_str().unwrap(), "-p", "8", "-n", "3", "-r", "1", "--device", "0"];
        if json {
            args.push("--json");
        }
        let out = Command::new(env!("CARGO_BIN_EXE_hrx")).args(&args).env("HRX_VK_PROFILE", "1").output().unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        String::from_utf8(out.stdout).unwrap()
    };
    let text = bench(false);
    assert!(text.contains("GPU time per kernel"), "{text}");
    for graph in ["text-prefill", "text-decode"] {
        // The graph's heading, then its table: "kernel  dispatches/run  total ms  share".
        let heading = format!("graph {graph}: ");
        let table: Vec<&str> =
            text.lines().skip_while(|l| !(l.starts_with(&heading) && l.contains("ms per run"))).skip(1).collect();
        assert!(table.first().is_some_and(|h| h.contains("dispatches/run")), "{graph}: {text}");
        let rows: Vec<Vec<&str>> =
            table.iter().skip(1).take_while(|l| l.starts_with("  ")).map(|l| l.split_whitespace().collect()).collect();
        // A prefill chunk's attention runs query tiles (every tile fits lavapipe's and GPUs'
        // shared memory; on the matrix units where the device has them), a decode step's the kv
        // rows split over workgroups (lavapipe and GPUs have subgroup arithmetic).
        let attn = |name: &str| {
            if graph == "text-prefill" {
                name.starts_with("flash_attn_tiled_") || name.starts_with("flash_attn_cm_")
            } else {
                name.starts_with("flash_attn_split")
            }
        };
        assert!(rows.iter().any(|r| r[0] == "rms_norm") && rows.iter().any(|r| attn(r[0])), "{graph}: {text}");
        let total: f64 = rows.iter().map(|r| r[2].parse::<f64>().unwrap()).sum();
        assert!(total > 0.0, "{graph}: {text}");
    }
    let json: JsonValue = bench(true).parse().unwrap();
    let graphs: &Vec<JsonValue> = json["graphs"].get().unwrap();
    assert_eq!(graphs.len(), 2);
    for g in graphs {
        let profile = &g["profile"];
        assert!(*profile["total_ms"].get::<f64>().unwrap() > 0.0);
        let kernels: &Vec<JsonValue> = profile["kernels"].get().unwrap();
        let dispatches: f64 = kernels.iter().map(|k| *k["dispatches"].get::<f64>().unwrap()).sum();
        assert_eq!(dispatches, *g["dispatches"].get::<f64>().unwrap());
        let share: f64 = kernels.iter().map(|k| *k["share"].get::<f64>().unwrap()).sum();
        assert!((share - 100.0).abs() < 1e-6, "shares add up to {share}");
    }
}

/// `hrx synth --mmproj` writes a projector that loads beside a synthetic text model: planned
/// (vision graph), and a whole describe runs; `hrx bench` takes -d (a filled cache) and -n 0 or
/// -p 0 (one test only), as llama-bench does.
#[test]
fn synth_projector_describes_and_bench_takes_depth() {
    let dir = TempDir::new("cli-synth");
    let (text, mmproj) = (dir.join("text.gguf"), dir.join("mmproj.gguf"));
    let (t, m) = (text.to_str().unwrap(), mmproj.to_str().unwrap());
    for args in [vec!["synth", "-o", t], vec!["synth", "--mmproj", "-o", m]] {
        let out = hrx(&args);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    }
    let out = hrx(&["plan", "-m", t, "--mmproj", m, "--device", "cpu", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let json: JsonValue = String::from_utf8(out.stdout).unwrap().parse().unwrap();
    let graphs: &Vec<JsonValue> = json["graphs"].get().unwrap();
    assert_eq!(
        graphs.iter().filter_map(|g| g["name"].get::<String>()).cloned().collect::<Vec<_>>(),
        ["text-prefill", "text-decode", "vision"]
    );
    let img = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/image/gray8.png");
    let out = hrx(&[
        "describe",
        img.to_str().unwrap(),
        "-m",
        t,
        "--mmproj",
        m,
        "-n",
        "3",
        "--ignore-eos",
        "--device",
        "cpu",
        "--json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let json: JsonValue = String::from_utf8(out.stdout).unwrap().trim().parse().unwrap();
    assert_eq!(json["tokens"].get::<Vec<JsonValue>>().map(Vec::len), Some(3));
    // tg only, 16 tokens already in the cache.
    let out = hrx(&["bench", "-m", t, "-p", "0", "-n", "4", "-d", "16", "-r", "1", "--device", "cpu", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let json: JsonValue = String::from_utf8(out.stdout).unwrap().trim().parse().unwrap();
    assert!(json["pp"].is_null(), "{json:?}");
    assert_eq!(json["tg"]["depth"].get::<f64>(), Some(&16.0));
    assert!(json["tg"]["tokens_per_second"].get::<f64>().is_some_and(|&r| r > 0.0));
    // pp only; nothing at all is a usage error.
    let out = hrx(&["bench", "-m", t, "-p", "32", "-n", "0", "-r", "1", "--device", "cpu", "--json"]);
    let json: JsonValue = String::from_utf8(out.stdout).unwrap().trim().parse().unwrap();
    assert!(json["tg"].is_null() && json["pp"]["tokens_per_second"].get::<f64>().is_some(), "{json:?}");
    assert_eq!(hrx(&["bench", "-m", t, "-p", "0", "-n", "0"]).status.code(), Some(2));
}

/// Without -m and with the default model nowhere, describe says where it looked and how to add
/// a folder: the folders searched, $HRX_MODELS among the ways.
#[test]
fn describe_without_a_model_names_the_folders_and_hrx_models() {
    let dir = TempDir::new("cli-no-model");
    let out = Command::new(env!("CARGO_BIN_EXE_hrx"))
        .args(["describe", "photo.png"])
        .current_dir(&dir)
        .env("HOME", &dir)
        .env_remove("HRX_MODELS")
        .env_remove("XDG_DATA_HOME")
        .output()
        .unwrap();
    let err = stderr(&out);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("is not installed") && err.contains("$HRX_MODELS"), "{err}");
    assert!(err.contains(&dir.join(".local/share/hrx/models").display().to_string()), "{err}");
    // A binary built in a checkout looks in its models/ folder too, as README's set-up says.
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    if std::path::Path::new(env!("CARGO_BIN_EXE_hrx")).starts_with(repo.join("target")) {
        assert!(err.contains(&format!("{}, ", repo.join("models").display())), "{err}");
    }
    // With one of the two files there, the message names the one that is missing.
    std::fs::create_dir_all(dir.join("models")).unwrap();
    std::fs::write(dir.join("models/Qwen3VL-2B-Instruct-Q4_K_M.gguf"), b"").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_hrx"))
        .args(["describe", "photo.png"])
        .current_dir(&dir)
        .env("HOME", &dir)
        .env_remove("HRX_MODELS")
        .output()
        .unwrap();
    let err = stderr(&out);
    assert!(err.contains("half installed") && err.contains("but mmproj-Qwen3VL-2B-Instruct-F16.gguf"), "{err}");
}

/// A newcomer with no model installed: a misspelled option is named (with the nearest spelling
/// where one is near), not hidden behind the missing model; an unknown command gets the nearest
/// command, or what hrx calls the thing other tools call so.
#[test]
fn a_newcomers_typos_are_named_before_the_missing_model() {
    let dir = TempDir::new("cli-typos");
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_hrx"))
            .args(args)
            .current_dir(&dir)
            .env("HOME", &dir)
            .env_remove("HRX_MODELS")
            .output()
            .unwrap();
        (out.status.code(), stderr(&out))
    };
    for (args, said) in [
        (
            &["describe", "--tempurature", "0.5", "a.png"][..],
            "unknown option --tempurature; did you mean --temperature?",
        ),
        (&["serve", "--prot", "9000"][..], "unknown option --prot"),
        (&["describe", "--hlep"][..], "unknown option --hlep"),
        (&["caption", "photos/", "-o", "c.jsonl", "--top_k", "5"][..], "unknown option --top_k; did you mean --top-k?"),
        (&["descibe", "a.png"][..], "unknown command \"descibe\"; did you mean `hrx describe`?"),
        (&["pull", "qwen"][..], "hrx downloads nothing"),
        (&["list"][..], "`hrx models` lists"),
        (
            &["describe", "-p", "What is it?", "-p", "Who?", "a.png"][..],
            "-p given twice (\"What is it?\", then \"Who?\")",
        ),
    ] {
        let (code, err) = run(args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains(said), "{args:?}: {err}");
        assert!(!err.contains("not installed"), "{args:?}: {err}");
    }
    // llama.cpp's -ngl 0 is the CPU, over HRX_DEVICE.
    if let Some(oracle) = common::oracle() {
        let out = Command::new(env!("CARGO_BIN_EXE_hrx"))
            .args(["plan", "-m", &oracle.join("models/tiny/qwen3vl-tiny-F16.gguf").display().to_string(), "-ngl", "0"])
            .env("HRX_DEVICE", "0")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success() && text.starts_with("planned for: cpu"), "{text}{}", stderr(&out));
        let tiny = oracle.join("models/tiny/qwen3vl-tiny-F16.gguf").display().to_string();
        let out = hrx(&["plan", "-m", &tiny, "-ngl", "0", "--device", "0"]);
        assert_eq!(out.status.code(), Some(2));
        assert!(
            stderr(&out).contains("-ngl 0 (no layer on the GPU: the CPU) and --device 0 disagree"),
            "{}",
            stderr(&out)
        );
        // A context past the model's trained length is said, not taken silently.
        let out = hrx(&["generate", "-m", &tiny, "--device", "cpu", "--ctx", "300000", "-p", "hi", "-n", "1"]);
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(
            stderr(&out).contains("300000 tokens is past the 262144 the model was trained for"),
            "{}",
            stderr(&out)
        );
    }
    // A negative number is a value, not an option: the missing model is what is wrong.
    let (code, err) = run(&["describe", "--seed", "-1", "a.png"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("not installed"), "{err}");
}

/// The tiny oracle model's two files, as arguments.
fn tiny_model(oracle: &std::path::Path) -> [String; 4] {
    let dir = oracle.join("models/tiny");
    [
        "-m".into(),
        dir.join("qwen3vl-tiny-F16.gguf").display().to_string(),
        "--mmproj".into(),
        dir.join("mmproj-qwen3vl-tiny-F16.gguf").display().to_string(),
    ]
}

/// `hrx describe` with the tiny model on the CPU, standard input from `stdin`, `env` set.
fn describe_tiny(oracle: &std::path::Path, args: &[&str], stdin: &[u8], env: &[(&str, &str)]) -> Output {
    use std::io::Write;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_hrx"));
    cmd.arg("describe").args(args).args(tiny_model(oracle)).args(["--device", "cpu"]).env_remove("RUST_LOG");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run hrx");
    // hrx may stop before it reads (a usage error): a closed pipe is its answer, not a failure.
    let _ = child.stdin.take().expect("stdin").write_all(stdin);
    child.wait_with_output().expect("hrx's output")
}

/// The token ids of a `--json` answer line.
fn answer_tokens(line: &str) -> Vec<u32> {
    let json: JsonValue = line.parse().unwrap_or_else(|e| panic!("{e:?}: {line}"));
    common::cases::ids_of(&json["tokens"])
}

/// `hrx describe -` reads the image from standard input (within the file size limit:
/// tests/image.rs); empty input is a clear error, and `-` can be given once.
#[test]
fn describe_reads_the_image_from_standard_input() {
    let Some(oracle) = common::oracle() else { return };
    let image = oracle.join("images/tiny-40x30.png");
    let png = std::fs::read(&image).unwrap();
    let from_file = describe_tiny(&oracle, &[image.to_str().unwrap(), "-n", "3", "--json"], b"", &[]);
    assert!(from_file.status.success(), "{}", stderr(&from_file));
    let piped = describe_tiny(&oracle, &["-", "-n", "3", "--json"], &png, &[]);
    assert!(piped.status.success(), "{}", stderr(&piped));
    let (file_out, piped_out) =
        (String::from_utf8(from_file.stdout).unwrap(), String::from_utf8(piped.stdout).unwrap());
    assert_eq!(answer_tokens(piped_out.trim()), answer_tokens(file_out.trim()), "the same image, the same answer");
    assert!(piped_out.contains(r#""image":"-""#), "{piped_out}");
    let text = describe_tiny(&oracle, &["-", "-n", "1"], &png, &[]);
    assert!(String::from_utf8_lossy(&text.stdout).starts_with("standard input:\n"), "{text:?}");

    let empty = describe_tiny(&oracle, &["-", "-n", "1"], b"", &[]);
    assert_eq!(empty.status.code(), Some(1));
    assert!(stderr(&empty).contains("standard input: empty (0 bytes)"), "{}", stderr(&empty));
    let twice = describe_tiny(&oracle, &["-", "-"], &png, &[]);
    assert_eq!(twice.status.code(), Some(2), "{}", stderr(&twice));
}

/// A failed image gets no `path:` header on standard output (only its error on stderr); a
/// truncated JPEG says it is truncated; `RUST_LOG=info` shows describe's timings.
#[test]
fn describe_heads_only_the_answers_it_gives_and_logs_timings() {
    let Some(oracle) = common::oracle() else { return };
    let good = oracle.join("images/tiny-40x30.png");
    let jpg = std::fs::read(oracle.join("images/pattern-333x517.jpg")).unwrap();
    let dir = TempDir::new("cli-cut-short");
    let cut = dir.file("cut-short.jpg", &jpg[..jpg.len() / 2]);
    let (cut, good) = (cut.to_str().unwrap(), good.to_str().unwrap());
    let out = describe_tiny(&oracle, &[cut, good, "-n", "2"], b"", &[("RUST_LOG", "info")]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let stdout = String::from_utf8(out.stdout.clone()).unwrap();
    assert!(!stdout.contains(cut) && stdout.starts_with(&format!("{good}:\n")), "{stdout}");
    let err = stderr(&out);
    assert!(err.contains(&format!("hrx: error: {cut}: truncated JPEG")), "{err}");
    assert!(!err.contains("fill whole buffer"), "{err}");
    assert!(err.contains("read and encoded in") && err.contains("generated 2 tokens in"), "{err}");
}

/// llama.cpp's spellings work where they mean the same: -c/--ctx-size, -t, -s, -n/--n-predict,
/// --image; -ngl is answered with one line on stderr and its value checked.
#[test]
fn llama_cpp_spellings_are_aliases() {
    let Some(oracle) = common::oracle() else { return };
    let image = oracle.join("images/tiny-40x30.png");
    let image = image.to_str().unwrap();
    let sampled = |args: &[&str]| {
        let mut all = vec!["--json", "--temp", "1", "--ignore-eos"];
        all.extend(args);
        let out = describe_tiny(&oracle, &all, b"", &[]);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        (answer_tokens(String::from_utf8_lossy(&out.stdout).trim()), stderr(&out))
    };
    let (ours, _) = sampled(&[image, "--ctx", "2048", "--threads", "1", "--seed", "5", "--max-tokens", "4"]);
    let (llama, err) =
        sampled(&["--image", image, "-c", "2048", "-t", "1", "-s", "5", "--n-predict", "4", "-ngl", "99"]);
    assert_eq!(llama, ours);
    assert_eq!(ours.len(), 4);
    assert_eq!(err.lines().filter(|l| l.contains("-ngl 99") && l.contains("places every layer")).count(), 1, "{err}");
    let (sized, _) = sampled(&[image, "--ctx-size", "2048", "--seed=5", "-n", "4"]);
    assert_eq!(sized, ours);
    let small = describe_tiny(&oracle, &[image, "-c", "8"], b"", &[]);
    assert!(stderr(&small).contains("the context holds 8 tokens"), "{}", stderr(&small));
    let bad = describe_tiny(&oracle, &[image, "-ngl", "all"], b"", &[]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(stderr(&bad).contains(r#"-ngl: cannot read "all""#), "{}", stderr(&bad));
    let help = String::from_utf8(hrx(&["describe", "--help"]).stdout).unwrap();
    for spelled in
        ["-c, --ctx, --ctx-size N", "-t, --threads N", "-s, --seed S", "--n-predict N", "--image FILE", "-ngl"]
    {
        assert!(help.contains(spelled), "{spelled}: {help}");
    }
}

/// An unknown option is refused by name with the nearest known spelling, before any model
/// is loaded (the model paths here do not exist).
#[test]
fn an_unknown_option_suggests_the_nearest_known_one() {
    let out = hrx(&["describe", "a.png", "-m", "/nonexistent.gguf", "--mmproj", "/x.gguf", "--tempurature", "0.5"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("unknown option --tempurature; did you mean --temperature?"), "{}", stderr(&out));
    let out = hrx(&["generate", "-m", "/nonexistent.gguf", "-p", "hi", "--ctx-sise", "9"]);
    assert!(stderr(&out).contains("unknown option --ctx-sise; did you mean --ctx-size?"), "{}", stderr(&out));
    let out = hrx(&["doctor", "--frobnicate"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("unknown option --frobnicate\n"), "{}", stderr(&out));
}

/// An image budget below the minimum is a usage error (exit 2) before any model is loaded
/// (the model paths here do not exist), for describe and for generate --image.
#[test]
fn an_image_budget_below_the_minimum_is_a_usage_error() {
    let model = ["-m", "/nonexistent.gguf", "--mmproj", "/nonexistent-mmproj.gguf"];
    for command in [&["describe", "a.png"][..], &["generate", "--image", "a.png", "-p", "hi"]] {
        let out = hrx(&[command, &model, &["--image-max-pixels", "100"]].concat());
        assert_eq!(out.status.code(), Some(2), "{command:?}: {}", stderr(&out));
        assert!(stderr(&out).contains("--image-max-pixels 100 is below --image-min-pixels 65536"), "{}", stderr(&out));
    }
}

/// A device named by --device that does not exist is blamed on --device (even with
/// HRX_DEVICE set), and the run goes on on the CPU.
#[test]
fn a_missing_device_is_blamed_on_the_flag_that_named_it() {
    let Some(oracle) = common::oracle() else { return };
    let m = oracle.join("models/tiny/qwen3vl-tiny-F16.gguf");
    let out = Command::new(env!("CARGO_BIN_EXE_hrx"))
        .args(["plan", "-m", m.to_str().unwrap(), "--device", "97", "--json"])
        .env("HRX_DEVICE", "cpu")
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("--device 97: ") && err.contains("running on the CPU"), "{err}");
    assert!(!err.contains("HRX_DEVICE"), "{err}");
}

/// With no Vulkan device, a run under `auto` says nothing about it (hrx doctor does), unless
/// RUST_LOG=info asks.
#[test]
fn a_machine_without_a_gpu_is_no_warning() {
    let Some(oracle) = common::oracle() else { return };
    let m = oracle.join("models/tiny/qwen3vl-tiny-F16.gguf");
    let plan = |log: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_hrx"))
            .args(["plan", "-m", m.to_str().unwrap(), "--json"])
            .env("VK_DRIVER_FILES", "/nonexistent/icd.json")
            .env("VK_ICD_FILENAMES", "/nonexistent/icd.json")
            .env("RUST_LOG", log)
            .env_remove("HRX_DEVICE")
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        stderr(&out)
    };
    assert_eq!(plan("warn"), "");
    let info = plan("info");
    assert!(info.contains("no device") || info.contains("no Vulkan loader"), "{info}");
    assert!(!info.contains("WARN"), "{info}");
}

/// Writes `text` to a schema file of its own under the target folder.
fn schema_file(name: &str, text: &str) -> std::path::PathBuf {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("schemas");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{name}.json"));
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn each_unsupported_schema_keyword_is_a_wrong_command_line_naming_it() {
    let Some(oracle) = common::oracle() else { return };
    let model = oracle.join("models/tiny");
    let (m, mm) = (model.join("qwen3vl-tiny-F16.gguf"), model.join("mmproj-qwen3vl-tiny-F16.gguf"));
    let image = oracle.join("images/tie-400x272.png");
    for (i, (keyword, schema)) in common::schemas::UNSUPPORTED.iter().enumerate() {
        let file = schema_file(&format!("unsupported-{i}"), schema);
        let out = hrx(&[
            "describe",
            image.to_str().unwrap(),
            "-m",
            m.to_str().unwrap(),
            "--mmproj",
            mm.to_str().unwrap(),
            "--json-schema",
            file.to_str().unwrap(),
        ]);
        assert_eq!(out.status.code(), Some(2), "{keyword}: {}", stderr(&out));
        let e = stderr(&out);
        assert!(e.contains("--json-schema") && e.contains(keyword), "{keyword}: {e}");
    }
    let bad = schema_file("not-json", "{\"type\":");
    let out = hrx(&["describe", "x.png", "-m", m.to_str().unwrap(), "--mmproj", mm.to_str().unwrap(), "--json-schema"]
        .iter()
        .copied()
        .chain([bad.to_str().unwrap()])
        .collect::<Vec<_>>());
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("is not JSON"), "{}", stderr(&out));
}

#[test]
fn describe_and_caption_with_a_schema_give_the_answer_as_a_json_value() {
    let Some(oracle) = common::oracle() else { return };
    let model = oracle.join("models/tiny");
    let (m, mm) = (model.join("qwen3vl-tiny-F16.gguf"), model.join("mmproj-qwen3vl-tiny-F16.gguf"));
    let image = oracle.join("images/tie-400x272.png");
    let schema = schema_file(
        "door",
        r#"{"type":"object","properties":{"person":{"type":"boolean"},"count":{"type":"integer","minimum":0,"maximum":9}},"required":["person","count"],"additionalProperties":false}"#,
    );
    let common_args = [
        "-m",
        m.to_str().unwrap(),
        "--mmproj",
        mm.to_str().unwrap(),
        "--json-schema",
        schema.to_str().unwrap(),
        "--temp",
        "1",
        "--top-k",
        "0",
        "-n",
        "24",
    ];
    let out = hrx(&[&["describe", image.to_str().unwrap(), "--json"][..], &common_args].concat());
    assert!(out.status.success(), "{}", stderr(&out));
    let record: JsonValue = String::from_utf8(out.stdout).unwrap().trim().parse().unwrap();
    let answer: &std::collections::HashMap<String, JsonValue> = record["json"].get().expect("json is an object");
    assert!(matches!(answer["person"], JsonValue::Boolean(_)), "{answer:?}");
    let count = *answer["count"].get::<f64>().unwrap();
    assert!((0.0..=9.0).contains(&count) && count.fract() == 0.0, "{answer:?}");
    let text: &String = record["text"].get().unwrap();
    assert_eq!(text.parse::<JsonValue>().unwrap(), record["json"]);

    let output = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("schema-captions.jsonl");
    let args = ["caption", image.to_str().unwrap(), "-o", output.to_str().unwrap(), "--overwrite"];
    let out = hrx(&[&args[..], &common_args].concat());
    assert!(out.status.success(), "{}", stderr(&out));
    let line: JsonValue = std::fs::read_to_string(&output).unwrap().trim().parse().unwrap();
    assert!(matches!(line["json"]["person"], JsonValue::Boolean(_)), "{line:?}");

    // A stop string could cut the document: refused.
    let out = hrx(&[&["describe", image.to_str().unwrap(), "--stop", "}"][..], &common_args].concat());
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--stop cannot go with --json-schema"), "{}", stderr(&out));
}

/// `hrx bench --batch 1,3`: a row per batch size, as llama-batched-bench's: B prompts of PP
/// tokens and TG tokens of each, N_KV = B x (PP + TG), positive times and rates.
#[test]
fn bench_batch_prints_a_row_per_batch_size() {
    let Some(oracle) = common::oracle() else { return };
    let model = oracle.join("models/tiny/qwen3vl-tiny-F16.gguf");
    let args =
        ["bench", "-m", model.to_str().unwrap(), "--batch", "1,3", "-p", "8", "-n", "3", "--device", "cpu", "--json"];
    // The JSON rows of a run, one per batch size.
    let batch_rows = |args: &[&str]| -> Vec<JsonValue> {
        let run = Command::new(env!("CARGO_BIN_EXE_hrx")).args(args).output().unwrap();
        assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
        let v: JsonValue = String::from_utf8_lossy(&run.stdout).trim().parse().unwrap();
        let rows: &Vec<JsonValue> = v["batches"].get().unwrap();
        assert_eq!(rows.len(), 2);
        rows.clone()
    };
    for (row, b) in batch_rows(&args).iter().zip([1.0, 3.0]) {
        let num = |k: &str| *row[k].get::<f64>().unwrap();
        assert_eq!((num("b"), num("pp"), num("tg"), num("n_kv")), (b, 8.0, 3.0, b * 11.0));
        for k in ["t_pp", "s_pp", "t_tg", "s_tg", "t", "s"] {
            assert!(num(k) > 0.0, "{k}: {row:?}");
        }
    }
    // With a projector: each prompt starts with the test image's tokens (a 448x448 image at
    // patch 16 and a 2x2 merge: 196), timed encodes, images a second and captions a minute.
    let mmproj = oracle.join("models/tiny/mmproj-qwen3vl-tiny-F16.gguf");
    let with_image = [&args[..], &["--mmproj", mmproj.to_str().unwrap(), "--image-size", "448"]].concat();
    for (row, b) in batch_rows(&with_image).iter().zip([1.0, 3.0]) {
        let num = |k: &str| *row[k].get::<f64>().unwrap();
        assert_eq!((num("b"), num("pp"), num("n_kv")), (b, 196.0 + 8.0, b * (204.0 + 3.0)));
        for k in ["t_enc", "images_per_second", "captions_per_minute"] {
            assert!(num(k) > 0.0, "{k}: {row:?}");
        }
        let per_minute = 60.0 * b / (num("t_enc") + num("t_pp") + num("t_tg"));
        assert!((num("captions_per_minute") - per_minute).abs() < 1e-6 * per_minute, "{row:?}");
    }
    // A test image's size without a projector to encode it is refused, not ignored.
    let sized = Command::new(env!("CARGO_BIN_EXE_hrx"))
        .args(["bench", "-m", model.to_str().unwrap(), "--batch", "1", "--image-size", "448"])
        .output()
        .unwrap();
    assert_eq!(sized.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&sized.stderr).contains("--image-size"));
    let bad = Command::new(env!("CARGO_BIN_EXE_hrx"))
        .args(["bench", "-m", model.to_str().unwrap(), "--batch", "2,0"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--batch"));
}
