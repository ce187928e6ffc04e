#!/usr/bin/env python3
"""The core's console in a real browser, against a running demo (docs/operations.md, "The console").

    python3 tests/checks/console.py --json-out target/demo.json --screenshot target/console.png \
        -- ./target/release/horizon demo --duration 90 --json

Runs the demo command given after `--` with `--admin 127.0.0.1:0` (the core binds a free port
itself and its banner says which: `console http://ADDR/`) and an admin token in
HORIZON_ADMIN_TOKEN, its stdout to --json-out, and drives Debian's headless `chromium`
through the DevTools protocol on a pipe (`--remote-debugging-pipe`: nothing but the standard
library, nothing downloaded). It checks, as an operator would see them:

1. without a token the page says players are hidden, a wrong token is refused, the right one
   shows them;
2. the region table lists every region `/status` lists;
3. a click on a bubble's row shows why it is where it is, with the best site `/status` gives,
   and its load as SMD's rule counts it (a line per server, the capacity `/status` gives);
4. a handover `/status` tells appears in the page's timeline within one refresh;

then writes a screenshot, waits for the demo to end and exits with 1 on any failure (the demo's
own exit code if it failed). Needs `chromium` on PATH (Debian's package of that name).
"""

import argparse
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request

from procs import announced

REFRESH_S = 2.0  # the page's refresh period (status.html, REFRESH_MS)


def admin_address(demo, deadline_s):
    """The core's admin address from the demo's banner (`console http://ADDR/` on its stderr),
    its lines passed on to ours; the rest of its stderr keeps being passed on after."""
    return announced(demo, r"^console http://([0-9.:]+)/", deadline_s, sys.stderr.write,
                     "the demo's console address")


class Status:
    """`/status` of the demo's core, as the test reads it (with the token)."""

    def __init__(self, addr, token):
        self.url = f"http://{addr}"
        self.token = token

    def get(self, path="/status", token=True):
        req = urllib.request.Request(self.url + path)
        if token:
            req.add_header("Authorization", f"Bearer {self.token}")
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.read().decode()

    def doc(self):
        return json.loads(self.get())

    def ready(self):
        try:
            return self.get("/readyz", token=False).startswith("ready")
        except (urllib.error.URLError, OSError):
            return False


