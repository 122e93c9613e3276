"""Episode files: which habitat v1 point-goal episodes ``make(episodes=...)`` serves
(``resolve_episodes``; ``point_goal_supply``: the supply over them, or sampled ones); the one
base of the goal-object files' supplies (``GoalFileEpisodes``: ObjectNav, InstanceImageNav).
``episodes_read_once``: a scope in which each file ``mapped_file`` maps is read once (the
trainer's episode count, then ``make()``). Habitat's start rotation as a yaw:
``bps_assets.nav.pose.quaternion_yaw``."""
from __future__ import annotations

import os
from abc import ABCMeta, abstractmethod
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path


from bps_assets.errors import InputError
from bps_assets.nav.episode_table import EpisodeTable
from bps_assets.nav.geodesic import NEAR_EXACT

from .dataset import DatasetEpisodes
from .supply import DEFAULTS, SupplyOptions, _SceneState

EPISODE_MODES = (None, "dataset", "sample")   # make(episodes=...) besides a file's path (resolve_episodes)


def resolve_episodes(manifest, split, names: list[str], episodes, unmatched: dict | None = None):
    """-> (mode, {scene name: EpisodeTable} or None) for make(episodes=...).

    A file (ours, or habitat's own such as ``pointnav_hm3d_v1/val/val.json.gz`` with its
    ``content/`` files) is mapped onto the manifest's scenes by each episode's ``scene_id``:
    the source path a scene was converted from, else habitat's scene name (file name up to the
    first dot). Episodes of scenes outside ``names`` (another split, another shard) are skipped;
    those of scenes the manifest does not have too, counted into ``unmatched`` (when given:
    file path -> {scene_id: episodes}; ``report_unmatched`` logs them).
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
    grouped: dict = {}   # scene name -> EpisodeTable
    for p in paths:
        mapped = mapped_file(p, manifest, map_habitat_episodes)
        if unmatched is not None and mapped.unmatched:
            unmatched[str(p)] = dict(mapped.unmatched)
        for name, eps in mapped.by_scene.items():
            if name in wanted:
                grouped.setdefault(name, EpisodeTable()).extend(eps)
    if not grouped:
        raise InputError(paths[0], f"has no episodes for the scenes of the manifest ({', '.join(names[:5])} ...)")
    return "dataset", grouped


# the innermost open ``episodes_read_once`` scope's memo in this context (None: no scope)
_read_once: ContextVar[dict | None] = ContextVar("episodes_read_once", default=None)


@contextmanager
def episodes_read_once():
    """Within this scope each episode file ``mapped_file`` maps onto a manifest is read
    once: a later resolve of the same file (same manifest; same device, inode, size and mtime)
    reuses the first's mapping, e.g. ``scene_and_episode_counts`` then ``make(episodes="dataset")``
    in an eval. The files are assumed unchanged within the scope (it spans one eval's count and
    its envs): a split file replaced is read again; its ``content/`` files are not stat'ed. The
    scope is this thread's (a ContextVar: another thread sees none; a context copied inside it,
    e.g. an asyncio task started there, shares its memo); a nested scope starts its own memo and
    gives the outer one back when it ends; the mappings are let go when the scope ends."""
    token = _read_once.set({})
    try:
        yield
    finally:
        _read_once.reset(token)


def report_unmatched(unmatched: dict, manifest_path) -> dict:
    """Log one warning per file whose episodes name scenes ``manifest_path`` does not have
    (``unmatched``: file path -> {scene_id: episodes}, as ``resolve_episodes`` fills it); ->
    {scene_id: episodes} over every file (what the supply's ``unmatched`` keeps)."""
    import logging

    total: dict = {}
    for path, by_scene_id in unmatched.items():
        for scene_id, n in by_scene_id.items():
            total[scene_id] = total.get(scene_id, 0) + n
        shown = ", ".join(f"{scene_id} ({n})" for scene_id, n in list(by_scene_id.items())[:5])
        more = f", {len(by_scene_id) - 5} more" if len(by_scene_id) > 5 else ""
        logging.getLogger(__name__).warning(
            "%s: skipped %d episode(s) of %d scene(s) that %s does not have: %s%s", path, sum(by_scene_id.values()),
            len(by_scene_id), manifest_path, shown, more)
    return total


def mapped_file(path, manifest, map_file):
    """``map_file(path, manifest, allow_unmatched=True)`` (a ``MappedEpisodes``: a task's
    ``TaskSpec.episode_file``), reused within an ``episodes_read_once`` scope."""
    memo = _read_once.get()
    if memo is None:
        return map_file(path, manifest, allow_unmatched=True)
    st = os.stat(path)
    key = (map_file, os.path.realpath(manifest.path), os.path.realpath(path), st.st_dev, st.st_ino, st.st_size,
           st.st_mtime_ns)
    if key not in memo:
        memo[key] = map_file(path, manifest, allow_unmatched=True)
    return memo[key]


def point_goal_supply(request):
    """The supply of tasks whose episodes are habitat v1 point-goal episodes (a goal position
    each): the manifest's or ``episodes=PATH``'s (``resolve_episodes``), else sampled; ->
    (EpisodeSupply, the entries it serves). ``request``: ``tasks.spec.SupplyRequest``."""
    from . import make_supply

    c, entries = request.config, request.entries
    unmatched: dict = {}
    _, by_scene = resolve_episodes(request.manifest, request.split, [e.name for e in entries], c.episodes.source,
                                   unmatched)
    supply = make_supply(c.seed, request.worker, by_scene, options=c.episodes.supply, near_gate=request.near_gate)
    if by_scene is not None:
        entries = [e for e in entries if e.name in by_scene]
        supply.unmatched = report_unmatched(unmatched, request.manifest.path)
        src = c.episodes.source
        supply.source = f"{request.manifest.path}'s episodes" if src in (None, "dataset") else str(src)
    return supply, entries


class GoalFileEpisodes(DatasetEpisodes, metaclass=ABCMeta):
    """A goal-object episode file's episodes (ObjectNav v1, InstanceImageNav-v1: ``ds`` the dataset
    read, ``raw_by_scene`` scene name -> its episodes), checked on each scene's navmesh when the
    scene arrives (``check_on_navmesh``: what is off it dropped, counted and logged with the
    file's name), then served as the dataset supply serves PointNav's. A task's subclass gives
    ``WHAT``, ``check_on_navmesh``, ``scene_dataset`` and ``episode_dicts``."""

    WHAT = ""

    def __init__(self, ds, raw_by_scene: dict, path, seed: int, worker, options: SupplyOptions = DEFAULTS,
                 near_gate: float = NEAR_EXACT):
        super().__init__({}, seed, worker, options, near_gate=near_gate)
        self.ds, self.raw_by_scene, self.path = ds, dict(raw_by_scene), path
        self.source = str(path)
        self.checks: dict = {}   # scene name -> NavmeshCheck of its episodes

    # the three hooks a task's subclass gives (abstract: the base alone cannot be built)
    @staticmethod
    @abstractmethod
    def check_on_navmesh(ds, navmesh, path):
        """The task's ``check_on_navmesh(ds, navmesh, path)`` -> NavmeshCheck."""

    @abstractmethod
    def scene_dataset(self, raw: list[dict]):
        """The dataset of episodes ``raw`` and only their goals."""

    @staticmethod
    @abstractmethod
    def episode_dicts(ds, episodes: list[dict]) -> tuple[list[dict], dict]:
        """The supply's episode dicts and {episode id: EpisodeGoal} of ``episodes`` of ``ds``."""

    def _start(self, st: _SceneState, inline: bool) -> None:
        import logging

        scene_ds = self.scene_dataset(self.raw_by_scene.get(st.name, []))
        check = self.checks[st.name] = self.check_on_navmesh(scene_ds, st.mesh.navmesh, self.path)
        if check.dropped:
            logging.getLogger(__name__).warning("%s: scene %s: dropped %s", self.path, st.name, check.summary())
        self.episodes_by_scene[st.name], self.goals[st.name] = self.episode_dicts(check.dataset,
                                                                                  check.dataset.episodes)
        super()._start(st, inline)

    @classmethod
    def supply(cls, request, mapped, ds):
        """(the supply, the entries it serves) over ``mapped`` (``map_habitat_*`` of the task's
        file; ``ds`` its dataset): the scenes of ``request`` with at least one episode whose goal
        has a view point; none is an ``InputError`` naming the file."""
        c, entries = request.config, request.entries
        names = {e.name for e in entries}
        raw = {n: eps for n, eps in mapped.by_scene.items()
               if n in names and any(len(ds.view_points_of(e)) for e in eps)}
        if not raw:
            raise InputError(c.episodes.source, f"has no {cls.WHAT} episodes for the scenes of "
                                                f"{request.manifest.path} (split {request.split!r})")
        supply = cls(ds, raw, c.episodes.source, c.seed, request.worker, c.episodes.supply, request.near_gate)
        if mapped.unmatched:
            supply.unmatched = report_unmatched({str(c.episodes.source): mapped.unmatched}, request.manifest.path)
        return supply, [e for e in entries if e.name in raw]
