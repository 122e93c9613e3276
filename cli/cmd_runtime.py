"""`bps-assets bench MANIFEST`: the batched environment benchmark (cli.env_bench)."""
from __future__ import annotations

import contextlib
import json
import sys
import threading
import time

import click

from bps_runtime.tasks import TASKS
from cli.env_bench import DEFAULTS, RENDERERS


HEARTBEAT_S = 15.0  # seconds between "still running" lines on stderr


@contextlib.contextmanager
def _heartbeat(what: str):
    """Say what runs, then a line on stderr every HEARTBEAT_S seconds until it is done (the
    measurement itself reports only at the end: minutes on a few cores)."""
    click.echo(f"{what} ...", err=True)
    done, t0 = threading.Event(), time.perf_counter()

    def beat():
        while not done.wait(HEARTBEAT_S):
            click.echo(f"  ... still running, {time.perf_counter() - t0:.0f} s", err=True)

    t = threading.Thread(target=beat, daemon=True)
    t.start()
    try:
        yield
    finally:   # "done" only when it finished: a failed run's error line follows on its own
        done.set()
        t.join()
    click.echo(f"  done in {time.perf_counter() - t0:.0f} s", err=True)


def _check_noise(ctx, param, value):
    """A bad --noise is a usage error before any work (the same text as bps-train --noise)."""
    if value:
        from bps_assets.errors import ConfigError
        from bps_runtime.noise.presets import noise_options
        try:
            noise_options(value)
        except ConfigError as e:
            raise click.BadParameter(str(e)) from None
    return value


@click.command("bench")
@click.argument("manifest", type=click.Path(exists=True, path_type=str))
@click.option("--num-envs", type=click.IntRange(min=1), default=DEFAULTS.num_envs, show_default=True,
              help="agents simulated as one batch")
@click.option("--scenes", type=click.IntRange(min=1), default=DEFAULTS.scenes, show_default=True,
              help="resident scene slots")
@click.option("--resolution", type=click.IntRange(min=1, max=4096), default=DEFAULTS.resolution,
              show_default=True, help="square sensor resolution")
@click.option("--steps", type=click.IntRange(min=2), default=DEFAULTS.steps, show_default=True,
              help="timed steps")
@click.option("--swap-every", type=click.IntRange(min=0), default=DEFAULTS.swap_every, show_default=True,
              help="steps between scene swaps (0: none)")
@click.option("--renderer", type=click.Choice(RENDERERS), default=DEFAULTS.renderer, show_default=True,
              help="auto: embree on the CPU, warp on CUDA")
@click.option("--device", default=DEFAULTS.device, show_default=True, help="cpu or cuda[:i]")
@click.option("--threads", type=click.IntRange(min=0), default=DEFAULTS.threads, show_default=True,
              help="CPU threads for the renderer and the step (0: every core this process may use)")
@click.option("--count-steps", type=click.IntRange(min=0), default=DEFAULTS.count_steps, show_default=True,
              help="steps run after the timed ones counting torch ops, Warp launches and host syncs (0: none)")
@click.option("--capture-graph", is_flag=True,
              help="on CUDA, replay each step (and its Warp frame) as a CUDA graph (the report says whether it was captured)")
@click.option("--pipelined-steps", type=click.IntRange(min=-1), default=DEFAULTS.pipelined_steps, show_default=True,
              help="steps run back to back after the timed ones, the figure a trainer sees (-1: 40 on a GPU, none on the CPU)")
@click.option("--rgb", is_flag=True, help="render RGB as well as depth")
@click.option("--split", default=DEFAULTS.split, show_default=True, help="manifest subset to run on")
@click.option("--seed", type=int, default=DEFAULTS.seed, show_default=True, help="seed of the env and the random actions")
@click.option("--task", type=click.Choice(TASKS), default=DEFAULTS.task,
              show_default=True, help="the task (its defaults; episodes sampled)")
@click.option("--noise", default=DEFAULTS.noise, callback=_check_noise,
              help="sensor and actuation noise (habitat-sim's models, docs/NOISE.md), as bps-train --noise: a preset "
                   "(challenge2021: its noise) or key=value pairs, e.g. depth=redwood,rgb=gaussian,actuation=locobot-ilqr")
@click.option("--json", "as_json", is_flag=True, help="print the results as JSON on stdout")
@click.option("--check", is_flag=True,
              help="exit 1 when a goal is missed (FAIL); without it the bench is a measurement and exits 0")
def bench_cmd(manifest, num_envs, scenes, resolution, steps, swap_every, renderer, device, threads, count_steps,
              capture_graph, pipelined_steps, rgb, split, seed, task, noise, as_json, check):
    """Benchmark the batched PointNav env on a preprocessed dataset (MANIFEST: manifest.json):
    env step fps vs render-only fps, step-time tail with scene swaps, loads waited for, peak RSS
    (random actions; one process; see cli/env_bench.py), then torch ops, Warp launches and
    host syncs per step; each goal line ends in PASS or FAIL. ``--task``: ObjectNav / ImageNav.

    A measurement: timings depend on the machine's load, and a missed goal exits 0 unless
    ``--check``."""
    from cli.env_bench import BenchOptions, closing_line, run

    opts = BenchOptions(num_envs=num_envs, scenes=scenes, resolution=resolution, steps=steps,
                        swap_every=swap_every, renderer=renderer, device=device, threads=threads,
                        count_steps=count_steps, capture_graph=capture_graph, pipelined_steps=pipelined_steps,
                        sensors=("depth", "rgb") if rgb else ("depth",), split=split, seed=seed, task=task, noise=noise)
    echo = (lambda s: click.echo(s, err=True)) if as_json else click.echo
    with _heartbeat(f"bench: {num_envs} envs x {steps} timed steps on {device}, then {count_steps} counted "
                    f"steps" + (f", noise {noise}" if noise else "")):
        res, rep = run(manifest, opts, echo=echo, progress=lambda line: click.echo(f"  {line}", err=True))
    echo(closing_line(rep, res["load_avg_1min_end"], check))
    if as_json:
        click.echo(json.dumps(res, indent=1, default=str))
    if check and rep.missed:
        sys.exit(1)


commands = [bench_cmd]
