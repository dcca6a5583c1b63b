"""comparison.csv, runs.csv and comparison.md."""

import csv
import io

from .metrics import IDEAL_TARGET, LB_TARGET, STAGES, ideal_terms

CSV_COLUMNS = [
    "model", "mode", "profile", "runs_ok", "runs_failed",
    "epoch_s", "epoch_s_min", "epoch_s_max", "speedup_vs_fl", "speedup_vs_sfl",
    "server_idle_s", "device_idle_s", "bytes_up_per_device", "bytes_down_per_device",
    "test_acc", "lower_bound_s", "bound_by", "epoch_over_lower_bound", "lower_bound_target",
    "ideal_speedup_vs_sfl", "fraction_of_ideal", "ideal_target",
    "split_point", "micro_batches", "notes",
]
# CSV column -> row key where they differ.
_ROW_KEY = {"bytes_up_per_device": "bytes_up", "bytes_down_per_device": "bytes_down",
            "epoch_over_lower_bound": "lb_ratio", "lower_bound_target": "lb_target"}
RUN_COLUMNS = ["run", "model", "mode", "profile", "repeat", "status", "epoch_s", "lower_bound_s",
               "bound_by", "epoch_over_lower_bound", "server_idle_s", "device_idle_s",
               "bytes_up_per_device", "bytes_down_per_device", "test_acc", "ideal_speedup"]


def _cell(v):
    if v is None:
        return ""
    if isinstance(v, float):
        return "%.6g" % v
    if isinstance(v, list):
        return "; ".join(v)
    return str(v)


def comparison_csv(rows):
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for r in rows:
        w.writerow([_cell(r.get(_ROW_KEY.get(c, c))) for c in CSV_COLUMNS])
    return out.getvalue()


def runs_csv(runs, per_run):
    by = {m["name"]: m for m in per_run}
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(RUN_COLUMNS)
    for run in runs:
        m = by.get(run.name, {})
        w.writerow([run.name, run.model, run.mode, run.profile, _cell(run.repeat),
                    "ok" if run.ok else "failed: " + run.error,
                    _cell(m.get("epoch_s")), _cell(m.get("lower_bound_s")),
                    _cell(m.get("bound_by")), _cell(m.get("lb_ratio")),
                    _cell(m.get("server_idle_s")), _cell(m.get("device_idle_s")),
                    _cell(m.get("bytes_up")), _cell(m.get("bytes_down")),
                    _cell(m.get("test_acc")), _cell(m.get("ideal_speedup"))])
    return out.getvalue()


def _f(v, fmt="%.2f", suffix=""):
    return (fmt % v) + suffix if v is not None else "–"


def _per_device(value):
    """lab.json's per-device list as "10/50" (devices in order); a number as is."""
    if isinstance(value, list):
        return "/".join("%g" % v if isinstance(v, (int, float)) else "none" for v in value)
    return value


def _setup_line(runs):
    """One line on how the runs were made, from lab.json and summary config."""
    def values(get):
        vals = []
        for r in runs:
            try:
                v = get(r)
            except (AttributeError, KeyError, TypeError):
                v = None
            if v is not None and v not in vals:
                vals.append(v)
        return ", ".join(str(v) for v in vals) if vals else None

    ok = [r for r in runs if r.ok]
    cfg = lambda r, k: r.summary["config"][k] if r in ok else None  # noqa: E731
    parts = [
        ("model %s", values(lambda r: cfg(r, "model"))),
        ("dataset %s", values(lambda r: cfg(r, "dataset"))),
        ("%s samples", values(lambda r: cfg(r, "samples"))),
        ("batch %s", values(lambda r: cfg(r, "batch_size"))),
        ("%s epoch(s)", values(lambda r: cfg(r, "epochs"))),
        ("%s device(s)", values(lambda r: r.lab.get("devices") or cfg(r, "devices"))),
        ("device CPU %s%% of a core", values(lambda r: _per_device(r.lab.get("device_cpu_pct")))),
        ("network back-end %s", values(lambda r: r.lab.get("backend"))),
    ]
    return ", ".join(fmt % v for fmt, v in parts if v is not None)


