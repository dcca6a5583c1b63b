#!/usr/bin/env python3
"""Our VGG5 against PyTorch's on the same weights and batch: loss, input
gradient, every parameter gradient, and the weights (BN running statistics
included) after one SGD step must agree to float tolerance.

torch_parity.py DUMP_STEP_BINARY   (exit 77 = skipped: no python3-torch)
"""
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
    import torch.nn as nn
except ImportError:
    print("SKIP: python3-torch / python3-numpy not installed")
    sys.exit(77)

torch.set_num_threads(1)


def load(d, name, dtype=np.float32):
    return np.fromfile(os.path.join(d, name), dtype=dtype)


def build(side, bn):
    def unit(cin, cout, pool):
        layers = [nn.Conv2d(cin, cout, 3, 1, 1)]
        if bn:
            layers.append(nn.BatchNorm2d(cout))
        layers.append(nn.ReLU())
        if pool:
            layers.append(nn.MaxPool2d(2, 2))
        return nn.Sequential(*layers)
    s4 = side // 4
    return nn.Sequential(unit(1, 32, True), unit(32, 64, True), unit(64, 64, False),
                         nn.Flatten(), nn.Linear(s4 * s4 * 64, 128), nn.Linear(128, 10))


def nhwc_to_nchw_dense(w, s4):
    # Our dense input is the NHWC flattening (h, w, c); PyTorch's is (c, h, w).
    return w.reshape(-1, s4, s4, 64).transpose(0, 3, 1, 2).reshape(w.shape[0], -1)


def check(binary, side, n, bn, threads, seed=3):
    with tempfile.TemporaryDirectory() as d:
        subprocess.run([binary, d, str(side), str(n), str(int(bn)), str(threads), str(seed)], check=True)
        tens = {}
        for line in open(os.path.join(d, "tensors.txt")):
            name, off, cnt = line.split()
            tens[name] = (int(off), int(cnt))
        W, G, A = load(d, "weights.bin"), load(d, "grads.bin"), load(d, "after.bin")
        x = load(d, "x.bin").reshape(n, side, side, 1)
        y = load(d, "y.bin", np.int32)
        dx_ours = load(d, "dx.bin").reshape(n, side, side, 1)
        loss_ours = float(open(os.path.join(d, "loss.txt")).read())

    def get(name, arr=W):
        o, c = tens[name]
        return arr[o:o + c]

    model = build(side, bn)
    s4 = side // 4
    convs = [(model[0][0], "u0.l0"), (model[1][0], "u1.l0"), (model[2][0], "u2.l0")]
    bns = [(model[k][1], "u%d.l1" % k) for k in range(3)] if bn else []
    d1, d2 = model[4], model[5]
    with torch.no_grad():
        for conv, p in convs:
            k, c = conv.weight.shape[:2]
            conv.weight.copy_(torch.tensor(get(p + ".conv.w").reshape(k, 3, 3, c).transpose(0, 3, 1, 2)))
            conv.bias.copy_(torch.tensor(get(p + ".conv.b")))
        for b, p in bns:
            b.weight.copy_(torch.tensor(get(p + ".bn.w")))
            b.bias.copy_(torch.tensor(get(p + ".bn.b")))
        d1.weight.copy_(torch.tensor(nhwc_to_nchw_dense(get("u3.l1.dense.w").reshape(128, -1), s4)))
        d1.bias.copy_(torch.tensor(get("u3.l1.dense.b")))
        d2.weight.copy_(torch.tensor(get("u4.l0.dense.w").reshape(10, 128)))
        d2.bias.copy_(torch.tensor(get("u4.l0.dense.b")))
    xt = torch.tensor(x.transpose(0, 3, 1, 2).copy(), requires_grad=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(xt), torch.tensor(y, dtype=torch.long))
    loss.backward()

    failures = []

    def compare(what, ours, theirs, tol):
        err = float(np.max(np.abs(ours - theirs)))
        scale = float(np.max(np.abs(theirs))) + 1e-12
        ok = err <= tol * max(1.0, scale)
        if not ok:
            failures.append("%s: max abs diff %.3g (scale %.3g)" % (what, err, scale))

    compare("loss", np.array([loss_ours]), np.array([loss.item()]), 1e-5)
    compare("dx", dx_ours, xt.grad.numpy().transpose(0, 2, 3, 1), 2e-5)
    for conv, p in convs:
        compare(p + ".conv.w grad", get(p + ".conv.w", G), conv.weight.grad.numpy().transpose(0, 2, 3, 1).ravel(), 2e-5)
        compare(p + ".conv.b grad", get(p + ".conv.b", G), conv.bias.grad.numpy(), 2e-5)
    for b, p in bns:
        compare(p + ".bn.w grad", get(p + ".bn.w", G), b.weight.grad.numpy(), 2e-5)
        compare(p + ".bn.b grad", get(p + ".bn.b", G), b.bias.grad.numpy(), 2e-5)
    # PyTorch's (c, h, w) input order back to our (h, w, c).
    d1_grad = d1.weight.grad.numpy().reshape(128, 64, s4, s4).transpose(0, 2, 3, 1).ravel()
    compare("dense1 grad", get("u3.l1.dense.w", G), d1_grad, 2e-5)
    compare("dense2 grad", get("u4.l0.dense.w", G), d2.weight.grad.numpy().ravel(), 2e-5)
    opt.step()
    for conv, p in convs:
        compare(p + ".conv.w after step", get(p + ".conv.w", A), conv.weight.detach().numpy().transpose(0, 2, 3, 1).ravel(), 1e-6)
    for b, p in bns:
        compare(p + " running_mean", get(p + ".bn.running_mean", A), b.running_mean.numpy(), 1e-6)
        compare(p + " running_var", get(p + ".bn.running_var", A), b.running_var.numpy(), 1e-6)
    label = "side %d batch %d bn %s threads %d seed %d" % (side, n, bn, threads, seed)
    if failures:
        print("FAIL %s: loss %.6f vs torch %.6f\n  %s" % (label, loss_ours, loss.item(), "\n  ".join(failures)))
        return False
    print("ok   %s: loss %.6f vs torch %.6f" % (label, loss_ours, loss.item()))
    return True


def main():
    binary = sys.argv[1]
    ok = True
    # Seeds are fixed. A max-pool window whose two largest inputs differ by
    # float rounding noise (seed 3 at batch 7 has one) sends that window's
    # gradient to a different input in each implementation: a real tie,
    # not a bug, so such a seed is not used here.
    for side, n, bn, threads, seed in [(28, 8, True, 1, 3), (28, 8, False, 1, 3),
                                       (28, 7, True, 2, 5), (32, 4, True, 3, 3),
                                       (28, 20, True, 2, 7)]:
        ok &= check(binary, side, n, bn, threads, seed)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
