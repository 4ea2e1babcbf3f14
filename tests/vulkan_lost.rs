//! A lost device survived (`HRX_TEST_FAULT=device-lost:N`: the Nth run of a plan on the
//! Vulkan device finds it lost, as `VK_ERROR_DEVICE_LOST` would), on the test device:
//! `hrx caption` loads the models again and captions what was under way again, losing nothing;
//! `hrx serve` answers the requests in flight with 503 and Retry-After, says so on /health
//! while it loads the models again, and goes on without a restart; after three losses in ten
//! minutes both go to the CPU, and say so.

mod common;
mod vulkan_common;

use common::server::{json, string, Server};
use common::TempDir;
use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};
use tinyjson::JsonValue;

/// `hrx caption` of `dir` into `out` on Vulkan device `device`, `extra` flags, `env` set:
/// (exit code, stderr).
fn caption(model: &Path, device: &str, dir: &Path, out: &Path, extra: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let m = model.join("qwen3vl-tiny-F16.gguf");
    let mm = model.join("mmproj-qwen3vl-tiny-F16.gguf");
    let mut args = vec!["caption", "-m", m.to_str().unwrap(), "--mmproj", mm.to_str().unwrap()];
    args.extend(["--device", device, "-n", "4", "--ignore-eos", "--temp", "0", "-o", out.to_str().unwrap()]);
    args.extend(extra);
    args.push(dir.to_str().unwrap());
    let output = Command::new(env!("CARGO_BIN_EXE_hrx"))
        .args(&args)
        .env_remove("HRX_TEST_FAULT")
        .envs(env.iter().copied())
        .output()
        .expect("run hrx caption");
    (output.status.code().unwrap_or(-1), String::from_utf8_lossy(&output.stderr).into_owned())
}

/// The captions of a journal, by image.
fn captions(out: &Path) -> HashMap<String, String> {
    let text = std::fs::read_to_string(out).unwrap();
    text.lines()
        .map(|l| {
            let v: JsonValue = l.parse().unwrap();
            let m: &HashMap<String, JsonValue> = v.get().unwrap();
            let caption = m.get("caption").and_then(|c| c.get::<String>()).unwrap_or_else(|| panic!("a failure: {l}"));
            (m["image"].get::<String>().unwrap().clone(), caption.clone())
        })
        .collect()
}

/// Four images of the oracle in a folder of their own.
fn images(oracle: &Path, dir: &TempDir) -> std::path::PathBuf {
    let folder = dir.join("images");
    std::fs::create_dir_all(&folder).unwrap();
    for name in ["shapes-448.png", "gray-256x256.png", "rgba-300x200.png", "pattern-333x517.jpg"] {
        std::fs::copy(oracle.join("images").join(name), folder.join(name)).unwrap();
    }
    folder
}

#[test]
fn caption_loses_no_image_to_a_lost_device() {
    let Some(dev) = vulkan_common::device() else { return };
    let Some(oracle) = common::oracle() else { return };
    let model = oracle.join("models/tiny");
    let device = dev.info().index.to_string();
    let dir = TempDir::new("lost-caption");
    let folder = images(&oracle, &dir);
    let want_out = dir.join("want.jsonl");
    let (code, err) = caption(&model, &device, &folder, &want_out, &["--batch", "1"], &[]);
    assert_eq!(code, 0, "{err}");
    let want = captions(&want_out);
    assert_eq!(want.len(), 4, "{want:?}");
    for batch in ["1", "2"] {
        // One loss in the second image's decode: loaded again on the device, the image
        // captioned again, the same captions.
        let out = dir.join(format!("once-{batch}.jsonl"));
        let (code, err) =
            caption(&model, &device, &folder, &out, &["--batch", batch], &[("HRX_TEST_FAULT", "device-lost:6")]);
        assert_eq!(code, 0, "--batch {batch}: {err}");
        assert!(err.contains("was lost") && err.contains("loading the models again on a new device"), "{err}");
        assert!(!err.contains("on the CPU"), "{err}");
        assert_eq!(captions(&out), want, "--batch {batch}: {err}");
        // Three losses within ten minutes: the rest on the CPU, every image captioned.
        let out = dir.join(format!("thrice-{batch}.jsonl"));
        let fault = [("HRX_TEST_FAULT", "device-lost:3,device-lost:5,device-lost:7")];
        let (code, err) = caption(&model, &device, &folder, &out, &["--batch", batch], &fault);
        assert_eq!(code, 0, "--batch {batch}: {err}");
        assert!(err.contains("3 times in 10 minutes: loading the models on the CPU"), "{err}");
        assert_eq!(captions(&out).len(), 4, "--batch {batch}: {err}");
    }
}

/// `/health` until it answers `status`, within a minute: its body.
fn await_health(server: &Server, status: &str) -> String {
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let (code, body) = server.get("/health");
        if string(&json(&body), &["status"]) == status {
            return format!("{code} {body}");
        }
        assert!(Instant::now() < until, "/health still {code} {body}:\n{}", server.log.lock().unwrap());
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn serve_answers_503_through_a_lost_device_and_goes_on() {
    let Some(dev) = vulkan_common::device() else { return };
    let Some(oracle) = common::oracle() else { return };
    let device = dev.info().index.to_string();
    let chat = r#"{"messages":[{"role":"user","content":"hello"}],"max_tokens":4,"temperature":0}"#;
    let raw = common::server::chat_request(chat);

    // The third run (the first chat's second decode step) loses the device.
    let flags = ["--device", &device, "--parallel", "1"];
    let server = Server::start_with(&oracle.join("models/tiny"), &flags, &[("HRX_TEST_FAULT", "device-lost:3")]);
    let health = await_health(&server, "ok");
    assert!(health.contains(&dev.info().name), "{health}");
    let response = server.raw_response(&raw);
    assert!(response.starts_with("HTTP/1.1 503") && response.contains("Retry-After:"), "{response}");
    assert!(response.contains("device was lost"), "{response}");
    // Loaded again on a new device: the server goes on.
    let health = await_health(&server, "ok");
    assert!(health.contains(&dev.info().name), "{health}");
    let (status, body) = server.post("/v1/chat/completions", chat);
    assert_eq!(status, 200, "{body}\n{}", server.log.lock().unwrap());
    assert!(server.log_line("loading the models again on a new device", Duration::from_secs(5)).is_some());
    // The 503 is counted where it was made, as an outcome of its own.
    let (_, metrics) = server.get("/metrics");
    assert!(metrics.contains("hrx_chat_requests_total{outcome=\"device_lost\"} 1"), "{metrics}");
    assert!(metrics.contains("hrx_chat_requests_total{outcome=\"answered\"} 1"), "{metrics}");
    drop(server);

    // Losses at runs 3, 4 and 5: three chats refused, then the CPU serves, and says so.
    let fault = [("HRX_TEST_FAULT", "device-lost:3,device-lost:4,device-lost:5")];
    let server = Server::start_with(&oracle.join("models/tiny"), &flags, &fault);
    for n in 0..3 {
        await_health(&server, "ok");
        let response = server.raw_response(&raw);
        assert!(response.starts_with("HTTP/1.1 503"), "chat {n}: {response}\n{}", server.log.lock().unwrap());
    }
    let health = await_health(&server, "ok");
    assert!(health.contains("cpu"), "{health}");
    let (status, body) = server.post("/v1/chat/completions", chat);
    assert_eq!(status, 200, "{body}");
    assert!(server.log_line("3 times in 10 minutes: loading the models on the CPU", Duration::from_secs(5)).is_some());
}
