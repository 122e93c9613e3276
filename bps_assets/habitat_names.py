"""habitat's naming rules that this project's files must follow to interoperate, in one place and
without heavy imports (the dataset tables read them before numpy is loaded).

``habitat_scene_name(path)``: the file name up to its first dot (HM3D's ``X.basis.glb`` -> ``X``,
as habitat-lab's InstanceImageNav goal keys and HM3D's episode content files name it; its
``scene_from_scene_path`` drops only the last extension); it ties episode files' scene ids,
scene dataset configs' stages, manifests' scenes and convert / navmesh / episodes outputs.
"""
from __future__ import annotations

import os


def habitat_scene_name(path: str | os.PathLike) -> str:
    """The scene name habitat gives ``path``: its file name up to the first dot."""
    return os.path.basename(os.fspath(path)).split(".")[0]


__all__ = ["habitat_scene_name"]
