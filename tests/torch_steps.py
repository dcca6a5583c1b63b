#!/usr/bin/python3
"""Many SGD steps of one of our models against PyTorch from the same
initial weights on the same Fashion-MNIST batches.

    torch_steps.py TRAIN_STEPS_BINARY [--model vgg11] [--steps 30]
                   [--batch 100] [--lr 0.01] [--dropout 0] [--seed 1]
                   [--pad-to 32] [--every 10] [--tol 0] [--jitter 0]

tests/tools/train_steps trains our model (pipelearn's init, SGD with
momentum 0.9, no weight decay: the reference's optimiser) on the first
STEPS x BATCH training images, normalised as pipelearn loads them
(Fashion-MNIST mean 0.2860, std 0.3530; padded to --pad-to with black,
pixel 0 before normalisation, centred, as the config key pad_to does).
PyTorch then runs the layer graph train_steps wrote (torch_parity's
run_graph, torch.nn.functional) from the same initial weights on the same
batches. Prints each step's loss on both sides and, every --every steps,
each parametric tensor's gradient norm on both sides.

Dropout: with --dropout 0 the two runs are the same computation, so the
loss curves must agree (--tol T > 0 makes the script fail when a step's
loss differs by more than T relative before either side's loss passes 10:
past that, rounding differences are amplified chaotically). With p > 0
each side draws its own masks (PyTorch's F.dropout, ours from the seed),
so only the curves' shape compares. --jitter S adds U(-S, S) to every
input value: the constant background makes max-pool ties that each side
breaks by its own rounding (docs/models.md).

Exit 77 without python3-torch or Debian's dataset-fashion-mnist.
"""
import argparse
import gzip
import math
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
    import torch_parity
except ImportError:
    print("SKIP: python3-torch / python3-numpy not installed")
    sys.exit(77)

FASHION = "/usr/share/datasets/fashion-mnist"
MEAN, STD = 0.2860, 0.3530      # common/nn/nn_dataset.c, Fashion-MNIST


