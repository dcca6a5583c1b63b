"""Per-run numbers and their aggregate per (mode, profile).

Conventions (docs/lab-report.md explains them for readers):
- Every per-run number is per epoch: the mean over the run's epochs of the
  per-epoch value (for a 1-epoch run, that epoch). Epoch time is
  summary epochs[].wall_s, which excludes the test-set evaluation (eval_s).
- Server compute of an epoch = server.busy_s / server.workers: the server's
  compute pool is assumed to split its work evenly over its workers (one per
  core), so this is the least wall time the server needs. When lab.json
  gives server_cpu_pct (the server's cgroup quota), the divisor is at most
  server_cpu_pct / 100 cores.
- Link time = bytes * 8 / (rate_mbps * 1e6), rates from lab.json per device
  (the profile's nominal rate; propagation delay is left out of both the
  lower bound and the stage times: it does not limit throughput).
- The aggregate of a (mode, profile) group is the median over its
  successful repeats; speedups divide medians.
"""

import statistics

from .runs import MODE_ORDER, MODEL_ORDER, PROFILE_ORDER, num, order_key, read_timeline

LB_TARGET = 1.2         # pipelearn epoch time <= 1.2 x its lower bound
IDEAL_TARGET = 0.8      # pipelearn speedup over sfl >= 80% of the ideal
STAGES = ["forward", "upload", "server", "download", "backward"]
BOUND_TERMS = ["device compute", "server compute", "uplink", "downlink"]


def _mean(values):
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _ratio(a, b):
    return a / b if a is not None and b is not None and b > 0 else None


def _devices(epoch):
    devs = epoch.get("devices")
    return [d for d in devs if isinstance(d, dict)] if isinstance(devs, list) else []


def _device_id(dev, index):
    i = num(dev.get("id"))
    return int(i) if i is not None else index


def _link_s(run, dev, index, key_bytes, key_rate):
    b = num(dev.get(key_bytes))
    rate = run.per_device(key_rate, _device_id(dev, index))
    if b is None or rate is None or rate <= 0:
        return None
    return b * 8 / (rate * 1e6)


def _compute_s(dev):
    parts = [num(dev.get(k)) for k in ("forward_s", "backward_s", "update_s")]
    return sum(p for p in parts if p is not None) if any(p is not None for p in parts) else None


def _server_compute_s(run, epoch):
    """busy_s over the cores the server can use: its workers, or fewer when
    the lab capped the server's CPU (lab.json server_cpu_pct)."""
    server = epoch.get("server") if isinstance(epoch.get("server"), dict) else {}
    busy, workers = num(server.get("busy_s")), num(server.get("workers"))
    if busy is None:
        return None
    cores = workers if workers and workers > 0 else 1.0
    cap = num(run.lab.get("server_cpu_pct"))
    if cap is not None and cap > 0:
        cores = min(cores, cap / 100.0)
    return busy / cores


def _server_idle_s(epoch):
    """server.idle_s, or None when the server had no compute workers (fl:
    it only averages, so its idle time means nothing)."""
    server = epoch.get("server") if isinstance(epoch.get("server"), dict) else {}
    workers = num(server.get("workers"))
    return num(server.get("idle_s")) if workers is None or workers > 0 else None


def _server_by_device(run):
    """{(epoch, device id): server compute seconds} from timeline.csv's
    server:dN compute events and the SGD steps after them (update events),
    {} when there are none."""
    events, _ = read_timeline(run.timeline_path,
                              lambda e: e.stage in ("compute", "update")
                              and e.who.startswith("server:d"))
    out = {}
    for e in events:
        try:
            dev = int(e.who[len("server:d"):])
        except ValueError:
            continue
        out[(e.epoch, dev)] = out.get((e.epoch, dev), 0.0) + (e.end - e.start)
    return out


