"""Episode videos over any bps_runtime env, drawn from its public API (habitat's generate_video).

``EpisodeRecorder`` watches envs of a running env: call ``reset(obs, info)`` after ``env.reset()``
(``info = env.last_info``), ``step(obs, done, info, actions=)`` after each ``step``/``recv``,
``close()`` at the end. When an episode ends (``done``: the observation is then the next
episode's first, as in habitat-baselines) a background thread draws one frame per step taken
(L actions, L frames) and writes ``DIR/[PREFIX]episode=ID-scene=S-success=..-spl=..mp4`` and a ``.json``
of positions and actions (a ``bps-assets preview --agent-path`` input). A frame: the sensors
side by side (scaled by a whole factor: exact copies of the observations; ImageNav's goal image
after them), the top-down map of the start's floor (goal, shortest path, path so far, agent at any height) at
the frame's full height, and under the sensors the step, the goal (ObjectNav's category) and the
distance to it, the action taken from the frame and, last, success and SPL. The goal:
``goals_for(env ids)`` (``env.episode_goals``, drawn by ``topdown.draw_episode`` as ``bps-assets
preview --episodes`` draws it), else PointNav's first ``pointgoal`` inverted, else none.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bps_assets.nav.pose import quaternion_yaw
from bps_assets.nav.topdown import HEADER, MARGIN
from bps_train.episode_claims import EpisodeClaims
from bps_train.video_io import DEFAULTS as VIDEO_DEFAULTS, VideoOptions, write_video

SENSORS = ("rgb", "depth", "semantic")   # drawn in this order when the env has them
GOAL_IMAGE = "imagegoal"                 # the goal image's panel after the sensors (ImageNav's key)
GOAL_IMAGES = (GOAL_IMAGE, "instance_imagegoal")   # the goal image observations: ImageNav's, InstanceImageNav's
LABEL_H, LINE_H = 14, 14                 # px above the panels (sensor names); per line of text below
TEXT_LINES = 4                           # step; goal and distance; action; success and SPL
TEXT_H = TEXT_LINES * LINE_H + 2
MAP_KINDS = ("shortest_path", "agent_path", "start", "goal", "agent")   # + view_point (ObjectNav)


@dataclass(frozen=True)
class FrameOptions:
    """Frame layout: each sensor panel is ``panel`` px square at most (the observation scaled by
    the largest even whole factor that fits; 2 when none does); the map panel is ``map_width`` px wide and the frame's
    height (its map, under the title and above the scale bar and legend, >= 256 px on its long
    side at the defaults)."""

    panel: int = 256
    map_width: int = 320
    max_depth_m: float = 10.0   # depth in metres (normalize_depth=False) is drawn 0..this


DEFAULTS = FrameOptions()


def manifest_navmeshes(manifest_path):
    """``scene_id -> NavMesh`` for the scenes of a ``bps-assets preprocess`` manifest (each
    navmesh read once, on first use; None for a scene the manifest does not name)."""
    from bps_assets.nav import load_navmesh

    return _per_scene(manifest_path, lambda entry: load_navmesh(entry.navmesh)
                      if entry is not None and entry.navmesh else None)


def _per_scene(manifest_path, read):
    """``scene_id -> read(its manifest entry)``, each scene read once, on first use (entry None:
    a scene the manifest does not name)."""
    from bps_assets.pipeline.manifest import load_manifest

    manifest, cache = load_manifest(manifest_path), {}

    def for_scene(scene_id: str):
        if scene_id not in cache:
            try:
                entry = manifest.scene(scene_id)
            except Exception:  # noqa: BLE001 - a scene the manifest does not know
                entry = None
            cache[scene_id] = read(entry)
        return cache[scene_id]
    return for_scene


def goal_from_pointgoal(position, rotation, pointgoal) -> np.ndarray:
    """Inverse of habitat's ``pointgoal_with_gps_compass`` (the reference: tests/pointnav_reference.py):
    the goal [3] from the agent's position, [x, y, z, w] rotation and [rho, -phi]; y = the
    agent's (the observation is 2-D)."""
    p = np.asarray(position, np.float64)
    q = np.asarray(rotation, np.float64)
    yaw = quaternion_yaw(q)
    rho, phi = float(pointgoal[0]), -float(pointgoal[1])
    x_a, z_a = rho * math.sin(phi), -rho * math.cos(phi)
    c, s = math.cos(yaw), math.sin(yaw)
    return np.array([p[0] + c * x_a + s * z_a, p[1], p[2] - s * x_a + c * z_a])


