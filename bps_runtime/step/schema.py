"""The step state, declared once: a ``Schema`` of ``Field`` s (name, dtype, per-env / per-ring-entry,
state or output, owning task) from which the Warp structs (``warp_struct``), the torch tensors
(``allocate``), the Warp views of them (``bind``) and the env's per-group views (``views``) are
all made, as Madrona declares a component once; the staging table of queued episodes by column
name (``Column``, ``Staging``; ``STAGE``: the columns every task stages first); a task's
observations (``Observation``: output field, space and value from one declaration).

Contract: dtypes are "int32", "int64", "float32", "uint8", "bool" (uint8 on the device, viewed
as torch.bool), "vec3" (float32 [.., 3], wp.vec3 in kernels); ``shape`` is the per-env trailing
shape (a str names a size given at ``allocate``). ``per="env"`` fields are [N, *shape]; ``per="ring"``
fields are [RING_SIZE, N, *shape] (queued episodes). ``CORE`` holds every task's fields (the
shared navigation ones too); a task adds its own with ``Schema.extend`` and its kernels read
them by name from the generated structs (``State`` for kind "state", ``Out`` for kind "out").
"""
from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import torch

from bps_assets.errors import ConfigError

class SchemaError(ConfigError):
    """A step schema declared wrongly (a field or staging column twice, a bad dtype): a bug in a
    task module, named when the module is imported."""

    def __init__(self, message: str):
        super().__init__(None, message)


DTYPES = ("int32", "int64", "float32", "bool", "uint8", "vec3")
_TORCH = {"int32": torch.int32, "int64": torch.int64, "float32": torch.float32, "bool": torch.uint8,
          "uint8": torch.uint8, "vec3": torch.float32}


def item_bytes(dtype: str) -> int:
    """Bytes of one element of a field of ``dtype`` per env and shape entry (vec3: three floats)."""
    return _TORCH[dtype].itemsize * (3 if dtype == "vec3" else 1)


@dataclass(frozen=True)
class Field:
    """One array of the step state: ``kind`` "state" (kernels read and write it across steps) or
    "out" (a step's outputs), ``per`` "env" or "ring", ``owner`` "core" or a task's name."""

    name: str
    dtype: str
    kind: str = "state"
    per: str = "env"
    shape: tuple = ()
    owner: str = "core"
    doc: str = ""

    def __post_init__(self):
        if self.dtype not in DTYPES or self.kind not in ("state", "out") or self.per not in ("env", "ring"):
            raise SchemaError(f"field {self.name!r}: bad dtype / kind / per ({self.dtype}, {self.kind}, {self.per})")


class Schema:
    """An ordered set of fields; names are unique within a kind."""

    def __init__(self, fields=()):
        self.fields: tuple[Field, ...] = ()
        self.extend(fields)

    def extend(self, fields) -> "Schema":
        """Add fields (a task's); a (kind, name) declared twice is an error."""
        names = {(f.kind, f.name) for f in self.fields}
        for f in fields:
            if (f.kind, f.name) in names:
                raise SchemaError(f"field {f.kind}.{f.name} declared twice")
            names.add((f.kind, f.name))
        self.fields = self.fields + tuple(fields)
        return self

    def of(self, kind: str) -> tuple[Field, ...]:
        """The fields of one kind ("state" or "out"), in declaration order."""
        return tuple(f for f in self.fields if f.kind == kind)

    def __iter__(self):
        return iter(self.fields)


def _warp_type(wp, f: Field):
    base = {"int32": wp.int32, "int64": wp.int64, "float32": wp.float32, "bool": wp.uint8, "uint8": wp.uint8,
            "vec3": wp.vec3}[f.dtype]
    dims = (1 if f.per == "ring" else 0) + (len(f.shape) if f.dtype != "vec3" else 0) + 1
    return {1: wp.array, 2: wp.array2d, 3: wp.array3d}[dims](dtype=base)


def warp_struct(wp, name: str, fields, module: str, doc: str = ""):
    """A ``wp.struct`` named ``name`` with one array per field, defined in ``module`` (the Warp
    module of the kernels that use it)."""
    cls = type(name, (), {"__annotations__": {f.name: _warp_type(wp, f) for f in fields}, "__module__": module,
                          "__qualname__": name, "__doc__": doc})
    return wp.struct(cls)


