//! The scripts of README.md's set-up, run for real where that is cheap: scripts/describe with
//! the built binary (HRX_BIN: no build inside a test), scripts/lib/deps.sh with a stand-in
//! apt-get; and of scripts/release what needs no cross toolchain: the systemd units it
//! packages, where the package puts things, the stripped release profile.

mod common;

use common::TempDir;
use std::path::Path;
use std::process::{Command, Output};

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Run from another directory, scripts/describe takes the image and model paths relative to
/// that directory, and looks for the default model in the repository's models/ too.
#[test]
fn scripts_describe_takes_paths_relative_to_the_callers_directory() {
    let Some(oracle) = common::oracle() else { return };
    let describe = |dir: &Path, args: &[&str]| {
        Command::new(repo().join("scripts/describe"))
            .args(args)
            .current_dir(dir)
            .env("HRX_BIN", env!("CARGO_BIN_EXE_hrx"))
            .env("HOME", dir)
            .env_remove("HRX_MODELS")
            .env_remove("XDG_DATA_HOME")
            .output()
            .expect("run scripts/describe")
    };
    let (image, m, mm) =
        ("images/tiny-40x30.png", "models/tiny/qwen3vl-tiny-F16.gguf", "models/tiny/mmproj-qwen3vl-tiny-F16.gguf");
    let out = describe(&oracle, &[image, "-m", m, "--mmproj", mm, "-n", "2", "--device", "cpu", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains(&format!(r#""image":"{image}""#)), "{out:?}");
    // No model given or installed: the repository's models/ is among the folders searched.
    let empty = TempDir::new("scripts-describe");
    let out = describe(empty.path(), &["photo.png"]);
    assert!(!out.status.success());
    let searched = repo().join("models").display().to_string();
    assert!(stderr(&out).contains(&searched), "{searched}: {}", stderr(&out));
}

/// ensure_apt_packages installs only what is missing, never upgrading what is there
/// (--no-upgrade), keeps apt's output off stdout (a log), and says on stderr what it does.
#[test]
fn deps_install_only_missing_packages_and_keep_apt_off_stdout() {
    let dir = TempDir::new("scripts-apt");
    let calls = dir.join("calls");
    // Stand-ins: apt-get records its arguments and chatters on stdout; sudo just runs.
    let apt = format!("#!/bin/sh\necho \"$*\" >>'{}'\necho 'Reading package lists... Done'\n", calls.display());
    for (name, body) in [("apt-get", apt.as_str()), ("sudo", "#!/bin/sh\nexec \"$@\"\n")] {
        let path = dir.join(name);
        std::fs::write(&path, body).unwrap();
        Command::new("chmod").arg("+x").arg(&path).status().unwrap();
    }
    let path = format!("{}:{}", dir.path().display(), std::env::var("PATH").unwrap_or_default());
    let installed = "bash"; // whatever this machine is, bash is installed (dpkg knows it on Debian)
    let out = Command::new("bash")
        .args(["-c", &format!(". scripts/lib/deps.sh && ensure_apt_packages {installed} hrx-test-no-such-package")])
        .current_dir(repo())
        .env("PATH", path)
        .env("TMPDIR", &dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "", "apt's output is not the command's");
    let err = stderr(&out);
    assert!(err.contains("installing Debian packages hrx-test-no-such-package"), "{err}");
    assert!(err.contains("installed hrx-test-no-such-package"), "{err}");
    let calls = std::fs::read_to_string(&calls).unwrap();
    let install: Vec<&str> = calls.lines().filter(|l| l.contains(" install ") && !l.contains(" -s ")).collect();
    assert_eq!(install.len(), 1, "{calls}");
    assert!(install[0].contains("--no-upgrade") && install[0].ends_with(" hrx-test-no-such-package"), "{calls}");
    if Path::new("/usr/bin/dpkg-query").exists() {
        assert!(!install[0].contains(installed), "{calls}");
    }
}

// scripts/release and the files it packages (scripts/dist): what CI can check without the
// cross toolchains, which only scripts/release installs.

/// A systemd unit file read as systemd reads it: `[Section]` headers, `Key=Value` lines, `#`
/// and `;` comments, blank lines; any other line is a parse error naming the line.
fn unit(name: &str) -> Vec<(String, String, String)> {
    let path = repo().join("scripts/dist").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut section = String::new();
    let mut entries = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(s) = line.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
            section = s.to_owned();
            continue;
        }
        let (k, v) = line.split_once('=').unwrap_or_else(|| panic!("{name}:{}: not Key=Value: {line:?}", n + 1));
        assert!(!section.is_empty(), "{name}:{}: {k} outside a section", n + 1);
        assert!(k.chars().all(|c| c.is_ascii_alphanumeric()), "{name}:{}: bad key {k:?}", n + 1);
        entries.push((section.clone(), k.to_owned(), v.to_owned()));
    }
    entries
}

/// The values of `key` in `section` of a parsed unit, in order.
fn values<'a>(entries: &'a [(String, String, String)], section: &str, key: &str) -> Vec<&'a str> {
    entries.iter().filter(|(s, k, _)| s == section && k == key).map(|(_, _, v)| v.as_str()).collect()
}

