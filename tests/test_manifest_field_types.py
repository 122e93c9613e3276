"""A manifest field of the wrong JSON type is refused at load with one CorruptFileError naming
the file and the field ("not a valid bps manifest: ..."; CLI exit 2), never a traceback from a
reader further on (verify, manifest show, bps-train --dataset)."""
import copy
import json
import random

import pytest
from click.testing import CliRunner

from bps_assets.errors import BpsError, CorruptFileError
from bps_assets.pipeline.manifest import load_manifest
from bps_assets.pipeline.preprocess import PreprocessOptions, preprocess
from bps_assets.pipeline.verify import verify_manifest
from cli.main import main

from pipeline_fakes import FakeBackend, make_source
from test_pipeline_preprocess import TRAIN, VAL


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    t = tmp_path_factory.mktemp("types")
    src = make_source(t / "src", TRAIN[:1] + VAL[:1])
    r = preprocess(src, t / "out", "gibson", "tiny", PreprocessOptions(workers=1, in_process=True, episodes=2),
                   backend=FakeBackend())
    doc = json.loads(r.manifest_path.read_text())
    # fields a real (non-fake) preprocess records too
    doc["scenes"][TRAIN[0]]["stats"].update(largest_island=3.0, footprint_area=9.0, agent={"radius": 0.1, "height": 1.5},
                                            warnings=["its scan is reached through a symlink"])
    doc["scenes"][TRAIN[0]]["sources"]["scene"]["link_target"] = "/elsewhere/a.glb"
    return r.manifest_path.parent, doc


def _write(root, doc):
    p = root / "typed.json"
    p.write_text(json.dumps(doc))
    return p


# the tester's cases (journey f, finding 2) and their neighbours: (mutation, field named)
CASES = [
    (lambda m, s: m.__setitem__("episodes", [1, 2]), "episodes is an array"),
    (lambda m, s: m["episodes"].__setitem__("train", 7), "episodes.train is a number"),
    (lambda m, s: m["episodes"]["train"].__setitem__("size", "12"), "episodes.train.size is a string"),
    (lambda m, s: m["scenes"][s].__setitem__("sources", [1, 2]), f"scenes.{TRAIN[0]}.sources is an array"),
    (lambda m, s: m["scenes"][s]["sources"].__setitem__("scene", 3), f"scenes.{TRAIN[0]}.sources.scene is a number"),
    (lambda m, s: m["scenes"][s].__setitem__("stats", "x"), f"scenes.{TRAIN[0]}.stats is a string"),
    (lambda m, s: m["scenes"][s]["stats"].__setitem__("footprint_area", "9"), "stats.footprint_area is a string"),
    (lambda m, s: m["scenes"][s]["outputs"]["scene"].__setitem__("size", -1), "outputs.scene.size is a number"),
    (lambda m, s: m.__setitem__("shard", -1), "shard is a number"),
    (lambda m, s: m.__setitem__("shard", {"index": 3, "count": 2}), "shard.index 3 is not below"),
    (lambda m, s: m.__setitem__("missing", [7]), "missing[0] is a number"),
    (lambda m, s: m.__setitem__("subsets", [None]), "subsets[0] is null"),
    (lambda m, s: m["tool"].__setitem__("version", 1), "tool.version is a number"),
    # stats.warnings is read (preprocess's summary prints [0], --strict fails on it): a list of lines
    (lambda m, s: m["scenes"][s]["stats"].__setitem__("warnings", 5), "stats.warnings is a number"),
    (lambda m, s: m["scenes"][s]["stats"].__setitem__("warnings", [{}]), "stats.warnings[0] is an object"),
    (lambda m, s: m.__setitem__("settings", []), "settings is an array"),
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_wrong_field_type_is_a_typed_error_naming_the_field(made, case):
    root, good = made
    mutate, named = CASES[case]
    doc = copy.deepcopy(good)
    mutate(doc, TRAIN[0])
    p = _write(root, doc)
    with pytest.raises(CorruptFileError, match="not a valid bps manifest") as e:
        load_manifest(p)
    assert str(p) in str(e.value) and named in str(e.value)
    for cmd in (["verify", str(p)], ["manifest", "show", str(p)]):
        r = CliRunner().invoke(main, cmd)
        assert r.exit_code == 2 and named in r.output and "Traceback" not in r.output, (cmd, r.output)


def test_good_manifest_still_loads_and_verifies(made):
    root, good = made
    p = _write(root, good)
    assert len(load_manifest(p)) == 2
    assert verify_manifest(p).ok


def _paths(o, pre=()):
    if isinstance(o, dict):
        for k, v in o.items():
            yield from _paths(v, pre + (k,))
    elif isinstance(o, list):
        for i, v in enumerate(o[:3]):
            yield from _paths(v, pre + (i,))
    yield pre


def test_one_value_mutations_give_only_typed_errors(made):
    """The tester's fuzz_manifest.py, seeded: one value of a good manifest replaced by a value
    of another kind; load and verify either work or raise a BpsError."""
    root, good = made
    values = [None, True, -1, 0, 2**70, 1e308, float("nan"), "x", [], {}, [1, 2], 3.5, "../../etc/passwd", {"a": 1}]
    where = [p for p in _paths(good) if p and p[0] != "missing"]
    rng = random.Random(5)
    for _ in range(300):
        doc = copy.deepcopy(good)
        p = rng.choice(where)
        o = doc
        for k in p[:-1]:
            o = o[k]
        o[p[-1]] = rng.choice(values)
        try:
            verify_manifest(_write(root, doc))
        except BpsError:   # a typed refusal is the expected outcome; any other exception fails the test
            pass