def fashion_batches(count, pad_to):
    """The first count training images (NHWC, normalised, padded) and labels."""
    def read(name, skip):
        with gzip.open(os.path.join(FASHION, name)) as f:
            return np.frombuffer(f.read(), np.uint8)[skip:]
    img = read("train-images-idx3-ubyte.gz", 16).reshape(-1, 28, 28)[:count]
    lab = read("train-labels-idx1-ubyte.gz", 8)[:count].astype(np.int32)
    side = max(28, pad_to)
    off = (side - 28) // 2
    x = np.zeros((count, side, side, 1), np.float32)
    x[:, off:off + 28, off:off + 28, 0] = img / np.float32(255.0)
    return (x - np.float32(MEAN)) / np.float32(STD), lab, side


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--model", default="vgg11")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--dropout", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--pad-to", type=int, default=32)
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--tol", type=float, default=0.0)
    ap.add_argument("--jitter", type=float, default=0.0)
    a = ap.parse_args()
    if not os.path.exists(os.path.join(FASHION, "train-images-idx3-ubyte.gz")):
        print("SKIP: dataset-fashion-mnist is not installed")
        sys.exit(77)
    x, y, side = fashion_batches(a.steps * a.batch, a.pad_to)
    if a.jitter > 0:
        rs = np.random.RandomState(a.seed)
        x += rs.uniform(-a.jitter, a.jitter, x.shape).astype(np.float32)
    with tempfile.TemporaryDirectory() as d:
        x.tofile(os.path.join(d, "x.bin"))
        y.tofile(os.path.join(d, "y.bin"))
        subprocess.run([a.binary, d, a.model, "1", str(side), str(a.batch), str(a.steps),
                        repr(a.lr), repr(a.dropout), str(a.seed)], check=True)
        tens = {}
        for line in open(os.path.join(d, "tensors.txt")):
            name, off, cnt = line.split()
            tens[name] = (int(off), int(cnt))
        layers = [tuple(int(v) for v in line.split()) for line in open(os.path.join(d, "spec.txt"))]
        W = np.fromfile(os.path.join(d, "weights.bin"), np.float32)
        ours = [float(v) for v in open(os.path.join(d, "loss.txt")).read().split()]
        gn_ours = [[float(v) for v in line.split()] for line in open(os.path.join(d, "gnorm.txt"))]
        A = np.fromfile(os.path.join(d, "after.bin"), np.float32)

    names = list(tens)

    def to_torch(name, arr=W):
        return torch_parity.tensor_to_torch(name, arr, tens, layers)

    params = {}
    for name in names:
        t = torch.tensor(np.ascontiguousarray(to_torch(name)))
        params[name] = t.requires_grad_("running" not in name)

    def P(u, l, kind):
        pre = "u%d.l%d.%s." % (u, l, kind)
        return {k[len(pre):]: v for k, v in params.items() if k.startswith(pre)}

    trainables = [v for v in params.values() if v.requires_grad]
    opt = torch.optim.SGD(trainables, lr=a.lr, momentum=0.9)
    torch.manual_seed(a.seed)
    shown = [n for n in names if n.endswith(".w") and "bn" not in n]
    fail = []
    print("%s %dx%dx1 batch %d lr %g momentum 0.9 dropout %g seed %d: step, loss ours, "
          "loss PyTorch" % (a.model, side, side, a.batch, a.lr, a.dropout, a.seed))
    for step in range(a.steps):
        opt.zero_grad()
        xt = torch.tensor(x[step * a.batch:(step + 1) * a.batch].transpose(0, 3, 1, 2).copy())
        yt = torch.tensor(y[step * a.batch:(step + 1) * a.batch], dtype=torch.long)
        out = run_graph_dropout(layers, P, xt, a.dropout)
        loss = F.cross_entropy(out, yt)
        loss.backward()
        mine = ours[step] if step < len(ours) else float("nan")
        line = "%4d %10.4f %10.4f" % (step + 1, mine, loss.item())
        if step % a.every == 0 or step == a.steps - 1:
            g_t = {n: float(t.grad.norm()) for n, t in params.items() if t.requires_grad}
            g_o = gn_ours[step] if step < len(gn_ours) else [float("nan")] * len(names)
            line += "   grad norms ours/torch: " + " ".join(
                "%s %.3g/%.3g" % (n.rsplit(".", 2)[0], g_o[names.index(n)], g_t[n]) for n in shown)
        print(line, flush=True)
        if a.tol > 0 and max(abs(mine), abs(loss.item())) < 10 and \
                not abs(mine - loss.item()) <= a.tol * abs(loss.item()):
            fail.append("step %d: loss %.6f ours, %.6f PyTorch" % (step + 1, mine, loss.item()))
        if not math.isfinite(loss.item()):
            break
        opt.step()
    if len(ours) == a.steps and a.dropout == 0:
        # Weights after the last step, 2-norm relative error per tensor.
        errs = []
        for n, t in params.items():
            theirs_w = t.detach().numpy().ravel()
            diff = np.linalg.norm(to_torch(n, A).ravel() - theirs_w)
            errs.append((diff / max(np.linalg.norm(theirs_w), 1e-3), n))
        errs.sort(reverse=True)
        print("weights after %d steps, worst relative errors: %s" % (
            a.steps, ", ".join("%s %.2g" % (n, e) for e, n in errs[:4])))
    if fail:
        print("FAIL: %s" % "; ".join(fail[:5]))
        sys.exit(1)


def run_graph_dropout(layers, P, x, p):
    """torch_parity.run_graph, with PyTorch's own dropout masks when p > 0."""
    if p <= 0:
        return torch_parity.run_graph(layers, P, x)
    drop = [i for i, l in enumerate(layers) if torch_parity.KIND[l[2]] == "dropout"]
    # Split the graph at each dropout layer: run up to it, drop, go on. A
    # dropout layer is the last of its unit in our models (VGG11's dense).
    assert all(i + 1 == len(layers) or layers[i + 1][0] != layers[i][0] for i in drop), \
        "dropout inside a unit"
    cur, start = x, 0
    for i in drop + [len(layers)]:
        part = layers[start:i + 1] if i < len(layers) else layers[start:]
        if not part:
            break
        cur = torch_parity.run_graph(part, P, cur)
        if i < len(layers):
            cur = F.dropout(cur, p, True)
        # run_graph flattens to (n, features); the next unit is dense.
        cur = cur[:, :, None, None]
        start = i + 1
    return cur.reshape(x.shape[0], -1)


if __name__ == "__main__":
    main()
