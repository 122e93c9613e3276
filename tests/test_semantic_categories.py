"""The raw-label -> mpcat40 map: the built-in table agrees with the sources it names, and a
habitat-sim mapping TSV given with ``--label-table`` replaces it (typed errors for bad files)."""
from __future__ import annotations

import pytest

from bps_assets.readers import semantic_categories as sc

# facts of Matterport3D's metadata/category_mapping.tsv (habitat-sim's
# data/matterport_semantics/matterport_category_mappings.tsv): raw_category -> mpcat40, for
# labels the built-in table lists and used to map otherwise
MATTERPORT_MPCAT40 = {
    "crib": "misc", "flower pot": "objects", "flowerpot": "objects", "frame": "misc", "ottoman": "stool",
    "plant pot": "objects", "screen": "curtain", "sofa chair": "chair", "television": "misc",
    "tv stand": "furniture", "unknown": "unlabeled", "urinal": "objects", "wardrobe": "furniture",
    "armchair": "chair", "couch": "sofa", "potted plant": "plant", "toilet": "toilet", "tv": "tv_monitor",
}


@pytest.mark.parametrize("raw,want", sorted(MATTERPORT_MPCAT40.items()))
def test_builtin_entries_agree_with_matterport_category_mapping(raw, want):
    assert sc.mpcat40()[sc.map_raw(raw)] == want


# ------------------------------------------------------------------------------- --label-table
# a table in habitat-sim's layouts (columns from the header; facts only, not their file): the
# synth scan's labels, chair moved to sofa (unlike the built-in table), box left out (unmatched)
SYNTH_MAP = {"floor": "floor", "ceiling": "ceiling", "wall": "wall", "shelf": "shelving", "table": "table",
             "chair": "sofa", "toilet": "toilet", "potted plant": "plant", "bed": "bed", "cabinet": "cabinet",
             "tv": "tv_monitor", "sofa": "sofa"}


