"""bps-train end to end with tiny totals on a tiny synthetic dataset (built once per session):
the loss is finite, the checkpoint reloads and a resumed run continues the counters, --eval
reports success and SPL, and 2 gloo processes under torchrun train on disjoint scenes."""
from __future__ import annotations

import csv
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

TINY = ["--resolution", "32", "--width", "4", "--hidden", "32", "--num-envs", "4", "--rollout-steps", "8",
        "--sim-only-steps", "2", "--threads", "1", "--save-every", "1"]


# the dataset fixture (3 synthetic scenes, session scope) is in conftest.py


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_train_resume_and_eval(dataset, tmp_path, capsys):
    from bps_train.train import run as main

    out = tmp_path / "run"
    base = ["--dataset", str(dataset), "--out-dir", str(out), *TINY]
    res = main([*base, "--total-steps", "64"])  # 2 updates of 4 envs x 8 steps
    assert res["updates"] == 2 and res["global_step"] == 64
    assert math.isfinite(res["loss"]) and res["sim_fps"] > 0
    rows = _rows(out / "log.csv")
    assert [int(r["update"]) for r in rows] == [1, 2]
    assert all(math.isfinite(float(r["loss"])) and float(r["fps"]) > 0 and float(r["fps_ratio"]) > 0 for r in rows)
    sim = [json.loads(line) for line in (out / "sim_only.jsonl").read_text().splitlines()]
    assert len(sim) == 2 and all(m["uniform"] > 0 and m["no_stop"] > 0 for m in sim)  # at start and end
    assert sim[1]["end_to_end_fps"] > 0

    ckpt = torch.load(out / "checkpoint.pt", weights_only=True)
    assert ckpt["update"] == 2 and ckpt["global_step"] == 64 and len(ckpt["rng"]) == 1
    from bps_train.train import Args, build_policy
    from bps_train.args import parse

    pol = build_policy(parse(Args, TINY), "cpu")
    pol.load_state_dict(ckpt["policy"])  # the weights reload into a freshly built policy
    assert any(s["step"] == 4 for s in ckpt["optimizer"]["state"].values())  # 2 updates x 2 minibatches

    # resume: counters, optimizer steps and weights continue; the log is appended to
    res = main([*base, "--total-steps", "96"])
    assert res["updates"] == 3 and res["global_step"] == 96
    out_text = capsys.readouterr().out
    assert "resumed" in out_text and "rank 0 of 1: 2 scene(s): " in out_text
    assert "SCENES [" not in out_text  # issue 25 item 8: no raw line
    assert [int(r["update"]) for r in _rows(out / "log.csv")] == [1, 2, 3]
    ckpt2 = torch.load(out / "checkpoint.pt", weights_only=True)
    assert any(s["step"] == 6 for s in ckpt2["optimizer"]["state"].values())
    assert ckpt2["seconds"] > ckpt["seconds"]

    # eval on the held-out val scene: every distinct episode of the split once
    res = main(["--dataset", str(dataset), "--eval", str(out / "checkpoint.pt"), "--eval-split", "val",
                "--eval-episodes", "6", "--num-envs", "6", "--threads", "1"])
    assert res["episodes"] == 6 and 0 <= res["success"] <= 1 and 0 <= res["spl"] <= res["success"] + 1e-9
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert line["episodes"] == 6 and "spl" in line
    assert line["update"] == 3 and line["global_step"] == 96   # where bps_train.report places it


def test_an_odd_num_envs_says_it_runs_one_group(dataset, tmp_path, capsys):
    """Double buffering needs two groups of one size: an odd --num-envs runs one group and says so."""
    from bps_train.train import run as main

    args = ["--dataset", str(dataset), "--out-dir", str(tmp_path / "odd"), *TINY, "--sim-only-steps", "0"]
    res = main([*args[:args.index("--num-envs") + 1], "3", *args[args.index("--num-envs") + 2:], "--total-steps", "24"])
    assert res["updates"] == 1 and res["global_step"] == 24
    out = capsys.readouterr().out.splitlines()
    assert out.count("bps-train: --num-envs 3 is odd: one group of 3 envs, without double buffering") == 1
    main(["--dataset", str(dataset), "--out-dir", str(tmp_path / "even"), *TINY, "--sim-only-steps", "0",
          "--total-steps", "32"])
    assert not [ln for ln in capsys.readouterr().out.splitlines() if "is odd" in ln]


