#!/usr/bin/python3
"""torch_models.py: PyTorch builders of the paper's models as pipelearn lays
them out (docs of ../shared/reference/pipelearn-facts.md, "Models"; the
PipeLearn reference's networks/ and config.py), for parity tests against the
C models and for the PyTorch column of tests/bench/table1.py.

    import torch_models
    model = torch_models.build("resnet18", in_c=1, side=28, classes=10)
    model.units                 # OrderedDict: split-unit name -> module
    torch_models.unit_names("mobilenetv3-small")

Every model is an nn.Sequential of its split units, named as common/nn/
nn_spec.c names them (vgg5: conv1..conv3, dense1, dense2; vgg11: conv1..conv8,
dense1..dense3; resnet18: stem, block1..block8, head; mobilenetv3-small:
stem, bneck1..bneck11, tail), so model[:p] is the device part of split point
p and model[p:] the server's. Inside a unit, modules are registered in the
order of the C unit's layers, so the parametric ones (Conv2d, BatchNorm2d,
Linear) come out of `parametric_layers(unit)` in the order of the C tensors
u<unit>.l<layer>.*. Two layout differences the weight copy must bridge:
our convolution weights are (k, r, s, c/groups) where PyTorch's are
(k, c/groups, r, s), and our flatten is NHWC (h, w, c) where PyTorch's is
(c, h, w) (only VGG5 flattens a map larger than 1x1).

`load_ours(model, tensors, weights)` copies a pipelearn model's weights
(the tensor table and slab tests/tools/dump_step writes) into the PyTorch
one, bridging both differences.

Run as a program (a unit test, exit 77 without python3-torch) it checks
every model on 28x28x1 and 32x32x3: unit names and counts, output shape,
and that the units chain to the whole model at every split point.

Inputs are NCHW tensors; `build(..., channels_last=True)` (the default)
converts the model to channels_last, as the benchmarks run PyTorch.
Initialisation as the reference's VGG: Xavier-uniform weights, zero biases,
BatchNorm weight 1 and bias 0 (pipelearn initialises every model so).
"""
import sys
from collections import OrderedDict

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:
    if __name__ == "__main__":
        print("SKIP: python3-torch not installed")
        sys.exit(77)
    raise

MODELS = ("vgg5", "vgg5-nobn", "vgg11", "resnet18", "mobilenetv3-small")


class HSwish(nn.Module):
    """x * relu6(x + 3) / 6."""
    def forward(self, x):
        return F.hardswish(x)


class HSigmoid(nn.Module):
    """relu6(x + 3) / 6."""
    def forward(self, x):
        return F.hardsigmoid(x)


class Flatten(nn.Module):
    """(n, c, h, w) to (n, c*h*w) in PyTorch's (c, h, w) order."""
    def forward(self, x):
        return torch.flatten(x, 1)


def _conv_unit(cin, cout, bn, pool):
    """conv3x3 pad 1 (bias) [+ BN] + ReLU [+ maxpool 2]: a VGG unit."""
    layers = [nn.Conv2d(cin, cout, 3, 1, 1, bias=True)]
    if bn:
        layers.append(nn.BatchNorm2d(cout))
    layers.append(nn.ReLU())
    if pool:
        layers.append(nn.MaxPool2d(2, 2))
    return nn.Sequential(*layers)


def vgg5(in_c, side, classes, bn=True):
    """The reference VGG5; no ReLU between the dense layers (its quirk)."""
    s4 = side // 4
    return OrderedDict([
        ("conv1", _conv_unit(in_c, 32, bn, True)),
        ("conv2", _conv_unit(32, 64, bn, True)),
        ("conv3", _conv_unit(64, 64, bn, False)),
        ("dense1", nn.Sequential(Flatten(), nn.Linear(s4 * s4 * 64, 128))),
        ("dense2", nn.Sequential(nn.Linear(128, classes))),
    ])


