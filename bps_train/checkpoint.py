"""Checkpoints: tensors and plain data only, loaded with ``torch.load(weights_only=True)``.

A checkpoint is a pickle, which can run any code when loaded, so nothing but tensors, numbers,
strings, lists, tuples and dicts goes in, and loading uses torch's restricted unpickler. Anything
else -- a missing file, a damaged zip, a pickle naming a function, a dict of the wrong shape, a
``checksum`` (version 4: of the whole payload) that does not match, non-finite weights, counters
or RNG states out of range, weights that do not fit (``restore``) -- is one typed error naming
the file (docs/TRAINING.md). A save is serialized in memory and written through ``atomic_write``:
a full disk or a file size limit is an OutputWriteError naming OUT_DIR; the previous one stays.

``identity(args, dataset, world)`` is what a resumed run must share with the checkpoint: the
dataset (its content's sha256; split, episodes), the model, the number of environments, the
batch's shape (rollout steps, minibatches, ranks: ``--total-steps`` counts frames) and the seed.
Total steps, learning-rate schedule, logging, threads and device may change.
"""
from __future__ import annotations

import errno
import hashlib
import io
import math
import pickle
import random
import re
import struct
import zipfile
from pathlib import Path

import numpy as np
import torch

from bps_assets.container import atomic_write, remove_stale_temps
from bps_assets.errors import BpsError, ConfigError, CorruptFileError, InputError, OutputWriteError, is_real
from bps_assets.pipeline.manifest import content_sha256, load_manifest
from bps_assets.readers.semantic_categories import objectnav_hm3d
from bps_runtime.noise.options import DEFAULTS as NO_NOISE

from .counters import MAX_STEP, int_in

FORMAT = "bps-train checkpoint"
VERSION = 4
READS = (2, 3, 4)  # 2: no checksum (finite values checked); 3: tensors only; 4: whole payload
MAX_UPDATE, MAX_WORLD = 2**31 - 1, 1 << 16   # counters beyond these (and MAX_STEP) are damage
# Settings a resumed run must share with its checkpoint, in the order the error lists them.
IDENTITY_ARGS = ("task", "split", "episodes", "sensor", "resolution", "hidden", "width", "num_envs",
                 "rollout_steps", "minibatches", "seed")
# keys added to the identity later: a checkpoint without them is read from its saved args / world,
# or has the value every run had before the key was saved
IDENTITY_DEFAULTS = {"task": "pointnav"}
LATER_KEYS = ("rollout_steps", "minibatches", "seed", "world")
_REQUIRED = {"format": str, "version": int, "policy": dict, "optimizer": dict, "update": int,
             "global_step": int, "seconds": float, "world": int, "args": dict, "identity": dict, "rng": list}