def comparison_md(directory, runs, rows, per_run, charts, profile_notes):
    # With several models every row says which (a column, or before the
    # profile); with one the tables read as they always did.
    multi = len({r["model"] for r in rows}) > 1

    def where(r):
        return "%s %s" % (r["model"], r["profile"]) if multi else r["profile"]

    L = []
    failed = [r for r in runs if not r.ok]
    L.append("# pipelearn lab comparison")
    L.append("")
    setup = _setup_line(runs)
    L.append("%d run(s), %d failed%s." % (len(runs), len(failed), ". " + setup if setup else ""))
    L.append("")
    L.append("Every number is per epoch (the mean over a run's epochs) and the median over a "
             "(mode, profile)'s successful repeats (n). Epoch time is the server's `wall_s` "
             "(training only; the test-set evaluation is not included). Speedups divide median "
             "epoch times at the same profile. Idle: server = summed over its compute workers, "
             "device = mean over devices. Bytes are per device (1 MB = 10^6 bytes). Lower bound "
             "= the largest of device compute, server compute (busy / workers: the server's "
             "workers are assumed to share its work evenly; at most the server's CPU quota "
             "in cores), uplink bytes / rate and downlink bytes / rate, per device, at the "
             "profile's nominal rate. See "
             "docs/lab-report.md.")
    L.append("")
    if profile_notes:
        L.append("Profiles: " + "; ".join("**%s** %s" % (p, n)
                                          for p, n in profile_notes.items() if n) + ".")
        L.append("")
    L.append(("| model " if multi else "")
             + "| profile | mode | n | epoch s | vs FL | vs SFL | server idle s | device idle s "
             "| up MB/dev | down MB/dev | test acc | lower bound s (bound by) | epoch / LB "
             "| ideal vs SFL | of ideal |")
    L.append(("|---" if multi else "")
             + "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|")
    for r in rows:
        n = "%d" % r["runs_ok"] + (" (+%d failed)" % r["runs_failed"] if r["runs_failed"] else "")
        lb = _f(r["lower_bound_s"]) + (" (%s)" % r["bound_by"] if r["bound_by"] else "")
        ratio = _f(r["lb_ratio"], suffix="x")
        if r["lb_target"]:
            ratio += " " + r["lb_target"]
        frac = _f(r["fraction_of_ideal"] * 100 if r["fraction_of_ideal"] is not None else None,
                  "%.0f", "%")
        if r["ideal_target"]:
            frac += " " + r["ideal_target"]
        L.append(("| %s " % r["model"] if multi else "")
                 + "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["profile"], r["mode"], n, _f(r["epoch_s"]), _f(r["speedup_vs_fl"], suffix="x"),
            _f(r["speedup_vs_sfl"], suffix="x"), _f(r["server_idle_s"]),
            _f(r["device_idle_s"]),
            _f(r["bytes_up"] / 1e6 if r["bytes_up"] is not None else None, "%.1f"),
            _f(r["bytes_down"] / 1e6 if r["bytes_down"] is not None else None, "%.1f"),
            _f(r["test_acc"] * 100 if r["test_acc"] is not None else None, "%.2f", "%"),
            lb, ratio, _f(r["ideal_speedup_vs_sfl"], suffix="x"), frac))
    L.append("")

    L.append("## Targets (pipelearn)")
    L.append("")
    pl = [r for r in rows if r["mode"] == "pipelearn"]
    if not pl:
        L.append("No pipelearn run: nothing to check.")
    for r in pl:
        if r["lb_ratio"] is not None:
            L.append("- %s: epoch %.2f s = %.2fx its lower bound %.2f s (%s); target <= %.1fx: "
                     "**%s**" % (where(r), r["epoch_s"], r["lb_ratio"], r["lower_bound_s"],
                                 r["bound_by"], LB_TARGET, r["lb_target"]))
        else:
            L.append("- %s: no lower bound (no successful run)" % where(r))
        if r["fraction_of_ideal"] is not None:
            L.append("- %s: speedup over sfl %.2fx of an ideal %.2fx = %.0f%%; target >= %.0f%%: "
                     "**%s**" % (where(r), r["speedup_vs_sfl"], r["ideal_speedup_vs_sfl"],
                                 100 * r["fraction_of_ideal"], 100 * IDEAL_TARGET,
                                 r["ideal_target"]))
        else:
            L.append("- %s: no ideal speedup (needs a successful sfl run at this profile)"
                     % where(r))
    L.append("")

    sfl = [r for r in rows if r["mode"] == "sfl" and r["stages"]]
    if sfl:
        L.append("## Stage times of sfl (s per epoch; ideal speedup = sum / largest)")
        L.append("")
        L.append("Per stage, the slowest device; server = that device's compute on the server "
                 "(timeline.csv `server:dN`); links at the profile's nominal rate. "
                 "Backward includes the optimiser update. Device = forward + backward of one "
                 "device: both run on its one core, so the pipeline can go no faster than "
                 "that either; largest = the largest stage or device.")
        L.append("")
        L.append("| profile | " + " | ".join(STAGES) + " | sum | device | largest | ideal |")
        L.append("|---|" + "---:|" * (len(STAGES) + 4))
        for r in sfl:
            st = r["stages"]
            vals = [st.get(s) for s in STAGES]
            total, largest = ideal_terms(st)
            L.append("| %s | %s | %s | %s | %s | %s |" % (
                where(r), " | ".join(_f(v) for v in vals),
                _f(total if any(v is not None for v in vals) else None),
                _f(st.get("device")), _f(largest if largest > 0 else None),
                _f(r["ideal_speedup"], suffix="x")))
        L.append("")

    L.append("## Fastest mode per profile (median epoch time)")
    L.append("")
    for model, profile in dict.fromkeys((r["model"], r["profile"]) for r in rows):
        label = where({"model": model, "profile": profile})
        cand = [r for r in rows if r["model"] == model and r["profile"] == profile
                and r["epoch_s"] is not None]
        if cand:
            best = min(cand, key=lambda r: r["epoch_s"])
            others = ", ".join("%s %.2f s" % (r["mode"], r["epoch_s"])
                               for r in sorted(cand, key=lambda r: r["epoch_s"])[1:])
            L.append("- %s: **%s** (%.2f s)%s" % (label, best["mode"], best["epoch_s"],
                                                 "; then " + others if others else ""))
        else:
            L.append("- %s: no successful run" % label)
    L.append("")

    L.append("## Runs")
    L.append("")
    by = {m["name"]: m for m in per_run}
    L.append("| run | status | epoch s | lower bound s | epoch / LB | bound by |")
    L.append("|---|---|---:|---:|---:|---|")
    for run in runs:
        m = by.get(run.name)
        if m:
            L.append("| %s | ok | %s | %s | %s | %s |" % (
                run.name, _f(m["epoch_s"]), _f(m["lower_bound_s"]),
                _f(m["lb_ratio"], suffix="x"), m["bound_by"] or "–"))
        else:
            L.append("| %s | **failed**: %s | – | – | – | – |" % (run.name, run.error))
    L.append("")

    notes = [(where(r), r["mode"], n) for r in rows for n in r["notes"]]
    if notes:
        L.append("## Notes")
        L.append("")
        for p, m, n in notes:
            L.append("- %s %s: %s" % (p, m, n))
        L.append("")

    if charts:
        L.append("## Charts")
        L.append("")
        for name, caption in charts:
            L.append("![%s](%s)" % (caption, name))
            L.append("")
    return "\n".join(L)
