"""Turn one dataclass into a command line: each field's doc line (``arg(default, "doc")``) is
its ``--help`` text, so the training script keeps every setting in one ``Args`` block.

Written here instead of depending on tyro: 40 lines cover what the script needs.
"""
from __future__ import annotations

import argparse
import dataclasses
import difflib
import math
import os
import sys
import typing

from bps_assets.argv_paths import expand_option_tilde


def arg(default, doc: str, choices=None):
    """A dataclass field with a default and a one-line doc shown by --help (``choices``: the
    values allowed, shown in the usage line)."""
    meta = {"doc": doc, "choices": tuple(choices) if choices else None}
    if isinstance(default, (list, dict, set)):
        return dataclasses.field(default_factory=lambda: type(default)(default), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def _parse_bool(s: str) -> bool:
    if s.lower() in ("1", "true", "yes", "on"):
        return True
    if s.lower() in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected a boolean, got {s!r}")


def _parse_auto_bool(s: str) -> bool | None:
    """A boolean, or ``auto`` (None: the program's own rule decides)."""
    if s.lower() == "auto":
        return None
    try:
        return _parse_bool(s)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected a boolean or auto, got {s!r}") from None


def _parse_float(s: str) -> float:
    """A finite number: nan / inf would fail only after set-up, as a traceback from the loss."""
    try:
        v = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {s!r}") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {s!r}")
    return v


class _Parser(argparse.ArgumentParser):
    """No prefix matching (``--num-env`` is not ``--num-envs``), and an error is two lines: the
    problem with a "did you mean" for a misspelt option, then where the full list is; not the
    whole usage block."""

    def __init__(self, **kw):
        super().__init__(allow_abbrev=False, formatter_class=argparse.ArgumentDefaultsHelpFormatter, **kw)

    def error(self, message):
        known = [o for a in self._actions for o in a.option_strings if o.startswith("--")]
        hints = []
        if message.startswith("unrecognized arguments:"):
            for tok in message.split(":", 1)[1].split():
                close = difflib.get_close_matches(tok.split("=")[0], known, n=1, cutoff=0.6)
                if tok.startswith("--") and close:
                    hints.append(f"{tok.split('=')[0]}: did you mean {close[0]}?")
        self.exit(2, f"{self.prog}: error: {message}" + "".join(f"\n  {h}" for h in hints)
                  + f"\n(`{self.prog} --help` lists every setting)\n")


def parse(cls, argv=None, description: str = ""):
    """Parse ``argv`` into an instance of the dataclass ``cls``."""
    p = _Parser(description=description)
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        typ = hints[f.name]
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        doc = f.metadata.get("doc", "").replace("%", "%%")
        if default == "":   # the formatter's "(default: )" reads as a missing value
            doc += " (default: %(default)r)"
        kw = dict(default=default, help=doc, dest=f.name)
        origin = typing.get_origin(typ)
        auto_bool = typ == typing.Optional[bool]   # None: "auto", the program's rule
        if auto_bool:
            # a string default goes through ``type`` too: None, shown as "(default: auto)"
            kw.update(type=_parse_auto_bool, nargs="?", const=True, metavar="BOOL|auto",
                      default="auto" if default is None else default)
        elif typ is bool:
            kw.update(type=_parse_bool, nargs="?", const=True, metavar="BOOL")
        elif origin in (list, tuple):
            (inner, *_) = typing.get_args(typ)
            kw.update(type=inner, nargs="+")
        elif origin is typing.Union:  # Optional[X]
            inner = [a for a in typing.get_args(typ) if a is not type(None)][0]
            kw.update(type=inner)
        else:
            kw.update(type=_parse_float if typ is float else typ)
        if f.metadata.get("choices"):
            kw.update(choices=f.metadata["choices"])
        p.add_argument("--" + f.name.replace("_", "-"), **kw)
        if typ is bool or auto_bool:  # --no-resume as well as --resume false
            # no default of its own: the help would read "(default: True)" beside a switch-off
            p.add_argument("--no-" + f.name.replace("_", "-"), dest=f.name, action="store_false",
                           default=argparse.SUPPRESS, help=f"same as --{f.name.replace('_', '-')} false")
    if argv is None:
        argv = sys.argv[1:]
    ns = p.parse_args([expand_option_tilde(t) for t in argv])   # --out-dir=~/runs
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


def check_device(device: str) -> None:
    """ConfigError unless ``device`` is ``cpu`` or ``cuda[:i]`` usable here (torch's own errors
    were tracebacks after seconds of set-up); torch is imported only to ask about CUDA."""
    import re

    from bps_assets.errors import ConfigError

    if not re.fullmatch(r"cpu|cuda(:\d+)?", device):
        raise ConfigError(None, f"--device {device!r}: expected cpu, cuda or cuda:INDEX")
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise ConfigError(None, f"--device {device}: CUDA is not available on this machine "
                                    "(torch sees no GPU, or was built without CUDA)")
        index = int(device.partition(":")[2] or 0)
        if index >= torch.cuda.device_count():
            raise ConfigError(None, f"--device {device}: this machine has {torch.cuda.device_count()} "
                                    "CUDA device(s)")


def writable_dir(path) -> None:
    """Create ``path`` (mkdir -p) and check it is writable before any work: an OutputWriteError
    naming the folder and the cause otherwise."""
    import os

    from bps_assets.container import make_dirs
    from bps_assets.errors import OutputWriteError

    folder = make_dirs(path)
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputWriteError(folder, "cannot write in the output folder (no write permission)")