def test_resume_restores_rng_streams(dataset, tmp_path):
    """The checkpoint's RNG state is what the process continues with."""
    from bps_train.train import run as main

    out = tmp_path / "run"
    base = ["--dataset", str(dataset), "--out-dir", str(out), *TINY, "--sim-only-steps", "0"]
    main([*base, "--total-steps", "32"])
    ckpt = torch.load(out / "checkpoint.pt", weights_only=True)
    saved = ckpt["rng"][0]["torch"]
    torch.manual_seed(12345)  # anything else
    from bps_train.checkpoint import set_rng_state

    set_rng_state(ckpt["rng"][0])
    assert torch.equal(torch.get_rng_state(), saved)


def test_two_gloo_processes_train_on_disjoint_scenes(dataset, tmp_path):
    out = tmp_path / "ddp"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "bps_train.train", "--dataset", str(dataset), "--out-dir", str(out), *TINY,
           "--total-steps", "128"]  # 2 ranks x 4 envs x 8 steps = 64 per update -> 2 updates
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    rows = _rows(out / "log.csv")
    assert [int(r_["global_step"]) for r_ in rows] == [64, 128]
    assert all(math.isfinite(float(r_["loss"])) for r_ in rows)
    ckpt = torch.load(out / "checkpoint.pt", weights_only=True)
    assert ckpt["world"] == 2 and len(ckpt["rng"]) == 2
    assert not torch.equal(ckpt["rng"][0]["torch"], ckpt["rng"][1]["torch"])
    # found anywhere in a line: the two ranks share the pipe, and another rank's unflushed log
    # text may stand before a rank's scenes line
    scenes = [m.split() for m in re.findall(r"rank \d of 2: \d+ scene\(s\): ([^\n]*)", r.stdout)]
    assert len(scenes) == 2 and not set(scenes[0]) & set(scenes[1]) and all(scenes)
    # a rank with one core of its own runs one env group (train.double_buffered), and says so once
    one_core = len(os.sched_getaffinity(0)) // 2 <= 1
    assert r.stdout.count("one env group per rank") == (1 if one_core else 0), r.stdout[-2000:]


def _sigint_once_training(cmd, **kw):
    """Run ``cmd``, send it SIGINT once training is under way (``update 1/`` printed, or after
    300 s), and wait: (returncode, stdout, stderr)."""
    import signal
    import time

    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    lines, t0 = [], time.monotonic()
    for line in p.stdout:  # wait until training is under way
        lines.append(line)
        if line.startswith("update 1/") or time.monotonic() - t0 > 300:
            break
    p.send_signal(signal.SIGINT)
    rest, err = p.communicate(timeout=300)
    return p.returncode, "".join(lines) + rest, err


def test_ctrl_c_under_torchrun_saves_once_and_only_rank_0_says_so(dataset, tmp_path):
    """Ctrl-C reaches torchrun, which forwards SIGINT to each rank (each in its own session):
    the ranks stop at the same update, rank 0 saves the checkpoint and alone says so (and that
    it is stopping). torchrun itself then ends with its own SignalException (status 1, its
    traceback: the launcher's, out of bps-train's reach); the ranks add no traceback."""
    out = tmp_path / "ddp"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "bps_train.train", "--dataset", str(dataset), "--out-dir", str(out), *TINY,
           "--sim-only-steps", "0", "--save-every", "1000", "--total-steps", "1000000"]
    returncode, stdout, err = _sigint_once_training(cmd, env=env)
    assert "update 1/" in stdout, stdout[-2000:] + err[-3000:]
    assert returncode != 0, err[-3000:]
    assert err.count("saved; run the same command again to resume") == 1, err[-3000:]
    assert err.count("stopping after this update") == 1 and "again to stop now" not in err, err[-3000:]
    # the one traceback is torchrun's own (SignalException), none comes from a rank
    assert err.count("Traceback") <= 1 and "KeyboardInterrupt" not in err, err[-3000:]
    ckpt = torch.load(out / "checkpoint.pt", weights_only=True)  # save_every 1000: written by the stop
    assert ckpt["update"] >= 1 and ckpt["world"] == 2


# ----------------------------------------------------------------------------------- checkpoints
class _RunsShell:
    """A pickle that runs a shell command when loaded without weights_only."""

    def __init__(self, cmd):
        self.cmd = cmd

    def __reduce__(self):
        return (os.system, (self.cmd,))


def _evil_checkpoint(path: Path, marker: Path):
    torch.save({"format": "bps-train checkpoint", "version": 2, "policy": {}, "hook": _RunsShell(f"touch {marker}")},
               path)


def _cli(args, **kw):
    return subprocess.run([sys.executable, "-m", "bps_train.train", *args], capture_output=True, text=True,
                          timeout=600, **kw)


