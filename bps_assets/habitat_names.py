"""habitat's naming rules that this project's files must follow to interoperate, in one place and
without heavy imports (the dataset tables read them before numpy is loaded).

``habitat_scene_name(path)``: the file name up to its first dot (HM3D's ``X.basis.glb`` -> ``X``,
as HM3D's episode content files and habitat-lab's InstanceImageNav goal keys name it; those keys
strip only ``.glb`` then ``.basis`` (``nav.instance_imagenav_files.goal_key`` follows them), and
``scene_from_scene_path`` only the last extension); a name starting with a dot is named
without it (``.room.obj`` -> ``room``: an empty name, or hidden outputs, otherwise). It ties
episode files' scene ids, scene dataset configs' stages, manifests' scenes, preprocess's scan
names (``datasets.scan_names``' first rule) and convert / navmesh / episodes outputs.
"""
from __future__ import annotations

import os


def habitat_scene_name(path: str | os.PathLike) -> str:
    """The scene name habitat gives ``path``: its file name up to the first dot. A name that
    starts with dots (``.room.obj``, where that is empty) is named without them, up to the
    next dot (``room``): never an empty name, and no output made from it is hidden."""
    base = os.path.basename(os.fspath(path))
    return base.lstrip(".").split(".")[0] or base


__all__ = ["habitat_scene_name"]
