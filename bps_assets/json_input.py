"""JSON read from files: the one door every reader goes through, one typed error for every way a
document can be bad.

``parse_json(raw, path, what)`` is ``json.loads`` whose failures are one error naming the file
(``InputError`` unless the caller passes another ``error`` class, e.g. ``DatasetError`` or the
container's ``CorruptFileError``): invalid JSON or UTF-8, and nesting deeper than the
interpreter's recursion limit (a 100,000-level ``[[[...]]]`` raises ``RecursionError`` inside the
decoder; no document of ours nests past a dozen levels). ``unique_keys=True`` also refuses an
object with a key twice (a manifest listing one scene twice would otherwise silently keep the
last entry). ``prefix`` starts the message (default ``"not valid {what}"``), so each reader keeps
its own wording; ``encoding`` decodes bytes first (glTF: ``utf-8-sig``; default: json's rules).
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


def parse_json(raw, path: str | os.PathLike | None, what: str = "JSON", unique_keys: bool = False,
               *, prefix: str | None = None, error=InputError, encoding: str | None = None):
    """The document in ``raw`` (str, bytes or bytearray); ``error(path, message)`` otherwise."""
    prefix = prefix or f"not valid {what}"
    try:
        if encoding is not None and not isinstance(raw, str):
            raw = bytes(raw).decode(encoding)
        return json.loads(raw, object_pairs_hook=_unique_pairs if unique_keys else None)
    except _DuplicateKey as e:
        raise error(path, f"{what}: key {e.args[0]!r} appears twice in one object "
                          "(which entry is meant?)") from None
    except RecursionError:
        raise error(path, f"{prefix}: nested too deeply (more levels than the parser's "
                          "recursion limit)") from None
    except UnicodeDecodeError as e:
        raise error(path, f"{prefix}: not UTF-8 ({e})") from None
    except json.JSONDecodeError as e:
        raise error(path, f"{prefix}: {e}") from None

