#!/usr/bin/env python3
"""bench_metrics_cpu.py [BUILD_DIR] [--runs 2]: what --metrics costs, by CPU
accounting rather than wall time (issue 18: < 2% of an epoch).

bench_metrics.py compares epoch wall times with and without --metrics;
on a 2-core host their run-to-run noise (about 6%) hides a 2% effect. This
script reads what the metrics cost directly: the same synthetic run
(server + 2 clients on loopback, VGG5, 8000 samples, 3 epochs, pipelearn
split 2, N 4) with --metrics while /metrics, /api/state.json and / are
fetched every second (an open dashboard), and without; it samples the
server's threads' CPU time from /proc and prints the HTTP thread's
seconds (libmicrohttpd's "MHD-single"), the rest of the server's with
and without, and both as a share of the training wall time. Prints
figures; asserts nothing."""
import argparse
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.request

ap = argparse.ArgumentParser()
ap.add_argument("build", nargs="?", default=os.environ.get("PL_BUILD_DIR", "build"))
ap.add_argument("--runs", type=int, default=2)
args = ap.parse_args()
CONFIG = {"model": "vgg5", "dataset": "synthetic", "samples": 8000, "test_samples": 200,
          "batch_size": 100, "epochs": 3, "seed": 1, "split_point": 2, "devices": 2,
          "mode": "pipelearn", "micro_batches": 4}
TCK = os.sysconf("SC_CLK_TCK")


def thread_cpu(pid, cpu):
    """cpu[(tid, name)] = user + system seconds, for every thread of pid."""
    try:
        tids = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return
    for t in tids:
        try:
            name = open("/proc/%d/task/%s/comm" % (pid, t)).read().strip()
            st = open("/proc/%d/task/%s/stat" % (pid, t)).read().rsplit(")", 1)[1].split()
            cpu[(t, name)] = (int(st[11]) + int(st[12])) / TCK
        except OSError:
            pass


def one_run(metrics):
    d = tempfile.mkdtemp(prefix="pl-metrics-cpu-")
    try:
        cfg, ep, log = (os.path.join(d, n) for n in ("cfg.json", "ep", "server.log"))
        with open(cfg, "w") as f:
            json.dump(CONFIG, f)
        argv = [os.path.join(args.build, "server", "pipelearn-server"), "--config", cfg,
                "--bind", "tcp://127.0.0.1:*", "--endpoint-file", ep, "--insecure",
                "--results", os.path.join(d, "r")] + (["--metrics", "0"] if metrics else [])
        server = subprocess.Popen(argv, stdout=open(log, "w"), stderr=subprocess.STDOUT)
        while not (os.path.exists(ep) and open(ep).read().strip()):
            time.sleep(0.05)
        port = None
        while metrics and not port:
            m = re.search(r"serving http://127\.0\.0\.1:(\d+)/", open(log).read())
            port = m and m.group(1)
            time.sleep(0.05)
        clients = [subprocess.Popen([os.path.join(args.build, "client", "pipelearn-client"),
                                     "--connect", open(ep).read().strip(), "--device-id",
                                     str(i), "--insecure"], stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL) for i in range(2)]
        cpu, next_poll = {}, 0.0
        while server.poll() is None:
            thread_cpu(server.pid, cpu)
            if metrics and time.time() >= next_poll:
                next_poll = time.time() + 1.0
                for path in ("/metrics", "/api/state.json", "/"):
                    try:
                        urllib.request.urlopen("http://127.0.0.1:%s%s" % (port, path),
                                               timeout=2).read()
                    except OSError:
                        pass
            time.sleep(0.1)
        for c in clients:
            c.wait()
        with open(os.path.join(d, "r", "summary.json")) as f:
            wall = sum(e["wall_s"] for e in json.load(f)["epochs"])
        http = sum(v for (_t, n), v in cpu.items() if n.startswith("MHD"))
        rest = sum(v for (_t, n), v in cpu.items() if not n.startswith("MHD"))
        return wall, http, rest
    finally:
        shutil.rmtree(d, ignore_errors=True)


rows = []
for r in range(args.runs):
    for metrics in (True, False):
        wall, http, rest = one_run(metrics)
        rows.append((metrics, wall, http, rest))
        print("%-10s training wall %6.2f s  HTTP thread %.3f s CPU  rest of the server "
              "%.2f s CPU" % ("metrics" if metrics else "plain", wall, http, rest), flush=True)
on = [x for x in rows if x[0]]
off = [x for x in rows if not x[0]]
wall = min(x[1] for x in rows)
http = max(x[2] for x in on)
extra = max(x[3] for x in on) - min(x[3] for x in off)
print("HTTP thread: at most %.3f s CPU = %.2f%% of the shortest training wall (%.2f s); the "
      "rest of the server used %+.2f s CPU more with metrics (%.2f%%, noise included)"
      % (http, 100 * http / wall, wall, extra, 100 * max(extra, 0) / wall))
