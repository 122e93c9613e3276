"""Summarize a bps-train run: its log.csv (and optional --eval results) as a Markdown table and
a PNG of learning curves (success / SPL, return, episode length, losses, entropy, fps vs frames).

    python -m bps_train.report RUN_DIR [--evals EVALS.jsonl] [--png curve.png [--overwrite]] [--rows 12]

``EVALS.jsonl``: ``bps-train --eval`` JSON lines (of checkpoints: placed at the frames they name;
of ``random``: their mean); they join the success / SPL and episode-length panels. The
plot is drawn with Pillow (already a dependency) so no plotting library is needed.
"""
from __future__ import annotations

import argparse
import csv
import math
import re
import sys
from pathlib import Path

from bps_assets.json_input import parse_json


# bps_train.train.LOG_FIELDS added after logs existed, in order (they go last; not imported
# from train.py, which would load torch for a report)
LATER_FIELDS = ("length",)


def read_log_rows(path: Path) -> list[dict]:
    """A log.csv's rows as {field: text}. A log begun before a field was added has its old header
    (bps-train rewrites it on resume); a row's extra trailing values get the newer field names."""
    with open(path, newline="") as f:
        reader = csv.reader(f)
        header = next(reader, [])
        later = [k for k in LATER_FIELDS if k not in header]
        return [dict(zip(header + later[: max(0, len(vals) - len(header))], vals)) for vals in reader]


def read_log(run_dir: Path) -> list[dict]:
    """log.csv's rows as floats (nan where empty)."""
    return [{k: float(v) if v not in ("", "nan") else math.nan for k, v in r.items()}
            for r in read_log_rows(run_dir / "log.csv")]


def read_evals(path: Path | None, frames_per_update: float) -> tuple[list[dict], dict | None]:
    """(checkpoint evals sorted by frames, the random policy's evals' mean or None). A checkpoint
    eval sits at the frames its line names (``global_step``, written by bps-train --eval), else
    at ``ckpt_UPDATE.pt``'s update; one with neither (an older line of checkpoint.pt) is left out
    with a note on stderr. Several ``random`` lines (seeds 1, 2, 3): their mean, ``n`` of them."""
    if path is None or not path.exists():
        return [], None
    evals, rands = [], []
    for line in path.read_text().splitlines():
        if not line.strip().startswith("{"):
            continue
        e = parse_json(line, path, "eval JSON line")
        if e["checkpoint"] == "random":
            rands.append(e)
            continue
        m = re.search(r"ckpt_(\d+)\.pt$", e["checkpoint"])
        if isinstance(e.get("global_step"), (int, float)):
            e["frames"] = e["global_step"]
        elif m:
            e["frames"] = int(m.group(1)) * frames_per_update
        else:
            print(f"{path}: left out the eval of {e['checkpoint']}: its line names no update (evaluate it "
                  "again: bps-train --eval now writes it)", file=sys.stderr)
            continue
        evals.append(e)
    return sorted(evals, key=lambda e: e["frames"]), mean_eval(rands)


def mean_eval(evals: list[dict]) -> dict | None:
    """The mean of several evals' numbers (episodes: their sum), with ``n`` (None: no eval)."""
    if not evals:
        return None
    out = {"checkpoint": evals[0]["checkpoint"], "n": len(evals), "episodes": sum(e["episodes"] for e in evals)}
    for key in ("success", "spl", "mean_length", "distance_to_goal"):
        vals = [e[key] for e in evals if isinstance(e.get(key), (int, float))]
        if vals:
            out[key] = sum(vals) / len(vals)
    return out


def smooth(rows: list[dict], key: str, window: int) -> list[float]:
    """Episode-weighted moving average (updates with few finished episodes count little)."""
    out = []
    for i in range(len(rows)):
        lo = max(0, i - window + 1)
        w = [(r["episodes"], r.get(key, math.nan)) for r in rows[lo:i + 1]
             if r["episodes"] > 0 and math.isfinite(r.get(key, math.nan))]
        n = sum(a for a, _ in w)
        out.append(sum(a * b for a, b in w) / n if n else math.nan)
    return out