class Browser:
    """Headless Chromium driven over the DevTools protocol on fds 3 and 4."""

    def __init__(self, profile):
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        def fds():
            os.dup2(to_browser_r, 3)
            os.dup2(from_browser_w, 4)

        self.proc = subprocess.Popen(
            ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--remote-debugging-pipe", f"--user-data-dir={profile}", "--window-size=1400,1000",
             "about:blank"],
            pass_fds=(3, 4), preexec_fn=fds, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buf = b""
        self._next = 0
        targets = self.call("Target.getTargets")["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        self.session = self.call("Target.attachToTarget",
                                 {"targetId": page["targetId"], "flatten": True})["sessionId"]
        self.call("Page.enable", session=True)
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": 1400, "height": 1000, "deviceScaleFactor": 1, "mobile": False},
                  session=True)

    def call(self, method, params=None, session=False):
        self._next += 1
        msg = {"id": self._next, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = self.session
        os.write(self._to_browser, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + 30
        while True:
            while b"\0" in self._buf:
                raw, self._buf = self._buf.split(b"\0", 1)
                reply = json.loads(raw)
                if reply.get("id") == self._next:
                    if "error" in reply:
                        raise RuntimeError(f"{method}: {reply['error']}")
                    return reply["result"]
            if time.monotonic() > deadline:
                raise RuntimeError(f"{method}: no answer from chromium in 30 s")
            chunk = os.read(self._from_browser, 1 << 16)
            if not chunk:
                raise RuntimeError("chromium closed its DevTools pipe")
            self._buf += chunk

    def js(self, expression):
        """The value of a JavaScript expression in the page (awaited if a promise)."""
        r = self.call("Runtime.evaluate",
                      {"expression": expression, "returnByValue": True, "awaitPromise": True},
                      session=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def click(self, selector):
        """A real mouse click in the middle of the element `selector` names."""
        box = self.js(f"""(() => {{ const e = document.querySelector({json.dumps(selector)});
            if (!e) return null; e.scrollIntoView({{block: "center"}});
            const r = e.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; }})()""")
        if box is None:
            raise RuntimeError(f"nothing to click at {selector}")
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent",
                      {"type": kind, "x": box[0], "y": box[1], "button": "left", "clickCount": 1},
                      session=True)

    def type_into(self, selector, text):
        self.js(f"(() => {{ const e = document.querySelector({json.dumps(selector)}); e.value = ''; e.focus(); }})()")
        self.call("Input.insertText", {"text": text}, session=True)

    def screenshot(self, path):
        import base64
        shot = self.call("Page.captureScreenshot",
                         {"format": "png", "captureBeyondViewport": True}, session=True)
        with open(path, "wb") as f:
            f.write(base64.b64decode(shot["data"]))

    def close(self):
        self.proc.kill()
        self.proc.wait()


def wait(what, predicate, timeout_s, every_s=0.25):
    """`predicate()` until it returns something true, for at most `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(every_s)
    raise AssertionError(f"{what}: not within {timeout_s} s (last: {last!r})")


def region_ids(doc):
    return sorted([b["bubble"] for b in doc["bubbles"]] + [z["zone"] for z in doc["zones"]])


def check(browser, status, screenshot):
    page = status.url + "/"
    browser.call("Page.navigate", {"url": page}, session=True)
    wait("the page draws its region table",
         lambda: browser.js("document.querySelectorAll('#regions tbody tr').length"), 20)

    # 1. The token: hidden without it, refused when wrong, players shown with it.
    wait("the page says players are hidden without the token",
         lambda: "not authenticated" in browser.js("document.getElementById('access').textContent"), 10)
    assert browser.js("document.querySelectorAll('#maps circle').length") == 0, "no player without the token"
    browser.type_into("#token", "not-the-token")
    browser.click("#token-form button")
    wait("a wrong token is refused",
         lambda: "token refused" in browser.js("document.getElementById('access').textContent"), 10)
    browser.type_into("#token", status.token)
    browser.click("#token-form button")
    wait("the token shows the players",
         lambda: "token accepted" in browser.js("document.getElementById('access').textContent")
         and browser.js("document.querySelectorAll('#maps circle').length") > 0, 10)
    print("console: token field ok (hidden without, refused when wrong, players with it)")

    # 2. The table lists every region /status lists (the page refreshes every 2 s).
    def same_regions():
        want = region_ids(status.doc())
        shown = sorted(browser.js(
            "[...document.querySelectorAll('#regions tbody tr')].map(r => Number(r.dataset.region))"))
        return (want, shown) if want == shown and want else None
    want, _ = wait("the table lists the regions /status lists", same_regions, 20)
    print(f"console: the table lists the {len(want)} regions /status lists")

    # 4 (first, since it waits on the demo). A handover /status tells, on the page within a refresh.
    def handover():
        doc = status.doc()
        told = [e for e in doc["timeline"] if e["kind"] == "handover" and "handed over" in e["text"]]
        return told[0] if told else None
    event = wait("a handover is committed in the demo", handover, 75, every_s=0.5)
    seen_at = time.monotonic()
    wait("the handover in the page's timeline", lambda: event["text"] in browser.js(
        "document.getElementById('timeline').textContent"), 2 * REFRESH_S + 1, every_s=0.1)
    print(f"console: timeline shows {event['text']!r} "
          f"{time.monotonic() - seen_at:.1f} s after /status did")

    # 3. A click on the moved bubble's row: its explanation, with the best site /status gives.
    bubble = event["region"]
    wait("the moved bubble's row", lambda: browser.js(
        f"!!document.querySelector('#regions tr[data-region=\"{bubble}\"]')"), 10)
    browser.click(f'#regions tr[data-region="{bubble}"]')

    def explained():
        doc = status.doc()
        b = next((b for b in doc["bubbles"] if b["bubble"] == bubble), None)
        if b is None or b["explain"] is None:
            return None
        shown = browser.js("""(() => { const w = document.querySelector('#explain .words');
            return w && {best: w.dataset.best, words: w.textContent}; })()""")
        return shown if shown and shown["best"] == b["explain"]["best"] else None
    shown = wait("the explanation with the best site /status gives", explained, 10)
    rows = browser.js("document.querySelectorAll('#explain table tr').length")
    assert rows >= 2, f"a row per candidate site: {rows}"
    assert browser.js("document.querySelector('#regions tr.selected') !== null"), "the row is selected"
    print(f"console: bubble {bubble} explained, best {shown['best']}: {shown['words']!r}")

    # 4b. Its load, as SMD's rule counts it: a line per server of the bubble, with the
    # players and the capacity /status gives.
    def load_shown():
        doc = status.doc()
        b = next((b for b in doc["bubbles"] if b["bubble"] == bubble), None)
        lines = browser.js("""[...document.querySelectorAll('#explain .load')].map(l =>
            ({players: +l.dataset.players, capacity: +l.dataset.capacity, words: l.textContent}))""")
        if b is None or not lines or len(lines) != len(b["load"]):
            return None
        return lines if all(l["capacity"] == c["capacity"] for l, c in zip(lines, b["load"])) else None
    lines = wait("the bubble's load, a line per server", load_shown, 10)
    print(f"console: bubble {bubble} load: {lines[0]['words']!r}")

    time.sleep(REFRESH_S + 0.5)  # a fresh draw for the picture
    browser.screenshot(screenshot)
    print(f"console: screenshot written to {screenshot}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json-out", required=True, help="where the demo's stdout goes")
    ap.add_argument("--screenshot", required=True, help="the PNG to write")
    ap.add_argument("command", nargs="+", help="the demo command (after --)")
    args = ap.parse_args()
    if shutil.which("chromium") is None:
        sys.exit("console.py: needs `chromium` on PATH (Debian: apt-get install chromium)")
    token = secrets.token_hex(16)
    env = dict(os.environ, HORIZON_ADMIN_TOKEN=token)
    profile = os.path.abspath(os.path.join(os.path.dirname(args.screenshot), "console-profile"))
    shutil.rmtree(profile, ignore_errors=True)
    with open(args.json_out, "wb") as out:
        demo = subprocess.Popen(args.command + ["--admin", "127.0.0.1:0"], stdout=out,
                                stderr=subprocess.PIPE, text=True, env=env)
    failure = None
    browser = None
    try:
        status = Status(admin_address(demo, 300), token)

        def ready():
            if demo.poll() is not None:
                raise RuntimeError(f"the demo exited with {demo.returncode} before its core was ready")
            return status.ready()
        wait("the demo's core is ready", ready, 120, 0.5)
        browser = Browser(profile)
        check(browser, status, args.screenshot)
    except Exception as e:  # noqa: BLE001 — every failure is reported the same way
        failure = e
    finally:
        if browser:
            browser.close()
    code = demo.wait()
    if failure:
        print(f"console: FAILED: {failure}", file=sys.stderr)
        sys.exit(1)
    if code != 0:
        sys.exit(code)
    print("console: ok")


if __name__ == "__main__":
    main()
