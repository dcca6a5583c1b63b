"""Reading a lab directory: DIR/runs/<mode>-<profile>-r<k>/{summary.json,
timeline.csv, lab.json} (with several models: <model>-<mode>-<profile>-r<k>).

A run whose summary.json is missing, unreadable or has no epoch is kept as
a failed run (with the reason) so the report can list it; nothing here
raises on bad input from a run directory.
"""

import csv
import json
import math
import os
import re

# Modes in the order the table and the charts show them; others follow,
# alphabetically.
MODE_ORDER = ["fl", "sl", "sfl", "pipelearn"]
# Profiles shipped in deploy/netem/profiles, slowest first.
PROFILE_ORDER = ["4g", "4g-plus", "wifi"]
# Models in the paper's order (its figures: VGG5, then ResNet18); others
# follow, alphabetically.
MODEL_ORDER = ["vgg5", "vgg11", "resnet18", "mobilenetv3"]

_NAME_RE = re.compile(r"^(?P<mode>[A-Za-z0-9_]+)-(?P<profile>.+)-r(?P<repeat>\d+)$")


def num(value):
    """value as a finite float, or None (missing, not a number, NaN, inf)."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def natural_key(text):
    """Sort key that puts r2 before r10."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


def order_key(value, known):
    return (known.index(value), "") if value in known else (len(known), value)


class Run:
    """One run directory. summary is None when the run failed (error says why)."""

    def __init__(self, name, path):
        self.name = name
        self.path = path
        self.lab = {}
        self.summary = None
        self.error = None
        self.warnings = []
        self.mode = None
        self.profile = None
        self.model = None
        self.repeat = None

    @property
    def ok(self):
        return self.summary is not None

    @property
    def timeline_path(self):
        return os.path.join(self.path, "timeline.csv")

    def per_device(self, key, device):
        """lab.json's per-device value (a list, cycled, or one number) or None."""
        value = self.lab.get(key)
        if isinstance(value, list):
            return num(value[device % len(value)]) if value else None
        return num(value)


def _read_json(path):
    """(object, None) or (None, reason)."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f), None
    except FileNotFoundError:
        return None, "no %s" % os.path.basename(path)
    except (OSError, UnicodeDecodeError, ValueError) as e:
        return None, "%s unreadable: %s" % (os.path.basename(path), e)


def load_run(name, path):
    run = Run(name, path)
    lab, why = _read_json(os.path.join(path, "lab.json"))
    if isinstance(lab, dict):
        run.lab = lab
    elif why is None:
        run.warnings.append("lab.json is not an object")
    else:
        run.warnings.append(why)
    summary, why = _read_json(os.path.join(path, "summary.json"))
    if summary is None:
        run.error = why or "summary.json is not an object"
    elif not isinstance(summary, dict):
        run.error = "summary.json is not an object"
    elif not isinstance(summary.get("epochs"), list) or not summary["epochs"] \
            or not all(isinstance(e, dict) for e in summary["epochs"]):
        run.error = "summary.json has no epochs"
    else:
        run.summary = summary
    lab_error = run.lab.get("error")
    if lab_error:
        # The lab saw the run fail (a device died, a timeout): a summary.json
        # it left is not a complete run.
        if run.summary is not None:
            run.summary = None
            run.error = "lab.json: %s" % lab_error
        else:
            run.error += " (lab.json: %s)" % lab_error

    m = _NAME_RE.match(name)
    config = run.summary.get("config", {}) if run.summary else {}
    if not isinstance(config, dict):
        config = {}
    mode = run.lab.get("mode") or config.get("mode") or (m.group("mode") if m else None)
    profile = run.lab.get("profile") or (m.group("profile") if m else None)
    repeat = run.lab.get("repeat")
    if repeat is None and m:
        repeat = int(m.group("repeat"))
    model = run.lab.get("model") or config.get("model")
    run.model = str(model) if model else "unknown"
    run.mode = str(mode) if mode else "unknown"
    run.profile = str(profile) if profile else "local"
    run.repeat = int(repeat) if isinstance(repeat, (int, float)) and not isinstance(repeat, bool) \
        else None
    return run


def load_runs(directory):
    """All runs under directory/runs, in natural name order. [] if none."""
    runs_dir = os.path.join(directory, "runs")
    try:
        names = sorted(os.listdir(runs_dir), key=natural_key)
    except OSError:
        return []
    runs = [load_run(n, os.path.join(runs_dir, n)) for n in names
            if os.path.isdir(os.path.join(runs_dir, n))]
    # A failed run of an older lab (no "model" in lab.json, no summary)
    # belongs to the lab's one model when there is only one.
    known = {r.model for r in runs if r.model != "unknown"}
    if len(known) == 1:
        for r in runs:
            if r.model == "unknown":
                r.model = next(iter(known))
    return runs


def modes_of(runs):
    return sorted({r.mode for r in runs}, key=lambda m: order_key(m, MODE_ORDER))


def models_of(runs):
    return sorted({r.model for r in runs}, key=lambda m: order_key(m, MODEL_ORDER))


def profiles_of(runs):
    return sorted({r.profile for r in runs}, key=lambda p: order_key(p, PROFILE_ORDER))


class Event:
    __slots__ = ("who", "stage", "epoch", "iteration", "micro_batch", "start", "end")

    def __init__(self, who, stage, epoch, iteration, micro_batch, start, end):
        self.who = who
        self.stage = stage
        self.epoch = epoch
        self.iteration = iteration
        self.micro_batch = micro_batch
        self.start = start
        self.end = end


def read_timeline(path, keep=None):
    """Events of timeline.csv for which keep(event) is true (all if keep is
    None), plus the number of malformed rows skipped. ([], 0) if no file."""
    events, bad = [], 0
    try:
        f = open(path, newline="", encoding="utf-8")
    except OSError:
        return events, bad
    with f:
        reader = csv.reader(f)
        header = next(reader, None)
        cols = {name: i for i, name in enumerate(header or [])}
        need = ["who", "stage", "epoch", "iteration", "micro_batch", "start_s", "end_s"]
        if any(c not in cols for c in need):
            return events, bad
        idx = [cols[c] for c in need]
        for row in reader:
            try:
                who, stage, ep, it, mb, s, e = (row[i] for i in idx)
                ev = Event(who, stage, int(ep), int(it), int(mb), float(s), float(e))
            except (IndexError, ValueError):
                bad += 1
                continue
            if not (math.isfinite(ev.start) and math.isfinite(ev.end)) or ev.end < ev.start:
                bad += 1
                continue
            if keep is None or keep(ev):
                events.append(ev)
    return events, bad