def run_metrics(run, want_stages=False):
    """Numbers of one successful run (dict; None where not computable)."""
    epochs = run.summary["epochs"]
    m = {"name": run.name, "model": run.model, "mode": run.mode, "profile": run.profile,
         "epochs": len(epochs), "notes": []}
    m["epoch_s"] = _mean(num(e.get("wall_s")) for e in epochs)
    m["server_idle_s"] = _mean(_server_idle_s(e) for e in epochs)
    workers = [num((e.get("server") or {}).get("workers")) for e in epochs
               if isinstance(e.get("server"), dict)]
    workers = [w for w in workers if w]
    m["workers"] = int(max(workers)) if workers else None
    m["device_idle_s"] = _mean(_mean(num(d.get("idle_s")) for d in _devices(e)) for e in epochs)
    m["bytes_up"] = _mean(_mean(num(d.get("bytes_up")) for d in _devices(e)) for e in epochs)
    m["bytes_down"] = _mean(_mean(num(d.get("bytes_down")) for d in _devices(e)) for e in epochs)
    m["test_acc"] = num(epochs[-1].get("test_acc"))
    config = run.summary.get("config") if isinstance(run.summary.get("config"), dict) else {}
    for key in ("split_point", "micro_batches", "devices"):
        # lab.json first: the lab knows that only pipelearn cuts micro-batches.
        v = num(run.lab.get(key))
        if v is None:
            v = num(config.get(key))
        m[key] = int(v) if v is not None else None

    # Lower bound: per epoch the largest term, then the mean over epochs
    # (epochs run one after the other, so their bounds add up).
    bounds, binding = [], []
    no_rate = False
    for e in epochs:
        terms = {t: None for t in BOUND_TERMS}
        for i, d in enumerate(_devices(e)):
            c = _compute_s(d)
            up = _link_s(run, d, i, "bytes_up", "uplink_mbps")
            down = _link_s(run, d, i, "bytes_down", "downlink_mbps")
            no_rate = no_rate or up is None or down is None
            for t, v in (("device compute", c), ("uplink", up), ("downlink", down)):
                if v is not None and (terms[t] is None or v > terms[t]):
                    terms[t] = v
        terms["server compute"] = _server_compute_s(run, e)
        known = [(v, t) for t, v in terms.items() if v is not None]
        if known:
            v, t = max(known, key=lambda vt: vt[0])
            bounds.append(v)
            binding.append(t)
    m["lower_bound_s"] = sum(bounds) / len(bounds) if bounds and len(bounds) == len(epochs) \
        else None
    m["bound_by"] = max(set(binding), key=lambda t: (binding.count(t), -binding.index(t))) \
        if binding else None
    m["lb_ratio"] = _ratio(m["epoch_s"], m["lower_bound_s"])
    if m["lb_ratio"] is not None and m["lb_ratio"] < 0.95:
        m["notes"].append("epoch time below its lower bound: the links ran faster than the "
                          "profile's nominal rate, or the byte or time counts are off")
    if no_rate:
        m["notes"].append("no link rate in lab.json: links left out of the lower bound")

    m["stages"] = _stages(run, epochs) if want_stages else None
    if m["stages"]:
        total, largest = ideal_terms(m["stages"])
        m["ideal_speedup"] = total / largest if largest > 0 else None
    else:
        m["ideal_speedup"] = None
    return m


def ideal_terms(stages):
    """(sum of the five stages, the busiest resource): the largest stage, or
    the device's forward + backward when that is larger, since both run on
    the device's one core (a weak device's pipeline is bound by its compute,
    not by its larger stage alone)."""
    vals = [stages[s] for s in STAGES if stages.get(s) is not None]
    largest = max(vals) if vals else 0.0
    if stages.get("device") is not None:
        largest = max(largest, stages["device"])
    return sum(vals), largest


def _stages(run, epochs):
    """Per-epoch stage times of a split run (sfl): for each stage the largest
    over devices (the slowest device sets the epoch). The server stage of a
    device is its server:dN compute time in timeline.csv, else busy_s shared
    evenly over the devices. "device": the largest forward + backward +
    update of one device (its one core does all three)."""
    by_dev = _server_by_device(run)
    sums = {}
    for e in epochs:
        devs = _devices(e)
        ep = num(e.get("epoch"))
        server = e.get("server") if isinstance(e.get("server"), dict) else {}
        busy = num(server.get("busy_s"))
        per_stage = {s: [] for s in STAGES + ["device"]}
        for i, d in enumerate(devs):
            did = _device_id(d, i)
            bwd = [num(d.get("backward_s")), num(d.get("update_s"))]
            vals = {
                "forward": num(d.get("forward_s")),
                "upload": _link_s(run, d, i, "bytes_up", "uplink_mbps"),
                "server": by_dev.get((int(ep), did)) if ep is not None else None,
                "download": _link_s(run, d, i, "bytes_down", "downlink_mbps"),
                "backward": sum(b for b in bwd if b is not None) if bwd[0] is not None
                else None,
            }
            if vals["forward"] is not None and vals["backward"] is not None:
                vals["device"] = vals["forward"] + vals["backward"]
            if vals["server"] is None and busy is not None and devs:
                vals["server"] = busy / len(devs)
            for s, v in vals.items():
                if v is not None:
                    per_stage[s].append(v)
        for s, vs in per_stage.items():
            if vs:
                sums[s] = sums.get(s, 0.0) + max(vs)
    if not sums:
        return None
    return {s: sums[s] / len(epochs) for s in STAGES + ["device"] if s in sums}


