"""Test helper: write an episode file as habitat stores them (gzip-compressed JSON)."""
from __future__ import annotations

import gzip
import json
from pathlib import Path


def write_gz(path: Path, doc) -> Path:
    """Write ``doc`` (a JSON-able object, or JSON text as is) to ``path`` gzip-compressed,
    making its folder; returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress((doc if isinstance(doc, str) else json.dumps(doc)).encode()))
    return path
