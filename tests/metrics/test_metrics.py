#!/usr/bin/env python3
"""The server's --metrics endpoint and --log-format json, against real tools
(issue 18). One case per run, by name, printing TAP:

  promtool    Debian's `promtool check metrics` accepts /metrics, before and
              during training; the names the issue lists are there.
  prometheus  Debian's real `prometheus` (loopback, a temp data dir, scrape
              interval 1 s) scrapes a server training with two clients; the
              training metrics are read back through its HTTP API.
  dashboard   headless Chromium (Debian's `chromium`, driven over the
              DevTools protocol with python3-websocket) loads the dashboard
              during a run, waits until the Gantt and the curves have data,
              saves a screenshot, checks the page's values against
              /api/state.json and that the page raised no JavaScript error.
  hostile     unknown paths, other methods, huge headers and many
              connections get errors; training finishes undisturbed; nothing
              served names a path or a key.
  logjson     --log-format json: every line of both daemons is one JSON
              object with time, level, component, message, fields; the text
              format is unchanged.

"1..0 # SKIP" only when the tool a case needs is not installed. Needs
PL_BUILD_DIR (meson sets it)."""
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

BUILD = os.environ.get("PL_BUILD_DIR", "build")
SERVER = os.path.join(BUILD, "server", "pipelearn-server")
CLIENT = os.path.join(BUILD, "client", "pipelearn-client")

#  A short synthetic run: ~0.5-1.5 s per epoch on loopback on the AMD
#  hosts, 0.25 s on an Intel Xeon (AVX-512). A case that reads the endpoint
#  while the run trains sizes its run by LONG_SAMPLES, not by its epochs:
#  12 epochs of 800 samples were over in 3 s there, before the reads.
LONG_SAMPLES = 4000
CONFIG = {"model": "vgg5", "dataset": "synthetic", "samples": 800, "test_samples": 100,
          "batch_size": 40, "seed": 5, "split_point": 2, "micro_batches": 4,
          "threads": 1, "devices": 2}

tests_run = 0
failed = 0


def ok(cond, what):
    global tests_run, failed
    tests_run += 1
    print("%s %d - %s" % ("ok" if cond else "not ok", tests_run, what), flush=True)
    if not cond:
        failed += 1
    return cond


def diag(text):
    for line in str(text).splitlines():
        print("# " + line, flush=True)


