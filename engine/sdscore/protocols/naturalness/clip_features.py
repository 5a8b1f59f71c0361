"""Every per-clip feature naturalness needs, for many clips at once, cached by audio content.

Answers get VAD segments, DNSMOS P.835 OVRL and P.808, transcripts (pocketsphinx; Whisper from
a local folder), Praat F0 statistics and voiced time, the language, and — from local model
folders when given — dialect profile, arousal / valence / dominance and a MOS. Questions get VAD
segments and the dialect and emotion-dimension outputs. Each distinct file is loaded and
analysed once per batch (one question clip shared by several systems' answers is one item).

Batched and concurrent: silero VAD steps every clip in lockstep, DNSMOS runs its ONNX graphs over
stacked windows; pocketsphinx and Praat, which hold the GIL one clip at a time, run on `jobs`
worker processes (sdscore.features.process_extractor) while the main thread runs the ONNX
models. With `cache_dir`, a clip's features are stored under the digest of its bytes and of the
settings (sdscore.features.cache), so a rerun or another system sharing the questions reads them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from sdscore import __version__
from sdscore.audio import AudioBatch, load_many
from sdscore.audio.checks import over_cap
from sdscore.features.cache import ContentCache, cache_key, hash_file, hash_settings
from sdscore.features.extract import (
    extract,
    extract_concurrently,
    join_messages,
    make_extractor,
    run_isolated,
    select,
)
from sdscore.features.process_extractor import ProcessExtractor
from sdscore.protocols.naturalness.local_models import (
    DialectProfile,
    EmotionDimensions,
    OnnxMos,
)
from sdscore.runtime.compute_budget import process_pool_size

SAMPLE_RATE = 16000
CACHE_VERSION = "naturalness-clip-1"
CACHE_NAMESPACE = "naturalness"
QUALITY = {"standard": True, "personalized": False, "p808": True}


class ClipFeatures:
    """Loads the extractors once; ``answers(paths)`` / ``questions(paths)`` give one dict per path."""

    def __init__(self, *, whisper_dir=None, lid_dir=None, dialect_dir=None, emotion_dir=None, mos_dir=None,
                 jobs: int | None = None, cache_dir=None, max_audio_seconds: float | None = None):
        self.jobs = process_pool_size(jobs)
        self.max_audio_seconds = max_audio_seconds
        self.vad = make_extractor("vad")
        self.quality = make_extractor("quality", **QUALITY)
        self.serial = ProcessExtractor(["asr", "praat_pitch"], self.jobs)
        self.serial.warm()  # the workers load pocketsphinx and Praat while the ONNX models load here
        self.whisper = make_extractor("asr", backend="whisper", model_dir=str(whisper_dir)) if whisper_dir else None
        self.language = make_extractor("language", **({"model_dir": str(lid_dir)} if lid_dir else {}))
        self.dialect = DialectProfile(dialect_dir) if dialect_dir else None
        self.emotion = EmotionDimensions(emotion_dir) if emotion_dir else None
        self.mos = OnnxMos(mos_dir) if mos_dir else None
        models = {name: None if d is None else str(Path(d).resolve()) for name, d in (
            ("whisper", whisper_dir), ("lid", lid_dir), ("dialect", dialect_dir), ("emotion", emotion_dir),
            ("mos", mos_dir))}
        self.settings = {"version": CACHE_VERSION, "sdscore": __version__, "rate": SAMPLE_RATE, "models": models}
        self.cache = ContentCache(cache_dir, CACHE_NAMESPACE, memory=False) if cache_dir is not None else None

    def close(self) -> None:
        self.serial.close()

    def answers(self, paths: Sequence[str]) -> dict[str, dict]:
        return self._cached(paths, "answer", self._answer_features)

    def questions(self, paths: Sequence[str]) -> dict[str, dict]:
        return self._cached(paths, "question", self._question_features)

    def _cached(self, paths: Sequence[str], kind: str, compute) -> dict[str, dict]:
        """{path: features} for the distinct paths, from the cache where it has them."""
        digest = hash_settings({**self.settings, "kind": kind})
        out: dict[str, dict] = {}
        todo: dict[str, str] = {}
        for path in dict.fromkeys(paths):
            try:
                key = cache_key(hash_file(path), digest)
            except OSError as error:
                out[path] = {"error": f"{path}: cannot read: {error.strerror or error}"}
                continue
            cached = self.cache.get_json(key) if self.cache is not None else None
            refused = over_cap(path, self.max_audio_seconds) if cached is not None else None
            if refused is not None:  # as if decoded: a cache must not change which rows fail
                out[path] = {"error": refused}
            elif cached is not None:
                out[path] = cached
            else:
                todo[path] = key
        if todo:
            batch = load_many(list(todo), sample_rate=SAMPLE_RATE, max_seconds=self.max_audio_seconds)
            for (path, key), row in zip(todo.items(), compute(batch)):
                if self.cache is not None and row.get("error") is None:
                    self.cache.put_json(key, row)
                out[path] = row
        return out

    def _answer_features(self, batch: AudioBatch) -> list[dict]:
        # the ONNX models here while pocketsphinx + Praat run on worker processes
        rows = extract_concurrently([[self.vad, self.quality], [self.serial]], batch).to_dicts()
        if self.whisper is not None:
            whisper = extract([self.whisper], batch).to_dicts()
            for row, w in zip(rows, whisper):
                row["transcript_whisper"] = w["transcript"]
                row["error"] = join_messages(row["error"], w["error"])
        self._language(batch, rows)
        self._models(batch, rows, mos=True)
        return rows

    def _question_features(self, batch: AudioBatch) -> list[dict]:
        rows = extract([self.vad], batch).to_dicts()
        for row, n in zip(rows, batch.lengths):
            row["duration_s"] = int(n) / SAMPLE_RATE
        self._models(batch, rows, mos=False)
        return rows

    def _language(self, batch: AudioBatch, rows: list[dict]) -> None:
        ok = [i for i, row in enumerate(rows) if row["error"] is None]
        if not ok:
            return
        texts = [rows[i].get("transcript_whisper") or rows[i]["transcript"] for i in ok]
        values, failed, _ = run_isolated(self.language, select(batch, ok), {"transcript": texts})
        for j, i in enumerate(ok):
            for column in self.language.schema:
                rows[i][column] = values[column][j]
            if j in failed:
                rows[i]["error"] = join_messages(rows[i]["error"], f"language: {failed[j]}")

    def _models(self, batch: AudioBatch, rows: list[dict], *, mos: bool) -> None:
        """Local-folder models (dialect, emotion dimensions, MOS) on the items that loaded."""
        ok = [i for i, row in enumerate(rows) if row["error"] is None]
        sub = select(batch, ok)
        for name, run in (("dialect", self.dialect and self.dialect.profiles),
                          ("emotion", self.emotion and self.emotion.dimensions),
                          ("mos_local", mos and self.mos and self.mos.scores)):
            if not run or not ok:
                continue
            try:
                values = run(sub)
            except Exception as error:  # noqa: BLE001 - the model's failure is each item's error
                for i in ok:
                    rows[i]["error"] = join_messages(rows[i]["error"], f"{name}: {error}")
                continue
            for i, v in zip(ok, values):
                rows[i][name] = v
