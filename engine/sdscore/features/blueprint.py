"""TRACE's acoustic blueprint (paper Fig. 7): one JSON object per response, for an LLM judge to read.

Features are extracted batched (``batch_size`` files at a time, by the one chunking loop of
``sdscore.features.batched_extraction``) and cached by audio content (``sdscore.features.cache``): the key
combines a digest of the file's bytes with a digest of the extractor settings, so an instruction
shared by many pairs (or the same response under two paths) is extracted once, and a rerun reads
the cache. Cache entries are JSON files written atomically; failed rows are not cached. A field that
cannot be filled is null with its reason under ``unavailable``; a response whose audio (or an
extractor) failed carries ``error`` instead.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import polars as pl

from sdscore import __version__
from sdscore.audio import load_many
from sdscore.audio.checks import over_cap, sound_info
from sdscore.features.batched_extraction import CacheEntries, ItemFailed, extract_cached
from sdscore.features.cache import ContentCache, cache_key, file_digest, hash_settings
from sdscore.features.extract import (
    extract,
    extract_concurrently,
    join_messages,
    resolve,
    select,
)
from sdscore.runtime.compute_budget import process_pool_size

SAMPLE_RATE = 16000
CACHE_VERSION = "blueprint-features-4"  # 2: loudness at the file's own rate; 3: pitch 75-600 Hz, Praat voicing; 4: Praat periodicity, no YIN confidence filter
#: ``pitch`` option -> extractor: our batched YIN (Praat's band and voicing rule) or TRACE's own tracker
PITCH_METHODS = {"yin": "pitch", "aubio": "pitch_aubio"}
CACHE_NAMESPACE = "blueprint"
QUALITY_FIELDS = {
    "DNSMOS_Personalized_Signal_Quality": "dnsmos_personalized_sig",
    "DNSMOS_Personalized_Background_Quality": "dnsmos_personalized_bak",
    "DNSMOS_Personalized_Overall_Quality": "dnsmos_personalized_ovrl",
    "P808_Overall_Quality": "p808_mos",
}
PROPERTY_FIELDS = {
    "Mean_Pitch_Hz": "pitch_mean_hz",
    "Std_Dev_Pitch_Hz": "pitch_std_hz",
    "Full_Pitch_Contour_Hz": "pitch_contour_hz",
    "Integrated_Loudness_LUFS": "loudness_lufs",
    "Std_Dev_Loudness_LUFS": "loudness_std_lu",
    "Full_Loudness_Contour_LUFS": "loudness_contour_lufs",
    "Speech_Rate_WPM": "speech_rate_wpm",
    "Articulation_Rate_WPM": "articulation_rate_wpm",
}


class BlueprintBuilder:
    """Loads the extractors once; ``build(paths)`` gives one blueprint per path, in order.

    asr: None (no transcript or rates), "pocketsphinx" (default) or an asr options dict such as
    {"backend": "whisper", "model_dir": DIR}; emotion_dir / accent_dir: local classifiers;
    max_audio_seconds: longer files get an error row (None: load_many's default); jobs: worker
    processes for pocketsphinx (default: the compute budget's cores(); 1 inside an executor's worker), which holds the GIL one clip at a time and
    so runs there, beside the VAD, DNSMOS, pitch and loudness extractors of this process.
    pitch: "yin" (default: batched YIN with Praat's 75-600 Hz band and voicing rule, median F0
    checked against Praat on real voices) or "aubio" (the TRACE authors' tracker, aubio's yin
    with their 80-300 Hz and confidence >= 0.8 filter, for blueprint fidelity).
    """

    def __init__(
        self,
        cache_dir: str | os.PathLike | None = None,
        asr: str | Mapping | None = "pocketsphinx",
        emotion_dir: str | os.PathLike | None = None,
        accent_dir: str | os.PathLike | None = None,
        batch_size: int = 32,
        max_audio_seconds: float | None = None,
        jobs: int | None = None,
        pitch: str = "yin",
    ):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if pitch not in PITCH_METHODS:
            raise ValueError(f"pitch must be one of {sorted(PITCH_METHODS)}, got {pitch!r}")
        options: dict[str, dict] = {"quality": {"standard": False}}
        names = ["vad", "quality", PITCH_METHODS[pitch]]  # loudness runs at each file's own rate (_loudness_at_file_rate)
        self.missing: dict[str, str] = {}
        if asr is None:
            self.missing["agent_response"] = "ASR disabled"
        else:
            names += ["asr", "rate"]
            options["asr"] = {"backend": asr} if isinstance(asr, str) else dict(asr)
        for field, name, folder in (
            ("agent_emotion", "emotion", emotion_dir),
            ("agent_accent", "accent", accent_dir),
        ):
            if folder is None:
                self.missing[field] = (
                    f"no {name} classifier configured (none is bundled; pass {name}_dir)"
                )
            else:
                names.append(name)
                options[name] = {"model_dir": str(folder)}
        self.names, self.options = names, options
        self.jobs = process_pool_size(jobs)
        self._chains: list[list] | None = None
        settings = {
            "version": CACHE_VERSION,
            "sdscore": __version__,
            "rate": SAMPLE_RATE,
            "pitch": pitch,
            "options": options,
        }
        self.settings_digest = hash_settings(settings)
        # disk only (no memory layer): rows can be large, and a rerun reads them back from disk
        self.cache = (
            ContentCache(cache_dir, CACHE_NAMESPACE, memory=False)
            if cache_dir is not None
            else None
        )
        self.batch_size = batch_size
        self.max_audio_seconds = max_audio_seconds

    @property
    def extractors(self) -> list:
        """The extractor instances, loaded on first use (a fully cached run loads no model)."""
        return [ex for chain in self.chains for ex in chain]

    @property
    def chains(self) -> list[list]:
        """Independent extractor chains run side by side: pocketsphinx (on `jobs` worker processes)
        with the speech rate that reads its words, and everything else."""
        if self._chains is None:
            asr = self.options.get("asr", {})
            if "asr" in self.names and asr.get("backend", "pocketsphinx") == "pocketsphinx" and self.jobs > 1:
                from sdscore.features.process_extractor import ProcessExtractor

                serial = ProcessExtractor(["asr"], self.jobs, {"asr": asr})
                rest = [n for n in self.names if n not in ("asr", "rate")]
                options = {k: v for k, v in self.options.items() if k in rest}
                self._chains = [resolve(rest, options), resolve([serial, "rate"])]
            else:
                self._chains = [resolve(self.names, self.options)]
        return self._chains

    def close(self) -> None:
        """Stop the ASR worker processes, if any were started."""
        for ex in self.extractors if self._chains is not None else ():
            if hasattr(ex, "close"):
                ex.close()

    def key(self, path: str | os.PathLike) -> str:
        """Cache key of a file: digest of its bytes and of the extractor settings."""
        return cache_key(file_digest(path), self.settings_digest)

    def features(self, paths: Sequence[str | os.PathLike]) -> list[dict]:
        """The feature row of each path (extractor columns + ``error``), extracting each content once."""
        paths = [os.fspath(p) for p in paths]
        rows = extract_cached(
            paths, self._extract_batch, max_items=self.batch_size, load=self._load, key=self._key_or_error,
            cache=None if self.cache is None else CacheEntries(self.cache, "json"),
            # as if decoded: a cache must not change which rows fail
            check_hit=lambda path, _: over_cap(path, self.max_audio_seconds),
            ahead=False, describe=lambda _, path: path)
        return [row if row is not None else {"error": error} for row, error in rows]

    def _key_or_error(self, path: str) -> str:
        try:
            return self.key(path)
        except OSError as error:
            raise ItemFailed(f"{path}: cannot read: {error.strerror or error}") from None

    def _load(self, paths: list[str]):
        return load_many(paths, sample_rate=SAMPLE_RATE, max_seconds=self.max_audio_seconds)

    def _extract_batch(self, paths: list[str], batch) -> list[tuple[dict, str | None]]:
        """(feature row, its error) per path of one loaded batch."""
        frame = extract_concurrently(self.chains, batch)
        loudness = _loudness_at_file_rate(paths, batch, self.max_audio_seconds)
        frame = frame.with_columns(loudness.drop("error", "refused")).with_columns(
            pl.Series("error", [join_messages(a, b) for a, b in zip(frame["error"], loudness["error"])],
                      dtype=pl.String))
        return [(row, row["error"]) for row in frame.to_dicts()]

    def build(self, paths: Sequence[str | os.PathLike]) -> list[dict]:
        """One TRACE blueprint per path (Fig. 7 fields, plus ``unavailable`` / ``error`` when needed)."""
        return [blueprint(row, self.missing) for row in self.features(paths)]


def _loudness_at_file_rate(paths: Sequence[str], batch, max_seconds: float | None) -> pl.DataFrame:
    """BS.1770 loudness columns (+ error, refused) of each file measured at its own sample rate, where
    the standard defines its K-weighting: resampling to 16 kHz first moved LUFS by 0.7 dB on a 44.1 kHz
    test signal. Files already at 16 kHz reuse `batch`; the others are decoded again, per rate."""
    rates = []
    for i, path in enumerate(paths):
        try:
            rates.append(int(sound_info(path).samplerate) if batch.errors[i] is None else SAMPLE_RATE)
        except Exception:  # not readable by libsndfile (the native WAV decoder read it): measure at 16 kHz
            rates.append(SAMPLE_RATE)
    columns: list[dict | None] = [None] * len(paths)
    for rate in sorted(set(rates)):
        items = [i for i, r in enumerate(rates) if r == rate]
        sub = select(batch, items) if rate == SAMPLE_RATE else load_many(
            [paths[i] for i in items], sample_rate=rate, max_seconds=max_seconds)
        for i, row in zip(items, extract(["loudness"], sub).to_dicts()):
            columns[i] = row
    return pl.DataFrame(columns)


def _fixed(value, digits: int = 2):
    if value is None:
        return None
    if isinstance(value, list):
        return [round(float(v), digits) for v in value]
    return round(float(value), digits)


def _scores(labels, scores) -> dict | None:
    if labels is None or scores is None:
        return None
    return {str(k): round(float(v), 3) for k, v in zip(labels, scores)}


def blueprint(row: Mapping, missing: Mapping[str, str] | None = None) -> dict:
    """A feature row as TRACE's JSON blueprint: null fields' reasons under ``unavailable``, or
    ``error`` when the audio or an extractor failed for this response."""
    error = row.get("error")
    quality = {
        field: None if row.get(col) is None else f"{float(row[col]):.2f} / 5.00"
        for field, col in QUALITY_FIELDS.items()
    }
    out = {
        "agent_response": row.get("transcript"),
        "agent_emotion": _scores(row.get("emotion_labels"), row.get("emotion_scores")),
        "agent_accent": _scores(row.get("accent_labels"), row.get("accent_scores")),
        "agent_audio_quality": quality,
        "agent_audio_properties": {
            field: _fixed(row.get(col)) for field, col in PROPERTY_FIELDS.items()
        },
    }
    if error:
        out["error"] = error
        return out
    unavailable = {}
    for field in ("agent_response", "agent_emotion", "agent_accent"):
        if out[field] is None:
            unavailable[field] = (missing or {}).get(field) or "not computed"
    declined = row.get("refused") or ""
    for group in ("agent_audio_quality", "agent_audio_properties"):
        for field, value in out[group].items():
            if value is None:
                quality_refused = group == "agent_audio_quality" and declined.startswith("quality:")
                unavailable[field] = declined if quality_refused else _reason(field)
    if unavailable:
        out["unavailable"] = unavailable
    return out


def _reason(field: str) -> str:
    """Why a measured field is null when the audio itself loaded."""
    if "Pitch" in field:
        return "no voiced frames passed the confidence and 80-300 Hz filters"
    if "Loudness" in field:
        return "audio shorter than one 400 ms block, or silent below the -70 LUFS gate"
    if "Rate" in field:
        return "no ASR words (ASR disabled, or no speech recognised)"
    return "audio too short or empty"


def build_blueprints(
    paths: Sequence[str | os.PathLike],
    cache_dir: str | os.PathLike | None = None,
    **options,
) -> list[dict]:
    """One TRACE blueprint per audio path (see BlueprintBuilder for the options)."""
    return BlueprintBuilder(cache_dir=cache_dir, **options).build(paths)
