#!/usr/bin/python3
"""torch_fedavg_bn.py [MODEL [SAMPLES [--central]]]: the PyTorch peer of the
headline's fl recipe (docs/headline.md, "ResNet18's accuracy after one
FedAvg"). MODEL (default resnet18, tests/torch_models.py's twin) on the
first SAMPLES (default 20000) Fashion-MNIST training images, 2 devices with
consecutive halves, each trains one epoch (batch 100, SGD lr 0.01 momentum
0.9, one thread) from the same initial weights; then FedAvg of every
parameter and BN buffer. Prints the test accuracy (all 10,000 images) of
each device's model, of their average, and of the average with its BN
statistics re-estimated on 2,000 training images; --central also trains
the model on all SAMPLES in one place. Needs Debian's python3-torch and
dataset-fashion-mnist; run with /usr/bin/python3."""
import copy, os, sys, time
import numpy as np
import torch
import torch.nn.functional as F
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
import torch_models as tm  # noqa: E402
from table1 import fashion, MEAN, STD  # noqa: E402
torch.set_num_threads(1)
model_name = sys.argv[1] if len(sys.argv) > 1 else "resnet18"
N = int(sys.argv[2]) if len(sys.argv) > 2 else 20000
D = 2
def normalised(split, limit):
    x, y = fashion(split, limit)
    return ((x.reshape(-1, 1, 28, 28).astype(np.float32) / 255 - MEAN) / STD), y.astype(np.int64)
xtr, ytr = normalised("train", N)
xte, yte = normalised("test", 0)
def train(m, x, y, seed):
    m.train(); opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
    g = np.random.default_rng(seed); idx = g.permutation(len(x))
    for i in range(0, len(x), 100):
        b = idx[i:i+100]; xb = torch.from_numpy(x[b]).to(memory_format=torch.channels_last)
        loss = F.cross_entropy(m(xb), torch.from_numpy(y[b])); opt.zero_grad(); loss.backward(); opt.step()
    return loss.item()
def acc(m):
    m.eval(); c = 0
    with torch.no_grad():
        for i in range(0, len(xte), 500):
            c += (m(torch.from_numpy(xte[i:i+500]).to(memory_format=torch.channels_last)).argmax(1).numpy() == yte[i:i+500]).sum()
    return 100.0 * c / len(xte)
t0 = time.time()
base = tm.build(model_name, 1, 28, seed=1)
devs = []
for d in range(D):
    m = copy.deepcopy(base); s = N // D
    l = train(m, xtr[d*s:(d+1)*s], ytr[d*s:(d+1)*s], d)
    devs.append(m); print("device %d: last loss %.3f, test acc %.2f%%" % (d, l, acc(m)), flush=True)
avg = copy.deepcopy(base); sd = avg.state_dict()
for k in sd:
    if sd[k].dtype.is_floating_point:
        sd[k] = sum(m.state_dict()[k] for m in devs) / D
    else:
        sd[k] = devs[0].state_dict()[k]
avg.load_state_dict(sd)
print("fedavg of %d devices: test acc %.2f%%" % (D, acc(avg)), flush=True)
for m in avg.modules():
    if isinstance(m, torch.nn.BatchNorm2d): m.reset_running_stats(); m.momentum = None
avg.train()
with torch.no_grad():
    for i in range(0, 2000, 100):
        avg(torch.from_numpy(xtr[i:i+100]).to(memory_format=torch.channels_last))
print("fedavg, BN statistics re-estimated on 2000 training images: test acc %.2f%%" % acc(avg), flush=True)
if "--central" not in sys.argv[3:]:
    sys.exit(0)
c = copy.deepcopy(base); l = train(c, xtr, ytr, 9)
print("central, %d samples: last loss %.3f, test acc %.2f%% (%.0f s total)" % (N, l, acc(c), time.time() - t0))
