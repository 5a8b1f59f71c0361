"""Every per-clip feature naturalness needs, for many clips at once, cached by audio content.

Answers get VAD segments, DNSMOS P.835 OVRL and P.808, transcripts (pocketsphinx; Whisper from
a local folder), Praat F0 statistics and voiced time, the language, and — from local model
folders when given — dialect profile, arousal / valence / dominance and a MOS. Questions get VAD
segments (of the mix, and of each channel of a stereo clip) and the dialect profile; question
turns (a question clip from the question's start, channels mixed) get the emotion dimensions.
Each distinct file is loaded and analysed once per batch (one question clip shared by several
systems' answers is one item).

Batched and concurrent: silero VAD steps every clip in lockstep, DNSMOS runs its ONNX graphs over
stacked windows; pocketsphinx and Praat, which hold the GIL one clip at a time, run on `jobs`
worker processes (sdscore.features.process_extractor) while the main thread runs the ONNX
models. With `cache_dir`, a clip's features are stored under the digest of its bytes (an object on
a store: of its URI, ETag and size; sdscore.features.cache.file_digest) and of the settings, so a
rerun or another system sharing the questions reads them. Clips may be local paths, s3:// / gs://
objects or clips embedded in a HF dataset (embedded://), read through the shared audio loaders.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from sdscore import __version__
from sdscore.audio import AudioBatch, load_many
from sdscore.audio.checks import over_cap
from sdscore.errors import AudioError
from sdscore.features.cache import ContentCache, cache_key, file_digest, hash_settings
from sdscore.features.extract import (
    extract,
    extract_concurrently,
    join_messages,
    make_extractor,
    run_isolated,
    select,
)
from sdscore.features.process_extractor import ProcessExtractor
from sdscore.protocols.naturalness.channels import channel_count, read_channels
from sdscore.protocols.naturalness.local_models import (
    DialectProfile,
    EmotionDimensions,
    OnnxMos,
)
from sdscore.ragged import pack
from sdscore.runtime.compute_budget import process_pool_size

SAMPLE_RATE = 16000
CACHE_VERSION = "naturalness-clip-2"
CACHE_NAMESPACE = "naturalness"
QUALITY = {"standard": True, "personalized": False, "p808": True}


class ClipFeatures:
    """Loads the extractors once; ``answers(paths)`` / ``questions(paths)`` give one dict per path."""

    def __init__(self, *, whisper_dir=None, lid_dir=None, dialect_dir=None, emotion_dir=None, mos_dir=None,
                 jobs: int | None = None, cache_dir=None, max_audio_seconds: float | None = None,
                 emotion_embeddings: bool = False):
        """emotion_embeddings: the emotion model also gives each clip's embedding (emotional naturalness)."""
        self.jobs = process_pool_size(jobs)
        self.max_audio_seconds = max_audio_seconds
        self.vad = make_extractor("vad")
        self.quality = make_extractor("quality", **QUALITY)
        self.serial = ProcessExtractor(["asr", "praat_pitch"], self.jobs)
        self.serial.warm()  # the workers load pocketsphinx and Praat while the ONNX models load here
        self.whisper = make_extractor("asr", backend="whisper", model_dir=str(whisper_dir)) if whisper_dir else None
        self.language = make_extractor("language", **({"model_dir": str(lid_dir)} if lid_dir else {}))
        self.dialect = DialectProfile(dialect_dir) if dialect_dir else None
        self.emotion = EmotionDimensions(emotion_dir, embeddings=emotion_embeddings) if emotion_dir else None
        self.mos = OnnxMos(mos_dir) if mos_dir else None
        models = {name: None if d is None else str(Path(d).resolve()) for name, d in (
            ("whisper", whisper_dir), ("lid", lid_dir), ("dialect", dialect_dir), ("emotion", emotion_dir),
            ("mos", mos_dir))}
        self.settings = {"version": CACHE_VERSION, "sdscore": __version__, "rate": SAMPLE_RATE, "models": models,
                         **({"emotion_embeddings": True} if emotion_embeddings else {})}
        self.cache = ContentCache(cache_dir, CACHE_NAMESPACE, memory=False) if cache_dir is not None else None

    def close(self) -> None:
        self.serial.close()

    def answers(self, paths: Sequence[str]) -> dict[str, dict]:
        return self._cached(paths, "answer", self._answer_features)

    def questions(self, paths: Sequence[str]) -> dict[str, dict]:
        return self._cached(paths, "question", self._question_features)

    def question_turns(self, items: Sequence[tuple[str, float]]) -> dict[tuple[str, float], dict]:
        """(question clip, question start in seconds) → {"emotion": {...}} of the clip from that time
        to its end, channels mixed (the question turn, as the authors' extract_features.py takes it)."""
        return self._cached(items, "question-turn", self._turn_features)

    def _cached(self, items: Sequence, kind: str, compute: Callable) -> dict:
        """{item: features} for the distinct items, from the cache where it has them; an item is a path
        (the whole file) or (path, offset): the file from offset seconds to its end."""
        digest = hash_settings({**self.settings, "kind": kind})
        out: dict = {}
        todo: dict = {}
        for item in dict.fromkeys(items):
            path, offset = (item, None) if isinstance(item, str) else item
            try:
                key = cache_key(file_digest(path), digest if offset is None else hash_settings([digest, offset]))
            except OSError as error:
                out[item] = {"error": f"{path}: cannot read: {error.strerror or error}"}
                continue
            cached = self.cache.get_json(key) if self.cache is not None else None
            refused = over_cap(path, self.max_audio_seconds) if cached is not None else None
            if refused is not None:  # as if decoded: a cache must not change which rows fail
                out[item] = {"error": refused}
            elif cached is not None:
                out[item] = cached
            else:
                todo[item] = key
        if todo:
            paths = [item if isinstance(item, str) else item[0] for item in todo]
            offsets = None if all(isinstance(item, str) for item in todo) else [
                None if isinstance(item, str) else item[1] for item in todo]
            batch = load_many(paths, sample_rate=SAMPLE_RATE, max_seconds=self.max_audio_seconds, offsets=offsets)
            for (item, key), row in zip(todo.items(), compute(batch, paths)):
                if self.cache is not None and row.get("error") is None:
                    self.cache.put_json(key, row)
                out[item] = row
        return out

    def _answer_features(self, batch: AudioBatch, paths: list[str]) -> list[dict]:
        # the ONNX models here while pocketsphinx + Praat run on worker processes
        rows = extract_concurrently([[self.vad, self.quality], [self.serial]], batch).to_dicts()
        if self.whisper is not None:
            whisper = extract([self.whisper], batch).to_dicts()
            for row, w in zip(rows, whisper):
                row["transcript_whisper"] = w["transcript"]
                row["error"] = join_messages(row["error"], w["error"])
        self._language(batch, rows)
        self._models(batch, rows, ("dialect", "emotion", "mos_local"))
        return rows

    def _question_features(self, batch: AudioBatch, paths: list[str]) -> list[dict]:
        rows = extract([self.vad], batch).to_dicts()
        for row, n in zip(rows, batch.lengths):
            row["duration_s"] = int(n) / SAMPLE_RATE
        self._channel_vad(paths, rows)
        self._models(batch, rows, ("dialect",))
        return rows

    def _turn_features(self, batch: AudioBatch, paths: list[str]) -> list[dict]:
        rows = [{"error": error} for error in batch.errors]
        self._models(batch, rows, ("emotion",))
        return rows

    def _channel_vad(self, paths: list[str], rows: list[dict]) -> None:
        """vad_channels: the VAD segments of each channel of a stereo clip (its question and the
        answerer's overlap apart), beside the mix's."""
        waves, owners = [], []
        for i, (path, row) in enumerate(zip(paths, rows)):
            if row["error"] is not None:
                continue
            try:
                if channel_count(path) != 2:
                    continue
                waves += read_channels(path, [0, 1], SAMPLE_RATE)
            except AudioError as error:
                row["error"] = join_messages(row["error"], str(error))
                continue
            owners.append(i)
        if not owners:
            return
        data, offsets = pack(waves)
        found = extract([self.vad], AudioBatch(data, offsets, [None] * len(waves), SAMPLE_RATE)).to_dicts()
        for k, i in enumerate(owners):
            pair = found[2 * k: 2 * k + 2]
            error = next((f["error"] for f in pair if f["error"]), None)
            if error:
                rows[i]["error"] = join_messages(rows[i]["error"], f"channel VAD: {error}")
            else:
                rows[i]["vad_channels"] = [f["vad_segments"] for f in pair]

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

    def _models(self, batch: AudioBatch, rows: list[dict], names: tuple[str, ...]) -> None:
        """The named local-folder models (dialect, emotion dimensions, MOS) on the items that loaded."""
        ok = [i for i, row in enumerate(rows) if row["error"] is None]
        sub = select(batch, ok)
        for name, run in (("dialect", self.dialect and self.dialect.profiles),
                          ("emotion", self.emotion and self.emotion.dimensions),
                          ("mos_local", self.mos and self.mos.scores)):
            if name not in names or not run or not ok:
                continue
            try:
                values = run(sub)
            except Exception as error:  # noqa: BLE001 - the model's failure is each item's error
                for i in ok:
                    rows[i]["error"] = join_messages(rows[i]["error"], f"{name}: {error}")
                continue
            for i, v in zip(ok, values):
                rows[i][name] = v
