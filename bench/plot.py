"""Line charts as PNG with Pillow (in the lock; matplotlib is not): one panel per quantity,
x on a log scale, each series a coloured line with its points marked and labelled."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from PIL import Image, ImageDraw

COLOURS = ((31, 119, 180), (214, 39, 40), (44, 160, 44), (148, 103, 189), (255, 127, 14))
PANEL_W, PANEL_H, MARGIN = 520, 300, 56


@dataclass(frozen=True)
class Series:
    label: str
    xs: list[float]
    ys: list[float]


def _ticks(top: float) -> list[float]:
    """Four or five round ticks from 0 to at least `top`."""
    if top <= 0:
        return [0.0, 1.0]
    step = 10 ** math.floor(math.log10(top / 4))
    for mult in (1, 2, 5, 10):
        if top / (step * mult) <= 5:
            step *= mult
            break
    return [i * step for i in range(int(math.ceil(top / step)) + 1)]


def _panel(draw: ImageDraw.ImageDraw, x0: int, y0: int, title: str, series: list[Series], xlabel: str) -> None:
    left, right, top, bottom = x0 + MARGIN, x0 + PANEL_W - 16, y0 + 28, y0 + PANEL_H - 40
    draw.text((x0 + MARGIN, y0 + 8), title, fill="black")
    xs = sorted({x for s in series for x in s.xs if x > 0})
    if not xs:
        return
    lo, hi = math.log10(xs[0]), math.log10(xs[-1])
    span = hi - lo or 1.0
    yt = _ticks(max((y for s in series for y in s.ys), default=1.0) * 1.05)

    def px(x: float) -> float:
        return left + (math.log10(x) - lo) / span * (right - left) if len(xs) > 1 else (left + right) / 2

    def py(y: float) -> float:
        return bottom - y / yt[-1] * (bottom - top)

    draw.rectangle((left, top, right, bottom), outline=(120, 120, 120))
    for t in yt:
        y = py(t)
        draw.line((left, y, right, y), fill=(230, 230, 230))
        draw.text((x0 + 4, y - 6), f"{t:g}", fill="black")
    for x in xs:
        draw.text((px(x) - 14, bottom + 4), f"{x:g}", fill="black")
    draw.text(((left + right) / 2 - 20, bottom + 20), xlabel, fill="black")
    for i, s in enumerate(series):
        colour = COLOURS[i % len(COLOURS)]
        points = [(px(x), py(y)) for x, y in zip(s.xs, s.ys) if x > 0]
        if len(points) > 1:
            draw.line(points, fill=colour, width=2)
        for x, y in points:
            draw.ellipse((x - 3, y - 3, x + 3, y + 3), fill=colour)
        draw.text((left + 8, top + 6 + 14 * i), s.label, fill=colour)


def line_chart(panels: list[tuple[str, list[Series]]], xlabel: str, path: Path, columns: int = 2) -> None:
    rows = -(-len(panels) // columns)
    image = Image.new("RGB", (PANEL_W * columns, PANEL_H * rows), "white")
    draw = ImageDraw.Draw(image)
    for i, (title, series) in enumerate(panels):
        _panel(draw, (i % columns) * PANEL_W, (i // columns) * PANEL_H, title, series, xlabel)
    image.save(path, format="PNG")