def allocate(fields, num_envs: int, depth: int, device, sizes: dict | None = None) -> dict[str, torch.Tensor]:
    """Zeroed torch tensors of every field: [N, *shape] or [depth, N, *shape] (vec3: [.., 3]); a
    named dimension in ``shape`` (a str) takes its size from ``sizes``."""
    out = {}
    for f in fields:
        dims = tuple(int((sizes or {})[d]) if isinstance(d, str) else d for d in f.shape)
        shape = ((depth,) if f.per == "ring" else ()) + (num_envs,) + dims + ((3,) if f.dtype == "vec3" else ())
        out[f.name] = torch.zeros(shape, dtype=_TORCH[f.dtype], device=device)
    return out


def bind(wp, struct, fields, tensors: dict):
    """An instance of ``struct`` whose arrays are zero-copy Warp views of ``tensors``."""
    s = struct()
    for f in fields:
        t = tensors[f.name]
        setattr(s, f.name, wp.from_torch(t, dtype=wp.vec3) if f.dtype == "vec3" else wp.from_torch(t))
    return s


def views(fields, tensors: dict, sl: slice) -> SimpleNamespace:
    """The env slice ``sl`` of every per-env field (bool fields viewed as torch.bool)."""
    out = {}
    for f in fields:
        if f.per == "env":
            t = tensors[f.name][sl]
            out[f.name] = t.view(torch.bool) if f.dtype == "bool" else t
    return SimpleNamespace(**out)


# the fields every task has: where each env is, its queued episodes, the distance to its goal
# (the generic kernels of step/kernels.py write these), the step's generic outputs
CORE = (
    Field("scene_index", "int32", doc="resident scene index of the running episode"),
    Field("pos", "vec3"), Field("yaw", "float32"),
    Field("row", "int32", doc="the episode's goal distance-field row"),
    Field("steps", "int32"), Field("total", "float32", doc="return so far"),
    Field("head", "int32", doc="episodes started so far (ring position)"),
    Field("d0", "float32", doc="start geodesic distance"), Field("d_prev", "float32"),
    Field("path_len", "float32"),
    Field("noise_key", "int32", doc="the env's noise key (noise.rng.env_keys of the run's seed)"),
    Field("noise_t", "int32", doc="the env's steps since the env was made: its noise streams' counter"),
    Field("r_scene_index", "int32", per="ring"), Field("r_pos", "vec3", per="ring"),
    Field("r_yaw", "float32", per="ring"), Field("r_row", "int32", per="ring"),
    Field("r_goal", "vec3", per="ring", doc="the goal point (ObjectNav-like tasks: a goal object's)"),
    Field("reward", "float32", "out"), Field("done", "bool", "out"), Field("truncated", "bool", "out"),
    Field("position", "vec3", "out"), Field("rotation", "float32", "out", shape=(4,)),
    Field("scene_index", "int64", "out"),
    Field("success", "bool", "out"), Field("spl", "float32", "out"),
    Field("distance_to_goal", "float32", "out"),
    Field("ep_return", "float32", "out", doc="the finished episode's return (0 where not done)"),
    Field("ep_length", "int32", "out"),
    Field("ep_dist", "float32", "out"), Field("ep_d0", "float32", "out"), Field("ep_path", "float32", "out"),
    Field("epno", "int32", "out", doc="number of the episode now running"),
)


# ---------------------------------------------------------------------------------- staging
@dataclass(frozen=True)
class Column:
    """One staging column of a queued episode: ``dtype`` "int32" or "float32", ``width`` values,
    filled from the prepared episodes' attribute ``source`` (default: ``name``; None there: 0),
    written by the refill kernel into the ring field ``ring`` (None: host only, e.g. ``env``)."""

    name: str
    dtype: str = "int32"
    width: int = 1
    ring: str | None = None
    source: str | None = None

    def __post_init__(self):
        if self.dtype not in ("int32", "float32") or self.width < 1:
            raise SchemaError(f"staging column {self.name!r}: bad dtype / width ({self.dtype}, {self.width})")


