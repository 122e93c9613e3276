"""The command lines as a user meets them: Ctrl-C exits 130, bad values are usage errors before
any work (never a traceback), one option name per concept, help text on every option."""
import os
import signal
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import cli.main as cli_main
from cli.main import main

ROOT = Path(__file__).resolve().parents[1]


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_ctrl_c_in_a_command_exits_130_not_aborted(monkeypatch):
    @click.command("boom")
    def boom():
        raise KeyboardInterrupt

    monkeypatch.setitem(cli_main.COMMANDS, "boom", ("x", "y", "raises Ctrl-C"))
    monkeypatch.setattr(cli_main, "load_command", lambda name: boom)
    r = run("boom")
    assert r.exit_code == 130, r.output
    assert "Aborted" not in r.output and "interrupted" in r.output


def test_sigint_during_synth_exits_130(tmp_path):
    exe = Path(sys.executable).with_name("bps-assets")
    cmd = [str(exe)] if exe.is_file() else [sys.executable, "-m", "cli.main"]
    p = subprocess.Popen([*cmd, "synth", str(tmp_path / "s"), "-n", "4", "--size", "gibson"], cwd=ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        p.stdout.readline()   # the first scene is written: the command runs inside click
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, err
    assert "Aborted!" not in err and "Traceback" not in err


def _train(capsys, *argv):
    from bps_train.train import main as train_main

    code = train_main([*argv])
    return code, capsys.readouterr().err


@pytest.mark.parametrize("device", ["cpux", "cuda:x", "gpu", "cuda:"])
def test_bps_train_bad_device_is_a_usage_error(capsys, device):
    code, err = _train(capsys, "--device", device)
    assert code == 2 and f"--device {device!r}: expected cpu, cuda or cuda:INDEX" in err
    assert "Traceback" not in err


def test_bps_train_cuda_without_cuda_is_a_usage_error(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    code, err = _train(capsys, "--device", "cuda")
    assert code == 2 and "--device cuda: CUDA is not available on this machine" in err


@pytest.mark.parametrize("flag,value", [("--lr", "nan"), ("--gamma", "inf"), ("--entropy-coef", "nan"),
                                        ("--stop-bias", "inf"), ("--lr", "abc")])
def test_bps_train_non_finite_float_is_a_usage_error(capsys, flag, value):
    from bps_train.args import parse
    from bps_train.train import Args

    with pytest.raises(SystemExit) as ei:
        parse(Args, [flag, value])
    err = capsys.readouterr().err
    assert ei.value.code == 2 and f"argument {flag}: expected a" in err and repr(value) in err
    assert parse(Args, [flag, "0.5"]).__getattribute__(flag[2:].replace("-", "_")) == 0.5


@pytest.mark.parametrize("argv", [
    ["navmesh", "IN", "-o", "OUT", "--agent-radius", "inf"],
    ["navmesh", "IN", "-o", "OUT", "--cell-size", "nan"],
    ["preprocess", "DIR", "-o", "OUT", "--max-climb", "inf"],
    ["convert", "IN", "-o", "OUT", "--position-error", "inf"],
    ["convert", "IN", "-o", "OUT", "--min-area", "inf"],
    ["episodes", "IN", "-o", "OUT", "--split", "train", "--per-scene", "1", "--goal-radius", "inf"],
    ["preview", "IN", "-o", "OUT/map.png", "--mpp", "inf"],
])
def test_non_finite_float_options_are_usage_errors(tmp_path, argv):
    scan = tmp_path / "x.glb"
    scan.write_bytes(b"not read: the option is refused first")
    argv = [str(scan) if a == "IN" else str(tmp_path) if a == "DIR" else a.replace("OUT", str(tmp_path / "out"))
            for a in argv]
    r = run(*argv)
    assert r.exit_code == 2, r.output
    assert "expected a finite number" in r.output, r.output
    assert "Traceback" not in r.output
    assert not (tmp_path / "out").exists()   # nothing written


def test_bench_says_no_done_when_it_fails(tmp_path):
    import json

    man = tmp_path / "manifest.json"
    man.write_text(json.dumps({"format_version": 1}))   # not a usable manifest: fails after the first line
    r = run("bench", man, "--num-envs", "2", "--steps", "2", "--threads", "1", "--count-steps", "0")
    assert r.exit_code == 2, r.output
    assert r.output.startswith("bench: ") and "error: " in r.output
    assert "done in" not in r.output, r.output


def test_convert_takes_out_and_workers_like_the_other_commands(synth_pair, tmp_path):
    glb = synth_pair / "gibson" / "Allensville.glb"
    for flag, workers in (("--out", "--workers"), ("--outdir", "--jobs"), ("-o", "-j")):
        r = run("convert", glb, flag, tmp_path / flag.strip("-"), "--dataset", "gibson", workers, "1")
        assert r.exit_code == 0, r.output
        assert (tmp_path / flag.strip("-") / "Allensville.bps").is_file()


def _leaf_commands():
    def walk(name, c):
        if isinstance(c, click.Group):
            for n, sub in c.commands.items():
                yield from walk(f"{name} {n}", sub)
        else:
            yield name, c

    for n in cli_main.COMMANDS:
        yield from walk(n, cli_main.load_command(n))


def test_every_option_of_every_command_has_help():
    missing = [f"{name} {'/'.join(p.opts)}" for name, c in _leaf_commands()
               for p in c.params if isinstance(p, click.Option) and not p.help]
    assert not missing, missing


@pytest.mark.parametrize("flag", ["--time", "--cpus-per-task", "--mem-gb"])
def test_launch_refuses_a_non_positive_resource_and_says_debug_opens_pdb(tmp_path, flag):
    r = run("launch", tmp_path, "-o", tmp_path / "out", "--dataset", "gibson", "--shards", "1", flag, "0")
    assert r.exit_code == 2 and "not in the range x>=1" in r.output, r.output
    assert "opens pdb" in " ".join(run("launch", "--help").output.split())


def test_demo_help_names_its_default_outdir():
    from bps_train.train import Args

    r = run("demo", "--help")
    assert r.exit_code == 0 and "default demo_out" in r.output
    assert Args().dataset == "demo_out/manifest.json"   # the folder bps-train reads by default


NAVMESH = ROOT.parent / "shared" / "assets" / "habitat_test_scenes_navmesh" / "apartment_1.navmesh"


def test_info_hint_fits_the_file_and_quotes_its_path(synth_pair, tmp_path):
    import shutil

    spaced = tmp_path / "my scans"
    spaced.mkdir()
    glb = spaced / "Allensville.glb"
    shutil.copy(synth_pair / "gibson" / "Allensville.glb", glb)
    r = run("info", glb)
    assert r.exit_code == 2 and f"`bps-assets convert '{glb}' -o OUTDIR`" in r.output, r.output
    assert "nav info" not in r.output
    if not NAVMESH.is_file():
        pytest.skip("shared assets absent")
    r = run("info", NAVMESH)
    assert r.exit_code == 2 and f"`bps-assets nav info {NAVMESH}`" in r.output, r.output
    assert "convert" not in r.output


def test_synth_semantic_over_kept_scans_says_which_lack_annotations(tmp_path):
    import json

    out = tmp_path / "s"
    assert run("synth", out, "-n", "1").exit_code == 0
    r = run("synth", out, "-n", "2", "--semantic")
    assert r.exit_code == 1, r.output
    assert "1 kept scene(s) have no annotations: Allensville" in r.output and "--overwrite" in r.output
    assert (out / "gibson" / "Collierville.semantic.txt").is_file()   # the scene it wrote is annotated
    r = CliRunner().invoke(main, ["synth", str(out), "-n", "2", "--semantic", "--json"])
    doc = json.loads(r.stdout)
    assert r.exit_code == 1 and doc["kept"] == ["Allensville", "Collierville"]
    assert doc["not_annotated"] == ["Allensville"]
    r = run("synth", out, "-n", "2", "--semantic", "--overwrite")
    assert r.exit_code == 0 and (out / "gibson" / "Allensville.semantic.txt").is_file()
    assert run("synth", out, "-n", "2", "--semantic").exit_code == 0   # all kept, all annotated


def test_bps_train_help_shows_empty_defaults_and_no_double_default(capsys):
    from bps_train.args import parse
    from bps_train.train import Args

    with pytest.raises(SystemExit):
        parse(Args, ["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "(default: )" not in out and out.count("(default: '')") == 4   # --eval, its file, --categories, --noise
    assert "(default: sample, as habitat-baselines) (default: False)" not in out


def test_episodes_out_that_is_a_file_is_refused_before_any_work(tmp_path):
    nav = tmp_path / "x.navmesh.bps"
    nav.write_bytes(b"never read: the -o check comes first")
    out = tmp_path / "taken"
    out.write_text("a user's file")
    r = run("episodes", nav, "-o", out, "--split", "train", "--per-scene", "1")
    assert r.exit_code == 2 and "is a file" in r.output, r.output
    assert out.read_text() == "a user's file"


def test_option_equals_tilde_is_expanded(tmp_path, monkeypatch):
    from bps_train.args import parse
    from bps_train.train import Args

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    assert parse(Args, ["--out-dir=~/runs", "--dataset=~/d/manifest.json"]).out_dir == str(tmp_path / "runs")
    assert parse(Args, ["--noise=", "--out-dir", "~x"]).out_dir == "~x"   # only the = form, only a leading ~
    r = run("synth", "--seed=0", "-n", "1", "--layout=gibson", tmp_path / "s", "--json")
    assert r.exit_code == 0
    r = run("navmesh", tmp_path / "s" / "gibson" / "Allensville.glb", "--out=~/nav", "--dataset", "gibson")
    assert r.exit_code == 0, r.output
    assert (tmp_path / "nav" / "Allensville.navmesh.bps").is_file() and not (tmp_path / "~").exists()


def test_episodes_split_typo_of_a_subset_is_warned(synth_pair, tmp_path):
    out = tmp_path / "out"
    r = run("preprocess", synth_pair, "-o", out, "--dataset", "gibson", "--split", "tiny", "--workers", "1")
    assert r.exit_code == 0, r.output
    navs = sorted((out / "navmeshes").glob("*.navmesh.bps"))
    r = run("episodes", *navs, "-o", tmp_path / "ep", "--split", "vall", "--per-scene", "1")
    assert r.exit_code == 0 and "split 'vall' is none of the manifest's subsets" in r.output, r.output
    assert "did you mean 'val'?" in r.output
    r = run("episodes", *navs, "-o", tmp_path / "ep", "--split", "val_mini", "--per-scene", "1")
    assert r.exit_code == 0 and "warning" not in r.output   # a free split name of its own


@pytest.mark.parametrize("value,says", [
    ("data/pointnav/val/val.json.gz", "no such episode file"),
    ("data/{split}/x.json.gz", "{split} data_path template"),
    ("smaple", "did you mean 'sample'?"),
    ("foo", "expected sample, dataset or an episode file"),
])
def test_bps_train_episodes_says_what_is_wrong(capsys, tmp_path, value, says):
    code, err = _train(capsys, "--episodes", value)
    assert code == 2 and f"--episodes {value!r}: " in err and says in err, err


def test_options_that_need_another_are_refused_alone(tmp_path):
    r = run("datasets", "--split", "tiny")
    assert r.exit_code == 2 and "give its NAME too" in r.output, r.output
    man = tmp_path / "manifest.json"
    man.write_text("{}")
    for extra in (["--dataset", "gibson"], ["--split", "tiny"]):
        r = run("verify", man, *extra)
        assert r.exit_code == 2 and "--dataset / --split go with --source" in r.output, r.output


@pytest.mark.parametrize("argv", [["--eval-episodes-file", "nope.json.gz"], ["--eval-episodes", "5"],
                                  ["--eval-greedy"]])
def test_bps_train_eval_options_without_eval_are_refused(capsys, argv):
    code, err = _train(capsys, *argv)
    assert code == 2 and f"{argv[0]}: with --eval CKPT only" in err, err
