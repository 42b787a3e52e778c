"""A small Chrome DevTools Protocol client for the browser tests: headless Chromium (Debian's ``chromium``)
driven over ``--remote-debugging-pipe`` (NUL-delimited JSON on fds 3 and 4), so the browser opens no debugging
port and the client needs nothing beyond the standard library.

As root Chromium refuses to start without ``--no-sandbox`` (its own sandbox needs an unprivileged user); the
tests pass it only when running as root. The browser is started by :class:`Browser` and ended by its pid.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import queue
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import machine  # pyright: ignore[reportImplicitRelativeImport]

CHROMIUM = machine.which("chromium") or machine.which("chromium-browser")  # None under EVALKIT_TEST_BARE=1


class CDPError(RuntimeError):
    pass


class Browser:
    def __init__(self, profile: Path, *, width: int = 1400, height: int = 1000) -> None:
        if CHROMIUM is None:
            raise CDPError("chromium is not installed (apt-get install chromium)")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        args = [
            CHROMIUM, "--headless", "--remote-debugging-pipe", f"--user-data-dir={profile}",
            f"--window-size={width},{height}", "--hide-scrollbars", "--no-first-run", "--no-default-browser-check",
            "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--disable-extensions", "--disable-default-apps",
            "--metrics-recording-only", "--no-pings", "--mute-audio", "--password-store=basic",
        ]
        if os.geteuid() == 0:
            args.append("--no-sandbox")  # Chromium's own sandbox cannot run as root
        # the browser reads commands on fd 3 and writes answers on fd 4: bash puts the pipes there (dash cannot
        # redirect a descriptor above 9)
        cmd = ["/bin/bash", "-c", f'exec "$0" "$@" 3<&{to_browser_r} 4>&{from_browser_w}', *args, "about:blank"]
        self.log = profile.parent / f"{profile.name}.log"  # the browser's own messages, for a failing test
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                cmd, pass_fds=(to_browser_r, from_browser_w), stdout=log, stderr=log, start_new_session=True
            )
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._next = 0
        self._lock = threading.Lock()
        self._waiting: dict[int, queue.Queue[dict[str, Any]]] = {}
        self.events: list[dict[str, Any]] = []
        self._events_cv = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    # --- transport ---------------------------------------------------------------------------------------

    def _read(self) -> None:
        buf = b""
        while True:
            try:
                chunk = os.read(self._from_browser, 1 << 16)
            except OSError:
                break
            if not chunk:
                break
            buf += chunk
            while b"\0" in buf:
                raw, buf = buf.split(b"\0", 1)
                msg = json.loads(raw)
                if "id" in msg:
                    with self._lock:
                        box = self._waiting.pop(msg["id"], None)
                    if box is not None:
                        box.put(msg)
                else:
                    with self._events_cv:
                        self.events.append(msg)
                        self._events_cv.notify_all()

    def send(self, method: str, params: dict[str, Any] | None = None, *, session: str | None = None,
             timeout: float = 60.0) -> dict[str, Any]:
        with self._lock:
            self._next += 1
            ident = self._next
            box: queue.Queue[dict[str, Any]] = queue.Queue()
            self._waiting[ident] = box
        msg: dict[str, Any] = {"id": ident, "method": method, "params": params or {}}
        if session is not None:
            msg["sessionId"] = session
        os.write(self._to_browser, json.dumps(msg).encode() + b"\0")
        try:
            reply = box.get(timeout=timeout)
        except queue.Empty:
            raise CDPError(f"{method}: no answer in {timeout} s") from None
        if "error" in reply:
            raise CDPError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    def wait_event(self, method: str, session: str, start: int, timeout: float = 60.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        with self._events_cv:
            while True:
                for e in self.events[start:]:
                    if e.get("method") == method and e.get("sessionId") == session:
                        return e
                left = deadline - time.monotonic()
                if left <= 0:
                    raise CDPError(f"no {method} in {timeout} s")
                self._events_cv.wait(left)

    def close(self) -> None:
        with contextlib.suppress(CDPError, OSError):
            self.send("Browser.close", timeout=5)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the group of the browser this object started
            self.proc.wait(timeout=10)
        for fd in (self._to_browser, self._from_browser):
            with contextlib.suppress(OSError):
                os.close(fd)

    # --- pages -------------------------------------------------------------------------------------------

    def new_page(self) -> Page:
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Network", "Log"):
            self.send(f"{domain}.enable", session=session)
        return Page(self, target, session)


class Page:
    def __init__(self, browser: Browser, target: str, session: str) -> None:
        self.browser, self.target, self.session = browser, target, session
        self.mark = len(browser.events)

    def goto(self, url: str, timeout: float = 90.0) -> None:
        self.mark = len(self.browser.events)
        self.browser.send("Page.navigate", {"url": url}, session=self.session)
        self.browser.wait_event("Page.loadEventFired", self.session, self.mark, timeout)

    def eval(self, expression: str) -> Any:
        reply = self.browser.send(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
            session=self.session,
        )
        if "exceptionDetails" in reply:
            raise CDPError(f"{expression[:80]}: {reply['exceptionDetails']}")
        return reply["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 30.0) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = self.eval(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise CDPError(f"timed out waiting for {expression[:80]}")
            time.sleep(0.1)

    def _mine(self) -> list[dict[str, Any]]:
        return [e for e in self.browser.events[self.mark:] if e.get("sessionId") == self.session]

    def console_errors(self) -> list[str]:
        out: list[str] = []
        for e in self._mine():
            p = e.get("params", {})
            if e["method"] == "Runtime.consoleAPICalled" and p.get("type") in {"error", "assert"}:
                out.append(" ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", [])))
            elif e["method"] == "Runtime.exceptionThrown":
                out.append(str(p.get("exceptionDetails", {}).get("exception", {}).get("description", p)))
            elif e["method"] == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                out.append(str(p["entry"].get("text")))
        return out

    def requests(self) -> list[str]:
        return [e["params"]["request"]["url"] for e in self._mine() if e["method"] == "Network.requestWillBeSent"]

    def failed_requests(self) -> list[str]:
        return [str(e["params"]) for e in self._mine() if e["method"] == "Network.loadingFailed"]

    def screenshot(self, path: Path, *, full: bool = False) -> Path:
        params: dict[str, Any] = {"format": "png"}
        if full:
            size = self.browser.send("Page.getLayoutMetrics", session=self.session)["cssContentSize"]
            params |= {"captureBeyondViewport": True,
                       "clip": {"x": 0, "y": 0, "width": size["width"], "height": min(size["height"], 6000), "scale": 1}}
        data = self.browser.send("Page.captureScreenshot", params, session=self.session)["data"]
        path.write_bytes(base64.b64decode(data))
        return path


def click(page: Page, selector: str) -> None:
    """A real mouse click (pressed and released over the element's centre), as a person would."""
    box = page.eval(
        f"(() => {{ const e = document.querySelector({json.dumps(selector)}); if (!e) return null;"
        " e.scrollIntoView({block: 'center'}); const r = e.getBoundingClientRect();"
        " return [r.left + r.width / 2, r.top + r.height / 2]; })()"
    )
    if box is None:
        raise CDPError(f"no element {selector}")
    x, y = box
    for kind in ("mousePressed", "mouseReleased"):
        page.browser.send("Input.dispatchMouseEvent",
                          {"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1}, session=page.session)


def type_into(page: Page, selector: str, text: str) -> None:
    """Focus the element and type ``text`` into it (input events, as typing makes)."""
    click(page, selector)
    page.browser.send("Input.insertText", {"text": text}, session=page.session)
