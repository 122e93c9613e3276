"""The environment benchmark (``bps-assets bench``, ``benchmarks/bench_env.py``): ratios measured
in one run, in one process, with the same scenes and agents.

One env with a scene swap every ``swap_every`` steps runs ``steps`` random-action steps; after
each step the same renderer renders the agents' poses alone (render only), so both timings see
the same machine load. Then ``count_steps`` more steps run under ``step_profile.count_ops``:
torch ops, Warp launches and host syncs per step. Reported, each goal with its verdict: env
step fps / render-only fps (quiet steps, and pipelined), step-time tails, waits, syncs, the
tails with the machine's drift taken out, peak RSS (``report``: the lines and the judged ``Goal`` s
as data). What each figure means: docs/DECISIONS.md ("Environment benchmark").
"""
from __future__ import annotations

import math
import os
import resource
import time
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any

import numpy as np

from bps_runtime.render import BACKENDS

PIPELINED_STEPS = 40   # back-to-back steps of the pipelined run on a device (see _pipelined)
MIN_QUIET = 10   # fewer quiet steps than this: statistics over all steps (and the report says so)

# issue 11's goals for env step fps / render-only fps: a GPU at 1,024 envs (0.8), many CPU
# threads (0.85 at 15), a 2-core machine (0.95)
RATIO_GOAL_GPU = 0.8
RATIO_GOAL_MANY_THREADS = 0.85
RATIO_GOAL_FEW_THREADS = 0.95
MANY_THREADS = 8
TAIL_GOAL = 1.15
RENDERERS = ("auto",) + BACKENDS


@dataclass
class BenchOptions:
    """Settings of one env-throughput benchmark run; the CLI's defaults come from ``DEFAULTS``."""
    num_envs: int = 1024
    scenes: int = 8              # resident scene slots
    resolution: int = 64
    steps: int = 150             # timed steps
    warmup: int = 5
    swap_every: int = 50         # steps between scene swaps (0: none)
    renderer: str = "auto"       # auto: embree on the CPU, warp on CUDA
    sensors: tuple = ("depth",)
    split: str | None = "train"
    seed: int = 0
    device: str = "cpu"
    threads: int = 0             # CPU threads for the renderer and the step (0: every usable core)
    count_steps: int = 4         # steps counted (torch ops, Warp launches, syncs) after the timed ones
    capture_graph: bool = False  # on CUDA, replay the step's launches as a CUDA graph (make(capture_graph=))
    pipelined_steps: int = -1    # steps run back to back, no wait between them (-1: 40 on a device, none on the CPU)
    task: str = "pointnav"       # pointnav, objectnav or imagenav (the task's defaults; episodes sampled)
    no_stop: bool = False        # random moves without STOP (episodes end at the step limit, as a trained agent's)
    agent: str = ""              # "RADIUS,HEIGHT": the task with this agent (e.g. PointNav on ObjectNav's 0.18,0.88 navmeshes)
    noise: str = ""              # make(noise=...) as key=value text or a preset (docs/NOISE.md); "": none
    groups: int = 1              # env groups stepped in turn (make(batch_size=num_envs // groups)); a step is one group's


DEFAULTS = BenchOptions()


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def resolve_renderer(renderer: str, device: str) -> str:
    """The backend name for ``renderer``: "auto" is embree on the CPU and warp on any other device."""
    if renderer == "auto":
        return "embree" if str(device) == "cpu" else "warp"
    return renderer


def ratio_goal(device: str, threads: int) -> float:
    """The goal for env step fps / render-only fps: ``RATIO_GOAL_GPU`` off the CPU; on the CPU
    ``RATIO_GOAL_MANY_THREADS`` from ``MANY_THREADS`` threads up, else ``RATIO_GOAL_FEW_THREADS``."""
    if str(device) != "cpu":
        return RATIO_GOAL_GPU
    return RATIO_GOAL_MANY_THREADS if threads >= MANY_THREADS else RATIO_GOAL_FEW_THREADS


