//! The scripts of README.md's set-up, run for real where that is cheap: scripts/describe with
//! the built binary (HRX_BIN: no build inside a test), scripts/lib/deps.sh with a stand-in
//! apt-get.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hrx-scripts-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
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
    let empty = temp_dir("describe");
    let out = describe(&empty, &["photo.png"]);
    assert!(!out.status.success());
    let searched = repo().join("models").display().to_string();
    assert!(stderr(&out).contains(&searched), "{searched}: {}", stderr(&out));
    std::fs::remove_dir_all(&empty).unwrap();
}

/// ensure_apt_packages installs only what is missing, never upgrading what is there
/// (--no-upgrade), keeps apt's output off stdout (a log), and says on stderr what it does.
#[test]
fn deps_install_only_missing_packages_and_keep_apt_off_stdout() {
    let dir = temp_dir("apt");
    let calls = dir.join("calls");
    // Stand-ins: apt-get records its arguments and chatters on stdout; sudo just runs.
    let apt = format!("#!/bin/sh\necho \"$*\" >>'{}'\necho 'Reading package lists... Done'\n", calls.display());
    for (name, body) in [("apt-get", apt.as_str()), ("sudo", "#!/bin/sh\nexec \"$@\"\n")] {
        let path = dir.join(name);
        std::fs::write(&path, body).unwrap();
        Command::new("chmod").arg("+x").arg(&path).status().unwrap();
    }
    let path = format!("{}:{}", dir.display(), std::env::var("PATH").unwrap_or_default());
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
    std::fs::remove_dir_all(&dir).unwrap();
}
