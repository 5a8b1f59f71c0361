"""Items shown one by one: the rows that failed (with their errors) and the most and least confident
ones, each with its audio, found in the manifest the results were scored from.

The manifest is the one given, else the one the results' provenance names (runtime/provenance.py);
rows are matched by the manifest spec's id column, and each protocol's report view says which of a
row's audio is worth hearing (its clip_paths) and how its items rank; nothing here knows a protocol.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import polars as pl

from sdscore.corpus.schemas import ManifestSpec
from sdscore.report.html.elements import Clip, Item, ItemList
from sdscore.report.html.embedding import AudioEmbedder

#: Shown per list.
MAX_FAILED = 50
FAILED_WITH_AUDIO = 10
EXTREMES = 5
MAX_CLIPS = 6


def failed_rows(results: pl.DataFrame) -> pl.DataFrame:
    """Rows with a non-empty error."""
    if "error" not in results.columns:
        return results.clear()
    error = pl.col("error").cast(pl.String)
    return results.filter(error.is_not_null() & (error.str.strip_chars() != ""))


#: (label, audio path) of the clips worth hearing for one manifest row
ClipPaths = Callable[[dict], list[tuple[str, str | None]]]


def manifest_rows(spec: ManifestSpec, manifest: str | os.PathLike | None) -> dict[str, dict] | str:
    """id → manifest row (audio paths absolute), or why there is none."""
    from sdscore.corpus import read_manifest
    from sdscore.errors import ManifestError

    if manifest is None:
        return "the results name no manifest (no provenance); pass --manifest to find the audio"
    if not Path(manifest).is_file():
        return f"manifest {manifest} is not there any more, so the items' audio cannot be found"
    try:
        frame = read_manifest(manifest, spec, errors="collect")
    except (ManifestError, ValueError, OSError) as error:
        return f"manifest {manifest} cannot be read: {error}"
    column = spec.id_column
    rows: dict[str, dict] = {}
    for row in frame.iter_rows(named=True):
        rows.setdefault(str(row[column]), row)
    return rows


def last_audio(turns) -> str | None:
    """The audio path of the last turn that has one (reward pairs' chosen/rejected turn lists)."""
    paths = [t.get("audio_path") for t in turns or () if t and t.get("audio_path")]
    return paths[-1] if paths else None


class ItemFinder:
    """Builds Items from results rows: facts from the row, clips from the manifest row of the same id."""

    def __init__(self, spec: ManifestSpec, clip_paths: ClipPaths, manifest: dict[str, dict] | str,
                 embedder: AudioEmbedder):
        """spec: the manifest's (its id column matches rows); clip_paths: the view's choice of a row's clips."""
        self.spec, self.clip_paths, self.manifest, self.embedder = spec, clip_paths, manifest, embedder

    @property
    def audio_note(self) -> str:
        return self.manifest if isinstance(self.manifest, str) else ""

    def item(self, row: dict, facts: list[tuple[str, str]], with_audio: bool = True) -> Item:
        item_id = str(row.get(self.spec.id_column))
        error = row.get("error")
        clips: list[Clip] = []
        if with_audio and isinstance(self.manifest, dict):
            source = self.manifest.get(item_id)
            if source is None:
                clips.append(Clip("audio", None, "", missing=f"id {item_id!r} is not in the manifest"))
            else:
                clips = [self.embedder.clip(label, path) for label, path in self.clip_paths(source)[:MAX_CLIPS]]
        return Item(item_id, facts, error if error else None, clips)


def failed_items(finder: ItemFinder, results: pl.DataFrame, facts: Callable[[dict], list]) -> ItemList:
    """The failed rows with their errors (all errors listed up to MAX_FAILED; audio for the first few)."""
    failed = failed_rows(results)
    items = [finder.item(row, facts(row), with_audio=i < FAILED_WITH_AUDIO)
             for i, row in enumerate(failed.head(MAX_FAILED).iter_rows(named=True))]
    note = f"{failed.height} of {results.height} rows failed"
    if failed.height > MAX_FAILED:
        note += f"; the first {MAX_FAILED} are listed"
    if failed.height > FAILED_WITH_AUDIO:
        note += f"; audio for the first {FAILED_WITH_AUDIO}"
    if finder.audio_note and failed.height:
        note += f". No audio: {finder.audio_note}"
    return ItemList("Failed items", items, note + ".", role="failed")


def extreme_items(finder: ItemFinder, results: pl.DataFrame, score: pl.Expr, what: str,
                  facts: Callable[[dict], list], titles: tuple[str, str]) -> list[ItemList]:
    """The EXTREMES rows with the highest and the lowest `score` among the scored rows (ties: row order)."""
    numbered = results.with_row_index("_row")
    ok = numbered.join(failed_rows(numbered).select("_row"), on="_row", how="anti")
    ranked = ok.with_columns(score.cast(pl.Float64).alias("_score"))
    ranked = ranked.filter(pl.col("_score").is_not_null() & pl.col("_score").is_finite())
    if ranked.height == 0:
        return [ItemList(titles[0], [], f"no scored row has a {what}", role="extreme")]
    high = ranked.sort(["_score", "_row"], descending=[True, False]).head(EXTREMES)
    low = ranked.sort(["_score", "_row"]).head(EXTREMES)
    note = f"ranked by {what} over {ranked.height} scored rows"
    if finder.audio_note:
        note += f". No audio: {finder.audio_note}"
    return [
        ItemList(title, [finder.item(row, facts(row)) for row in part.iter_rows(named=True)], note, role="extreme")
        for title, part in ((titles[0], high), (titles[1], low))
    ]
