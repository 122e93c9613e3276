"""The packed container shared by scene files and navmesh files (spec: docs/FORMAT.md).

A file is: fixed 32-byte preamble, a UTF-8 JSON header, then sections. Each section is one
n-dimensional array (dtype + shape in the header), stored raw or zstd-compressed, optionally
after a lossless byte filter (delta, shuffle) that helps quantized vertex data compress.

Every size and offset read from a file is checked against the caps below and the file length
before anything is allocated or decompressed; each failure is a CorruptFileError that names
the file and, where it applies, the section. The caps here only bound what any kind could
hold; a kind's reader tightens them from its own header (``check_bounds``, docs/FORMAT.md 5.5).
Decompression never outgrows the table's ``raw_length`` (a zstd frame's own content size is
checked first), and whole-file checks (``verify``, ``check_checksums``) stream 4 MiB at a time,
so their memory is bounded whatever a file declares. Section checksums are CRC-32 of the stored
bytes (why, and figures: docs/DECISIONS.md).
"""
from __future__ import annotations

import ctypes
import errno
import glob
import hashlib
import json
import os
import re
import struct
import tempfile
import threading
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np

from .errors import (BpsError, ConfigError, CorruptFileError, FormatVersionError, InputError,
                     MissingSectionError, OutputExistsError, OutputWriteError, ResourceLimitError, is_int)
from .hashing import sha256_file
from .json_input import parse_json

MAGIC = b"\x89BPS\r\n\x1a\n"
CONTAINER_VERSION = 1
PREAMBLE = struct.Struct("<8sI4sQI")  # magic, version, kind, header_len, reserved
assert PREAMBLE.size == 28
RESERVED_OFFSET = struct.calcsize(PREAMBLE.format[:-1])  # the reserved field: the preamble's last
assert RESERVED_OFFSET == 24
PREAMBLE_SIZE = 32  # padded
ALIGN = 256  # section offsets: enough for any device buffer / SIMD load

# Caps checked before allocating anything read from a file.
MAX_HEADER_BYTES = 64 << 20
MAX_SECTIONS = 4096
MAX_SECTION_RAW_BYTES = 16 << 30
MAX_TOTAL_RAW_BYTES = 64 << 30
MAX_NDIM = 8
STREAM_CHUNK = 4 << 20  # checksum / deep-verify reads: memory stays bounded whatever a file declares

DTYPES = {  # the only dtypes a file may name (little-endian)
    "u1": np.uint8, "i1": np.int8, "u2": np.uint16, "i2": np.int16,
    "u4": np.uint32, "i4": np.int32, "u8": np.uint64, "i8": np.int64,
    "f2": np.float16, "f4": np.float32, "f8": np.float64,
}
_DTYPE_NAME = {np.dtype(v): k for k, v in DTYPES.items()}
CODECS = ("raw", "zstd")
FILTERS = ("none", "shuffle", "delta+shuffle")
_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}$")
KIND_RE = re.compile(r"^[A-Z0-9]{4}$")

_tls = threading.local()  # one zstd (de)compressor per thread: a shared one corrupted data here


def _zstd():
    try:
        import zstandard
    except ImportError as e:  # pragma: no cover - a core dependency
        raise InputError(None, "zstd support needs: pip install zstandard") from e
    return zstandard


def _decompressor():
    d = getattr(_tls, "dctx", None)
    if d is None:
        d = _tls.dctx = _zstd().ZstdDecompressor()
    return d


# ---------------------------------------------------------------------------------- filters

def _apply_filter(arr: np.ndarray, filt: str) -> bytes:
    a = np.ascontiguousarray(arr)
    if filt == "none":
        return a.tobytes()
    if filt == "delta+shuffle":
        if a.dtype.kind not in "ui" or a.ndim == 0:
            raise ConfigError(None, f"delta filter needs an integer array, not {a.dtype}")
        # wrap-around delta along axis 0 in the unsigned view: exactly invertible
        u = a.view(a.dtype.newbyteorder("<").str.replace("i", "u"))
        d = np.empty_like(u)
        d[:1] = u[:1]
        np.subtract(u[1:], u[:-1], out=d[1:])
        a = d
    if filt in ("shuffle", "delta+shuffle"):
        item = a.dtype.itemsize
        return a.reshape(-1).view(np.uint8).reshape(-1, item).T.tobytes()
    raise ConfigError(None, f"unknown section filter {filt!r}")


def _row_items(shape: tuple) -> int:
    """Elements per row along axis 0 (the delta filter's stride); 1 for 0- and 1-d arrays."""
    row = 1
    for d in shape[1:]:
        row *= d
    return max(row, 1)


_UNFILTER_ARGS = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                  ctypes.c_int64, ctypes.c_int32]
_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def _native_unfilter(dequantize: bool = False):
    """The C pass of bps_assets/native/_unfilter.c (None when not built: the numpy path runs),
    looked up once per process (``native.function`` keeps it). Tests set ``NATIVE_UNFILTER =
    False`` to compare the two paths."""
    if not NATIVE_UNFILTER:
        return None
    from .native import function

    if dequantize:
        return function("bps_assets.native._unfilter", "bps_unfilter_dequant",
                        _UNFILTER_ARGS + [ctypes.c_void_p, ctypes.c_void_p])
    return function("bps_assets.native._unfilter", "bps_unfilter", _UNFILTER_ARGS + [ctypes.c_int64])


