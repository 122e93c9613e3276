"""URDF articulated objects: every link's visual meshes placed by the joint tree at a pose.

``read_urdf`` parses links (visual ``origin`` + ``mesh filename`` / ``scale``) and joints
(``type``, ``parent``, ``child``, ``origin``, ``axis``); ``link_visuals`` walks the tree from
its root link and returns ``(link, mesh path, 4x4 link-visual -> object transform)``.
habitat-sim's rules (esp/metadata/URDFParser.cpp, physics/bullet/BulletArticulatedObject.cpp):
``rpy`` is Rz(yaw) Ry(pitch) Rx(roll); a global (uniform) scale multiplies every joint and
visual origin's translation and every mesh scale; joint positions default to 0 and an
instance's ``initial_joint_pose`` sets them in Bullet's link order (depth first from the root,
siblings by joint name; ``link_order`` ``urdf_order``: links in file order); revolute,
continuous, prismatic joints take one value, spherical four, fixed none.
Only mesh visuals are rendered (primitive visuals are counted in ``skipped_visuals``). A link
with two parents, a joint naming an unknown link, a cycle or several roots is a DatasetError;
the walk is iterative, so a deep chain cannot exhaust the stack. Files are capped at 16 MiB,
links at 4096, visuals at ``MAX_VISUALS`` (counted before any is built).
"""
from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..composed_section import MAX_INSTANCES
from ..errors import DatasetError
from .model import affine, axis_angle_matrix, rpy_matrix

MAX_URDF_BYTES = 16 << 20
MAX_LINKS = 4096
MAX_VISUALS = MAX_INSTANCES   # a scene's instance cap: one URDF cannot exceed it alone
DOF = {"revolute": 1, "continuous": 1, "prismatic": 1, "spherical": 4, "fixed": 0,
       "floating": 0, "planar": 0}


@dataclass
class Visual:
    origin: np.ndarray            # 4x4, unscaled
    mesh: str | None              # filename as written (None: a primitive)
    scale: np.ndarray


@dataclass
class Joint:
    name: str
    type: str
    parent: str
    child: str
    origin: np.ndarray
    axis: np.ndarray


@dataclass
class Urdf:
    path: Path
    name: str
    links: dict[str, list[Visual]] = field(default_factory=dict)
    joints: list[Joint] = field(default_factory=list)


def _vec(el, attr: str, default, path) -> np.ndarray:
    s = el.get(attr) if el is not None else None
    if s is None:
        return np.array(default, np.float64)
    try:
        v = np.array([float(x) for x in s.replace(",", " ").split()], np.float64)  # habitat reads "1, 1, 1" too
    except ValueError:
        raise DatasetError(path, f"<{el.tag} {attr}={s!r}>: not numbers") from None
    if v.shape != (len(default),) or not np.isfinite(v).all():
        raise DatasetError(path, f"<{el.tag} {attr}={s!r}>: expected {len(default)} finite numbers")
    return v


def _origin(el, path) -> np.ndarray:
    o = el.find("origin") if el is not None else None
    return affine(rpy_matrix(_vec(o, "rpy", (0, 0, 0), path)), _vec(o, "xyz", (0, 0, 0), path))


def read_urdf(path: str | os.PathLike) -> Urdf:
    """Parse a URDF file (links, visuals, joints)."""
    path = Path(path)
    try:
        if path.stat().st_size > MAX_URDF_BYTES:
            raise DatasetError(path, "URDF larger than the 16 MiB cap")
        root = ET.fromstring(path.read_bytes())
    except FileNotFoundError:
        raise DatasetError(path, "no such URDF file") from None
    except (OSError, ET.ParseError) as e:
        raise DatasetError(path, f"not a readable URDF file: {e}") from None
    if root.tag != "robot":
        raise DatasetError(path, "not a URDF file (no <robot> root)")
    n_vis = sum(1 for _ in root.iter("visual"))
    if n_vis > MAX_VISUALS:   # counted before any is built: each becomes a placed instance
        raise DatasetError(path, f"{n_vis} link visuals exceed the cap of {MAX_VISUALS}")
    u = Urdf(path, root.get("name", path.stem))
    for link in root.findall("link"):
        name = link.get("name")
        if not name or name in u.links:
            raise DatasetError(path, f"link without a name or named twice: {name!r}")
        vis = []
        for v in link.findall("visual"):
            mesh = v.find("geometry/mesh")
            vis.append(Visual(_origin(v, path), None if mesh is None else mesh.get("filename"),
                              _vec(mesh, "scale", (1, 1, 1), path)))
        u.links[name] = vis
        if len(u.links) > MAX_LINKS:
            raise DatasetError(path, f"more than {MAX_LINKS} links")
    for j in root.findall("joint"):
        jt = j.get("type", "")
        if jt not in DOF:
            raise DatasetError(path, f"joint {j.get('name')!r}: unknown type {jt!r}")
        p, c = j.find("parent"), j.find("child")
        pn, cn = (None if p is None else p.get("link")), (None if c is None else c.get("link"))
        for ln in (pn, cn):
            if ln not in u.links:
                raise DatasetError(path, f"joint {j.get('name')!r} names an unknown link {ln!r}")
        u.joints.append(Joint(j.get("name", ""), jt, pn, cn, _origin(j, path),
                              _vec(j.find("axis"), "xyz", (1, 0, 0), path)))
    return u