def skip_all(why):
    print("1..0 # SKIP %s" % why, flush=True)
    sys.exit(0)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(url, timeout=5, method="GET", headers=None):
    req = urllib.request.Request(url, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def stop_process(p):
    """SIGTERM p (a tool the test started), SIGKILL after 20 s."""
    if p is None or p.poll() is not None:
        return
    p.terminate()
    try:
        p.wait(timeout=20)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


class Run:
    """A server with --metrics on an OS-chosen port and two clients."""

    def __init__(self, tmp, epochs, extra_server=(), extra_client=(), devices=2,
                 metrics=True, start=True, config=None):
        self.dir = tmp
        self.procs = []
        cfg = dict(CONFIG, epochs=epochs, devices=devices, **(config or {}))
        path = os.path.join(tmp, "config.json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        self.results = os.path.join(tmp, "results")
        ep = os.path.join(tmp, "endpoint")
        self.server_log = os.path.join(tmp, "server.log")
        self.server = self._spawn(
            [SERVER, "--config", path, "--insecure", "--bind", "tcp://127.0.0.1:0",
             "--endpoint-file", ep, "--results", self.results, "--quiet"]
            + (["--metrics", "0"] if metrics else []) + list(extra_server), self.server_log)
        self.port = None if metrics else 0
        deadline = time.time() + 60
        while time.time() < deadline and (self.port is None or not os.path.exists(ep)):
            m = re.search(r"serving http://127\.0\.0\.1:(\d+)/", self.log())
            if m:
                self.port = int(m.group(1))
            if self.server.poll() is not None:
                break
            time.sleep(0.05)
        if self.port is None or not os.path.exists(ep):
            raise RuntimeError("server did not start:\n" + self.log())
        self.url = "http://127.0.0.1:%d" % self.port
        self.endpoint = open(ep).read().strip()
        self.devices, self.extra_client = devices, list(extra_client)
        self.clients = []
        if start:
            self.start_clients()

    def start_clients(self):
        """The devices: the run starts when they have joined (until then
        the server waits for them, serving its metrics)."""
        for i in range(self.devices):
            self.clients.append(self._spawn(
                [CLIENT, "--connect", self.endpoint, "--insecure", "--device-id", str(i)]
                + self.extra_client, os.path.join(self.dir, "client%d.log" % i)))

    def _spawn(self, argv, log):
        f = open(log, "w")
        p = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT,
                             env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
        self.procs.append(p)
        return p

    def log(self, name="server.log"):
        try:
            return open(os.path.join(self.dir, name), errors="replace").read()
        except OSError:
            return ""

    def state(self):
        status, body = http(self.url + "/api/state.json")
        return json.loads(body) if status == 200 else None

    def wait_state(self, cond, timeout):
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                s = self.state()
                if s and cond(s):
                    return s
            except (OSError, ValueError):
                pass
            if self.server.poll() is not None:
                return None
            time.sleep(0.2)
        return None

    def wait(self, timeout=180):
        try:
            return self.server.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self):
        for p in self.procs:
            stop_process(p)


def summary_epochs(run):
    try:
        with open(os.path.join(run.results, "summary.json")) as f:
            return json.load(f)["epochs"]
    except (OSError, ValueError, KeyError):
        return []


#  ---------------------------------------------------------------------

EXPECTED = [
    "pipelearn_run_info", "pipelearn_split_point", "pipelearn_epoch",
    "pipelearn_epochs_completed_total", "pipelearn_epoch_iterations_done",
    "pipelearn_train_loss", "pipelearn_train_accuracy_ratio",
    "pipelearn_test_accuracy_ratio", "pipelearn_server_busy_seconds_total",
    "pipelearn_server_idle_seconds_total", "pipelearn_server_worker_busy_seconds_total",
    "pipelearn_server_worker_idle_seconds_total", "pipelearn_device_forward_seconds_total",
    "pipelearn_device_backward_seconds_total", "pipelearn_device_idle_seconds_total",
    "pipelearn_device_uplink_bytes_total", "pipelearn_device_downlink_bytes_total",
    "pipelearn_device_rtt_seconds", "pipelearn_device_uplink_bytes_per_second",
    "pipelearn_device_downlink_bytes_per_second", "pipelearn_device_queue_depth",
    "pipelearn_device_micro_batches", "pipelearn_device_split_point",
    "pipelearn_device_drops_total",
    "pipelearn_device_rejoins_total", "pipelearn_refused_peers_total",
    "pipelearn_checkpoint_age_seconds", "process_resident_memory_bytes",
    "process_cpu_seconds_total",
]


def device_samples(text, name):
    """{device label: value} of a per-device gauge in an exposition."""
    return {m.group(1): int(float(m.group(2))) for m in re.finditer(
        r'^%s\{device="(\d+)"\} ([0-9.e+-]+)$' % name, text, re.M)}


def promtool_check(text, tmp, name):
    path = os.path.join(tmp, name)
    with open(path, "wb") as f:
        f.write(text)
    with open(path, "rb") as f:
        r = subprocess.run(["promtool", "check", "metrics"], stdin=f,
                           capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        diag(r.stdout + r.stderr)
    return r.returncode == 0


def case_promtool(tmp):
    if not shutil.which("promtool"):
        skip_all("promtool not installed (Debian package prometheus)")
    print("1..10", flush=True)
    # Long enough to be read while it trains, on a quiet host too. The
    # devices train at split points 1 and 3, and device 1 moves to 2 before
    # epoch 3 (split_point_moves): each device's split point is its own
    # sample, before and after the move.
    run = Run(tmp, epochs=12, config={
        "samples": LONG_SAMPLES, "split_point": [1, 3],
        "split_point_moves": [{"epoch": 3, "device": 1, "split_point": 2}]})
    try:
        status, before = http(run.url + "/metrics")
        ok(status == 200 and promtool_check(before, tmp, "before.txt"),
           "promtool check metrics accepts the exposition at start")
        got = device_samples(before.decode(), "pipelearn_device_split_point")
        ok(got == {"0": 1, "1": 3}, "each device's split point at start (%s)" % got)
        s = run.wait_state(lambda s: s["run"]["epochs_completed"] >= 1, 120)
        ok(s is not None, "an epoch completes (state.json says so)")
        status, during = http(run.url + "/metrics")
        ok(status == 200 and promtool_check(during, tmp, "during.txt"),
           "promtool check metrics accepts the exposition during training")
        text = during.decode()
        missing = [n for n in EXPECTED if not re.search(r"^%s[{ ]" % n, text, re.M)]
        ok(not missing, "every metric the issue lists is exposed (missing: %s)" % missing)
        ok(re.search(r'^pipelearn_device_forward_seconds_total\{device="1"\} [0-9.e+-]+$',
                     text, re.M) is not None, "per-device samples carry a device label")
        ok(re.search(r'^pipelearn_server_worker_busy_seconds_total\{worker="0"\} [0-9.e+-]+$',
                     text, re.M) is not None, "per-worker samples carry a worker label")
        s = run.wait_state(lambda s: s["run"]["epoch"] >= 3, 120)
        status, moved = http(run.url + "/metrics")
        got = device_samples(moved.decode(), "pipelearn_device_split_point")
        micro = device_samples(moved.decode(), "pipelearn_device_micro_batches")
        ok(s is not None and got == {"0": 1, "1": 2} and micro == {"0": 4, "1": 4},
           "after the move: split points %s, micro-batches %s" % (got, micro))
        now = run.state()
        got = now and [d.get("split_point") for d in now["devices"]]
        ok(got == [1, 2], "state.json's devices say the same (%s)" % got)
        rc = run.wait(180)
        ok(rc == 0 and len(summary_epochs(run)) == 12, "the run finishes (rc %s)" % rc)
    finally:
        run.stop()


def case_prometheus(tmp):
    if not shutil.which("prometheus"):
        skip_all("prometheus not installed (Debian package prometheus)")
    print("1..5", flush=True)
    # The devices start once Prometheus scrapes the waiting server, and the
    # figures are read with max_over_time: on a quiet host the whole run
    # takes a few seconds (CI once finished it before the first scrape),
    # and after the server exits its series are marked stale.
    run = Run(tmp, epochs=30, start=False)
    prom = None
    try:
        web = free_port()
        cfg = os.path.join(tmp, "prometheus.yml")
        with open(cfg, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                    "scrape_configs:\n  - job_name: pipelearn\n"
                    "    static_configs:\n      - targets: ['127.0.0.1:%d']\n" % run.port)
        data = os.path.join(tmp, "prometheus-data")
        plog = open(os.path.join(tmp, "prometheus.log"), "w")
        prom = subprocess.Popen(
            ["prometheus", "--config.file=" + cfg, "--storage.tsdb.path=" + data,
             "--web.listen-address=127.0.0.1:%d" % web, "--storage.tsdb.retention.time=1h"],
            stdout=plog, stderr=subprocess.STDOUT)
        api = "http://127.0.0.1:%d/api/v1/" % web

        def query(q):
            status, body = http(api + "query?query=" + urllib.request.quote(q))
            if status != 200:
                return []
            return json.loads(body)["data"]["result"]

        def target_up():
            status, body = http(api + "targets")
            if status != 200:
                return False
            t = json.loads(body)["data"]["activeTargets"]
            return any(x["health"] == "up" for x in t)

        deadline = time.time() + 60
        up = False
        while time.time() < deadline and not up:
            try:
                up = target_up()
            except (OSError, ValueError):
                pass
            time.sleep(0.5)
        ok(up, "prometheus scrapes the server (target up)")
        run.start_clients()
        got = None
        deadline = time.time() + 150
        while time.time() < deadline:
            try:
                r = query("max_over_time(pipelearn_epochs_completed_total[10m])")
                if r and float(r[0]["value"][1]) >= 2:
                    got = r
                    break
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.5)
        ok(got is not None, "pipelearn_epochs_completed_total >= 2 read back through the API")
        fwd = query("max_over_time(pipelearn_device_forward_seconds_total[10m])")
        devices = sorted(x["metric"].get("device") for x in fwd)
        ok(devices == ["0", "1"] and all(float(x["value"][1]) > 0 for x in fwd),
           "per-device forward seconds for devices 0 and 1 (%s)" % devices)
        acc = query("max_over_time(pipelearn_train_accuracy_ratio[10m])")
        ok(acc and 0 <= float(acc[0]["value"][1]) <= 1,
           "train accuracy in 0..1 through the API (%s)" % (acc[0]["value"][1] if acc else None))
        rate = query("rate(pipelearn_device_uplink_bytes_total[30s])")
        rc = run.wait(240)
        ok(rc == 0, "the run finishes while prometheus scrapes it (rc %s; uplink rate "
           "series: %d)" % (rc, len(rate)))
    finally:
        stop_process(prom)
        run.stop()


#  ---------------------------------------------------------------------
#  Chromium over the DevTools protocol

class Cdp:
    def __init__(self, ws_url):
        import websocket  # python3-websocket
        self.ws = websocket.create_connection(ws_url, timeout=30, suppress_origin=True)
        self.next_id = 0
        self.events = []

    def call(self, method, session=None, **params):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        self.ws.send(json.dumps(msg))
        while True:
            reply = json.loads(self.ws.recv())
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError("%s: %s" % (method, reply["error"]))
                return reply.get("result", {})
            self.events.append(reply)

    def evaluate(self, session, expr):
        r = self.call("Runtime.evaluate", session, expression=expr, returnByValue=True,
                      awaitPromise=True)
        return r.get("result", {}).get("value")


def case_dashboard(tmp):
    browser = shutil.which("chromium")
    if not browser:
        skip_all("chromium not installed (Debian package chromium)")
    try:
        import websocket  # noqa: F401
    except ImportError:
        skip_all("python3-websocket not installed")
    print("1..7", flush=True)
    run = Run(tmp, epochs=200)   # stopped at the end; on a quiet host an epoch is ~0.3 s
    chrome = None
    try:
        profile = os.path.join(tmp, "chromium-profile")
        os.mkdir(profile)
        chrome = subprocess.Popen(
            [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--user-data-dir=" + profile,
             "--remote-debugging-port=0", "--window-size=1280,1000", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        ws_url = None
        deadline = time.time() + 60
        while time.time() < deadline and not ws_url:
            line = chrome.stderr.readline()
            if not line and chrome.poll() is not None:
                break
            m = re.search(r"DevTools listening on (ws://\S+)", line)
            if m:
                ws_url = m.group(1)
        if not ok(ws_url is not None, "chromium starts headless with DevTools"):
            return
        threading.Thread(target=lambda: chrome.stderr.read(), daemon=True).start()
        cdp = Cdp(ws_url)
        target = cdp.call("Target.createTarget", url="about:blank")["targetId"]
        session = cdp.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        cdp.call("Runtime.enable", session)
        cdp.call("Log.enable", session)
        cdp.call("Page.enable", session)
        cdp.call("Page.navigate", session, url=run.url + "/")
        ready = None
        deadline = time.time() + 150
        while time.time() < deadline:
            ready = cdp.evaluate(session, """(function () {
                var g = document.getElementById('gantt'), c = document.getElementById('curves');
                return { events: +(g && g.getAttribute('data-events') || 0),
                         points: +(c && c.getAttribute('data-points') || 0),
                         updates: +(document.documentElement.getAttribute('data-updates') || 0),
                         errors: (window.plErrors || []).slice() };
            })()""")
            if ready and ready["events"] > 0 and ready["points"] >= 6 and ready["updates"] >= 3:
                break
            time.sleep(0.5)
        diag("page: %s" % ready)
        ok(ready and ready["events"] > 0, "the Gantt draws pipeline events")
        ok(ready and ready["points"] >= 6, "the curves draw at least two epochs")
        shot = cdp.call("Page.captureScreenshot", session, format="png")["data"]
        import base64
        png = os.path.join(os.environ.get("PL_SCREENSHOT_DIR", tmp), "dashboard.png")
        with open(png, "wb") as f:
            f.write(base64.b64decode(shot))
        diag("screenshot: %s" % png)
        ok(os.path.getsize(png) > 10000, "a screenshot is saved (%d bytes)" % os.path.getsize(png))
        # The page shows the JSON it fetched, and that JSON is live: newer
        # than the server's state 2.5 s (2.5 page refreshes) before the
        # read, no newer than its state after it. (Read at one instant,
        # the two differ whenever an epoch is shorter than the refresh:
        # CI saw page epoch 6, server epoch 8.)
        before = run.state()
        time.sleep(2.5)
        page = cdp.evaluate(session, """(function () {
            return { epoch: +document.getElementById('v-epoch').textContent,
                     state: window.plState }; })()""")
        live = run.state()
        ok(page and before and live and page["state"]["run"]["mode"] == "pipelearn"
           and page["epoch"] == page["state"]["run"]["epoch"]
           and before["run"]["epochs_completed"] <= page["state"]["run"]["epochs_completed"]
           <= live["run"]["epochs_completed"]
           and len(page["state"]["devices"]) == 2,
           "the page shows the live state (epochs completed: server %s, page %s, server %s)"
           % (before and before["run"]["epochs_completed"],
              page and page["state"]["run"]["epochs_completed"],
              live and live["run"]["epochs_completed"]))
        gantt_rows = cdp.evaluate(session, """Array.from(document.querySelectorAll(
            '#gantt text')).map(function (t) { return t.textContent; })""") or []
        ok(all(("device%d" % i) in gantt_rows for i in (0, 1)),
           "the Gantt has a lane per device (%s)" % gantt_rows[:8])
        exceptions = [e for e in cdp.events if e.get("method") == "Runtime.exceptionThrown"]
        errors = [e for e in cdp.events if e.get("method") == "Log.entryAdded"
                  and e["params"]["entry"]["level"] == "error"]
        page_errors = cdp.evaluate(session, "window.plErrors") or []
        diag("exceptions %s; console errors %s; page errors %s"
             % (exceptions[:3], errors[:3], page_errors[:3]))
        ok(not exceptions and not errors and not page_errors, "the page raised no JavaScript error")
        cdp.call("Target.closeTarget", targetId=target)
    finally:
        stop_process(chrome)
        run.stop()


#  ---------------------------------------------------------------------

def raw_request(port, data, timeout=5):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(data)
        got = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
        return got
    except (ConnectionResetError, BrokenPipeError, socket.timeout):
        return b""
    finally:
        s.close()


def case_hostile(tmp):
    print("1..9", flush=True)
    run = Run(tmp, epochs=8, config={"samples": LONG_SAMPLES})
    held = []
    try:
        ok(run.wait_state(lambda s: s["run"]["started"], 60) is not None, "training starts")
        codes = [http(run.url + p)[0] for p in ("/nope", "/metrics/", "/../etc/passwd",
                                                "/api/state.json?x=1#", "/api", "/results")]
        ok(codes[0] == 404 and codes[1] == 404 and codes[2] == 404 and codes[4] == 404
           and codes[5] == 404, "unknown paths get 404 (%s)" % codes)
        ok(http(run.url + "/metrics", method="POST")[0] == 405
           and http(run.url + "/", method="DELETE")[0] == 405, "other methods get 405")
        big = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 200000 + b"\r\n\r\n"
        reply = raw_request(run.port, big)
        status = reply.split(b"\r\n", 1)[0]
        ok(reply == b"" or re.match(rb"HTTP/1\.[01] (4\d\d)", status),
           "a 200 KB header gets an error or a closed connection (%r)" % status[:40])
        garbage = raw_request(run.port, b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" * 50
                              + b"\r\n\r\n")
        ok(not garbage.startswith(b"HTTP/1.1 200"), "a TLS hello / garbage gets no 200")
        # Many connections at once, held open: the server caps them.
        refused = 0
        for _ in range(200):
            try:
                s = socket.create_connection(("127.0.0.1", run.port), timeout=2)
                s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")   # never finished
                held.append(s)
            except OSError:
                refused += 1
        # The server closes what is over its cap as it accepts them: looked
        # at again until enough are (up to 10 s on a loaded host).
        closed, open_ = 0, list(held)
        deadline = time.monotonic() + 10
        while open_ and refused + closed < 150 and time.monotonic() < deadline:
            time.sleep(0.2)
            still = []
            for s in open_:
                try:
                    s.settimeout(0.01)
                    if s.recv(1) == b"":
                        closed += 1
                    else:
                        still.append(s)
                except socket.timeout:
                    still.append(s)
                except OSError:
                    closed += 1
            open_ = still
        diag("200 half-open connections: %d refused, %d closed by the server" % (refused, closed))
        ok(refused + closed >= 150, "most of 200 held connections are refused or closed")
        for s in held:
            s.close()
        held = []
        time.sleep(0.5)
        status, body = http(run.url + "/metrics")
        ok(status == 200, "/metrics still answers after the flood")
        rc = run.wait(240)
        ok(rc == 0 and len(summary_epochs(run)) == 8,
           "training finished all 8 epochs undisturbed (rc %s)" % rc)
        # What was served: the results directory's name, no path, no key.
        served = body.decode(errors="replace")
        leaks = [w for w in (run.results, tmp, "secret", "BEGIN", "curve_secret")
                 if w in served]
        ok(not leaks and 'results_dir="results"' in served,
           "nothing served names a path or a key (%s)" % leaks)
    finally:
        for s in held:
            s.close()
        run.stop()


def case_logjson(tmp):
    print("1..4", flush=True)
    run = Run(tmp, epochs=2, extra_server=["--log-format", "json"],
              extra_client=["--log-format", "json"],
              metrics=os.environ.get("PL_METRICS_BUILT") != "0")
    try:
        rc = run.wait(180)
        for p in run.clients:
            p.wait(timeout=60)
        ok(rc == 0, "a run with --log-format json finishes (rc %s)" % rc)
        bad, objs = [], []
        for name in ("server.log", "client0.log", "client1.log"):
            for line in run.log(name).splitlines():
                try:
                    o = json.loads(line)
                    objs.append((name, o))
                    if not all(k in o for k in ("time", "level", "component", "message",
                                                "fields")):
                        bad.append(line)
                except ValueError:
                    bad.append(line)
        diag("first bad lines: %s" % bad[:3])
        ok(objs and not bad, "every log line is one JSON object with time, level, "
           "component, message, fields (%d lines)" % len(objs))
        dev = [o for n, o in objs if n == "client1.log" and o.get("device") == 1]
        srv = [o for n, o in objs if n == "server.log" and o["component"] == "server"]
        ok(dev and srv and all(re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$", o["time"])
                               for n, o in objs),
           "client lines carry device 1, server lines component server, ISO 8601 UTC times")
    finally:
        run.stop()
    # The text format is the default and unchanged: "HH:MM:SS.mmm L message".
    tmp2 = os.path.join(tmp, "text")
    os.mkdir(tmp2)
    run = Run(tmp2, epochs=1, metrics=False)
    try:
        run.wait(120)
        lines = [l for l in run.log().splitlines() if l]
        ok(lines and all(re.match(r"\d\d:\d\d:\d\d\.\d{3} [IWE] \S", l) for l in lines),
           "the text format stays the default and unchanged")
    finally:
        run.stop()


CASES = {"promtool": case_promtool, "prometheus": case_prometheus,
         "dashboard": case_dashboard, "hostile": case_hostile, "logjson": case_logjson}


def main():
    if len(sys.argv) != 2 or sys.argv[1] not in CASES:
        sys.exit("usage: test_metrics.py %s" % "|".join(CASES))
    if os.environ.get("PL_METRICS_BUILT") == "0" and sys.argv[1] != "logjson":
        skip_all("pipelearn-server built without libmicrohttpd (-Dmetrics)")
    tmp = tempfile.mkdtemp(prefix="pl-metrics-%s-" % sys.argv[1])
    try:
        CASES[sys.argv[1]](tmp)
    except Exception as e:  # a crash of the harness is a failure, with its logs
        ok(False, "harness: %r" % e)
        for name in sorted(os.listdir(tmp)):
            if name.endswith(".log"):
                diag("--- %s\n%s" % (name, open(os.path.join(tmp, name),
                                                 errors="replace").read()[-3000:]))
    if failed:
        for name in sorted(os.listdir(tmp)):
            if name.endswith(".log"):
                diag("--- %s\n%s" % (name, open(os.path.join(tmp, name),
                                                 errors="replace").read()[-3000:]))
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
