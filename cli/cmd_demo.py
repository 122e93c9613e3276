"""`bps-assets demo`: the pipeline's demo steps, then the runtime's (the CLI is the one layer that
knows both, so it composes the list; bps_assets never imports bps_runtime)."""
from __future__ import annotations

import sys

import click

from bps_assets.pipeline.demo import DEMO_N, DEMO_SPLIT


def demo_steps() -> list:
    """The pipeline's steps (synthesize, preprocess, verify, summary), then the runtime's (run
    the batched env and print fps)."""
    from bps_assets.pipeline.demo import DEFAULT_STEPS
    from cli.demo_env import demo_steps as runtime_steps

    return [*DEFAULT_STEPS, *runtime_steps()]


@click.command("demo")
@click.argument("outdir", required=False, default="demo_out", type=click.Path(file_okay=False))
@click.option("--scenes", type=click.IntRange(min=1, max=30), default=DEMO_N, show_default=True,
              help=f"Scenes to synthesize (Gibson split {DEMO_SPLIT!r}, train and val).")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Preprocess processes (default: all cores this process may use).")
def demo_cmd(outdir, scenes, workers):
    """Synthesize a small Gibson-layout dataset, preprocess it, verify it, run the batched env
    and print its speed.

    OUTDIR: default demo_out (where bps-train --dataset looks by default: demo_out/manifest.json).
    Steps: bps_assets.pipeline.demo's, then cli.demo_env's."""
    from bps_assets.pipeline.demo import run_demo

    ok = run_demo(outdir, scenes=scenes, workers=workers, echo=click.echo, steps=demo_steps())
    if not ok:
        sys.exit(1)


commands = [demo_cmd]
