"""A small SVG writer: enough for bar and Gantt charts, with text escaped
and numbers rounded so the files stay short and diff well."""

import math
from xml.sax.saxutils import escape, quoteattr

FONT = "DejaVu Sans, Helvetica, Arial, sans-serif"


def _fmt(v):
    if isinstance(v, float):
        s = "%.2f" % v
        return s.rstrip("0").rstrip(".") if "." in s else s
    return str(v)


def _attrs(attrs):
    out = []
    for k, v in attrs.items():
        if v is None:
            continue
        name = k.rstrip("_").replace("_", "-")
        out.append("%s=%s" % (name, quoteattr(_fmt(v))))
    return " ".join(out)


def text_width(text, size):
    """Rough width in pixels of text in a sans-serif face at size px."""
    return 0.58 * size * len(text)


class Svg:
    def __init__(self, width, height, title=None):
        self.width = width
        self.height = height
        self.parts = []
        self.title = title

    def add(self, tag, body=None, **attrs):
        a = _attrs(attrs)
        a = " " + a if a else ""
        if body is None:
            self.parts.append("<%s%s/>" % (tag, a))
        else:
            self.parts.append("<%s%s>%s</%s>" % (tag, a, body, tag))

    def open(self, tag, **attrs):
        a = _attrs(attrs)
        self.parts.append("<%s%s>" % (tag, " " + a if a else ""))

    def close(self, tag):
        self.parts.append("</%s>" % tag)

    def rect(self, x, y, w, h, fill, tooltip=None, **attrs):
        if tooltip is None:
            self.add("rect", x=x, y=y, width=max(w, 0.0), height=max(h, 0.0), fill=fill, **attrs)
        else:
            self.add("rect", "<title>%s</title>" % escape(tooltip), x=x, y=y,
                     width=max(w, 0.0), height=max(h, 0.0), fill=fill, **attrs)

    def line(self, x1, y1, x2, y2, stroke="#000", width=1, **attrs):
        self.add("line", x1=x1, y1=y1, x2=x2, y2=y2, stroke=stroke, stroke_width=width, **attrs)

    def text(self, x, y, text, size=12, anchor="start", fill="#222", weight=None, **attrs):
        self.add("text", escape(str(text)), x=x, y=y, font_size=size, text_anchor=anchor,
                 fill=fill, font_weight=weight, **attrs)

    def to_string(self):
        head = ('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
                'viewBox="0 0 %d %d" font-family=%s>'
                % (self.width, self.height, self.width, self.height, quoteattr(FONT)))
        body = ['<?xml version="1.0" encoding="UTF-8"?>', head]
        if self.title:
            body.append("<title>%s</title>" % escape(self.title))
        body.append('<rect x="0" y="0" width="%d" height="%d" fill="#fff"/>'
                    % (self.width, self.height))
        body.extend(self.parts)
        body.append("</svg>")
        return "\n".join(body) + "\n"


def nice_ticks(vmax, count=5):
    """Tick values 0..top (top >= vmax) at a 1/2/2.5/5 x 10^k step."""
    if vmax is None or not math.isfinite(vmax) or vmax <= 0 or vmax > 1e300:
        return [0.0, 1.0]
    raw = vmax / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    top = step * math.ceil(vmax / step - 1e-9)
    n = int(round(top / step))
    return [i * step for i in range(n + 1)]


def tick_label(v):
    if v == 0:
        return "0"
    if abs(v) >= 100:
        return "%.0f" % v
    s = "%.2f" % v
    return s.rstrip("0").rstrip(".")
