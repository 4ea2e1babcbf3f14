"""A headless Chromium driven over the DevTools protocol, Python's standard library only: the
browser tests of hrx's pages (tests/browser.rs runs scripts/browser_check, which uses this).

    with Browser(["--use-fake-device-for-media-stream"]) as b:
        page = b.open("http://127.0.0.1:8080/")
        page.wait_for("document.getElementById('answer').textContent.length > 0", 30)
        page.screenshot("target/kiosk.png")
        page.requests  # every URL the page asked for
"""

import base64
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import tempfile
import time
import urllib.request


class Browser:
    def __init__(self, flags=(), binary=None):
        self.binary = binary or shutil.which("chromium") or shutil.which("chromium-browser")
        if not self.binary:
            raise SystemExit("browser_check: no chromium (Debian's chromium package; scripts/test installs it)")
        self.flags = list(flags)

    def __enter__(self):
        self.profile = tempfile.mkdtemp(prefix="hrx-chromium-")
        self.proc = subprocess.Popen(
            [self.binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-extensions", "--remote-debugging-port=0", f"--user-data-dir={self.profile}",
             "--disable-dev-shm-usage", "--window-size=1280,800"] + self.flags + ["about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            m = re.search(r"DevTools listening on (ws://[^\s]+)", line)
            if m:
                self.port = int(re.search(r":(\d+)/", m.group(1)).group(1))
                return self
            if not line and self.proc.poll() is not None:
                break
        self.__exit__()
        raise SystemExit("browser_check: chromium did not start its DevTools endpoint")

    def __exit__(self, *exc):
        self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.profile, ignore_errors=True)

    def open(self, url):
        targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{self.port}/json/list"))
        page = next(t for t in targets if t.get("type") == "page")
        return Page(page["webSocketDebuggerUrl"], url)


class Page:
    """One tab over a WebSocket: commands answered in order, events kept."""

    def __init__(self, ws_url, url):
        m = re.match(r"ws://([\d.]+):(\d+)(/.*)", ws_url)
        self.sock = socket.create_connection((m.group(1), int(m.group(2))), timeout=60)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET {m.group(3)} HTTP/1.1\r\nHost: {m.group(1)}:{m.group(2)}\r\nUpgrade: websocket\r\n"
                           f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            head += self.sock.recv(1)
        if b" 101 " not in head.split(b"\r\n")[0]:
            raise SystemExit(f"browser_check: no WebSocket: {head!r}")
        self.next_id, self.events, self.requests, self.console = 0, [], [], []
        self.call("Network.enable")
        self.call("Runtime.enable")
        self.call("Page.enable")
        self.call("Page.navigate", url=url)

    def _send(self, text):
        data = text.encode()
        mask = os.urandom(4)
        n = len(data)
        head = bytes([0x81]) + (bytes([0x80 | n]) if n < 126 else
                                bytes([0x80 | 126]) + struct.pack(">H", n) if n < 65536 else
                                bytes([0x80 | 127]) + struct.pack(">Q", n))
        self.sock.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def _exact(self, n):
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise SystemExit("browser_check: the browser closed the DevTools connection")
            out += chunk
        return out

    def _receive(self):
        message = b""
        while True:
            b0, b1 = self._exact(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._exact(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._exact(8))[0]
            message += self._exact(n)
            if b0 & 0x80:
                return json.loads(message)

    def _note(self, event):
        self.events.append(event)
        method, params = event.get("method"), event.get("params", {})
        if method == "Network.requestWillBeSent":
            self.requests.append(params["request"]["url"])
        elif method == "Runtime.consoleAPICalled":
            self.console.append(" ".join(str(a.get("value", a.get("description", ""))) for a in params["args"]))
        elif method == "Runtime.exceptionThrown":
            self.console.append("exception: " + params["exceptionDetails"].get("text", ""))

    def call(self, method, **params):
        self.next_id += 1
        self._send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = self._receive()
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise SystemExit(f"browser_check: {method}: {message['error']}")
                return message.get("result", {})
            self._note(message)

    def evaluate(self, expression):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return result.get("result", {}).get("value")

    def wait_for(self, expression, seconds):
        """Polls `expression` until it is true; whether it became so within `seconds`."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.evaluate(expression):
                return True
            time.sleep(0.1)
        return False

    def screenshot(self, path):
        data = self.call("Page.captureScreenshot", format="png")["data"]
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))
