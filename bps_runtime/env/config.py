"""One config for ``make()``: a tree of frozen dataclasses with every default in one place.

``EnvConfig(dataset, split, num_envs, batch_size, seed, device, threads, capture_graph, sensors=
SensorConfig, task=a task's TaskOptions, cache=CacheOptions, episodes=EpisodeConfig, noise=
NoiseOptions)``; ``from_kwargs``
takes ``make()``'s keywords (the common ones flat, ``cache`` as None / an int of slots / a dict /
a CacheOptions); ``to_dict`` / ``from_dict`` round-trip it through plain data (checkpoints);
``str(config)`` prints it. A cache seed of None means the run's seed.
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field, fields, replace

from bps_assets.errors import ConfigError, did_you_mean, is_bool, is_int

from ..episodes.supply import DEFAULTS as SUPPLY_DEFAULTS, SupplyOptions
from ..noise.options import DEFAULTS as NO_NOISE, NoiseOptions
from ..noise.presets import noise_options, parse_noise_text, preset
from ..scenes.cache import CacheOptions
from ..tasks import TASKS, spec_for, task_spec

TASK_DEFAULTS = task_spec(TASKS[0]).defaults


@dataclass(frozen=True)
class SensorConfig:
    """What the agents see: sensors (a subset of ("depth", "rgb", "semantic")), (height, width), habitat's
    normalized depth (0-1 for 0-10 m) or metres, the renderer ("embree" CPU, "warp"), and the
    camera: height (m), horizontal field of view (deg), depth range (m), tilt (deg); None: the task's
    default (``TaskSpec.camera``, filled in by ``EnvConfig``), else the renderer's. Checked (and
    normalized: tuples) when made."""
    kinds: tuple = ("depth",)
    resolution: tuple = (64, 64)
    normalize_depth: bool = True
    renderer: str = "embree"
    sensor_height: float | None = None
    hfov_deg: float | None = None
    min_depth: float | None = None
    max_depth: float | None = None
    # ``render_view`` cameras to keep mips for, ((h, w), hfov_deg) each (``RenderOptions.view_cameras``)
    view_cameras: tuple | None = None
    # converter LODs: "auto" (the level the sensor's pixel allows), "full", or a level index (RenderOptions.lod)
    lod: str | int = "auto"
    pitch_deg: float | None = None      # the camera's tilt (deg, negative: down; RenderOptions)

    def __post_init__(self):
        from ..render import BACKENDS
        from ..render.inputs import check_sensors
        from ..render.protocol import check_resolution

        object.__setattr__(self, "kinds", check_sensors(self.kinds))
        object.__setattr__(self, "resolution", check_resolution(self.resolution))
        object.__setattr__(self, "normalize_depth", check_flag(self.normalize_depth, "normalize_depth"))
        if self.view_cameras is not None:
            from ..render.protocol import check_view_cameras
            object.__setattr__(self, "view_cameras", check_view_cameras(self.view_cameras))
        if self.renderer not in BACKENDS:
            raise ConfigError(None, f"renderer={self.renderer!r}: choose from {BACKENDS}")
        from ..render.protocol import check_lod
        object.__setattr__(self, "lod", check_lod(self.lod))
        if None not in (self.hfov_deg, self.min_depth, self.max_depth):
            self.render_options()   # RenderOptions checks the geometry

    def camera(self) -> dict:
        """The camera fields that are set (the renderer's defaults for the others)."""
        return {k: getattr(self, k) for k in CAMERA_FIELDS if getattr(self, k) is not None}

    def with_camera(self, defaults: dict) -> "SensorConfig":
        """This config with its unset camera fields from ``defaults`` (a task's ``camera``)."""
        return replace(self, **{k: v for k, v in defaults.items() if getattr(self, k) is None})

    def render_options(self, threads: int | None = None, raw_depth: bool = False):
        """The renderer's ``RenderOptions`` for these sensors (``raw_depth``: frames for depth noise,
        which clips after its model)."""
        from ..render import RenderOptions

        return RenderOptions(resolution=tuple(self.resolution), normalize_depth=self.normalize_depth,
                             threads=threads, lod=self.lod, raw_depth=raw_depth, **self.camera())


CAMERA_FIELDS = ("sensor_height", "hfov_deg", "min_depth", "max_depth", "view_cameras", "pitch_deg")


@dataclass(frozen=True)
class EpisodeConfig:
    """Where episodes come from: ``source`` None (the manifest's PointNav episodes if it has
    them, else sampled), "sample", "dataset", or a habitat PointNav v1 json.gz path; the
    supply's sizes; ``scene_shard`` (rank, world_size): every world_size-th scene from rank;
    ``categories``: a task with category goals' named set (None: "hm3d"; ``goal_categories``)."""
    source: str | None = None
    supply: SupplyOptions = SUPPLY_DEFAULTS
    scene_shard: tuple | None = None
    categories: str | None = None

    def __post_init__(self):
        if self.source is not None and not isinstance(self.source, str):
            raise ConfigError(None, f"episodes source={self.source!r}: expected None, 'sample', 'dataset' "
                                    "or an episode file's path (text)")
        _check_part("episodes supply", self.supply, SupplyOptions)
        if self.categories is not None:
            from bps_assets.readers.semantic_categories import GOAL_SETS
            if self.categories not in GOAL_SETS:
                raise ConfigError(None, f"categories={self.categories!r}: choose from {', '.join(GOAL_SETS)}")
        if self.scene_shard is not None:
            try:
                rank, size = (int(v) for v in self.scene_shard)
            except (TypeError, ValueError):
                raise ConfigError(None, f"scene_shard={self.scene_shard!r}: expected (rank, world_size)") from None
            if not 0 <= rank < size:
                raise ConfigError(None, f"scene_shard={self.scene_shard!r}: need 0 <= rank < world_size")
            object.__setattr__(self, "scene_shard", (rank, size))


@dataclass(frozen=True)
class EnvConfig:
    """Everything ``make()`` builds an env from. Each part checks itself once, when it is made
    (``SensorConfig``, ``EpisodeConfig``, ``CacheOptions``, ``SupplyOptions``, the task's options
    through ``tasks.spec_for``; here: the batching, the seed, the threads); ``make()`` adds only
    what depends on the machine (the device, the memory) and the dataset."""
    dataset: str | None = None
    split: str | None = "train"
    num_envs: int = 16
    batch_size: int | None = None
    seed: int = 0
    device: str = "cpu"
    threads: int | None = None          # CPU threads of the renderer and the step (None: all usable)
    capture_graph: bool = False
    sensors: SensorConfig = field(default_factory=SensorConfig)
    task: object = TASK_DEFAULTS        # a task's TaskOptions (its TaskSpec: tasks.spec_for)
    cache: CacheOptions = field(default_factory=lambda: CacheOptions(seed=None))
    episodes: EpisodeConfig = field(default_factory=EpisodeConfig)
    noise: NoiseOptions = NO_NOISE      # habitat-sim's sensor and actuation noise (docs/NOISE.md)

    def __post_init__(self):
        from ..threads import check_threads

        self._check_types()
        if not isinstance(self.noise, NoiseOptions):
            raise ConfigError(None, f"noise={self.noise!r}: expected NoiseOptions (make() also takes a preset "
                                    "name, a dict or key=value text)")
        check_noise_sensors(self.noise, self.sensors.kinds)
        n, b = check_batching(self.num_envs, self.batch_size)
        object.__setattr__(self, "num_envs", n)
        object.__setattr__(self, "batch_size", b)
        object.__setattr__(self, "seed", check_seed(self.seed))   # Python's int: to_dict() stays JSON
        if self.threads is not None:
            object.__setattr__(self, "threads", check_threads(self.threads))
        # the task's camera where the sensors leave it unset (ObjectNav: 0.88 m, HFOV 79, 0.5-5 m)
        object.__setattr__(self, "sensors", self.sensors.with_camera(spec_for(self.task).camera))
        if self.episodes.categories is not None and not spec_for(self.task).categories:
            raise ConfigError(None, f"categories={self.episodes.categories!r}: task "
                                    f"{spec_for(self.task).name!r} has no category goals")

    def _check_types(self):
        """Each part of its own type (a tuple for ``sensors`` or a task's name is ``from_kwargs``'
        form): a ConfigError naming the part, not an AttributeError inside ``make()``."""
        if self.dataset is not None and not isinstance(self.dataset, (str, os.PathLike)):
            raise ConfigError(None, f"dataset={self.dataset!r}: expected the path of a manifest.json "
                                    "from `bps-assets preprocess`")
        if self.split is not None and not isinstance(self.split, str):
            raise ConfigError(None, f"split={self.split!r}: expected a subset's name ('train', 'val', ...) or None")
        if not isinstance(self.device, str) and not hasattr(self.device, "type"):
            raise ConfigError(None, f"device={self.device!r}: expected 'cpu' or 'cuda[:i]'")
        # as from_kwargs stores them: text, so to_dict() is plain data (a Path or torch.device is not JSON)
        object.__setattr__(self, "device", str(self.device))
        if self.dataset is not None:
            object.__setattr__(self, "dataset", os.fspath(self.dataset))
        object.__setattr__(self, "capture_graph", check_flag(self.capture_graph, "capture_graph"))
        if isinstance(self.task, str):
            raise ConfigError(None, f"task={self.task!r}: EnvConfig takes a task's TaskOptions "
                                    f"(bps_runtime.tasks.<name>.TaskOptions()); the name goes to "
                                    f"EnvConfig.from_kwargs(task=...) or make(task=...)")
        for name, kind in (("sensors", SensorConfig), ("cache", CacheOptions), ("episodes", EpisodeConfig)):
            _check_part(name, getattr(self, name), kind)

    @classmethod
    def from_kwargs(cls, dataset=None, *, split="train", num_envs=16, batch_size=None, device="cpu",
                    sensors=("depth",), resolution=(64, 64), cache=None, seed=0, renderer="embree",
                    episodes=None, normalize_depth=True, task=TASK_DEFAULTS, goal_pool=None,
                    capture_graph=False, scene_shard=None, threads=None, noise=None, camera=None,
                    lod="auto", categories=None) -> "EnvConfig":
        """The config of ``make()``'s keywords (``cache``: None, an int = slots, a dict of
        CacheOptions fields, or a CacheOptions; ``noise``: ``noise.presets.noise_options``'s forms;
        ``camera``: a dict of ``CAMERA_FIELDS``; ``lod``: ``SensorConfig.lod``)."""
        supply = SUPPLY_DEFAULTS
        if goal_pool is not None:   # SupplyOptions checks it
            supply = replace(supply, goal_pool=goal_pool)
        if not isinstance(sensors, (str, tuple, list)):
            raise ConfigError(None, f"sensors={sensors!r}: expected a name or a tuple / list of names from "
                                    "('depth', 'rgb', 'semantic')")
        kinds = (sensors,) if isinstance(sensors, str) else tuple(sensors)
        return cls(dataset=None if dataset is None else str(dataset), split=split, num_envs=num_envs,
                   batch_size=batch_size, seed=seed, device=str(device), threads=threads,
                   capture_graph=capture_graph,
                   sensors=SensorConfig(kinds,
                                        resolution,   # checked there (one int or (height, width))
                                        normalize_depth, renderer, lod=lod, **camera_fields(camera)),
                   task=task_options(task), cache=cache_options(cache),
                   episodes=EpisodeConfig(None if episodes is None else str(episodes), supply,
                                          None if scene_shard is None else tuple(scene_shard), categories),
                   noise=noise_for_sensors(noise, kinds))

    def cache_for_run(self) -> CacheOptions:
        """The cache options with the run's seed where none was given."""
        return self.cache if self.cache.seed is not None else replace(self.cache, seed=self.seed)

    def to_dict(self) -> dict:
        """Plain data (dicts, lists, numbers, strings): for checkpoints and logs."""
        return {**asdict(self), "task_name": spec_for(self.task).name}

    @classmethod
    def from_dict(cls, d: dict) -> "EnvConfig":
        """The inverse of ``to_dict``; an unknown key or a part of another shape is a ConfigError
        naming it (a config read back from a file: a typo is not dropped)."""
        if not isinstance(d, dict):
            raise ConfigError(None, f"EnvConfig.from_dict: expected a dict (EnvConfig.to_dict()'s), got {type(d).__name__}")
        d = dict(d)
        name = d.pop("task_name", TASKS[0])
        if name not in TASKS:
            raise ConfigError(None, f"task_name={name!r}: choose from {TASKS}")
        sub = {"sensors": SensorConfig, "task": task_spec(name).options, "cache": CacheOptions, "noise": NoiseOptions}
        _known_keys("EnvConfig", d, [f.name for f in fields(cls)])
        for k, t in sub.items():
            if k == "task" and k in d:   # a task's options name unknown keys themselves, with habitat-lab's names
                d[k] = t(**_tuples(_fields_dict(k, d[k])))
            elif k in d:
                d[k] = _from_fields(k, t, _tuples(_fields_dict(k, d[k])))
        if "episodes" in d:
            e = dict(_fields_dict("episodes", d["episodes"]))
            e["supply"] = _from_fields("episodes supply", SupplyOptions, _fields_dict("episodes supply", e.get("supply", {})))
            e["scene_shard"] = None if e.get("scene_shard") is None else tuple(e["scene_shard"])
            d["episodes"] = _from_fields("episodes", EpisodeConfig, e)
        return cls(**d)


def check_flag(value, what: str) -> bool:
    """``value`` as a bool (numpy's too); anything else ("no", 1, None) a ConfigError naming ``what``."""
    if not is_bool(value):
        raise ConfigError(None, f"{what}={value!r}: expected True or False")
    return bool(value)


def _check_part(name: str, value, kind) -> None:
    if not isinstance(value, kind):
        raise ConfigError(None, f"{name}={value!r}: expected a {kind.__name__} (EnvConfig.from_kwargs and make() "
                                f"also take the keyword forms)")


def _known_keys(what: str, d: dict, known) -> None:
    bad = [k for k in d if k not in known]
    if bad:
        hints = "".join(f"; {k!r}: {h}" for k in bad for h in [did_you_mean(k, known)] if h)
        raise ConfigError(None, f"{what}: unknown key(s) {', '.join(map(repr, bad))}{hints}")


def _fields_dict(name: str, value) -> dict:
    if not isinstance(value, dict):
        raise ConfigError(None, f"EnvConfig.from_dict: {name}={value!r}: expected a dict of its fields")
    return value


def _from_fields(name: str, kind, d: dict):
    """``kind(**d)``, its unknown keys named (with close matches) as a ConfigError."""
    _known_keys(f"EnvConfig.from_dict: {name}", d, [f.name for f in fields(kind)])
    return kind(**d)


MAX_SEED = 2**63 - 1


def check_seed(seed, what: str = "seed") -> int:
    """``seed`` as an int in [0, 2**63); a one-line ConfigError otherwise (-1, "abc", 1.5, True)."""
    if not is_int(seed):
        raise ConfigError(None, f"{what}={seed!r}: expected an int in [0, {MAX_SEED}]")
    if not 0 <= int(seed) <= MAX_SEED:
        raise ConfigError(None, f"{what}={seed!r}: expected an int in [0, {MAX_SEED}]")
    return int(seed)


def _tuples(d: dict) -> dict:
    return {k: tuple(v) if isinstance(v, list) else v for k, v in d.items()}


def camera_fields(camera) -> dict:
    """``camera`` (None or a dict of ``CAMERA_FIELDS``) checked: ConfigError naming unknown keys."""
    if camera is None:
        return {}
    bad = sorted(set(camera) - set(CAMERA_FIELDS)) if isinstance(camera, dict) else None
    if bad and "lod" in bad:
        raise ConfigError(None, f"camera={camera!r}: lod is make()'s own keyword (make(lod='auto'|'full'|level))")
    if bad is None or bad:
        raise ConfigError(None, f"camera={camera!r}: expected a dict of {', '.join(CAMERA_FIELDS)}")
    return dict(camera)


NOISY_SENSORS = ("depth", "rgb")   # NoiseOptions' sensor models, each named as its sensor


def check_noise_sensors(noise: NoiseOptions, kinds) -> None:
    """ConfigError for a sensor noise model on a sensor not in ``kinds``:
    it would be ignored (habitat-sim configures noise per sensor: none without the sensor)."""
    for k in NOISY_SENSORS:
        if getattr(noise, k) != "none" and k not in kinds:
            raise ConfigError(None, f"noise {k}={getattr(noise, k)!r} without the {k} sensor (sensors={tuple(kinds)}): "
                                    f"add {k!r} to sensors or leave its noise out")


def noise_for_sensors(value, kinds) -> NoiseOptions:
    """``make(noise=...)`` (``noise.presets.noise_options``'s forms) for sensors ``kinds``: a
    preset's sensor noise goes with its sensor (off where the sensor is not asked for: habitat
    configures noise per sensor); a model named outright for a missing sensor is kept, for
    ``EnvConfig``'s ``check_noise_sensors`` to refuse."""
    opts = noise_options(value)
    if isinstance(value, dict):
        named = set(value) - {"preset"}
    elif isinstance(value, str) and "=" in value:
        named = set(parse_noise_text(value))
    else:   # a preset name (its models follow the sensors), None, or a NoiseOptions (all named)
        named = set(NOISY_SENSORS) if isinstance(value, NoiseOptions) else set()
    return replace(opts, **{k: "none" for k in NOISY_SENSORS
                            if k not in kinds and k not in named and getattr(opts, k) != "none"})


def preset_kwargs(name: str) -> dict:
    """``make()``'s keywords of a named preset (``noise.presets.PRESETS``): the sensors, their size and
    camera (its tilt too), the task's rules and agent, the noise (docs/NOISE.md)."""
    p = preset(name)
    s, t = p["sensors"], p["task"]
    task = replace(task_spec(t["name"]).defaults, **{k: v for k, v in t.items() if k != "name"})
    return {"sensors": tuple(s["kinds"]), "resolution": tuple(s["resolution"]), "task": task, "noise": name,
            "camera": {k: s[k] for k in CAMERA_FIELDS if k in s}}


def task_options(task):
    """``make(task=...)`` as a task's options: a name (one of ``tasks.TASKS``: its defaults) or a
    task's ``TaskOptions``."""
    if isinstance(task, str):
        return task_spec(task).defaults
    spec_for(task)
    return task


def cache_options(cache) -> CacheOptions:
    """``make(cache=...)`` as CacheOptions: None (defaults), an int (slots), a dict of fields,
    or a CacheOptions; the seed stays None (the run's) unless given."""
    if cache is None:
        return CacheOptions(seed=None)
    if isinstance(cache, CacheOptions):
        return cache
    if is_int(cache):
        return CacheOptions(slots=cache, seed=None)
    if isinstance(cache, dict):
        try:
            return CacheOptions(**{"seed": None, **cache})
        except TypeError as e:
            raise ConfigError(None, f"cache={cache!r}: {e}") from None
    raise ConfigError(None, f"cache={cache!r}: expected None, an int (slots), a dict or CacheOptions")


def check_batching(num_envs, batch_size) -> tuple[int, int]:
    """(num_envs, batch_size) checked: positive ints, batch_size divides num_envs (None: num_envs);
    a bool or a float (``True``, ``4.0``) is a ConfigError, as for ``seed``."""
    if not is_int(num_envs) or num_envs < 1:
        raise ConfigError(None, f"num_envs={num_envs!r}: expected a positive int")
    n = int(num_envs)
    b = n if batch_size is None else batch_size
    if not is_int(b) or b < 1 or b > n or n % b:
        raise ConfigError(None, f"batch_size={batch_size!r}: must divide num_envs={n} "
                                f"(e.g. {n // 2} for two alternating halves, or None for all)")
    return n, int(b)
