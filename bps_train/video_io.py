"""Write a sequence of RGB frames as a video file: MP4 (H.264) with PyAV, else GIF, or PNG frames.

``write_video(path, frames, VideoOptions)``: ``frames`` is an iterable of uint8 [H, W, 3] arrays
of one size (H and W even), consumed one at a time (an episode is never held whole). Formats:
"mp4" needs the optional ``av`` package (``pip install 'bps[video]'``): PyAV encodes in-process
with FFmpeg's libx264 (yuv420p, ``crf``; crf 0 is lossless in YUV); "gif" uses Pillow (already a
dependency; 256 colours a frame); "png" writes a folder of numbered lossless frames; "auto" is
mp4 when ``av`` imports, else gif. Output is atomic: a temp file (or folder) renamed at the end,
and an existing output is never replaced unless ``overwrite``. Returns the path written.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bps_assets.errors import ConfigError

FORMATS = ("auto", "mp4", "gif", "png")
SUFFIX = {"mp4": ".mp4", "gif": ".gif", "png": ""}


@dataclass(frozen=True)
class VideoOptions:
    """Encoder settings; ``fps`` frames per second (habitat's generate_video uses 10)."""

    format: str = "auto"
    fps: int = 10
    crf: int = 23             # x264 quality: 0 lossless (in YUV), 18 visually lossless, 23 x264's default
    preset: str = "ultrafast"  # x264 speed / size: 4x faster than veryfast here, files ~1.4x larger
    overwrite: bool = False


DEFAULTS = VideoOptions()


def has_encoder() -> bool:
    """True when PyAV (the MP4 encoder) imports."""
    try:
        import av  # noqa: F401
    except ImportError:
        return False
    return True


def resolve_format(fmt: str) -> str:
    """The concrete format of ``fmt`` ("auto": mp4 when PyAV is installed, else gif);
    ConfigError for an unknown one, MissingDependencyError for mp4 without PyAV."""
    from bps_assets.errors import ConfigError, MissingDependencyError

    if fmt not in FORMATS:
        raise ConfigError(None, f"video format {fmt!r}: expected one of {', '.join(FORMATS)}")
    if fmt == "auto":
        return "mp4" if has_encoder() else "gif"
    if fmt == "mp4" and not has_encoder():
        raise MissingDependencyError(None, "MP4 videos", "av")
    return fmt


def write_video(path, frames, options: VideoOptions = DEFAULTS) -> Path:
    """Encode ``frames`` to ``path`` (its suffix is set from the format); see the module doc."""
    from bps_assets.errors import OutputExistsError

    fmt = resolve_format(options.format)
    path = Path(path)
    path = path.with_name(path.name[: -len(path.suffix)] if path.suffix in (".mp4", ".gif") else path.name)
    path = path.with_name(path.name + SUFFIX[fmt])
    if path.exists() and not options.overwrite:
        raise OutputExistsError(path, "exists (pass overwrite to replace it)")
    if fmt != "png":   # one file: the project's temp-file-then-rename (typed errors, fsync)
        from bps_assets.container import atomic_write

        writer = _write_mp4 if fmt == "mp4" else _write_gif
        atomic_write(path, lambda f: writer(f, frames, options), overwrite=options.overwrite)
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:   # a folder of frames: written beside it, then renamed into place
        from bps_assets.container import current_umask

        os.chmod(tmp, 0o777 & ~current_umask())   # mkdtemp makes 0700: the mode a plain mkdir gives
        _write_png(tmp, frames)
        if path.exists():
            shutil.rmtree(path)
        os.replace(tmp, path)
        return path
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _check(frame, shape):
    a = np.ascontiguousarray(frame, dtype=np.uint8)
    if a.ndim != 3 or a.shape[2] != 3 or (shape is not None and a.shape != shape):
        raise ConfigError(None, f"frame of shape {a.shape}: expected [H, W, 3] uint8 frames of one size {shape}")
    return a


def _write_mp4(out, frames, o: VideoOptions):
    import av

    shape, n = None, 0
    with av.open(out, "w", format="mp4") as container:
        stream = None
        for f in frames:
            a = _check(f, shape)
            if stream is None:
                shape = a.shape
                if shape[0] % 2 or shape[1] % 2:
                    raise ConfigError(out, f"frame size {shape[1]}x{shape[0]}: H.264 (yuv420p) needs even sizes")
                stream = container.add_stream("libx264", rate=o.fps)
                stream.width, stream.height, stream.pix_fmt = shape[1], shape[0], "yuv420p"
                stream.options = {"crf": str(int(o.crf)), "preset": o.preset}
            for packet in stream.encode(av.VideoFrame.from_ndarray(a, format="rgb24")):
                container.mux(packet)
            n += 1
        if stream is None:
            raise ConfigError(out, "no frames to write")
        for packet in stream.encode():
            container.mux(packet)


def _write_gif(out, frames, o: VideoOptions):
    from PIL import Image

    it = iter(frames)
    first = next(it, None)
    if first is None:
        raise ConfigError(out, "no frames to write")
    shape = _check(first, None).shape
    rest = (Image.fromarray(_check(f, shape)) for f in it)
    Image.fromarray(_check(first, None)).save(out, format="GIF", save_all=True, append_images=rest,
                                              duration=int(round(1000 / o.fps)), loop=0)


def _write_png(folder: Path, frames):
    from PIL import Image

    shape, n = None, 0
    for f in frames:
        a = _check(f, shape)
        shape = a.shape
        Image.fromarray(a).save(folder / f"frame_{n:05d}.png", compress_level=1)
        n += 1
    if n == 0:
        raise ConfigError(folder, "no frames to write")
