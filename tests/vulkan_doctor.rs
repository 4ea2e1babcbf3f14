//! `hrx doctor`: lists the devices and the one hrx picks, as text and JSON; without a driver
//! it says so and exits 1 instead of crashing.

mod vulkan_common;

use hrx::backend::DeviceChoice;
use std::process::Command;

fn doctor(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    // HRX_BIN: the binary where the tests run elsewhere than they were built (the device machine).
    let bin = std::env::var_os("HRX_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_hrx").into());
    let mut cmd = Command::new(bin);
    cmd.arg("doctor").args(args).env_remove("HRX_DEVICE");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run hrx doctor");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn lists_devices_and_the_choice() {
    let Some(dev) = vulkan_common::device() else { return };
    let name = dev.info().name.clone();
    let index = dev.info().index;
    // What every command resolves `auto` to on this machine: doctor must say the same.
    let devices = hrx::backend::vulkan::Instance::new().unwrap().devices().unwrap();
    let auto = DeviceChoice::Auto.pick(&devices).unwrap().map(|i| devices[i].index);
    let (code, text, err) = doctor(&[], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(text.contains(&name) && text.contains("memory heap 0"), "{text}");
    assert!(text.contains("subgroups") && text.contains("cooperative matrix"), "{text}");
    match auto {
        Some(i) => {
            assert!(text.contains("hrx uses this one") && text.contains(&format!("hrx would use device {i}")), "{text}")
        }
        // lavapipe alone: the commands run on hrx's CPU backend.
        None => {
            assert!(!text.contains("hrx uses this one") && text.contains("hrx would use its CPU backend"), "{text}")
        }
    }
    let (code, json, _) = doctor(&["--json"], &[]);
    assert_eq!(code, 0);
    let parsed: tinyjson::JsonValue = json.trim().parse().expect("doctor --json prints JSON");
    let devices: &Vec<tinyjson::JsonValue> = parsed["devices"].get().unwrap();
    assert!(!devices.is_empty());
    assert_eq!(parsed["selected"].get::<f64>().map(|&i| i as usize), auto);
    assert_eq!(
        parsed["backend"].get::<String>().map(String::as_str),
        Some(if auto.is_some() { "vulkan" } else { "cpu" })
    );
    // Named by index, the test device is the one used, whatever its kind.
    let (code, json, _) = doctor(&["--json"], &[("HRX_DEVICE", &index.to_string())]);
    assert_eq!(code, 0);
    let parsed: tinyjson::JsonValue = json.trim().parse().unwrap();
    let selected: &f64 = parsed["selected"].get().expect("a selected device");
    let chosen = devices.iter().find(|d| d["index"].get::<f64>() == Some(selected)).unwrap();
    assert_eq!(chosen["name"].get::<String>(), Some(&name));
    assert!(chosen["heaps"].get::<Vec<tinyjson::JsonValue>>().is_some_and(|h| !h.is_empty()));
    let (code, text, _) = doctor(&[], &[("HRX_DEVICE", "cpu")]);
    assert_eq!(code, 0);
    assert!(text.contains("hrx would use its CPU backend (HRX_DEVICE=cpu)"), "{text}");
    let (code, _, err) = doctor(&[], &[("HRX_DEVICE", "banana")]);
    assert_eq!(code, 1);
    assert!(err.contains("HRX_DEVICE"), "{err}");
}

#[test]
fn no_driver_is_a_clear_error_not_a_crash() {
    let none = [("VK_DRIVER_FILES", "/nonexistent/icd.json"), ("VK_ICD_FILENAMES", "/nonexistent/icd.json")];
    let (code, text, err) = doctor(&[], &none);
    assert_eq!(code, 1, "stdout {text} stderr {err}");
    assert!(err.contains("no device") || err.contains("no Vulkan loader"), "{err}");
    assert!(text.contains("CPU backend only"), "{text}");
    let (code, json, _) = doctor(&["--json"], &none);
    assert_eq!(code, 1);
    let parsed: tinyjson::JsonValue = json.trim().parse().expect("JSON even on failure");
    assert!(parsed["error"].get::<String>().is_some());
    // HRX_DEVICE=cpu is the CPU backend, Vulkan or not.
    let (_, text, _) = doctor(&[], &[none[0], none[1], ("HRX_DEVICE", "cpu")]);
    assert!(text.contains("hrx would use its CPU backend (HRX_DEVICE=cpu)"), "{text}");
}
