"""Episode files: which habitat v1 point-goal episodes ``make(episodes=...)`` serves
(``resolve_episodes``; ``point_goal_supply``: the supply over them, or sampled ones).
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




def point_goal_supply(request):
    """The supply of tasks whose episodes are habitat v1 point-goal episodes (a goal position
    each): the manifest's or ``episodes=PATH``'s (``resolve_episodes``), else sampled; ->
    (EpisodeSupply, the entries it serves). ``request``: ``tasks.spec.SupplyRequest``."""
    from . import make_supply

    c, entries = request.config, request.entries
    _, by_scene = resolve_episodes(request.manifest, request.split, [e.name for e in entries], c.episodes.source)
    if by_scene is not None:
        entries = [e for e in entries if e.name in by_scene]
    return make_supply(c.seed, request.worker, by_scene, options=c.episodes.supply), entries
