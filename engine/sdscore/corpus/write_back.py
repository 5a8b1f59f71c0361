"""`sdscore score ... --write-back PATH`: the input HF dataset, Lhotse manifest or Kaldi directory
written again at PATH with the run's results added. The input is never modified; PATH follows the
output-path policy (output_paths.py): a new path, an empty folder, or (with --overwrite) an earlier
sdscore output.

- HF dataset folder written by `save_to_disk` (hf_write_back.py): a new save_to_disk folder, each
  split with the result columns appended, its rows and columns as they were.
- Lhotse CutSet or SupervisionSet (lhotse_write_back.py): the same manifest with the results in
  each supervision's `custom` (every line, id and field kept).
- Kaldi data directory (kaldi_write_back.py): a copy of the directory's files plus one
  `<metric>.scp` per numeric result column, in the units the protocol's report shows.

The results are matched to the input by reading the input again as the run did (write_back_rows.py):
they must hold one row per input row, with the same ids in the same order.
"""

from __future__ import annotations

import os
from pathlib import Path

from sdscore import storage
from sdscore.corpus.kaldi_format import WAV_SCP, is_kaldi_dir
from sdscore.corpus.lhotse_format import first_row, is_lhotse_row
from sdscore.corpus.schemas import ManifestSpec
from sdscore.corpus.write_back_rows import OPTION
from sdscore.errors import ManifestError, SdscoreError
from sdscore.output_paths import OutputPlan

#: what --write-back writes into, by input kind
KINDS = ("hf-dataset", "lhotse", "kaldi")
LHOTSE_SUFFIXES = (".jsonl", ".jsonl.gz")


def write_back_kind(manifest: str | os.PathLike) -> str:
    """"hf-dataset", "lhotse" or "kaldi": what the manifest is; an SdscoreError for anything else."""
    path = os.fspath(manifest)
    if storage.is_remote(path):
        raise SdscoreError(f"{path}: {OPTION} needs a local manifest (it copies the input); copy it locally first")
    folder = Path(path)
    if folder.is_dir():
        if is_kaldi_dir(folder):
            return "kaldi"
        if (folder / "dataset_dict.json").is_file() or (folder / "state.json").is_file():
            return "hf-dataset"
        raise SdscoreError(f"{path}: {OPTION} writes back into a HF dataset folder written by save_to_disk "
                           "(dataset_dict.json or state.json), a Kaldi data directory (wav.scp) or a Lhotse manifest; "
                           "this folder is none of them (use --format for the results in another form)")
    if folder.name.lower() == WAV_SCP:
        return "kaldi"
    if folder.name.lower().endswith(LHOTSE_SUFFIXES) and folder.is_file():
        try:
            if is_lhotse_row(first_row(path, path)):
                return "lhotse"
        except ManifestError:
            pass
    raise SdscoreError(f"{path}: {OPTION} writes back into a HF dataset folder (save_to_disk), a Lhotse CutSet or "
                       "SupervisionSet, or a Kaldi data directory; for other manifests the results Parquet (or "
                       "--format) already holds every row")


def plan_write_back(plan: OutputPlan, manifest: str | os.PathLike, destination: str | os.PathLike) -> Path:
    """Check PATH before any work: a file for a Lhotse manifest (named .jsonl or .jsonl.gz), else a folder."""
    if write_back_kind(manifest) != "lhotse":
        return plan.folder(destination, OPTION)
    if not os.fspath(destination).lower().endswith(LHOTSE_SUFFIXES):
        raise SdscoreError(f"{destination}: {OPTION} of a Lhotse manifest is a manifest file; name it .jsonl or "
                           ".jsonl.gz")
    return plan.file(destination, OPTION)


def write_back(manifest: str | os.PathLike, results: str | os.PathLike, spec: ManifestSpec,
               destination: str | os.PathLike, *, overwrite: bool = False,
               lhotse_group_by: str | None = None) -> Path:
    """Write the manifest again at destination with the results added (see the module doc);
    lhotse_group_by: how the run read a Lhotse manifest's instances (lhotse_format.GROUPINGS; None:
    by speaker; refused for another kind of manifest)."""
    kind = write_back_kind(manifest)
    if lhotse_group_by is not None and kind != "lhotse":
        raise SdscoreError(f"{os.fspath(manifest)}: lhotse_group_by (--lhotse-group-by) groups the turns of a Lhotse "
                           f"CutSet or SupervisionSet, and this manifest is not one; leave it out")
    plan_write_back(OutputPlan([manifest, results], overwrite=overwrite), manifest, destination)
    if kind == "hf-dataset":
        from sdscore.corpus.hf_write_back import write_hf_dataset

        return write_hf_dataset(manifest, results, spec, Path(destination), overwrite=overwrite)
    if kind == "lhotse":
        from sdscore.corpus.lhotse_write_back import write_lhotse_manifest

        return write_lhotse_manifest(manifest, results, spec, Path(destination), lhotse_group_by)
    from sdscore.corpus.kaldi_write_back import write_kaldi_dir

    return write_kaldi_dir(manifest, results, spec, Path(destination), overwrite=overwrite)
