"""Click options shared by several commands, each declared once with its default from the
library's DEFAULTS: the navmesh builder's settings (``NavSettings``: `navmesh`, `preprocess`,
`launch`) and the converter's texture and quantization settings (``ConvertOptions``:
`convert`, `preprocess`, `launch`).

``nav_settings_given`` / ``convert_changes`` turn the parsed values back into what the
library takes: the options the user set (None / {} when all are at their defaults)."""
from __future__ import annotations

import math

import click

from bps_assets.nav.settings import DEFAULT_SETTINGS as NAV
from bps_assets.packed_scene import DEFAULTS as CONVERT
from bps_assets.transforms.textures import FORMATS

NAV_KEYS = ("agent_height", "agent_radius", "max_climb", "max_slope", "cell_size", "cell_height")
CONVERT_KEYS = ("max_texture", "texture_format", "mipmaps", "position_error", "uv_error", "allow_annotation_mismatch",
                "lod", "label_table")


class Finite(click.FloatRange):
    """A float option, optionally bounded, that refuses nan and inf (click's float and FloatRange
    take them: inf passes ``min=0``, nan every bound, and failed later as tracebacks)."""

    name = "float"

    def convert(self, value, param, ctx):
        v = super().convert(value, param, ctx)
        if not math.isfinite(v):
            self.fail(f"{value!r}: expected a finite number", param, ctx)
        return v

    def _describe_range(self) -> str:
        return "" if self.min is None and self.max is None else super()._describe_range()


def _lod_levels(ctx, param, value):
    """``--lod 0.01,0.05`` -> (0.01, 0.05), checked (``lod_section.check_errors``); "" -> ()."""
    from bps_assets.errors import ConfigError
    from bps_assets.lod_section import check_errors

    if isinstance(value, tuple):
        return value
    try:
        return tuple(check_errors(float(x) for x in value.split(",") if x.strip()))
    except (ValueError, ConfigError) as e:
        raise click.BadParameter(f"{value!r}: {getattr(e, 'detail', e)}") from None


lod_option = click.option(
    "--lod", type=str, default=",".join(map(str, CONVERT.lod)), callback=_lod_levels, show_default=True,
    help="Also store simplified render meshes (levels of detail), by geometric error in metres, "
         "e.g. 0.01,0.05; the runtime renders the coarsest level finer than a pixel at 1 m.")


def _label_table(ctx, param, value):
    """``--label-table FILE`` -> its absolute path, after reading it (a bad table: BadParameter)."""
    import os

    from bps_assets.errors import BpsError
    from bps_assets.readers.semantic_categories import read_label_table

    if not value:
        return value
    try:
        read_label_table(value)
    except BpsError as e:
        raise click.BadParameter(str(e)) from None
    return os.path.abspath(value)


label_table_option = click.option(
    "--label-table", type=click.Path(dir_okay=False), default=CONVERT.label_table, callback=_label_table,
    help="Map raw annotation labels to mpcat40 with this habitat-sim table (data/hm3d_semantics/"
         "hm3dsem_category_mappings.tsv, data/matterport_semantics/matterport_category_mappings.tsv) "
         "instead of the built-in one (docs/ASSETS.md).")


_NAV_HELP = {
    "agent_height": "agent height, m (ObjectNav on HM3D: 0.88)",
    "agent_radius": "agent radius, m (ObjectNav on HM3D: 0.18)",
    "max_climb": "highest step, m", "max_slope": "steepest walkable slope, degrees",
    "cell_size": "grid cell side, m, in [0.001, 10] (coarser for large outdoor scenes)",
    "cell_height": "vertical cell size, m",
}


def nav_options(f):
    """The navmesh builder's settings as options (``NAV_KEYS``)."""
    for key in reversed(NAV_KEYS):
        f = click.option("--" + key.replace("_", "-"), type=Finite(), default=getattr(NAV, key), show_default=True,
                         help=f"Navmesh: {_NAV_HELP[key]}.")(f)
    return f


def convert_options(f):
    """The converter's texture and quantization settings as options (``CONVERT_KEYS``)."""
    opts = [
        click.option("--max-texture", type=int, default=CONVERT.max_texture, show_default=True,
                     help="Cap on texture sides (a power of two)."),
        click.option("--texture-format", type=click.Choice(sorted(FORMATS)), default=CONVERT.texture_format,
                     show_default=True, help="Block compression: bc1 (0.5 B/texel) or bc7 (1 B/texel, slower)."),
        click.option("--mipmaps/--no-mipmaps", default=CONVERT.mipmaps, show_default=True,
                     help="Full mip chains."),
        click.option("--position-error", type=Finite(min=0, min_open=True),
                     default=CONVERT.position_error, show_default=True,
                     help="Quantization: largest position error in metres."),
        click.option("--uv-error", type=Finite(min=0, min_open=True), default=CONVERT.uv_error,
                     show_default=True, help="Quantization: largest UV error per component."),
        click.option("--allow-annotation-mismatch", is_flag=True, default=CONVERT.allow_annotation_mismatch,
                     help="Keep a semantic annotation most of which does not fit its scan (default: the "
                          "scan fails with the shares that do not fit; a smaller misfit is a warning)."),
        lod_option,
        label_table_option,
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def options_given(keys) -> list[str]:
    """Which of the current command's options ``keys`` the user gave (not left at the default)."""
    ctx = click.get_current_context()
    return [k for k in keys if ctx.get_parameter_source(k) != click.core.ParameterSource.DEFAULT]


def _given(values: dict, keys) -> dict:
    return {k: values[k] for k in options_given(keys)}


def nav_settings_given(values: dict):
    """``NavSettings`` from the parsed ``NAV_KEYS`` values, or None when none was given (an
    imported .navmesh then keeps the settings it was built with)."""
    from bps_assets.nav import NavSettings

    if not _given(values, NAV_KEYS):
        return None
    return NavSettings(**{k: values[k] for k in NAV_KEYS})


def convert_changes(values: dict) -> dict:
    """``{field: value}`` of the ``CONVERT_KEYS`` options given (a change on top of the
    dataset's converter preset)."""
    return _given(values, CONVERT_KEYS)
