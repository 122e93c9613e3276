"""python -m bps_train.report: the figure has a panel per curve (success / SPL, return, episode
length, losses, entropy, fps) against frames, --eval results join it, and logs begun before a
field was added still read."""
from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from bps_train import report
from bps_train.train import LOG_FIELDS


def _write_log(run, n=30, fields=LOG_FIELDS, extra=()):
    run.mkdir(parents=True, exist_ok=True)
    with open(run / "log.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(fields)
        for u in range(1, n + 1):
            row = {"update": u, "global_step": 256 * u, "fps": 900 + u, "sim_fps": 2000, "fps_ratio": 0.45,
                   "reward": -1 + u / n, "success": u / n / 2, "spl": u / n / 3, "episodes": 8, "loss": 1 / u,
                   "policy_loss": -0.01, "value_loss": 2 / u, "entropy": 1.38 - u / 100, "approx_kl": 0.01,
                   "clip_frac": 0.1, "lr": 5e-4, "collect_s": 0.2, "learn_s": 0.1, "recv_wait": 0.0,
                   "seconds": u, "length": 400 - 5 * u}
            w.writerow([row[k] for k in fields] + [row[k] for k in extra])


def test_report_plots_every_curve_and_the_evals(tmp_path, capsys):
    run = tmp_path / "run"
    _write_log(run)
    evals = tmp_path / "evals.jsonl"
    evals.write_text("\n".join(json.dumps(e) for e in [
        {"checkpoint": "random", "episodes": 8, "success": 0.0, "spl": 0.0, "mean_length": 120.0},
        {"checkpoint": str(run / "ckpt_000010.pt"), "episodes": 8, "success": 0.25, "spl": 0.2, "mean_length": 300.0},
        {"checkpoint": str(run / "ckpt_000030.pt"), "episodes": 8, "success": 0.5, "spl": 0.4, "mean_length": 200.0},
    ]) + "\n")
    png = tmp_path / "curve.png"
    report.main([str(run), "--evals", str(evals), "--png", str(png), "--window", "1"])
    assert "| 30 | 7,680 |" in capsys.readouterr().out
    rows = report.read_log(run)
    ev, rand = report.read_evals(evals, 256)
    ps = dict(report.panels(rows, ev, rand, window=1))
    assert set(ps) == {"success / SPL", "episode return (reward)", "episode length (steps)", "losses",
                       "policy entropy", "frames per second"}
    length = {s[0]: s for s in ps["episode length (steps)"]}
    assert length["train"][2][-1] == pytest.approx(250) and length["val length"][1] == [2560, 7680]
    assert length["val length"][2] == [300.0, 200.0] and length["random length"][2] == [120.0]
    assert [s[0] for s in ps["losses"]] == ["total", "policy", "value"]
    assert ps["frames per second"][0][2][-1] == 930
    from PIL import Image

    im = np.asarray(Image.open(png).convert("RGB"))
    H, W = im.shape[:2]
    ph = (H - 20) // 3
    for r in range(3):   # every panel has a blue curve drawn in it
        for c in range(2):
            cell = im[r * ph:(r + 1) * ph, c * (W // 2):(c + 1) * (W // 2)]
            assert np.all(cell == report.BLUE, axis=-1).sum() > 50, (r, c)


def test_several_random_evals_are_averaged_and_checkpoint_pt_evals_are_placed(tmp_path, capsys):
    """TRAINING.md's random evals (seeds 1/2/3) show their mean and n (was: the last line only);
    an eval of checkpoint.pt sits at the frames its line names (was: left out silently); an older
    line naming no update is left out with a note."""
    run = tmp_path / "run"
    _write_log(run)
    evals = tmp_path / "evals.jsonl"
    evals.write_text("\n".join(json.dumps(e) for e in [
        *({"checkpoint": "random", "episodes": 8, "success": s, "spl": s / 2, "mean_length": 100.0 + 10 * i}
          for i, s in enumerate((0.0, 0.125, 0.25))),
        {"checkpoint": str(run / "checkpoint.pt"), "update": 20, "global_step": 5120, "episodes": 8,
         "success": 0.375, "spl": 0.3, "mean_length": 250.0},
        {"checkpoint": str(tmp_path / "old" / "checkpoint.pt"), "episodes": 8, "success": 0.5, "spl": 0.4},
    ]) + "\n")
    ev, rand = report.read_evals(evals, 256)
    assert rand["n"] == 3 and rand["episodes"] == 24
    assert rand["success"] == pytest.approx(0.125) and rand["mean_length"] == pytest.approx(110.0)
    assert [(e["frames"], e["success"]) for e in ev] == [(5120, 0.375)]
    assert "left out the eval of" in capsys.readouterr().err
    report.main([str(run), "--evals", str(evals)])
    out = capsys.readouterr().out
    assert "| random policy (mean of 3 evals) | 0 | 24 | 0.125 | 0.062 |" in out
    assert "| checkpoint.pt | 5,120 | 8 | 0.375 | 0.300 |" in out


def test_a_log_begun_before_the_length_field_still_reads(tmp_path):
    old = [k for k in LOG_FIELDS if k not in report.LATER_FIELDS]
    _write_log(tmp_path, 3, fields=old, extra=report.LATER_FIELDS)   # resumed: new rows, old header
    rows = report.read_log(tmp_path)
    assert [r["length"] for r in rows] == [395, 390, 385] and rows[0]["update"] == 1
    _write_log(tmp_path, 3, fields=old)
    rows = report.read_log(tmp_path)
    assert "length" not in rows[0] and report.smooth(rows, "length", 2) == [pytest.approx(float("nan"), nan_ok=True)] * 3


def test_a_resume_rewrites_an_old_log_with_todays_header_keeping_its_values(tmp_path):
    """bps-train's trim_log (run on resume): an old header gains the newer fields, the newer rows
    keep their trailing values, rows past the checkpoint go."""
    from bps_train.train import trim_log

    old = [k for k in LOG_FIELDS if k not in report.LATER_FIELDS]
    _write_log(tmp_path, 3, fields=old, extra=report.LATER_FIELDS)
    trim_log(tmp_path / "log.csv", 2)
    with open(tmp_path / "log.csv", newline="") as f:
        assert next(csv.reader(f)) == LOG_FIELDS
    rows = report.read_log(tmp_path)
    assert [r["update"] for r in rows] == [1, 2] and [r["length"] for r in rows] == [395, 390]


def test_bad_paths_are_one_line_errors_and_the_png_is_never_replaced_silently(tmp_path, capsys):
    """A missing run folder, log or --evals file: rc 2 and one line naming it (was a traceback);
    --png into a folder not yet made is written there; an existing --png is kept unless
    --overwrite, and the write leaves no temp file."""
    assert report.main([str(tmp_path / "nope")]) == 2
    assert capsys.readouterr().err.strip() == (f"python -m bps_train.report: error: {tmp_path / 'nope'}: "
                                               "no such run folder (a bps-train --out-dir)")
    run = tmp_path / "run"
    run.mkdir()
    assert report.main([str(run)]) == 2 and f"{run / 'log.csv'}: not found" in capsys.readouterr().err
    _write_log(run, 3)
    assert report.main([str(run), "--evals", str(tmp_path / "e.jsonl")]) == 2
    assert f"{tmp_path / 'e.jsonl'}: not found" in capsys.readouterr().err
    png = tmp_path / "docs" / "curve.png"   # its folder is made
    assert report.main([str(run), "--png", str(png), "--window", "1"]) == 0 and png.stat().st_size > 0
    mine = tmp_path / "mine.png"
    mine.write_bytes(b"my picture")
    assert report.main([str(run), "--png", str(mine)]) == 2
    assert f"{mine}: already exists (pass --overwrite" in capsys.readouterr().err
    assert mine.read_bytes() == b"my picture"
    assert report.main([str(run), "--png", str(mine), "--overwrite"]) == 0
    assert mine.read_bytes().startswith(b"\x89PNG")
    assert report.main([str(run), "--png", str(tmp_path / "curve.xyz")]) == 2 and "--png" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["docs", "mine.png", "run"]


def test_the_table_says_dash_for_what_was_not_measured(tmp_path):
    """A run with --sim-only-steps 0 logs fps_ratio nan, and an update where no episode ended has
    no success: the table says '-', not 'nan' (journey viz F5)."""
    run = tmp_path / "run"
    _write_log(run, 3)
    rows = report.read_log(run)
    for r in rows:
        r["sim_fps"] = r["fps_ratio"] = float("nan")
    rows[0]["episodes"] = 0
    text = report.table(rows, [], None, n_rows=3, window=1)
    assert "nan" not in text
    first = text.splitlines()[2].split("|")
    assert first[4].strip() == "-" and first[8].strip() == "-"   # success (no episode), fps / sim fps
    assert text.splitlines()[3].split("|")[4].strip() == f"{2 / 3 / 2:.3f}"


def test_rows_and_window_below_one_are_usage_errors(tmp_path, capsys):
    """--rows 0 printed an empty table and --window 0 blanked every curve, exit 0 (journey viz F10)."""
    _write_log(tmp_path / "run", 3)
    for flag in ("--rows", "--window"):
        for bad in ("0", "-2", "x"):
            with pytest.raises(SystemExit) as e:
                report.main([str(tmp_path / "run"), flag, bad])
            assert e.value.code == 2 and flag in capsys.readouterr().err
    assert report.main([str(tmp_path / "run"), "--rows", "1", "--window", "1"]) == 0