def write_map(path, rows: dict, layout: str = "hm3d"):
    """A mapping table as habitat-sim ships them: hm3d (tab-separated raw_category, category,
    mpcat40) or matterport (4-space-separated, more columns, mpcat40 last)."""
    if layout == "hm3d":
        lines = ["raw_category\tcategory\tmpcat40"] + [f"{k}\t{k}\t{v}" for k, v in rows.items()]
    else:
        lines = ["    ".join(["index", "raw_category", "category", "count", "ModelNet40", "mpcat40index", "mpcat40"])]
        lines += ["    ".join([str(i), k, k, "1", "", "0", v]) for i, (k, v) in enumerate(rows.items(), 1)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("layout", ["hm3d", "matterport"])
def test_label_table_file_replaces_the_builtin_table(tmp_path, layout):
    m = sc.label_mapper(write_map(tmp_path / "map.tsv", {**SYNTH_MAP, "Mattress": "bed", "plants": "plant"}, layout))
    names = sc.mpcat40()
    assert names[m("chair")] == "sofa" and names[sc.map_raw("chair")] == "chair"
    assert names[m("mattress")] == "bed" and names[m(" plants ")] == "plant"
    assert m("box") == -1 and m("kitchen chair") == -1  # exact labels only: no last-word guess
    assert sc.label_mapper("") is sc.map_raw


@pytest.mark.parametrize("text,msg", [
    ("raw\tcategory\tmpcat40\nchair\tchair\tchair\n", "line 1: a label table's header names the columns"),
    ("raw_category\tcategory\tmpcat40\nchair\tchair\tarmchairs\n", "line 2: 'armchairs' is not an mpcat40 name"),
    ("raw_category\tcategory\tmpcat40\nchair\tchair\tchair\nchair\tchair\tsofa\n", "line 3: raw_category 'chair' appears twice"),
    ("raw_category\tcategory\tmpcat40\nchair\tchair\n", "line 2: 2 fields, the header has 3"),
    ("raw_category\tcategory\tmpcat40\n", "has no rows"),
    (b"raw_category\tcategory\tmpcat40\n\xff\tx\tchair\n", "cannot read the label table"),
])
def test_bad_label_table_is_a_dataset_error_naming_file_and_line(tmp_path, text, msg):
    from bps_assets.errors import DatasetError

    p = tmp_path / "bad.tsv"
    p.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(DatasetError, match=msg) as ei:
        sc.read_label_table(p)
    assert str(p) in str(ei.value)
    with pytest.raises(DatasetError, match="no such file|cannot read"):
        sc.read_label_table(tmp_path / "absent.tsv")


def test_convert_with_label_table_records_it_and_reports_unmatched_labels(tmp_path):
    from click.testing import CliRunner

    from bps_assets import synth
    from bps_assets.packed_scene import read_packed_scene
    from bps_assets.synth import semantic as ssem
    from cli.main import main

    info = synth.generate(tmp_path / "src", layout="gibson", scenes=1)[0]
    ssem.write_hm3d(info.path, "gibson", info.name)
    tsv = write_map(tmp_path / "hm3dsem_category_mappings.tsv", SYNTH_MAP)
    r = CliRunner().invoke(main, ["convert", str(info.path), "-o", str(tmp_path / "out"), "--dataset", "gibson",
                                  "--label-table", str(tsv)], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    out = next((tmp_path / "out").glob("*.bps"))
    ps = read_packed_scene(out)
    t = ps.semantics
    got = {t.raw_names[i]: t.category_name(i) for i in range(len(t))}
    assert got["chair"] == "sofa" and got["box"] == "" and got["potted plant"] == "plant"
    rec = ps.header["converter"]["settings"]["label_table"]
    assert rec["name"] == tsv.name and len(rec["sha256"]) == 64
    assert ps.header["semantics"]["transfer"]["unmatched_labels"] == {"box": 1}
    r = CliRunner().invoke(main, ["info", str(out)], catch_exceptions=False)
    assert "(unmatched)" in r.output and "unmatched labels (objects): 'box' 1" in r.output
    # a bad table: refused before any work, naming the file and line
    write_map(tmp_path / "bad.tsv", {"chair": "armchairs"})
    r = CliRunner().invoke(main, ["convert", str(info.path), "-o", str(tmp_path / "out2"), "--dataset", "gibson",
                                  "--label-table", str(tmp_path / "bad.tsv")])
    assert r.exit_code != 0 and "bad.tsv" in r.output and "line 2" in r.output
    assert not (tmp_path / "out2").exists() or not any((tmp_path / "out2").iterdir())


def test_preprocess_label_table_reports_unmatched_and_an_edit_reconverts(tmp_path):
    import json

    from click.testing import CliRunner

    from bps_assets import synth
    from bps_assets.synth import semantic as ssem
    from cli.main import main

    info = synth.generate(tmp_path / "src", layout="gibson", scenes=1)[0]
    ssem.write_hm3d(info.path, "gibson", info.name)
    tsv = write_map(tmp_path / "map.tsv", {k: v for k, v in SYNTH_MAP.items() if k != "wall"})

    def pre(*extra):
        r = CliRunner().invoke(main, ["preprocess", str(tmp_path / "src"), "-o", str(tmp_path / "out"), "--dataset",
                                      "gibson", "--split", "full", "--workers", "1", "--episodes", "0",
                                      "--label-table", str(tsv), *extra], catch_exceptions=False)
        assert r.exit_code == 0, r.output
        return r.stdout

    text = pre()
    assert "unmatched annotation labels (no mpcat40 category, -1): 5 objects in 1 scene(s); most frequent: 'wall' 4, 'box' 1" in text
    man = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert man["settings"]["convert"]["label_table"]["name"] == "map.tsv"
    assert man["scenes"][info.name]["stats"]["semantic"]["unmatched_labels"] == {"wall": 4, "box": 1}
    assert json.loads(pre("--json"))["counts"]["skipped"] == 1   # same table: up to date
    write_map(tsv, SYNTH_MAP)              # an edited table: the scene converts again
    res = json.loads(pre("--json"))
    st = next(r["stats"] for r in res["scenes"] if r["name"] == info.name)
    assert res["counts"]["ok"] == 1 and st["semantic"]["unmatched_labels"] == {"box": 1}



def test_a_resume_says_how_many_annotated_scenes_a_label_rule_change_redoes(tmp_path):
    """A scene whose record's fingerprint differs from this run's only by the built-in label
    table (a record from before its digest was fingerprinted, or from another table) is redone,
    and the run says so before the work, in one line and in --json; an unannotated scene and a
    scene changed otherwise are not counted."""
    import json

    from click.testing import CliRunner

    from bps_assets import synth
    from bps_assets.pipeline.preprocess import STATE_DIR, fingerprint
    from bps_assets.synth import semantic as ssem
    from cli.main import main

    infos = synth.generate(tmp_path / "src", layout="gibson", scenes=2)
    ssem.write_hm3d(infos[0].path, "gibson", infos[0].name)   # the second scene: no annotation
    line = "1 annotated scene(s) are redone: the built-in label table changed"

    def pre():
        r = CliRunner().invoke(main, ["preprocess", str(tmp_path / "src"), "-o", str(tmp_path / "out"), "--dataset",
                                      "gibson", "--split", "full", "--workers", "1", "--episodes", "0", "--json"],
                               catch_exceptions=False)
        assert r.exit_code == 0, r.output
        return json.loads(r.stdout), r.stderr

    pre()
    recs = tmp_path / "out" / STATE_DIR / "scenes"
    settings = json.loads((tmp_path / "out" / "manifest.json").read_text())["settings"]
    assert json.loads((recs / f"{infos[1].name}.json").read_text())["rules"] == {}
    p = recs / f"{infos[0].name}.json"
    for rules in ({}, {"builtin_labels": "0" * 64}):   # a record by main 9c92bf6; one under another table
        rec = json.loads(p.read_text())
        assert rec["rules"] == {"builtin_labels": sc.builtin_table_digest()}
        rec["fingerprint"] = fingerprint(rec["entry"]["sources"], settings, rules)
        rec.pop("rules")
        if rules:
            rec["rules"] = rules
        p.write_text(json.dumps(rec))
        res, err = pre()
        assert line in err and "are redone" not in err.replace(line, "")
        assert res["rules_changed"] == [{"what": "the built-in label table", "scenes": 1}]
        assert res["counts"]["ok"] == 1 and res["counts"]["skipped"] == 1
    res, err = pre()   # up to date: nothing said
    assert res["counts"]["skipped"] == 2 and res["rules_changed"] == [] and "are redone" not in err
    # changed otherwise (as by another tool version): not counted
    rec = json.loads(p.read_text())
    rec["fingerprint"] = "1" * 64
    p.write_text(json.dumps(rec))
    res, err = pre()
    assert res["counts"]["ok"] == 1 and res["rules_changed"] == [] and "are redone" not in err