/// The hardening both services share: a dynamic user with a read-only system, no new
/// privileges or capabilities, and no device but the DRM render nodes (the group that opens
/// them).
fn assert_hardened(name: &str, u: &[(String, String, String)]) {
    for (key, want) in [
        ("DynamicUser", "yes"),
        ("User", "hrx"),
        ("StateDirectory", "hrx"),
        ("ProtectSystem", "strict"),
        ("ProtectHome", "yes"),
        ("NoNewPrivileges", "yes"),
        ("CapabilityBoundingSet", ""),
        ("PrivateTmp", "yes"),
        ("DevicePolicy", "closed"),
        ("DeviceAllow", "char-drm rw"),
        ("SupplementaryGroups", "render"),
        ("IPAddressDeny", "any"),
    ] {
        assert_eq!(values(u, "Service", key), [want], "{name}: {key}");
    }
    assert_eq!(values(u, "Service", "SystemCallFilter"), ["@system-service", "~@privileged @resources"], "{name}");
}

#[test]
fn the_serve_unit_is_a_hardened_kiosk_on_the_loopback() {
    let u = unit("hrx-serve.service");
    assert_hardened("hrx-serve.service", &u);
    assert_eq!(values(&u, "Service", "Restart"), ["on-failure"]);
    assert_eq!(values(&u, "Service", "IPAddressAllow"), ["localhost"]);
    assert_eq!(values(&u, "Service", "RestrictAddressFamilies"), ["AF_INET AF_INET6"]);
    assert_eq!(values(&u, "Install", "WantedBy"), ["multi-user.target"]);
    let exec = values(&u, "Service", "ExecStart");
    assert!(
        exec == ["/usr/bin/hrx serve --host ${HRX_SERVE_HOST} --port ${HRX_SERVE_PORT} $HRX_SERVE_ARGS"],
        "{exec:?}"
    );
    // Its default address is the loopback whether or not /etc/default/hrx exists.
    assert!(values(&u, "Service", "Environment")[0].contains("HRX_SERVE_HOST=127.0.0.1"), "{u:?}");
}

#[test]
fn the_caption_unit_and_timer_caption_nightly_with_resume_into_var_lib_hrx() {
    let u = unit("hrx-caption.service");
    assert_hardened("hrx-caption.service", &u);
    assert_eq!(values(&u, "Service", "Type"), ["oneshot"]);
    assert_eq!(values(&u, "Service", "PrivateNetwork"), ["yes"]);
    let exec = values(&u, "Service", "ExecStart");
    assert_eq!(exec, ["/usr/bin/hrx caption ${HRX_CAPTION_DIR} -o ${HRX_CAPTION_OUTPUT} --resume $HRX_CAPTION_ARGS"]);
    assert!(values(&u, "Service", "Environment")[0].contains("HRX_CAPTION_OUTPUT=/var/lib/hrx/"), "{u:?}");
    assert!(values(&u, "Install", "WantedBy").is_empty(), "the timer starts it, not a target");
    let t = unit("hrx-caption.timer");
    assert_eq!(values(&t, "Timer", "OnCalendar"), ["*-*-* 02:00:00"]);
    assert_eq!(values(&t, "Timer", "Persistent"), ["true"]);
    assert_eq!(values(&t, "Install", "WantedBy"), ["timers.target"]);
}

