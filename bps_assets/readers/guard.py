"""Last line of defence for readers: malformed input must end in a typed error.

Readers check what they read explicitly (with precise messages); this wrapper only turns the
exceptions an unforeseen malformation could still raise deep inside numpy or the standard
library into an ``InputError`` naming the file. Its message says "unexpected" so tests can
tell a precise check from this net.
"""
from __future__ import annotations

import functools
import os
import struct

from ..errors import BpsError, InputError

_NET = (TypeError, AttributeError, KeyError, IndexError, ValueError, OverflowError,
        ZeroDivisionError, struct.error, RecursionError, UnicodeError)


def read_source(path, kind: str) -> tuple[str, bytes]:
    """(path as str, the file's bytes); a missing or unreadable file is an InputError."""
    spath = os.fspath(path)
    try:
        with open(spath, "rb") as f:
            return spath, f.read()
    except FileNotFoundError:
        raise InputError(spath, "file not found") from None
    except IsADirectoryError:
        raise InputError(spath, f"is a directory, not a {kind} file") from None
    except OSError as e:
        raise InputError(spath, f"cannot read: {e.strerror or e}") from None


def guarded(kind: str):
    def deco(fn):
        @functools.wraps(fn)
        def wrapper(path, *args, **kw):
            try:
                return fn(path, *args, **kw)
            except BpsError:
                raise
            except MemoryError:
                raise InputError(path, f"{kind} file declares more data than fits in memory") from None
            except _NET as e:
                raise InputError(path, f"malformed {kind} file (unexpected {type(e).__name__}: {e})") from e
        return wrapper
    return deco
