"""`bps-assets demo [OUTDIR]`: the project's main job on built-in data, as a list of steps.

The pipeline's steps (``DEFAULT_STEPS``): synthesize a small Gibson-layout dataset (real
Gibson ids from split "tiny", train and val) in OUTDIR/src -> preprocess it with PointNav
episodes into OUTDIR (so OUTDIR/manifest.json is the dataset) -> verify the manifest (deep) ->
print the summary. The demo takes split "tiny"'s train and val subsets (30 of its 35 scenes) and
synthesizes only a few: it says so once instead of the "missing from the source" lines that
preprocess and verify print for a user's dataset.

``run_demo(outdir, steps=...)`` runs any list of ``DemoStep``; layers above the pipeline add
their own by composing the list (``bps-assets demo``, in ``cli/cmd_demo.py``, appends the
runtime's "run the batched environment and print fps" step), so this module knows nothing
above it. A step reads what earlier ones left in the shared ``DemoContext``
(``ctx.manifest_path`` ...) and returns False (or raises) to stop the demo.
"""
from __future__ import annotations

import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..errors import OutputExistsError

DEMO_N = 6  # scenes: 4 train + 2 val (see demo_scene_names)
DEMO_SPLIT = "tiny"
DEMO_EPISODES = 20  # per scene
DEMO_SEED = 0


@dataclass
class DemoContext:
    outdir: Path
    echo: Callable[[str], None] = print
    scenes: int | None = None       # how many scenes to synthesize (None: DEMO_N)
    workers: int | None = None
    src_root: Path | None = None    # set by synthesize
    out_root: Path | None = None    # set by preprocess
    manifest_path: Path | None = None
    results: dict = field(default_factory=dict)  # step name -> whatever the step reports


@dataclass(frozen=True)
class DemoStep:
    name: str
    title: str
    run: Callable[[DemoContext], bool | None]


def demo_scene_names(n: int | None = None) -> list[str]:
    """The first ``n`` (default 6) names in bps_assets.synth's order: real Gibson ids of split
    "tiny", a val scene at every position i % 4 == 1 (so any n >= 2 has train and val), and
    the scene features (closed room, stairs) that go with each position."""
    from ..synth import scene_names

    return [name for name, _ in scene_names("gibson", DEMO_N if n is None else n)]


def _synthesize(ctx: DemoContext):
    from .. import synth

    ctx.src_root = ctx.outdir / "src"
    names = demo_scene_names(ctx.scenes)
    todo = [n for n in names if not (ctx.src_root / "gibson" / f"{n}.glb").is_file()]
    if todo:
        synth.generate(ctx.src_root, "gibson", todo, seed=DEMO_SEED, size="small")
    ctx.echo(f"  {len(names)} scenes in {ctx.src_root}/gibson ({len(names) - len(todo)} already there)")
    ctx.results["synthesize"] = {"scenes": names}


def _preprocess(ctx: DemoContext):
    from .preprocess import PreprocessOptions, preprocess, summary_table

    # OUTDIR is the OUT_ROOT (OUTDIR/manifest.json is what `bps-train` reads by default); it
    # also holds the synthesized sources in OUTDIR/src, hence overwrite (the demo owns OUTDIR)
    ctx.out_root = ctx.outdir
    opts = PreprocessOptions(episodes=DEMO_EPISODES, episode_seed=DEMO_SEED, workers=ctx.workers,
                             subsets=("train", "val"), overwrite=True)
    res = preprocess(ctx.src_root, ctx.out_root, "gibson", DEMO_SPLIT, opts, log=ctx.echo)
    ctx.manifest_path = res.manifest_path
    ctx.results["preprocess"] = res
    ctx.echo("\n".join(ln for ln in summary_table(res).splitlines() if not ln.startswith(_MISSING_LINE)))
    n_missing = res.count("missing")
    if n_missing:
        ctx.echo(f"  (the demo synthesizes {len(res.results) - n_missing} of split {DEMO_SPLIT}'s "
                 f"{len(res.results)} train and val scenes; the other {n_missing} are absent on purpose)")
    return res.count("failed") == 0


