#!/usr/bin/python3
"""The shape of the paper's Table 1 on Fashion-MNIST (issue 15, "Accuracy").

    tests/bench/table1.py [--models vgg5,resnet18,mobilenetv3-small]
                          [--modes fl,sfl,pipelearn] [--epochs 5]
                          [--samples 0] [--test-samples 0] [--no-torch]
                          [--augment]
                          [--build build] [--out docs/table1.md] [--work DIR]

Run from the repository root after a build. For each model it trains, on
this host over loopback, with the reference's hyper-parameters (SGD lr 0.01,
momentum 0.9, batch 100, 2 devices with contiguous equal shards, split after
the first unit, aggregation once per epoch; PipeLearn with 4 micro-batches):

  * fl, sfl, pipelearn: build/server/pipelearn-server + 2 x
    build/client/pipelearn-client (configs/<mode>.json overridden with
    --set), `--epochs` epochs over `--samples` training images (0: all
    60,000) and evaluated on `--test-samples` test images (0: all 10,000);
  * PyTorch (tests/torch_models.py, channels_last, --torch-threads threads),
    centralised SGD on the same images, same normalisation, same epochs.

Augmentation follows the config's default for Fashion-MNIST (none) unless
`--augment` gives the reference's training transform: a random crop with
4-pixel padding (padding is pixel value 0) and a random horizontal flip,
drawn per image, in the daemons (`augment` and `flip` true) and in the
PyTorch twin alike. It writes the test accuracy after the last epoch, in the paper's layout (rows
techniques, columns models), plus wall times, to --out, and prints it.

The full table takes hours on a 2-core host (mobilenetv3-small and resnet18
train ~10-25x slower than vgg5); `--samples 500 --epochs 1` checks the
script in minutes. A model pipelearn does not build yet is reported as such
in its column (the daemons refuse it) and the others still run.
"""
import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

from bench_daemons import cpu_name, launch  # noqa: E402

MODELS = ["vgg5", "resnet18", "mobilenetv3-small"]
MODES = ["fl", "sfl", "pipelearn"]
LABELS = {"fl": "FL", "sfl": "SFL", "pipelearn": "PipeLearn (loopback)", "torch": "PyTorch"}
TITLES = {"vgg5": "VGG5", "resnet18": "ResNet18", "mobilenetv3-small": "MobileNetV3-S",
          "vgg11": "VGG11"}
FASHION = "/usr/share/datasets/fashion-mnist"
MEAN, STD = 0.2860, 0.3530      # common/nn/nn_dataset.c, Fashion-MNIST
DEVICES = 2


def log(msg):
    print("== " + msg, file=sys.stderr, flush=True)


def run_daemons(args, work, model, mode):
    tag = "%s-%s" % (model, mode)
    sets = ["model=%s" % model, "dataset=fashion-mnist", "samples=%d" % args.samples,
            "test_samples=%d" % args.test_samples, "epochs=%d" % args.epochs,
            "batch_size=100", "learning_rate=0.01", "momentum=0.9", "devices=%d" % DEVICES,
            "split_point=1", "aggregation_frequency=-1", "seed=%d" % args.seed,
            "micro_batches=%d" % (4 if mode == "pipelearn" else 1)]
    sets += ["augment=%s" % ("true" if args.augment else "false"),
             "flip=%s" % ("true" if args.augment else "false")]
    t0 = time.monotonic()
    res = launch(args.build, work, tag, "configs/%s.json" % mode, sets,
                 args.client_threads, args.timeout, timed=False)
    with open(os.path.join(res, "summary.json")) as f:
        summary = json.load(f)
    last = summary["epochs"][-1]
    return {"acc": 100.0 * last["test_acc"],
            "train_s": sum(e["wall_s"] for e in summary["epochs"]),
            "run_s": time.monotonic() - t0}


def read_idx(path):
    opener = gzip.open if open(path, "rb").read(2) == b"\x1f\x8b" else open
    with opener(path, "rb") as f:
        data = f.read()
    import numpy as np
    ndims = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndims).reshape(dims)


def fashion(split, limit):
    prefix = "train" if split == "train" else "t10k"
    found = []
    for kind, idx in (("images", "idx3"), ("labels", "idx1")):
        name = "%s-%s-%s-ubyte" % (prefix, kind, idx)
        path = os.path.join(FASHION, name)
        found.append(read_idx(path if os.path.exists(path) else path + ".gz"))
    x, y = found
    if limit:
        x, y = x[:limit], y[:limit]
    return x, y