def _pct(a: np.ndarray, q: float) -> float | None:
    return float(np.percentile(a, q)) if a.size else None


def _div(a, b):
    return None if a is None or b is None or b == 0 else a / b


def summarize(raw: dict, options: BenchOptions) -> dict:
    """Measured arrays (``step_s``, ``render_s``, ``load_in_flight``, ``waited`` per timed step,
    plus ``swaps``, ``counts``, ...) -> the reported statistics; no timing here, so the tests
    can check the statistics and the report on real measured values."""
    o = options
    st, rt = np.asarray(raw["step_s"], float), np.asarray(raw["render_s"], float)
    ld = np.asarray(raw["load_in_flight"], bool)
    quiet_n = int((~ld).sum())
    quiet_ok = quiet_n >= MIN_QUIET
    quiet = ~ld if quiet_ok else np.ones_like(ld)
    res = {k: v for k, v in raw.items() if k not in ("step_s", "render_s", "load_in_flight", "waited")}
    res["options"] = asdict(o)
    res.update(steps=int(st.size), quiet_steps=quiet_n, quiet_basis="quiet" if quiet_ok else "all",
               steps_with_load_in_flight=int(ld.sum()), waited_steps=int(np.sum(raw["waited"])))
    per_step = o.num_envs // max(o.groups, 1)   # envs a step moves (and a render-only frame draws)
    res["env_fps"] = per_step / st[quiet].mean()
    res["render_fps"] = per_step / rt[quiet].mean()
    res["env_over_render"] = res["env_fps"] / res["render_fps"]
    res["env_fps_all_steps"] = per_step / st.mean()
    res["p50_step_ms_quiet"] = _pct(st[quiet], 50) * 1e3
    res["p50_step_ms_all"] = _pct(st, 50) * 1e3
    res["p99_step_ms_all"] = _pct(st, 99) * 1e3
    res["max_step_ms"] = float(st.max() * 1e3)
    res["p99_over_p50"] = res["p99_step_ms_all"] / res["p50_step_ms_quiet"]
    # the same tail statistic over the quiet steps alone: the machine's own noise floor
    res["p99_step_ms_quiet"] = _pct(st[quiet], 99) * 1e3
    res["noise_p99_over_p50"] = res["p99_step_ms_quiet"] / res["p50_step_ms_quiet"]
    p50_load = _pct(st[ld], 50)
    res["p50_step_ms_load_in_flight"] = None if p50_load is None else p50_load * 1e3
    # what the loads themselves add, with the machine's drift taken out: (1) the same tail
    # statistic for rendering alone (pure C work on fixed poses: the machine's noise), (2) p99 of
    # the steps with a load in flight vs p99 of those without, (3) each step divided by the
    # render-only time of the same poses moments later (p99 over all / p50 over quiet steps)
    res["render_p99_over_p50"] = _pct(rt, 99) / _pct(rt, 50)
    res["p99_load_over_p99_quiet"] = _div(_pct(st[ld], 99), _pct(st[~ld], 99))
    paired = st / rt
    res["paired_p99_over_p50"] = _pct(paired, 99) / _pct(paired[quiet], 50)
    res["ratio_goal"] = ratio_goal(o.device, res.get("threads", 1))
    pl = raw.get("pipelined")
    if pl:
        res["pipelined_env_fps"] = per_step / pl["step_s"]
        res["pipelined_render_fps"] = per_step / pl["render_s"]
        res["pipelined_env_over_render"] = res["pipelined_env_fps"] / res["pipelined_render_fps"]
    res["step_ms"] = [round(float(x) * 1e3, 1) for x in st]
    res["render_ms"] = [round(float(x) * 1e3, 1) for x in rt]
    res["load_in_flight"] = [bool(x) for x in ld]
    return res


