"""docs/manifest.schema.json against manifests preprocess really writes (the real backend): a
scan dataset with HM3D-Semantics annotations, its shards and their merge, and a composed habitat
scene dataset (``input:PATH`` sources, ``asset:KEY`` outputs). Validated with jsonschema (the
test extra's), Draft 2020-12 as the schema declares."""
import json
from pathlib import Path

import jsonschema   # the test extra's: a missing one fails here rather than skipping
import pytest

from bps_assets.pipeline.manifest import merge_manifests
from bps_assets.pipeline.plan import Shard
from bps_assets.pipeline.preprocess import PreprocessOptions, preprocess

REPO = Path(__file__).resolve().parents[1]
SCHEMA = json.loads((REPO / "docs" / "manifest.schema.json").read_text())
DATASET_0 = (REPO.parent / "shared" / "datasets" / "habitat-sim-test-assets" / "dataset_tests" / "dataset_0"
             / "test_dataset_0.scene_dataset_config.json")
OPTS = PreprocessOptions(workers=1, in_process=True)


def errors(path) -> list[str]:
    """Every schema violation of the manifest at ``path``, as 'json.path: message'."""
    cls = jsonschema.Draft202012Validator
    cls.check_schema(SCHEMA)
    doc = json.loads(Path(path).read_text())
    return [f"{'/'.join(map(str, e.path))}: {e.message[:300]}" for e in cls(SCHEMA).iter_errors(doc)]


def test_scan_semantic_shard_and_merged_manifests_validate(tmp_path):
    from bps_assets import synth
    from bps_assets.synth import semantic as ssem

    names = ["Allensville", "Collierville"]
    for info in synth.generate(tmp_path / "src", "gibson", names, seed=0, size="small"):
        ssem.write_hm3d(info.path, "gibson", info.name, 0, "small")
    out = tmp_path / "out"
    shards = [preprocess(tmp_path / "src", out, "gibson", "tiny", OPTS, Shard(i, 2)) for i in range(2)]
    for r in shards:
        assert r.count("failed") == 0 and errors(r.manifest_path) == []
    merged = merge_manifests([r.manifest_path for r in shards], out / "manifest.json")
    assert merged.names() == names and errors(merged.path) == []
    # the annotation pair is the scene's (sources) and made its semantic section
    e = merged.doc["scenes"]["Allensville"]
    assert {"semantic_mesh", "semantic_table"} <= set(e["sources"]) and e["stats"]["semantic"]["format"] == "hm3d"


@pytest.mark.skipif(not DATASET_0.is_file(), reason="habitat-sim test scene datasets not in ../shared")
def test_composed_dataset_manifest_validates(tmp_path):
    r = preprocess(DATASET_0.parent, tmp_path / "out", str(DATASET_0), None, OPTS)
    assert r.count("ok") == 1
    e = json.loads(r.manifest_path.read_text())["scenes"]["dataset_test_scene"]
    assert any(k.startswith("input:") for k in e["sources"]) and any(k.startswith("asset:") for k in e["outputs"])
    assert errors(r.manifest_path) == []
    # the schema still refuses a role that is neither a documented one nor input:/asset:
    doc = json.loads(r.manifest_path.read_text())
    doc["scenes"]["dataset_test_scene"]["outputs"]["extra"] = e["outputs"]["scene"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    assert any("extra" in x for x in errors(bad))


def test_schema_describes_label_table_lod_unmatched_and_warnings():
    """The fields preprocess writes that the schema once left out: settings.convert.lod and
    label_table ({name, sha256}), stats.semantic.unmatched_objects / unmatched_labels and
    stats.warnings (a list of lines), each with its type: a wrong one is refused."""
    cls = jsonschema.Draft202012Validator
    good = {"lod": [0.05, 0.2], "label_table": {"name": "labels.tsv", "sha256": "a" * 64}}
    stats = {"semantic": {"format": "hm3d", "categories": {"chair": 2}, "unmatched_objects": 1,
                          "unmatched_labels": {"thing": 1}}, "warnings": ["a line"]}
    conv = {**SCHEMA["properties"]["settings"]["properties"]["convert"], "$defs": SCHEMA["$defs"]}
    st = {**SCHEMA["$defs"]["scene"]["properties"]["stats"], "$defs": SCHEMA["$defs"]}
    assert {"lod", "label_table"} <= set(conv["properties"])
    assert {"unmatched_objects", "unmatched_labels"} <= set(st["properties"]["semantic"]["properties"])
    assert list(cls(conv).iter_errors(good)) == [] and list(cls(st).iter_errors(stats)) == []
    for bad in ({"label_table": "labels.tsv"}, {"label_table": {"name": "x"}}, {"lod": [0]}, {"lod": 0.1}):
        assert list(cls(conv).iter_errors(bad)), bad
    for bad in ({"warnings": "a line"}, {"warnings": [3]},
                {"semantic": {**stats["semantic"], "unmatched_objects": -1}},
                {"semantic": {**stats["semantic"], "unmatched_labels": {"thing": "1"}}}):
        assert list(cls(st).iter_errors(bad)), bad
