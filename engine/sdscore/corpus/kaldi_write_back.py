"""Write-back into a Kaldi data directory: a new folder holding a copy of the directory's files (its
top-level regular files: wav.scp, segments, text, utt2spk, ...; subfolders such as split*/ are not
copied) and one `<metric>.scp` per numeric or boolean result column, keyed by utterance id, in the
units the protocol's report shows (output_formats.scp_tables: WER and CER in percent, as
`<metric>_pct.scp`). A metric file whose name the directory already has is refused.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from sdscore.corpus.output_formats import scp_tables
from sdscore.corpus.schemas import ManifestSpec
from sdscore.corpus.write_back_rows import COMMAND, aligned_results
from sdscore.errors import SdscoreError
from sdscore.output_paths import MARKER, staged_folder


def write_kaldi_dir(manifest: str | os.PathLike, results: str | os.PathLike, spec: ManifestSpec,
                    destination: Path, *, overwrite: bool = False) -> Path:
    """Copy the Kaldi directory at `manifest` (or holding that wav.scp) to `destination`, with the scp files."""
    folder = Path(manifest)
    folder = folder.parent if folder.is_file() else folder
    frame, _rows = aligned_results(manifest, results, spec)
    tables = scp_tables(frame, spec, os.fspath(results))
    files = sorted(f for f in folder.iterdir() if f.is_file() and f.name != MARKER)
    clash = sorted({f.name for f in files} & tables.keys())
    if clash:
        raise SdscoreError(f"{folder}: already holds {', '.join(clash)}, which the results would write (an earlier "
                           "write-back?); write back from the directory the run scored without them")
    with staged_folder(destination, overwrite=overwrite, command=COMMAND) as stage:
        for file in files:
            shutil.copyfile(file, stage / file.name)
        for name, text in tables.items():
            (stage / name).write_text(text, encoding="utf-8")
    return destination
