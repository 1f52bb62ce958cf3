#!/usr/bin/env python3
"""Draws the daemon's peak RSS against jobs in flight, one line per front
end, from the `rss_point <front end> <jobs> <MB>` lines memory_bench prints:

    cargo bench --bench memory_bench | tee bench.txt
    python3 benches/rss_plot.py < bench.txt > docs/rss-per-job.svg

Standard library only; log scale on the jobs axis."""

import math
import sys

COLORS = {"boinc": "#1f77b4", "blah": "#d62728", "at_once": "#2ca02c", "blah_flood": "#ff7f0e"}
LABELS = {
    "boinc": "BOINC_* front end",
    "blah": "batch boinc (BLAH), 50 commands pending as a gridmanager",
    "at_once": "BOINC_*, the 100 submits sent at once",
    "blah_flood": "batch boinc, every command sent before a result is read",
}


def main():
    series = {}
    for line in sys.stdin:
        parts = line.split()
        if len(parts) == 4 and parts[0] == "rss_point":
            series.setdefault(parts[1], []).append((int(parts[2]), float(parts[3])))
    if not series:
        sys.exit("no rss_point lines on stdin")
    points = [p for s in series.values() for p in s]
    w, h, left, right, top, bottom = 640, 400, 70, 20, 30, 60
    lo = 10 ** math.floor(math.log10(min(j for j, _ in points)))
    hi = 10 ** math.ceil(math.log10(max(j for j, _ in points)))
    # Headroom above the highest point keeps the legend clear of the lines.
    ymax = max(50.0, math.ceil(max(m for _, m in points) * 1.5 / 50.0) * 50.0)

    def x(jobs):
        return left + (math.log10(jobs) - math.log10(lo)) / (math.log10(hi) - math.log10(lo)) * (w - left - right)

    def y(mb):
        return h - bottom - mb / ymax * (h - top - bottom)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{w / 2}" y="18" text-anchor="middle" font-size="14">boinc_gahp peak RSS (VmHWM) against jobs in flight</text>']
    decade = lo
    while decade <= hi:
        out.append(f'<line x1="{x(decade):.1f}" y1="{top}" x2="{x(decade):.1f}" y2="{h - bottom}" stroke="#ddd"/>')
        out.append(f'<text x="{x(decade):.1f}" y="{h - bottom + 16}" text-anchor="middle">{decade:,}</text>')
        decade *= 10
    step = ymax / 5
    for i in range(6):
        v = step * i
        out.append(f'<line x1="{left}" y1="{y(v):.1f}" x2="{w - right}" y2="{y(v):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.0f}</text>')
    out.append(f'<text x="{w / 2}" y="{h - 20}" text-anchor="middle">jobs in flight (log scale)</text>')
    out.append(f'<text x="16" y="{h / 2}" text-anchor="middle" transform="rotate(-90 16 {h / 2})">peak RSS, MiB</text>')
    for i, (name, pts) in enumerate(sorted(series.items())):
        pts.sort()
        color = COLORS.get(name, "#2ca02c")
        path = " ".join(f"{x(j):.1f},{y(m):.1f}" for j, m in pts)
        out.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"/>')
        for j, m in pts:
            out.append(f'<circle cx="{x(j):.1f}" cy="{y(m):.1f}" r="3.5" fill="{color}"/>')
            out.append(f'<text x="{x(j) + 6:.1f}" y="{y(m) - 6:.1f}" fill="{color}">{m:.0f} MiB</text>')
        ly = top + 14 + 16 * i
        out.append(f'<line x1="{left + 10}" y1="{ly - 4}" x2="{left + 30}" y2="{ly - 4}" stroke="{color}" stroke-width="2"/>')
        out.append(f'<text x="{left + 36}" y="{ly}">{LABELS.get(name, name)}</text>')
    out.append("</svg>")
    print("\n".join(out))


if __name__ == "__main__":
    main()