@dataclass(frozen=True)
class Goal:
    """One goal judged in a report: ``value`` ``op`` (">=", "<=", "==") ``goal``; ``what``: the
    quantity judged."""
    what: str
    value: Any
    op: str
    goal: Any

    @property
    def status(self) -> str:
        """PASS, FAIL, or n/a when there is no value to judge."""
        v = self.value
        if v is None or (isinstance(v, float) and not math.isfinite(v)):
            return "n/a"
        ok = v >= self.goal if self.op == ">=" else v <= self.goal if self.op == "<=" else v == self.goal
        return "PASS" if ok else "FAIL"

    def __str__(self) -> str:
        return f"goal {self.op} {self.goal}: {self.status}"


def verdict(value, op: str, goal) -> str:
    """``"goal >= 0.95: PASS"`` / ``FAIL``; ``n/a`` when there is no value to judge."""
    return str(Goal("", value, op, goal))


@dataclass(frozen=True)
class Report:
    """``report``'s result: the text lines and the goals judged in them, in line order."""
    lines: list
    goals: list

    @property
    def missed(self) -> list[Goal]:
        """The goals whose verdict is FAIL."""
        return [g for g in self.goals if g.status == "FAIL"]


def closing_line(rep: Report, load_avg: float, check: bool) -> str:
    """A bench's last line: every goal met, or how many were missed and what the exit status is
    (``check``: 1; else 0, the bench being a measurement under the machine's load)."""
    load = f"load average {load_avg:.1f}"
    n = len(rep.missed)
    if not n:
        return f"every goal met ({load})"
    if check:
        return f"{n} goal(s) missed (FAIL) at {load}: --check, exit status 1"
    return (f"{n} goal(s) missed (FAIL) at {load}: this is a measurement under the machine's "
            "load, not a test (exit status 0); --check exits 1 on a missed goal")


def _judged_pipelined(res: dict) -> bool:
    """On a device the ratio goal is judged on the pipelined run (a trainer never waits for
    the device between steps); on the CPU on the per-step timings, where the two are the same."""
    return res["device"] != "cpu" and "pipelined_env_fps" in res


def _ms(x) -> str:
    return "n/a" if x is None else f"{x:.1f} ms"


def _ratio(x) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def _judge(goals: list, what: str, value, op: str, goal) -> str:
    """Judge one goal of a report: append it to ``goals``; -> its verdict's text."""
    goals.append(Goal(what, value, op, goal))
    return str(goals[-1])


