"""Open an HTML report in headless Chromium, offline, and say what drew, what failed and what was fetched.

Test tooling, kept out of the package: the browser tests import it as ``browser`` (``tests/`` is on pytest's
path) and ``benchmarks/bench_report.py`` puts ``tests/`` on its path to do the same; it checks any HTML the
toolkit writes. Chromium is driven through the DevTools protocol over ``--remote-debugging-pipe`` (file
descriptors 3 and 4, messages separated by NUL bytes), so only the standard library is needed and no port is
opened. The page is loaded with the network
emulated offline, and every request the page makes is recorded: a self-contained report makes none besides its
own ``file://`` URL (``data:`` URLs, which plotly uses for its own images, are not requests to anywhere).

:func:`check_page` returns a :class:`PageCheck`: per figure whether plotly drew an SVG, how many traces are
visible and whether each has data and drawn marks; the console errors, uncaught exceptions and log errors; the
requests; the report's own progress record (``window.kmeansReport``) and its render time.
:func:`static_external_references` scans the HTML text itself for attributes and styles that point elsewhere.
"""

from __future__ import annotations

import base64
import html.parser
import json
import os
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

#: The flags the project's tests start Chromium with (plus the DevTools pipe).
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-extensions",
    "--disable-default-apps",
    "--mute-audio",
    "--hide-scrollbars",
    "--window-size=1280,900",
)


def find_chromium() -> str | None:
    """``$KMEANS_CHROMIUM``, else the first of chromium / chromium-browser / google-chrome on ``PATH``."""
    env = os.environ.get("KMEANS_CHROMIUM")
    if env:
        return env if os.access(env, os.X_OK) else None
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return "/usr/bin/chromium" if os.access("/usr/bin/chromium", os.X_OK) else None


class ChromiumError(RuntimeError):
    pass


def _high_fd(fd: int) -> int:
    """A duplicate of ``fd`` numbered 10 or above (the original is closed)."""
    import fcntl

    high = fcntl.fcntl(fd, fcntl.F_DUPFD, 10)
    os.close(fd)
    return high


