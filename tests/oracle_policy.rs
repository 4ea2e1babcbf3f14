//! A missing oracle fails the tests that need it, unless `HRX_ALLOW_NO_ORACLE=1` asks for a
//! skip (never under `CI=true`); a skip is said on stderr past the harness's capture and
//! written to `$HRX_ORACLE_SKIPS`, the file `scripts/test` counts.

mod common;

use std::process::{Command, Output};

/// Needs the oracle: the runs below point it elsewhere.
#[test]
fn the_oracle_has_the_tiny_model() {
    let Some(dir) = common::oracle() else { return };
    assert!(dir.join("models/tiny/qwen3vl-tiny-F16.gguf").is_file(), "{}", dir.display());
}

/// This test binary running only `the_oracle_has_the_tiny_model`, with no oracle, skips
/// written to `skips`, and `env`.
fn without_the_oracle(skips: &std::path::Path, env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(std::env::current_exe().expect("the test binary"));
    cmd.args(["the_oracle_has_the_tiny_model", "--exact"])
        .env("HRX_ORACLE", "/nonexistent/oracle")
        .env("HRX_ORACLE_SKIPS", skips)
        .env_remove("CI")
        .env_remove("HRX_ALLOW_NO_ORACLE");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run the test binary")
}

#[test]
fn a_missing_oracle_fails_unless_a_skip_is_asked_for_and_a_skip_is_counted() {
    let dir = std::env::temp_dir().join(format!("hrx-oracle-policy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let skips = dir.join("skips");
    let _ = std::fs::remove_file(&skips);
    let all = |o: &Output| format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));

    let failed = without_the_oracle(&skips, &[]);
    assert!(!failed.status.success(), "{}", all(&failed));
    assert!(all(&failed).contains("ORACLE MISSING: /nonexistent/oracle"), "{}", all(&failed));
    assert!(!skips.exists(), "a failure is not a skip");

    let skipped = without_the_oracle(&skips, &[("HRX_ALLOW_NO_ORACLE", "1")]);
    assert!(skipped.status.success(), "{}", all(&skipped));
    let stderr = String::from_utf8_lossy(&skipped.stderr);
    assert!(stderr.contains("SKIPPING the_oracle_has_the_tiny_model"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&skips).unwrap(), "oracle_policy: the_oracle_has_the_tiny_model\n");

    let ci = without_the_oracle(&skips, &[("HRX_ALLOW_NO_ORACLE", "1"), ("CI", "true")]);
    assert!(!ci.status.success(), "CI=true fails whatever the opt-out: {}", all(&ci));
    assert_eq!(std::fs::read_to_string(&skips).unwrap().lines().count(), 1, "CI's failure is not a skip");
    std::fs::remove_dir_all(&dir).unwrap();
}
