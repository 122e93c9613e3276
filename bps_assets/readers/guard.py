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
# A gzip stream that inflates past RATIO_FLOOR bytes at more than MAX_GZIP_RATIO times the
# compressed bytes read so far is refused there: JSON compresses 3-20x, padding 1000x, so a
# bomb costs RATIO_FLOOR (plus a chunk) instead of the whole cap.
MAX_GZIP_RATIO = 200
RATIO_FLOOR = 64 << 20

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
    ResourceLimitError as soon as the limit is passed, or as soon as a gzip stream inflates past
    ``RATIO_FLOOR`` at more than ``MAX_GZIP_RATIO``x, so a gzip bomb costs about ``RATIO_FLOOR``
    and a small file only its size (no ``read(limit + 1)`` reservation)."""
    out = bytearray()
    for piece in iter_limited(path, limit, what):
        out += piece
    return out


def iter_limited(path, limit: int, what: str = "JSON", chunk: int = STREAM_CHUNK):
    """``read_limited``'s bytes as pieces of at most ``chunk`` bytes, with the same checks and
    errors as they are read (a streaming reader holds one piece at a time)."""
    spath = os.fspath(path)
    n = 0
    try:
        with open(spath, "rb") as fh:
            gz = fh.read(2) == b"\x1f\x8b"
            fh.seek(0)
            src = gzip.GzipFile(fileobj=fh) if gz else fh
            with src:
                while True:
                    piece = src.read(chunk)
                    if not piece:
                        break
                    n += len(piece)
                    if n > limit:
                        raise ResourceLimitError(spath, f"more than {limit} bytes of {what}"
                                                        f"{' when decompressed' if gz else ''} (the cap)")
                    if gz and n > RATIO_FLOOR and n > MAX_GZIP_RATIO * fh.tell():
                        raise ResourceLimitError(spath, f"{what} inflates more than {MAX_GZIP_RATIO}x "
                                                        f"({n} bytes from {fh.tell()}): padding or "
                                                        "a gzip bomb, not data; refused")
                    yield piece
    except FileNotFoundError:
        raise InputError(spath, "no such file") from None
    except IsADirectoryError:
        raise InputError(spath, f"is a directory, not a {what} file") from None
    except MemoryError:
        raise ResourceLimitError(spath, f"{what} does not fit in memory (read {n} bytes)") from None
    except (EOFError, zlib.error, gzip.BadGzipFile) as e:
        raise InputError(spath, f"cannot read (bad gzip?): {e}") from None
    except OSError as e:
        raise InputError(spath, f"cannot read: {e.strerror or e}") from None


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


TEXT_PIECE = 1 << 20  # bytes of a text format parsed at once (OBJ, ASCII PLY)


def _continued(data: bytes, i: int) -> bool:
    """Is the line end at ``i`` continued by a backslash?"""
    return data[i - 1:i] == b"\\" or data[max(0, i - 2):i] == b"\\\r"


def text_pieces(data: bytes, size: int | None = None, continuations: bool = False):
    """``data`` in pieces of about ``size`` bytes (``TEXT_PIECE``), each ending at a line end
    (with ``continuations``, one no backslash continues): a text reader that converts each
    piece to arrays before the next keeps its temporaries bounded and refuses junk early."""
    size = size or TEXT_PIECE
    start, n = 0, len(data)
    while start < n:
        cut = -1
        if start + size < n:
            cut = data.rfind(b"\n", start, start + size)
            while continuations and cut > start and _continued(data, cut):
                cut = data.rfind(b"\n", start, cut)
            if cut <= start:  # no usable line end in the window: the next one after it
                cut = data.find(b"\n", start + size)
                while continuations and cut != -1 and _continued(data, cut):
                    cut = data.find(b"\n", cut + 1)
        end = n if cut == -1 else cut + 1
        yield data[start:end]
        start = end


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