class Chromium:
    """A headless Chromium with a DevTools session over a pipe. Use as a context manager."""

    def __init__(self, executable: str | None = None, timeout: float = 60.0):
        exe = executable or find_chromium()
        if exe is None:
            raise ChromiumError("no Chromium found (set KMEANS_CHROMIUM or install the chromium package)")
        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix="kmeans-chromium-")
        self._log = open(os.path.join(self.profile, "stderr.log"), "wb")
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()
        # Move the child's ends above 9 so that dup2 onto 3 and 4 cannot clobber one with the other.
        to_child_r, from_child_w = (_high_fd(fd) for fd in (to_child_r, from_child_w))
        # Chromium reads commands on fd 3 and writes replies on fd 4; a tiny trampoline moves our pipe ends there
        # (a POSIX shell cannot name descriptors above 9, and preexec_fn is unsafe once threads exist).
        argv = [exe, *CHROMIUM_FLAGS, f"--user-data-dir={self.profile}", "--remote-debugging-pipe", "about:blank"]
        trampoline = (f"import os, sys; os.dup2({to_child_r}, 3); os.dup2({from_child_w}, 4); "
                      f"os.close({to_child_r}); os.close({from_child_w}); os.execv(sys.argv[1], sys.argv[1:])")
        cmd = [sys.executable, "-c", trampoline, *argv]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log,
                                     pass_fds=(to_child_r, from_child_w))
        os.close(to_child_r)
        os.close(from_child_w)
        self._next_id = 0
        self._replies: dict[int, dict] = {}
        self._events: list[dict] = []
        self._targets: dict[str, str] = {}
        self._inbox: queue.Queue = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.version = self.send("Browser.getVersion")

    # --------------------------------------------------------------------------------------- protocol plumbing

    def _read(self) -> None:
        buf = b""
        while True:
            try:
                chunk = os.read(self._from_child, 1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                self._inbox.put(None)
                return
            buf += chunk
            while b"\0" in buf:
                raw, buf = buf.split(b"\0", 1)
                self._inbox.put(json.loads(raw))

    def _pump(self, deadline: float) -> bool:
        """Move one message from the reader into replies/events; False on timeout."""
        try:
            msg = self._inbox.get(timeout=max(0.0, min(0.2, deadline - time.monotonic())))
        except queue.Empty:
            return False
        if msg is None:
            self._log.flush()
            tail = Path(self._log.name).read_text(errors="replace").strip().splitlines()[-3:]
            raise ChromiumError(f"Chromium closed the DevTools pipe (exit code {self.proc.poll()}): "
                                + " | ".join(tail))
        if "id" in msg:
            self._replies[msg["id"]] = msg
        else:
            self._events.append(msg)
        return True

    def send(self, method: str, params: dict | None = None, session: str | None = None,
             timeout: float | None = None) -> dict:
        self._next_id += 1
        msg = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._to_child, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + (timeout or self.timeout)
        while self._next_id not in self._replies:
            if time.monotonic() > deadline:
                raise ChromiumError(f"no reply to {method} within {timeout or self.timeout:.0f} s")
            self._pump(deadline)
        reply = self._replies.pop(self._next_id)
        if "error" in reply:
            raise ChromiumError(f"{method}: {reply['error'].get('message')}")
        return reply.get("result", {})

    def events(self, session: str | None = None, method: str | None = None) -> list[dict]:
        return [e for e in self._events if (session is None or e.get("sessionId") == session)
                and (method is None or e.get("method") == method)]

    def wait_for_event(self, method: str, session: str | None = None, timeout: float | None = None) -> dict:
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            found = self.events(session, method)
            if found:
                return found[-1]
            if time.monotonic() > deadline:
                raise ChromiumError(f"no {method} within {timeout or self.timeout:.0f} s")
            self._pump(deadline)

    def drain(self, seconds: float) -> None:
        """Collect events for ``seconds``."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self._pump(deadline)

    def evaluate(self, session: str, expression: str, await_promise: bool = False):
        res = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                             "awaitPromise": await_promise}, session)
        if "exceptionDetails" in res:
            raise ChromiumError(f"evaluation failed: {res['exceptionDetails'].get('text')}")
        return res.get("result", {}).get("value")

    # --------------------------------------------------------------------------------------------- pages

    def open(self, url: str, width: int = 1280, height: int = 900, offline: bool = True) -> str:
        """A new tab with network and console recording on, navigated to ``url``; returns its session id."""
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self._targets[session] = target
        for domain in ("Runtime", "Log", "Network", "Page"):
            self.send(f"{domain}.enable", session=session)
        if offline:
            self.send("Network.emulateNetworkConditions", {"offline": True, "latency": 0, "downloadThroughput": -1,
                                                           "uploadThroughput": -1}, session)
        self.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1,
                                                         "mobile": False}, session)
        self.send("Page.navigate", {"url": url}, session)
        self.wait_for_event("Page.loadEventFired", session)
        return session

    def close_tab(self, session: str) -> None:
        """Close the tab of ``session`` and forget its events."""
        target = self._targets.pop(session, None)
        if target is not None:
            self.send("Target.closeTarget", {"targetId": target})
        self._events = [e for e in self._events if e.get("sessionId") != session]

    def screenshot(self, session: str, path: str | os.PathLike, full_page: bool = True) -> Path:
        params: dict = {"format": "png"}
        if full_page:
            size = self.send("Page.getLayoutMetrics", session=session)["cssContentSize"]
            params.update(captureBeyondViewport=True,
                          clip={"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1})
        data = self.send("Page.captureScreenshot", params, session, timeout=120)["data"]
        path = Path(path)
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                try:
                    self.send("Browser.close", timeout=5)
                except ChromiumError:
                    pass
                try:
                    self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(timeout=10)
        finally:
            for fd in (self._to_child, self._from_child):
                try:
                    os.close(fd)
                except OSError:
                    pass
            self._log.close()
            shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> "Chromium":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# ------------------------------------------------------------------------------------------------ inspection

#: Marks plotly draws for each trace type (plotly.js 2.x-4.x class names).
MARK_SELECTORS = {
    "scatter": ".scatterlayer .trace path.point, .scatterlayer .trace path.js-line",
    "heatmap": ".heatmaplayer .hm image",
    "bar": ".barlayer .trace .point path",
    "table": ".table .cell-text",
}

_INSPECT_JS = r"""
(function (selectors) {
  function size(t) {
    if (t.type === "table") {
      var v = (t.cells && t.cells.values) || [];
      return v.length ? v.length * (v[0] ? v[0].length : 0) : 0;
    }
    if (t.type === "heatmap") { return t.z ? t.z.length : 0; }
    var a = t.x || t.y || [];
    return a.length || 0;
  }
  var seen = new Set();
  var nodes = Array.prototype.slice.call(document.querySelectorAll("div.plot[data-figure], .js-plotly-plot"));
  var out = [];
  nodes.forEach(function (gd) {
    if (seen.has(gd)) { return; }
    seen.add(gd);
    var full = gd._fullData || [];
    var visible = full.filter(function (t) { return t.visible === true; });
    var marks = {};
    Object.keys(selectors).forEach(function (type) { marks[type] = gd.querySelectorAll(selectors[type]).length; });
    out.push({
      id: gd.id || null,
      view: gd.getAttribute("data-view"),
      svg: !!gd.querySelector("svg.main-svg"),
      plotted: !!gd._fullLayout,
      n_data: (gd.data || []).length,
      visible: visible.map(function (t) { return {type: t.type, name: t.name || "", size: size(t)}; }),
      // Traces the figure asks to show that plotly refused to draw (empty or invalid data).
      rejected: full.filter(function (t) {
        var asked = (gd.data || [])[t.index] || {};
        return (asked.visible === undefined || asked.visible === true) && t.visible !== true;
      }).map(function (t) { return {type: t.type, name: t.name || ""}; }),
      marks: marks,
      failed: gd.classList.contains("failed")
    });
  });
  return {figures: out, state: window.kmeansReport || null};
})
"""


@dataclass
class FigureCheck:
    id: str | None
    view: str | None
    svg: bool
    plotted: bool
    visible: list[dict]
    marks: dict[str, int]
    failed: bool
    rejected: list[dict] = field(default_factory=list)

    def problems(self) -> list[str]:
        name = self.view or self.id or "figure"
        out = []
        if self.failed:
            out.append(f"{name}: the page reports it failed to draw")
        if not self.svg or not self.plotted:
            out.append(f"{name}: plotly drew no SVG")
        if not self.visible:
            out.append(f"{name}: no visible trace")
        for t in self.visible:
            if t["size"] == 0:
                out.append(f"{name}: visible {t['type']} trace {t['name']!r} has no data")
        for t in self.rejected:
            out.append(f"{name}: {t['type']} trace {t['name']!r} was not drawn (plotly found no valid data)")
        for kind in {t["type"] for t in self.visible}:
            if kind in MARK_SELECTORS and self.marks.get(kind, 0) == 0:
                out.append(f"{name}: no {kind} marks were drawn")
        return out


@dataclass
class PageCheck:
    """What happened when a page was opened offline in Chromium."""

    url: str
    figures: list[FigureCheck]
    console_errors: list[str]
    exceptions: list[str]
    log_errors: list[str]
    requests: list[str]
    state: dict | None
    load_ms: float
    warnings: list[str] = field(default_factory=list)
    #: The value of ``check_page``'s ``read`` expression on the drawn page (None when none was given).
    read: object = None

    @property
    def external_requests(self) -> list[str]:
        """Requests to anything but the page itself (and ``data:``/``blob:``/``about:`` URLs)."""
        return [u for u in self.requests
                if u != self.url and not u.split(":", 1)[0] in ("data", "blob", "about", "chrome-error")]

    def problems(self) -> list[str]:
        out = [p for f in self.figures for p in f.problems()]
        out += [f"console error: {m}" for m in self.console_errors]
        out += [f"uncaught exception: {m}" for m in self.exceptions]
        out += [f"log error: {m}" for m in self.log_errors]
        out += [f"network request: {u}" for u in self.external_requests]
        if self.state is not None:
            if not self.state.get("done"):
                out.append(f"the report did not finish drawing ({self.state.get('rendered')} of "
                           f"{self.state.get('total')} figures)")
            if self.state.get("failed"):
                out.append(f"figures that failed: {', '.join(self.state['failed'])}")
            if self.state.get("total") != len(self.figures):
                out.append(f"the report announces {self.state.get('total')} figures, the page holds "
                           f"{len(self.figures)}")
        return out


def _remote_text(obj: dict) -> str:
    if "value" in obj:
        return str(obj["value"])
    return obj.get("description") or obj.get("unserializableValue") or obj.get("type", "?")


def wait_drawn(browser: Chromium, session: str, timeout: float) -> bool:
    """Wait until the page of ``session`` has drawn every figure (``window.kmeansReport.done``; a page without that
    record, once loaded, has nothing more to draw): False if ``timeout`` seconds passed first."""
    deadline = time.monotonic() + timeout
    while browser.evaluate(session, "window.kmeansReport ? window.kmeansReport.done : null") is False:
        if time.monotonic() > deadline:
            return False
        browser.drain(0.1)
    return True


def check_page(path: str | os.PathLike, browser: Chromium | None = None, timeout: float = 60.0,
               settle: float = 0.5, screenshot: str | os.PathLike | None = None, read: str | None = None,
               await_promise: bool = False) -> PageCheck:
    """Open ``path`` offline in headless Chromium, wait until it has drawn, and inspect it.

    A report page is done when ``window.kmeansReport.done`` is true; any other page is inspected once its load
    event has fired and ``settle`` seconds have passed. ``read``, a JavaScript expression, is evaluated on the same
    drawn page (its value in :attr:`PageCheck.read`): a test that inspects a page and reads it opens it once, since
    each opening of a report compiles plotly.js again (about 2 s of Chromium's time).
    """
    own = browser is None
    browser = browser or Chromium(timeout=timeout)
    session = None
    try:
        url = Path(path).resolve().as_uri()
        t0 = time.monotonic()
        session = browser.open(url)
        wait_drawn(browser, session, timeout)  # a page that did not finish is one of the problems its state shows
        load_ms = (time.monotonic() - t0) * 1e3
        browser.drain(settle)
        result = browser.evaluate(session, f"{_INSPECT_JS}({json.dumps(MARK_SELECTORS)})")
        value = None if read is None else browser.evaluate(session, read, await_promise)
        if screenshot is not None:
            browser.screenshot(session, screenshot)
        console, warns = [], []
        for e in browser.events(session, "Runtime.consoleAPICalled"):
            text = " ".join(_remote_text(a) for a in e["params"].get("args", []))
            (console if e["params"]["type"] in ("error", "assert") else warns if e["params"]["type"] == "warning"
             else []).append(text)
        exceptions = []
        for e in browser.events(session, "Runtime.exceptionThrown"):
            det = e["params"]["exceptionDetails"]
            exceptions.append(det.get("exception", {}).get("description") or det.get("text", "exception"))
        log_errors = [e["params"]["entry"].get("text", "") for e in browser.events(session, "Log.entryAdded")
                      if e["params"]["entry"].get("level") == "error"]
        requests = [e["params"]["request"]["url"] for e in browser.events(session, "Network.requestWillBeSent")]
        figures = [FigureCheck(f["id"], f["view"], f["svg"], f["plotted"], f["visible"], f["marks"], f["failed"],
                               f["rejected"]) for f in result["figures"]]
        return PageCheck(url, figures, console, exceptions, log_errors, requests, result["state"], load_ms, warns,
                         value)
    finally:
        if own:
            browser.close()
        elif session is not None:
            browser.close_tab(session)


# ----------------------------------------------------------------------------------------------- static scan

#: Attributes through which a browser fetches (or navigates to) another resource.
_URL_ATTRIBUTES = {"src", "href", "srcset", "poster", "data", "action", "formaction", "background", "xlink:href",
                   "manifest", "ping", "codebase", "longdesc", "lowsrc", "dynsrc", "icon", "content"}
_LOCAL = re.compile(r"^\s*(#|data:|about:blank)", re.I)
_CSS_URL = re.compile(r"url\(\s*(['\"]?)(.*?)\1\s*\)|@import\s+(['\"])(.*?)\3", re.I | re.S)
_URL_IN_JSON = re.compile(r"(?:https?:|ftp:|wss?:)?//[\w.-]+\.[a-z]{2,}[^\s\"']*", re.I)


class _Scanner(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.found: list[str] = []
        self._in: str | None = None
        self._script_type = ""

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        for name, value in attrs.items():
            if value is None:
                continue
            if name == "style":
                self._css(value, f"<{tag} style>")
            elif name in _URL_ATTRIBUTES:
                if name == "content" and not (tag == "meta" and (attrs.get("http-equiv") or "").lower() == "refresh"):
                    continue
                if not _LOCAL.match(value):
                    self.found.append(f"<{tag} {name}={value[:120]!r}>")
        if tag in ("style", "script"):
            self._in = tag
            self._script_type = (attrs.get("type") or "").lower()

    def handle_endtag(self, tag):
        if tag == self._in:
            self._in = None

    def handle_data(self, data):
        if self._in == "style":
            self._css(data, "<style>")
        elif self._in == "script" and "json" in self._script_type:
            # Figure data is plain numbers and words; an address in it would be fetched by plotly (images).
            self.found.extend(f"URL in embedded JSON: {m.group(0)[:120]}" for m in _URL_IN_JSON.finditer(data))

    def _css(self, text, where):
        for m in _CSS_URL.finditer(text):
            target = m.group(2) if m.group(2) is not None else m.group(4)
            if not _LOCAL.match(target or ""):
                self.found.append(f"{where} refers to {target[:120]!r}")


def static_external_references(html_text: str) -> list[str]:
    """Every attribute, style or embedded-JSON value of ``html_text`` that points outside the file.

    JavaScript source is not scanned: plotly.js carries URLs in comments and strings (its licence, links it
    never follows unless asked to). Whether the page *fetches* anything is what :func:`check_page` records.
    """
    scanner = _Scanner()
    scanner.feed(html_text)
    scanner.close()
    return scanner.found
