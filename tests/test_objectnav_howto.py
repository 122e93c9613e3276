"""docs/OBJECTNAV.md's how-to, run as written: synth --semantic -> preprocess with ObjectNav's
agent -> episodes --split val (the manifest's val scene only) -> an eval video of the random
policy whose frames and JSON carry the goal category and the actions (the training line and the
eval of its checkpoint are left out: minutes of training)."""
from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "OBJECTNAV.md"


def howto_commands() -> list[str]:
    text = DOC.read_text()
    block = text.split("```bash\n", 1)[1].split("```", 1)[0]
    return [ln for ln in block.splitlines() if ln.strip() and not ln.startswith("#")]


@pytest.mark.slow
def test_the_howto_runs_as_written(tmp_path):
    cmds = howto_commands()
    assert [c.split()[0:2] for c in cmds] == [["bps-assets", "synth"], ["bps-assets", "preprocess"],
                                             ["bps-assets", "episodes"], ["bps-train", "--dataset"],
                                             ["bps-train", "--dataset"], ["bps-train", "--dataset"]]
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    outputs = []
    for c in cmds:
        if "--total-steps" in c or "checkpoint.pt" in c:   # training, and the eval of what it trains
            continue
        r = subprocess.run(c, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, (c, r.stdout[-2000:], r.stderr[-2000:])
        outputs.append(r.stdout + r.stderr)
    # synth's printed command is step 2's (the agent flags included)
    printed = next(ln for ln in outputs[0].splitlines() if ln.startswith("preprocess them: "))
    assert printed.endswith("--agent-radius 0.18 --agent-height 0.88") and "--agent-radius 0.18 --agent-height 0.88" \
        in cmds[1], printed
    assert "left out 1 scene(s)" in outputs[2] and "(train)" in outputs[2]
    man = json.loads((tmp_path / "OBJ" / "manifest.json").read_text())
    val = [n for n, e in man["scenes"].items() if e["subset"] == "val"]
    eps = json.loads(gzip.decompress((tmp_path / "EPS" / "val" / "val.json.gz").read_bytes()))
    content = sorted(p.name for p in (tmp_path / "EPS" / "val" / "content").iterdir())
    assert len(val) == 1 and content == [f"{val[0]}.json.gz"] and "category_to_task_category_id" in eps
    videos = sorted((tmp_path / "runs" / "objnav_random" / "videos").glob("*.json"))
    assert len(videos) == 2
    for v in videos:
        doc = json.loads(v.read_text())
        assert val[0] in doc["scene_id"] and doc["goals"]["object_category"]
        assert len(doc["actions"]) == doc["frames"] == len(list(v.with_suffix("").glob("frame_*.png")))