# what preprocess / verify say of a split's absent scenes: expected in the demo, so left out
_MISSING_LINE, _MISSING_WARNING = "missing from the source (", "warning: {} scene(s) of split"


def _verify(ctx: DemoContext):
    from .verify import format_report, verify_manifest

    rep = verify_manifest(ctx.manifest_path, deep=True)
    ctx.results["verify"] = rep
    pre = ctx.results.get("preprocess")
    expected = _MISSING_WARNING.format(pre.count("missing") if pre is not None else "")
    ctx.echo("\n".join(ln for ln in format_report(rep).splitlines() if not ln.startswith(expected)))
    return rep.ok


def _summary(ctx: DemoContext):
    from .manifest import load_manifest

    m = load_manifest(ctx.manifest_path)
    files = m.files()
    total = sum(o["size"] for _, _, o in files)
    src = sum(p.stat().st_size for p in (ctx.src_root / "gibson").glob("*") if p.is_file())
    n_eps = sum((s.stats.get("episodes") or 0) for s in m.scenes())
    ctx.echo(f"  dataset: {m.dataset} split {m.split!r}: "
             + ", ".join(f"{sub} {len(m.scenes(sub))} scenes" for sub in m.subsets if m.scenes(sub))
             + f"; {n_eps} PointNav episodes")
    ctx.echo(f"  sources {src / 1e6:.1f} MB -> packed scenes + navmeshes + episodes {total / 1e6:.1f} MB")
    ctx.echo(f"  manifest: {m.path}")
    # quoted: the line is meant to be pasted into a shell, and OUTDIR may hold spaces
    ctx.echo(f"  next: bps-assets verify {shlex.quote(str(m.path))} --deep")
    ctx.results["summary"] = {"scenes": len(m), "bytes": total, "episodes": n_eps}


DEFAULT_STEPS = [
    DemoStep("synthesize", "synthesize a small Gibson-layout dataset", _synthesize),
    DemoStep("preprocess", "preprocess it (packed scenes, navmeshes, PointNav episodes)", _preprocess),
    DemoStep("verify", "verify the manifest (sizes, sha256, headers, every section)", _verify),
    DemoStep("summary", "summary", _summary),
]


MARKER = ".bps-demo"


def _claim(outdir: Path) -> None:
    """The demo writes only into a new or empty directory, or one an earlier demo made."""
    if outdir.exists() and not outdir.is_dir():
        raise OutputExistsError(outdir, "exists and is not a directory")
    if outdir.is_dir() and not (outdir / MARKER).exists() and any(outdir.iterdir()):
        raise OutputExistsError(outdir, "is not empty and was not made by `bps-assets demo`; "
                                        "choose another OUTDIR")
    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / MARKER).write_text("made by bps-assets demo\n")


def run_demo(outdir="demo_out", scenes: int | None = None, workers: int | None = None,
             echo: Callable[[str], None] = print, steps: list[DemoStep] | None = None) -> bool:
    """Run ``steps`` (default: ``DEFAULT_STEPS``) in order; stop at the first that fails. True
    when all succeeded."""
    ctx = DemoContext(Path(outdir).resolve(), echo=echo, scenes=scenes, workers=workers)
    _claim(ctx.outdir)
    steps = list(DEFAULT_STEPS) if steps is None else steps
    t_all = time.perf_counter()
    for i, step in enumerate(steps, 1):
        echo(f"[{i}/{len(steps)}] {step.title}")
        t = time.perf_counter()
        ok = step.run(ctx)
        if ok is False:
            echo(f"demo stopped: step {step.name!r} failed")
            return False
        echo(f"  ({time.perf_counter() - t:.1f} s)")
    echo(f"demo done in {time.perf_counter() - t_all:.1f} s: {ctx.outdir}")
    return True
