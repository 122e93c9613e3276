"""The benchmark scripts still run: the speed and memory claims of docs/PERFORMANCE.md are
re-checked by benchmarks/*.py with the commands quoted there, so a script that no longer starts,
or an option a quoted command names that the script no longer has, is a claim nobody can re-run.

Every script's ``--help`` (one child process, the scripts run as ``__main__`` in turn), every
``python benchmarks/X.py ...`` command in docs/*.md and README.md against X's options, and a
tiny run of the scripts that need no dataset and finish in a second or two. The larger ones
(a manifest, Gibson-size scenes, training) are not run here: their smallest settings are in the
issue notes (and gpu_checks.sh's header for its DEVICE=cpu stages)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p.name for p in (ROOT / "benchmarks").glob("*.py"))
# (script, option) a doc quotes on purpose as a past command (PERFORMANCE.md says the option is gone)
HISTORICAL = {("bench_learner.py", "--threads")}

HELP_ALL = r"""
import contextlib, io, json, runpy, sys
out = {}
for name in sys.argv[1:]:
    buf = io.StringIO()
    sys.argv = [name, "--help"]
    code = "no exit"
    try:
        with contextlib.redirect_stdout(buf):
            runpy.run_path("benchmarks/" + name, run_name="__main__")
    except SystemExit as e:
        code = e.code
    except BaseException as e:   # an import or set-up error: name it
        code = f"{type(e).__name__}: {e}"
    out[name] = {"code": code, "help": buf.getvalue()}
print("@@" + json.dumps(out))
"""


def _run(args, timeout=120):
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def helps() -> dict:
    p = _run(["-c", HELP_ALL, *SCRIPTS], timeout=180)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.rsplit("@@", 1)[1])


def test_every_benchmark_script_answers_help(helps):
    bad = {k: v["code"] for k, v in helps.items() if v["code"] not in (0, None)}
    assert not bad, bad
    assert all("usage:" in v["help"] for v in helps.values()), [k for k, v in helps.items() if "usage:" not in v["help"]]


def quoted_commands() -> list[tuple[str, str, str]]:
    """(doc:line, script, the rest of the command) for each ``benchmarks/X.py`` in the docs;
    backslash-continued lines joined."""
    found = []
    for doc in [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]:
        lines = doc.read_text().replace("\\\n", " ").splitlines()
        for i, line in enumerate(lines, 1):
            for m in re.finditer(r"benchmarks/([a-z_0-9]+\.py)([^`|]*)", line):
                found.append((f"{doc.name}:{i}", m.group(1), m.group(2)))
    return found


def test_the_docs_commands_name_options_the_scripts_have(helps):
    cmds = quoted_commands()
    assert len(cmds) > 50   # the scan found PERFORMANCE.md's commands
    stale = []
    for where, script, rest in cmds:
        if script not in helps:
            stale.append(f"{where}: no script benchmarks/{script}")
            continue
        have = set(re.findall(r"--[a-z][a-z0-9-]*", helps[script]["help"]))
        for opt in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", rest):
            if opt not in have and (script, opt) not in HISTORICAL:
                stale.append(f"{where}: benchmarks/{script} has no {opt}")
    assert not stale, "\n".join(stale)


# script, tiny arguments, a text its output must hold (exit status 0 unless given)
TINY = [
    ("bench_cli_startup.py", ["--repeat", "1"], "bps-assets --help"),
    ("bench_composed_cap.py", ["--copies", "2", "--links", "10"], "accepted"),
    ("bench_scan_checks.py", ["--size", "small"], "indoor test"),
    ("bench_readers.py", ["--triangles", "3000", "--textures", "1", "--tex-size", "32", "--repeat", "1"],
     "reader overhead"),
    ("bench_instance_bytes.py", ["--instances", "10", "--rounds", "1"], "RSS / nbytes"),
    ("bench_hm3d_memory.py", ["--triangles", "3000", "--textures", "1", "--texture-px", "32", "--runs", "1"],
     "ratios: peak/GLB"),
    ("bench_resident.py", ["--scenes", "small", "--copies", "1", "--rounds", "1", "--agents", "4"],
     '"charged_over_decoded"'),
]


@pytest.mark.parametrize("script,args,expect", TINY, ids=[t[0] for t in TINY])
def test_cheap_benchmarks_run_tiny(script, args, expect):
    p = _run([f"benchmarks/{script}", *args])
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    assert expect in p.stdout, p.stdout[-2000:]


@pytest.mark.parametrize("check", [False, True])
def test_packed_scene_benchmark_runs_tiny(check):
    """A measurement exits 0 on a missed goal (10x the GLB load, which tiny sizes miss); only
    ``--check`` exits 1 on one, as every script with goals (docs/PERFORMANCE.md, "Benchmark
    methods"; until 2026-11-28 this one exited 1 without it); a crash is neither."""
    p = _run(["benchmarks/bench_packed_scene.py", "--triangles", "3000", "--textures", "1",
              "--tex-size", "32", "--repeat", "1", *(["--check"] if check else [])])
    assert p.returncode in (0, 1), p.stderr[-3000:]
    assert "goals_met" in p.stdout and "Traceback" not in p.stderr, p.stdout[-2000:] + p.stderr[-2000:]
    met = re.search(r"^goals_met\s+(True|False)$", p.stdout, re.M)
    assert met, p.stdout[-2000:]
    assert p.returncode == (1 if check and met.group(1) == "False" else 0), p.stdout[-2000:]


def test_reset_benchmark_runs_tiny(box_rooms_manifest):
    """bench_reset's three rows for the tree as it is; the uniform stream resets, no STOP does not."""
    p = _run(["benchmarks/bench_reset.py", str(box_rooms_manifest), "--num-envs", "8", "--steps", "4",
              "--reps", "1", "--resolution", "16", "--warmup", "2"])
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    m = re.search(r"resets per frame uniform ([0-9.]+), no STOP ([0-9.]+)", p.stdout)
    assert m and float(m.group(1)) > 0.05 and float(m.group(2)) == 0, p.stdout
    for row in ("sim", "no render", "replay"):
        assert re.search(rf"^  {row} +[0-9.]+ +[0-9.]+ ", p.stdout, re.M), p.stdout