NATIVE_UNFILTER = True
_crc_native = None  # bps_crc32 once checked (False: not there)


def _crc32(data: bytes, crc: int = 0) -> int:
    """zlib.crc32(data, crc): the native folding CRC where the CPU has it (2.3x zlib's speed
    here); ``crc`` the CRC of the bytes before ``data`` (a running CRC over pieces)."""
    global _crc_native
    if _crc_native is None:
        from .native import function
        ok = function("bps_assets.native._unfilter", "bps_crc32_available", [])
        _crc_native = ok is not None and ok() == 1 and function(
            "bps_assets.native._unfilter", "bps_crc32", [ctypes.c_uint32, ctypes.c_char_p, ctypes.c_int64],
            ctypes.c_uint32)
    if _crc_native and NATIVE_UNFILTER:
        return _crc_native(crc, data, len(data))
    return zlib.crc32(data, crc)


def _any_at_least(a: np.ndarray, below: int) -> bool:
    """Whether some element of ``a``, read as unsigned, is >= ``below``."""
    return bool(a.size) and int(a.view(_UINT[a.dtype.itemsize]).max()) >= below


def _undo_filter(buf: bytes | memoryview, filt: str, dtype: np.dtype, shape: tuple,
                 below: int | None = None) -> np.ndarray:
    """The array a filtered section's bytes hold. ``below``: ValueError when some element, read
    as unsigned, is >= below (checked in the native pass while each block is in cache)."""
    if filt == "none":
        a = np.frombuffer(buf, dtype=dtype).reshape(shape)
        if below is not None and _any_at_least(a, below):
            raise _OutOfRange(a)
        return a
    item = dtype.itemsize
    b = np.frombuffer(buf, dtype=np.uint8)
    native = _native_unfilter()
    if native is not None:  # unshuffle + delta in one pass, block by block
        out = np.empty(shape, dtype)
        rc = native(b.ctypes.data, b.size, out.ctypes.data, out.size, item, _row_items(shape),
                    int(filt == "delta+shuffle"), -1 if below is None else min(below, 2**63 - 1))
        if rc == -2:
            raise _OutOfRange(out)
        if rc != 0:
            raise _Undecodable(f"{b.size} filtered bytes do not hold {dtype}{list(shape)}")
        return out
    n = b.size // item
    # one strided write per byte plane: faster than copying the (item, n) transpose (figure:
    # docs/DECISIONS.md)
    out = np.empty((n, item), np.uint8)
    planes = b.reshape(item, n)
    for j in range(item):
        out[:, j] = planes[j]
    a = out.view(dtype).reshape(shape)
    if filt == "delta+shuffle" and a.ndim:
        u = a.view(dtype.str.replace("i", "u"))
        np.cumsum(u, axis=0, dtype=u.dtype, out=u)
    if below is not None and _any_at_least(a, below):
        raise _OutOfRange(a)
    return a


class _Undecodable(ValueError):
    """Raised by the native unfilter when the bytes do not hold the shape (``Container._unfilter``
    turns it, as any ValueError of the decode, into a CorruptFileError naming the section)."""


class _OutOfRange(Exception):
    """Raised by _undo_filter with the decoded array when a value is out of range."""

    def __init__(self, array: np.ndarray):
        super().__init__()
        self.array = array


def _undo_filter_dequantize(buf, filt: str, dtype: np.dtype, shape: tuple, grid) -> np.ndarray:
    """float32 ``origin + code * step`` per column (``grid``: a transforms.quantize.Grid) of a
    filtered section of unsigned codes: the values ``quantize.dequantize`` returns, bit for bit."""
    native = _native_unfilter(dequantize=True)
    row = _row_items(shape)
    if native is None or filt == "none" or len(shape) != 2 or dtype.kind != "u" or dtype.itemsize not in (2, 4) \
            or len(grid.step) != row or len(grid.origin) != row:
        from .transforms.quantize import dequantize
        return dequantize(_undo_filter(buf, filt, dtype, shape), grid)
    b = np.frombuffer(buf, dtype=np.uint8)
    out = np.empty(shape, np.float32)
    step, origin = np.asarray(grid.step, np.float64), np.asarray(grid.origin, np.float64)
    if native(b.ctypes.data, b.size, out.ctypes.data, out.size, dtype.itemsize, row,
              int(filt == "delta+shuffle"), step.ctypes.data, origin.ctypes.data) != 0:
        raise _Undecodable(f"{b.size} filtered bytes do not hold {dtype}{list(shape)}")
    return out


# ---------------------------------------------------------------------------------- writing

@dataclass(frozen=True)
class SectionSpec:
    """How one array is stored. ``filter`` applies before the codec."""

    codec: str = "zstd"
    filter: str = "none"
    level: int = 9


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def _write_error(path, e: OSError, doing: str) -> OutputWriteError:
    cause = e.strerror or str(e)
    hint = {errno.EFBIG: " (a file size limit: ulimit -f?)", errno.ENOSPC: "", errno.EROFS: "",
            errno.EACCES: " (no write permission)"}.get(e.errno, "")
    return OutputWriteError(path, f"cannot {doing}: {cause}{hint}", errno=e.errno)


