"""Which habitat task an episode file's shape belongs to, for the hint an error about a file of
the wrong task gives ("this looks like an ObjectNav episode file; pass task='objectnav'").

``episode_file_task(path)``: the task whose keys appear in the first ``SNIFF_BYTES`` of the file's
(gunzipped) text, checked in order: InstanceImageNav (``goal_image_id`` / ``goal_object_id`` /
``goal_key``; its episodes carry ``object_category`` too), ObjectNav (``object_category``,
``goals_by_category``, the category maps), PointNav (goals with ``position`` and ``radius``;
ImageNav reads the same files); None when none shows. Reads a bounded prefix only: an error
path's helper, it never raises.
"""
from __future__ import annotations

import os
from contextlib import closing

from ..errors import BpsError
from ..readers.guard import iter_limited

SNIFF_BYTES = 1 << 20
# (task name, what the message calls its files, keys any of which marks them), in checking order
KINDS = (
    ("instance_imagenav", "InstanceImageNav", ('"goal_image_id"', '"goal_object_id"', '"goal_key"')),
    ("objectnav", "ObjectNav", ('"object_category"', '"goals_by_category"', '"category_to_task_category_id"')),
    ("pointnav", "PointNav (or ImageNav)", ('"radius"',)),
)
SAME_FILES = {"imagenav": "pointnav"}   # tasks that read another task's files


def episode_file_task(path) -> tuple[str, str] | None:
    """(task name, its files' name) of the episode file at ``path`` by its keys, or None."""
    # the guarded reader's first piece: gunzipped when gzip, its errors typed
    with closing(iter_limited(path, SNIFF_BYTES, "an episode file", chunk=SNIFF_BYTES)) as pieces:
        try:
            text = bytes(next(pieces, b"")).decode("utf-8", "replace")
        except BpsError:
            return None
    for task, what, keys in KINDS:
        if any(k in text for k in keys):
            return task, what
    return None


def wrong_task_hint(path, task: str) -> str:
    """"this looks like a <task> episode file; pass task='<name>'" when the file at ``path`` has
    another task's shape than ``task``'s, else ""."""
    if path is None or not os.path.isfile(path):
        return ""
    found = episode_file_task(path)
    if found is None or found[0] == SAME_FILES.get(task, task):
        return ""
    name, what = found
    return f"this looks like {'an' if what[0] in 'AEIOU' else 'a'} {what} episode file; pass task={name!r}"
