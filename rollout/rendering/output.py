"""Where frames go: an .mp4 (H.264 through imageio-ffmpeg's bundled ffmpeg), a .gif (Pillow, no ffmpeg),
a .png, or an array. Each opener returns (append(frame), close() -> result)."""

from __future__ import annotations

import os
import warnings

import numpy as np

from .options import RenderError

__all__ = ["open_frames", "write_image", "require"]

# imageio-ffmpeg's quality 0..10 maps to H.264's CRF 51..0: 8 (CRF 10) keeps thin captions and edges sharp.
MP4_QUALITY = 8


def _imageio():
    try:
        import imageio.v2 as iio2
        import imageio.v3 as iio3
    except ImportError:
        raise RenderError("writing a video or image needs imageio: pip install 'mjharness[render]' "
                          "(imageio, imageio-ffmpeg)") from None
    return iio2, iio3


def _mp4(path, fps):
    iio2, _ = _imageio()
    try:
        import imageio_ffmpeg  # noqa: F401  (imageio's FFMPEG plugin finds its ffmpeg binary through it)
    except ImportError:
        raise RenderError("writing an .mp4 needs imageio-ffmpeg: pip install 'mjharness[render]' "
                          "(or write a .gif, which needs no ffmpeg)") from None
    # macro_block_size=1: frames keep the requested size (imageio would otherwise resize them to multiples
    # of 16); the size was checked to be even, which H.264's 4:2:0 chroma needs.
    writer = iio2.get_writer(path, format="FFMPEG", mode="I", fps=fps, codec="libx264", quality=MP4_QUALITY,
                             macro_block_size=1, ffmpeg_log_level="error")

    def append(frame):
        # The first frame starts ffmpeg (fork + exec, no Python in the child), which JAX warns about for
        # forks that go on running Python; that deadlock cannot happen here.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called", category=RuntimeWarning)
            writer.append_data(frame)

    return append, lambda: (writer.close(), path)[1]


def _gif(path, fps):
    _, iio3 = _imageio()
    frames = []
    # A GIF is written in one call (Pillow encodes the palette over all frames); GIF timing is in 10 ms steps.
    return frames.append, lambda: (iio3.imwrite(path, np.stack(frames), extension=".gif",
                                                duration=1000.0 / fps, loop=0), path)[1]


def _array(path, fps):
    frames = []
    return frames.append, lambda: np.stack(frames)


VIDEO_WRITERS = {".mp4": _mp4, ".gif": _gif, None: _array}


def open_frames(out, fps: float):
    ext = None if out is None else os.path.splitext(os.fspath(out))[1].lower()
    return VIDEO_WRITERS[ext](None if out is None else os.fspath(out), fps)


def write_image(out, image: np.ndarray) -> str:
    _, iio3 = _imageio()
    path = os.fspath(out)
    iio3.imwrite(path, image, extension=".png", optimize=True)  # Pillow: smallest lossless zlib stream
    return path


def require(out) -> None:
    """Fail before rendering when the libraries that write ``out`` are missing."""
    if out is not None:
        _imageio()