def legacy_manifest_sha256(path) -> str:
    """sha256 of the manifest's bytes: the dataset's identity in checkpoints saved before
    ``dataset_sha256`` (still accepted on resume by ``check_same_run``)."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError as e:
        raise InputError(path, f"cannot read the dataset manifest ({e.strerror or e})") from None


def dataset_sha256(path) -> str:
    """The dataset's identity wherever its folder lives: the sha256 of its content
    (``manifest.content_sha256``: the outputs' sha256s), not of the manifest's bytes, which a
    rerun of preprocess that changed nothing rewrites (its creation time)."""
    return content_sha256(load_manifest(path).doc)


def identity(args, dataset_id: str, world: int = 1) -> dict:
    """What a resumed run must share with its checkpoint (``check_same_run``): the dataset
    (``dataset_id``: its ``dataset_sha256``), the ``IDENTITY_ARGS`` and the number of ranks (``world``).
    ``--episodes`` is kept both resolved and as typed (``episodes_typed``): either matching resumes."""
    out = {"dataset_sha256": dataset_id, **{k: getattr(args, k) for k in IDENTITY_ARGS}, "world": world}
    out["episodes_typed"], out["episodes"] = out["episodes"], episodes_id(out["episodes"])
    if getattr(args, "noise", ""):   # only with noise: a noiseless run keeps the identity it had
        out["noise_rules"] = NOISE_RULES
    if _episode_changes(out["task"], out["episodes"], 0):   # only where a change applies, as noise_rules
        out["episode_rules"] = EPISODE_RULES
    return out


# How noise is applied, versioned: a noisy checkpoint records the version it was trained under
# ("noise_rules"; none: 1). Each later version's changes: (applies to a run of this task (None:
# any) and noise, what changed). A resume or eval of an older one prints them (``noise_note``).
NOISE_RULES = 2
NOISE_CHANGES = {2: ((None, lambda n: n.depth == "redwood",
                      "Redwood depth noise is now added before the depth range's clip, as habitat-sim's (9ba46be)"),
                     ("imagenav", lambda n: n.rgb_on,
                      "ImageNav's goal image now gets the RGB noise, as habitat's (fee0483)"))}


def noise_note(path, ckpt: dict) -> str:
    """One line naming what ``NOISE_CHANGES`` changed for the checkpoint's noise since the rules
    it was trained under; "" when nothing did (no noise, or a current checkpoint). Not a
    refusal: the same settings still run, the policy sees slightly other noise."""
    from bps_runtime.noise.presets import noise_options

    args = ckpt["args"]
    if not args.get("noise"):
        return ""
    noise, task = noise_options(args["noise"]), args.get("task", "pointnav")
    since = ckpt["identity"].get("noise_rules", 1)
    changed = [what for v in range(since + 1, NOISE_RULES + 1) for t, applies, what in NOISE_CHANGES.get(v, ())
               if t in (None, task) and applies(noise)]
    if not changed:
        return ""
    return (f"bps-train: note: {path} was trained with --noise {args['noise']} under older noise rules: "
            + "; ".join(changed) + " (no refusal: the policy now sees slightly other noise)")


# How episode files are read, versioned as the noise rules: a run on episode files (``--episodes``
# dataset or FILE) of a task a change touches records the version ("episode_rules"; none: 1).
# Each later version's changes: (applies to a run of this task, what changed); ``episode_note``.
EPISODE_RULES = 2
EPISODE_CHANGES = {2: (("imagenav", "ImageNav's goal heading of an episode whose id is a JSON integer is now "
                                    "habitat-lab's draw (RandomState(abs(hash(id)) % 2**32)), not one seeded by "
                                    "crc32 of the id's text: such episodes show other goal images (a479ed0, "
                                    "2026-11-27; string ids keep theirs)"),)}


def _episode_changes(task: str, source, since: int) -> list[str]:
    """What ``EPISODE_CHANGES`` changed after version ``since`` for a run of ``task`` on
    ``source`` (sampled episodes: nothing, their goals are drawn, not read)."""
    if source in (None, "sample"):
        return []
    return [what for v in range(since + 1, EPISODE_RULES + 1) for t, what in EPISODE_CHANGES.get(v, ())
            if t in (None, task)]


def episode_note(path, ckpt: dict) -> str:
    """One line naming what ``EPISODE_CHANGES`` changed for the checkpoint's training episodes
    since the rules it was trained under; "" when nothing did. Not a refusal: the same
    episodes still run, some look other to the policy."""
    args = ckpt["args"]
    source = args.get("episodes", "sample")
    changed = _episode_changes(args.get("task", "pointnav"), source,
                               ckpt["identity"].get("episode_rules", 1))
    if not changed:
        return ""
    files = "the split's episode files" if source == "dataset" else source
    return (f"bps-train: note: {path} was trained on the episodes of {files} under older episode rules: "
            + "; ".join(changed) + " (no refusal: where their ids are integers the policy now sees "
            "other goal images than it was trained on)")


def episodes_id(source):
    """``--episodes`` (an env config's episode source) as the identity holds it: sample, dataset
    or None as they are; an episode file as the resolved path of the file it is read from
    (``split_file_of``), so the same file named relative, absolute, through a link, or as its split
    folder or content folder is the same run. An older checkpoint's id (the path as typed, or
    resolved but not through ``split_file_of``) goes through it again on resume (``saved_identity``);
    a relative one resolves against this run's working folder (where such a run was resumed from)."""
    from bps_assets.nav.episodes import split_file_of

    if source in (None, "sample", "dataset") or not isinstance(source, str):
        return source
    return str(split_file_of(source).resolve())


def layout(groups: int, threads: int) -> dict:
    """A run's layout per rank, saved in its identity ("layout") and compared on resume by
    ``layout_note``: env groups per rank, and the rank's CPU threads (0: every usable core)."""
    return {"groups": groups, "threads": threads}


def saved_layout(ckpt: dict) -> tuple[dict, bool]:
    """(the checkpoint's ``layout``, whether it recorded one). For one that records none, the rule
    of bps-train of 625ac9c and before: two groups when ``--double-buffer`` and an even NUM_ENVS
    >= 2, and every rank on ``--threads`` (0: every core, however many ranks); bps-train of eef6654
    to 8e960f4 recorded none either but had the one-core rule (``layout_note``'s ``one_core``)."""
    got = ckpt["identity"].get("layout")
    if isinstance(got, dict):
        return got, True
    args = ckpt["args"]
    n = args.get("num_envs", 0)
    two = args.get("double_buffer", True) is not False and n >= 2 and n % 2 == 0
    return layout(2 if two else 1, args.get("threads", 0)), False


def _layout_text(lay: dict) -> str:
    threads = lay.get("threads")
    return f"{lay.get('groups')} env group(s) per rank on " + (f"{threads} thread(s)" if threads else "every core")


def layout_note(path, ckpt: dict, have: dict, one_core: dict | None = None) -> str:
    """One line when the checkpoint's layout (``saved_layout``) differs from this run's ``have``;
    "" otherwise. A checkpoint that records none ran under either older rule: 625ac9c's or, given
    as ``one_core``, eef6654's for its saved args on this host (``train.one_core_rule_layout``;
    None: not known); "" when ``have`` matches either. Not a refusal: neither is in the env
    identity (the weights, optimizer and counters resume as saved; the episode streams and the
    speed follow the new layout)."""
    saved, recorded = saved_layout(ckpt)
    older = [saved] if recorded or one_core in (None, saved) else [saved, one_core]
    if have in older:
        return ""
    if recorded:
        then = f"ran with {_layout_text(saved)}"
    elif len(older) == 1:
        also = "" if one_core is None else ", and of eef6654 to 8e960f4,"
        then = f"does not record its layout: bps-train of 625ac9c and before{also} ran it with {_layout_text(saved)}"
    else:
        then = (f"does not record its layout: bps-train of 625ac9c and before ran it with {_layout_text(saved)}, "
                f"of eef6654 to 8e960f4 (the one-core rule) with {_layout_text(one_core)}")
    return (f"bps-train: note: {path} {then}; this run has {_layout_text(have)} "
            "(--double-buffer, --threads and the CPU cores per torchrun rank decide; no refusal: the weights, "
            "optimizer and counters resume as saved, the episode streams and the speed follow this layout)")


def saved_identity(ckpt: dict) -> dict:
    """The checkpoint's identity, with the keys a checkpoint saved before them lacks: the
    ``LATER_KEYS`` taken from its saved args and rank count, the ``IDENTITY_DEFAULTS`` (what that
    run had), and an ObjectNav run's ``goal_categories`` (``old_goal_categories``); episode
    files as ``episodes_id`` (older checkpoints saved the path as typed), and ``episodes_typed``
    from the saved args where the identity lacks it."""
    old = {**IDENTITY_DEFAULTS, **{k: ckpt["args"][k] for k in LATER_KEYS if k in ckpt["args"]}, "world": ckpt["world"]}
    out = {**old, **ckpt["identity"]}
    if "episodes" in out:
        out.setdefault("episodes_typed", ckpt["args"].get("episodes", out["episodes"]))
        out["episodes"] = episodes_id(out["episodes"])
    env = out.get("env")
    if isinstance(env, dict) and isinstance(env.get("episodes"), dict):
        out["env"] = {**env, "episodes": {**env["episodes"], "source": episodes_id(env["episodes"].get("source"))}}
    if "goal_categories" not in out:
        out["goal_categories"] = old_goal_categories(out)
    return out


def old_goal_categories(ident: dict) -> dict | None:
    """The category map of a checkpoint saved before the map was recorded (2026-11-27): an
    ObjectNav run on sampled episodes had habitat's six HM3D ids; one on an episode file (or a
    split folder) had that dataset's map, read from its top-level maps while it is there (None when
    it is gone or unreadable: unknown, not checked; ``categories_note`` says so); other tasks have none."""
    if ident.get("task") != "objectnav":
        return None
    source = ident.get("episodes", "sample")
    if source == "sample":
        return objectnav_hm3d()
    if not isinstance(source, str) or source == "dataset" or not Path(source).exists():
        return None
    from bps_assets.nav.objectnav_files import read_category_map

    try:   # only the maps (the split file's): the episodes are read once, by the run's env
        return read_category_map(source)
    except BpsError:
        return None


def categories_note(path, ident: dict) -> str:
    """One line when ``ident`` (a ``saved_identity``) is an ObjectNav run whose category map is
    unknown (an episode file's, not recorded, the file gone or unreadable): its goal ids then go
    unchecked, and the line names the flags that give episodes of the policy's map; "" otherwise."""
    if ident.get("task") != "objectnav" or ident.get("goal_categories") is not None:
        return ""
    return (f"bps-train: note: {path} was trained on the episode file {ident.get('episodes')}, whose goal "
            "category map checkpoints did not record before 2026-11-27, and that file (or folder) is gone or unreadable: "
            "the map the policy learned is unknown and this run's category ids are not checked against it. "
            "Give it episodes of that map: --eval-episodes-file FILE (a file of that map), or for sampled "
            "episodes --categories hm3d | mp3d | all (the set that file used)")


# Fields added after checkpoints were written, each with the values that leave it out of the
# identity (its defaults), so runs that do not set it keep the identity they always had.
# PointNav options (a checkpoint from before the task seam of 2026-11-27 does not load at all:
# its goal encoder's weights had other names, refused in one line by ``restore``):
POINTNAV_LATER = {"sliding": (True,), "gps_compass": (True,)}
# sensor fields added 2026-11-27 (camera tilt, declared view cameras, converter LODs; 0 == 0.0):
SENSORS_LATER = {"pitch_deg": (None, 0), "view_cameras": (None, ()), "lod": ("auto",)}
# goal categories (added 2026-11-27): unset is hm3d's set, so neither value enters the identity
CATEGORIES_DEFAULT = (None, "hm3d")


def env_identity(config) -> dict:
    """The part of the env's ``EnvConfig`` (``env.config``) a resumed run must share: the task's
    rules, the sensors, the episodes' source and supply, the noise (not seeds, threads, device, cache)."""
    d = config.to_dict()
    d["episodes"]["source"] = episodes_id(d["episodes"]["source"])   # a file: resolved, as ``identity``'s
    resources = getattr(type(config.task), "RESOURCES", ())   # memory budgets and the like
    task = {k: v for k, v in d["task"].items() if k not in resources
            and not (d.get("task_name") == "pointnav" and v in POINTNAV_LATER.get(k, ()))}
    sensors = {k: v for k, v in d["sensors"].items() if v not in SENSORS_LATER.get(k, ())}
    out = {"task": task, "sensors": sensors,
           "episodes": {"source": d["episodes"]["source"], "supply": d["episodes"]["supply"]}}
    if d["episodes"].get("categories") not in CATEGORIES_DEFAULT:   # unset means hm3d: one identity
        out["episodes"]["categories"] = d["episodes"]["categories"]
    if getattr(config, "noise", NO_NOISE).any:
        out["noise"] = d["noise"]   # only when on (any model): a noiseless run keeps the identity it always had
    return out


def check_goal_categories(path, saved: dict | None, have: dict | None, source) -> None:
    """The task's category map (``env.goal_categories``) against the policy: an id beyond its
    category embedding (``models.NUM_CATEGORIES``) is a ConfigError naming the episodes
    (``source``: the file); one that differs from the checkpoint's (``saved``, None: not
    recorded) a ConfigError naming both maps (the ids would mean other categories)."""
    from .models import NUM_CATEGORIES

    if have is None:
        return
    far = {k: v for k, v in have.items() if not 0 <= v < NUM_CATEGORIES}
    if far:
        raise ConfigError(source, f"category task id(s) {far} outside the policy's category embedding "
                                  f"(ids 0-{NUM_CATEGORIES - 1})")
    if saved is not None and dict(saved) != dict(have):
        raise ConfigError(path, f"this checkpoint was trained on goal categories {dict(saved)}; this run's "
                                f"episodes ({source}) have {dict(have)}: the same id would mean another "
                                f"category (bps-train --categories, or an episode file of the checkpoint's map)")


def _differences(have, want, name=""):
    """``name: saved (this run: wanted)`` for every leaf of two nested dicts that differs."""
    if isinstance(have, dict) and isinstance(want, dict):
        for k in sorted(set(have) | set(want), key=str):
            yield from _differences(have.get(k, "(unset)"), want.get(k, "(unset)"), f"{name}.{k}" if name else str(k))
    elif have != want:
        yield f"{name} {have} (this run: {want})"


def _without_default_categories(env: dict) -> dict:
    """A saved env identity without ``episodes.categories`` where that is "hm3d", the default
    (which checkpoints saved before ``env_identity`` dropped it may hold)."""
    eps = env.get("episodes")
    if not isinstance(eps, dict) or eps.get("categories") not in CATEGORIES_DEFAULT:
        return env
    return {**env, "episodes": {k: v for k, v in eps.items() if k != "categories"}}


def check_same_run(path, saved: dict, wanted: dict, manifest_bytes_sha256: str | None = None) -> None:
    """ConfigError listing every identity field that differs (of the env config, only the keys
    that differ), and how to start fresh. ``saved``: a ``saved_identity``. ``manifest_bytes_sha256``:
    this run's ``legacy_manifest_sha256``, the dataset identity of older checkpoints. An episode
    file matches by its resolved path or by the path as typed (a run folder moved to another
    place or node and resumed with the same relative ``--episodes``)."""
    diffs = []
    typed = saved.get("episodes_typed")
    same_typed = isinstance(typed, str) and typed == wanted.get("episodes_typed")
    for key, want in wanted.items():
        have = saved.get(key)
        if have == want or (key == "dataset_sha256" and have is not None and have == manifest_bytes_sha256) \
                or key in ("noise_rules", "episode_rules", "episodes_typed", "layout") \
                or (key == "episodes" and same_typed):
            continue   # not a refusal: noise_note / episode_note / layout_note say what changed
        if key == "dataset_sha256":
            diffs.append("the dataset manifest (sha256 differs: another or a re-preprocessed dataset)")
        elif key == "env":
            if have is None:   # a checkpoint from before env configs were saved
                continue
            have = _without_default_categories(have)
            if same_typed and isinstance(have.get("episodes"), dict) and isinstance(want.get("episodes"), dict):
                have = {**have, "episodes": {**have["episodes"], "source": want["episodes"].get("source")}}
            if have == want:
                continue
            diffs.append("the env config's " + ", ".join(_differences(have, want)))
        elif key == "world":
            diffs.append(f"{have} rank(s) (this run: {want})")
        else:
            diffs.append(f"--{key.replace('_', '-')} {have} (this run: {want})")
    if diffs:
        raise ConfigError(path, "cannot resume: this checkpoint was trained with " + "; ".join(diffs)
                          + ". Start fresh with another --out-dir, or --no-resume (the old run's files are moved "
                          "into OUT_DIR/previous-<time>/)")


# ----------------------------------------------------------------------------------- RNG streams
def rng_state() -> dict:
    """This process's torch / numpy / python RNG states as tensors and plain numbers."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    version, internal, gauss_next = random.getstate()
    return {"torch": torch.get_rng_state(),
            "numpy": {"kind": str(kind), "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                      "has_gauss": int(has_gauss), "cached_gaussian": float(gauss)},
            "python": {"version": int(version), "internal": list(internal), "gauss_next": gauss_next}}


def set_rng_state(s: dict) -> None:
    torch.set_rng_state(s["torch"])
    n = s["numpy"]
    np.random.set_state((n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"],
                         n["cached_gaussian"]))
    p = s["python"]
    random.setstate((p["version"], tuple(p["internal"]), p["gauss_next"]))


def _finite(v) -> bool:
    return is_real(v) and math.isfinite(v)


def rng_problem(s) -> str | None:
    """What is wrong with one rank's saved RNG states (None: they can be set as they are)."""
    if not isinstance(s, dict) or set(s) != {"torch", "numpy", "python"}:
        return "not the torch / numpy / python states"
    t, n, p = s["torch"], s["numpy"], s["python"]
    if not (isinstance(t, torch.Tensor) and t.dtype == torch.uint8 and t.shape == torch.get_rng_state().shape):
        return f"torch state is not {tuple(torch.get_rng_state().shape)} bytes"
    if not isinstance(n, dict) or set(n) != {"kind", "keys", "pos", "has_gauss", "cached_gaussian"} \
            or n.get("kind") != "MT19937" or not isinstance(n.get("keys"), torch.Tensor):
        return "numpy state is not an MT19937 state"
    keys = n["keys"]
    if keys.shape != (624,) or keys.dtype != torch.int64 or bool(((keys < 0) | (keys >= 2**32)).any()):
        return "numpy state keys are not 624 words"
    if not (int_in(n.get("pos"), 0, 624) and int_in(n.get("has_gauss"), 0, 1) and _finite(n.get("cached_gaussian"))):
        return "numpy state pos / gauss fields out of range"
    internal = p.get("internal") if isinstance(p, dict) else None
    if not (isinstance(p, dict) and set(p) == {"version", "internal", "gauss_next"} and p.get("version") == 3
            and isinstance(internal, list) and len(internal) == 625
            and all(int_in(x, 0, 2**32 - 1) for x in internal[:624]) and int_in(internal[624], 0, 624)
            and (p.get("gauss_next") is None or _finite(p.get("gauss_next")))):
        return "python state is not a version-3 Mersenne Twister state"
    return None


# ----------------------------------------------------------------------------------- files
def _tensors(obj, name=""):
    """(name, tensor) of every tensor in nested dicts / lists, in a fixed order."""
    if isinstance(obj, torch.Tensor):
        yield name, obj
    elif isinstance(obj, dict):
        for k in sorted(obj, key=str):
            yield from _tensors(obj[k], f"{name}/{k}")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from _tensors(v, f"{name}/{i}")


def tensor_checksum(state: dict) -> str:
    """sha256 over the name, dtype, shape and bytes of every tensor of the weights and the
    optimizer (what a bit flip in the file would change without torch noticing)."""
    h = hashlib.sha256()
    for name, t in _tensors({"policy": state["policy"], "optimizer": state["optimizer"]}):
        t = t.detach().cpu().contiguous()
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)};".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def _leaves(obj, name=""):
    """(name, value) of every leaf of nested dicts / lists / tuples, in a fixed order."""
    if isinstance(obj, dict):
        for k in sorted(obj, key=str):
            yield from _leaves(obj[k], f"{name}/{k!r}")
    elif isinstance(obj, (list, tuple)):
        yield f"{name}:{type(obj).__name__}{len(obj)}", None
        for i, v in enumerate(obj):
            yield from _leaves(v, f"{name}/{i}")
    else:
        yield name, obj