def _num(x: float, spec: str) -> str:
    """``x`` formatted, or "-" when it was not measured (nan: no sim-only timing, no episode ended)."""
    return format(x, spec) if math.isfinite(x) else "-"


def table(rows, evals, rand, n_rows: int = 12, window: int = 10) -> str:
    succ, spl, rew = smooth(rows, "success", window), smooth(rows, "spl", window), smooth(rows, "reward", window)
    idx = sorted({round(i * (len(rows) - 1) / max(1, n_rows - 1)) for i in range(n_rows)})
    lines = ["| update | frames | wall time (min) | train success | train SPL | train reward | fps | fps / sim fps |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for i in idx:
        r = rows[i]
        lines.append(f"| {int(r['update'])} | {int(r['global_step']):,} | {_num(r['seconds'] / 60, '.1f')} | "
                     f"{_num(succ[i], '.3f')} | {_num(spl[i], '.3f')} | {_num(rew[i], '.2f')} | {_num(r['fps'], '.0f')} | "
                     f"{_num(r['fps_ratio'], '.2f')} |")
    out = "\n".join(lines)
    if evals or rand:
        ev = ["", "| checkpoint | frames | val episodes | val success | val SPL |", "|---|---:|---:|---:|---:|"]
        if rand:
            n = f" (mean of {rand['n']} evals)" if rand.get("n", 1) > 1 else ""
            ev.append(f"| random policy{n} | 0 | {rand['episodes']} | {rand['success']:.3f} | {rand['spl']:.3f} |")
        for e in evals:
            ev.append(f"| {Path(e['checkpoint']).name} | {int(e['frames']):,} | {e['episodes']} | "
                      f"{e['success']:.3f} | {e['spl']:.3f} |")
        out += "\n" + "\n".join(ev)
    return out


BLUE, ORANGE, GREEN, RED, GREY = (31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (120, 120, 120)


def moving(rows, key: str, window: int) -> list[float]:
    """Plain moving average over updates (losses, entropy, fps: one value per update)."""
    vals = [r.get(key, math.nan) for r in rows]
    out = []
    for i in range(len(vals)):
        w = [v for v in vals[max(0, i - window + 1):i + 1] if math.isfinite(v)]
        out.append(sum(w) / len(w) if w else math.nan)
    return out


def panels(rows, evals, rand, window: int = 10) -> list[tuple[str, list]]:
    """The figure's panels: (title, series); a series is (label, xs, ys, colour, kind) with kind
    "line" (train, smoothed), "dot" (one --eval per checkpoint) or "dash" (the random policy)."""
    x = [r["global_step"] for r in rows]
    ex = [e["frames"] for e in evals]

    def val(key, label, col):
        out = [(label, ex, [e[key] for e in evals], col, "dot")] if evals else []
        if rand is not None and key in rand:
            out.append((f"random {label.split()[-1]}", None, [rand[key]], col, "dash"))
        return out
    return [
        ("success / SPL", [("train success", x, smooth(rows, "success", window), BLUE, "line"),
                           ("train SPL", x, smooth(rows, "spl", window), ORANGE, "line"),
                           *val("success", "val success", BLUE), *val("spl", "val SPL", ORANGE)]),
        ("episode return (reward)", [("train", x, smooth(rows, "reward", window), BLUE, "line")]),
        ("episode length (steps)", [("train", x, smooth(rows, "length", window), BLUE, "line"),
                                    *val("mean_length", "val length", BLUE)]),
        ("losses", [("total", x, moving(rows, "loss", window), BLUE, "line"),
                    ("policy", x, moving(rows, "policy_loss", window), ORANGE, "line"),
                    ("value", x, moving(rows, "value_loss", window), GREEN, "line")]),
        ("policy entropy", [("entropy", x, moving(rows, "entropy", window), BLUE, "line")]),
        ("frames per second", [("training", x, moving(rows, "fps", 1), BLUE, "line"),
                               ("simulation only", x, moving(rows, "sim_fps", 1), GREY, "line")]),
    ]


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """About n round tick values covering lo..hi."""
    span = hi - lo if hi > lo else 1.0
    step = 10 ** math.floor(math.log10(span / n))
    for m in (1, 2, 2.5, 5, 10):
        if span / (step * m) <= n:
            step *= m
            break
    return [k * step for k in range(math.floor(lo / step), math.ceil(hi / step) + 1)]


def _fmt(v: float, step: float | None = None) -> str:
    """A tick label: M / K for large values, else as many decimals as the tick step needs."""
    a = abs(v)
    if a >= 1e6:
        return f"{v / 1e6:.2f}M"
    if a >= 1e4:
        return f"{v / 1e3:.0f}K"
    d = 3 if step is None else max(0, -math.floor(math.log10(step) + 1e-9) + (1 if f"{step:.1e}"[2] == "5" else 0))
    return f"{v:.{min(d, 8)}f}"


def _panel(d, box, title, series, xmax):
    """One plot in ``box`` (x0, y0, x1, y1): axes, ticks, series, its legend at the top."""
    x0, y0, x1, y1 = box
    left, top, bottom = x0 + 60, y0 + 18 + 12 * ((len(series) + 1) // 2), y1 - 28
    right = x1 - 24
    ys = [v for _, _, vs, _, _ in series for v in vs if math.isfinite(v)]
    lo, hi = (min(ys), max(ys)) if ys else (0.0, 1.0)
    if title.startswith("success"):
        lo, hi = 0.0, 1.0
    pad = 0.01 * max(abs(lo), abs(hi)) - (hi - lo) / 2   # at least 2% of the values' size: no
    if pad > 0 or hi - lo < 1e-9:                          # magnified float noise (entropy near ln 4)
        pad = max(pad, 0.5 if hi - lo < 1e-9 and max(abs(lo), abs(hi)) < 1e-9 else 0.0)
        lo, hi = lo - pad, hi + pad
    ticks = _ticks(lo, hi)
    lo, hi = min(lo, ticks[0]), max(hi, ticks[-1])
    X = lambda f: left + (right - left) * f / xmax  # noqa: E731
    Y = lambda v: bottom - (bottom - top) * (v - lo) / (hi - lo)  # noqa: E731
    d.text((x0 + 4, y0 + 2), title, fill="black")
    d.rectangle([left, top, right, bottom], outline="black")
    for v in ticks:
        d.line([left - 4, Y(v), left, Y(v)], fill="black")
        d.line([left + 1, Y(v), right - 1, Y(v)], fill=(232, 232, 232))
        d.text((x0 + 2, Y(v) - 6), _fmt(v, ticks[1] - ticks[0] if len(ticks) > 1 else None), fill="black")
    for k in range(5):
        f = xmax * k / 4
        d.text((X(f) - 14, bottom + 4), _fmt(f, xmax / 4), fill="black")
    for i, (label, xs, vs, col, kind) in enumerate(series):
        lx, ly = x0 + 8 + (i % 2) * ((x1 - x0) // 2), y0 + 16 + 12 * (i // 2)
        if kind == "line":
            pts = [(X(a), Y(v)) for a, v in zip(xs, vs) if math.isfinite(v)]
            if len(pts) > 1:
                d.line(pts, fill=col, width=2)
            elif pts:
                d.ellipse([pts[0][0] - 2, pts[0][1] - 2, pts[0][0] + 2, pts[0][1] + 2], fill=col)
            d.line([lx, ly + 5, lx + 16, ly + 5], fill=col, width=2)
        elif kind == "dot":
            for a, v in zip(xs, vs):
                d.ellipse([X(a) - 4, Y(v) - 4, X(a) + 4, Y(v) + 4], outline=col, width=2)
            d.ellipse([lx + 4, ly + 1, lx + 12, ly + 9], outline=col, width=2)
        else:
            for xx in range(left, right, 12):
                d.line([xx, Y(vs[0]), min(xx + 6, right), Y(vs[0])], fill=col)
            d.line([lx, ly + 5, lx + 6, ly + 5], fill=col)
            d.line([lx + 10, ly + 5, lx + 16, ly + 5], fill=col)
        d.text((lx + 20, ly), label, fill="black")


def plot(rows, evals, rand, path: Path, window: int = 10, size=(960, 900), overwrite: bool = False,
         fmt: str | None = None):
    """The learning curves against frames, one panel each (``panels``): success and SPL (train
    smoothed, --eval dots, random dashed), return, episode length (and --eval's), losses,
    entropy, frames per second. Drawn with Pillow (a core dependency); written whole or not at all
    (an existing ``path``: OutputExistsError unless ``overwrite``) in Pillow's format ``fmt``
    (None: the one ``path``'s extension names, else PNG)."""
    from PIL import Image, ImageDraw

    W, H = size
    img = Image.new("RGB", size, "white")
    d = ImageDraw.Draw(img)
    xmax = max([r["global_step"] for r in rows] + [e["frames"] for e in evals] + [1])
    ps = panels(rows, evals, rand, window)
    cols, nrows = 2, (len(ps) + 1) // 2
    pw, ph = W // cols, (H - 20) // nrows
    for i, (title, series) in enumerate(ps):
        c, r = i % cols, i // cols
        _panel(d, (c * pw, r * ph, (c + 1) * pw, (r + 1) * ph), title, series, xmax)
    d.text((W // 2 - 60, H - 16), "frames (env steps)", fill="black")
    from bps_assets.container import atomic_write

    atomic_write(path, lambda fh: img.save(fh, format=fmt or _image_format(Path(path)) or "PNG"), overwrite=overwrite)


def _positive(text: str) -> int:
    """An argparse type: an int >= 1 (0 rows or a 0-update average would print or plot nothing)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{n}: must be >= 1")
    return n


def main(argv=None) -> int:
    """The ``python -m bps_train.report`` entry point: 0, or 2 after a one-line error (a missing
    run folder or log, an unknown --png type, a --png that exists without --overwrite)."""
    from bps_assets.errors import BpsError

    p = argparse.ArgumentParser(prog="python -m bps_train.report",  # the docstring's first paragraph
                                description=" ".join(__doc__.split("\n\n")[0].split()))
    p.add_argument("run_dir", type=Path)
    p.add_argument("--evals", type=Path, default=None, help="JSON lines of bps-train --eval results")
    p.add_argument("--png", type=Path, default=None, help="write the learning curve here (its folder is made)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --png file")
    p.add_argument("--rows", type=_positive, default=12, help="table rows (default: 12)")
    p.add_argument("--window", type=_positive, default=10, help="updates in the train moving average (default: 10)")
    a = p.parse_args(argv)
    try:
        report(a)
    except BpsError as e:
        print(f"{p.prog}: error: {e}", file=sys.stderr)
        return 2
    return 0


def report(a) -> None:
    """Print the table of run ``a.run_dir`` and write ``a.png`` (whole, or nothing: a temp file
    renamed); every input and the output are checked before any work."""
    from bps_assets.errors import ConfigError, InputError, OutputExistsError

    log = a.run_dir / "log.csv"
    if not a.run_dir.is_dir():
        raise InputError(a.run_dir, "no such run folder (a bps-train --out-dir)")
    if not log.is_file():
        raise InputError(log, "not found: the run folder has no training log (bps-train writes it)")
    if a.evals is not None and not a.evals.is_file():
        raise InputError(a.evals, "not found (--evals: JSON lines of bps-train --eval results)")
    if a.png is not None:
        fmt = _image_format(a.png)
        if fmt is None:
            raise ConfigError(a.png, "--png: not an image file name Pillow writes (e.g. curve.png)")
        if a.png.exists() and not a.overwrite:
            raise OutputExistsError(a.png, "already exists (pass --overwrite to replace it)")
    rows = read_log(a.run_dir)
    if not rows:
        raise InputError(log, "no rows (the run has not logged an update yet)")
    per_update = rows[0]["global_step"] / rows[0]["update"]
    evals, rand = read_evals(a.evals, per_update)
    print(table(rows, evals, rand, a.rows, a.window))
    if a.png:
        plot(rows, evals, rand, a.png, a.window, overwrite=a.overwrite, fmt=fmt)
        print(f"\nwrote {a.png}")


def _image_format(path: Path) -> str | None:
    """Pillow's format name for ``path``'s extension (None: not an image type Pillow writes)."""
    from PIL import Image

    return Image.registered_extensions().get(path.suffix.lower())


if __name__ == "__main__":
    sys.exit(main())
