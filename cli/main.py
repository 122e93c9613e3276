"""`bps-assets`: one click group; each `cli/cmd_*.py` module contributes its commands.

A module adds itself by defining ``commands`` (a list of click commands or groups), so
commands are added without editing this file. Library errors (``BpsError``) become one line
on stderr and a non-zero exit; anything else is a bug and keeps its traceback.
"""
from __future__ import annotations

import importlib
import pkgutil
import sys

import click

from bps_assets import __version__
from bps_assets.errors import BpsError


class _Group(click.Group):
    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except BpsError as e:
            click.echo(f"error: {e}", err=True)
            ctx.exit(e.exit_code)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="bps-assets")
def main():
    """Turn scans into packed scenes and navmeshes, preprocess datasets, run the batch env."""


def _register():
    import cli as pkg

    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda i: i.name):
        if info.name.startswith("cmd_"):
            mod = importlib.import_module(f"cli.{info.name}")
            for cmd in getattr(mod, "commands", []):
                main.add_command(cmd)


_register()

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
