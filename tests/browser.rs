//! The kiosk page of `hrx serve` (GET /): served whole from the binary, talking to its server
//! only, and in a real browser (headless Chromium with its fake camera, scripts/browser_check)
//! a frame described as it streams in and a busy server shown in words.

mod common;

use common::server::Server;
use std::process::Command;

/// The page is one self-contained document: HTML with its script and style inline, no URL of
/// any other host, a policy that keeps the browser from loading or sending anything elsewhere,
/// the server's pixel budget filled in; --no-page takes it away.
#[test]
fn the_kiosk_page_is_served_whole_and_talks_to_its_server_only() {
    let Some(oracle) = common::oracle() else { return };
    let model = oracle.join("models/tiny");
    let server = Server::start(&model, &["--device", "cpu"]);
    for path in ["/", "/kiosk", "/?prompt=What%20is%20here%3F&every=10"] {
        let response = server.raw_response(format!("GET {path} HTTP/1.1\r\nConnection: close\r\n\r\n").as_bytes());
        let (head, page) = response.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 200") && head.contains("Content-Type: text/html"), "{head}");
        assert!(
            head.contains("Content-Security-Policy: default-src 'none';") && head.contains("connect-src 'self'"),
            "{head}"
        );
        assert!(page.starts_with("<!doctype html>") && page.len() < 16 << 10, "{} bytes", page.len());
        assert!(!page.contains("http://") && !page.contains("https://") && !page.contains("//cdn"), "a URL elsewhere");
        assert!(!page.contains("__HRX_") && page.contains("const MAX_PIXELS = Number(\"1048576\")"));
    }
    drop(server);
    let server = Server::start(&model, &["--device", "cpu", "--no-page"]);
    let (status, body) = server.get("/");
    assert_eq!(status, 404);
    assert!(body.contains("GET /health") && !body.contains("GET /,") && !body.contains("/kiosk"), "{body}");
    assert_eq!(server.get("/health").0, 200);
}

/// scripts/browser_check in headless Chromium (Debian's chromium; scripts/test installs it):
/// its checks print, its screenshots land in target/browser/ for a person to look at.
#[test]
fn the_kiosk_page_describes_a_camera_frame_in_a_real_browser() {
    let Some(oracle) = common::oracle() else { return };
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = root.join("target/browser");
    let _ = std::fs::remove_dir_all(&out);
    let run = Command::new("python3")
        .arg(root.join("scripts/browser_check"))
        .args([env!("CARGO_BIN_EXE_hrx"), oracle.to_str().unwrap(), out.to_str().unwrap()])
        .output()
        .expect("python3");
    let said = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{said}{}", String::from_utf8_lossy(&run.stderr));
    assert_eq!(said.matches("browser_check: ok").count(), 8, "{said}");
    for shot in ["kiosk.png", "kiosk-busy.png", "report.png"] {
        let png = std::fs::read(out.join(shot)).unwrap();
        assert!(png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 10_000, "{shot}: {} bytes", png.len());
    }
}
