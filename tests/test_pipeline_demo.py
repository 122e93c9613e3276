import shlex

import pytest

from bps_assets.errors import OutputExistsError
from bps_assets.pipeline import demo


def test_steps_are_a_list_callers_compose(tmp_path):
    """Layers above the pipeline append their own steps (cli/cmd_demo.py adds the runtime's)."""
    seen = []
    extra = demo.DemoStep("fps", "run the env", lambda ctx: seen.append(ctx.outdir))
    steps = [*demo.DEFAULT_STEPS, extra]
    assert [s.name for s in steps] == ["synthesize", "preprocess", "verify", "summary", "fps"]
    # a failing step stops the demo; the steps after it do not run
    lines = []
    ok = demo.run_demo(tmp_path / "d", echo=lines.append, steps=[
        demo.DemoStep("a", "first", lambda ctx: False), extra])
    assert ok is False and seen == [] and "step 'a' failed" in lines[-1]
    assert demo.run_demo(tmp_path / "d", echo=lines.append, steps=[extra]) and seen == [tmp_path / "d"]


def test_demo_refuses_a_foreign_directory(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(OutputExistsError, match="not made by `bps-assets demo`"):
        demo.run_demo(tmp_path, steps=[])


def test_scene_choice_keeps_both_subsets():
    from bps_assets.pipeline.datasets import load_dataset

    tiny = load_dataset("gibson").scene_subsets("tiny")
    names = demo.demo_scene_names()
    assert len(names) == 6 and [tiny[n] for n in names].count("val") == 2
    assert [tiny[n] for n in demo.demo_scene_names(2)] == ["train", "val"]


def test_demo_end_to_end(tmp_path):
    """synth -> real converters -> verify, as `bps-assets demo` runs it (2 scenes for time)."""
    from bps_assets.pipeline.manifest import load_manifest

    out = tmp_path / "demo out"   # a space: the "next:" command must still paste into a shell
    lines = []
    # the pipeline's own steps (the runtime's env step is tested by its owner)
    assert demo.run_demo(out, scenes=2, workers=2, echo=lines.append, steps=demo.DEFAULT_STEPS), lines
    text = "\n".join(lines)
    assert "OK: 2 scenes" in text and "demo done" in text
    # issue 35 item 8: the demo's own absent scenes are said once, calmly, not as missing / a warning
    assert "missing from the source" not in text and "warning:" not in text, text
    assert "the demo synthesizes 2 of split tiny's 30 train and val scenes; the other 28 are absent" in text
    from test_pipeline_preprocess import validate_schema

    nxt = next(ln for ln in lines if ln.strip().startswith("next:")).split("next:", 1)[1]
    assert shlex.split(nxt) == ["bps-assets", "verify", str(out.resolve() / "manifest.json"), "--deep"]
    validate_schema(out / "manifest.json")
    m = load_manifest(out / "manifest.json")
    assert m.names("train") == ["Allensville"] and m.names("val") == ["Collierville"]
    assert all(s.stats["episodes"] == demo.DEMO_EPISODES for s in m.scenes())
    assert all(s.stats["triangles"] > 1000 and s.stats["navigable_area"] > 1 for s in m.scenes())
    # a rerun reuses everything
    lines.clear()
    assert demo.run_demo(out, scenes=2, workers=1, echo=lines.append, steps=demo.DEFAULT_STEPS)
    assert "0 processed, 2 up to date" in "\n".join(lines)
