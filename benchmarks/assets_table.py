"""Load every scene file under ../shared/assets with bps_assets.readers, convert each loaded
one with bps_assets.packed_scene.convert_file, and write the outcome table at the end of docs/ASSETS.md (one
row per file: loaded with triangles and bounds, or refused with the typed error and its
message; then the conversion's triangles out and packed size, or its error).

    python benchmarks/assets_table.py                # rewrites docs/ASSETS.md's table section
    python benchmarks/assets_table.py --no-convert   # reader outcomes only
    python benchmarks/assets_table.py --stdout       # prints instead of writing
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path


from bps_assets.errors import BpsError
from bps_assets.readers import load

ROOT = Path(__file__).resolve().parents[1]
ASSETS = ROOT.parent / "shared" / "assets"
EXTS = {".glb", ".gltf", ".ply", ".obj"}
HEADING = "## Reader and converter outcomes"   # the doc's text above it is written by hand


def asset_files(root: Path = ASSETS) -> list[Path]:
    if not root.is_dir():
        return []
    return sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in EXTS)


def outcome(path: Path) -> dict:
    t = time.perf_counter()
    try:
        doc = load(path)
    except BpsError as e:
        return {"ok": False, "error": type(e).__name__, "message": e.detail, "seconds": time.perf_counter() - t}
    lo, hi = doc.bounds()
    return {"ok": True, "triangles": doc.triangle_count, "meshes": len(doc.meshes), "textures": len(doc.textures),
            "bounds": (lo, hi) if doc.triangle_count else None, "stats": dict(doc.stats),
            "seconds": time.perf_counter() - t}


def converted(path: Path, workdir: Path, i: int) -> str:
    from bps_assets.packed_scene import convert_file

    try:
        res = convert_file(path, workdir / f"{i}.bps", overwrite=True)
    except BpsError as e:
        return f"**{type(e).__name__}**: {e.detail}".replace("|", "\\|")
    st = res.stats
    return f"{st.get('triangles_out', '?')} tris, {st.get('bytes_out', 0) / 1024:.1f} KiB"


def _fmt_bounds(b) -> str:
    if b is None:
        return "-"
    lo, hi = b
    f = lambda v: "(" + ", ".join(f"{x:.4g}" for x in v) + ")"  # noqa: E731
    return f"{f(lo)} .. {f(hi)}"


def table(files: list[Path], convert: bool = True) -> str:
    rows, n_ok, n_conv = [], 0, 0
    work = tempfile.TemporaryDirectory()
    for i, p in enumerate(files):
        r = outcome(p)
        rel = p.relative_to(ASSETS).as_posix()
        if r["ok"]:
            n_ok += 1
            extra = ", ".join(f"{k} {v}" for k, v in sorted(r["stats"].items()))
            conv = converted(p, Path(work.name), i) if convert else "not run"
            n_conv += conv.endswith("KiB")
            rows.append(f"| `{rel}` | loaded | {r['triangles']} | {r['meshes']} | {r['textures']} | "
                        f"{_fmt_bounds(r['bounds'])} | {extra} | {conv.replace(str(ASSETS), '…')} |")
        else:
            msg = r["message"].replace("|", "\\|").replace(str(ASSETS), "…")
            rows.append(f"| `{rel}` | refused | - | - | - | - | **{r['error']}**: {msg} | - |")
    work.cleanup()
    head = [
        HEADING,
        "",
        f"{len(files)} files: {n_ok} loaded, {len(files) - n_ok} refused"
        + (f"; {n_conv} of the loaded ones converted to packed scenes (default options)." if convert else "."),
        "",
        "| file | outcome | triangles | meshes | textures | bounds (min .. max, file frame) | notes / error "
        "| converted (triangles out, packed size) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    return "\n".join(head + rows) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stdout", action="store_true")
    ap.add_argument("--no-convert", action="store_true", help="reader outcomes only")
    args = ap.parse_args()
    files = asset_files()
    if not files:
        raise SystemExit(f"no assets under {ASSETS}")
    text = table(files, convert=not args.no_convert)
    if args.stdout:
        print(text)
    else:
        out = ROOT / "docs" / "ASSETS.md"
        kept, found, _ = out.read_text().partition(HEADING + "\n")
        if not found:
            raise SystemExit(f"{out}: no line {HEADING!r} to replace the table below")
        out.write_text(kept + text)
        print(f"wrote {out} ({len(files)} files)")


if __name__ == "__main__":
    main()
