"""The report's SVG charts: epoch time and idle time as grouped bars (one
group per profile, one bar per mode, one panel per model: the paper's
Figures 2 and 3), and a pipeline timeline (Gantt) of
one run, drawn from its timeline.csv like Figure 1 of the PipeLearn paper.

Elements carry class and data-* attributes (bar, lane, data-mode,
data-stage, ...) so tests and scripts can find them."""

import math
import re

from .svg import Svg, nice_ticks, text_width, tick_label

# Okabe-Ito colours: distinguishable with the common colour-vision deficiencies.
MODE_COLOURS = {"fl": "#E69F00", "sl": "#56B4E9", "sfl": "#009E73", "pipelearn": "#0072B2"}
EXTRA_COLOURS = ["#CC79A7", "#D55E00", "#F0E442", "#999999", "#000000"]
STAGE_COLOURS = {
    "forward": "#0072B2", "backward": "#D55E00", "update": "#009E73",
    "compute": "#CC79A7", "uplink": "#E69F00", "downlink": "#56B4E9",
    "upload": "#F0E442", "wait": "#C8C8C8",
}
STAGE_ORDER = ["forward", "uplink", "compute", "downlink", "backward", "update", "upload",
               "wait"]
STAGE_LABELS = {"wait": "wait (blocked on server)", "upload": "blocked in send",
                "compute": "server compute (fwd + loss + bwd)",
                "uplink": "uplink (inferred)", "downlink": "downlink (inferred)"}
# Dark fills get white labels.
_DARK = {"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#000000"}


def colour_map(names, known):
    out, extra = {}, iter(EXTRA_COLOURS * 4)
    for n in names:
        out[n] = known.get(n) or next(extra)
    return out


def _legend(svg, x_center, y, items, size=12):
    """items: [(label, fill, kind)] kind 'box' or 'mark' (a dashed line)."""
    widths = [22 + text_width(label, size) + 18 for label, _, _ in items]
    x = x_center - sum(widths) / 2
    svg.open("g", class_="legend")
    for (label, fill, kind), w in zip(items, widths):
        if kind == "mark":
            svg.line(x, y - 4, x + 16, y - 4, stroke=fill, width=2.5, stroke_dasharray="4 2")
        elif kind == "whisker":
            svg.line(x + 8, y - 12, x + 8, y + 2, stroke=fill, width=1.2)
            svg.line(x + 4, y - 12, x + 12, y - 12, stroke=fill, width=1.2)
            svg.line(x + 4, y + 2, x + 12, y + 2, stroke=fill, width=1.2)
        else:
            svg.rect(x, y - 11, 16, 12, fill, stroke="#555", stroke_width=0.5)
        svg.text(x + 22, y, label, size=size)
        x += w
    svg.close("g")


def _fmt_value(v):
    return "%.0f" % v if v >= 100 else "%.1f" % v if v >= 10 else "%.2f" % v


def _finite(fn):
    """fn with values that cannot be drawn (inf, absurdly large) as None."""
    def wrapped(g, s):
        v = fn(g, s)
        return v if v is not None and math.isfinite(v) and abs(v) < 1e300 else None
    return wrapped