def report(res: dict) -> Report:
    """``summarize``'s result as text lines and the goals they judge (each verdict's text is made
    from its ``Goal``, so the lines and the goals cannot disagree)."""
    goals: list[Goal] = []
    judge = partial(_judge, goals)

    o = res["options"]
    n, k, q = res["steps"], res["steps_with_load_in_flight"], res["quiet_steps"]
    swaps = (f"{res['swaps']} scene swaps (one tried every {o['swap_every']} steps; a slot swaps only when "
             f"another scene is prefetched for it)" if o["swap_every"] else f"{res['swaps']} scene swaps (--swap-every 0)")
    loads = ("no scene load was in flight during any timed step" if k == 0 else
             f"a scene load was in flight during {'all' if k == n else k} of the {n} timed steps")
    quiet = res["quiet_basis"] == "quiet"
    over = (f"the {q} steps with no load in flight" if quiet else
            f"all {n} steps: only {q} had no load in flight, fewer than {MIN_QUIET}")
    p50_label = "no load in flight" if quiet else "all steps"
    lines = [
        f"{o['num_envs']} envs" + (f" in {o['groups']} groups stepped in turn" if o.get('groups', 1) > 1 else "")
        + f" on {res['device']} ({res['renderer']} renderer, {res['threads']} CPU thread{'s' if res['threads'] != 1 else ''}), "
        f"{res['resident_scenes']} resident scenes, {o['resolution']}x{o['resolution']} {'+'.join(o['sensors'])}, "
        f"{n} timed steps; {swaps}; {loads}; step graph: {res.get('capture_status', 'n/a')}",
        f"env step: {res['env_fps']:.0f} fps, render only: {res['render_fps']:.0f} fps, ratio "
        f"{res['env_over_render']:.3f} over {over} " + (
            f"({judge('env step / render only', res['env_over_render'], '>=', res['ratio_goal'])})"
            if not _judged_pipelined(res) else
            "(each step waited for the device: its latency; the goal is judged on the pipelined run)"),
        f"p99 step {res['p99_step_ms_all']:.1f} ms (all steps) / p50 step {res['p50_step_ms_quiet']:.1f} ms "
        f"({p50_label}) = {res['p99_over_p50']:.3f} ({judge('p99 / p50 step', res['p99_over_p50'], '<=', TAIL_GOAL)})",
        f"steps that waited for a load: {res['waited_steps']} "
        f"({judge('steps that waited for a load', res['waited_steps'], '==', 0)})",
    ]
    g = res.get("goal_images")
    if g:
        lines.append(f"goal images (ImageNav, warm-up included): {g['rendered']} rendered, {g['hits']} cache hits "
                     f"for {g['episodes']} episodes started; cache {g['cache_bytes'] / 2**20:.1f} MiB")
    c = res.get("counts")
    if c:
        # the goal is the step's: on the CPU the input check's .item() and Embree's .numpy() are
        # counted as syncs but have no device to wait for (on CUDA the input check runs once)
        step_syncs = c["by_phase"].get("step", {}).get("syncs", c["syncs"])
        lines.append(f"per step (mean of {c['steps']} counted steps, all phases): {c['torch_ops']:.0f} torch ops, "
                     f"{c['warp_launches']:.0f} Warp launches, {c['syncs']:.0f} host syncs; in the step phase "
                     f"{step_syncs:.0f} ({judge('host syncs in the step phase', step_syncs, '==', 0)})"
                     + (f"; by phase: {c['by_phase']}" if c["by_phase"] else ""))
        if c["sync_kinds"]:
            lines.append(f"host syncs per step by kind: {c['sync_kinds']}")
    if "pipelined_env_fps" in res:
        judged = _judged_pipelined(res)
        lines.append(
            f"pipelined, {res['pipelined']['steps']} steps back to back (what a trainer sees): env step "
            f"{res['pipelined_env_fps']:.0f} fps, render only {res['pipelined_render_fps']:.0f} fps, ratio "
            f"{res['pipelined_env_over_render']:.3f} " + (
                f"({judge('pipelined env step / render only', res['pipelined_env_over_render'], '>=', res['ratio_goal'])})"
                if judged else
                "(on the CPU nothing runs ahead of the host: the same work as above)"))
    lines += [
        f"noise floor: p99 / p50 over {'the steps with no load in flight' if quiet else 'all steps'} = "
        f"{res['noise_p99_over_p50']:.3f}; p50 with a load in flight {_ms(res['p50_step_ms_load_in_flight'])}; "
        f"load average at the end {res['load_avg_1min_end']:.1f}",
        f"load cost with the machine's drift taken out: render-only alone p99/p50 = "
        f"{res['render_p99_over_p50']:.3f}; p99 with a load in flight / p99 without = "
        f"{_ratio(res['p99_load_over_p99_quiet'])}; paired (step / render-only of the same poses) "
        f"p99/p50 = {res['paired_p99_over_p50']:.3f}",
        f"peak RSS: {res['peak_rss_mb']:.0f} MB",
    ]
    # the env's own account of each wait (its step numbers count the warm-up steps too: those
    # are said to be warm-up, next to a waited-steps count that leaves them out)
    warm = set(res.get("warmup_wait_reasons") or ())
    lines += [f"why a step waited: {r}" + (" (warm-up, not counted)" if r in warm else "")
              for r in res.get("wait_reasons") or []]
    return Report(lines, goals)