/// hrx-caption@N.service, one per GPU: shard N of the folder on device N into its own output,
/// with hrx-caption.service's hardening word for word, and its own nightly timer.
#[test]
fn the_caption_template_runs_shard_n_on_gpu_n_as_hardened_as_the_single_job() {
    let u = unit("hrx-caption@.service");
    assert_hardened("hrx-caption@.service", &u);
    let exec = values(&u, "Service", "ExecStart");
    assert_eq!(
        exec,
        ["/usr/bin/hrx caption ${HRX_CAPTION_DIR} -o ${HRX_CAPTION_SHARD_OUTPUT} --resume --device %i --shard %i/${HRX_CAPTION_SHARDS} $HRX_CAPTION_ARGS"]
    );
    assert!(values(&u, "Service", "Environment")[0]
        .contains("HRX_CAPTION_SHARD_OUTPUT=/var/lib/hrx/captions-{shard}.jsonl"));
    let text = |name: &str| std::fs::read_to_string(repo().join("scripts/dist").join(name)).unwrap();
    let from = "# A night's batch yields";
    let tail = |t: String| t[t.find(from).expect("the hardening's first line")..].to_owned();
    assert_eq!(tail(text("hrx-caption@.service")), tail(text("hrx-caption.service")));
    let t = unit("hrx-caption@.timer");
    assert_eq!(values(&t, "Timer", "OnCalendar"), values(&unit("hrx-caption.timer"), "Timer", "OnCalendar"));
    assert_eq!(values(&t, "Install", "WantedBy"), ["timers.target"]);
}

/// Every variable a unit's ExecStart= uses has a default in the unit and a line in the
/// settings file the package installs as /etc/default/hrx, and the flags it passes are hrx's.
#[test]
fn the_units_use_only_settings_and_flags_that_exist() {
    let default = std::fs::read_to_string(repo().join("scripts/dist/hrx.default")).unwrap();
    for (name, command, flags) in [
        ("hrx-serve.service", "serve", &["--host", "--port"][..]),
        ("hrx-caption.service", "caption", &["-o", "--resume"]),
        ("hrx-caption@.service", "caption", &["-o", "--resume", "--device", "--shard"]),
    ] {
        let u = unit(name);
        assert_eq!(values(&u, "Service", "EnvironmentFile"), ["-/etc/default/hrx"], "{name}");
        let exec = values(&u, "Service", "ExecStart")[0];
        let defaults = values(&u, "Service", "Environment")[0];
        // $NAME and ${NAME}, wherever they are in a word.
        let vars: Vec<&str> = exec
            .split('$')
            .skip(1)
            .map(|w| w.trim_start_matches('{'))
            .map(|w| &w[..w.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(w.len())])
            .collect();
        assert!(vars.len() >= 2, "{name}: {exec}");
        for var in vars {
            assert!(
                defaults.split_whitespace().any(|d| d.starts_with(&format!("{var}="))),
                "{name}: no default for {var}"
            );
            assert!(default.lines().any(|l| l.starts_with(&format!("{var}="))), "hrx.default sets no {var}");
        }
        let help = Command::new(env!("CARGO_BIN_EXE_hrx")).args([command, "--help"]).output().unwrap();
        let help = String::from_utf8_lossy(&help.stdout);
        for flag in flags {
            assert!(exec.contains(&format!(" {flag} ")) && help.contains(flag), "{name}: {flag}");
        }
    }
}

/// The units verify under systemd-analyze and their exposure stays within 2.0, as
/// scripts/release checks. ExecStart= points at the built hrx, man pages are not looked up (the
/// package's is made by scripts/release).
#[test]
fn the_units_verify_and_score_under_systemd_analyze() {
    let analyze = Command::new("systemd-analyze").arg("--version").output();
    assert!(analyze.is_ok_and(|o| o.status.success()), "systemd-analyze (Debian's systemd; scripts/test installs it)");
    let dir = TempDir::new("scripts-units");
    let files =
        ["hrx-serve.service", "hrx-caption.service", "hrx-caption.timer", "hrx-caption@.service", "hrx-caption@.timer"];
    for u in files {
        let text = std::fs::read_to_string(repo().join("scripts/dist").join(u)).unwrap();
        std::fs::write(dir.join(u), text.replace("/usr/bin/hrx", env!("CARGO_BIN_EXE_hrx"))).unwrap();
    }
    // The templates as an instance of each.
    let units = [
        "hrx-serve.service",
        "hrx-caption.service",
        "hrx-caption@1.service",
        "hrx-caption.timer",
        "hrx-caption@1.timer",
    ];
    let out =
        Command::new("systemd-analyze").args(["verify", "--man=no"]).args(units.map(|u| dir.join(u))).output().unwrap();
    assert!(out.status.success() && out.stderr.is_empty(), "{}", stderr(&out));
    for u in &units[..3] {
        let out = Command::new("systemd-analyze")
            .args(["security", "--offline=yes", "--threshold=20"])
            .arg(dir.join(u))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success() && text.contains("Overall exposure level"), "{u}: {text}{}", stderr(&out));
    }
}

