#!/usr/bin/python3
"""torch_bench.py: PyTorch peer of pipelearn-bench (tests/bench/bench_train.c).

Trains one of the paper's models as tests/torch_models.py builds it (the
PyTorch twins of pipelearn's models) on random 8-bit images of the given
shape, 10 classes, and prints throughput and memory as one JSON line:

  /usr/bin/python3 tests/bench/torch_bench.py --model resnet18 --in-c 3 --side 32 \\
      --batch 100 --micro-batches 4 --threads 1 --images 500

Each timed repeat measures wall time and this process's CPU time; the
medians of both are printed. rss_start_kb is the resident set after torch
is imported and its threads set, before the model exists; peak_rss_kb is
getrusage's peak of this process alone (the caller's memory is not in it).
"cpu_capability" is ATen's kernel level (ATEN_CPU_CAPABILITY restricts it;
oneDNN's convolutions follow DNNL_MAX_CPU_ISA).

Needs Debian's python3-torch (run with /usr/bin/python3, not a pyenv python).
"""
import argparse
import json
import os
import resource
import statistics
import sys
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
import torch.nn as nn  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import torch_models  # noqa: E402

#  Fashion-MNIST normalisation, as common/nn/nn_dataset.c uses (the figure
#  does not depend on it).
MEAN, STD = 0.2860, 0.3530
POOL = 2000             #  pre-generated images, cycled through
CLASSES = 10


def rss_now_kb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def cpu_capability():
    for line in torch.__config__.show().splitlines():
        if "CPU capability usage:" in line:
            return line.split(":", 1)[1].strip()
    return "unknown"


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="vgg5", choices=torch_models.MODELS)
    p.add_argument("--in-c", type=int, default=1)
    p.add_argument("--side", type=int, default=28)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--images", type=int, required=True,
                   help="images processed per timed repeat")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--micro-batches", type=int, default=1,
                   help="split each mini-batch into M micro-batches, "
                        "accumulate grads, one optimizer step (as PipeLearn feeds each side)")
    p.add_argument("--eval", action="store_true", help="time inference only (no grad)")
    #  Default channels_last (NHWC): on the 2-core dev box (PyTorch 1.13,
    #  oneDNN) it beat NCHW in every VGG5 training config tried, e.g. with 2
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
    rss_start = rss_now_kb()

    fmt = (torch.channels_last if a.memory_format == "channels_last"
           else torch.contiguous_format)
    model = torch_models.build(a.model, a.in_c, a.side, CLASSES, channels_last=False, seed=1)
    model = model.to(memory_format=fmt)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()          #  mean over the batch

    #  8-bit pixel pool and labels, generated once; the conversion to
    #  normalised float happens per batch inside the timed loop, as the C
    #  side converts its 8-bit pixels per batch.
    pool = torch.randint(0, 256, (POOL, a.in_c, a.side, a.side), dtype=torch.uint8)
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
    wall, cpu = [], []
    with torch.set_grad_enabled(not a.eval):
        for _ in range(a.warmup):
            step()
        for _ in range(a.repeats):
            t0, c0 = time.perf_counter(), time.process_time()
            for _ in range(steps):
                step()
            t1, c1 = time.perf_counter(), time.process_time()
            wall.append(steps * B / (t1 - t0))
            cpu.append(steps * B / (c1 - c0))

    print(json.dumps({
        "impl": "pytorch", "version": torch.__version__, "model": a.model,
        "input": "%dx%dx%d" % (a.side, a.side, a.in_c),
        "batch": B, "micro_batches": M, "threads": a.threads,
        "images_per_s": round(statistics.median(wall), 1),
        "images_per_cpu_s": round(statistics.median(cpu), 1),
        "runs_wall": [round(r, 1) for r in wall],
        "runs_cpu": [round(r, 1) for r in cpu],
        "rss_start_kb": rss_start,
        "peak_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        "cpu_capability": cpu_capability(),
        "mkldnn": torch.backends.mkldnn.is_available(),
        "memory_format": a.memory_format,
        "blas_threads": os.environ["OPENBLAS_NUM_THREADS"],
        "mode": "eval" if a.eval else "train",
    }))


if __name__ == "__main__":
    main()