def _per_step_counts(counts, steps: int) -> dict:
    """StepCounts over ``steps`` steps -> means per step, in total and per phase."""
    tables = ("torch_ops", "warp_launches", "syncs")
    tot = {t: sum(counts.total(t, p) for p in counts.phases()) / steps for t in tables}
    by_phase = {p: {t: round(counts.total(t, p) / steps, 1) for t in tables} for p in counts.phases()}
    kinds: dict = {}
    for p, s in counts.syncs.items():
        for kind, v in s.items():
            kinds[kind] = round(kinds.get(kind, 0) + v / steps, 2)
    return {"steps": steps, **tot, "by_phase": by_phase if len(by_phase) > 1 else {}, "sync_kinds": kinds}


def _task(o: BenchOptions):
    """The task's name, or its default options with ``o.agent``'s radius and height."""
    if not o.agent:
        return o.task
    from dataclasses import replace

    from bps_assets.errors import ConfigError
    from bps_runtime.tasks import task_spec

    try:
        radius, height = (float(x) for x in o.agent.split(","))
    except ValueError:
        raise ConfigError(None, f"agent={o.agent!r}: expected RADIUS,HEIGHT in metres, e.g. 0.18,0.88") from None
    return replace(task_spec(o.task).defaults, agent_radius=radius, agent_height=height)


def run(manifest, options: BenchOptions = DEFAULTS, echo=print, progress=None) -> tuple[dict, Report]:
    """Measure, summarize, print the report (``echo`` per line; ``progress`` gets a line per
    phase of the measurement, see ``measure``); -> (the statistics, the report printed)."""
    res = summarize(measure(manifest, options, progress), options)
    rep = report(res)
    for line in rep.lines:
        echo(line)
    return res, rep


