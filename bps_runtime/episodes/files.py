"""Episode files: which PointNav episodes ``make(episodes=...)`` serves (``resolve_episodes``).
Habitat's start rotation as a yaw: ``bps_assets.nav.pose.quaternion_yaw``."""
from __future__ import annotations

from pathlib import Path


from bps_assets.errors import InputError


def resolve_episodes(manifest, split, names: list[str], episodes):
    """-> (mode, {scene name: [episodes]} or None) for make(episodes=...).

    A file (ours, or habitat's own such as ``pointnav_hm3d_v1/val/val.json.gz`` with its
    ``content/`` files) is mapped onto the manifest's scenes by each episode's ``scene_id``:
    the source path a scene was converted from, else habitat's scene name (file name up to the
    first dot). Episodes of scenes outside ``names`` (another split, another shard) are skipped.
    """
    from bps_assets.pipeline.habitat_episodes import map_habitat_episodes

    if episodes == "sample":
        return "sample", None
    if episodes is None or episodes == "dataset":
        subsets = [split] if split is not None else manifest.subsets
        paths = [manifest.episodes_path(s) for s in subsets]
        paths = [p for p in paths if p is not None and Path(p).exists()]
        if not paths:
            if episodes == "dataset":
                raise InputError(manifest.path, f"has no PointNav episodes for split {split!r}")
            return "sample", None
    else:
        paths = [Path(episodes)]
        if not paths[0].exists():
            raise InputError(paths[0], "episodes dataset not found")
    wanted = set(names)
    grouped: dict[str, list[dict]] = {}
    for p in paths:
        for name, eps in map_habitat_episodes(p, manifest, allow_unmatched=True).by_scene.items():
            if name in wanted:
                grouped.setdefault(name, []).extend(eps)
    if not grouped:
        raise InputError(paths[0], f"has no episodes for the scenes of the manifest ({', '.join(names[:5])} ...)")
    return "dataset", grouped


