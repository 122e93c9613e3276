"""Run ``preprocess`` as a SLURM job array through submitit (optional extra ``bps[slurm]``).

One array task per shard (``--shard i/N``), each writing its shard manifest into the shared
OUT_ROOT; when all tasks are done the shard manifests are merged into ``manifest.json``.
``executor="local"`` runs the same array as local processes and ``"debug"`` in this process:
that is how it is tested without a cluster. Rerunning after a failed or preempted task is
just launching again: finished scenes are skipped (see preprocess).

Why submitit: it is the maintained, pickling-based launcher made for this (job arrays via
``map_array``, the same code on SLURM and locally); Ray would add a long-running cluster
service for what is a batch of independent tasks.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ConfigError, MissingDependencyError
from .manifest import merge_manifests
from .plan import Shard
from .preprocess import DEFAULTS, PreprocessOptions, manifest_name, preprocess


@dataclass(frozen=True)
class SlurmOptions:
    """Per array task. ``additional``: extra sbatch parameters (submitit slurm_additional_parameters)."""

    partition: str | None = None
    time_min: int = 240
    cpus_per_task: int = 8
    mem_gb: int = 32
    array_parallelism: int = 256
    job_name: str = "bps-preprocess"
    additional: dict = field(default_factory=dict)


@dataclass
class LaunchResult:
    jobs: list
    shard_manifests: list[Path]
    manifest: Path | None
    failed_shards: list[tuple[int, str]]
    failed_scenes: int = 0

    @property
    def ok(self) -> bool:
        return not self.failed_shards and self.failed_scenes == 0


def run_shard(src_root: str, out_root: str, dataset: str, split: str | None, index: int, count: int,
              options: PreprocessOptions, backend=None) -> dict:
    """One array task: preprocess shard ``index``/``count``. Returns a small JSON-able summary."""
    res = preprocess(src_root, out_root, dataset, split, options, Shard(index, count), backend=backend,
                     progress=False, log=print)
    return {"manifest": str(res.manifest_path), "ok": res.count("ok"), "skipped": res.count("skipped"),
            "failed": res.count("failed"), "missing": res.count("missing")}


def _submitit():
    try:
        import submitit
    except ImportError:
        raise MissingDependencyError(None, "the SLURM launcher", "'bps[slurm]'  (submitit)") from None
    return submitit


def make_executor(kind: str, folder: Path, slurm: SlurmOptions):
    submitit = _submitit()
    if kind not in ("slurm", "local", "debug"):
        raise ConfigError(None, f"executor {kind!r}: expected slurm, local or debug")
    ex = submitit.AutoExecutor(folder=str(folder), cluster=kind)
    params = dict(timeout_min=slurm.time_min, cpus_per_task=slurm.cpus_per_task, mem_gb=slurm.mem_gb,
                  name=slurm.job_name, slurm_array_parallelism=slurm.array_parallelism)
    if slurm.partition:
        params["slurm_partition"] = slurm.partition
    if slurm.additional:
        params["slurm_additional_parameters"] = dict(slurm.additional)
    ex.update_parameters(**params)
    return ex


def task_failure(job, error: Exception) -> str:
    """One line for a failed array task: the error it raised (the last line of the traceback
    submitit reports, not the log paths it appends) and the task's stderr and stdout logs."""
    text = str(error)
    parts = text.split("-" * 22)   # submitit's FailedJobError: message, trace, log paths
    lines = [ln.strip() for ln in (parts[1] if len(parts) >= 3 else text).splitlines() if ln.strip()]
    cause = lines[-1] if lines else type(error).__name__
    try:
        logs = f"{job.paths.stderr} (stdout: {job.paths.stdout})"
    except Exception:  # noqa: BLE001 - a job object without paths: the cause alone
        return cause
    return f"{cause}; log: {logs}"


def launch(src_root, out_root, dataset: str, split: str | None, shards: int,
           options: PreprocessOptions = DEFAULTS, slurm: SlurmOptions = SlurmOptions(),
           executor: str = "slurm", log_dir=None, wait: bool = True, log=None,
           backend=None) -> LaunchResult:
    """Submit ``shards`` array tasks; with ``wait``, collect them and merge the shard manifests
    into ``OUT_ROOT/manifest.json``. Without ``wait`` (SLURM), a merge job is submitted that
    runs after the whole array succeeded."""
    say = log or (lambda s: None)
    src_root, out_root = str(Path(src_root).resolve()), Path(out_root).resolve()
    out_root.mkdir(parents=True, exist_ok=True)
    folder = Path(log_dir) if log_dir else out_root / ".bps-state" / "submitit"
    ex = make_executor(executor, folder, slurm)
    n = shards
    jobs = ex.map_array(run_shard, [src_root] * n, [str(out_root)] * n, [dataset] * n, [split] * n,
                        list(range(n)), [n] * n, [options] * n, [backend] * n)
    say(f"submitted {n} task(s) ({executor}): job {jobs[0].job_id.split('_')[0] if jobs else '-'}; "
        f"logs in {folder}")
    shard_paths = [out_root / manifest_name(Shard(i, n)) for i in range(n)]
    final = out_root / "manifest.json"
    if not wait:
        if executor == "slurm" and jobs:
            array_id = str(jobs[0].job_id).split("_")[0]
            merge_ex = make_executor(executor, folder, SlurmOptions(
                partition=slurm.partition, time_min=30, cpus_per_task=1, mem_gb=4,
                job_name=f"{slurm.job_name}-merge", additional={**slurm.additional,
                                                                "dependency": f"afterok:{array_id}"}))
            mj = merge_ex.submit(merge_manifests, [str(p) for p in shard_paths], str(final), True)
            say(f"merge job {mj.job_id} runs after array {array_id} succeeds")
        return LaunchResult(list(jobs), shard_paths, None, [])
    failed, failed_scenes = [], 0
    for i, job in enumerate(jobs):
        try:
            r = job.result()
            failed_scenes += r.get("failed", 0)
            say(f"shard {i}/{n}: {r['ok']} processed, {r['skipped']} up to date, {r['failed']} failed, "
                f"{r['missing']} missing")
        except Exception as e:  # noqa: BLE001 - a task failure is reported, the others are merged
            msg = task_failure(job, e)
            failed.append((i, msg))
            say(f"shard {i}/{n}: task failed: {msg}")
    manifest = None
    if not failed:
        manifest = merge_manifests([str(p) for p in shard_paths], final, overwrite=True).path
    else:
        # a bps error (bad input, --require-all) comes back on a relaunch; a crash or preemption not
        fix = "fix what their errors name, then " if any("bps_assets.errors." in m for _, m in failed) else ""
        say(f"not merged: {len(failed)} shard task(s) failed; {fix}launch again to redo them "
            "(finished scenes are skipped)")
    return LaunchResult(list(jobs), shard_paths, manifest, failed, failed_scenes)