/// The package puts models.toml where hrx reads its system copy, and hrx searches the
/// services' model folder, last.
#[test]
fn the_package_layout_is_where_hrx_looks() {
    let release = std::fs::read_to_string(repo().join("scripts/release")).unwrap();
    assert_eq!(hrx::catalog::SYSTEM_CATALOG, "/etc/hrx/models.toml");
    assert!(release.contains("models.toml \"$root/etc/hrx/models.toml\""), "scripts/release installs no system copy");
    assert!(release.contains("/etc/hrx/models.toml >\"$root/DEBIAN/conffiles\""), "nor marks it a conffile");
    let out = Command::new(env!("CARGO_BIN_EXE_hrx")).args(["models", "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let json = String::from_utf8_lossy(&out.stdout);
    assert!(json.contains(r#""/var/lib/hrx/models"]"#), "the services' folder is not searched last: {json}");
    for unit in ["hrx-serve.service", "hrx-caption.service"] {
        let text = std::fs::read_to_string(repo().join("scripts/dist").join(unit)).unwrap();
        assert!(text.contains(hrx::catalog::SYSTEM_MODELS), "{unit} does not say where the models go");
    }
}

/// The shipped binary is stripped: the release profile says so, and (in a release build, as
/// scripts/test runs the tests) the binary has no symbol table.
#[test]
fn the_release_profile_strips_the_binary() {
    let toml = std::fs::read_to_string(repo().join("Cargo.toml")).unwrap();
    let profile = toml.split("[profile.release]").nth(1).expect("Cargo.toml has a [profile.release]");
    let profile = profile.split("\n[").next().unwrap_or_default();
    assert!(profile.lines().any(|l| l.trim() == "strip = \"symbols\""), "{profile}");
    if cfg!(debug_assertions) {
        return; // a debug build keeps its symbols
    }
    let elf = std::fs::read(env!("CARGO_BIN_EXE_hrx")).unwrap();
    assert_eq!(&elf[..4], b"\x7fELF");
    let names = elf_section_names(&elf);
    assert!(names.iter().any(|n| n == ".text"), "{names:?}");
    assert!(!names.iter().any(|n| n == ".symtab" || n.starts_with(".debug_")), "not stripped: {names:?}");
}

/// The section names of a 64-bit little-endian ELF file (every target hrx's CI runs on).
fn elf_section_names(elf: &[u8]) -> Vec<String> {
    assert_eq!((elf[4], elf[5]), (2, 1), "64-bit little-endian ELF");
    let u16_at = |o: usize| u16::from_le_bytes([elf[o], elf[o + 1]]) as usize;
    let u64_at = |o: usize| u64::from_le_bytes(elf[o..o + 8].try_into().unwrap()) as usize;
    let (shoff, shentsize, shnum, shstrndx) = (u64_at(0x28), u16_at(0x3a), u16_at(0x3c), u16_at(0x3e));
    let header = |i: usize| shoff + i * shentsize;
    let strtab = u64_at(header(shstrndx) + 0x18);
    (0..shnum)
        .map(|i| {
            let start = strtab + u32::from_le_bytes(elf[header(i)..header(i) + 4].try_into().unwrap()) as usize;
            let end = start + elf[start..].iter().position(|&b| b == 0).unwrap();
            String::from_utf8_lossy(&elf[start..end]).into_owned()
        })
        .collect()
}

/// scripts/release reads its arguments before installing or building anything: --help prints
/// its header, an unknown argument is a usage error (2).
#[test]
fn scripts_release_help_and_bad_arguments_cost_nothing() {
    let run = |arg: &str| Command::new(repo().join("scripts/release")).arg(arg).output().unwrap();
    let help = run("--help");
    assert!(help.status.success(), "{}", stderr(&help));
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(text.starts_with("The release of hrx") && text.contains("usage: scripts/release"), "{text}");
    assert!(!text.contains("set -euo"), "{text}");
    let bad = run("--frobnicate");
    assert_eq!(bad.status.code(), Some(2), "{}", stderr(&bad));
    assert!(stderr(&bad).contains("unknown argument --frobnicate"), "{}", stderr(&bad));
}

/// The images under `dir` each shard's output names, gathered.
fn captioned(outputs: &[std::path::PathBuf]) -> Vec<String> {
    let mut images = Vec::new();
    for path in outputs {
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for line in text.lines() {
            let v: tinyjson::JsonValue = line.parse().unwrap();
            let fields = v.get::<std::collections::HashMap<String, tinyjson::JsonValue>>().unwrap();
            assert!(fields.contains_key("caption"), "{line}");
            images.push(fields["image"].get::<String>().unwrap().clone());
        }
    }
    images.sort();
    images
}

/// A folder of `n` copies of an oracle image, and their canonical paths (as records name them).
fn image_folder(oracle: &Path, dir: &Path, n: usize) -> Vec<String> {
    std::fs::create_dir_all(dir).unwrap();
    let mut all: Vec<String> = (0..n)
        .map(|i| {
            let p = dir.join(format!("{i:02}.png"));
            std::fs::copy(oracle.join("images/tiny-40x30.png"), &p).unwrap();
            std::fs::canonicalize(&p).unwrap().display().to_string()
        })
        .collect();
    all.sort();
    all
}

/// scripts/dist/slurm/hrx-caption.sbatch, run as Slurm runs each task of its array (the
/// SLURM_ARRAY_* variables set, ids from 1): between them the tasks caption every image once,
/// each into its own output.
#[test]
fn the_slurm_script_captions_one_shard_per_array_task() {
    let Some(oracle) = common::oracle() else { return };
    let dir = TempDir::new("scripts-slurm");
    let all = image_folder(&oracle, &dir.join("images"), 9);
    let script = repo().join("scripts/dist/slurm/hrx-caption.sbatch");
    let tiny = oracle.join("models/tiny");
    for id in 1..=3 {
        let out = Command::new("bash")
            .arg(&script)
            .args(["-m", tiny.join("qwen3vl-tiny-F16.gguf").to_str().unwrap()])
            .args(["--mmproj", tiny.join("mmproj-qwen3vl-tiny-F16.gguf").to_str().unwrap()])
            .args(["-n", "2", "--device", "cpu"])
            .current_dir(dir.path())
            .env("HRX", env!("CARGO_BIN_EXE_hrx"))
            .env("IMAGES", dir.join("images"))
            .env("SLURM_ARRAY_TASK_ID", id.to_string())
            .env("SLURM_ARRAY_TASK_MIN", "1")
            .env("SLURM_ARRAY_TASK_STEP", "1")
            .env("SLURM_ARRAY_TASK_COUNT", "3")
            .env_remove("JOB_COMPLETION_INDEX")
            .output()
            .unwrap();
        assert!(out.status.success(), "task {id}: {}", stderr(&out));
        assert!(stderr(&out).contains(&format!("shard {} of 3", id - 1)), "{}", stderr(&out));
    }
    let outputs: Vec<_> = (0..3).map(|k| dir.join(format!("captions/captions-{k}.jsonl"))).collect();
    assert_eq!(captioned(&outputs), all);
}

/// scripts/dist/k8s/hrx-caption-job.yaml parses as YAML (python3's yaml) into an Indexed Job
/// whose pods run hrx caption as shard JOB_COMPLETION_INDEX of its completions, resumable, and
/// its command, run as each pod would (paths moved into a folder here), captions every image
/// once between the indexes.
#[test]
fn the_kubernetes_job_runs_one_shard_per_completion_index() {
    let Some(oracle) = common::oracle() else { return };
    let manifest = repo().join("scripts/dist/k8s/hrx-caption-job.yaml");
    let parsed = Command::new("python3")
        .args(["-c", "import json, sys, yaml; print(json.dumps(yaml.safe_load(open(sys.argv[1]))))"])
        .arg(&manifest)
        .output()
        .expect("python3 with yaml (Debian's python3-yaml; scripts/test installs it)");
    assert!(parsed.status.success(), "{}", stderr(&parsed));
    let job: tinyjson::JsonValue = String::from_utf8(parsed.stdout).unwrap().parse().unwrap();
    let at = |path: &[&str]| -> tinyjson::JsonValue {
        path.iter().fold(job.clone(), |v, k| match k.parse::<usize>() {
            Ok(i) => v.get::<Vec<tinyjson::JsonValue>>().unwrap_or_else(|| panic!("{path:?}"))[i].clone(),
            Err(_) => v
                .get::<std::collections::HashMap<String, tinyjson::JsonValue>>()
                .unwrap_or_else(|| panic!("{path:?}"))[*k]
                .clone(),
        })
    };
    let text = |path: &[&str]| at(path).get::<String>().unwrap_or_else(|| panic!("{path:?}")).clone();
    let number = |path: &[&str]| *at(path).get::<f64>().unwrap_or_else(|| panic!("{path:?}"));
    assert_eq!(text(&["apiVersion"]), "batch/v1");
    assert_eq!(text(&["kind"]), "Job");
    assert_eq!(text(&["spec", "completionMode"]), "Indexed");
    assert_eq!(text(&["spec", "template", "spec", "restartPolicy"]), "Never", "podFailurePolicy needs it");
    let completions = number(&["spec", "completions"]);
    assert!(completions >= 2.0 && number(&["spec", "parallelism"]) <= completions);
    let rule = ["spec", "podFailurePolicy", "rules", "0"];
    assert_eq!(text(&[&rule[..], &["action"]].concat()), "FailIndex");
    let container = ["spec", "template", "spec", "containers", "0"];
    assert_eq!(
        text(&[&container[..], &["name"]].concat()),
        text(&[&rule[..], &["onExitCodes", "containerName"]].concat())
    );
    let command: Vec<String> = at(&[&container[..], &["command"]].concat())
        .get::<Vec<tinyjson::JsonValue>>()
        .unwrap()
        .iter()
        .map(|w| w.get::<String>().expect("every word a string").clone())
        .collect();
    let after = |flag: &str| command.iter().position(|w| w == flag).map(|i| command[i + 1].clone());
    assert_eq!(&command[..2], ["hrx", "caption"]);
    assert_eq!(after("--shard").as_deref(), Some("auto"));
    assert_eq!(after("--shards"), Some(format!("{completions}")), "--shards is the job's completions");
    assert!(after("-o").is_some_and(|o| o.contains("{shard}")) && command.contains(&"--resume".to_owned()));

    // Each index's pod, run here: /data is a folder of this test's, the models the tiny ones.
    let dir = TempDir::new("scripts-k8s");
    let all = image_folder(&oracle, &dir.join("images"), 8);
    std::fs::create_dir_all(dir.join("captions")).unwrap();
    let tiny = oracle.join("models/tiny");
    let local: Vec<String> = command[1..]
        .iter()
        .map(|w| match w.as_str() {
            m if m.ends_with("Q4_K_M.gguf") => tiny.join("qwen3vl-tiny-F16.gguf").display().to_string(),
            m if m.contains("/mmproj-") => tiny.join("mmproj-qwen3vl-tiny-F16.gguf").display().to_string(),
            w => w.replace("/data", dir.path().to_str().unwrap()),
        })
        .collect();
    for index in 0..completions as usize {
        let out = Command::new(env!("CARGO_BIN_EXE_hrx"))
            .args(&local)
            .args(["-n", "2", "--device", "cpu"])
            .env("JOB_COMPLETION_INDEX", index.to_string())
            .env_remove("SLURM_ARRAY_TASK_ID")
            .output()
            .unwrap();
        assert!(out.status.success(), "index {index}: {}", stderr(&out));
    }
    let outputs: Vec<_> = (0..completions as usize).map(|k| dir.join(format!("captions/captions-{k}.jsonl"))).collect();
    assert_eq!(captioned(&outputs), all);
}
