"""Where the dataset description files (``data_manifests/*.json``) are found.

A low-level lookup shared by ``synth`` (which names its scans after real dataset ids) and
``pipeline.datasets`` (which reads the splits), so neither reaches into the other.
First hit wins:
1. ``$BPS_DATA_MANIFESTS`` (a directory), for a user's own dataset files;
2. ``data_manifests/`` at the repository root (a source checkout / editable install);
3. the copy a wheel installs as data files (``<prefix>/share/bps/data_manifests``), found
   through the installed distribution's file list (any install scheme), else beside the
   prefix or the package (``pip install --target``).
"""
from __future__ import annotations

import os
import sysconfig
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

from .errors import DatasetError

ENV_VAR = "BPS_DATA_MANIFESTS"
SHARE = "share/bps/data_manifests"  # the wheel's data-files location, under the install prefix


def _installed_dir() -> Path | None:
    """``data_manifests`` as recorded in the installed distribution's file list, if any."""
    try:
        dist = distribution("bps")
        files = dist.files or []
    except (PackageNotFoundError, OSError, ValueError):
        # not installed, or a broken install whose RECORD cannot be read: other candidates remain
        return None
    for f in files:
        if f.name.endswith(".json") and f.parent.name == "data_manifests":
            return Path(dist.locate_file(f)).resolve().parent
    return None


def candidate_dirs() -> list[Path]:
    """Every place looked at, in order."""
    dirs = []
    env = os.environ.get(ENV_VAR)
    if env:
        dirs.append(Path(env))
    here = Path(__file__).resolve().parents[1]  # the repo root, or the site-packages dir
    dirs.append(here / "data_manifests")
    installed = _installed_dir()
    if installed is not None:
        dirs.append(installed)
    dirs += [Path(sysconfig.get_path("data")) / SHARE, here / SHARE]
    return dirs


def manifests_dir() -> Path:
    """The directory holding the dataset files (see the module docstring for the order)."""
    for d in candidate_dirs():
        if d.is_dir() and any(d.glob("*.json")):
            return d
    raise DatasetError(None, "cannot find data_manifests/ (set $BPS_DATA_MANIFESTS to a directory "
                             "of dataset files, or reinstall bps)")