def test_checkpoint_that_runs_code_is_refused_on_resume_and_eval(tmp_path):
    manifest = tmp_path / "manifest.json"  # never read: the checkpoint is refused before the dataset
    manifest.write_text("{}")
    out = tmp_path / "run"
    out.mkdir()
    marker = tmp_path / "pwned"
    _evil_checkpoint(out / "checkpoint.pt", marker)
    r = _cli(["--dataset", str(manifest), "--out-dir", str(out), *TINY])
    assert r.returncode == 2 and not marker.exists()
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert "checkpoint.pt" in r.stderr and "refused" in r.stderr
    # the blocked global is named; torch's advice to load with weights_only=False (cut before its
    # security warning) is never repeated
    assert f"names {os.system.__module__}.system" in r.stderr and "weights_only" not in r.stderr, r.stderr
    r = _cli(["--dataset", str(manifest), "--eval", str(out / "checkpoint.pt")])
    assert r.returncode == 2 and not marker.exists() and "refused" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert "system" in r.stderr and "weights_only" not in r.stderr


def test_checkpoint_load_refuses_what_is_not_ours(tmp_path):
    from bps_assets.errors import CorruptFileError, InputError
    from bps_train import checkpoint

    with pytest.raises(InputError, match="not found"):
        checkpoint.load(tmp_path / "nope.pt")
    torch.save({"policy": {}, "update": 3}, tmp_path / "old.pt")  # no format field (bps-train v1 wrote none)
    with pytest.raises(CorruptFileError, match="not a bps-train checkpoint"):
        checkpoint.load(tmp_path / "old.pt")
    (tmp_path / "junk.pt").write_bytes(b"PK\x03\x04" + b"\x00" * 64)
    with pytest.raises(CorruptFileError, match="not a readable checkpoint"):
        checkpoint.load(tmp_path / "junk.pt")
    state = {"policy": {"w": torch.ones(2)}, "optimizer": {}, "update": 1, "global_step": 8, "seconds": 1.0,
             "world": 1, "args": {}, "identity": {}, "rng": [checkpoint.rng_state()]}
    checkpoint.save(tmp_path / "ok.pt", {**state, "update": "1"})
    with pytest.raises(CorruptFileError, match="'update'"):
        checkpoint.load(tmp_path / "ok.pt")
    checkpoint.save(tmp_path / "ok.pt", state)
    assert checkpoint.load(tmp_path / "ok.pt")["global_step"] == 8


def test_eval_of_a_file_that_is_no_checkpoint_says_so(tmp_path):
    """A text file (a log passed by mistake) or an empty file: "not a checkpoint", naming it (was
    the weights-only unpickler's "refused ... WeightsUnpickler error" for a text file)."""
    manifest = tmp_path / "manifest.json"
    manifest.write_text("{}")
    for name, data in (("a.log", b"update,global_step\n1,8\n"), ("empty.pt", b"")):
        (tmp_path / name).write_bytes(data)
        r = _cli(["--dataset", str(manifest), "--eval", str(tmp_path / name)])
        assert r.returncode == 2 and "Traceback" not in r.stderr
        err = r.stderr.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"bps-train: error: {tmp_path / name}: not a checkpoint"), err


def test_eval_of_a_missing_checkpoint_is_one_line(tmp_path):
    manifest = tmp_path / "manifest.json"
    manifest.write_text("{}")
    r = _cli(["--dataset", str(manifest), "--eval", str(tmp_path / "nope.pt")])
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == [f"bps-train: error: {tmp_path / 'nope.pt'}: checkpoint not found"]