def _fl_server_idle(rows):
    """fl's server has no compute workers and computes nothing while its
    devices train: its idle time, in the split modes' units (summed over
    workers), is its epoch time x the workers the split modes' server ran
    at the same model and profile (the paper's Figure 3 counts it so).
    Left empty when no split mode ran there."""
    for row in rows:
        if row["mode"] != "fl" or row["epoch_s"] is None or row["server_idle_s"] is not None:
            continue
        peers = [r["workers"] for r in rows if r["mode"] != "fl" and r["workers"]
                 and r["model"] == row["model"] and r["profile"] == row["profile"]]
        if peers:
            row["server_idle_s"] = row["epoch_s"] * max(peers)
            row["notes"].append("server idle = epoch time x %d workers (the split modes' "
                                "server): fl's server computes nothing while its devices "
                                "train" % max(peers))


def aggregate(runs):
    """(rows, per_run): one row per (model, mode, profile) with any run,
    ordered by model, profile, then mode, and the per-run metrics of every
    successful run. Speedups compare modes of the same model and profile."""
    per_run = [run_metrics(r, want_stages=(r.mode == "sfl")) for r in runs if r.ok]
    keys = sorted({(r.model, r.mode, r.profile) for r in runs},
                  key=lambda k: (order_key(k[0], MODEL_ORDER), order_key(k[2], PROFILE_ORDER),
                                 order_key(k[1], MODE_ORDER)))
    rows = []
    for model, mode, profile in keys:
        ms = [m for m in per_run
              if m["model"] == model and m["mode"] == mode and m["profile"] == profile]
        failed = [r for r in runs if not r.ok and r.model == model and r.mode == mode
                  and r.profile == profile]
        row = {"model": model, "mode": mode, "profile": profile, "runs_ok": len(ms),
               "runs_failed": len(failed)}
        for key in ("epoch_s", "server_idle_s", "device_idle_s", "bytes_up", "bytes_down",
                    "test_acc", "lower_bound_s", "lb_ratio", "ideal_speedup"):
            row[key] = median(m[key] for m in ms)
        eps = [m["epoch_s"] for m in ms if m["epoch_s"] is not None]
        row["epoch_s_min"] = min(eps) if eps else None
        row["epoch_s_max"] = max(eps) if eps else None
        bound = [m["bound_by"] for m in ms if m["bound_by"]]
        row["bound_by"] = "/".join(sorted(set(bound), key=bound.index)) if bound else None
        for key in ("split_point", "micro_batches", "devices"):
            vals = sorted({m[key] for m in ms if m[key] is not None})
            row[key] = vals[0] if len(vals) == 1 else None
        workers = [m["workers"] for m in ms if m["workers"]]
        row["workers"] = max(workers) if workers else None
        stages = [m["stages"] for m in ms if m["stages"]]
        row["stages"] = {s: median(st.get(s) for st in stages) for s in STAGES + ["device"]} \
            if stages else None
        row["notes"] = sorted({n for m in ms for n in m["notes"]})
        rows.append(row)

    def find(model, mode, profile):
        for r in rows:
            if r["model"] == model and r["mode"] == mode and r["profile"] == profile \
                    and r["epoch_s"] is not None:
                return r
        return None

    _fl_server_idle(rows)
    for row in rows:
        fl = find(row["model"], "fl", row["profile"])
        sfl = find(row["model"], "sfl", row["profile"])
        row["speedup_vs_fl"] = _ratio(fl["epoch_s"], row["epoch_s"]) if fl else None
        row["speedup_vs_sfl"] = _ratio(sfl["epoch_s"], row["epoch_s"]) if sfl else None
        row["ideal_speedup_vs_sfl"] = None
        row["fraction_of_ideal"] = None
        row["lb_target"] = None
        row["ideal_target"] = None
        if row["mode"] != "pipelearn":
            continue
        if row["lb_ratio"] is not None:
            row["lb_target"] = "met" if row["lb_ratio"] <= LB_TARGET else "missed"
        if sfl and sfl["ideal_speedup"] is not None:
            row["ideal_speedup_vs_sfl"] = sfl["ideal_speedup"]
            row["fraction_of_ideal"] = _ratio(row["speedup_vs_sfl"], sfl["ideal_speedup"])
            if row["fraction_of_ideal"] is not None:
                row["ideal_target"] = "met" if row["fraction_of_ideal"] >= IDEAL_TARGET \
                    else "missed"
            if sfl["split_point"] is not None and row["split_point"] is not None \
                    and sfl["split_point"] != row["split_point"]:
                row["notes"].append("sfl ran at split %d, pipelearn at %d"
                                    % (sfl["split_point"], row["split_point"]))
    return rows, per_run