def payload_checksum(state: dict) -> str:
    """sha256 over every field but ``checksum``: each tensor's name, dtype, shape and bytes, each
    plain value's name, type and repr (RNG states, counters, args and identity included)."""
    h = hashlib.sha256()
    for name, v in _leaves({k: v for k, v in state.items() if k != "checksum"}):
        if isinstance(v, torch.Tensor):
            t = v.detach().cpu().contiguous()
            h.update(f"{name}:{t.dtype}:{tuple(t.shape)};".encode())
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
        else:
            h.update(f"{name}:{type(v).__name__}:{v!r};".encode())
    return h.hexdigest()


def save(path: Path, state: dict) -> None:
    """Write atomically: a crash mid-save never leaves a half checkpoint; a full disk or a file
    size limit is an OutputWriteError naming the folder (the previous checkpoint is kept)."""
    path = Path(path)
    state = {"format": FORMAT, "version": VERSION, **state}
    state["checksum"] = payload_checksum(state)
    buf = io.BytesIO()
    torch.save(state, buf)
    data = buf.getbuffer()
    remove_stale_temps(path)  # of a run stopped at once mid-save (its lock died with it)
    try:
        atomic_write(path, lambda f: f.write(data), overwrite=True)
    except OutputWriteError as e:
        raise OutputWriteError(path.parent, f"cannot save {path.name} ({len(data)} bytes): "
                                            f"{_space_cause(e)}; the previous checkpoint is kept") from None


