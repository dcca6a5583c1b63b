#!/usr/bin/env python3
"""bench_metrics.py [BUILD_DIR] [--runs 3] [--epochs 3] [--samples 4000]
[--chromium]: what --metrics costs training (issue 18: < 2% of an epoch's
wall time on loopback).

The same synthetic run (server + 2 clients over loopback, insecure) is made
--runs times without --metrics and --runs times with it, alternating, while
a scraper GETs /metrics every second and /api/state.json every second (what
an open dashboard does; --chromium opens the real page in headless Chromium
instead of the JSON poll). Each run's figure is its median epoch wall_s from
summary.json (epoch 1 included: every run pays the same start); the result
is the median over runs, with and without, and the difference in percent.
Not a CI test: it prints the figure."""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ap = argparse.ArgumentParser()
ap.add_argument("build", nargs="?", default=os.environ.get("PL_BUILD_DIR", "build"))
ap.add_argument("--runs", type=int, default=3)
ap.add_argument("--epochs", type=int, default=3)
ap.add_argument("--samples", type=int, default=4000)
ap.add_argument("--chromium", action="store_true")
args = ap.parse_args()
SERVER = os.path.join(args.build, "server", "pipelearn-server")
CLIENT = os.path.join(args.build, "client", "pipelearn-client")


def one_run(metrics):
    tmp = tempfile.mkdtemp(prefix="pl-bench-metrics-")
    cfg = {"model": "vgg5", "dataset": "synthetic", "samples": args.samples,
           "test_samples": 200, "batch_size": 40, "seed": 5, "split_point": 2,
           "micro_batches": 4, "threads": 1, "devices": 2, "epochs": args.epochs}
    path = os.path.join(tmp, "config.json")
    json.dump(cfg, open(path, "w"))
    ep = os.path.join(tmp, "endpoint")
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    env.pop("OPENBLAS_CORETYPE", None)
    log = open(os.path.join(tmp, "server.log"), "w")
    argv = [SERVER, "--config", path, "--insecure", "--bind", "tcp://127.0.0.1:0",
            "--endpoint-file", ep, "--results", os.path.join(tmp, "results"), "--quiet"]
    if metrics:
        argv += ["--metrics", "0"]
    srv = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
    port = None
    deadline = time.time() + 60
    while time.time() < deadline and not (os.path.exists(ep) and (port or not metrics)):
        m = re.search(r"serving http://127\.0\.0\.1:(\d+)/",
                      open(os.path.join(tmp, "server.log")).read())
        port = int(m.group(1)) if m else None
        time.sleep(0.05)
    endpoint = open(ep).read().strip()
    clients = [subprocess.Popen([CLIENT, "--connect", endpoint, "--insecure",
                                 "--device-id", str(i)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, env=env) for i in range(2)]
    stop = threading.Event()
    scrapes = [0]
    chrome = None

    def scrape():
        while not stop.is_set():
            for p in (["/metrics"] if args.chromium else ["/metrics", "/api/state.json"]):
                try:
                    urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, p), timeout=2).read()
                    scrapes[0] += 1
                except OSError:
                    pass
            stop.wait(1.0)

    t = None
    if metrics:
        t = threading.Thread(target=scrape, daemon=True)
        t.start()
        if args.chromium:
            profile = os.path.join(tmp, "chromium")
            os.mkdir(profile)
            chrome = subprocess.Popen(
                ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--user-data-dir=" + profile,
                 "--remote-debugging-port=0", "http://127.0.0.1:%d/" % port],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rc = srv.wait(timeout=1800)
    stop.set()
    if t:
        t.join()
    if chrome:
        chrome.terminate()
        chrome.wait()
    for c in clients:
        c.wait(timeout=60)
    epochs = json.load(open(os.path.join(tmp, "results", "summary.json")))["epochs"]
    shutil.rmtree(tmp, ignore_errors=True)
    if rc != 0:
        sys.exit("server exited %d" % rc)
    return statistics.median(e["wall_s"] for e in epochs), scrapes[0]


without, with_ = [], []
for i in range(args.runs):
    w0, _ = one_run(False)
    w1, n = one_run(True)
    without.append(w0)
    with_.append(w1)
    print("run %d: epoch %.3f s without, %.3f s with metrics (%d scrapes)" % (i + 1, w0, w1, n),
          flush=True)
a, b = statistics.median(without), statistics.median(with_)
print("median epoch wall_s: %.3f without, %.3f with --metrics + %s: %+.2f%%"
      % (a, b, "chromium dashboard" if args.chromium else "1 Hz /metrics + state.json",
         100.0 * (b - a) / a))
