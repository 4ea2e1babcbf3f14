//! The scripts of README.md's set-up, run for real where that is cheap: scripts/describe with
//! the built binary (HRX_BIN: no build inside a test), scripts/lib/deps.sh with a stand-in
//! apt-get; and of scripts/release what needs no cross toolchain: the systemd units it
//! packages, where the package puts things, the stripped release profile.

mod common;

use common::TempDir;
use std::io::Write as _;
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

/// Every variable a unit's ExecStart= uses has a default in the unit and a line in the
/// settings file the package installs as /etc/default/hrx, and the flags it passes are hrx's.
#[test]
fn the_units_use_only_settings_and_flags_that_exist() {
    let default = std::fs::read_to_string(repo().join("scripts/dist/hrx.default")).unwrap();
    for (name, command, flags) in [
        ("hrx-serve.service", "serve", &["--host", "--port"][..]),
        ("hrx-caption.service", "caption", &["-o", "--resume"]),
    ] {
        let u = unit(name);
        assert_eq!(values(&u, "Service", "EnvironmentFile"), ["-/etc/default/hrx"], "{name}");
        let exec = values(&u, "Service", "ExecStart")[0];
        let defaults = values(&u, "Service", "Environment")[0];
        let vars: Vec<&str> = exec
            .split_whitespace()
            .filter_map(|w| w.strip_prefix('$'))
            .map(|w| w.trim_start_matches('{').trim_end_matches('}'))
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

/// Where systemd-analyze is installed (Debian 12 with systemd), the units verify and their
/// exposure stays within 2.0, as scripts/release checks. ExecStart= points at the built hrx,
/// man pages are not looked up (the package's is made by scripts/release).
#[test]
fn the_units_verify_and_score_under_systemd_analyze_where_it_is_installed() {
    let analyze = Command::new("systemd-analyze").arg("--version").output();
    if !analyze.is_ok_and(|o| o.status.success()) {
        let _ = writeln!(std::io::stderr(), "systemd-analyze not installed: the units were only parsed");
        return;
    }
    let dir = TempDir::new("scripts-units");
    let units = ["hrx-serve.service", "hrx-caption.service", "hrx-caption.timer"];
    for u in units {
        let text = std::fs::read_to_string(repo().join("scripts/dist").join(u)).unwrap();
        std::fs::write(dir.join(u), text.replace("/usr/bin/hrx", env!("CARGO_BIN_EXE_hrx"))).unwrap();
    }
    let out =
        Command::new("systemd-analyze").args(["verify", "--man=no"]).args(units.map(|u| dir.join(u))).output().unwrap();
    assert!(out.status.success() && out.stderr.is_empty(), "{}", stderr(&out));
    for u in &units[..2] {
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
