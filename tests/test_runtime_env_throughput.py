"""cli.env_bench: the report tells the truth about what was measured (loads in flight vs
swaps, which steps a statistic is over) and judges every goal, on values from a real tiny run."""
from __future__ import annotations

import os
import re
import sys
from dataclasses import replace

import pytest

from bps_assets.errors import ConfigError
from cli import env_bench as bench

TINY = bench.BenchOptions(num_envs=4, scenes=2, resolution=16, steps=12, warmup=1, swap_every=4, split="train",
                          threads=1, count_steps=2)


@pytest.fixture(scope="module")
def raw(manifest):
    return bench.measure(manifest, TINY)


def _verdict_of(line: str) -> str:
    m = re.search(r"\(goal (>=|<=|==) ([0-9.]+): (PASS|FAIL|n/a)\)", line)
    assert m, line
    return m.group(3)


def test_measured_run_reports_every_goal_with_a_true_verdict(raw):
    res = bench.summarize(raw, TINY)
    lines = bench.report(res).lines
    assert res["steps"] == 12 and res["threads"] == 1 and res["renderer"] == "embree"
    head, ratio, tail, waited, counts = lines[:5]
    assert f"{res['swaps']} scene swaps (one tried every 4 steps" in head
    k = res["steps_with_load_in_flight"]
    assert (f"during {'all' if k == 12 else k} of the 12 timed steps" in head if k else "no scene load" in head)
    assert _verdict_of(ratio) == ("PASS" if res["env_over_render"] >= res["ratio_goal"] else "FAIL")
    assert res["ratio_goal"] == bench.RATIO_GOAL_FEW_THREADS  # one CPU thread
    assert _verdict_of(tail) == ("PASS" if res["p99_over_p50"] <= bench.TAIL_GOAL else "FAIL")
    assert _verdict_of(waited) == ("PASS" if res["waited_steps"] == 0 else "FAIL")
    c = res["counts"]
    assert c["steps"] == 2 and c["torch_ops"] + c["warp_launches"] > 0
    assert f"{c['torch_ops']:.0f} torch ops" in counts and f"{c['syncs']:.0f} host syncs" in counts
    # the goal is judged on the step phase (the CPU's input check and Embree reads are not syncs)
    step_syncs = c["by_phase"]["step"]["syncs"]
    assert f"in the step phase {step_syncs:.0f} (" in counts
    assert _verdict_of(counts) == ("PASS" if step_syncs == 0 else "FAIL")
    # statistics over the quiet steps only when there were enough of them, and said so
    quiet = res["quiet_steps"]
    if quiet >= bench.MIN_QUIET:
        assert f"over the {quiet} steps with no load in flight" in ratio and "(no load in flight)" in tail
    else:
        assert f"over all 12 steps: only {quiet} had no load in flight" in ratio and "(all steps)" in tail


def test_pipelined_run_is_reported_and_judged_only_on_a_device(manifest, raw):
    """Steps back to back (no wait between them) are measured when asked, on the CPU too; the
    ratio goal is judged on them only off the CPU (where the per-step timings wait for the device)."""
    opts = replace(TINY, steps=4, count_steps=0, swap_every=0, pipelined_steps=6)
    res = bench.summarize(bench.measure(manifest, opts), opts)
    assert res["pipelined"]["steps"] == 6 and res["pipelined"]["step_s"] > 0 and res["pipelined"]["render_s"] > 0
    assert res["pipelined_env_over_render"] == pytest.approx(res["pipelined"]["render_s"] / res["pipelined"]["step_s"])
    lines = bench.report(res).lines
    pl = [ln for ln in lines if ln.startswith("pipelined, 6 steps back to back")]
    assert len(pl) == 1 and "(goal" not in pl[0]
    assert _verdict_of(lines[1]) in ("PASS", "FAIL")
    # the same measured values as if from a GPU: the verdict moves to the pipelined line
    gpu = dict(res, device="cuda:0", ratio_goal=bench.RATIO_GOAL_GPU)
    lines = bench.report(gpu).lines
    assert "(goal" not in lines[1] and "judged on the pipelined run" in lines[1]
    pl = [ln for ln in lines if ln.startswith("pipelined")][0]
    assert _verdict_of(pl) == ("PASS" if gpu["pipelined_env_over_render"] >= 0.8 else "FAIL")
    # by default (pipelined_steps=-1) the CPU runs none
    assert TINY.pipelined_steps == -1 and "pipelined" not in raw
    assert not any(ln.startswith("pipelined") for ln in bench.report(bench.summarize(raw, TINY)).lines)



