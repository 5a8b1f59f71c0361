"""The naturalness protocol's Scorer: one RESULTS row per answer (see results.py for every column).

The clip features come from ClipFeatures (batched, concurrent, cached); this module turns them
and the manifest row into the row's latency, interruption, error rates, MOS, language, dialect,
emotion-dimension and F0 columns, with the reason for every group left null.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import polars as pl

from sdscore.metrics.text_errors import error_rates
from sdscore.protocols.naturalness.clip_features import ClipFeatures
from sdscore.protocols.naturalness.local_models import label_of
from sdscore.protocols.naturalness.results import (
    AVD,
    F0_FEATURES,
    HUMAN_SYSTEM,
    RESULTS,
)
from sdscore.protocols.naturalness.settings import NaturalnessSettings
from sdscore.protocols.naturalness.spec import SPEC
from sdscore.protocols.naturalness.timing import (
    interruption,
    leading_silence,
    onset_latency_ms,
    speech_latency_ms,
    trailing_silence,
)
from sdscore.runtime.scorer import ScoringJob
from sdscore.runtime.settings import build

MODEL_OPTIONS = ("whisper_dir", "lid_dir", "dialect_dir", "emotion_dir", "mos_dir")
MISSING_MODEL = {
    "whisper": "no Whisper folder given (--whisper-dir)",
    "mos_local": "no local MOS model given (--mos-dir); UTMOS ships in no package, DNSMOS OVRL and P.808 stand in",
    "dialect": "no dialect classifier given (--dialect-dir); Voxlect-English ships in no package",
    "emotion": "no arousal/valence/dominance model given (--emotion-dir); none ships in a package",
}


def question_key(row: dict) -> str | None:
    """What pairs one question across systems: its clip's path, else conversation + question text."""
    if row.get("audio_path"):
        return row["audio_path"]
    if row.get("conversation_id") is None and row.get("transcript_question") is None:
        return None
    return f"{row.get('conversation_id')}|{row.get('transcript_question')}"


def asker(speakers: str | None) -> str | None:
    """The question's speaker: the first of `speakers` ("asker,answerer")."""
    first = (speakers or "").split(",")[0].strip()
    return first or None


