"""One error hierarchy for bps_assets (and reused by bps_runtime).

Every error names the file it concerns and what is wrong with it, so the CLI can
print it as one line (``str(err)``) and exit non-zero without a traceback.
"""
from __future__ import annotations

import os


class BpsError(Exception):
    """Base class. ``path`` is the file concerned (or None), ``detail`` the problem."""

    exit_code = 2

    def __init__(self, path: str | os.PathLike | None, detail: str):
        self.path = None if path is None else os.fspath(path)
        self.detail = detail
        super().__init__(f"{self.path}: {detail}" if self.path else detail)

    def __reduce__(self):
        # pickled whole (a worker process's error reaches its parent): the subclasses' own
        # __init__ arguments differ, so rebuild from the message and the attributes
        return _rebuild, (type(self), str(self), dict(self.__dict__))


def did_you_mean(name: str, known, n: int = 3, cutoff: float = 0.6, sep: str = " or ") -> str:
    """"did you mean 'a' or 'b'?" for the up to ``n`` close matches of ``name`` among ``known``
    (difflib's, at ``cutoff``; joined by ``sep``); "" when none is close. For error messages."""
    import difflib

    close = difflib.get_close_matches(name, list(known), n=n, cutoff=cutoff)
    return f"did you mean {sep.join(repr(c) for c in close)}?" if close else ""


def is_int(x) -> bool:
    """Whether ``x`` is an int or a numpy integer and not a bool (``True``, ``4.0``, "4" are not):
    the type check of every integer setting before its ConfigError."""
    import numpy as np

    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def is_real(x) -> bool:
    """Whether ``x`` is a real number (an int, a float, a numpy integer or floating scalar: any
    ``numbers.Real``) and not a bool nor a string: the type check of every float setting before its
    ConfigError (finiteness is the caller's: ``math.isfinite``)."""
    import numbers

    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def is_bool(x) -> bool:
    """Whether ``x`` is a bool or numpy's bool (``0``, ``"False"``, None are not): the type check
    of every on / off setting before its ConfigError (a truthy string must not switch it on)."""
    import numpy as np

    return isinstance(x, (bool, np.bool_))


def _rebuild(cls, message: str, state: dict) -> BpsError:
    err = cls.__new__(cls)
    Exception.__init__(err, message)
    err.__dict__.update(state)
    return err


class InputError(BpsError):
    """An input file is missing, unreadable or malformed."""


class UnsupportedFormatError(InputError):
    """The file type (or format version, e.g. glTF 1.0) is not one we read."""


class FileTypeMismatchError(UnsupportedFormatError):
    """The file's content (magic bytes) says one type and its extension another."""


class UnsupportedExtensionError(InputError):
    """A required glTF extension is unknown, or needs an optional package."""


class MissingDependencyError(BpsError):
    """An optional dependency is needed; the message carries the pip command."""

    def __init__(self, path, feature: str, pip_spec: str):
        self.pip_spec = pip_spec
        super().__init__(path, f"{feature} needs an optional package: pip install {pip_spec}")


class CorruptFileError(InputError):
    """A packed file failed a structural, size-cap or checksum check.

    ``section`` names the section when the problem is inside one.
    """

    def __init__(self, path, detail: str, section: str | None = None):
        self.section = section
        if section is not None:
            detail = f"section {section!r}: {detail}"
        super().__init__(path, detail)


class FormatVersionError(CorruptFileError):
    """The packed file has a version this build does not read."""


class OutputExistsError(BpsError):
    """Refusing to overwrite a file the user already has."""


class NavError(BpsError):
    """A navigation query or navmesh build could not be done."""


class DatasetError(BpsError):
    """Unknown dataset / split, or a source tree that does not match its layout."""


class ConfigError(BpsError):
    """Invalid settings (out of range option, wrong action shape/dtype, ...)."""


class EmptySceneError(InputError):
    """A scene with nothing to render or navigate: no triangles left after cleaning, or a
    navmesh without navigable area. The message names the scene and the likely cause."""


class InterpreterExiting(RuntimeError):
    """A thread pool refused new work because the interpreter is exiting (a script ended while
    work was under way): raised at the ``submit`` the pool refused; no fault of any input."""


class InterruptedRun(BpsError):
    """A long run stopped by the user (Ctrl-C); the message says what finished and how to go on."""

    exit_code = 130


class MissingSectionError(InputError):
    """A caller asked a packed file for a section it does not have (not damage: the file may
    simply be of another kind or version). ``section`` names it."""

    def __init__(self, path, section: str, present=()):
        self.section = section
        have = ", ".join(sorted(present)) or "none"
        super().__init__(path, f"has no section {section!r} (it has: {have})")


class ResourceLimitError(InputError):
    """An input declares more data than a cap or the memory available allows; the message names
    the field or section and the size."""


class OutputWriteError(BpsError):
    """An output file or folder could not be written (permission, read-only or full disk,
    file size limit); the message names the file or folder and the cause, ``errno`` the OS
    error's number when there was one."""

    def __init__(self, path, detail: str, errno: int | None = None):
        super().__init__(path, detail)
        self.errno = errno


class AnnotationError(InputError):
    """A semantic annotation file (HM3D ``.semantic.txt`` / ``.semantic.glb``, MP3D
    ``_semantic.ply`` / ``.house``) is malformed, or two files of a pair do not match."""


class UpAxisError(InputError):
    """A scan read with the wrong up axis (its walkable surface would lie on walls); the message
    says which ``--up`` to pass (``--force`` accepts the scan as given)."""
