"""``episodes=`` given habitat-lab's ``data_path`` template (``.../{split}/{split}.json.gz``): the
"no such file" InputError says that ``{split}`` must be filled in (it said only "no such file")."""
from __future__ import annotations

from bps_assets.errors import InputError
from bps_runtime.env.world import episodes_error


def test_a_split_template_gets_its_hint(tmp_path):
    src = str(tmp_path / "objectnav" / "{split}" / "{split}.json.gz")
    e = episodes_error(InputError(src, "no such file"), "objectnav", src)
    assert type(e) is InputError and e.path == src
    msg = str(e)
    assert "no such file" in msg and "{split} is habitat-lab's data_path template" in msg
    assert repr(str(tmp_path / "objectnav" / "val" / "val.json.gz")) in msg


def test_a_plain_missing_path_gets_no_template_hint(tmp_path):
    src = str(tmp_path / "val.json.gz")
    msg = str(episodes_error(InputError(src, "no such file"), "pointnav", src))
    assert "episodes= is a file's path" in msg and "template" not in msg


def test_make_fills_the_template_with_its_split_and_hints_a_path_too(manifest, tmp_path):
    """Through ``make``: the hint fills ``{split}`` with the config's split (it always said
    'val'), and a ``pathlib.Path`` source gets the hints a str gets (it got none)."""
    import pathlib

    import pytest

    import bps_runtime

    template = tmp_path / "pointnav" / "{split}" / "{split}.json.gz"
    for source in (str(template), template):
        with pytest.raises(InputError) as e:
            bps_runtime.make(manifest, split="train", episodes=source, num_envs=2, resolution=(16, 16))
        msg = str(e.value)
        assert "{split} is habitat-lab's data_path template" in msg, (type(source), msg)
        assert repr(str(tmp_path / "pointnav" / "train" / "train.json.gz")) in msg, msg
    with pytest.raises(InputError, match="episodes= is a file's path"):
        bps_runtime.make(manifest, split="train", episodes=pathlib.Path(tmp_path / "nope.json.gz"), num_envs=2,
                         resolution=(16, 16))
