"""`bps-assets`: one click group; each command lives in a `cli/cmd_*.py` module, imported only
when that command runs.

Why lazy: the command modules pull in numpy, scipy, the converters and (``bench``) torch through
``bps_runtime``; importing them all made every command, ``--help`` and ``--version`` included,
take 4.5-6 s to start. ``COMMANDS`` names each command's module and object, and the one-line
help that ``bps-assets --help`` lists without importing it (``tests/test_cli_startup.py``
checks that the table matches the modules' ``commands`` lists and their help, and that
importing this module loads no heavy package). A new command: define it in a ``cmd_*``
module, list it in that module's ``commands`` and add a row here.

Library errors (``BpsError``) become one line on stderr and a non-zero exit; Ctrl-C exits 130
(128 + SIGINT, as bps-train and the shell), not click's "Aborted!" and 1; anything else is a bug
and keeps its traceback.
"""
from __future__ import annotations

import importlib
import sys

import click

from bps_assets import __version__
from bps_assets.argv_paths import expand_option_tilde
from bps_assets.errors import BpsError

INTERRUPTED_EXIT = 130   # 128 + SIGINT

# name -> (module, attribute, short help shown by `bps-assets --help`)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "convert": ("cli.cmd_convert", "convert_cmd",
                "Convert scan files (GLB/glTF/PLY/OBJ) into packed scenes, one OUTDIR/<scene>.bps each."),
    "info": ("cli.cmd_convert", "info_cmd",
             "Show a packed file's header and section table (scenes, navmeshes: any container kind)."),
    "navmesh": ("cli.cmd_navmesh", "navmesh_cmd",
                "Build navmeshes from scans (.glb/.gltf/.ply/.obj or packed scenes), or import Detour "
                "navmeshes (habitat .navmesh, Detour .bin sets or tiles), into OUT/NAME.navmesh.bps."),
    "nav": ("cli.cmd_navmesh", "nav_group", "Query a navmesh (a packed .navmesh.bps or a habitat .navmesh)."),
    "preview": ("cli.cmd_navmesh", "preview_cmd",
                "Top-down map of a navmesh: one panel per floor, islands coloured, scale bar and legend;..."),
    "episodes": ("cli.cmd_episodes", "episodes_cmd",
                 "Generate PointNav or ObjectNav episodes with habitat-lab's rules from NAVFILE..."),
    "synth": ("cli.cmd_synth", "synth_cmd",
              "Write scan-like demo scenes (rooms, doors, furniture, stairs; Z up like the real scans)."),
    "datasets": ("cli.cmd_pipeline", "datasets_cmd",
                 "List the known datasets, a dataset's splits, or a split's scenes."),
    "preprocess": ("cli.cmd_pipeline", "preprocess_cmd",
                   "Convert every scene of a dataset split into packed scenes + navmeshes (+ episodes)."),
    "verify": ("cli.cmd_pipeline", "verify_cmd",
               "Check a preprocessed dataset: sizes, sha256, headers (and --deep: every section)."),
    "manifest": ("cli.cmd_pipeline", "manifest_group", "Inspect and merge preprocessed-dataset manifests."),
    "launch": ("cli.cmd_pipeline", "launch_cmd",
               "Preprocess on a cluster: one submitit job array of --shards tasks, then merge."),
    "demo": ("cli.cmd_demo", "demo_cmd",
             "Synthesize a small Gibson-layout dataset, preprocess it, verify it, run the batched env "
             "and print its speed."),
    "bench": ("cli.cmd_runtime", "bench_cmd",
              "Benchmark the batched PointNav env on a preprocessed dataset (MANIFEST: manifest.json): "
              "env step fps vs render-only fps, step-time tail with scene..."),
}


def load_command(name: str) -> click.Command:
    """Import ``name``'s module and return its click command."""
    module, attr, _ = COMMANDS[name]
    return getattr(importlib.import_module(module), attr)


def _shorten(text: str, limit: int) -> str:
    """``text`` cut at a word boundary to at most ``limit`` characters, "..." marking the cut."""
    text = text.removesuffix("...")
    if len(text) <= limit:
        return text
    return text[: max(limit - 3, 1)].rsplit(" ", 1)[0].rstrip(",;:") + "..."


class _Group(click.Group):
    def list_commands(self, ctx):
        return sorted(COMMANDS)

    def get_command(self, ctx, name):
        return load_command(name) if name in COMMANDS else None

    def format_commands(self, ctx, formatter):
        # the listing from the table: importing every command module here is the slow start
        limit = formatter.width - 6 - max(len(n) for n in COMMANDS)
        rows = [(n, _shorten(COMMANDS[n][2], limit)) for n in sorted(COMMANDS)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def parse_args(self, ctx, args):
        return super().parse_args(ctx, [expand_option_tilde(a) for a in args])

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except BpsError as e:
            click.echo(f"error: {e}", err=True)
            ctx.exit(e.exit_code)
        except KeyboardInterrupt:
            click.echo("\ninterrupted (Ctrl-C)", err=True)
            ctx.exit(INTERRUPTED_EXIT)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="bps-assets")
def main():
    """Turn scans into packed scenes and navmeshes, preprocess datasets, run the batch env."""


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