def bar_panel(svg, box, groups, series, colours, value, title, ylabel,
              spread=None, mark=None, missing=None, group_notes=None):
    """Grouped bars in box (x, y, w, h). value(g, s) -> number or None;
    spread(g, s) -> (lo, hi) whisker or None; mark(g, s) -> a value drawn
    as a dashed tick across the bar (e.g. the lower bound) or None;
    missing(g, s) -> short text shown where there is no bar, or None."""
    x0, y0, w, h = box
    left, right, top, bottom = 64, 12, 30, 48
    value = _finite(value)
    mark = _finite(mark) if mark else None
    px, py, pw, ph = x0 + left, y0 + top, w - left - right, h - top - bottom
    vmax = 0.0
    for g in groups:
        for s in series:
            for v in (value(g, s), (spread(g, s) or (None, None))[1] if spread else None,
                      mark(g, s) if mark else None):
                if v is not None and math.isfinite(v) and v < 1e300 and v > vmax:
                    vmax = v
    ticks = nice_ticks(vmax * 1.08 if vmax > 0 else 0)
    top_v = ticks[-1]

    def ypos(v):
        return py + ph - (v / top_v) * ph

    svg.text(x0 + w / 2, y0 + 18, title, size=14, anchor="middle", weight="bold")
    for t in ticks:
        y = ypos(t)
        svg.line(px, y, px + pw, y, stroke="#e3e3e3", width=1)
        svg.text(px - 6, y + 4, tick_label(t), size=11, anchor="end", fill="#444")
    svg.line(px, py, px, py + ph, stroke="#333", width=1)
    svg.line(px, py + ph, px + pw, py + ph, stroke="#333", width=1)
    yl_x, yl_y = x0 + 16, py + ph / 2
    svg.text(yl_x, yl_y, ylabel, size=12, anchor="middle",
             transform="rotate(-90 %.1f %.1f)" % (yl_x, yl_y))

    gw = pw / max(len(groups), 1)
    bw = min(0.8 * gw / max(len(series), 1), 70.0)
    for gi, g in enumerate(groups):
        gx = px + gi * gw + (gw - bw * len(series)) / 2
        svg.text(px + gi * gw + gw / 2, py + ph + 18, g, size=13, anchor="middle", weight="bold")
        if group_notes and group_notes.get(g):
            svg.text(px + gi * gw + gw / 2, py + ph + 34, group_notes[g], size=11,
                     anchor="middle", fill="#555")
        for si, s in enumerate(series):
            bx = gx + si * bw
            v = value(g, s)
            if v is None:
                why = missing(g, s) if missing else None
                if why:
                    svg.text(bx + bw / 2, py + ph - 6, why, size=10, anchor="middle",
                             fill="#a00", class_="missing", data_mode=s, data_group=g)
                continue
            y = ypos(v)
            svg.rect(bx + 1, y, bw - 2, py + ph - y, colours[s], class_="bar", data_mode=s,
                     data_group=g, data_value="%.6g" % v,
                     tooltip="%s, %s: %s" % (s, g, _fmt_value(v)))
            label_y = y - 4
            if spread:
                lo_hi = spread(g, s)
                if lo_hi and None not in lo_hi and all(math.isfinite(e) and abs(e) < 1e300
                                                       for e in lo_hi) \
                        and lo_hi[1] > lo_hi[0]:
                    cx = bx + bw / 2
                    svg.line(cx, ypos(lo_hi[0]), cx, ypos(lo_hi[1]), stroke="#222", width=1.2)
                    for e in lo_hi:
                        svg.line(cx - 4, ypos(e), cx + 4, ypos(e), stroke="#222", width=1.2)
                    label_y = min(label_y, ypos(lo_hi[1]) - 4)
            if mark:
                mv = mark(g, s)
                if mv is not None:
                    svg.line(bx + 3, ypos(mv), bx + bw - 3, ypos(mv), stroke="#000", width=2.5,
                             stroke_dasharray="4 2", class_="mark", data_mode=s, data_group=g,
                             data_value="%.6g" % mv)
                    if abs(ypos(mv) - (y - 8)) < 12:
                        label_y = min(label_y, ypos(mv) - 4)
            if text_width(_fmt_value(v), 10) <= bw + 8:
                svg.text(bx + bw / 2, label_y, _fmt_value(v), size=10, anchor="middle",
                         fill="#222")


def _chart_width(groups, series):
    return int(max(640, 110 + len(groups) * (len(series) * 62 + 40)))


def _models(rows):
    """The rows' models in row order (aggregate sorts them as the paper does)."""
    return list(dict.fromkeys(r.get("model") or "unknown" for r in rows)) or ["unknown"]


