#!/usr/bin/python3
"""bn_short_run.py: why a short run of a BatchNorm-heavy model reads near
chance in evaluation, on PyTorch's twin of our model (README, "Benchmark").

    /usr/bin/python3 tests/bench/bn_short_run.py [--model mobilenetv3-small]
                                                  [--samples 600] [--epochs 3]

Trains tests/torch_models.py's model centrally on the first --samples
Fashion-MNIST training images (SGD lr 0.01, momentum 0.9, batch 100, one
thread, as pipelearn-train's defaults) and prints one JSON line: the
evaluation-mode accuracy on the first 1000 test images, then the same after
re-estimating every BatchNorm layer's running statistics over the training
images (momentum None: a plain average over the batches). Compare the
first with `pipelearn-train --set model=M --set dataset=fashion-mnist
--samples N --set test_samples=1000 --epochs E --threads 1`.
"""
import argparse
import json
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
import torch_models  # noqa: E402
from table1 import fashion, MEAN, STD  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="mobilenetv3-small", choices=torch_models.MODELS)
    p.add_argument("--samples", type=int, default=600)
    p.add_argument("--epochs", type=int, default=3)
    a = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(1)
    xtr, ytr = fashion("train", a.samples)
    xte, yte = fashion("test", 1000)

    def tensor(x):
        t = (torch.tensor(x, dtype=torch.float32) / 255.0 - MEAN) / STD
        return t[:, None, :, :].contiguous(memory_format=torch.channels_last)
    xtr, xte = tensor(xtr), tensor(xte)
    ytr, yte = torch.tensor(ytr, dtype=torch.long), torch.tensor(yte, dtype=torch.long)
    model = torch_models.build(a.model, 1, 28, 10)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def accuracy():
        model.eval()
        with torch.no_grad():
            right = sum(int((model(xte[b:b + 100]).argmax(1) == yte[b:b + 100]).sum())
                        for b in range(0, len(yte), 100))
        return 100.0 * right / len(yte)

    for _ in range(a.epochs):
        model.train()
        order = torch.randperm(len(ytr))
        for b in range(0, len(ytr) - 99, 100):
            idx = order[b:b + 100]
            opt.zero_grad()
            F.cross_entropy(model(xtr[idx]), ytr[idx]).backward()
            opt.step()
    before = accuracy()
    bns = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    for m in bns:
        m.reset_running_stats()
        m.momentum = None
    model.train()
    with torch.no_grad():
        for b in range(0, len(ytr), 100):
            model(xtr[b:b + 100])
    print(json.dumps({"model": a.model, "samples": a.samples, "epochs": a.epochs,
                      "bn_layers": len(bns), "eval_acc": before,
                      "eval_acc_bn_reestimated": accuracy()}))


if __name__ == "__main__":
    main()