def make_dirs(folder: str | os.PathLike) -> Path:
    """``mkdir -p`` whose failure is an OutputWriteError naming the folder and the cause."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        # a file where a folder must go (EEXIST: the folder itself; ENOTDIR: one above it): name it
        blocker = next((p for p in (folder, *folder.parents) if p.is_file()), None)
        if e.errno in (errno.EEXIST, errno.ENOTDIR) and blocker is not None:
            who = "it" if blocker == folder else str(blocker)
            raise OutputWriteError(folder, f"cannot create the folder: {who} is a file, not a folder",
                                   errno=e.errno) from None
        raise _write_error(folder, e, "create the folder") from None
    return folder


# flock's errors on a file system without it (Lustre -o noflock, NFSv3 without lockd, some FUSE):
# writers go on unlocked and the sweep tells stale temps there by age, as on Windows
NO_FLOCK = (errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL)


def _lock_temp(fd: int) -> None:
    # held while the temp file is written and until it is renamed (the OS drops it when the
    # writer dies, kill -9 included), so remove_stale_temps can tell a dead run's temp from a
    # live one's
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: stale temps are told by age
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError as e:
        if e.errno not in NO_FLOCK:
            raise


def _locked_temp(folder: Path, name: str) -> tuple[int, str]:
    """A new temp file beside ``name`` in ``folder``, locked: (fd, path). A sweep by another
    writer (``remove_stale_temps``) may take the lock of a temp in the instant between its
    creation and our lock and remove it; we then hold the lock of a file no longer there and
    start over with a new one."""
    for _ in range(100):
        fd, tmp = tempfile.mkstemp(prefix=temp_prefix(name), suffix=".tmp", dir=folder)
        try:
            _lock_temp(fd)
            if os.path.samestat(os.stat(tmp), os.fstat(fd)):
                return fd, tmp
        except FileNotFoundError:   # swept before we locked it: start over with a new temp
            pass
        except BaseException:
            os.close(fd)
            try:   # ours, not yet swept: no temp is left behind by a failed lock
                os.unlink(tmp)
            except OSError:   # swept meanwhile: nothing left to remove
                pass
            raise
        os.close(fd)
    raise OSError(errno.EAGAIN, "every temp file was removed by another writer's sweep")


NAME_MAX = 255  # bytes of one file name on Linux, macOS and Windows file systems


def check_name_length(path: str | os.PathLike) -> None:
    """OutputWriteError when the file name of ``path`` is longer than file systems allow (the
    OS's ENAMETOOLONG, said before any work and with the length)."""
    name = Path(path).name
    n = len(os.fsencode(name))
    if n > NAME_MAX:
        raise OutputWriteError(path, f"the file name is {n} bytes long, over the {NAME_MAX}-byte limit "
                                     "of file systems: shorten the input's or the output's name")


def temp_prefix(name: str) -> str:
    """``.NAME.`` (the temp files of ``atomic_write`` beside NAME); a name too long to take the
    random part and ``.tmp`` as well is cut, with a hash of the whole name kept."""
    if len(os.fsencode(name)) <= NAME_MAX - 32:
        return f".{name}."
    digest = hashlib.sha1(os.fsencode(name)).hexdigest()[:12]
    return f".{os.fsencode(name)[:160].decode('utf-8', 'ignore')}~{digest}."


def remove_stale_temps(path: str | os.PathLike, min_age_s: float = 600.0) -> list[Path]:
    """Remove ``.NAME.*.tmp`` files beside ``path`` left by killed writers; returns them.

    A temp file whose writer is alive is locked (``atomic_write``) and kept. Without flock
    (Windows, or a file system whose flock fails with one of ``NO_FLOCK``) only temps older than
    ``min_age_s`` are removed. Errors are ignored: this is cleanup, the write that follows
    reports any real problem."""
    path = Path(path)
    removed = []
    try:
        cands = list(path.parent.glob(f"{glob.escape(temp_prefix(path.name))}*.tmp"))
    except OSError:
        return removed
    try:
        import fcntl
    except ImportError:  # pragma: no cover
        fcntl = None
    for t in cands:
        try:
            if fcntl is not None:
                with open(t, "rb") as f:
                    try:
                        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except OSError as e:
                        if e.errno not in NO_FLOCK:
                            continue  # a live writer holds it
                    else:
                        t.unlink()
                        removed.append(t)
                        continue
            if time.time() - t.stat().st_mtime >= min_age_s:   # no flock here: by age
                t.unlink()
                removed.append(t)
        except OSError:
            continue
    return removed


def current_umask() -> int:
    """The process's umask, read without changing it (Linux: /proc/self/status); elsewhere set
    and restored at once (os.umask can only be read by setting it)."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# errnos of a file system without hard links (vfat, some FUSE and network mounts)
_NO_HARDLINK = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK, errno.ENOSYS, errno.EXDEV}
_RENAME_NOREPLACE = 1   # linux/fs.h


def _rename_noreplace(tmp: str, path: Path) -> bool | None:
    """renameat2(RENAME_NOREPLACE) (Linux 3.15+, glibc 2.28+): True when renamed, False when
    ``path`` exists, None where the call or the file system's support for it is missing."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return None
    at_fdcwd = -100
    if fn(at_fdcwd, os.fsencode(tmp), at_fdcwd, os.fsencode(path), _RENAME_NOREPLACE) == 0:
        return True
    err = ctypes.get_errno()
    if err == errno.EEXIST:
        return False
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return None
    raise OSError(err, os.strerror(err), str(path))


def _publish_new(tmp: str, path: Path) -> bool:
    """Give the finished temp ``tmp`` the new name ``path``, never replacing a file: False (the
    temp left for the caller to remove) when ``path`` exists. A hard link fails atomically on an
    existing name; without hard links, renameat2(RENAME_NOREPLACE); without either, a last
    check then a rename (only there can a writer arriving in between still be replaced)."""
    try:
        os.link(tmp, path)
    except FileExistsError:
        return False
    except OSError as e:
        if e.errno not in _NO_HARDLINK:
            raise
        done = _rename_noreplace(tmp, path)
        if done is not None:
            return done
        if os.path.lexists(path):
            return False
        os.replace(tmp, path)
        return True
    try:  # published: a temp that will not go is only litter (remove_stale_temps sweeps it)
        os.unlink(tmp)
    except OSError:
        pass
    return True


def atomic_write(path: str | os.PathLike, write_fn, overwrite: bool = False) -> None:
    """Run ``write_fn(fileobj)`` on a temp file beside ``path``, fsync, then rename over it.

    With ``overwrite=False`` an existing ``path`` is an OutputExistsError, so nothing the user
    had is replaced silently: checked first, and again atomically when the finished temp gets
    its name (``_publish_new``), so of two writers racing for one new path one gets the error.
    A crash leaves at most a ``.tmp`` file, never a half-written path (``remove_stale_temps``
    removes it later). An OS failure (no permission, read-only or full disk, file size limit)
    is an OutputWriteError naming the file or folder and the cause, and leaves nothing behind.
    """
    path = Path(path)
    check_name_length(path)
    if os.path.lexists(path) and not overwrite:  # lexists: a dangling symlink is a name taken too
        raise OutputExistsError(path, "already exists (pass overwrite / --overwrite to replace it)")
    make_dirs(path.parent)
    try:
        fd, tmp = _locked_temp(path.parent, path.name)
    except OSError as e:
        raise _write_error(path.parent, e, f"create a file in the folder (for {path.name})") from None
    try:
        # mkstemp makes 0600 files; the output gets the mode a plain open() would give
        os.fchmod(fd, 0o666 & ~current_umask())
        # the descriptor (and its lock) stays open until the rename is done: closing it first
        # would let another writer's sweep remove the finished temp before the rename
        with os.fdopen(fd, "wb", closefd=False) as f:
            write_fn(f)
            f.flush()
            os.fsync(f.fileno())
        if overwrite:
            os.replace(tmp, path)
        elif not _publish_new(tmp, path):
            raise OutputExistsError(path, "already exists: another writer made it while this one was writing "
                                          "(pass overwrite / --overwrite to replace it)")
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:  # gone, or cannot go: the error that matters is ``e``
            pass
        if isinstance(e, OSError):
            raise _write_error(path, e, "write") from None
        raise
    finally:
        os.close(fd)


def source_record(source: str | os.PathLike) -> dict:
    """What a packed file records of the file it was made from, for ``refuse_other_source``:
    ``path``, its resolved absolute path (the same file whatever folder the command ran in), and
    ``sha256``, its bytes' digest."""
    return {"path": os.path.realpath(source), "sha256": sha256_file(source)[0]}


def refuse_other_source(path: str | os.PathLike, source: str | os.PathLike) -> None:
    """Before replacing ``path`` (``--overwrite``): an OutputExistsError naming both sources when
    the packed file there was made from another source, so one scan's output is never replaced
    silently by another's of the same scene name (Replica's ``apt_0/mesh.ply`` and
    ``room_0/mesh.ply``; ``scan.v1.glb`` / ``scan.v2.glb``). Its header's ``source_file`` (a
    navmesh's), else its ``source`` (an object with ``path`` and ``sha256``, or a path), is the
    same source when the resolved paths match (the file re-converted after it changed) or
    ``source``'s sha256 is the recorded one (a moved folder, a renamed copy). A relative path
    (older converters) says nothing of its folder, so with a sha256 recorded the sha256 alone
    decides (that file changed is refused: the safe side); a bare file name without sha256 (an
    older navmesh's ``source``) is the same when the names are.
    The refusal names ``source`` as typed and, when they differ, its resolved path.
    A path that is no packed file, or records no source, is left to the caller's overwrite."""
    if not os.path.isfile(path):
        return
    try:
        header = read_header(path)[0]
    except (BpsError, OSError):
        return
    rec = header.get("source_file") or header.get("source")
    rec, sha = (rec.get("path"), rec.get("sha256")) if isinstance(rec, Mapping) else (rec, None)
    if not isinstance(rec, str) or not rec:
        return
    if (os.path.isabs(rec) or not isinstance(sha, str)) and os.path.realpath(rec) == os.path.realpath(source):
        return
    if sha is None and os.path.basename(rec) == rec and os.path.basename(source) == rec:
        return   # an older navmesh records its source's file name alone: all there is to compare
    if isinstance(sha, str) and os.path.isfile(source):
        if sha256_file(source)[0] == sha:
            return
    typed, resolved = os.fspath(source), os.path.realpath(source)
    if resolved != typed:   # a symlink re-pointed, a relative path: say which file it is now
        typed = f"{typed} (which resolves to {resolved})"
    raise OutputExistsError(path, f"was made from {rec}, not from {typed} (another source with the "
                                  "same scene name; --overwrite replaces only the output of the same file or of "
                                  "the same bytes): write to another folder (-o), or delete this file first")


def write_container(path: str | os.PathLike, kind: str, header: Mapping[str, Any],
                    arrays: Mapping[str, np.ndarray],
                    specs: Mapping[str, SectionSpec] | None = None,
                    overwrite: bool = False) -> int:
    """Write ``arrays`` as sections of a ``kind`` file (4 upper-case chars). Returns bytes written.

    ``header`` is any JSON-serializable mapping; the key ``sections`` is reserved.
    """
    if not KIND_RE.match(kind):
        raise ConfigError(path, f"container kind must be 4 upper-case characters, got {kind!r}")
    if "sections" in header:
        raise ConfigError(path, "header key 'sections' is reserved for the section table")
    specs = dict(specs or {})
    cctx_cache: dict[int, Any] = {}
    blobs: list[bytes] = []
    table: list[dict] = []
    for name, arr in arrays.items():
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise ConfigError(path, f"bad section name {name!r} (want [A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})")
        arr = np.asarray(arr)
        dt = arr.dtype.newbyteorder("<") if arr.dtype.byteorder == ">" else arr.dtype
        if np.dtype(dt) not in _DTYPE_NAME:
            raise ConfigError(path, f"section {name!r}: dtype {arr.dtype} is not storable "
                                    f"(one of {' '.join(DTYPES)})")
        arr = arr.astype(dt, copy=False)
        spec = specs.get(name, SectionSpec())
        if spec.filter not in FILTERS or (spec.filter == "delta+shuffle" and
                                          (arr.dtype.kind not in "ui" or arr.ndim == 0)):
            raise ConfigError(path, f"section {name!r}: filter {spec.filter!r} does not apply to a "
                                    f"{arr.dtype}{list(arr.shape)} array (filters: {', '.join(FILTERS)})")
        if spec.codec not in CODECS:
            raise ConfigError(path, f"section {name!r}: unknown codec {spec.codec!r} (one of {', '.join(CODECS)})")
        raw = _apply_filter(arr, spec.filter)
        if spec.codec == "zstd":
            if spec.level not in cctx_cache:
                cctx_cache[spec.level] = _zstd().ZstdCompressor(level=spec.level)
            stored = cctx_cache[spec.level].compress(raw)
        else:  # "raw", checked above
            stored = raw
        blobs.append(stored)
        table.append({
            "name": name, "dtype": _DTYPE_NAME[np.dtype(dt)], "shape": list(arr.shape),
            "codec": spec.codec, "filter": spec.filter,
            "offset": 0, "stored_length": len(stored), "raw_length": len(raw),
            "crc32": _crc32(stored),
        })

    # offsets depend on the header length, which depends on the offsets' digits: iterate.
    full = dict(header)
    hdr = b""
    for _ in range(4):
        pos = _align(PREAMBLE_SIZE + len(hdr))
        for ent, blob in zip(table, blobs):
            ent["offset"] = pos
            pos = _align(pos + len(blob))
        full["sections"] = table
        new = json.dumps(full, separators=(",", ":"), sort_keys=False).encode()
        stable = len(new) == len(hdr)
        hdr = new
        if stable:
            break
    hdr_padded = hdr + b" " * (_align(PREAMBLE_SIZE + len(hdr)) - PREAMBLE_SIZE - len(hdr))
    assert table == [] or table[0]["offset"] == PREAMBLE_SIZE + len(hdr_padded)

    def _write(f):
        f.write(PREAMBLE.pack(MAGIC, CONTAINER_VERSION, kind.encode(), len(hdr), 0).ljust(PREAMBLE_SIZE, b"\0"))
        f.write(hdr_padded)
        pos = PREAMBLE_SIZE + len(hdr_padded)
        for ent, blob in zip(table, blobs):
            assert ent["offset"] == pos
            f.write(blob)
            pad = _align(pos + len(blob)) - pos - len(blob)
            f.write(b"\0" * pad)
            pos += len(blob) + pad

    atomic_write(path, _write, overwrite=overwrite)
    return os.path.getsize(path)


# ---------------------------------------------------------------------------------- reading

@dataclass(frozen=True)
class Section:
    """One section's table entry as read from a container: its array's dtype and shape, codec
    and filter, and where its bytes lie (``offset``, ``stored_length``; ``raw_length`` decoded)."""
    name: str
    dtype: np.dtype
    shape: tuple
    codec: str
    filter: str
    offset: int
    stored_length: int
    raw_length: int
    crc32: int


def _corrupt(path, msg, section=None):
    return CorruptFileError(path, msg, section=section)


def _check_section(path, ent: Any, file_len: int) -> Section:
    if not isinstance(ent, dict):
        raise _corrupt(path, "section table entry is not an object")
    name = ent.get("name")
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise _corrupt(path, f"bad section name {name!r}")

    def field(key, typ):
        v = ent.get(key)
        if not isinstance(v, typ) or isinstance(v, bool):
            raise _corrupt(path, f"field {key!r} missing or not {typ.__name__}", section=name)
        return v

    dtype = field("dtype", str)
    if dtype not in DTYPES:
        raise _corrupt(path, f"unsupported dtype {dtype!r}", section=name)
    shape = field("shape", list)
    if len(shape) > MAX_NDIM or not all(is_int(s) and 0 <= s for s in shape):
        raise _corrupt(path, f"bad shape {shape!r}", section=name)
    codec, filt = field("codec", str), field("filter", str)
    if codec not in CODECS:
        raise _corrupt(path, f"unknown codec {codec!r}", section=name)
    if filt not in FILTERS:
        raise _corrupt(path, f"unknown filter {filt!r}", section=name)
    offset, stored, raw, crc = (field(k, int) for k in ("offset", "stored_length", "raw_length", "crc32"))
    dt = np.dtype(DTYPES[dtype])
    if filt == "delta+shuffle" and dt.kind not in "iu":   # FORMAT.md 2: integer dtypes only
        raise _corrupt(path, f"filter 'delta+shuffle' on dtype {dtype} (integer dtypes only)", section=name)
    n = 1
    for s in shape:
        n *= s
        if n * dt.itemsize > MAX_SECTION_RAW_BYTES:
            raise _corrupt(path, f"declared size exceeds the cap of {MAX_SECTION_RAW_BYTES} bytes", section=name)
    if raw != n * dt.itemsize:
        raise _corrupt(path, f"raw_length {raw} does not match dtype {dtype} x shape {shape}", section=name)
    if offset < PREAMBLE_SIZE or stored < 0 or offset + stored > file_len:
        raise _corrupt(path, f"offset {offset} + length {stored} lies outside the file ({file_len} bytes)"
                       " (truncated?)", section=name)
    if offset % ALIGN:   # FORMAT.md 2: a writer places every section at a multiple of ALIGN
        raise _corrupt(path, f"offset {offset} is not a multiple of {ALIGN}", section=name)
    if codec == "raw" and stored != raw:
        raise _corrupt(path, "raw section whose stored and raw lengths differ", section=name)
    if not 0 <= crc < 2**32:
        raise _corrupt(path, "bad crc32 value", section=name)
    return Section(name, dt, tuple(shape), codec, filt, offset, stored, raw, crc)


class Container:
    """A packed file opened for reading. Only the preamble and header are read on open.

    ``kind`` may be given to insist on a file kind (``"SCEN"``, ``"NAVM"``).
    """

    def __init__(self, path: str | os.PathLike, kind: str | None = None):
        self.path = os.fspath(path)
        try:
            self._f = open(self.path, "rb")
        except FileNotFoundError:
            raise InputError(self.path, "no such file") from None
        except IsADirectoryError:
            raise InputError(self.path, "is a directory, not a packed file") from None
        except OSError as e:
            raise InputError(self.path, f"cannot open: {e.strerror}") from None
        self._lock = threading.Lock()
        try:
            self._open(kind)
        except BaseException:
            self._f.close()
            raise

    def _open(self, want_kind):
        path = self.path
        self.file_length = os.fstat(self._f.fileno()).st_size
        pre = self._f.read(PREAMBLE_SIZE)
        if len(pre) < PREAMBLE_SIZE or pre[:8] != MAGIC:
            raise _corrupt(path, "not a bps packed file (bad magic)")
        magic, version, kind, hlen, _ = PREAMBLE.unpack(pre[:PREAMBLE.size])
        if version != CONTAINER_VERSION:
            raise FormatVersionError(path, f"container version {version} is not supported "
                                           f"(this build reads {CONTAINER_VERSION})")
        try:
            self.kind = kind.decode("ascii")
        except UnicodeDecodeError:
            raise _corrupt(path, "bad kind field") from None
        if not KIND_RE.match(self.kind):
            raise _corrupt(path, f"bad kind {self.kind!r}")
        if want_kind is not None and self.kind != want_kind:
            raise _corrupt(path, f"is a {self.kind!r} file, expected {want_kind!r}")
        if hlen > MAX_HEADER_BYTES or PREAMBLE_SIZE + hlen > self.file_length:
            raise _corrupt(path, f"header length {hlen} exceeds the cap or the file (truncated?)")
        self.header_length = hlen
        raw = self._f.read(hlen)
        header = parse_json(raw, path, prefix="header is not valid JSON", error=_corrupt, encoding="utf-8")
        if not isinstance(header, dict) or not isinstance(header.get("sections"), list):
            raise _corrupt(path, "header has no section table")
        tab = header.pop("sections")
        if len(tab) > MAX_SECTIONS:
            raise _corrupt(path, f"{len(tab)} sections exceed the cap of {MAX_SECTIONS}")
        secs = [_check_section(path, e, self.file_length) for e in tab]
        names = [s.name for s in secs]
        if len(set(names)) != len(names):
            raise _corrupt(path, "duplicate section names")
        if sum(s.raw_length for s in secs) > MAX_TOTAL_RAW_BYTES:
            raise _corrupt(path, "total declared size exceeds the cap")
        spans = sorted((s.offset, s.offset + s.stored_length, s.name) for s in secs)
        for (a0, a1, an), (b0, b1, bn) in zip(spans, spans[1:]):
            if b0 < a1:
                raise _corrupt(path, f"overlaps section {an!r}", section=bn)
        if spans and spans[0][0] < PREAMBLE_SIZE + hlen:
            raise _corrupt(path, "overlaps the header", section=spans[0][2])
        self.header: dict = header
        self.sections: dict[str, Section] = {s.name: s for s in secs}

    # -- context manager
    def close(self):
        """Close the file (also done on leaving a ``with`` block)."""
        self._f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __contains__(self, name):
        return name in self.sections

    def _stored(self, s: Section) -> bytes:
        try:
            data = os.pread(self._f.fileno(), s.stored_length, s.offset)
        except MemoryError:
            raise ResourceLimitError(self.path, f"section {s.name!r}: {s.stored_length} stored bytes "
                                                "do not fit in memory") from None
        if len(data) != s.stored_length:
            raise _corrupt(self.path, "file ended inside the section (truncated?)", section=s.name)
        return data

    def _stored_chunks(self, s: Section):
        """The stored bytes in pieces of at most STREAM_CHUNK (positional reads: thread-safe)."""
        fd, pos, end = self._f.fileno(), s.offset, s.offset + s.stored_length
        while pos < end:
            data = os.pread(fd, min(STREAM_CHUNK, end - pos), pos)
            if not data:
                raise _corrupt(self.path, "file ended inside the section (truncated?)", section=s.name)
            pos += len(data)
            yield data

    def section(self, name: str) -> Section:
        """The table entry of ``name``; MissingSectionError when the file has none."""
        s = self.sections.get(name)
        if s is None:
            raise MissingSectionError(self.path, name, self.sections)
        return s

    def check_bounds(self, bounds: Mapping[str, int], default: int | None = None) -> None:
        """Refuse any section whose declared ``raw_length`` exceeds its bound (bytes), before
        anything is read. ``bounds`` come from the file kind's own header counts (what the
        content can need); sections not in ``bounds`` get ``default`` (None: unbounded)."""
        for name, s in self.sections.items():
            cap = bounds.get(name, default)
            if cap is not None and s.raw_length > cap:
                raise _corrupt(self.path, f"declares {s.raw_length} bytes, more than the {cap} its "
                                          "header's counts allow", section=name)

    def check_checksums(self, names: Iterable[str] | None = None) -> None:
        """CRC-32 of every (or the named) section's stored bytes, read in bounded pieces; nothing
        is decompressed. The cheap integrity check of a whole file (~ disk speed)."""
        for n in (self.sections if names is None else names):
            s = self.section(n)
            crc = 0
            for piece in self._stored_chunks(s):
                crc = _crc32(piece, crc)
            if crc != s.crc32:
                raise _corrupt(self.path, "checksum mismatch (corrupt file)", section=s.name)

    def check_padding(self) -> None:
        """The bytes outside the header and the sections are as this writer leaves them (docs/
        FORMAT.md 1): preamble bytes 24-31 zero, spaces after the header, zeros between and
        after the sections up to the next multiple of ALIGN, where the file ends; every such gap
        under ALIGN bytes. No section CRC covers them, so a damaged one there is found only by
        this check or a full hash; reads under ALIGN bytes per section."""
        fd = self._f.fileno()
        hlen = self.header_length
        spans = sorted((s.offset, s.offset + s.stored_length) for s in self.sections.values())
        gaps = [(RESERVED_OFFSET, PREAMBLE_SIZE, b"\0"), (PREAMBLE_SIZE + hlen, spans[0][0] if spans else
                                             _align(PREAMBLE_SIZE + hlen), b" ")]
        ends = [b for _, b in spans]
        gaps += [(a1, b0, b"\0") for a1, (b0, _) in zip(ends, spans[1:])]
        if spans:
            gaps.append((ends[-1], _align(ends[-1]), b"\0"))
        end = gaps[-1][1]
        if self.file_length != end:
            raise _corrupt(self.path, f"{self.file_length} bytes long, its layout ends at {end}")
        for a, b, fill in gaps:
            if b - a >= ALIGN:   # the writer packs tightly (FORMAT.md 1): never read a crafted huge gap
                raise _corrupt(self.path, f"a gap of {b - a} bytes in bytes {a}-{b - 1} (outside every "
                                          f"section; the layout leaves fewer than {ALIGN})")
            if b > a and os.pread(fd, b - a, a) != fill * (b - a):
                raise _corrupt(self.path, f"damaged padding in bytes {a}-{b - 1} (outside every section)")

    def _check_frame_size(self, s: Section, data) -> None:
        # zstandard's one-shot decompress trusts the frame's own content size over
        # max_output_size: a frame claiming 4 GiB would be allocated and inflated in full.
        fcs = _zstd().frame_content_size(data)
        if fcs != -1 and fcs != s.raw_length:
            raise _corrupt(self.path, f"zstd frame declares {fcs} bytes, the table {s.raw_length}",
                           section=s.name)

    def read(self, name: str, verify: bool = True, grid=None, below: int | None = None) -> np.ndarray:
        """Return section ``name`` as a numpy array (read-only when it could be zero-copy).
        ``grid`` (a transforms.quantize.Grid, for a 2-d section of unsigned codes): return the
        dequantized float32 values instead, in the same pass as the filter where it can.
        ``below``: every value, read as unsigned (so a negative one too), must be < ``below``
        (an index range check, in the same pass); CorruptFileError naming the section else."""
        s = self.section(name)
        data = self._stored(s)
        if verify and _crc32(data) != s.crc32:
            raise _corrupt(self.path, "checksum mismatch (corrupt file)", section=s.name)
        try:
            return self._unfilter(s, self._decompress(s, data) if s.codec == "zstd" else data, grid, below)
        except MemoryError:
            raise ResourceLimitError(self.path, f"section {s.name!r}: {s.raw_length} bytes do not fit "
                                                "in memory") from None

    def _decompress(self, s: Section, data: bytes) -> bytes:
        """The zstd frame ``data`` decoded (at most ``raw_length`` bytes, CorruptFileError else)."""
        try:
            self._check_frame_size(s, data)
            return _decompressor().decompress(data, max_output_size=s.raw_length)
        except (CorruptFileError, MemoryError):
            raise
        except Exception as e:  # zstandard raises its own ZstdError
            raise _corrupt(self.path, f"zstd decompression failed: {e}", section=s.name) from None

    def _unfilter(self, s: Section, raw, grid, below: int | None = None) -> np.ndarray:
        if len(raw) != s.raw_length:
            raise _corrupt(self.path, f"decompressed to {len(raw)} bytes, expected {s.raw_length}",
                           section=s.name)
        try:
            if grid is not None:
                return _undo_filter_dequantize(raw, s.filter, s.dtype, s.shape, grid)
            return _undo_filter(raw, s.filter, s.dtype, s.shape, below)
        except ValueError as e:  # cannot happen after the length check above; typed anyway
            raise _corrupt(self.path, str(e), section=s.name) from None
        except _OutOfRange as e:
            flat = e.array.reshape(-1)
            bad = int(flat[flat.view(_UINT[flat.dtype.itemsize]) >= below][0])
            raise _corrupt(self.path, f"value {bad} out of range for {below} entries", section=s.name) from None

    def read_many(self, names: Iterable[str] | None = None, verify: bool = True) -> dict[str, np.ndarray]:
        """``{name: array}`` of the sections ``names`` (default: all), each read as ``read`` does."""
        return {n: self.read(n, verify) for n in (self.sections if names is None else names)}

    def verify_section(self, name: str) -> None:
        """CRC-32 and a streamed decompression counting its output: the section decodes to exactly
        ``raw_length`` bytes. Output is pulled STREAM_CHUNK at a time, so memory stays at a few
        MiB whatever the file declares (filters are bijections on any bytes: nothing else can
        fail)."""
        s = self.section(name)
        src = _CrcReader(self, s)
        produced, failure = 0, None
        if s.codec == "zstd":
            try:
                self._check_frame_size(s, os.pread(self._f.fileno(), min(18, s.stored_length), s.offset))
                with _decompressor().stream_reader(src, read_size=STREAM_CHUNK, closefd=False) as r:
                    while produced <= s.raw_length:
                        out = r.read(STREAM_CHUNK)
                        if not out:
                            break
                        produced += len(out)
            except CorruptFileError as e:  # reported after the checksum, which says more
                failure = e.detail.split(": ", 1)[-1]
            except Exception as e:  # ZstdError
                failure = f"zstd decompression failed: {e}"
        src.drain()  # the CRC covers every stored byte, also past a failure
        if src.crc != s.crc32:
            raise _corrupt(self.path, "checksum mismatch (corrupt file)", section=s.name)
        if failure is None and s.codec == "zstd" and produced != s.raw_length:
            failure = (f"decompresses to {'more than ' if produced > s.raw_length else ''}{produced} bytes, "
                       f"expected {s.raw_length}")
        if failure:
            raise _corrupt(self.path, failure, section=s.name)

    def verify(self, deep: bool = False, skip: Iterable[str] = ()) -> None:
        """Structural checks ran on open; ``deep`` also checks every checksum and decompresses
        (streamed, bounded memory). ``skip``: sections a caller has already read and checked."""
        if deep:
            skip = set(skip)
            for n in self.sections:
                if n not in skip:
                    self.verify_section(n)


class _CrcReader:
    """File-like view of one section's stored bytes for zstd's stream reader; keeps a CRC-32."""

    def __init__(self, c: Container, s: Section):
        self._c, self._s, self._pos, self.crc = c, s, 0, 0

    def read(self, n: int = -1) -> bytes:
        left = self._s.stored_length - self._pos
        n = left if n is None or n < 0 else min(n, left)
        if n <= 0:
            return b""
        data = os.pread(self._c._f.fileno(), min(n, STREAM_CHUNK), self._s.offset + self._pos)
        if not data:
            raise _corrupt(self._c.path, "file ended inside the section (truncated?)", section=self._s.name)
        self._pos += len(data)
        self.crc = _crc32(data, self.crc)
        return data

    def drain(self) -> None:
        while self.read(STREAM_CHUNK):
            pass


def read_header(path: str | os.PathLike, kind: str | None = None) -> tuple[dict, dict[str, Section], str]:
    """(header, sections, kind) of a packed file, checked, without reading any section."""
    with Container(path, kind) as c:
        return c.header, c.sections, c.kind