class NaturalnessScorer:
    """Settings: NaturalnessSettings (whisper_dir, lid_dir, dialect_dir, emotion_dir, mos_dir,
    max_audio_seconds; jobs and cache_dir, which change no score)."""

    settings_class = NaturalnessSettings

    def __init__(self, *args: Any, **settings: Any):
        """See NaturalnessSettings (checked: SettingsError)."""
        s = build(NaturalnessSettings, *args, **settings)
        self.features = ClipFeatures(whisper_dir=s.whisper_dir, lid_dir=s.lid_dir, dialect_dir=s.dialect_dir,
                                     emotion_dir=s.emotion_dir, mos_dir=s.mos_dir, jobs=s.jobs, cache_dir=s.cache_dir,
                                     max_audio_seconds=s.max_audio_seconds)

    def close(self) -> None:
        self.features.close()

    def __call__(self, rows: pl.DataFrame) -> pl.DataFrame:
        records = rows.to_dicts()
        usable = [r for r in records if r.get("error") is None and r.get("answer_audio_path")]
        with ThreadPoolExecutor(1) as pool:  # the question clips' VAD beside the answers' features
            questions = pool.submit(self.features.questions, [r["audio_path"] for r in usable if r.get("audio_path")])
            answers = self.features.answers([r["answer_audio_path"] for r in usable])
            questions = questions.result()
        out = [self._row(r, answers, questions) for r in records]
        return pl.DataFrame(out, schema=RESULTS)

    def _row(self, r: dict, answers: dict, questions: dict) -> dict:
        start = r.get("answer_start_time")
        interrupted, interrupted_ms = interruption(start)
        out: dict[str, Any] = {
            "item_id": r.get("item_id"), "conversation_id": r.get("conversation_id"),
            "system": r.get("system") or HUMAN_SYSTEM, "asker": asker(r.get("speakers")),
            "question_key": question_key(r), "answer_start_time": start, "interrupted": interrupted,
            "interrupted_ms": interrupted_ms, "reference_text": r.get("transcript_answer"),
        }
        if r.get("error") is not None:
            return {**out, "error": r["error"]}
        if not r.get("answer_audio_path"):
            return {**out, "error": "answer_audio_path is empty"}
        a = answers[r["answer_audio_path"]]
        q = questions.get(r["audio_path"]) if r.get("audio_path") else None
        errors = [f"answer: {a['error']}" if a.get("error") else None,
                  f"question: {q['error']}" if q and q.get("error") else None]
        if any(errors):
            return {**out, "error": "; ".join(e for e in errors if e)}
        unavailable: list[str] = []
        out.update(self._timing(a, q, start, unavailable))
        out.update(self._text(a, r.get("transcript_answer"), unavailable))
        out.update(mos_dnsmos_ovrl=a.get("dnsmos_ovrl"), mos_p808=a.get("p808_mos"), mos_local=a.get("mos_local"))
        if a.get("refused"):
            unavailable.append(f"mos: {a['refused']}")
        if self.features.mos is None:
            unavailable.append(f"mos_local: {MISSING_MODEL['mos_local']}")
        out.update(language=a.get("language"), language_prob=a.get("language_prob"),
                   language_source=a.get("language_source"))
        out.update(self._models(a, q, unavailable))
        out.update({name: a.get(name) for name in F0_FEATURES})
        out.update(answer_duration_s=a.get("duration_s"), voiced_time_s=a.get("voiced_time_s"),
                   voiced_ratio=a.get("voiced_ratio"))
        if a.get("f0_mean") is None:
            unavailable.append("f0: no voiced frame in the answer (Praat, 75-500 Hz)")
        out["unavailable"] = "; ".join(unavailable) or None
        return out

    @staticmethod
    def _timing(a: dict, q: dict | None, start: float | None, unavailable: list[str]) -> dict:
        a_lead = leading_silence(a.get("vad_segments"))
        q_trail = trailing_silence(q.get("vad_segments"), q["duration_s"]) if q else None
        latency = speech_latency_ms(q_trail, a_lead, start)
        if latency is None:
            reason = ("no question clip (audio_path)" if q is None else
                      "no speech in the question clip" if q_trail is None else
                      "no speech in the answer clip" if a_lead is None else "no answer_start_time")
            unavailable.append(f"latency_ms: {reason}")
        return {"question_trailing_silence_s": q_trail, "answer_leading_silence_s": a_lead,
                "latency_onset_ms": onset_latency_ms(a.get("vad_segments")), "latency_ms": latency}

    def _text(self, a: dict, reference: str | None, unavailable: list[str]) -> dict:
        out: dict[str, Any] = {}
        for engine, column in (("pocketsphinx", "transcript"), ("whisper", "transcript_whisper")):
            hypothesis = a.get(column)
            out[f"transcript_{engine}"] = hypothesis
            if hypothesis is None:
                if engine == "whisper" and self.features.whisper is None:
                    unavailable.append(f"whisper: {MISSING_MODEL['whisper']}")
                continue
            if not (reference or "").strip():
                unavailable.append(f"wer_{engine}: no reference text (transcript_answer)")
                continue
            for prefix, normalise in (("", "authors"), ("_clean", "clean")):
                wer, cer = error_rates(reference, hypothesis, normalise)
                out[f"wer{prefix}_{engine}"], out[f"cer{prefix}_{engine}"] = wer, cer
                if wer is None:
                    unavailable.append(f"wer{prefix}_{engine}: the reference is empty after {normalise} normalisation")
        return out

    def _models(self, a: dict, q: dict | None, unavailable: list[str]) -> dict:
        out: dict[str, Any] = {}
        if self.features.dialect is None:
            unavailable.append(f"dialect: {MISSING_MODEL['dialect']}")
        else:
            out["dialect_answer"] = a.get("dialect")
            out["dialect_question"] = q.get("dialect") if q else None
            out["dialect_answer_label"] = label_of(out["dialect_answer"])
            out["dialect_question_label"] = label_of(out["dialect_question"])
        if self.features.emotion is None:
            unavailable.append(f"arousal/valence/dominance: {MISSING_MODEL['emotion']}")
        else:
            for part, clip in (("answer", a), ("question", q)):
                dims = (clip or {}).get("emotion") or {}
                out.update({f"{d}_{part}": dims.get(d) for d in AVD})
        if q is None and (self.features.dialect or self.features.emotion):
            unavailable.append("question dialect/emotion: no question clip (audio_path)")
        return out


def scoring_job(**settings: Any) -> ScoringJob:
    """The ScoringJob of `sdscore score naturalness` (settings: NaturalnessSettings; checked by the job:
    SettingsError)."""
    settings = {k: v for k, v in settings.items() if v is not None}
    jobs = settings.get("jobs")
    if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1):
        raise ValueError(f"jobs must be a whole number >= 1, got {jobs!r}")
    for name in (*MODEL_OPTIONS, "cache_dir"):
        if name in settings:
            settings[name] = os.path.abspath(settings[name])
    model_dir = next((settings[name] for name in MODEL_OPTIONS if name in settings), None)
    # NaturalnessSettings marks jobs and cache_dir volatile: a resumed run may change them
    return ScoringJob(SPEC, NaturalnessScorer, settings, model_dir=model_dir)
