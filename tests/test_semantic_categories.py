"""The raw-label -> mpcat40 map: the built-in table agrees with the sources it names, and a
habitat-sim mapping TSV given with ``--category-map`` replaces it (typed errors for bad files)."""
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