class Staging:
    """The staging table of queued episodes, by column name: an int32 table and a float32 table
    whose column positions follow from the declaration order (``col(name)``: the first column
    of ``name`` in its table). The host fills rows by name (``fill``); the refill kernels read
    the positions as constants (``step.kernels.ring_entry`` for ``STAGE``, a task's own columns
    through ``col``)."""

    def __init__(self, columns):
        self.columns: tuple[Column, ...] = tuple(columns)
        self._at: dict[str, tuple[int, int, int]] = {}   # name -> (table 0 int / 1 float, start, width)
        widths = [0, 0]
        for c in self.columns:
            if c.name in self._at:
                raise SchemaError(f"staging column {c.name!r} declared twice")
            t = 0 if c.dtype == "int32" else 1
            self._at[c.name] = (t, widths[t], c.width)
            widths[t] += c.width
        self.ints, self.floats = widths

    def extend(self, columns) -> "Staging":
        """These columns, then ``columns`` (a task's own)."""
        return Staging(self.columns + tuple(columns))

    def col(self, name: str) -> int:
        """The position of column ``name``'s first value in its table."""
        return self._at[name][1]

    def rows(self, n: int):
        """Uninitialised (int32 [n, ints], float32 [n, floats]) tables."""
        return np.empty((n, self.ints), np.int32), np.empty((n, self.floats), np.float32)

    def fill(self, ints: np.ndarray, floats: np.ndarray, episodes, **values) -> None:
        """Every column of the rows: ``values[name]`` where given, else the attribute ``source`` of
        ``episodes`` (the prepared episodes; None: 0)."""
        for c in self.columns:
            t, a, w = self._at[c.name]
            v = values[c.name] if c.name in values else getattr(episodes, c.source or c.name)
            tab = ints if t == 0 else floats
            if w == 1:
                tab[:, a] = 0 if v is None else v
            else:
                tab[:, a:a + w] = 0 if v is None else v


# the columns every task stages first: the env and its ring index (host only), then what
# ``step.kernels.ring_entry`` writes into the ring
STAGE = Staging((
    Column("env"), Column("ring"), Column("scene_index", ring="r_scene_index"),
    Column("row", ring="r_row", source="rows"),
    Column("start", "float32", 3, ring="r_pos"), Column("yaw", "float32", ring="r_yaw"),
    Column("goal", "float32", 3, ring="r_goal"),
))


# ---------------------------------------------------------------------------------- observations
@dataclass(frozen=True)
class Observation:
    """One task observation, declared once: its output field (``field()``), its space (shape,
    dtype, low, high; "H" / "W" in ``shape``: the sensors' height / width) and its value
    (``view``: the field's group view in the observation's shape). ``flat``: the field is
    stored flat under that named size (e.g. a goal image of H x W x 3 bytes). ``source``: the
    output field it reads when that is named otherwise (one field, two tasks' names for it).
    ``goal_id_bound``: its high is the dataset's largest goal id where the env knows it (``high``
    is the default the static spaces give)."""

    name: str
    shape: tuple
    dtype: str
    low: tuple
    high: tuple
    flat: str | None = None
    source: str | None = None
    goal_id_bound: bool = False

    def high_for(self, max_goal_id: int | None) -> tuple:
        """The space's high: ``max_goal_id`` for a goal-id bounded observation when given."""
        if self.goal_id_bound and max_goal_id is not None:
            return (int(max_goal_id),) * len(self.high)
        return self.high

    @property
    def field_name(self) -> str:
        """The name of the output field it reads."""
        return self.source or self.name

    def field(self, owner: str) -> Field:
        """The output field the kernels write."""
        return Field(self.field_name, self.dtype, "out", shape=(self.flat,) if self.flat else self.shape, owner=owner)

    def space_shape(self, h: int, w: int) -> tuple:
        """The per-env shape for sensors of height ``h`` and width ``w``."""
        return tuple(h if d == "H" else w if d == "W" else d for d in self.shape)

    def view(self, v, h: int, w: int):
        """Its value in a group's output views ``v`` ([B, *shape])."""
        t = getattr(v, self.field_name)
        return t.view(t.shape[0], *self.space_shape(h, w)) if self.flat else t
