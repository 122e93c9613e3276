"""The step state, declared once: a ``Schema`` of ``Field`` s (name, dtype, per-env / per-ring-entry,
state or output, owning task) from which the Warp structs (``warp_struct``), the torch tensors
(``allocate``), the Warp views of them (``bind``) and the env's per-group views (``views``) are
all made, as Madrona declares a component once.

Contract: dtypes are "int32", "int64", "float32", "uint8", "bool" (uint8 on the device, viewed
as torch.bool), "vec3" (float32 [.., 3], wp.vec3 in kernels); ``shape`` is the per-env trailing
shape (a str names a size given at ``allocate``). ``per="env"`` fields are [N, *shape]; ``per="ring"`` fields are [QUEUE_DEPTH, N, *shape]
(queued episodes). A task adds its fields with ``Schema.extend`` and its kernels read them by
name from the generated structs (``State`` for kind "state", ``Out`` for kind "out").
"""
from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import torch

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
            raise ValueError(f"field {self.name!r}: bad dtype / kind / per ({self.dtype}, {self.kind}, {self.per})")


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
                raise ValueError(f"field {f.kind}.{f.name} declared twice")
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


# the fields every task has: where each env is, its queued episodes, the step's generic outputs
CORE = (
    Field("scene_index", "int32", doc="resident scene index of the running episode"),
    Field("pos", "vec3"), Field("yaw", "float32"),
    Field("row", "int32", doc="the episode's goal distance-field row"),
    Field("steps", "int32"), Field("total", "float32", doc="return so far"),
    Field("head", "int32", doc="episodes started so far (ring position)"),
    Field("r_scene_index", "int32", per="ring"), Field("r_pos", "vec3", per="ring"),
    Field("r_yaw", "float32", per="ring"), Field("r_row", "int32", per="ring"),
    Field("reward", "float32", "out"), Field("done", "bool", "out"), Field("truncated", "bool", "out"),
    Field("position", "vec3", "out"), Field("rotation", "float32", "out", shape=(4,)),
    Field("scene_index", "int64", "out"),
    Field("ep_return", "float32", "out", doc="the finished episode's return (0 where not done)"),
    Field("ep_length", "int32", "out"),
    Field("epno", "int32", "out", doc="number of the episode now running"),
)