def measure(manifest, options: BenchOptions = DEFAULTS, progress=None) -> dict:
    """Run the env and time it (see the module docstring): the raw arrays ``summarize`` takes.
    ``progress(line)``, when given, hears each phase: env built, warm-up, every fifth of the
    timed steps, the pipelined and the counted steps."""
    say = progress or (lambda line: None)
    import torch

    from bps_runtime import make
    from cli.step_profile import count_ops
    from bps_runtime.threads import check_threads

    o = options
    renderer = resolve_renderer(o.renderer, o.device)
    threads = check_threads(o.threads or None, "threads")
    gen = torch.Generator().manual_seed(o.seed)
    raw: dict = {"options": asdict(o), "device": str(o.device), "renderer": renderer}
    t0 = time.perf_counter()
    env = make(manifest, split=o.split, num_envs=o.num_envs, sensors=o.sensors, device=o.device,
               resolution=(o.resolution, o.resolution), renderer=renderer, seed=o.seed, episodes="sample",
               cache={"slots": o.scenes, "swap_every": o.swap_every or None}, threads=threads,
               capture_graph=o.capture_graph, task=_task(o), noise=o.noise or None,
               batch_size=o.num_envs // o.groups if o.groups > 1 else None)
    dev = env.device
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    env.reset()
    at_reset = list(env.stats.get("wait_reasons", []))
    raw["warmup_wait_reasons"] = []   # the waits of the warm-up steps (each line names its step)
    raw["setup_seconds"] = time.perf_counter() - t0
    say(f"env ready in {raw['setup_seconds']:.1f} s; {o.warmup} warm-up steps, then {o.steps} timed")
    every = max(1, o.steps // 5)
    raw["threads"] = env.world.threads
    scenes = env.world.scenes
    step_s, render_s, loading, waited = [], [], [], []

    def actions():
        lo = 1 if o.no_stop else 0
        return torch.randint(lo, env.num_actions, (env.batch_size,), generator=gen).to(dev)

    try:
        raw["resident_scenes"] = len(set(scenes.resident_scene_ids()))
        for i in range(o.warmup + o.steps):
            a = actions()
            sync()
            busy = scenes.loading
            t = time.perf_counter()
            _, _, _, info = env.step(a)
            sync()
            dt = time.perf_counter() - t
            busy = busy or scenes.loading
            keys, pos, rot = (info[k].clone() for k in ("scene_index", "position", "rotation"))
            sync()
            t = time.perf_counter()
            env.world.render(keys, pos, rot, env.sensors)
            sync()
            dr = time.perf_counter() - t
            if i >= o.warmup and (i - o.warmup + 1) % every == 0:
                say(f"timed steps {i - o.warmup + 1}/{o.steps} (last: step {dt * 1e3:.0f} ms, "
                    f"render only {dr * 1e3:.0f} ms)")
            if i >= o.warmup:
                step_s.append(dt)
                render_s.append(dr)
                loading.append(busy)
                waited.append(bool(info["waited_for_load"]))
            elif i + 1 == o.warmup:
                raw["warmup_wait_reasons"] = [r for r in env.stats.get("wait_reasons", []) if r not in at_reset]
        n_pl = o.pipelined_steps if o.pipelined_steps >= 0 else (PIPELINED_STEPS if dev.type != "cpu" else 0)
        if n_pl > 0:
            say(f"{n_pl} pipelined steps")
            raw["pipelined"] = _pipelined(env, [actions() for _ in range(n_pl)], sync)
        raw["swaps"] = scenes.swaps_requested
        gi = env.host_hook
        if gi is not None:   # ImageNav: goal images rendered vs served from the cache (warm-up included)
            raw["goal_images"] = {"rendered": gi.rendered, "hits": gi.cache.hits, "misses": gi.cache.misses,
                                  "episodes": env.stats["episodes"], "cache_bytes": gi.cache.nbytes}
        raw["capture_status"] = env.capture_status
        raw["wait_reasons"] = list(env.stats.get("wait_reasons", []))
        if o.count_steps > 0:
            acts = [actions() for _ in range(o.count_steps)]
            say(f"{o.count_steps} steps counting torch ops, Warp launches and syncs")
            with count_ops() as counts:   # follows the env's simulator thread (step_profile)
                for a in acts:
                    env.step(a)
            raw["counts"] = _per_step_counts(counts, o.count_steps)
    finally:
        env.close()
    raw.update(step_s=step_s, render_s=render_s, load_in_flight=loading, waited=waited)
    raw["load_avg_1min_end"] = float(os.getloadavg()[0])
    raw["peak_rss_mb"] = _peak_rss_mb()
    return raw


def _pipelined(env, acts, sync) -> dict:
    """Throughput as a trainer sees it: ``len(acts)`` env steps back to back with no wait
    between them (the timed loop above waits for the device after every step, which on CUDA
    measures a step's latency: the host's bookkeeping plus the device's work, never overlapped),
    then as many render-only frames of fixed poses back to back; in two halves, alternated, so
    both see the same drift. -> {"steps", "step_s", "render_s"} (seconds per step)."""
    keys, pos, rot = (env.last_info[k].clone() for k in ("scene_index", "position", "rotation"))
    h = len(acts) // 2
    step_t = render_t = 0.0
    for part in (acts[:h], acts[h:]):
        sync()
        t = time.perf_counter()
        for a in part:
            env.step(a)
        sync()
        step_t += time.perf_counter() - t
        t = time.perf_counter()
        for _ in part:
            env.world.render(keys, pos, rot, env.sensors)
        sync()
        render_t += time.perf_counter() - t
    return {"steps": len(acts), "step_s": step_t / len(acts), "render_s": render_t / len(acts)}


# ---------------------------------------------------------------------------------- thread scaling
# issue 11 on many cores: render only at N threads >= SCALING_GOAL x N x the 1-thread figure, and
# env step / render only >= RATIO_GOAL_MANY_THREADS at the highest thread count
SCALING_GOAL = 0.8


def default_thread_counts() -> list[int]:
    """1, 2 and every core this process may use (``os.sched_getaffinity``), ascending, once each."""
    from bps_runtime.threads import available_cores

    return sorted({1, 2, available_cores()})


def measure_threads(manifest, counts, options: BenchOptions = DEFAULTS, echo=print) -> dict:
    """One ``measure`` per thread count (in the order given, 1 first), each with its own env
    built with ``threads=N`` and the same seed, scenes and agents; -> {N: summarize(...)}."""
    from dataclasses import replace

    from bps_runtime.threads import check_threads

    counts = [1] + [n for n in dict.fromkeys(check_threads(n, "thread count") for n in counts) if n != 1]
    out = {}
    for n in counts:
        o = replace(options, threads=n, count_steps=0)
        t = time.perf_counter()
        out[n] = summarize(measure(manifest, o), o)
        echo(f"{n} thread{'s' if n != 1 else ''}: env step {out[n]['env_fps']:.0f} fps, render only "
             f"{out[n]['render_fps']:.0f} fps ({time.perf_counter() - t:.0f} s, load average "
             f"{out[n]['load_avg_1min_end']:.1f})")
    return out


def summarize_threads(per: dict) -> dict:
    """{N: summarize()} -> one row per N: render / env fps, step / render, render(N) / (N x
    render(1)), median step - render of the same poses (ms), and the goals' values."""
    base = per[1]["render_fps"]
    rows = []
    for n in sorted(per):
        r = per[n]
        st, rt = np.asarray(r["step_ms"], float), np.asarray(r["render_ms"], float)
        rows.append({"threads": n, "render_fps": r["render_fps"], "env_fps": r["env_fps"],
                     "env_over_render": r["env_over_render"], "scaling": r["render_fps"] / (n * base),
                     "median_step_minus_render_ms": float(np.median(st - rt)),
                     "p50_render_ms": float(np.median(rt)), "load_avg_1min_end": r["load_avg_1min_end"],
                     "quiet_basis": r["quiet_basis"]})
    first = per[min(per)]
    top = rows[-1]
    return {"rows": rows, "top_threads": top["threads"], "options": first["options"], "device": first["device"],
            "renderer": first["renderer"], "resident_scenes": first["resident_scenes"],
            "usable_cores": _usable_cores(), "scaling_goal": SCALING_GOAL,
            "ratio_goal": RATIO_GOAL_MANY_THREADS}


def _usable_cores() -> int:
    from bps_runtime.threads import available_cores

    return available_cores()


def thread_report(res: dict) -> Report:
    """``summarize_threads``' result as a report: a table, then one goal line per thread count
    > 1 (render scaling) and the env step / render only goal at the highest count, each with
    its verdict, and those goals (as ``report``'s, so ``--check`` judges them)."""
    goals: list[Goal] = []
    judge = partial(_judge, goals)

    o = res["options"]
    lines = [f"{o['num_envs']} envs on {res['device']} ({res['renderer']} renderer), {res['resident_scenes']} resident "
             f"scenes, {o['resolution']}x{o['resolution']} {'+'.join(o['sensors'])}, {o['steps']} timed steps per "
             f"thread count; {res['usable_cores']} cores usable by this process",
             "threads | render only fps | env step fps | step / render | render(N) / (N x render(1)) | "
             "median step - render (ms) | load avg"]
    for r in res["rows"]:
        lines.append(f"{r['threads']:7d} | {r['render_fps']:15.0f} | {r['env_fps']:12.0f} | {r['env_over_render']:13.3f} | "
                     f"{r['scaling']:26.3f} | {r['median_step_minus_render_ms']:25.1f} | {r['load_avg_1min_end']:.1f}")
    for r in res["rows"]:
        if r["threads"] > 1:
            n = r["threads"]
            lines.append(f"render only at {n} threads / ({n} x render only at 1 thread) = {r['scaling']:.3f} "
                         f"({judge(f'render scaling at {n} threads', r['scaling'], '>=', res['scaling_goal'])})")
    top = res["rows"][-1]
    lines.append(f"env step / render only at {top['threads']} threads (the highest count) = {top['env_over_render']:.3f} "
                 f"({judge('env step / render only at the highest count', top['env_over_render'], '>=', res['ratio_goal'])})")
    return Report(lines, goals)