def vgg11(in_c, side, classes):
    """8 conv units (64, 128, 256, 256, 512, 512, 512, 512; max-pool after
    1, 2, 4, 6, 8), then dense 4096 + dropout 0.5, 4096 + dropout 0.5,
    classes. The reference's Dense has no ReLU (and applies its dropout to
    the dense layer's input by mistake); here dropout follows the dense
    layer, as the C model. Needs a side that is a multiple of 32."""
    if side % 32:
        raise ValueError("vgg11 needs a side that is a multiple of 32, got %d "
                         "(pad 28x28 images with pad_to 32)" % side)
    widths = (64, 128, 256, 256, 512, 512, 512, 512)
    pools = (True, True, False, True, False, True, False, True)
    units = OrderedDict()
    cin = in_c
    for i, (w, p) in enumerate(zip(widths, pools)):
        units["conv%d" % (i + 1)] = _conv_unit(cin, w, True, p)
        cin = w
    s = side // 32
    units["dense1"] = nn.Sequential(Flatten(), nn.Linear(s * s * 512, 4096), nn.Dropout(0.5))
    units["dense2"] = nn.Sequential(nn.Linear(4096, 4096), nn.Dropout(0.5))
    units["dense3"] = nn.Sequential(nn.Linear(4096, classes))
    return units


class BasicBlock(nn.Module):
    """conv3x3/stride + BN + ReLU + conv3x3 + BN, plus the input (through
    conv1x1/stride + BN where the shape changes), then ReLU. No biases."""
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu1 = nn.ReLU()
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = None
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, 0, bias=False),
                                          nn.BatchNorm2d(cout))
        self.relu2 = nn.ReLU()

    def forward(self, x):
        out = self.bn2(self.conv2(self.relu1(self.bn1(self.conv1(x)))))
        return self.relu2(out + (self.shortcut(x) if self.shortcut is not None else x))


def resnet18(in_c, side, classes):
    """Stem conv7x7/2 pad 3 (64, no bias) + BN + ReLU + maxpool 3/2 pad 1;
    basic blocks 64, 64, 128/2, 128, 256/2, 256, 512/2, 512; head global
    average pool + dense. (The reference's last "avgpool" has a 1x1 kernel
    and the map is 1x1 there for 28 and 32 inputs: the same thing.)"""
    units = OrderedDict()
    units["stem"] = nn.Sequential(nn.Conv2d(in_c, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64),
                                  nn.ReLU(), nn.MaxPool2d(3, 2, 1))
    widths = (64, 64, 128, 128, 256, 256, 512, 512)
    cin = 64
    for i, w in enumerate(widths):
        units["block%d" % (i + 1)] = BasicBlock(cin, w, 2 if w != cin else 1)
        cin = w
    units["head"] = nn.Sequential(nn.AdaptiveAvgPool2d(1), Flatten(), nn.Linear(512, classes))
    return units


