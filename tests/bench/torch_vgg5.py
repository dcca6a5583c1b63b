#!/usr/bin/python3
"""torch_vgg5.py: PyTorch peer of pipelearn's VGG5 training benchmark.

Trains the PipeLearn reference VGG5 on Fashion-MNIST-shaped random data
(28x28x1, 10 classes) and prints throughput as one JSON line.

  /usr/bin/python3 tests/bench/torch_vgg5.py --batch 100 --threads 2 --images 2000

Needs Debian's python3-torch (run with /usr/bin/python3, not a pyenv python).
"""
import argparse
import json
import os
import statistics
import time

#  Debian's torch links the pthread OpenBLAS (used for the Linear layers),
#  whose own pool of nproc threads torch.set_num_threads does not govern; it
#  then spins against the OpenMP/oneDNN threads on a 2-core box. Measured on
#  the dev box with --threads 2, 1 BLAS thread beat the default (2) at
#  batch 100, 25 and 10 in both memory formats (channels_last: 1240 vs 880,
#  880 vs 640, 650 vs 420 img/s) and was much steadier. Must be set before
#  torch loads; an OPENBLAS_NUM_THREADS in the environment wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import torch  # noqa: E402
import torch.nn as nn

#  Fashion-MNIST normalisation, as common/nn/nn_dataset.c uses.
MEAN, STD = 0.2860, 0.3530
POOL = 2000             #  pre-generated images, cycled through
SIDE, CLASSES = 28, 10


def vgg5(bn):
    """The reference VGG5; bn=False drops the BatchNorm layers."""
    def block(cin, cout, pool):
        layers = [nn.Conv2d(cin, cout, 3, padding=1, bias=True)]
        if bn:
            layers.append(nn.BatchNorm2d(cout))
        layers.append(nn.ReLU(inplace=True))
        if pool:
            layers.append(nn.MaxPool2d(2))
        return layers
    model = nn.Sequential(
        *block(1, 32, True), *block(32, 64, True), *block(64, 64, False),
        nn.Flatten(),
        nn.Linear(64 * 7 * 7, 128),
        #  No ReLU here: a quirk of the reference, kept so results compare.
        nn.Linear(128, CLASSES))
    for m in model.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            nn.init.xavier_uniform_(m.weight)
            nn.init.zeros_(m.bias)
    return model


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--images", type=int, required=True,
                   help="images processed per timed repeat")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--no-bn", action="store_true")
    p.add_argument("--micro-batches", type=int, default=1,
                   help="split each mini-batch into M micro-batches, "
                        "accumulate grads, one optimizer step (as PipeLearn feeds each side)")
    p.add_argument("--eval", action="store_true", help="time inference only (no grad)")
    p.add_argument("--cpu-time", action="store_true",
                   help="images per second of this process's CPU time, not of wall time "
                        "(steadier on a machine shared with other jobs)")
    #  Default channels_last (NHWC): on the 2-core dev box (PyTorch 1.13,
    #  oneDNN) it beat NCHW in every training config tried, e.g. with 2
    #  threads 1240 vs 1080 img/s at batch 100, 880 vs 800 at 25, 650 vs 560
    #  at 10. Pass --memory-format contiguous to re-check elsewhere.
    p.add_argument("--memory-format", choices=("contiguous", "channels_last"),
                   default="channels_last")
    a = p.parse_args()
    if a.batch < 1 or a.images < 1 or a.repeats < 1 or a.warmup < 0:
        p.error("batch, images, repeats must be >= 1 and warmup >= 0")
    if a.micro_batches < 1 or a.batch % a.micro_batches:
        p.error("--micro-batches must divide --batch")

    torch.set_num_threads(a.threads)
    #  Intra-op threads only, as the C side has no inter-op parallelism.
    #  set_num_interop_threads throws once it is set or parallel work ran.
    if torch.get_num_interop_threads() != 1:
        try:
            torch.set_num_interop_threads(1)
        except RuntimeError:
            pass
    torch.manual_seed(1)

    fmt = (torch.channels_last if a.memory_format == "channels_last"
           else torch.contiguous_format)
    model = vgg5(not a.no_bn).to(memory_format=fmt)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()          #  mean over the batch

    #  8-bit pixel pool and labels, generated once; the conversion to
    #  normalised float happens per batch inside the timed loop, as the C
    #  side converts its 8-bit pixels per batch.
    pool = torch.randint(0, 256, (POOL, 1, SIDE, SIDE), dtype=torch.uint8)
    labels = torch.randint(0, CLASSES, (POOL,))
    B, M = a.batch, a.micro_batches
    mb = B // M
    cursor = 0

    def next_batch():
        nonlocal cursor
        if cursor + B > POOL:
            cursor = 0
        x = pool[cursor:cursor + B].float().div_(255.0).sub_(MEAN).div_(STD)
        y = labels[cursor:cursor + B]
        cursor += B
        return x.contiguous(memory_format=fmt), y

    def train_step():
        x, y = next_batch()
        opt.zero_grad(set_to_none=True)
        for i in range(M):
            s = slice(i * mb, (i + 1) * mb)
            loss = loss_fn(model(x[s]), y[s])
            (loss / M if M > 1 else loss).backward()   # grads accumulate
        opt.step()

    def eval_step():
        x, _ = next_batch()
        model(x)

    if a.eval:
        model.eval()
        step = eval_step
    else:
        model.train()
        step = train_step

    steps = -(-a.images // B)                  #  ceil: at least N images
    rates = []
    with torch.set_grad_enabled(not a.eval):
        for _ in range(a.warmup):
            step()
        clock = time.process_time if a.cpu_time else time.perf_counter
        for _ in range(a.repeats):
            t0 = clock()
            for _ in range(steps):
                step()
            rates.append(steps * B / (clock() - t0))

    print(json.dumps({
        "impl": "pytorch", "version": torch.__version__,
        "batch": B, "micro_batches": M, "threads": a.threads,
        "images_per_s": round(statistics.median(rates), 1),
        "repeats": [round(r, 1) for r in rates],
        "mkldnn": torch.backends.mkldnn.is_available(),
        "bn": not a.no_bn, "memory_format": a.memory_format,
        "blas_threads": os.environ["OPENBLAS_NUM_THREADS"],
        "mode": "eval" if a.eval else "train",
        "clock": "cpu" if a.cpu_time else "wall",
    }))


if __name__ == "__main__":
    main()
