"""What the CLIs say to a user (issue 25 items 7, 8, 10): `info` on a scan suggests convert, a
GOOGLE_texture_basis image is named as such, `bps-train --help` answers without torch and
`bps_train.report --help` is whole, `bench` says what runs and that it still runs."""
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.main import main

ROOT = Path(__file__).resolve().parents[1]
ASSETS = ROOT.parent / "shared" / "assets"


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_info_on_a_scan_suggests_convert(synth_pair):
    glb = synth_pair / "gibson" / "Allensville.glb"
    r = run("info", glb)
    assert r.exit_code == 2 and "bad magic" in r.output
    assert f"bps-assets convert {glb} -o OUTDIR" in r.output


BASIS = ASSETS / "magnum-plugins" / "GltfImporter" / "image.basis"


@pytest.mark.skipif(not BASIS.is_file(), reason="../shared/assets absent")
def test_a_google_texture_basis_image_is_named_as_such(monkeypatch):
    from bps_assets.errors import MissingDependencyError
    from bps_assets.readers.images import decode_image

    monkeypatch.setitem(sys.modules, "opengl_basisu", None)  # the optional package absent
    with pytest.raises(MissingDependencyError) as ei:
        decode_image(BASIS.read_bytes(), "scene.gltf", "image 0")
    assert "GOOGLE_texture_basis" in str(ei.value) and "KHR_texture_basisu" not in str(ei.value)
    assert "pip install" in str(ei.value)


def test_bps_train_help_answers_without_importing_torch_and_report_help_is_whole():
    code = ("import sys, contextlib, io\nfrom bps_train.train import main\n"
            "with contextlib.redirect_stdout(io.StringIO()) as f:\n"
            "    try: main(['--help'])\n    except SystemExit: pass\n"
            "print('torch' in sys.modules, '--num-envs' in f.getvalue())")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert r.stdout.split() == ["False", "True"], r.stderr
    r = subprocess.run([sys.executable, "-m", "bps_train.report", "--help"], cwd=ROOT, capture_output=True,
                       text=True)
    import bps_train.report as report

    first_paragraph = " ".join(report.__doc__.split("\n\n")[0].split())
    assert first_paragraph.endswith("vs frames)."), first_paragraph  # the paragraph, not a cut line
    assert r.returncode == 0 and first_paragraph in " ".join(r.stdout.split())


def test_bench_says_what_runs_and_that_it_still_runs(synth_pair, tmp_path, monkeypatch):
    import cli.cmd_runtime as cmd

    r = run("preprocess", synth_pair, "-o", tmp_path / "out", "--dataset", "gibson", "--split", "tiny", "--workers", "1")
    assert r.exit_code == 0, r.output
    monkeypatch.setattr(cmd, "HEARTBEAT_S", 0.05)
    r = run("bench", tmp_path / "out" / "manifest.json", "--num-envs", "4", "--steps", "4", "--scenes", "1",
            "--resolution", "16", "--threads", "1", "--count-steps", "0", "--split", "train")
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert lines[0] == "bench: 4 envs x 4 timed steps on cpu, then 0 counted steps ..."
    assert "still running" in r.output and any(line.startswith("  done in ") for line in lines)
    # the phases as they happen: the env built, the timed steps by fifths, before the report
    ready = next(i for i, line in enumerate(lines) if line.startswith("  env ready in "))
    timed = [i for i, line in enumerate(lines) if line.startswith("  timed steps ")]
    assert [lines[i].split()[2] for i in timed] == ["1/4", "2/4", "3/4", "4/4"], r.output
    assert ready < timed[0] and timed[-1] < next(i for i, line in enumerate(lines) if line.startswith("env step:"))


def test_demo_help_shows_the_defaults():
    """`bps-assets demo --help` shows --scenes' default (the pipeline's DEMO_N) and what --workers is."""
    from bps_assets.pipeline.demo import DEMO_N

    r = run("demo", "--help")
    text = " ".join(r.output.split())
    assert r.exit_code == 0 and f"[default: {DEMO_N}; 1<=x<=30]" in text, text
    assert "--workers INTEGER RANGE Preprocess processes (default: all cores" in text, text