def run_torch(args, model_name):
    """Centralised PyTorch on the same recipe, in a child process so that
    its thread settings and memory do not touch this one."""
    cmd = [sys.executable, os.path.abspath(__file__), "--torch-child", model_name,
           "--samples", str(args.samples), "--test-samples", str(args.test_samples),
           "--epochs", str(args.epochs), "--seed", str(args.seed),
           "--torch-threads", str(args.torch_threads)] + (["--augment"] if args.augment else [])
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.timeout)
    if out.returncode != 0:
        raise RuntimeError("PyTorch %s failed: %s" % (model_name, out.stderr.strip()[-500:]))
    return json.loads(out.stdout.strip().splitlines()[-1])


def torch_child(args):
    import torch
    import torch.nn.functional as F
    import torch_models
    torch.set_num_threads(args.torch_threads)
    torch.manual_seed(args.seed)
    xtr, ytr = fashion("train", args.samples)
    xte, yte = fashion("test", args.test_samples)

    def tensor(x):
        t = (torch.tensor(x, dtype=torch.float32) / 255.0 - MEAN) / STD
        return t[:, None, :, :].contiguous(memory_format=torch.channels_last)
    xtr, xte = tensor(xtr), tensor(xte)
    ytr, yte = torch.tensor(ytr, dtype=torch.long), torch.tensor(yte, dtype=torch.long)
    model = torch_models.build(args.torch_child, 1, 28, 10)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    pad = 4
    # pixel value 0, normalised: what the daemons' crop pads with
    xpad = F.pad(xtr, (pad, pad, pad, pad), value=-MEAN / STD) if args.augment else None

    def batch(idx):
        if not args.augment:
            return xtr[idx]
        dy = torch.randint(0, 2 * pad + 1, (len(idx),))
        dx = torch.randint(0, 2 * pad + 1, (len(idx),))
        flip = torch.rand(len(idx)) < 0.5
        out = torch.stack([xpad[i, :, y:y + 28, x:x + 28]
                           for i, y, x in zip(idx.tolist(), dy.tolist(), dx.tolist())])
        out[flip] = out[flip].flip(3)
        return out.contiguous(memory_format=torch.channels_last)
    t0 = time.monotonic()
    for _ in range(args.epochs):
        model.train()
        order = torch.randperm(len(ytr))
        for b in range(0, len(ytr) - 99, 100):
            idx = order[b:b + 100]
            opt.zero_grad()
            F.cross_entropy(model(batch(idx)), ytr[idx]).backward()
            opt.step()
    train_s = time.monotonic() - t0
    model.eval()
    correct = 0
    with torch.no_grad():
        for b in range(0, len(yte), 500):
            correct += int((model(xte[b:b + 500]).argmax(1) == yte[b:b + 500]).sum())
    print(json.dumps({"acc": 100.0 * correct / len(yte), "train_s": train_s,
                      "run_s": time.monotonic() - t0}))


def first_error(work, tag):
    """The server's first error line ("E ...") of a failed run, for the
    table: e.g. the config refusing a model pipelearn does not build."""
    try:
        with open(os.path.join(work, tag + ".server.log")) as f:
            for line in f:
                if " E " in line:
                    return line.split(" E ", 1)[1].strip().replace("|", "/")
    except OSError:
        pass
    return None


