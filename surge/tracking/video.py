"""Episode videos: RGB frames to an MP4 file (H.264) with PyAV, FFmpeg's Python bindings.

Needs the `video` extra (`pip install 'surge-rl[video]'`, which brings `av`; its wheels carry
FFmpeg). Frames come from an env made with `render_mode="rgb_array"`: [H, W, 3] uint8.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from surge.errors import UserError

CODEC = "libx264"
"""H.264, which every browser and player decodes; `mpeg4` where FFmpeg lacks it."""


def require_av():  # type: ignore[no-untyped-def]
    """The `av` module (PyAV), or a UserError saying to install the `video` extra."""
    try:
        import av
    except ImportError:
        raise UserError(
            "recording videos needs PyAV (the `av` package), which is not installed",
            "install the extra: pip install 'surge-rl[video]' (or .venv/bin/pip install av)",
        ) from None
    return av


def write_mp4(path: Path, frames: Sequence[np.ndarray], fps: float) -> Path:
    """Encode `frames` ([H, W, 3] uint8 each, all one size) into an MP4 file at `path`.

    H.264 in yuv420p needs even sides: an odd row or column is padded by repeating the
    edge. Written to a temporary name, then renamed: the file is whole or absent."""
    if not frames:
        raise ValueError("no frames to write")
    av = require_av()
    height, width = frames[0].shape[:2]
    pad_h, pad_w = height % 2, width % 2
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    codec = CODEC if CODEC in av.codecs_available else "mpeg4"
    with av.open(str(partial), mode="w", format="mp4") as container:
        stream = container.add_stream(codec, rate=max(1, round(fps)))
        stream.width, stream.height = width + pad_w, height + pad_h
        stream.pix_fmt = "yuv420p"
        for frame in frames:
            image = np.ascontiguousarray(frame[..., :3], dtype=np.uint8)
            if pad_h or pad_w:
                image = np.pad(image, ((0, pad_h), (0, pad_w), (0, 0)), mode="edge")
            for packet in stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():  # flush the encoder
            container.mux(packet)
    partial.replace(path)
    return path


def read_mp4(path: Path) -> list[np.ndarray]:
    """Decode every frame of a video: [H, W, 3] uint8 each (checks and tests)."""
    av = require_av()
    with av.open(str(path)) as container:
        return [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]


class TensorBoardVideo:
    """Episode videos in TensorBoard's Images tab: an animated GIF in an image summary, which
    is what `torch.utils.tensorboard.SummaryWriter.add_video` writes, through tensorboard's own
    event writer (no torch import). Frames are thinned to at most `max_frames` and shrunk to
    at most `max_side` pixels, so a video costs a few hundred KB, not the whole episode."""

    def __init__(self, log_dir: Path, max_frames: int = 120, max_side: int = 256) -> None:
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self._writer = EventFileWriter(str(log_dir), filename_suffix=".video")
        self.max_frames, self.max_side = max_frames, max_side

    def add(self, tag: str, frames: Sequence[np.ndarray], step: int, fps: float) -> None:
        """Write `frames` as an animated GIF under `tag` at step `step`, played at `fps`."""
        import time

        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary

        gif, height, width = gif_bytes(frames, fps, self.max_frames, self.max_side)
        image = Summary.Image(height=height, width=width, colorspace=3, encoded_image_string=gif)
        summary = Summary(value=[Summary.Value(tag=tag, image=image)])
        self._writer.add_event(Event(wall_time=time.time(), step=step, summary=summary))
        self._writer.flush()

    def close(self) -> None:
        """Flush and close the event file."""
        self._writer.close()


def gif_bytes(
    frames: Sequence[np.ndarray], fps: float, max_frames: int, max_side: int
) -> tuple[bytes, int, int]:
    """(animated GIF, height, width) of `frames`, thinned and shrunk (Pillow)."""
    import io

    from PIL import Image

    if not frames:
        raise ValueError("no frames to encode")
    stride = max(1, -(-len(frames) // max_frames))
    kept = frames[::stride]
    height, width = kept[0].shape[:2]
    scale = min(1.0, max_side / max(height, width))
    size = (max(1, round(width * scale)), max(1, round(height * scale)))
    images = [Image.fromarray(np.asarray(f[..., :3], np.uint8)).resize(size) for f in kept]
    out = io.BytesIO()
    duration_ms = max(20, round(1000 * stride / max(fps, 1e-6)))
    images[0].save(
        out, format="GIF", save_all=True, append_images=images[1:], duration=duration_ms, loop=0
    )
    return out.getvalue(), size[1], size[0]