def _model_title(model, models):
    """': vgg5' after a panel's title, unless the model is unknown and alone."""
    return "" if model == "unknown" and len(models) == 1 else ": " + model


def epoch_time_svg(rows, groups, series, profile_notes):
    """Figure 2 of the paper: epoch time per mode (bars) per profile (groups),
    one panel per model, stacked."""
    models = _models(rows)
    colours = colour_map(series, MODE_COLOURS)
    width = _chart_width(groups, series)
    panel_h = 390
    height = panel_h * len(models) + 50
    svg = Svg(width, height, title="Epoch time per mode and profile")
    for i, model in enumerate(models):
        by = {(r["profile"], r["mode"]): r for r in rows if (r.get("model") or "unknown") == model}

        def get(g, s, k, by=by):
            r = by.get((g, s))
            return r.get(k) if r else None

        svg.open("g", class_="panel", data_metric="epoch_s", data_model=model)
        bar_panel(svg, (0, i * panel_h, width, panel_h), groups, series, colours,
                  lambda g, s, get=get: get(g, s, "epoch_s"),
                  "Epoch time per mode and network profile%s (median over repeats)"
                  % _model_title(model, models),
                  "epoch time (s)",
                  spread=lambda g, s, get=get: (get(g, s, "epoch_s_min"), get(g, s, "epoch_s_max"))
                  if get(g, s, "runs_ok") and get(g, s, "runs_ok") > 1 else None,
                  mark=lambda g, s, get=get: get(g, s, "lower_bound_s"),
                  missing=lambda g, s, get=get: "failed" if get(g, s, "runs_failed") else None,
                  group_notes=profile_notes)
        svg.close("g")
    items = [(s, colours[s], "box") for s in series]
    items.append(("lower bound", "#000", "mark"))
    if any((r.get("runs_ok") or 0) > 1 for r in rows):
        items.append(("min-max over repeats", "#222", "whisker"))
    _legend(svg, width / 2, height - 20, items)
    return svg.to_string()


def idle_svg(rows, groups, series, profile_notes):
    """Figure 3 of the paper: server and device idle time per mode per
    profile, one pair of panels (server above device) per model."""
    models = _models(rows)
    colours = colour_map(series, MODE_COLOURS)
    width = _chart_width(groups, series)
    pair_h = 700
    height = pair_h * len(models) + 40
    svg = Svg(width, height, title="Idle time per mode and profile")
    for i, model in enumerate(models):
        by = {(r["profile"], r["mode"]): r for r in rows if (r.get("model") or "unknown") == model}
        y0 = i * pair_h

        def get(g, s, k, by=by):
            r = by.get((g, s))
            return r.get(k) if r else None

        def failed(g, s, get=get):
            if get(g, s, "runs_ok"):
                return "n/a"        # e.g. fl's server: no compute workers
            return "failed" if get(g, s, "runs_failed") else None

        title = _model_title(model, models)
        svg.open("g", class_="panel", data_metric="server_idle_s", data_model=model)
        bar_panel(svg, (0, y0, width, 340), groups, series, colours,
                  lambda g, s, get=get: get(g, s, "server_idle_s"),
                  "Server idle per epoch%s (summed over the server's workers)" % title,
                  "server idle (s)", missing=failed, group_notes=profile_notes)
        svg.close("g")
        svg.open("g", class_="panel", data_metric="device_idle_s", data_model=model)
        bar_panel(svg, (0, y0 + 350, width, 340), groups, series, colours,
                  lambda g, s, get=get: get(g, s, "device_idle_s"),
                  "Device idle per epoch%s (mean over devices)" % title,
                  "device idle (s)", missing=failed, group_notes=profile_notes)
        svg.close("g")
    _legend(svg, width / 2, height - 20, [(s, colours[s], "box") for s in series])
    return svg.to_string()