def test_groups_step_in_turn_and_fps_counts_a_group_per_step(manifest):
    """``groups=2`` (GPU check R5: the pipelined step with several groups): the env is made with
    half the envs per step, the timed and pipelined steps are group steps, and the fps figures
    count the envs a step moves (half), so they compare with a one-group run of that many envs."""
    opts = replace(TINY, steps=4, count_steps=0, swap_every=0, pipelined_steps=4, groups=2)
    raw2 = bench.measure(manifest, opts)
    res = bench.summarize(raw2, opts)
    assert res["options"]["groups"] == 2 and res["pipelined"]["steps"] == 4
    st = sum(raw2["step_s"]) / len(raw2["step_s"]) if res["quiet_basis"] == "all" else None
    if st is not None:
        assert res["env_fps"] == pytest.approx(2 / st)   # 4 envs in 2 groups: 2 per step
    assert res["pipelined_env_fps"] == pytest.approx(2 / res["pipelined"]["step_s"])
    assert bench.report(res).lines[0].startswith("4 envs in 2 groups stepped in turn on cpu")


def test_every_step_with_a_load_in_flight_is_reported_as_such(raw):
    """The measured times, with every step marked as having had a load in flight: nothing may
    claim a "no load in flight" statistic, and a missing statistic is n/a, not 0."""
    busy = dict(raw, load_in_flight=[True] * len(raw["load_in_flight"]), swaps=0)
    res = bench.summarize(busy, replace(TINY, swap_every=0))
    lines = bench.report(res).lines
    text = "\n".join(lines)
    assert "0 scene swaps (--swap-every 0)" in lines[0]
    assert "a scene load was in flight during all of the 12 timed steps" in lines[0]
    assert "over all 12 steps: only 0 had no load in flight" in lines[1]
    assert "(all steps) = " in lines[2] and "no load in flight)" not in lines[2]
    assert "p99 with a load in flight / p99 without = n/a" in text
    assert res["p99_load_over_p99_quiet"] is None and res["quiet_basis"] == "all"
    # and with no load at all
    calm = dict(raw, load_in_flight=[False] * len(raw["load_in_flight"]))
    res = bench.summarize(calm, TINY)
    lines = bench.report(res).lines
    assert "no scene load was in flight during any timed step" in lines[0]
    assert "p50 with a load in flight n/a" in "\n".join(lines)
    assert "over the 12 steps with no load in flight" in lines[1]


def test_missed_goals_are_data_that_the_text_states(raw):
    """``report(res).missed`` is the report's goals (``Goal``) as built, not parsed back from its
    text: on a real run, with values set so that goals fail or cannot be judged, the FAIL
    verdicts in the lines are exactly the missed goals, in order, and the text is made from them."""
    res = bench.summarize(raw, TINY)
    variants = [res, dict(res, waited_steps=3), dict(res, p99_over_p50=9.0, env_over_render=0.1),
                dict(res, env_over_render=float("nan"), waited_steps=0)]
    for v in variants:
        rep = bench.report(v)
        assert rep.lines == bench.report(v).lines
        failed = [m.group(1) for ln in rep.lines for m in [re.search(r"\((goal [<>=]+ [0-9.]+: FAIL)\)", ln)] if m]
        assert [str(g) for g in rep.missed] == failed == [str(g) for g in bench.report(v).missed]
        judged = [ln for ln in rep.lines if "(goal " in ln]
        assert len(judged) == len(rep.goals) and all(f"({g})" in ln for g, ln in zip(rep.goals, judged))
    waited = bench.report(variants[1]).missed
    assert bench.Goal("steps that waited for a load", 3, "==", 0) in waited
    nan = bench.report(variants[3])
    assert [g.status for g in nan.goals if g.what == "env step / render only"] == ["n/a"]


