"""A habitat scene dataset's JSON files: their size cap, suffixes per kind, and capped reader.

The one definition for both readers of a ``*.scene_dataset_config.json``: ``habitat`` (templates
and scene instances: composed scenes) and ``pipeline.scene_dataset_config`` (its stages as a
source description). A file is read through ``readers.guard.read_limited`` (at most
``MAX_CONFIG_BYTES``: a ResourceLimitError past it; a missing or unreadable file an InputError)
and must hold a JSON object (else a DatasetError naming the file).
"""
from __future__ import annotations

from pathlib import Path

from ..errors import DatasetError
from ..json_input import parse_json

MAX_CONFIG_BYTES = 64 << 20
SCENE_DATASET_CONFIG_SUFFIX = ".scene_dataset_config.json"   # the dataset's own config
SUFFIX = {"stages": ".stage_config.json", "objects": ".object_config.json",
          "articulated_objects": ".ao_config.json", "scene_instances": ".scene_instance.json"}


def read_capped(path: Path) -> bytearray:
    """The bytes of a config or scene instance file, at most ``MAX_CONFIG_BYTES``."""
    # imported here: the readers package loads numpy, and pipeline.datasets (which reads configs
    # through this module) must import without it
    from ..readers.guard import read_limited

    return read_limited(path, MAX_CONFIG_BYTES, "scene dataset JSON")


def load_json(path: Path, raw: bytes | None = None, *, prefix: str | None = None,
              encoding: str | None = None) -> dict:
    """The JSON object of a config / scene instance file (``raw``: its bytes, already read);
    ``prefix`` and ``encoding`` as ``json_input.parse_json`` takes them."""
    d = parse_json(read_capped(path) if raw is None else raw, path, prefix=prefix, error=DatasetError,
                   encoding=encoding)
    if not isinstance(d, dict):
        raise DatasetError(path, "not a JSON object")
    return d
