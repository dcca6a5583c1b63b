#!/usr/bin/python3
"""check_bench.py: a short run of pipelearn-bench checks its output's shape.

    tests/bench/check_bench.py build/tests/bench/pipelearn-bench

Runs `pipelearn-bench --model resnet18 --repeats 1` on a small batch (20,
and 2 micro-batches of 10), one input shape, and checks what a user reads:
the CPU and level lines, one table row per setting naming our kernel level
and OpenBLAS core, and in --json every figure (images per second of wall
and CPU time, peak RSS, ratios) positive and finite. Not a timing bar: the
figures' size depends on the host. Without python3-torch the PyTorch side
is left out (--no-torch) and only ours is checked. Then `--conv-calls
--repeats 4`: one row per 3x3 shape (16), its path (the shapes decide, not the
clock: wino_path) and three positive times.
"""
import json
import math
import os
import subprocess
import sys
import tempfile

LEVELS = ("generic", "avx2", "avx512", "neon")


def positive(value, what):
    if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise AssertionError("%s: want a positive finite number, got %r" % (what, value))


def check_side(side, what, level_key, rates):
    for key in rates:
        positive(side.get(key), "%s %s" % (what, key))
    positive(side.get("peak_rss_kb"), what + " peak_rss_kb")
    positive(side.get("rss_start_kb"), what + " rss_start_kb")
    if side["peak_rss_kb"] < side["rss_start_kb"]:
        raise AssertionError("%s: peak RSS %r below the starting RSS %r"
                             % (what, side["peak_rss_kb"], side["rss_start_kb"]))
    if not side.get(level_key):
        raise AssertionError("%s: no %s" % (what, level_key))


def main():
    exe = sys.argv[1]
    torch = subprocess.run(["/usr/bin/python3", "-c", "import torch"],
                           capture_output=True).returncode == 0
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bench.json")
        cmd = [exe, "--model", "resnet18", "--repeats", "1", "--batch", "20", "--micro", "10",
               "--images", "20", "--warmup", "0", "--input", "28x28x1", "--json", path]
        if not torch:
            cmd.append("--no-torch")
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
        run = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
        sys.stdout.write(run.stdout)
        if run.returncode != 0:
            sys.stderr.write(run.stderr)
            raise AssertionError("pipelearn-bench exited %d" % run.returncode)
        with open(path) as f:
            out = json.load(f)
    lines = run.stdout.splitlines()
    if not any(l.startswith("CPU: ") and " kernels " in l and "OpenBLAS core" in l
               for l in lines):
        raise AssertionError("no 'CPU: ... kernels ... OpenBLAS core' line")
    if not out.get("cpu") or out.get("kernels") not in LEVELS or not out.get("openblas_core"):
        raise AssertionError("header fields: %r" % {k: out.get(k) for k in
                                                    ("cpu", "kernels", "openblas_core")})
    positive(out.get("sgemm_peak_gflops"), "sgemm_peak_gflops")
    rows = out["settings"]
    if [(r["input"], r["batch"], r["micro_batch"]) for r in rows] != [("28x28x1", 20, 20),
                                                                      ("28x28x1", 20, 10)]:
        raise AssertionError("settings: %r" % rows)
    for r in rows:
        what = "micro %d" % r["micro_batch"]
        table = [l for l in lines if l.split()[:3] == ["28x28x1", "20", str(r["micro_batch"])]]
        if len(table) != 1 or "%s/%s" % (out["kernels"], out["openblas_core"]) not in table[0]:
            raise AssertionError("%s: want one table row naming %s/%s, got %r"
                                 % (what, out["kernels"], out["openblas_core"], table))
        check_side(r["ours"], "ours " + what, "kernels",
                   ("images_per_s", "images_per_cpu_s"))
        if r["ours"]["kernels"] != out["kernels"]:
            raise AssertionError("%s: worker ran %s, parent %s" % (what, r["ours"]["kernels"],
                                                                   out["kernels"]))
        if torch:
            check_side(r["torch"], "PyTorch " + what, "cpu_capability",
                       ("images_per_s", "images_per_cpu_s"))
            positive(r.get("ratio"), what + " ratio")
            positive(r.get("ratio_cpu"), what + " ratio_cpu")
        elif "torch" in r:
            raise AssertionError("%s: PyTorch figures with --no-torch" % what)
    calls = check_conv_calls(exe)
    print("ok: %d settings%s, %d convolution shapes"
          % (len(rows), "" if torch else " (no python3-torch: ours only)", calls))


def wino_path(images, side, c, k):
    """The path a padded 3x3 convolution on images x side x side, c -> k,
    takes: direct loops for 1 input channel (nn_direct_takes), im2col under
    32 tiles of 2x2, F(4x4) ("wino4") up to 64 channels each side where its
    36 multiply-adds per 4x4 tile beat F(2x2)'s 16 per 2x2 over the image
    and the call holds 32 of its tiles, else F(2x2) ("winograd")."""
    t2, t4 = (side + 1) // 2, (side + 3) // 4
    if c == 1:
        return "direct"
    if images * t2 * t2 < 32:
        return "im2col"
    if (c <= 64 and k <= 64 and t4 * t4 * 36 < t2 * t2 * 16
            and images * t4 * t4 >= 32):
        return "wino4"
    return "winograd"


def check_conv_calls(exe):
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    run = subprocess.run([exe, "--conv-calls", "--repeats", "4"], capture_output=True,
                         text=True, env=env, timeout=300)
    sys.stdout.write(run.stdout)
    if run.returncode != 0:
        sys.stderr.write(run.stderr)
        raise AssertionError("pipelearn-bench --conv-calls exited %d" % run.returncode)
    rows = [l.split() for l in run.stdout.splitlines()
            if l[:1].isdigit() and len(l.split()) == 7]
    if len(rows) != 16:
        raise AssertionError("--conv-calls: want 16 shape rows, got %d" % len(rows))
    for r in rows:
        c, k = (int(v) for v in r[2].split("->"))
        want = wino_path(int(r[0]), int(r[1].split("x")[0]), c, k)
        if r[3] != want:
            raise AssertionError("--conv-calls %s: path %s, want %s"
                                 % (" ".join(r[:3]), r[3], want))
        # A first layer (direct) has no input gradient: 0.000.
        for v in r[4:6] if want == "direct" else r[4:]:
            positive(float(v), "--conv-calls %s time" % " ".join(r[:3]))
    return len(rows)


if __name__ == "__main__":
    main()