def render(args, models, rows, results):
    def cell(model, row, key, fmt):
        r = results.get((model, row))
        if r is None:
            return "-"
        if "error" in r:
            return "not run"
        return fmt % r[key]
    lines = ["# Table 1 on Fashion-MNIST", "",
             "Written by `tests/bench/table1.py` (issue 15); the paper's Table 1 "
             "(CIFAR-10, MNIST, SVHN, 4 devices) is in "
             "`../shared/reference/pipelearn-facts.md`.", "",
             "Test accuracy (%%) after %d epoch(s); %s training images over %d devices "
             "(contiguous shards), %s test images; SGD lr 0.01, momentum 0.9, batch 100; "
             "split after unit 1, PipeLearn with 4 micro-batches; aggregation once per "
             "epoch; seed %d; %s. PyTorch: centralised, same recipe, "
             "channels_last, %d thread(s)."
             % (args.epochs, args.samples or "all 60,000", DEVICES,
                args.test_samples or "all 10,000", args.seed,
                "training transform: random crop with 4-pixel padding and horizontal flip"
                if args.augment else "no augmentation", args.torch_threads), "",
             "| technique | " + " | ".join(TITLES.get(m, m) for m in models) + " |",
             "|---|" + "---|" * len(models)]
    for row in rows:
        lines.append("| %s | " % LABELS[row]
                     + " | ".join(cell(m, row, "acc", "%.2f") for m in models) + " |")
    lines += ["", "Training wall time (s, all epochs, evaluation excluded):", "",
              "| technique | " + " | ".join(TITLES.get(m, m) for m in models) + " |",
              "|---|" + "---|" * len(models)]
    for row in rows:
        lines.append("| %s | " % LABELS[row]
                     + " | ".join(cell(m, row, "train_s", "%.1f") for m in models) + " |")
    errors = [(m, row, results[(m, row)]["error"]) for m in models for row in rows
              if "error" in results.get((m, row), {})]
    if errors:
        lines += ["", "Not run:", ""]
        lines += ["- %s, %s: %s" % (TITLES.get(m, m), LABELS[row], e) for m, row, e in errors]
    lines += ["", "Host: %s, %d cores; %s; %s." % (
        cpu_name(), os.cpu_count() or 0,
        "PIPELEARN_ISA=%s" % os.environ["PIPELEARN_ISA"] if os.environ.get("PIPELEARN_ISA")
        else "ISA path: the CPU's best", time.strftime("%Y-%m-%d", time.gmtime())), ""]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--samples", type=int, default=0, help="training images (0: all)")
    ap.add_argument("--test-samples", type=int, default=0, help="test images (0: all)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-torch", action="store_true", help="skip the PyTorch row")
    ap.add_argument("--augment", action="store_true",
                    help="the reference's transform: crop with 4-pixel padding + flip")
    ap.add_argument("--torch-threads", type=int, default=2)
    ap.add_argument("--client-threads", type=int, default=1)
    ap.add_argument("--build", default=os.environ.get("PIPELEARN_BUILD_DIR", "build"))
    ap.add_argument("--out", default="docs/table1.md")
    ap.add_argument("--work", help="keep logs and results here (default: a temp dir)")
    ap.add_argument("--timeout", type=int, default=6 * 3600, help="seconds per run")
    ap.add_argument("--torch-child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.torch_child:
        return torch_child(args)
    models = [m for m in args.models.split(",") if m]
    modes = [m for m in args.modes.split(",") if m]
    for m in modes:
        if m not in MODES:
            ap.error("unknown mode %r (known: %s)" % (m, ", ".join(MODES)))
    if args.epochs < 1 or args.samples < 0 or args.test_samples < 0:
        ap.error("--epochs must be >= 1, --samples and --test-samples >= 0")
    if args.samples and args.samples < 100 * DEVICES:
        ap.error("--samples must give each of the %d devices a batch of 100" % DEVICES)
    for exe in ("server/pipelearn-server", "client/pipelearn-client"):
        if not os.access(os.path.join(args.build, exe), os.X_OK):
            sys.exit("table1: %s/%s missing: build first" % (args.build, exe))
    if not os.path.exists("configs/pipelearn.json"):
        sys.exit("table1: run from the repository root")
    work = args.work or tempfile.mkdtemp(prefix="pl_table1_")
    os.makedirs(work, exist_ok=True)
    rows = modes + ([] if args.no_torch else ["torch"])
    results = {}
    failed = False
    for model in models:
        for row in rows:
            log("%s %s" % (model, row))
            try:
                if row == "torch":
                    r = run_torch(args, model)
                else:
                    r = run_daemons(args, work, model, row)
                log("  %.2f %% in %.1f s" % (r["acc"], r["train_s"]))
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                failed = True
                log("  failed: %s" % e)
                r = {"error": first_error(work, "%s-%s" % (model, row)) or "failed"}
            results[(model, row)] = r
    text = render(args, models, rows, results)
    with open(args.out, "w") as f:
        f.write(text)
    print(text)
    log("written to %s; logs in %s" % (args.out, work))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