def _goal_of(line: str) -> str:
    return re.search(r"\((goal [<>=]+ [0-9.]+: (PASS|FAIL|n/a))\)", line).group(1)


def test_bench_threads_check_judges_the_scaling_goals(per_thread, manifest, monkeypatch, capsys):
    """benchmarks/bench_threads.py on a real run's values with the render scaling at 2 threads
    set to miss its goal: a measurement (exit 0, the last line says so) unless ``--check``
    (exit 1) -- before, its goals were printed but never judged."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_threads.py"
    before = list(sys.path)
    with monkeypatch.context() as mp:   # the module puts benchmarks/ on sys.path: taken off after
        mp.syspath_prepend(str(path.parent))
        spec = importlib.util.spec_from_file_location("bench_threads_under_test", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    assert sys.path == before
    per = {n: dict(r) for n, r in per_thread[0].items()}
    per[2]["render_fps"] = 0.1 * 2 * per[1]["render_fps"]      # scaling 0.1 < 0.8
    monkeypatch.setattr(mod, "measure_threads", lambda *a, **kw: per)
    args = [str(manifest), "--threads", "2"]
    mod.main(args)
    out = capsys.readouterr().out.strip().splitlines()
    assert "render only at 2 threads / (2 x render only at 1 thread) = 0.100 (goal >= 0.8: FAIL)" in out
    assert "goal(s) missed (FAIL)" in out[-1] and "(exit status 0)" in out[-1], out[-1]
    with pytest.raises(SystemExit) as ex:
        mod.main(args + ["--check"])
    assert ex.value.code == 1
    assert "--check, exit status 1" in capsys.readouterr().out.strip().splitlines()[-1]


def test_verdicts():
    assert bench.verdict(0.96, ">=", 0.95) == "goal >= 0.95: PASS"
    assert bench.verdict(0.94, ">=", 0.95) == "goal >= 0.95: FAIL"
    assert bench.verdict(1.2, "<=", 1.15).endswith("FAIL") and bench.verdict(0, "==", 0).endswith("PASS")
    assert bench.verdict(None, "<=", 1.15).endswith("n/a") and bench.verdict(float("nan"), ">=", 1).endswith("n/a")
    assert bench.ratio_goal("cuda:0", 16) == 0.8 and bench.ratio_goal("cpu", 15) == 0.85
    assert bench.ratio_goal("cpu", 2) == 0.95


@pytest.fixture(scope="module")
def per_thread(manifest):
    got = []
    return bench.measure_threads(manifest, [2], replace(TINY, steps=6, swap_every=0), echo=got.append), got


def test_thread_scaling_report_judges_each_count(manifest, per_thread):
    """bench_threads' report on a real tiny run at 1 and 2 threads (1 is measured first even when
    not asked for): one row per count, the scaling of 1 thread is 1, every verdict matches its
    value, and the step / render goal is judged at the highest count."""
    per, got = per_thread
    assert list(per) == [1, 2] and len(got) == 2 and got[0].startswith("1 thread:")
    res = bench.summarize_threads(per)
    rows = res["rows"]
    assert [r["threads"] for r in rows] == [1, 2] and rows[0]["scaling"] == 1.0
    assert rows[1]["scaling"] == pytest.approx(per[2]["render_fps"] / (2 * per[1]["render_fps"]))
    assert res["top_threads"] == 2
    lines = bench.thread_report(res).lines
    scale = [ln for ln in lines if ln.startswith("render only at ")]
    assert len(scale) == 1 and _verdict_of(scale[0]) == ("PASS" if rows[1]["scaling"] >= 0.8 else "FAIL")
    ratio = lines[-1]
    assert ratio.startswith("env step / render only at 2 threads")
    assert _verdict_of(ratio) == ("PASS" if rows[1]["env_over_render"] >= 0.85 else "FAIL")
    # the goals are data, as the env report's: one per verdict line, in order (--check judges them)
    rep = bench.thread_report(res)
    assert rep.lines == lines and [str(g) for g in rep.goals] == [_goal_of(scale[0]), _goal_of(ratio)]
    assert [g.value for g in rep.goals] == [rows[1]["scaling"], rows[1]["env_over_render"]]
    with pytest.raises(ConfigError, match="thread count"):
        bench.measure_threads(manifest, [0], TINY)
    assert bench.default_thread_counts() == sorted({1, 2, len(os.sched_getaffinity(0))})


def test_bench_agent_option_runs_a_task_with_another_agent():
    """``--agent RADIUS,HEIGHT`` (PointNav's baseline on a dataset built for ObjectNav's agent)."""
    from bps_assets.errors import ConfigError

    t = bench._task(bench.BenchOptions(task="pointnav", agent="0.18,0.88"))
    assert (type(t).TASK, t.agent_radius, t.agent_height) == ("pointnav", 0.18, 0.88)
    assert bench._task(bench.BenchOptions(task="imagenav")) == "imagenav"
    with pytest.raises(ConfigError, match="RADIUS,HEIGHT"):
        bench._task(bench.BenchOptions(agent="0.18"))


def test_bench_is_a_measurement_unless_check(manifest, monkeypatch):
    """Issue 35 item 10: a missed goal says the bench is a measurement (exit 0); --check exits 1.
    The run is real; one measured value (a step that waited for a load) is set so a goal fails."""
    from click.testing import CliRunner

    from cli.main import main

    real = bench.summarize
    monkeypatch.setattr(bench, "summarize", lambda raw, o: dict(real(raw, o), waited_steps=3))
    built, real_report = [], bench.report
    monkeypatch.setattr(bench, "report", lambda res: built.append(res) or real_report(res))
    args = ["bench", str(manifest), "--num-envs", "4", "--steps", "4", "--scenes", "1", "--resolution", "16",
            "--threads", "1", "--count-steps", "0", "--split", "train"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    assert "steps that waited for a load: 3 (goal == 0: FAIL)" in r.output
    last = r.output.strip().splitlines()[-1]
    assert "missed (FAIL)" in last and "a measurement" in last and "--check" in last, last
    r = CliRunner().invoke(main, args + ["--check"])
    assert r.exit_code == 1 and "--check, exit status 1" in r.output
    assert len(built) == 2    # one report per run (before: one to print, one more for --check)


def test_bench_noise_option_reaches_the_env(manifest, monkeypatch):
    """``bps-assets bench --noise`` takes bps-train's --noise text (key=value pairs or a preset):
    the benchmarked env runs with that noise; a bad value is a usage error naming the setting."""
    from click.testing import CliRunner

    import bps_runtime
    from bps_runtime.noise.options import NoiseOptions
    from cli.main import main

    made, real = [], bps_runtime.make
    monkeypatch.setattr(bps_runtime, "make", lambda *a, **kw: made.append(real(*a, **kw)) or made[-1])
    args = ["bench", str(manifest), "--num-envs", "4", "--steps", "2", "--scenes", "1", "--resolution", "16",
            "--threads", "1", "--count-steps", "0", "--split", "train"]
    r = CliRunner().invoke(main, args + ["--noise", "depth=redwood,actuation=locobot-ilqr,multiplier=0.5"])
    assert r.exit_code == 0, r.output
    assert made[-1].config.noise == NoiseOptions(depth="redwood", actuation="locobot-ilqr", multiplier=0.5)
    r = CliRunner().invoke(main, args + ["--noise", "depth=kinect"])
    assert r.exit_code == 2 and "noise depth must be one of" in r.output, r.output
    assert len(made) == 1    # refused before any env was made
