"""Summarize a bps-train run: its log.csv (and optional --eval results) as a Markdown table and
a PNG learning curve.

    python -m bps_train.report RUN_DIR [--evals EVALS.jsonl] [--png curve.png] [--rows 12]

``EVALS.jsonl``: one ``bps-train --eval`` JSON line per checkpoint (``checkpoint`` names
``ckpt_UPDATE.pt``, or ``random``). The plot is drawn with Pillow (already a dependency) so
no plotting library is needed.
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import re
from pathlib import Path


def read_log(run_dir: Path) -> list[dict]:
    with open(run_dir / "log.csv", newline="") as f:
        return [{k: float(v) if v not in ("", "nan") else math.nan for k, v in r.items()} for r in csv.DictReader(f)]


def read_evals(path: Path | None, frames_per_update: float) -> tuple[list[dict], dict | None]:
    """(checkpoint evals sorted by frames, the random policy's eval or None)."""
    if path is None or not path.exists():
        return [], None
    evals, rand = [], None
    for line in path.read_text().splitlines():
        if not line.strip().startswith("{"):
            continue
        e = json.loads(line)
        if e["checkpoint"] == "random":
            rand = e
            continue
        m = re.search(r"ckpt_(\d+)\.pt$", e["checkpoint"])
        if m:
            e["frames"] = int(m.group(1)) * frames_per_update
            evals.append(e)
    return sorted(evals, key=lambda e: e["frames"]), rand


def smooth(rows: list[dict], key: str, window: int) -> list[float]:
    """Episode-weighted moving average (updates with few finished episodes count little)."""
    out = []
    for i in range(len(rows)):
        lo = max(0, i - window + 1)
        w = [(r["episodes"], r[key]) for r in rows[lo:i + 1] if r["episodes"] > 0 and math.isfinite(r[key])]
        n = sum(a for a, _ in w)
        out.append(sum(a * b for a, b in w) / n if n else math.nan)
    return out


def table(rows, evals, rand, n_rows: int = 12, window: int = 10) -> str:
    succ, spl, rew = smooth(rows, "success", window), smooth(rows, "spl", window), smooth(rows, "reward", window)
    idx = sorted({round(i * (len(rows) - 1) / max(1, n_rows - 1)) for i in range(n_rows)})
    lines = ["| update | frames | wall time (min) | train success | train SPL | train reward | fps | fps / sim fps |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for i in idx:
        r = rows[i]
        lines.append(f"| {int(r['update'])} | {int(r['global_step']):,} | {r['seconds'] / 60:.1f} | {succ[i]:.3f} | "
                     f"{spl[i]:.3f} | {rew[i]:.2f} | {r['fps']:.0f} | {r['fps_ratio']:.2f} |")
    out = "\n".join(lines)
    if evals or rand:
        ev = ["", "| checkpoint | frames | val episodes | val success | val SPL |", "|---|---:|---:|---:|---:|"]
        if rand:
            ev.append(f"| random policy | 0 | {rand['episodes']} | {rand['success']:.3f} | {rand['spl']:.3f} |")
        for e in evals:
            ev.append(f"| {Path(e['checkpoint']).name} | {int(e['frames']):,} | {e['episodes']} | "
                      f"{e['success']:.3f} | {e['spl']:.3f} |")
        out += "\n" + "\n".join(ev)
    return out


def plot(rows, evals, rand, path: Path, window: int = 10, size=(900, 520)):
    """Success and SPL vs frames: train (smoothed lines), val evals (dots), random (dashed)."""
    from PIL import Image, ImageDraw

    W, H = size
    left, right, top, bottom = 70, 180, 30, 60
    img = Image.new("RGB", size, "white")
    d = ImageDraw.Draw(img)
    xmax = max([r["global_step"] for r in rows] + [e["frames"] for e in evals] + [1])
    X = lambda f: left + (W - left - right) * f / xmax  # noqa: E731
    Y = lambda v: H - bottom - (H - top - bottom) * v  # noqa: E731
    d.rectangle([left, top, W - right, H - bottom], outline="black")
    for k in range(6):
        v = k / 5
        d.line([left - 4, Y(v), left, Y(v)], fill="black")
        d.text((left - 35, Y(v) - 6), f"{v:.1f}", fill="black")
        d.line([left, Y(v), W - right, Y(v)], fill=(230, 230, 230))
    for k in range(6):
        f = xmax * k / 5
        d.text((X(f) - 20, H - bottom + 8), f"{f / 1e6:.2f}M" if xmax >= 1e6 else f"{f / 1e3:.0f}K", fill="black")
    d.text(((W - right) // 2 - 40, H - 25), "frames (env steps)", fill="black")
    series = [("train success", smooth(rows, "success", window), (31, 119, 180)),
              ("train SPL", smooth(rows, "spl", window), (255, 127, 14))]
    for _, ys, col in series:
        pts = [(X(r["global_step"]), Y(y)) for r, y in zip(rows, ys) if math.isfinite(y)]
        if len(pts) > 1:
            d.line(pts, fill=col, width=2)
    for key, col in (("success", (31, 119, 180)), ("spl", (255, 127, 14))):
        pts = [(X(e["frames"]), Y(e[key])) for e in evals]
        for x, y in pts:
            d.ellipse([x - 4, y - 4, x + 4, y + 4], outline=col, width=2)
        if rand is not None:
            y = Y(rand[key])
            for x0 in range(left, W - right, 12):
                d.line([x0, y, min(x0 + 6, W - right), y], fill=col)
    ly = top + 5
    for label, col, kind in (("train success", (31, 119, 180), "line"), ("train SPL", (255, 127, 14), "line"),
                             ("val success", (31, 119, 180), "dot"), ("val SPL", (255, 127, 14), "dot"),
                             ("random (val)", (120, 120, 120), "dash")):
        x0 = W - right + 10
        if kind == "line":
            d.line([x0, ly + 6, x0 + 20, ly + 6], fill=col, width=2)
        elif kind == "dot":
            d.ellipse([x0 + 6, ly + 2, x0 + 14, ly + 10], outline=col, width=2)
        else:
            d.line([x0, ly + 6, x0 + 6, ly + 6], fill=col)
            d.line([x0 + 12, ly + 6, x0 + 18, ly + 6], fill=col)
        d.text((x0 + 26, ly), label, fill="black")
        ly += 18
    img.save(path)


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m bps_train.report",  # the docstring's first paragraph
                                description=" ".join(__doc__.split("\n\n")[0].split()))
    p.add_argument("run_dir", type=Path)
    p.add_argument("--evals", type=Path, default=None, help="JSON lines of bps-train --eval results")
    p.add_argument("--png", type=Path, default=None, help="write the learning curve here")
    p.add_argument("--rows", type=int, default=12, help="table rows")
    p.add_argument("--window", type=int, default=10, help="updates in the train moving average")
    a = p.parse_args(argv)
    rows = read_log(a.run_dir)
    if not rows:
        raise SystemExit(f"{a.run_dir / 'log.csv'}: no rows")
    per_update = rows[0]["global_step"] / rows[0]["update"]
    evals, rand = read_evals(a.evals, per_update)
    print(table(rows, evals, rand, a.rows, a.window))
    if a.png:
        plot(rows, evals, rand, a.png, a.window)
        print(f"\nwrote {a.png}")


if __name__ == "__main__":
    main()
