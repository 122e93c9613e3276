"""JSON read from files: one typed error for every way a document can be bad.

``parse_json(raw, path, what)`` is ``json.loads`` whose failures are an ``InputError`` naming
the file: invalid JSON or UTF-8, and nesting deeper than the interpreter's recursion limit (a
100,000-level ``[[[...]]]`` raises ``RecursionError`` inside the decoder; no document of ours
nests past a dozen levels). ``unique_keys=True`` also refuses an object with a key twice (a
manifest listing one scene twice would otherwise silently keep the last entry).
"""
from __future__ import annotations

import json
import os

from .errors import InputError


class _DuplicateKey(ValueError):
    pass


def _unique_pairs(pairs):
    out = {}
    for k, v in pairs:
        if k in out:
            raise _DuplicateKey(k)
        out[k] = v
    return out


def parse_json(raw, path: str | os.PathLike | None, what: str = "JSON", unique_keys: bool = False):
    """The document in ``raw`` (str, bytes or bytearray); ``InputError`` naming ``path`` otherwise."""
    try:
        return json.loads(raw, object_pairs_hook=_unique_pairs if unique_keys else None)
    except _DuplicateKey as e:
        raise InputError(path, f"{what}: key {e.args[0]!r} appears twice in one object "
                               "(which entry is meant?)") from None
    except RecursionError:
        raise InputError(path, f"not valid {what}: nested too deeply (more levels than the parser's "
                               "recursion limit)") from None
    except UnicodeDecodeError as e:
        raise InputError(path, f"not valid {what}: not UTF-8 ({e})") from None
    except json.JSONDecodeError as e:
        raise InputError(path, f"not valid {what}: {e}") from None