def _lane_key(who):
    for rank, pattern in enumerate((r"device(\d+)", r"link:d(\d+)", r"server:d(\d+)")):
        m = re.fullmatch(pattern, who)
        if m:
            return (int(m.group(1)), rank, who)
    return (1 << 30, 3, who)


def infer_links(events):
    """Link events inferred from a split run's timeline that records
    compute but not transfers (written before the server recorded them): a
    micro-batch's activations are on the uplink from the end of its forward
    on the device (or the end of the previous micro-batch's upload, the link
    being serial) to the start of its compute on the server, and its
    gradients on the downlink from the end of that compute (or of the previous download) to the start of its
    backward on the device. Both spans include the propagation delay and any
    wait for a free server worker or a busy device. who = "link:dN",
    stage "uplink" / "downlink"."""
    from .runs import Event
    fwd_end, bwd_start, compute = {}, {}, {}
    for e in events:
        if e.iteration < 0 or e.micro_batch < 0:
            continue
        key = (e.epoch, e.iteration, e.micro_batch)
        m = re.fullmatch(r"device(\d+)", e.who)
        if m and e.stage == "forward":
            fwd_end[(int(m.group(1)),) + key] = e.end
        elif m and e.stage == "backward":
            bwd_start[(int(m.group(1)),) + key] = e.start
        m = re.fullmatch(r"server:d(\d+)", e.who)
        if m and e.stage == "compute":
            compute[(int(m.group(1)),) + key] = (e.start, e.end)
    out = []
    for dev in sorted({k[0] for k in compute}):
        keys = sorted((k for k in compute if k[0] == dev), key=lambda k: compute[k][0])
        up_free = down_free = float("-inf")
        for k in keys:
            c0, c1 = compute[k]
            if k in fwd_end:
                a = max(fwd_end[k], up_free)
                if c0 > a:
                    out.append(Event("link:d%d" % dev, "uplink", k[1], k[2], k[3], a, c0))
                up_free = max(up_free, c0)
            if k in bwd_start:
                a = max(c1, down_free)
                if bwd_start[k] > a:
                    out.append(Event("link:d%d" % dev, "downlink", k[1], k[2], k[3], a,
                                     bwd_start[k]))
                down_free = max(down_free, bwd_start[k])
    return out


def gantt_window(events, iters):
    """(epoch, t0, t1, iterations) of the first iters iterations of the
    first epoch in events, or None when there is none."""
    epochs = sorted({e.epoch for e in events if e.iteration >= 0})
    if not epochs:
        return None
    first = epochs[0]
    its = sorted({e.iteration for e in events if e.epoch == first and e.iteration >= 0})[:iters]
    chosen = [e for e in events if e.epoch == first and e.iteration in its]
    return first, min(e.start for e in chosen), max(e.end for e in chosen), its


