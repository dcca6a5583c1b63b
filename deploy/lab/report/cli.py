"""pl-report DIR: the command."""

import argparse
import os
import sys

from . import charts, metrics, runs as runs_mod, tables

USAGE_EPILOG = """\
Reads DIR/runs/*/{summary.json,timeline.csv,lab.json} (as pipelearn-lab
writes them) and writes DIR/comparison.md, DIR/comparison.csv,
DIR/runs.csv, DIR/epoch_time.svg, DIR/idle.svg and DIR/gantt-RUN.svg
(by default for the first repeat of each mode at the first profile).
A run without summary.json is reported as failed. Exit status: 0 when the
report was written, 1 when DIR/runs holds no run, 2 on a usage error.
See docs/lab-report.md for what each column and chart means."""


def _write(path, text):
    """Write through a temporary file so a reader never sees half a file."""
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def _distinct(values, fmt):
    out = []
    for v in values:
        if v is not None and v not in out:
            out.append(v)
    return "/".join(fmt % v for v in out) if out else None


def _num(v, fmt):
    return fmt % v if v is not None else "n/a"


def profile_notes(runs, short):
    """{profile: its link parameters as text} from the runs' lab.json."""
    notes = {}
    for r in runs:
        if r.profile in notes:
            continue
        n = r.lab.get("devices")
        n = n if isinstance(n, int) and n > 0 else 1
        def per(key):
            return [r.per_device(key, i) for i in range(n)]
        up = _distinct(per("uplink_mbps"), "%g")
        down = _distinct(per("downlink_mbps"), "%g")
        delay = _distinct(per("delay_ms"), "%g")
        jitter = _distinct(per("jitter_ms"), "%g")
        loss = _distinct(per("loss_pct"), "%g")
        if up is None and down is None and delay is None:
            continue
        if short:
            notes[r.profile] = "%s/%s Mbit/s, %s ms" % (up or "?", down or "?", delay or "?")
        else:
            notes[r.profile] = "(up %s, down %s Mbit/s, one-way delay %s ms, jitter %s ms, " \
                "loss %s%%)" % (up or "?", down or "?", delay or "?", jitter or "?",
                                loss or "?")
    return notes


def default_gantt_runs(runs):
    """The first repeat of each mode at the first profile (successful runs);
    a mode that has no successful run there takes its first successful run."""
    ok = [r for r in runs if r.ok]
    profiles = runs_mod.profiles_of(ok)
    chosen = []
    for mode in runs_mod.modes_of(ok):
        cands = [r for r in ok if r.mode == mode]
        at_first = [r for r in cands if r.profile == profiles[0]]
        pool = at_first or cands
        pool.sort(key=lambda r: (r.repeat if r.repeat is not None else 1 << 30,
                                 runs_mod.natural_key(r.name)))
        chosen.append(pool[0])
    return chosen


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="pl-report", description="Comparison table and SVG charts of a pipelearn lab run.",
        epilog=USAGE_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", metavar="DIR", help="the lab output directory (holds runs/)")
    ap.add_argument("--gantt-iters", type=int, default=3, metavar="N",
                    help="iterations of epoch 1 in each timeline chart (default 3)")
    ap.add_argument("--gantt", action="append", metavar="RUN", default=None,
                    help="draw the timeline of this run (repeatable; default: the first "
                         "repeat of each mode at the first profile)")
    ap.add_argument("--quiet", action="store_true", help="print only errors")
    args = ap.parse_args(argv)
    if args.gantt_iters < 1:
        ap.error("--gantt-iters must be >= 1, got %d" % args.gantt_iters)

    def say(*a):
        if not args.quiet:
            print(*a)

    runs = runs_mod.load_runs(args.dir)
    if not runs:
        print("pl-report: no run directories in %s" % os.path.join(args.dir, "runs"),
              file=sys.stderr)
        return 1
    for r in runs:
        for w in r.warnings:
            if not w.startswith("no lab.json"):
                print("pl-report: %s: %s" % (r.name, w), file=sys.stderr)

    rows, per_run = metrics.aggregate(runs)
    by = {m["name"]: m for m in per_run}
    for r in runs:
        m = by.get(r.name)
        if m is None:
            say("%-28s FAILED: %s" % (r.name, r.error))
        else:
            say("%-28s epoch %s  lower bound %s (%s)  ratio %s"
                % (r.name, _num(m["epoch_s"], "%8.2f s"), _num(m["lower_bound_s"], "%8.2f s"),
                   m["bound_by"] or "-", _num(m["lb_ratio"], "%.2fx")))

    groups = runs_mod.profiles_of(runs)
    series = runs_mod.modes_of(runs)
    short = profile_notes(runs, short=True)
    _write(os.path.join(args.dir, "comparison.csv"), tables.comparison_csv(rows))
    _write(os.path.join(args.dir, "runs.csv"), tables.runs_csv(runs, per_run))
    _write(os.path.join(args.dir, "epoch_time.svg"),
           charts.epoch_time_svg(rows, groups, series, short))
    _write(os.path.join(args.dir, "idle.svg"), charts.idle_svg(rows, groups, series, short))
    chart_list = [("epoch_time.svg", "epoch time per mode and profile"),
                  ("idle.svg", "server and device idle time per mode and profile")]

    if args.gantt:
        names = {r.name: r for r in runs}
        gantt_runs = []
        for name in args.gantt:
            if name not in names:
                print("pl-report: --gantt %s: no such run" % name, file=sys.stderr)
            elif not names[name].ok:
                print("pl-report: --gantt %s: the run failed" % name, file=sys.stderr)
            else:
                gantt_runs.append(names[name])
    else:
        gantt_runs = default_gantt_runs(runs)
    for r in gantt_runs:
        events, bad = runs_mod.read_timeline(r.timeline_path)
        if bad:
            print("pl-report: %s: %d malformed timeline row(s) skipped" % (r.name, bad),
                  file=sys.stderr)
        text = charts.gantt_svg(r.name, r.mode, r.profile, events, args.gantt_iters)
        if text is None:
            print("pl-report: %s: timeline.csv has no iteration to draw" % r.name,
                  file=sys.stderr)
            continue
        fname = "gantt-%s.svg" % r.name
        _write(os.path.join(args.dir, fname), text)
        chart_list.append((fname, "pipeline timeline of %s" % r.name))

    _write(os.path.join(args.dir, "comparison.md"),
           tables.comparison_md(args.dir, runs, rows, per_run, chart_list,
                                profile_notes(runs, short=False)))
    written = ["comparison.md", "comparison.csv", "runs.csv"] + [c[0] for c in chart_list]
    say("pl-report: wrote %s in %s" % (", ".join(written), args.dir))
    failed = sum(1 for r in runs if not r.ok)
    if failed:
        say("pl-report: %d of %d run(s) failed (listed in comparison.md)" % (failed, len(runs)))
    return 0