def manifest_no_objects(manifest_path):
    """``scene_id -> `` the semantic id besides 0 that means "no object" in that scene (its packed
    header's ``no_object_id``: MP3D's 65535; 0 where none, or for a scene the manifest does not
    name or whose header is unreadable: the video's colours only), each header read once."""
    from bps_assets.container import read_header
    from bps_assets.packed_scene import KIND
    from bps_assets.semantic_section import no_object_id

    def read(entry) -> int:
        try:
            return no_object_id(read_header(entry.scene, KIND)[0])
        except Exception:  # noqa: BLE001 - unknown scene or unreadable header: only 0 is "no object"
            return 0
    return _per_scene(manifest_path, read)


def sensor_rgb(name: str, a: np.ndarray, normalized_depth: bool = True, max_depth_m: float = 10.0,
               no_object: int = 0) -> np.ndarray:
    """One observation [H, W, C] as RGB uint8: rgb as is, depth grey (0..1 or metres / max
    depth), semantic ids in a fixed palette (id 0 and ``no_object``, the scene's other id of no
    object, e.g. MP3D's 65535: black)."""
    a = np.asarray(a)
    if name == "rgb":
        return np.ascontiguousarray(a[..., :3], dtype=np.uint8)
    if name == "depth":
        d = a[..., 0].astype(np.float32)
        d = d if normalized_depth else d / max_depth_m
        g = np.round(np.clip(d, 0.0, 1.0) * 255.0).astype(np.uint8)
        return np.repeat(g[..., None], 3, axis=2)
    ids = a[..., 0].astype(np.int64)
    rgb = np.stack([(ids * 67 + 29) % 200 + 55, (ids * 151 + 87) % 200 + 55, (ids * 229 + 13) % 200 + 55], -1)
    rgb[(ids == 0) | (ids == no_object)] = 0
    return rgb.astype(np.uint8)


