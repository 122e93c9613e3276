"""Paths taken from files, kept inside the folder they belong to (issue 14 item 9).

- ``link_escape``: a path that lies lexically inside a dataset folder but resolves, through a
  symlinked folder or file, to somewhere outside it (``verify`` warns, ``--strict`` refuses;
  the runtime loader warns).
- ``content_scenes_dir``: habitat's ``content_scenes_path`` pattern with only the
  ``{data_path}`` and ``{scene}`` fields (no ``str.format`` attribute access or indexing),
  resolving inside the episode dataset's folder.
"""
from __future__ import annotations

import os
import string
from pathlib import Path

from .errors import InputError

CONTENT_FIELDS = ("data_path", "scene")


def link_escape(root: str | os.PathLike, path: str | os.PathLike) -> Path | None:
    """Where ``path`` really is, when symlinks take it out of ``root`` (None: it stays inside,
    or does not exist). Symlinks that stay inside ``root`` are fine."""
    try:
        real_root = Path(root).resolve()
        target = Path(path).resolve()
    except (OSError, RuntimeError):  # a symlink loop: not ours to judge here
        return None
    if not os.path.lexists(path):
        return None
    if target == real_root or real_root in target.parents:
        return None
    return target


def content_scenes_dir(split_file: Path, pattern: str) -> tuple[Path, str]:
    """(content folder, file-name suffix) of a habitat split file's ``content_scenes_path``.

    Only the fields ``{data_path}`` (the split file's folder) and ``{scene}`` are allowed, with
    no conversion, format spec, attribute or index; ``{scene}`` must come once, in the file
    name. The folder must resolve inside the episode dataset's folder (the one holding the
    split folders, ``split_file.parent.parent``). Anything else is an InputError.
    """
    data_path = split_file.parent
    parts: list[str] = []
    scene_seen = False
    suffix_parts: list[str] = []
    try:
        parsed = list(string.Formatter().parse(pattern))
    except ValueError as e:
        raise InputError(split_file, f"bad content_scenes_path {pattern!r}: {e}") from None
    for literal, field, spec, conv in parsed:
        (suffix_parts if scene_seen else parts).append(literal)
        if field is None:
            continue
        if field not in CONTENT_FIELDS or spec or conv:
            raise InputError(split_file, f"content_scenes_path {pattern!r}: only the fields "
                                         f"{{data_path}} and {{scene}} are allowed, got {{{field}"
                                         f"{'!' + conv if conv else ''}{':' + spec if spec else ''}}}")
        if field == "scene":
            if scene_seen:
                raise InputError(split_file, f"content_scenes_path {pattern!r}: {{scene}} more than once")
            scene_seen = True
        elif scene_seen:
            raise InputError(split_file, f"content_scenes_path {pattern!r}: {{data_path}} after {{scene}}")
        else:   # absolute: a relative split path must not be joined to itself again below
            parts.append(str(data_path.resolve()))
    suffix = "".join(suffix_parts)
    prefix = "".join(parts)
    if not scene_seen or "/" in suffix or "\\" in suffix or not prefix.endswith(("/", "\\")):
        raise InputError(split_file, f"content_scenes_path {pattern!r}: {{scene}} must be the start of "
                                     "the file name, in a folder")
    content = Path(prefix)
    if not content.is_absolute():
        content = data_path / content
    home = data_path.parent.resolve()
    real = content.resolve()
    if real != home and home not in real.parents:
        raise InputError(split_file, f"content_scenes_path {pattern!r} leads to {real}, outside the "
                                     f"episode dataset folder {home}")
    return content, suffix
