"""The soak's plot: the gateway's RSS and the echo calls' p99 per sampling period over time, as one SVG written
with the standard library alone (no plotting package, nothing fetched), so `bench/soak.py --plot` runs
anywhere the soak does."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

_WIDTH, _PANEL, _LEFT, _RIGHT, _TOP, _GAP = 720, 190, 70, 20, 40, 60


def soak_svg(title: str, minutes: Sequence[float], panels: Sequence[tuple[str, Sequence[float | None]]]) -> str:
    """An SVG of `panels` (a label and one value per sample, None where a period had none) stacked, all
    against `minutes`."""
    height = _TOP + len(panels) * (_PANEL + _GAP)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{height}" font-family="sans-serif" '
        'font-size="12">',
        f'<rect width="{_WIDTH}" height="{height}" fill="white"/>',
        f'<text x="{_WIDTH / 2}" y="22" text-anchor="middle" font-size="14">{escape(title)}</text>',
    ]
    span = max(minutes[-1] if minutes else 1.0, 1e-9)
    inner = _WIDTH - _LEFT - _RIGHT
    for number, (label, values) in enumerate(panels):
        top = _TOP + number * (_PANEL + _GAP)
        known = [value for value in values if value is not None]
        high = max(known) * 1.1 if known and max(known) > 0 else 1.0
        parts.append(f'<rect x="{_LEFT}" y="{top}" width="{inner}" height="{_PANEL}" fill="none" stroke="#999"/>')
        for step in range(5):  # y ticks: 0, a quarter of the top, ...
            value = high * step / 4
            y = top + _PANEL - _PANEL * step / 4
            parts.append(f'<line x1="{_LEFT - 4}" y1="{y:.1f}" x2="{_LEFT}" y2="{y:.1f}" stroke="#999"/>')
            parts.append(f'<text x="{_LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{value:,.0f}</text>')
        for step in range(6):  # x ticks in minutes
            x = _LEFT + inner * step / 5
            parts.append(f'<text x="{x:.1f}" y="{top + _PANEL + 16}" text-anchor="middle">{span * step / 5:.1f}</text>')
        parts.append(f'<text x="{_LEFT}" y="{top - 8}">{escape(label)}</text>')
        points = [
            f"{_LEFT + inner * t / span:.1f},{top + _PANEL - _PANEL * value / high:.1f}"
            for t, value in zip(minutes, values, strict=True)
            if value is not None
        ]
        if points:
            parts.append(f'<polyline points="{" ".join(points)}" fill="none" stroke="#1f6feb" stroke-width="1.5"/>')
    parts.append(f'<text x="{_LEFT + inner / 2}" y="{height - 12}" text-anchor="middle">minutes</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"
