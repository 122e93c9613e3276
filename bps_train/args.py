"""Turn one dataclass into a command line: each field's doc line (``arg(default, "doc")``) is
its ``--help`` text, so the training script keeps every setting in one ``Args`` block.

Written here instead of depending on tyro: 40 lines cover what the script needs.
"""
from __future__ import annotations

import argparse
import dataclasses
import typing


def arg(default, doc: str):
    """A dataclass field with a default and a one-line doc shown by --help."""
    if isinstance(default, (list, dict, set)):
        return dataclasses.field(default_factory=lambda: type(default)(default), metadata={"doc": doc})
    return dataclasses.field(default=default, metadata={"doc": doc})


def _parse_bool(s: str) -> bool:
    if s.lower() in ("1", "true", "yes", "on"):
        return True
    if s.lower() in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected a boolean, got {s!r}")


def parse(cls, argv=None, description: str = ""):
    """Parse ``argv`` into an instance of the dataclass ``cls``."""
    p = argparse.ArgumentParser(description=description,
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        typ = hints[f.name]
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        kw = dict(default=default, help=f.metadata.get("doc", "").replace("%", "%%"), dest=f.name)
        origin = typing.get_origin(typ)
        if typ is bool:
            kw.update(type=_parse_bool, nargs="?", const=True, metavar="BOOL")
        elif origin in (list, tuple):
            (inner, *_) = typing.get_args(typ)
            kw.update(type=inner, nargs="+")
        elif origin is typing.Union:  # Optional[X]
            inner = [a for a in typing.get_args(typ) if a is not type(None)][0]
            kw.update(type=inner)
        else:
            kw.update(type=typ)
        p.add_argument("--" + f.name.replace("_", "-"), **kw)
        if typ is bool:  # --no-resume as well as --resume false
            p.add_argument("--no-" + f.name.replace("_", "-"), dest=f.name, action="store_false",
                           help=f"same as --{f.name.replace('_', '-')} false")
    ns = p.parse_args(argv)
    vals = vars(ns)
    for f in dataclasses.fields(cls):
        if typing.get_origin(hints[f.name]) is tuple:
            vals[f.name] = tuple(vals[f.name])
    return cls(**vals)


def check_minimums(args, minimums: dict) -> None:
    """ConfigError naming the first ``--option`` below its minimum (``{"save_every": 1, ...}``)."""
    from bps_assets.errors import ConfigError

    for name, low in minimums.items():
        value = getattr(args, name)
        if value < low:
            raise ConfigError(None, f"--{name.replace('_', '-')} {value}: must be >= {low}")


def writable_dir(path) -> None:
    """Create ``path`` (mkdir -p) and check it is writable before any work: an OutputWriteError
    naming the folder and the cause otherwise."""
    import os

    from bps_assets.container import make_dirs
    from bps_assets.errors import OutputWriteError

    folder = make_dirs(path)
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputWriteError(folder, "cannot write in the output folder (no write permission)")