def _space_cause(e: OutputWriteError) -> str:
    return {errno.ENOSPC: "no space left on the output folder (OUT_DIR)",
            errno.EFBIG: "a file size limit (ulimit -f) stops the write"}.get(e.errno, e.detail)


def _first_sentence(text: str, cap: int = 200) -> str:
    """The first sentence of an error ``text`` (torch's run on with advice), whole words only:
    never cut mid-sentence without saying so ("...")."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    end = re.search(r"[.!?](\s|$)", line)
    sentence = line[:end.start()] if end else line
    if len(sentence) > cap:
        sentence = sentence[:cap].rsplit(" ", 1)[0] + " ..."
    return sentence


def _blocked(message: str) -> str:
    """What torch's weights-only unpickler refused, from its many-line message: the global the
    pickle names (torch 2.13: "unsupported GLOBAL posix.system ..."; older: "Unsupported
    global: GLOBAL ..."), never its advice to load with weights_only=False (that runs the code)."""
    found = re.search(r"unsupported global:?\s+(?:GLOBAL\s+)?([\w.]+)", message, re.IGNORECASE)
    if found:
        return f"it names {found.group(1)}, which could run code when loaded"
    found = re.search(r"WeightsUnpickler error:\s*([^\n]+)", message)
    return found.group(1).strip()[:200] if found else "torch's weights-only unpickler refused it"


def load(path, map_location=None) -> dict:
    """The checkpoint at ``path`` through torch's weights-only unpickler, shape-checked."""
    path = Path(path)
    if not path.is_file():
        raise InputError(path, "checkpoint not found" if not path.exists() else "checkpoint is not a file")
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError as e:
        raise InputError(path, f"cannot read the checkpoint ({e.strerror or e})") from None
    if head != b"PK\x03\x04" and head[:1] != b"\x80":   # torch.save's zip, or its legacy pickle
        raise CorruptFileError(path, "not a checkpoint: bps-train checkpoints are torch.save zip files "
                                     "(checkpoint.pt, ckpt_UPDATE.pt in a bps-train --out-dir)")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as e:
        raise CorruptFileError(path, "refused: the checkpoint holds more than tensors and plain data, "
                                     f"so it was not loaded ({_blocked(str(e))})") from None
    except (RuntimeError, EOFError, ValueError, OSError, zipfile.BadZipFile, IndexError, KeyError, TypeError,
            AttributeError, OverflowError, AssertionError, struct.error) as e:   # what torch's unpickler meets in a damaged file
        raise CorruptFileError(path, f"not a readable checkpoint ({_first_sentence(str(e)) or type(e).__name__}): "
                                     "truncated or damaged; resume from another checkpoint (a ckpt_UPDATE.pt), or "
                                     "start fresh with --no-resume (it moves the old run's files into "
                                     "OUT_DIR/previous-<time>/)") from None
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        raise CorruptFileError(path, "not a bps-train checkpoint (no 'format' field); checkpoints of "
                                     "bps-train before version 2 cannot be loaded")
    if ckpt.get("version") not in READS:
        raise CorruptFileError(path, f"checkpoint version {ckpt.get('version')!r}; this bps-train reads "
                                     f"{', '.join(map(str, READS))}")
    for key, typ in _REQUIRED.items():
        ok = isinstance(ckpt.get(key), typ) or (typ is float and isinstance(ckpt.get(key), int))
        if not ok or (typ is int and isinstance(ckpt.get(key), bool)):
            raise CorruptFileError(path, f"checkpoint field {key!r} missing or not {typ.__name__}")
    if not all(isinstance(v, torch.Tensor) for v in ckpt["policy"].values()):
        raise CorruptFileError(path, "checkpoint field 'policy' holds something other than tensors")
    if ckpt["version"] >= 3:
        try:
            want = payload_checksum(ckpt) if ckpt["version"] >= 4 else tensor_checksum(ckpt)
        except (RuntimeError, TypeError, ValueError):   # a tensor torch cannot view as bytes
            want = None
        if ckpt.get("checksum") != want:
            what = "payload's" if ckpt["version"] >= 4 else "tensors'"
            raise CorruptFileError(path, f"the {what} checksum does not match the one stored (bit flips or an "
                                         "edited file): refused; resume from another checkpoint or --no-resume")
    for key, hi in (("update", MAX_UPDATE), ("global_step", MAX_STEP), ("world", MAX_WORLD)):
        if not int_in(ckpt[key], 1 if key == "world" else 0, hi):
            raise CorruptFileError(path, f"checkpoint field {key!r} = {ckpt[key]} is out of range "
                                         f"({1 if key == 'world' else 0}..{hi})")
    if ckpt["update"] > ckpt["global_step"]:
        raise CorruptFileError(path, f"checkpoint counts {ckpt['update']} updates but only "
                                     f"{ckpt['global_step']} frames (every update runs at least one)")
    if not (math.isfinite(ckpt["seconds"]) and ckpt["seconds"] >= 0):
        raise CorruptFileError(path, f"checkpoint field 'seconds' = {ckpt['seconds']} is not a finite "
                                     "number >= 0")
    for r, s in enumerate(ckpt["rng"]):
        why = rng_problem(s)
        if why is not None:
            raise CorruptFileError(path, f"checkpoint RNG state of rank {r}: {why}")
    for name, t in _tensors({"policy": ckpt["policy"], "optimizer": ckpt["optimizer"]}):
        if t.is_floating_point() and t.numel() and not bool(torch.isfinite(t).all()):
            raise CorruptFileError(path, f"non-finite values (NaN or inf) in {name.lstrip('/')}: refused "
                                         "(a run that diverged, or a damaged file)")
    return ckpt


def restore(path, ckpt: dict, policy, optimizer=None) -> None:
    """Load the checkpoint's weights (and optimizer state) into ``policy`` / ``optimizer`` (a Lamb):
    a ``CorruptFileError`` naming ``path`` when they do not fit (other names or shapes than the
    policy its settings describe, an extra key; hyper-parameters of other keys or not finite,
    moments of another shape), so no failure waits for the first step."""
    for what, load, state in (("weights", policy.load_state_dict, ckpt["policy"]),
                              ("optimizer state", optimizer and optimizer.load_state_dict, ckpt["optimizer"])):
        if load is None:
            continue
        try:
            load(state)
        except (RuntimeError, ValueError, KeyError, TypeError, IndexError, AttributeError) as e:
            first = (str(e).splitlines() or [type(e).__name__])[0]
            raise CorruptFileError(path, f"{what} do not fit the policy its settings describe ({first[:160]})") from None
    if optimizer is None:
        return
    for g in optimizer.param_groups:
        why = optimizer.group_problem(g)
        if why is not None:
            raise CorruptFileError(path, f"optimizer settings: {why}")
    for param, st in optimizer.state.items():
        # load_state_dict takes any state for any id; the first step would fail on it
        why = optimizer.state_problem(param, st) if isinstance(param, torch.Tensor) and isinstance(st, dict) else \
            "an entry that is not the state of one of the policy's parameters"
        if why is not None:
            raise CorruptFileError(path, f"optimizer state: {why}")

