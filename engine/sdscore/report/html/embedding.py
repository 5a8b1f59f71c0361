"""Images and audio inside one HTML file: PNGs as data: URIs, audio as base64 WAV within a byte budget.

Audio is embedded as a 16-bit PCM WAV (decoded and resampled with sdscore.audio, so any format the
loader reads plays in every browser) while the clip and the report stay under their limits; past
them a clip is linked by its file: URI, which still plays when the report is opened beside the data.
"""

from __future__ import annotations

import base64
import io
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from sdscore.report.html.elements import Clip

#: Default limits on embedded audio (bytes of base64 text in the HTML).
CLIP_LIMIT = 2 << 20
REPORT_LIMIT = 20 << 20
#: Embedded audio is resampled to this rate (speech; keeps clips small).
EMBED_RATE = 16000


def png_data_uri(data: bytes) -> str:
    if not data.startswith(b"\x89PNG"):
        raise ValueError("not a PNG image (the report embeds PNG plots only)")
    return "data:image/png;base64," + base64.b64encode(data).decode("ascii")


def png_file_uri(path: str | os.PathLike) -> str:
    """A PNG file on disk as a data: URI."""
    return png_data_uri(Path(path).read_bytes())


def render_png(draw: Callable[[Path], object]) -> str:
    """Run a plot function that writes a PNG to the path it is given (the report/*_plots.py API) in a
    temporary folder and return the image as a data: URI."""
    with tempfile.TemporaryDirectory(prefix="sdscore-report-") as folder:
        target = Path(folder) / "plot.png"
        draw(target)
        return png_file_uri(target)


def wav_bytes(samples: np.ndarray, sample_rate: int) -> bytes:
    """float32 mono samples as a 16-bit PCM WAV file's bytes."""
    import soundfile

    buffer = io.BytesIO()
    soundfile.write(buffer, np.clip(samples, -1.0, 1.0), sample_rate, subtype="PCM_16", format="WAV")
    return buffer.getvalue()


class AudioEmbedder:
    """Turns audio paths into Clips: embedded while under clip_limit and the report's total, else linked."""

    def __init__(self, clip_limit: int = CLIP_LIMIT, report_limit: int = REPORT_LIMIT):
        if clip_limit < 0 or report_limit < 0:
            raise ValueError(f"audio limits must be >= 0 bytes, got clip {clip_limit}, report {report_limit}")
        self.clip_limit, self.report_limit = clip_limit, report_limit
        self.embedded_bytes = 0
        self.linked = 0

    def clip(self, label: str, path: str | None) -> Clip:
        from sdscore import audio
        from sdscore.errors import AudioError

        if not path:
            return Clip(label, None, "", missing="no audio path in the manifest")
        source = Path(path)
        if not source.is_file():
            return Clip(label, None, str(path), missing=f"{path}: no such file")
        uri = source.resolve().as_uri()
        try:
            samples = audio.load(source, EMBED_RATE)
        except (AudioError, ValueError, OSError) as error:
            return Clip(label, uri, str(path), missing=f"cannot decode for embedding ({error}); linked")
        size = 4 * -(-(2 * samples.size + 44) // 3)  # the base64 text of a 16-bit WAV of the clip
        if size > self.clip_limit or self.embedded_bytes + size > self.report_limit:
            self.linked += 1
            return Clip(label, uri, str(path))
        encoded = base64.b64encode(wav_bytes(samples, EMBED_RATE)).decode("ascii")
        self.embedded_bytes += len(encoded)
        return Clip(label, "data:audio/wav;base64," + encoded, str(path), embedded=True)
