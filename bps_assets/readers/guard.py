"""Last line of defence for readers: malformed input must end in a typed error.

Readers check what they read explicitly (with precise messages); this wrapper only turns the
exceptions an unforeseen malformation could still raise deep inside numpy or the standard
library into an ``InputError`` naming the file. Its message says "unexpected" so tests can
tell a precise check from this net.
"""
from __future__ import annotations

import functools
import gzip
import os
import struct
import zlib

from ..errors import BpsError, InputError, ResourceLimitError

STREAM_CHUNK = 1 << 20

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


def read_limited(path, limit: int, what: str = "JSON") -> bytearray:
    """The bytes of ``path``, gunzipped when it starts with the gzip magic, read ``STREAM_CHUNK``
    at a time with a running total: more than ``limit`` bytes (decompressed) is a
    ResourceLimitError as soon as the limit is passed, so a gzip bomb costs at most ``limit``
    plus one chunk, and a small file costs only its size (no ``read(limit + 1)`` reservation)."""
    spath = os.fspath(path)
    out = bytearray()
    try:
        with open(spath, "rb") as fh:
            gz = fh.read(2) == b"\x1f\x8b"
            fh.seek(0)
            src = gzip.GzipFile(fileobj=fh) if gz else fh
            with src:
                while True:
                    piece = src.read(STREAM_CHUNK)
                    if not piece:
                        break
                    out += piece
                    if len(out) > limit:
                        raise ResourceLimitError(spath, f"more than {limit} bytes of {what}"
                                                        f"{' when decompressed' if gz else ''} (the cap)")
    except FileNotFoundError:
        raise InputError(spath, "no such file") from None
    except IsADirectoryError:
        raise InputError(spath, f"is a directory, not a {what} file") from None
    except MemoryError:
        raise ResourceLimitError(spath, f"{what} does not fit in memory (read {len(out)} bytes)") from None
    except (EOFError, zlib.error, gzip.BadGzipFile) as e:
        raise InputError(spath, f"cannot read (bad gzip?): {e}") from None
    except OSError as e:
        raise InputError(spath, f"cannot read: {e.strerror or e}") from None
    return out


def read_text_capped(path, cap: int, error=InputError) -> str:
    """A UTF-8 text file of at most ``cap`` bytes; a larger, missing, unreadable or non-UTF-8
    file is ``error(path, ...)`` (one line naming the problem)."""
    spath = os.fspath(path)
    try:
        if os.path.getsize(spath) > cap:
            raise error(spath, f"larger than the {cap >> 20} MiB cap")
        with open(spath, "rb") as f:
            return f.read().decode("utf-8")
    except FileNotFoundError:
        raise error(spath, "file not found") from None
    except UnicodeDecodeError as e:
        raise error(spath, f"not UTF-8 text ({e.reason} at byte {e.start})") from None
    except OSError as e:
        raise error(spath, f"cannot read: {e.strerror or e}") from None


def headed_lines(path, text: str | None, cap: int, header: str, error=InputError) -> list[str]:
    """The lines of a text file (``text``, else read with ``read_text_capped``) whose first line
    MUST be ``header`` (else ``error`` naming line 1)."""
    lines = (read_text_capped(path, cap, error) if text is None else text).splitlines()
    if not lines or lines[0].strip() != header:
        raise error(os.fspath(path), f"line 1: header is not {header!r}")
    return lines


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