def test_tensorboard_missing_is_a_one_line_error_with_the_pip_command(tmp_path, monkeypatch, capsys):
    from bps_train.train import main

    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # import fails as if not installed
    manifest = tmp_path / "manifest.json"
    manifest.write_text("{}")
    assert main(["--dataset", str(manifest), "--out-dir", str(tmp_path / "run"), "--tensorboard"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pip install tensorboard" in err[0]


def test_resume_refuses_another_dataset_or_model_and_says_how_to_start_fresh(dataset, tmp_path, capsys):
    from bps_train.train import main

    out = tmp_path / "run"
    base = ["--out-dir", str(out), *TINY, "--sim-only-steps", "0"]
    assert main(["--dataset", str(dataset), *base, "--total-steps", "32"]) == 0
    capsys.readouterr()
    assert main(["--dataset", str(dataset), *base, "--total-steps", "64", "--hidden", "16",
                 "--num-envs", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--hidden 32 (this run: 16)" in err[0] and "--num-envs 4 (this run: 2)" in err[0]
    assert "--no-resume" in err[0] and "--out-dir" in err[0]
    doc = json.loads(dataset.read_text())
    same = dataset.with_name("same_manifest.json")   # an unchanged rerun of preprocess: a new `created`
    same.write_text(json.dumps({**doc, "created": "2099-01-01T00:00:00Z"}, indent=2))
    val = next(n for n, e in doc["scenes"].items() if e["subset"] == "val")
    other = dataset.with_name("other_manifest.json")  # a scene fewer: another dataset
    other.write_text(json.dumps({**doc, "scenes": {n: e for n, e in doc["scenes"].items() if n != val}}))
    assert main(["--dataset", str(other), *base, "--total-steps", "64"]) == 2
    assert "dataset manifest" in capsys.readouterr().err
    assert torch.load(out / "checkpoint.pt", weights_only=True)["update"] == 1  # untouched
    # the dataset is its content, not the manifest's bytes: the rewritten manifest resumes
    assert main(["--dataset", str(same), *base, "--total-steps", "64"]) == 0
    assert "resumed" in capsys.readouterr().out
    assert torch.load(out / "checkpoint.pt", weights_only=True)["update"] == 2
    # starting fresh over it is explicit
    assert main(["--dataset", str(other), *base, "--total-steps", "32", "--no-resume"]) == 0
    assert "resumed" not in capsys.readouterr().out


def test_resume_refuses_another_batch_shape_seed_or_rank_count(dataset, tmp_path, capsys):
    """--total-steps counts frames: a resume with other --rollout-steps / --minibatches or another
    rank count would change what it means (and the RNG streams per rank), another --seed what
    the checkpoint records; each is refused, naming the difference, the checkpoint untouched."""
    from bps_assets.errors import ConfigError
    from bps_train import checkpoint
    from bps_train.train import main

    out = tmp_path / "run"
    base = ["--dataset", str(dataset), "--out-dir", str(out), *TINY, "--sim-only-steps", "0"]
    assert main([*base, "--total-steps", "32"]) == 0
    capsys.readouterr()
    for extra, said in ((["--rollout-steps", "4"], "--rollout-steps 8 (this run: 4)"),
                        (["--minibatches", "1"], "--minibatches 2 (this run: 1)"),
                        (["--seed", "2"], "--seed 1 (this run: 2)")):
        assert main([*base, "--total-steps", "96", *extra]) == 2, extra
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and said in err[0] and "--no-resume" in err[0], err
    ckpt = torch.load(out / "checkpoint.pt", weights_only=True)
    assert ckpt["update"] == 1 and ckpt["identity"]["seed"] == 1 and ckpt["identity"]["world"] == 1
    # another rank count (checked on the identities: a torchrun test is slow)
    here = checkpoint.saved_identity(ckpt)
    with pytest.raises(ConfigError, match=r"1 rank\(s\) \(this run: 2\)"):
        checkpoint.check_same_run("ck.pt", here, {**here, "world": 2})
    # a checkpoint saved before these keys were in the identity: read from its args and world
    older = {**ckpt, "identity": {k: v for k, v in ckpt["identity"].items()
                                  if k not in checkpoint.LATER_KEYS}}
    assert checkpoint.saved_identity(older) == here
    # --total-steps keeps counting frames on resume: 96 frames are 3 updates of 32
    assert main([*base, "--total-steps", "96"]) == 0
    assert torch.load(out / "checkpoint.pt", weights_only=True)["global_step"] == 96


def test_resuming_a_finished_run_builds_nothing_and_writes_nothing(dataset, tmp_path, capsys, monkeypatch):
    """"nothing to train" is said before the environments are built: no sim-only measurement,
    no line appended to sim_only.jsonl or log.csv, the checkpoint untouched."""
    from bps_train import train

    out = tmp_path / "run"
    base = ["--dataset", str(dataset), "--out-dir", str(out), *TINY]   # with --sim-only-steps 2
    assert train.main([*base, "--total-steps", "32"]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and p.suffix != ".lock"}
    capsys.readouterr()
    monkeypatch.setattr(train.bps_runtime, "make", lambda *a, **k: pytest.fail("environments built"))
    assert train.main([*base, "--total-steps", "32"]) == 0
    err = capsys.readouterr().err
    assert "nothing to train" in err and "update 1" in err
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and p.suffix != ".lock"} == before


def test_a_resume_with_another_env_config_names_only_what_differs_before_building(dataset, tmp_path, capsys,
                                                                                 monkeypatch):
    """Another env config (here: depth noise on) is refused before the environments are built,
    naming the keys that differ, not printing both whole configs."""
    from bps_train import train

    out = tmp_path / "run"
    base = ["--dataset", str(dataset), "--out-dir", str(out), *TINY, "--sim-only-steps", "0"]
    assert train.main([*base, "--total-steps", "32"]) == 0
    capsys.readouterr()
    monkeypatch.setattr(train.bps_runtime, "make", lambda *a, **k: pytest.fail("environments built"))
    assert train.main([*base, "--total-steps", "64", "--noise", "depth=redwood"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "noise" in err[0] and "redwood" in err[0], err
    assert "sensors" not in err[0] and "success_distance" not in err[0] and len(err[0]) < 600, err


def test_no_resume_moves_the_previous_runs_files_aside(dataset, tmp_path, capsys):
    """--no-resume into a run's folder: the old checkpoint, snapshots, log and sim-only records go
    whole into OUT_DIR/previous-<time>/ (were: snapshots 3-4 of the old run mixed in with the new
    run's 1-2, log.csv replaced); a user's file stays where it is."""
    from bps_train.train import main

    out = tmp_path / "run"
    base = ["--dataset", str(dataset), "--out-dir", str(out), *TINY, "--snapshot-every", "1"]
    assert main([*base, "--total-steps", "128"]) == 0
    (out / "notes.txt").write_text("mine")
    old = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and not p.name.endswith(".lock")}
    capsys.readouterr()
    assert main([*base, "--total-steps", "64", "--no-resume"]) == 0
    assert "were moved to" in capsys.readouterr().out
    prev = [p for p in out.iterdir() if p.name.startswith("previous-")]
    assert len(prev) == 1
    assert {p.name: p.read_bytes() for p in prev[0].iterdir()} == {k: v for k, v in old.items() if k != "notes.txt"}
    assert sorted(p.name for p in out.glob("ckpt_*.pt")) == ["ckpt_000001.pt", "ckpt_000002.pt"]
    assert [int(r["update"]) for r in _rows(out / "log.csv")] == [1, 2]
    assert [int(r["update"]) for r in _rows(prev[0] / "log.csv")] == [1, 2, 3, 4]
    assert (out / "notes.txt").read_text() == "mine"


def test_a_checkpoint_naming_the_manifest_bytes_still_resumes(dataset):
    """Checkpoints saved before the content identity carry the manifest bytes' sha256."""
    from bps_assets.errors import ConfigError
    from bps_train import checkpoint

    raw, content = checkpoint.legacy_manifest_sha256(dataset), checkpoint.dataset_sha256(dataset)
    assert raw != content
    checkpoint.check_same_run("ck.pt", {"dataset_sha256": raw}, {"dataset_sha256": content}, raw)
    with pytest.raises(ConfigError, match="dataset manifest"):
        checkpoint.check_same_run("ck.pt", {"dataset_sha256": "0" * 64}, {"dataset_sha256": content}, raw)


def _run_id(episodes):
    """The identity a run with ``--episodes episodes`` (and its env config) saves and compares."""
    from types import SimpleNamespace

    from bps_runtime.env.config import EnvConfig
    from bps_train import checkpoint

    args = SimpleNamespace(**{k: 1 for k in checkpoint.IDENTITY_ARGS})
    args.episodes = episodes
    out = checkpoint.identity(args, "d" * 64)
    out["env"] = checkpoint.env_identity(EnvConfig.from_kwargs("m/manifest.json", episodes=episodes))
    return out


def test_the_same_episode_file_named_another_way_resumes(tmp_path, monkeypatch):
    """``--episodes`` (and the env config's episode source) is compared as a resolved path: the
    same file named relative, absolute or through a link is the same run; a relative path saved
    by an older checkpoint resolves against this run's folder; another file is still refused."""
    from bps_assets.errors import ConfigError
    from bps_train import checkpoint

    (tmp_path / "eps.json.gz").write_bytes(b"")
    (tmp_path / "link.json.gz").symlink_to(tmp_path / "eps.json.gz")
    monkeypatch.chdir(tmp_path)

    saved = {"args": {}, "world": 1, "identity": _run_id("eps.json.gz")}
    for other in (str(tmp_path / "eps.json.gz"), "./eps.json.gz", "link.json.gz"):
        checkpoint.check_same_run("ck.pt", checkpoint.saved_identity(saved), _run_id(other))
    raw = _run_id("eps.json.gz")   # as saved before: the path as typed
    raw["episodes"] = raw["env"]["episodes"]["source"] = "eps.json.gz"
    checkpoint.check_same_run("ck.pt", checkpoint.saved_identity({**saved, "identity": raw}),
                              _run_id(str(tmp_path / "eps.json.gz")))
    (tmp_path / "other.json.gz").write_bytes(b"")
    with pytest.raises(ConfigError, match="--episodes"):
        checkpoint.check_same_run("ck.pt", checkpoint.saved_identity(saved), _run_id("other.json.gz"))


def test_a_run_folder_moved_elsewhere_resumes_with_the_same_relative_episodes(tmp_path, monkeypatch):
    """The identity holds ``--episodes`` resolved: a run copied to another folder (or node) and
    resumed there with the same relative path resolves elsewhere, yet it is the same run (the
    path as typed matches); an older checkpoint's typed path (its args) counts the same; another
    relative path in the new folder is still refused."""
    from bps_assets.errors import ConfigError
    from bps_train import checkpoint

    for folder in ("old", "new"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "eps.json.gz").write_bytes(b"")
    monkeypatch.chdir(tmp_path / "old")
    saved = {"args": {"episodes": "eps.json.gz"}, "world": 1, "identity": _run_id("eps.json.gz")}
    assert saved["identity"]["episodes"] == str(tmp_path / "old" / "eps.json.gz")
    monkeypatch.chdir(tmp_path / "new")
    here = _run_id("eps.json.gz")
    checkpoint.check_same_run("ck.pt", checkpoint.saved_identity(saved), here)
    older = {k: v for k, v in saved["identity"].items() if k != "episodes_typed"}   # typed only in its args
    checkpoint.check_same_run("ck.pt", checkpoint.saved_identity({**saved, "identity": older}), here)
    (tmp_path / "new" / "other.json.gz").write_bytes(b"")
    with pytest.raises(ConfigError, match="--episodes") as e:
        checkpoint.check_same_run("ck.pt", checkpoint.saved_identity(saved), _run_id("other.json.gz"))
    assert "episodes_typed" not in str(e.value)


def test_sigint_saves_a_checkpoint_and_exits_cleanly(dataset, tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "bps_train.train", "--dataset", str(dataset), "--out-dir", str(out), *TINY,
           "--sim-only-steps", "0", "--save-every", "1000", "--total-steps", "1000000"]
    returncode, stdout, err = _sigint_once_training(cmd)
    assert returncode == 130, stdout[-2000:] + err[-3000:]
    assert "Traceback" not in err and "KeyboardInterrupt" not in err and "cannot schedule" not in err, err
    assert "resume" in err.strip().splitlines()[-1]
    ckpt = torch.load(out / "checkpoint.pt", weights_only=True)  # save_every 1000: written by the stop
    assert ckpt["update"] >= 1
    # --sim-only-steps 0: no ratio printed instead of a ratio of nan
    assert "update 1/" in stdout and "nan of sim" not in stdout and "of sim" not in stdout


def test_dataset_info_counts_what_the_environments_serve(dataset):
    import gzip

    from bps_assets.pipeline.manifest import load_manifest
    from bps_runtime.episodes.dataset_info import scene_and_episode_counts

    count = 0
    for entry in load_manifest(dataset).scenes("val"):  # habitat v1: one content file per scene
        with gzip.open(entry.episodes, "rt") as f:
            count += len(json.load(f)["episodes"])
    assert count > 0 and scene_and_episode_counts(dataset, "val") == (1, count)


def _save_without(path, ckpt: dict, key: str) -> None:
    """``ckpt`` saved at ``path`` without identity ``key``: a checkpoint from before it was recorded."""
    from bps_train import checkpoint

    checkpoint.save(path, {**{k: v for k, v in ckpt.items() if k not in ("format", "version")},
                           "identity": {k: v for k, v in ckpt["identity"].items() if k != key}})


def test_eval_restores_the_checkpoints_noise(dataset, tmp_path, monkeypatch, capsys):
    """bps-train --eval makes its env with the noise the checkpoint was trained with (as its
    sensor and resolution); an explicit --noise wins (an eval under other noise)."""
    import bps_runtime
    from bps_runtime.noise.options import NoiseOptions
    from bps_train.train import run as main

    out = tmp_path / "run"
    tiny = ["--resolution", "16", "--width", "4", "--hidden", "16", "--num-envs", "2", "--rollout-steps", "4",
            "--sim-only-steps", "0", "--threads", "1"]
    main(["--dataset", str(dataset), "--out-dir", str(out), *tiny, "--total-steps", "8",
          "--noise", "depth=redwood,actuation=locobot-ilqr,multiplier=0.5"])
    made, real = [], bps_runtime.make
    monkeypatch.setattr(bps_runtime, "make", lambda *a, **kw: made.append(real(*a, **kw)) or made[-1])
    ev = ["--dataset", str(dataset), "--eval", str(out / "checkpoint.pt"), "--eval-split", "val",
          "--eval-episodes", "2", "--num-envs", "2", "--threads", "1", "--out-dir", str(tmp_path / "ev")]
    main(ev)
    assert made[-1].config.noise == NoiseOptions(depth="redwood", actuation="locobot-ilqr", multiplier=0.5)
    main(ev + ["--noise", "depth=redwood,multiplier=2"])   # (its sensor is depth: RGB noise would be refused)
    assert made[-1].config.noise == NoiseOptions(depth="redwood", multiplier=2.0)
    # a noisy checkpoint from before the noise rules were recorded: resume and eval print one note
    from bps_train import checkpoint

    ckpt = torch.load(out / "checkpoint.pt", weights_only=True)
    assert ckpt["identity"]["noise_rules"] == checkpoint.NOISE_RULES
    assert "noise rules" not in capsys.readouterr().err
    _save_without(out / "checkpoint.pt", ckpt, "noise_rules")
    main(ev)
    (note,) = [ln for ln in capsys.readouterr().err.splitlines() if "older noise rules" in ln]
    assert str(out / "checkpoint.pt") in note and "Redwood depth noise" in note and "goal image" not in note
    main(["--dataset", str(dataset), "--out-dir", str(out), *tiny, "--total-steps", "16",
          "--noise", "depth=redwood,actuation=locobot-ilqr,multiplier=0.5"])   # resumes, not refused
    assert torch.load(out / "checkpoint.pt", weights_only=True)["update"] == 2
    assert sum("older noise rules" in ln for ln in capsys.readouterr().err.splitlines()) == 1


def test_an_imagenav_checkpoint_from_before_the_heading_rule_notes_it_once(dataset, tmp_path, capsys):
    """An ImageNav run on episode files records the episode rules' version; a checkpoint without
    it (saved before the integer-id goal heading, a479ed0) resumes and evaluates with one note
    naming the change, not a refusal."""
    from bps_train import checkpoint
    from bps_train.train import run as main

    out = tmp_path / "run"
    base = ["--dataset", str(dataset), "--out-dir", str(out), "--task", "imagenav", "--sensor", "rgb",
            "--episodes", "dataset", "--resolution", "16", "--width", "4", "--hidden", "16", "--num-envs", "2",
            "--rollout-steps", "4", "--sim-only-steps", "0", "--threads", "1"]
    main([*base, "--total-steps", "8"])
    ckpt = torch.load(out / "checkpoint.pt", weights_only=True)
    assert ckpt["identity"]["episode_rules"] == checkpoint.EPISODE_RULES
    assert "older episode rules" not in capsys.readouterr().err
    _save_without(out / "checkpoint.pt", ckpt, "episode_rules")
    main([*base, "--total-steps", "16"])   # resumes, not refused
    assert torch.load(out / "checkpoint.pt", weights_only=True)["update"] == 2
    (note,) = [ln for ln in capsys.readouterr().err.splitlines() if "older episode rules" in ln]
    assert str(out / "checkpoint.pt") in note and "JSON integer" in note and "the split's episode files" in note
    # the resumed run saved the current rules; an eval of the old checkpoint notes it too
    _save_without(out / "checkpoint.pt", ckpt, "episode_rules")
    main(["--dataset", str(dataset), "--eval", str(out / "checkpoint.pt"), "--eval-split", "val",
          "--eval-episodes", "2", "--threads", "1", "--out-dir", str(tmp_path / "ev")])
    assert sum("older episode rules" in ln for ln in capsys.readouterr().err.splitlines()) == 1


def test_a_resume_with_another_layout_notes_it_once(dataset, tmp_path, capsys):
    """A checkpoint records its layout per rank (env groups, threads); a resume with another one
    (here --double-buffer true, then false) prints one note naming both, not a refusal, and none
    when they match. A checkpoint from before layouts were recorded is read with the rule of then
    (two groups when --double-buffer and NUM_ENVS is even, every rank on --threads)."""
    from bps_train import checkpoint
    from bps_train.train import run as main

    out = tmp_path / "run"
    base = ["--dataset", str(dataset), "--out-dir", str(out), "--resolution", "16", "--width", "4", "--hidden", "16",
            "--num-envs", "2", "--rollout-steps", "4", "--sim-only-steps", "0", "--threads", "1"]

    def notes():
        return [ln for ln in capsys.readouterr().err.splitlines() if "env group(s) per rank" in ln]

    main([*base, "--total-steps", "8", "--double-buffer", "true"])
    first = torch.load(out / "checkpoint.pt", weights_only=True)
    assert first["identity"]["layout"] == {"groups": 2, "threads": 1} and notes() == []
    main([*base, "--total-steps", "16", "--double-buffer", "false"])   # resumes, not refused
    assert torch.load(out / "checkpoint.pt", weights_only=True)["update"] == 2
    (note,) = notes()
    assert str(out / "checkpoint.pt") in note and "ran with 2 env group(s) per rank on 1 thread(s)" in note
    assert "this run has 1 env group(s) per rank on 1 thread(s)" in note
    main([*base, "--total-steps", "24", "--double-buffer", "false"])   # the layout it saved: no note
    assert notes() == []
    _save_without(out / "checkpoint.pt", first, "layout")   # saved before layouts were: two groups then
    main([*base, "--total-steps", "16", "--double-buffer", "false"])
    (note,) = notes()
    assert "does not record its layout" in note and "625ac9c" in note and "2 env group(s)" in note
    assert checkpoint.saved_layout(first) == ({"groups": 2, "threads": 1}, True)


def test_eval_of_a_short_episode_file_runs_one_env_per_distinct_episode(dataset, tmp_path, monkeypatch):
    """--eval-episodes-file with fewer than 64 distinct episodes runs that many envs, not 64 (the
    env count sets which env and random stream runs each episode); --eval-episodes below it, that
    many. The file is read once for the count and the envs."""
    import gzip

    import bps_runtime
    from bps_assets.pipeline import habitat_episodes
    from bps_train.train import run as main

    content = dataset.parent / "episodes" / "pointnav" / "val" / "content"
    doc = json.loads(gzip.open(next(content.glob("*.json.gz"))).read())
    doc["episodes"] = doc["episodes"][:3]
    split = tmp_path / "three.json.gz"
    split.write_bytes(gzip.compress(json.dumps(doc).encode()))
    made, real = [], bps_runtime.make
    monkeypatch.setattr(bps_runtime, "make", lambda *a, **kw: made.append(kw["config"].num_envs) or real(*a, **kw))
    reads, read = [], habitat_episodes.read_pointnav_table
    monkeypatch.setattr(habitat_episodes, "read_pointnav_table", lambda p: reads.append(p) or read(p))
    ev = ["--dataset", str(dataset), "--eval", "random", "--eval-episodes-file", str(split), "--resolution", "16",
          "--threads", "1", "--seed", "1", "--out-dir", str(tmp_path / "ev")]
    assert main(ev)["episodes"] == 3 and made == [3] and len(reads) == 1
    assert main([*ev, "--eval-episodes", "2"])["episodes"] == 2 and made == [3, 2]


def test_lod_flag_reaches_the_env_config_and_a_bad_one_is_refused_before_building(dataset, tmp_path, capsys,
                                                                                 monkeypatch):
    """--lod full / a level index go to make(lod=...); auto (the default) leaves the config as it
    was; a bad value is one ConfigError line (exit 2) before any environment is built."""
    from bps_train import train
    from bps_train.args import parse

    def cfg(*extra):
        a = parse(train.Args, ["--dataset", str(dataset), *extra])
        return train.env_config(a, "train", 4, 0, "sample", False).to_dict()

    assert cfg("--lod", "full")["sensors"]["lod"] == "full"
    assert cfg("--lod", "1")["sensors"]["lod"] in ("1", 1)
    assert cfg() == cfg("--lod", "auto")
    monkeypatch.setattr(train.bps_runtime, "make", lambda *a, **k: pytest.fail("environments built"))
    capsys.readouterr()
    assert train.main(["--dataset", str(dataset), "--out-dir", str(tmp_path / "run"), *TINY, "--lod", "coarse"]) == 2
    err = capsys.readouterr().err
    assert "coarse" in err and "lod" in err, err


def test_an_eval_stopped_by_its_frame_cap_says_how_many_episodes_it_measured(dataset, tmp_path, capsys,
                                                                             monkeypatch):
    """``evaluate`` stops at ``eval_frame_cap`` frames; with fewer episodes than asked it says so
    on stderr and in the JSON line (``episodes_wanted``); an eval that got them all adds nothing."""
    from bps_train import train

    ev = ["--dataset", str(dataset), "--eval", "stop", "--eval-split", "val", "--eval-episodes", "2",
          "--num-envs", "2", "--threads", "1"]
    monkeypatch.setattr(train, "eval_frame_cap", lambda want, steps: 0)   # not one step
    res = train.run(ev)
    assert res["episodes"] == 0 and res["episodes_wanted"] == 2 and res["frames"] == 0
    assert "with 0 of 2 episode(s) ended" in capsys.readouterr().err
    monkeypatch.undo()
    res = train.run(ev)
    assert res["episodes"] == 2 and "episodes_wanted" not in res
    assert "--eval stopped" not in capsys.readouterr().err
