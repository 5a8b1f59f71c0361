"""Render, here, the TTS clips the GPU run's benches ask for, into the cache folder given (FLAC).

The lent GPU machine has no flite or espeak-ng: bench/common.render_tts copies each clip from
$SDSCORE_TTS_CACHE there. The calls below are the render_tts calls of the benches that
bench/gpu/run.sh runs, with its flags (bench/reward.py --quick, bench/serve.py); render_tts draws
its texts from one seeded generator, so a longer list holds a shorter one's clips too.
Usage: python bench/gpu/tts_clips.py CACHE_DIR
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import TTS_CACHE_ENV, render_tts  # noqa: E402

#: (count, words, espeak_every) of each bench's render_tts call in the GPU run
CALLS = {
    "bench/reward.py --quick": (5 * 16, (3, 14), 3),  # CLIPS_PER_PAIR x 16 pairs
    "bench/serve.py": (24, (4, 14), 4),
}


def main() -> None:
    if len(sys.argv) != 2:
        raise SystemExit("usage: python bench/gpu/tts_clips.py CACHE_DIR")
    os.environ[TTS_CACHE_ENV] = str(Path(sys.argv[1]).resolve())
    for bench, (count, words, espeak_every) in CALLS.items():
        with tempfile.TemporaryDirectory(prefix="sdscore-tts-") as folder:
            render_tts(Path(folder), count, words, espeak_every, "clip")
        print(f"tts_clips.py: {count} clips of {bench} in {sys.argv[1]}")


if __name__ == "__main__":
    main()