class FrameLayout:
    """Where each part of a frame goes (the test reads the sensor panels back through it)."""

    def __init__(self, sensors, resolution, options: FrameOptions = DEFAULTS):
        h, w = resolution
        self.sensors = [s for s in SENSORS + (GOAL_IMAGE,) if s in sensors]
        fit = min(options.panel // h, options.panel // w)
        # even: H.264's 2x2 chroma blocks never straddle two pixels; rounded down to fit the panel
        # (2 when no even factor fits: observations over panel / 2 px)
        self.scale = max(2, fit - fit % 2)
        self.panel_h, self.panel_w = h * self.scale, w * self.scale
        self.map_x = len(self.sensors) * self.panel_w
        self.map_w = options.map_width + options.map_width % 2
        self.width = self.map_x + self.map_w
        self.height = LABEL_H + self.panel_h + TEXT_H
        self.options = options

    def sensor_box(self, name: str) -> tuple[int, int, int, int]:
        """(x0, y0, x1, y1) of a sensor's panel."""
        k = self.sensors.index(name)
        return k * self.panel_w, LABEL_H, (k + 1) * self.panel_w, LABEL_H + self.panel_h

    def read_sensor(self, frame: np.ndarray, name: str) -> np.ndarray:
        """The sensor panel of a (decoded) frame brought back to the observation's size (the mean
        of each scale x scale block)."""
        x0, y0, x1, y1 = self.sensor_box(name)
        p = frame[y0:y1, x0:x1].astype(np.float64)
        s = self.scale
        return p.reshape(p.shape[0] // s, s, p.shape[1] // s, s, 3).mean(axis=(1, 3))


class _Episode:
    __slots__ = ("obs", "pos", "rot", "dist", "scene", "goal", "goals", "goal_image", "actions", "key")

    def __init__(self, scene):
        self.obs, self.pos, self.rot, self.dist, self.scene, self.goal = [], [], [], [], scene, None
        self.actions = []   # actions[t]: taken from frame t (the last one ends the episode)
        self.goals = self.goal_image = None   # goals_for's dict of the episode; ImageNav's goal image
        self.key = None   # (scene id, episode id): from goals_for at the start, else at the end


class EpisodeRecorder:
    """Records and writes the first ``episodes`` distinct episodes (scene id, episode id) that
    start in envs ``0..watch-1`` (``watch=None``: any env); an env that reruns an episode
    recorded or being recorded is not recorded (one file per episode, none written twice).

    A finished episode is drawn and encoded on one background thread (``background=False``:
    at once, in ``step``), overlapping the env and the policy; ``close()`` waits for those
    writes and raises the first error. ``written`` lists the files written so far, in order.
    ``goals_for``: env ids -> their running episodes' goal dicts (``env.episode_goals``; settable
    after construction), called when a watched env starts an episode. ``action_names``: the env's
    ``ACTIONS`` (settable too), for the actions given to ``step``. ``no_object_for``: scene id ->
    its semantic id of no object besides 0 (``manifest_no_objects``), drawn black as 0 is.
    """

    def __init__(self, out_dir, episodes: int, navmesh_for=None, *, watch: int | None = None,
                 normalized_depth: bool = True, frame: FrameOptions = DEFAULTS,
                 video: VideoOptions = VIDEO_DEFAULTS, background: bool = True, goals_for=None,
                 action_names=(), prefix: str = "", no_object_for=None):
        from concurrent.futures import ThreadPoolExecutor

        self.out_dir = Path(out_dir)
        self._claims = EpisodeClaims(episodes)   # the episodes written or being recorded
        self.prefix = _file_safe(prefix)   # before every file name (an eval's: what it evaluated)
        self.navmesh_for = navmesh_for or (lambda scene_id: None)
        self.no_object_for = no_object_for or (lambda scene_id: 0)   # the semantic panel's black ids
        self.goals_for = goals_for
        self.action_names = tuple(action_names)   # the env's ``ACTIONS``: the strip names each action
        self.watch = None if watch is None else int(watch)   # None: every env
        self.normalized_depth, self.frame_options, self.video_options = normalized_depth, frame, video
        self.written: list[Path] = []
        self._ended = 0
        self._live: dict[int, _Episode] = {}
        self._names: set = set()   # the file names written in this run (none is written twice)
        self._maps: dict = {}
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="bps-video") if background else None
        self._pending: list = []

    def cap(self, episodes: int) -> None:
        """Record at most ``episodes`` (the episodes an evaluation runs: beyond them the envs only
        repeat episodes already written)."""
        self._claims.want = min(self._claims.want, int(episodes))

    @property
    def want(self) -> int:
        """How many episodes are recorded (``episodes``, lowered by ``cap``)."""
        return self._claims.want

    @property
    def finished(self) -> bool:
        """True once ``episodes`` episodes have ended (their files: after ``close()``)."""
        return self._ended >= self.want

    def close(self) -> list[Path]:
        """Wait for the videos still being written; returns ``written``. Raises the first error
        a write had."""
        pending, self._pending = self._pending, []
        try:
            for f in pending:
                f.result()
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
                self._pool = None
        return self.written

    def reset(self, obs, info):
        """After ``env.reset()``: start recording the watched envs' episodes (``info = env.last_info``)."""
        for ep in self._live.values():   # dropped unfinished
            self._claims.release(ep.key)
        self._live.clear()
        self._take(obs, info, np.zeros(len(info["env_id"]), bool), start=True)

    def step(self, obs, done, info, actions=None):
        """After a ``step``/``recv``: append the recorded envs' step; write the episodes that
        ended (``done``) and start recording new ones while room is left. ``actions``: the actions sent for
        this step, one per row of ``info["env_id"]`` (shown in the frames they were taken from)."""
        if self.finished:
            return
        self._take(obs, info, np.asarray(_host(done), bool).reshape(-1),
                   actions=None if actions is None else _host(actions).reshape(-1))

    # ---------------------------------------------------------------------------- internals
    def _take(self, obs, info, done, start=False, actions=None):
        ids = [int(e) for e in _host(info["env_id"]).reshape(-1)]
        for k, e in enumerate(ids):   # the episodes that ended, first: they make room for new ones
            if e in self._live:
                if actions is not None:   # taken from the last frame recorded
                    self._live[e].actions.append(int(actions[k]))
                if done[k]:
                    self._finish(self._live.pop(e), info["episode"], k)
        if self.finished:
            return
        goal_image = next((g for g in GOAL_IMAGES if g in obs), None)
        for k in self._admit([k for k, e in enumerate(ids) if (start or done[k]) and e not in self._live
                              and (self.watch is None or e < self.watch)], ids, info):
            if goal_image is not None:   # constant through the episode: one copy
                self._live[ids[k]].goal_image = _host(obs[goal_image][k]).copy()
        rows = [k for k, e in enumerate(ids) if e in self._live]
        if not rows:
            return
        # only the recorded envs' observations leave the device (row j of host: batch row rows[j])
        host = {k: _host_rows(v, rows) for k, v in obs.items() if k in SENSORS or k == "pointgoal"}
        pos, rot, dist = (_host(info[k]) for k in ("position", "rotation", "distance_to_goal"))
        for j, k in enumerate(rows):
            ep = self._live[ids[k]]
            ep.obs.append({s: host[s][j] for s in host if s in SENSORS})
            ep.pos.append(pos[k].astype(np.float64))
            ep.rot.append(rot[k].astype(np.float64))
            ep.dist.append(float(dist[k]))
            if ep.goal is None and "pointgoal" in host and self.goals_for is None:
                ep.goal = goal_from_pointgoal(pos[k], rot[k], host["pointgoal"][j])

    def _admit(self, rows: list, ids: list, info) -> list:
        """The rows of ``rows`` (envs starting an episode) whose episodes are recorded: while there
        is room, each episode once (with ``goals_for``: known at its start; else at its end)."""
        if self._claims.room <= 0 or not rows:
            return []
        goals = self.goals_for([ids[k] for k in rows]) if self.goals_for is not None else [None] * len(rows)
        taken = []
        for k, g in zip(rows, goals):
            ep = _Episode(str(info["scene_id"][k]))
            if g is not None:
                ep.key = (str(g["scene_id"]), str(g["episode_id"]))
            if not self._claims.claim(ep.key):   # recorded or being recorded: a repeat
                continue
            if g is not None:
                ep.goals, ep.goal = g, np.asarray(g["goals"][0]["position"], np.float64)
            self._live[ids[k]] = ep
            taken.append(k)
            if self._claims.room == 0:
                break
        return taken

    def _finish(self, ep: _Episode, final: dict, k: int):
        meta = {"episode_id": str(final["episode_id"][k]), "scene_id": str(final["scene_id"][k]) or ep.scene,
                "success": float(_host(final["success"])[k]), "spl": float(_host(final["spl"])[k]),
                "length": int(_host(final["length"])[k]),
                "distance_to_goal": float(_host(final["distance_to_goal"])[k])}
        if ep.key is None:   # known only now (no goals_for): a repeat of one recorded is dropped
            ep.key = (meta["scene_id"], meta["episode_id"])
            if not self._claims.settle(ep.key):
                return
        name = self.prefix + _file_safe(f"episode={meta['episode_id']}-scene={meta['scene_id']}"
                                        f"-success={meta['success']:.2f}-spl={meta['spl']:.2f}")
        stem, n = name, 1
        while name in self._names:   # two ids that differ only in characters a file name cannot hold
            n += 1
            name = f"{stem}-{n}"
        self._names.add(name)
        self._ended += 1
        if self._pool is None:
            self._write(ep, meta, name)
        else:
            self._pending.append(self._pool.submit(self._write, ep, meta, name))

    def _write(self, ep: _Episode, meta: dict, name: str):
        path = write_video(self.out_dir / name, self.frames(ep, meta), self.video_options)
        positions = np.array(ep.pos)
        doc = {**meta, "frames": len(ep.obs), "start": ep.pos[0].tolist(),
               "goal": None if ep.goal is None else ep.goal.tolist(),
               **({} if ep.goals is None else {"goals": _goal_summary(ep.goals)}),
               "positions": positions.tolist(), "rotations": np.array(ep.rot).tolist(),
               **({"actions": [self._action_name(a) for a in ep.actions]} if ep.actions else {}),
               "video": path.name}
        from bps_assets.container import atomic_write

        text = json.dumps(doc).encode()
        atomic_write(self.out_dir / f"{name}.json", lambda fh: fh.write(text), overwrite=self.video_options.overwrite)
        self.written.append(path)

    def frames(self, ep: _Episode, meta: dict):
        """The episode's frames (uint8 [H, W, 3]), one per step, drawn lazily into one buffer
        (each yielded array is rewritten by the next frame: copy it to keep it)."""
        from PIL import Image, ImageDraw, ImageFont

        panels = list(ep.obs[0]) + ([GOAL_IMAGE] if ep.goal_image is not None else [])
        layout = FrameLayout(panels, ep.obs[0][next(iter(ep.obs[0]))].shape[:2], self.frame_options)
        font = ImageFont.load_default_imagefont()   # the bitmap font: 25x faster than FreeType here
        base = Image.new("RGB", (layout.width, layout.height), (250, 250, 250))
        d = ImageDraw.Draw(base)
        for s in layout.sensors:
            d.text((layout.sensor_box(s)[0] + 2, 1), "goal image" if s == GOAL_IMAGE else s, fill=(0, 0, 0), font=font)
        base = np.asarray(base).copy()
        k = layout.scale
        if ep.goal_image is not None:   # the same through the episode: drawn once
            x0, y0, x1, y1 = layout.sensor_box(GOAL_IMAGE)
            rgb = sensor_rgb("rgb", ep.goal_image)
            base[y0:y1, x0:x1].reshape(rgb.shape[0], k, rgb.shape[1], k, 3)[:] = rgb[:, None, :, None, :]
        canvas = self._map_canvas(ep, layout)
        if canvas is not None:
            tdm = canvas.map
            # the floor first: a long scene name is what gets cut (the file name holds it whole)
            title = f"floor {tdm.shown[0]}: y={tdm.levels[tdm.shown[0]]:.2f} m, {meta['scene_id']}"
            # labels, scale bar and legend drawn once; each frame replaces the map area only
            decorated = np.asarray(canvas.image(kinds=_map_kinds(canvas), title=""))
            mh, mw = min(decorated.shape[0], layout.height), min(decorated.shape[1], layout.map_w)
            base[:mh, layout.map_x:layout.map_x + mw] = decorated[:mh, :mw]
            _map_title(base, layout, title)
            area = slice(HEADER, min(tdm.height, mh)), slice(0, mw)
        L = len(ep.obs)
        no_object = self.no_object_for(ep.scene) if "semantic" in layout.sensors else 0
        f = base   # every frame rewrites the same parts (sensors, map area, strip) of one buffer
        for t in range(L):
            for s in layout.sensors:
                if s == GOAL_IMAGE:
                    continue
                x0, y0, x1, y1 = layout.sensor_box(s)
                rgb = sensor_rgb(s, ep.obs[t][s], self.normalized_depth, self.frame_options.max_depth_m, no_object)
                f[y0:y1, x0:x1].reshape(rgb.shape[0], k, rgb.shape[1], k, 3)[:] = rgb[:, None, :, None, :]
            if t == 0:
                strip_bg = f[layout.height - TEXT_H:, :layout.map_x].copy()
            if canvas is not None:   # the agent and its path on the start floor's map at any height, as habitat
                if t:
                    canvas.path(np.array(ep.pos[t - 1:t + 1]), "agent_path", floor=tdm.shown[0])
                c = canvas.copy().point(ep.pos[t], "agent", yaw=quaternion_yaw(ep.rot[t]), floor=tdm.shown[0])
                f[area[0], layout.map_x:layout.map_x + mw] = np.asarray(c.im)[area]
            strip = Image.fromarray(strip_bg.copy())
            d = ImageDraw.Draw(strip)
            for i, line in enumerate(self.strip_lines(ep, meta, t)):
                d.text((4, 2 + i * LINE_H), line, fill=(0, 0, 0), font=font)
            f[layout.height - TEXT_H:, :layout.map_x] = np.asarray(strip)
            yield f

    def _action_name(self, a: int) -> str:
        return self.action_names[a] if 0 <= a < len(self.action_names) else str(a)

    def strip_lines(self, ep: _Episode, meta: dict, t: int) -> list[str]:
        """The text under the sensors in frame ``t``: step, goal and distance, action, outcome."""
        last = t == len(ep.obs) - 1
        dist = meta["distance_to_goal"] if last else ep.dist[t]
        action = self._action_name(ep.actions[t]) if t < len(ep.actions) else "-"
        return [f"episode {meta['episode_id']}  step {t + 1}/{len(ep.obs)}",
                f"goal: {_goal_text(ep)}  distance {dist:.2f} m",
                f"action: {action}",
                f"success {meta['success']:.0f}  SPL {meta['spl']:.2f}" if last else "success -  SPL -  (at the end)"]

    def episode_map(self, scene_id: str, start, layout: FrameLayout):
        """The ``TopDownMap`` a video of an episode of ``scene_id`` starting at ``start`` draws on
        (its own world-to-pixel frame: ``to_image``; in a frame, shifted right by ``layout.map_x``),
        the start's floor, the largest that fits the map panel; None without a navmesh."""
        from bps_assets.nav.topdown import MapOptions, TopDownMap

        nav = self.navmesh_for(scene_id)
        if nav is None:
            return None
        start = np.asarray(start, np.float64).reshape(3)
        key = (id(nav), None)
        probe = self._maps.get(key) or self._maps.setdefault(key, TopDownMap(nav, MapOptions(max_size=64)))
        floor = int(probe.floor_of(start[None])[0])
        key = (id(nav), floor, layout.map_w, layout.panel_h)
        tdm = self._maps.get(key)
        if tdm is None:   # the largest map (any m/px: the scale bar states it) that fits the panel
            lo, hi = nav.bounds()
            ext = hi - lo + 2 * MapOptions.margin_m
            room_h, foot = layout.height, 0
            for _ in range(4):
                mpp = 1.001 * max(ext[0] / (layout.map_w - 2 * MARGIN), ext[2] / max(8, room_h - HEADER - MARGIN - foot))
                tdm = TopDownMap(nav, MapOptions(metres_per_pixel=mpp, floors=(floor,), line_width=1))
                im = tdm.canvas().image(kinds=MAP_KINDS + ("view_point",))   # the tallest legend
                if im.height <= room_h and im.width <= layout.map_w:
                    break
                foot = im.height - tdm.height
            self._maps[key] = tdm
        return tdm

    def _map_canvas(self, ep: _Episode, layout: FrameLayout):
        """A canvas of the start's floor with the shortest path, start and goal (None: no navmesh)."""
        from bps_assets.nav.topdown import draw_episode

        start = ep.pos[0]
        tdm = self.episode_map(ep.scene, start, layout)
        if tdm is None:
            return None
        c = tdm.canvas()
        if ep.goals is not None:
            draw_episode(c, {**ep.goals, "start_position": start}, goal_yaw=ep.goals.get("goal_heading"))
        elif ep.goal is not None:
            draw_episode(c, {"start_position": start, "goals": [{"position": ep.goal}]})
        else:
            c.episode(start)
        return c


def _map_title(frame: np.ndarray, layout: FrameLayout, title: str) -> None:
    """``title`` over the map column of ``frame`` (its whole width, not only the map's: a tall
    map is narrow), cut with '...' where it is wider (``topdown.fit_text``)."""
    from PIL import Image, ImageDraw, ImageFont

    from bps_assets.nav.topdown import fit_text

    strip = Image.fromarray(frame[:HEADER, layout.map_x:].copy())
    d, font = ImageDraw.Draw(strip), ImageFont.load_default()
    d.text((MARGIN + 1, 1), fit_text(d, title, layout.map_w - 2 * MARGIN - 1, font), fill=(0, 0, 0), font=font)
    frame[:HEADER, layout.map_x:] = np.asarray(strip)


def _goal_text(ep: _Episode) -> str:
    """What the agent looks for: ObjectNav's category, ImageNav's image, else the goal point."""
    g = ep.goals or {}
    if g.get("object_category"):
        return str(g["object_category"])
    if ep.goal_image is not None:
        return "the goal image"
    if ep.goal is not None:
        return f"point ({ep.goal[0]:.1f}, {ep.goal[2]:.1f})"
    return "-"


def _map_kinds(canvas) -> tuple:
    """The legend's entries: ``MAP_KINDS``, with view points where the episode has them."""
    return MAP_KINDS + (("view_point",) if "view_point" in canvas.used else ())


def _goal_summary(g: dict) -> dict:
    """The JSON of an episode's goal dict: its goals' positions, view points, category, heading."""
    out = {"positions": [list(map(float, x["position"])) for x in g["goals"]]}
    vps = [vp["agent_state"]["position"] for x in g["goals"] for vp in x.get("view_points") or ()]
    if vps:
        out["view_points"] = [list(map(float, v)) for v in vps]
    for key in ("object_category", "goal_heading"):
        if key in g:
            out[key] = g[key]
    return out


def _host_rows(x, rows: list) -> np.ndarray:
    """Rows ``rows`` of a batch tensor (any device) or array, as a new host numpy array."""
    if hasattr(x, "detach"):
        import torch

        return x.detach()[torch.as_tensor(rows, device=x.device)].cpu().numpy()
    return np.asarray(x)[rows]


def _host(x):
    """A tensor (any device) or array as a host numpy array."""
    if hasattr(x, "detach"):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def _file_safe(text: str) -> str:
    """``text`` with every character a file name may not hold on any system as ``_``."""
    return re.sub(r"[^A-Za-z0-9_.=-]", "_", text)


def eval_prefix(evaluated: str) -> str:
    """The file-name prefix of an eval's videos: ``eval=`` what it evaluated (the checkpoint's
    stem, ``random``, ``stop``) and a dash."""
    name = evaluated if evaluated in ("random", "stop") else Path(evaluated).stem
    return "eval=" + _file_safe(name) + "-"


def eval_recorder(args) -> EpisodeRecorder:
    """The recorder of ``bps-train --eval CKPT --video N``: the first N distinct episodes started
    in any env (as the eval counts them: each on its first run) into OUT_DIR/videos, maps from
    the dataset manifest's navmeshes (format checked before any work), each file named after
    what was evaluated (``eval_prefix``). Videos of an earlier eval of the same are refused
    before any work (OutputExistsError): nothing is overwritten or mixed in."""
    import glob

    from bps_assets.errors import OutputExistsError
    from bps_train.video_io import resolve_format

    fmt = resolve_format(args.video_format)
    folder, prefix = Path(args.out_dir) / "videos", eval_prefix(args.eval)
    earlier = sorted(folder.glob(glob.escape(prefix) + "*")) if folder.is_dir() else []
    if earlier:
        raise OutputExistsError(folder, f"holds the videos of an earlier eval of {args.eval} ({earlier[0].name}, "
                                        f"{len(earlier)} file(s) named {prefix}*): move them away, or use another "
                                        "--out-dir")
    return EpisodeRecorder(folder, args.video, manifest_navmeshes(args.dataset),
                           video=VideoOptions(format=fmt), prefix=prefix, no_object_for=manifest_no_objects(args.dataset))