def gantt_svg(run_name, mode, profile, events, iters):
    """SVG text of the timeline of the first iters iterations of the first
    epoch, or None when events hold no iteration."""
    win = gantt_window(events, iters)
    if win is None:
        return None
    epoch, t0, t1, its = win
    # The server records transfers (link:dN uplink /
    # downlink rows in timeline.csv); older timelines get them inferred.
    if not any(e.who.startswith("link:") for e in events):
        events = list(events) + infer_links(events)
    shown = [e for e in events if e.epoch == epoch and e.end > t0 and e.start < t1]
    lanes = sorted({e.who for e in shown}, key=_lane_key)
    stages = sorted({e.stage for e in shown},
                    key=lambda s: (STAGE_ORDER.index(s) if s in STAGE_ORDER else 99, s))
    colours = colour_map(stages, STAGE_COLOURS)
    span = max(t1 - t0, 1e-9)
    unit, scale = ("ms", 1e3) if span < 10 else ("s", 1.0)

    lane_h, left, right, top = 34, 96, 24, 64
    width = 1100
    pw = width - left - right
    height = top + lane_h * len(lanes) + 110
    svg = Svg(width, height, title="Pipeline timeline of %s" % run_name)

    def xpos(t):
        return left + (min(max(t, t0), t1) - t0) / span * pw

    it_text = "iteration %d" % its[0] if len(its) == 1 else "iterations %d-%d" % (its[0], its[-1])
    svg.text(width / 2, 22, "Pipeline timeline: %s (%s, %s), epoch %d, %s"
             % (run_name, mode, profile, epoch, it_text), size=15, anchor="middle", weight="bold")
    # Lanes.
    for li, who in enumerate(lanes):
        y = top + li * lane_h
        svg.rect(left, y, pw, lane_h, "#f4f4f4" if li % 2 == 0 else "#ffffff")
        svg.text(left - 8, y + lane_h / 2 + 4, who, size=12, anchor="end")
    # Iteration starts: the first non-wait event of each iteration.
    for it in its:
        starts = [e.start for e in shown if e.iteration == it and e.stage != "wait"]
        if not starts:
            continue
        x = xpos(min(starts))
        svg.line(x, top - 14, x, top + lane_h * len(lanes), stroke="#666", width=1,
                 stroke_dasharray="3 3")
        svg.text(x + 3, top - 4, "iteration %d" % it, size=11, fill="#444")
    # Bars.
    for li, who in enumerate(lanes):
        y = top + li * lane_h
        svg.open("g", class_="lane", data_who=who)
        for e in sorted((e for e in shown if e.who == who), key=lambda e: e.start):
            xa, xb = xpos(e.start), xpos(e.end)
            small = e.stage == "wait"
            bh = lane_h * (0.32 if small else 0.68)
            by = y + (lane_h - bh) / 2
            if e.stage in ("uplink", "downlink"):
                # Two half lanes: up on top, down below; they may overlap in time.
                bh = lane_h * 0.36
                by = y + lane_h * (0.12 if e.stage == "uplink" else 0.52)
            fill = colours[e.stage]
            tip = "%s %s, iteration %d%s: %.1f-%.1f %s" % (
                who, e.stage, e.iteration,
                ", micro-batch %d" % e.micro_batch if e.micro_batch >= 0 else "",
                (e.start - t0) * scale, (e.end - t0) * scale, unit)
            svg.rect(xa, by, max(xb - xa, 0.8), bh, fill, tooltip=tip, class_="bar",
                     data_stage=e.stage, data_iteration=e.iteration,
                     data_micro_batch=e.micro_batch, data_start="%.6f" % e.start,
                     data_end="%.6f" % e.end,
                     stroke="#ffffff" if not small else None,
                     stroke_width=0.6 if not small else None)
            if e.micro_batch >= 0 and not small and xb - xa >= 12:
                svg.text((xa + xb) / 2, by + bh / 2 + 4, str(e.micro_batch), size=10,
                         anchor="middle", fill="#fff" if fill in _DARK else "#222")
        svg.close("g")
    # Time axis.
    ay = top + lane_h * len(lanes)
    svg.line(left, ay, left + pw, ay, stroke="#333")
    for t in nice_ticks(span * scale, 10):
        if t > span * scale * 1.0001:
            break
        x = left + t / (span * scale) * pw
        svg.line(x, ay, x, ay + 5, stroke="#333")
        svg.text(x, ay + 18, tick_label(t), size=11, anchor="middle", fill="#444")
    svg.text(left + pw / 2, ay + 38, "time since the first shown iteration starts (%s)" % unit,
             size=12, anchor="middle")
    _legend(svg, width / 2, ay + 70,
            [(STAGE_LABELS.get(s, s), colours[s], "box") for s in stages], size=11)
    svg.text(width / 2, ay + 92, "numbers in bars: micro-batch index", size=10,
             anchor="middle", fill="#666")
    return svg.to_string()