class SqueezeExcite(nn.Module):
    """x * hsigmoid(W2 relu(W1 avgpool(x))), W1 c -> c/4, W2 c/4 -> c, no
    biases (the MobileNetV3 implementation the reference follows)."""
    def __init__(self, c):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Linear(c, c // 4, bias=False)
        self.relu = nn.ReLU()
        self.fc2 = nn.Linear(c // 4, c, bias=False)
        self.gate = HSigmoid()

    def forward(self, x):
        s = torch.flatten(self.pool(x), 1)
        s = self.gate(self.fc2(self.relu(self.fc1(s))))
        return x * s[:, :, None, None]


class Bottleneck(nn.Module):
    """Inverted residual: conv1x1 to exp + BN + NL; depthwise conv k/stride
    + BN; squeeze-excite (if se); NL; conv1x1 to out + BN; plus the input
    when stride is 1 and in == out. No biases."""
    def __init__(self, cin, kernel, exp, cout, se, nl, stride):
        super().__init__()
        act = nn.ReLU if nl == "relu" else HSwish
        self.expand = nn.Conv2d(cin, exp, 1, 1, 0, bias=False)
        self.bn1 = nn.BatchNorm2d(exp)
        self.act1 = act()
        self.dw = nn.Conv2d(exp, exp, kernel, stride, kernel // 2, groups=exp, bias=False)
        self.bn2 = nn.BatchNorm2d(exp)
        self.se = SqueezeExcite(exp) if se else None
        self.act2 = act()
        self.project = nn.Conv2d(exp, cout, 1, 1, 0, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        out = self.bn2(self.dw(self.act1(self.bn1(self.expand(x)))))
        if self.se is not None:
            out = self.se(out)
        out = self.bn3(self.project(self.act2(out)))
        return out + x if self.residual else out


#  (kernel, expansion, out, SE, nonlinearity, stride), the facts file's table.
MOBILENETV3_SMALL = (
    (3, 16, 16, True, "relu", 2), (3, 72, 24, False, "relu", 2),
    (3, 88, 24, False, "relu", 1), (5, 96, 40, True, "hswish", 2),
    (5, 240, 40, True, "hswish", 1), (5, 240, 40, True, "hswish", 1),
    (5, 120, 48, True, "hswish", 1), (5, 144, 48, True, "hswish", 1),
    (5, 288, 96, True, "hswish", 2), (5, 576, 96, True, "hswish", 1),
    (5, 576, 96, True, "hswish", 1),
)


def mobilenetv3_small(in_c, side, classes):
    """Stem conv3x3/2 (16, no bias) + BN + hswish; the 11 bottlenecks; tail
    conv1x1 576 (no bias) + BN + hswish, global average pool, dense 1024 +
    hswish, dense classes."""
    units = OrderedDict()
    units["stem"] = nn.Sequential(nn.Conv2d(in_c, 16, 3, 2, 1, bias=False),
                                  nn.BatchNorm2d(16), HSwish())
    cin = 16
    for i, (k, exp, cout, se, nl, stride) in enumerate(MOBILENETV3_SMALL):
        units["bneck%d" % (i + 1)] = Bottleneck(cin, k, exp, cout, se, nl, stride)
        cin = cout
    units["tail"] = nn.Sequential(nn.Conv2d(96, 576, 1, 1, 0, bias=False), nn.BatchNorm2d(576),
                                  HSwish(), nn.AdaptiveAvgPool2d(1), Flatten(),
                                  nn.Linear(576, 1024), HSwish(), nn.Linear(1024, classes))
    return units


def init_weights(model):
    """Xavier-uniform weights, zero biases, BN weight 1 and bias 0."""
    for m in model.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            nn.init.xavier_uniform_(m.weight)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)


class SplitModel(nn.Sequential):
    """nn.Sequential of named units; .units is the name -> module map."""
    @property
    def units(self):
        return OrderedDict(self.named_children())


def build(name, in_c, side, classes=10, channels_last=True, seed=None):
    """The model `name` (one of MODELS) for in_c x side x side inputs."""
    if seed is not None:
        torch.manual_seed(seed)
    if name in ("vgg5", "vgg5-nobn"):
        units = vgg5(in_c, side, classes, bn=name == "vgg5")
    elif name == "vgg11":
        units = vgg11(in_c, side, classes)
    elif name == "resnet18":
        units = resnet18(in_c, side, classes)
    elif name == "mobilenetv3-small":
        units = mobilenetv3_small(in_c, side, classes)
    else:
        raise ValueError("unknown model %r (known: %s)" % (name, ", ".join(MODELS)))
    model = SplitModel(units)
    init_weights(model)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    return model


def unit_names(name):
    return list(build(name, 3, 32, channels_last=False).units)


def parametric_layers(unit):
    """The unit's Conv2d, BatchNorm2d and Linear modules in the order of the
    C unit's layers (their registration order)."""
    return [m for m in unit.modules() if isinstance(m, (nn.Conv2d, nn.BatchNorm2d, nn.Linear))]


def load_ours(model, tensors, weights, flat_hwc=None):
    """Copies pipelearn's weights into model. tensors maps our tensor names
    ("u<unit>.l<layer>.<kind>.<param>", as tensors.txt of tests/tools/
    dump_step lists them) to (offset, count) in weights, the flat float32
    slab (BN running statistics included). Layers pair up in order within
    each unit (parametric_layers). flat_hwc: the (h, w, c) map the first
    dense layer after a flatten reads when it is larger than 1x1 (VGG5:
    (side/4, side/4, 64)), to reorder our NHWC flattening to PyTorch's."""
    layers = {}
    for name, (off, cnt) in tensors.items():
        unit, layer, kind, param = name.split(".", 3)
        key = (int(unit[1:]), int(layer[1:]))
        layers.setdefault(key, (kind, {}))[1][param] = weights[off:off + cnt]
    flattened = False
    for u, unit in enumerate(model.units.values()):
        ours = [layers[k] for k in sorted(layers) if k[0] == u]
        theirs = parametric_layers(unit)
        if len(ours) != len(theirs):
            raise ValueError("unit %d: %d parametric layers here, %d in pipelearn's"
                             % (u, len(theirs), len(ours)))
        for (kind, p), m in zip(ours, theirs):
            with torch.no_grad():
                if kind == "conv":
                    k, cg, r, s = m.weight.shape
                    w = p["w"].reshape(k, r, s, cg).transpose(0, 3, 1, 2)
                elif kind == "dense":
                    w = p["w"].reshape(m.weight.shape)
                    if flat_hwc and not flattened and m.in_features == flat_hwc[0] * flat_hwc[1] * flat_hwc[2]:
                        h, ww, c = flat_hwc
                        w = w.reshape(-1, h, ww, c).transpose(0, 3, 1, 2).reshape(m.weight.shape)
                        flattened = True
                elif kind == "bn":
                    w = p["w"]
                    m.running_mean.copy_(torch.tensor(p["running_mean"]))
                    m.running_var.copy_(torch.tensor(p["running_var"]))
                else:
                    raise ValueError("unknown layer kind %r" % kind)
                if tuple(m.weight.shape) != tuple(w.shape):
                    raise ValueError("%s: shape %s here, %s in pipelearn's"
                                     % (kind, tuple(m.weight.shape), tuple(w.shape)))
                m.weight.copy_(torch.tensor(w.copy()))
                if ("b" in p) != (m.bias is not None):
                    raise ValueError("%s in unit %d: bias %s here, %s in pipelearn's"
                                     % (kind, u, m.bias is not None, "b" in p))
                if m.bias is not None:
                    m.bias.copy_(torch.tensor(p["b"]))


def _self_test():
    """Shapes and unit counts for both input layouts, split chaining, and
    the parameter counts (printed)."""
    expect_units = {"vgg5": 5, "vgg5-nobn": 5, "vgg11": 11, "resnet18": 10,
                    "mobilenetv3-small": 13}
    for name in MODELS:
        for in_c, side in ((1, 28), (3, 32)):
            if name == "vgg11" and side == 28:
                side = 32       # pad_to 32
            model = build(name, in_c, side, seed=1).eval()
            assert len(model.units) == expect_units[name], (name, list(model.units))
            x = torch.randn(2, in_c, side, side).to(memory_format=torch.channels_last)
            with torch.no_grad():
                y = model(x)
                for p in range(1, len(model)):
                    assert torch.equal(model[p:](model[:p](x)), y), (name, p)
            assert y.shape == (2, 10), (name, y.shape)
            params = sum(t.numel() for t in model.parameters())
            print("%-18s %dx%dx%d  %2d units  %9d parameters"
                  % (name, side, side, in_c, len(model.units), params))


if __name__ == "__main__":
    _self_test()