def _tree(u: Urdf) -> tuple[str, dict[str, list[Joint]]]:
    """(root link, {link: child joints in file order}); checks parents, roots and cycles."""
    parent_of: dict[str, str] = {}
    children: dict[str, list[Joint]] = {n: [] for n in u.links}
    for j in u.joints:
        if j.child in parent_of:
            raise DatasetError(u.path, f"link {j.child!r} has two parent joints (a cycle or a graph, not a tree)")
        parent_of[j.child] = j.name
        children[j.parent].append(j)
    roots = [n for n in u.links if n not in parent_of]
    if len(roots) != 1:
        raise DatasetError(u.path, f"{'no root link: the joints form a cycle' if not roots else f'several root links {roots[:4]}'}")
    return roots[0], children


def _dof_offsets(u: Urdf, root: str, children: dict[str, list[Joint]], order: str) -> dict[str, int]:
    """{joint name: index of its first value in a joint pose}: habitat-sim's (Bullet's) link
    order, ``tree_traversal`` (default: depth first from the root, siblings by joint name, as
    its parser keeps joints in a name-sorted map) or ``urdf_order`` (links as in the file)."""
    if order == "urdf_order":
        by_child = {j.child: j for j in u.joints}
        seq = [by_child[ln] for ln in u.links if ln in by_child]
    else:
        seq, stack = [], [root]
        while stack:
            item = stack.pop()
            if isinstance(item, Joint):
                seq.append(item)
                item = item.child
            stack.extend(reversed(sorted(children[item], key=lambda j: j.name)))
    out, k = {}, 0
    for j in seq:
        out[j.name] = k
        k += DOF[j.type]
    return out


def link_poses(u: Urdf, joint_pose=(), scale: float = 1.0, link_order: str = "tree_traversal"
               ) -> list[tuple[str, np.ndarray]]:
    """``[(link, 4x4 link -> object)]`` at ``joint_pose`` (values in ``link_order``; missing: 0)."""
    root, children = _tree(u)
    q = [float(x) for x in joint_pose]
    first = _dof_offsets(u, root, children, link_order)
    out, stack = [], [(root, np.eye(4))]
    while stack:
        link, m = stack.pop()
        out.append((link, m))
        pending = []
        for j in children[link]:
            o = j.origin.copy()
            o[:3, 3] *= scale
            n, k = DOF[j.type], first.get(j.name, 0)
            vals = (q[k:k + n] + [0.0] * n)[:n]
            motion = np.eye(4)
            if j.type in ("revolute", "continuous") and vals[0]:
                motion[:3, :3] = axis_angle_matrix(j.axis, vals[0])
            elif j.type == "prismatic" and vals[0]:
                motion[:3, 3] = j.axis / np.linalg.norm(j.axis) * vals[0] * scale
            pending.append((j.child, m @ o @ motion))
        stack.extend(reversed(pending))
    if len(out) != len(u.links):
        raise DatasetError(u.path, "links unreachable from the root (a joint cycle)")
    return out


def mesh_paths(u: Urdf) -> list[tuple[str, Path]]:
    """``[(link, mesh file)]`` of every mesh visual, links in file order: what ``link_visuals``
    places (one instance each), known without placing any."""
    return [(link, _mesh_path(u, v.mesh)) for link, vis in u.links.items() for v in vis if v.mesh]


def _mesh_path(u: Urdf, mesh: str) -> Path:
    return u.path.parent / (mesh.split("://", 1)[-1] if mesh.startswith("package://") else mesh)


def link_visuals(u: Urdf, joint_pose=(), scale: float = 1.0, link_order: str = "tree_traversal"):
    """``([(link, mesh path, 4x4 mesh -> object)], skipped primitive visuals)``."""
    out, skipped = [], 0
    for link, m in link_poses(u, joint_pose, scale, link_order):
        for v in u.links[link]:
            if not v.mesh:
                skipped += 1
                continue
            o = v.origin.copy()
            o[:3, 3] *= scale
            out.append((link, _mesh_path(u, v.mesh), m @ o @ affine(scale=v.scale * scale)))
    return out, skipped
