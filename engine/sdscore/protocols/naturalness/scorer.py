"""The naturalness protocol's Scorer: one RESULTS row per answer (see results.py for every column).

The clip features come from ClipFeatures (batched, concurrent, cached); this module turns them
and the manifest row into the row's latency, interruption, error rates, MOS, language, dialect,
emotion-dimension and F0 columns, with the reason for every group left null.
"""

from __future__ import annotations

import os
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import polars as pl

from sdscore.errors import AudioError
from sdscore.llm_judges.scoring_jobs import judge_job
from sdscore.metrics.text_errors import error_rates
from sdscore.protocols.naturalness.clip_features import ClipFeatures
from sdscore.protocols.naturalness.emotional_naturalness import EmotionalNaturalness
from sdscore.protocols.naturalness.dialogue_activity import activity_columns
from sdscore.protocols.naturalness.local_models import label_of
from sdscore.protocols.naturalness.results import (
    AVD,
    F0_FEATURES,
    HUMAN_SYSTEM,
    RESULTS,
    question_key,
)
from sdscore.protocols.naturalness.settings import NaturalnessSettings
from sdscore.protocols.naturalness.spec import SPEC
from sdscore.protocols.naturalness.timing import (
    interruption,
    leading_silence,
    onset_latency_ms,
    paper_latency_ms,
    released_latency_ms,
    trailing_silence,
)
from sdscore.runtime.compute_budget import cores
from sdscore.runtime.scorer import ScoringJob
from sdscore.runtime.settings import SettingsError, build

MODEL_OPTIONS = ("whisper_dir", "lid_dir", "dialect_dir", "emotion_dir", "mos_dir", "emotional_naturalness_dir")
#: the VAP evaluators' folder (turn_taking_vap.py), a model option beside MODEL_OPTIONS
TURN_TAKING_OPTION = "turn_taking_model"
MISSING_MODEL = {
    "whisper": "no Whisper folder given (--whisper-dir)",
    "mos_local": "no local MOS model given (--mos-dir); UTMOS ships in no package, DNSMOS OVRL and P.808 stand in",
    "dialect": "no dialect classifier given (--dialect-dir); Voxlect-English ships in no package",
    "emotion": "no arousal/valence/dominance model given (--emotion-dir); none ships in a package",
    "turn_taking_vap": "no VAP checkpoint folder given (--turn-taking-model); VAP's weights ship in no package "
                       "(eval's model-free n-gram baseline scores turn-taking instead)",
    "emotional_naturalness": "no emotional-naturalness predictor given (--emotional-naturalness-dir); TRACE's "
                             "weights ship in no package",
}
#: the authors' extract_features.py skips question turns shorter than this (--min-len-question)
MIN_QUESTION_TURN_S = 0.5


def dyad(speakers: str | None) -> list[str]:
    """The speakers of the authors' "spk1|spk2" (empty for sdscore's earlier "asker,answerer" or none)."""
    names = [name.strip() for name in (speakers or "").split("|")]
    return names if len(names) == 2 and all(names) else []


def asker(speakers: str | None, transcript_question: str | None = None) -> str | None:
    """The question's speaker: with the authors' speakers "spk1|spk2", the one whose "name:" tag comes
    last in transcript_question (their answered speaker; None when no tag names either); else the
    first of sdscore's earlier "asker,answerer"."""
    names = dyad(speakers)
    if names:
        pattern = re.compile(r"(?:^|\s)(" + "|".join(re.escape(n) for n in names) + r"):")
        tags = pattern.findall(transcript_question or "")
        return tags[-1] if tags else None
    first = (speakers or "").split(",")[0].strip()
    return first or None


class NaturalnessScorer:
    """Settings: NaturalnessSettings (whisper_dir, lid_dir, dialect_dir, emotion_dir, mos_dir,
    max_audio_seconds; jobs and cache_dir, which change no score)."""

    settings_class = NaturalnessSettings

    def __init__(self, *args: Any, **settings: Any):
        """See NaturalnessSettings (checked: SettingsError)."""
        s = build(NaturalnessSettings, *args, **settings)
        if s.emotional_naturalness_dir is not None and s.emotion_dir is None:
            raise SettingsError("emotional_naturalness_dir (--emotional-naturalness-dir) needs emotion_dir "
                                "(--emotion-dir): the predictor reads that model's emotion embeddings and "
                                "arousal/valence/dominance")
        self.emotional = (EmotionalNaturalness(s.emotional_naturalness_dir)
                          if s.emotional_naturalness_dir is not None else None)
        self.turn_taking = None  # loaded before the clip features start their worker processes
        if s.turn_taking_model is not None:
            from sdscore.protocols.naturalness.turn_taking_vap import VapEvaluators

            self.turn_taking = VapEvaluators(s.turn_taking_model)
        self.features = ClipFeatures(whisper_dir=s.whisper_dir, lid_dir=s.lid_dir, dialect_dir=s.dialect_dir,
                                     emotion_dir=s.emotion_dir, mos_dir=s.mos_dir, jobs=s.jobs, cache_dir=s.cache_dir,
                                     max_audio_seconds=s.max_audio_seconds,
                                     emotion_embeddings=self.emotional is not None)

    def close(self) -> None:
        self.features.close()

    def __call__(self, rows: pl.DataFrame) -> pl.DataFrame:
        records = rows.to_dicts()
        usable = [r for r in records if r.get("error") is None and r.get("answer_audio_path")]
        question_paths = [r["audio_path"] for r in usable if r.get("audio_path")]
        answer_paths = [r["answer_audio_path"] for r in usable]
        if cores() == 1:  # a budget of one core: one after the other
            questions, answers = self.features.questions(question_paths), self.features.answers(answer_paths)
        else:
            with ThreadPoolExecutor(1) as pool:  # the question clips' VAD beside the answers' features
                pending = pool.submit(self.features.questions, question_paths)
                answers = self.features.answers(answer_paths)
                questions = pending.result()
        turns = self._question_turns(usable)
        out = [self._row(r, answers, questions, turns) for r in records]
        self._emotional_naturalness(records, out, answers, turns)
        self._turn_taking_vap(records, out)
        return pl.DataFrame(out, schema=RESULTS)

    def _emotional_naturalness(self, records: list[dict], out: list[dict], answers: dict, turns: dict) -> None:
        """emotional_naturalness_logit/_model of the scored rows, in one predictor batch; why not in
        `unavailable` (emotional_naturalness.py)."""
        scored = [i for i, row in enumerate(out) if row.get("error") is None]
        if self.emotional is None:
            for i in scored:
                _note(out[i], f"emotional naturalness: {MISSING_MODEL['emotional_naturalness']}")
            return
        items = []
        for i in scored:
            r = records[i]
            item, why = question_turn(r)
            items.append({"question": turns.get(item, {}).get("emotion") if item else None,
                          "answer": answers[r["answer_audio_path"]].get("emotion"),
                          "prompt": r.get("conversation_prompt"), "relationship": r.get("relationship"),
                          "why": why})
        for i, item, (logit, notes) in zip(scored, items, self.emotional.scores(items)):
            out[i]["emotional_naturalness_logit"] = logit
            out[i]["emotional_naturalness_model"] = self.emotional.predictor.name
            if item["why"] and item["question"] is None:
                notes = [f"question turn: {item['why']}"]
            for note in notes:
                _note(out[i], f"emotional naturalness: {note}")

    def _turn_taking_vap(self, records: list[dict], out: list[dict]) -> None:
        """turn_taking_vap of the scored rows with voice activity (turn_taking_vap.py), each dialogue
        alone; why not in `unavailable` (a row without activity has its "turn-taking:" note)."""
        for r, row in zip(records, out):
            if row.get("error") is not None or row.get("question_va_asker") is None:
                continue
            if self.turn_taking is None:
                why = MISSING_MODEL["turn_taking_vap"]
            else:
                from sdscore.audio import load
                from sdscore.protocols.naturalness.channels import read_channels
                from sdscore.protocols.naturalness.turn_taking_vap import SAMPLE_RATE, vap_surprisal

                try:
                    asker = _channel(r, row["asker"])
                    question = np.stack(read_channels(r["audio_path"], [asker, 1 - asker], SAMPLE_RATE))
                    answer = load(r["answer_audio_path"], SAMPLE_RATE)
                    row["turn_taking_vap"] = vap_surprisal(self.turn_taking, question, answer, row)
                    continue
                except (AudioError, ValueError) as error:
                    why = str(error)
            row["unavailable"] = "; ".join(filter(None, [row.get("unavailable"), f"turn_taking_vap: {why}"]))

    def _question_turns(self, usable: list[dict]) -> dict:
        """The question turns' emotion dimensions (only with an emotion model)."""
        if self.features.emotion is None:
            return {}
        items = [item for item, _ in map(question_turn, usable) if item]
        return self.features.question_turns(items) if items else {}

    def _row(self, r: dict, answers: dict, questions: dict, turns: dict) -> dict:
        start = r.get("answer_start_time")
        interrupted, interrupted_ms = interruption(start)
        out: dict[str, Any] = {
            "item_id": r.get("item_id"), "conversation_id": r.get("conversation_id"),
            "subset": r.get("subset"), "split": r.get("split"), "system": r.get("system") or HUMAN_SYSTEM,
            "asker": asker(r.get("speakers"), r.get("transcript_question")),
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
        out.update(self._timing(a, q, start, _channel(r, out["asker"]), unavailable))
        out.update(self._text(a, r.get("transcript_answer"), unavailable))
        out.update(mos_dnsmos_ovrl=a.get("dnsmos_ovrl"), mos_p808=a.get("p808_mos"), mos_local=a.get("mos_local"))
        if a.get("refused"):
            unavailable.append(f"mos: {a['refused']}")
        if self.features.mos is None:
            unavailable.append(f"mos_local: {MISSING_MODEL['mos_local']}")
        out.update(language=a.get("language"), language_prob=a.get("language_prob"),
                   language_source=a.get("language_source"))
        out.update(self._models(a, q, r, turns, unavailable))
        out.update({name: a.get(name) for name in F0_FEATURES})
        out.update(answer_duration_s=a.get("duration_s"), voiced_time_s=a.get("voiced_time_s"),
                   voiced_ratio=a.get("voiced_ratio"))
        activity, why = activity_columns(r, a, q, _channel(r, out["asker"]))
        out.update(activity)
        if why:
            unavailable.append(f"turn-taking: {why}")
        if a.get("f0_mean") is None:
            unavailable.append("f0: no voiced frame in the answer (Praat, 75-500 Hz)")
        out["unavailable"] = "; ".join(unavailable) or None
        return out

    @staticmethod
    def _timing(a: dict, q: dict | None, start: float | None, channel: int | None, unavailable: list[str]) -> dict:
        """Latencies; the question's trailing silence on the asker's channel of a stereo clip."""
        a_lead = leading_silence(a.get("vad_segments"))
        segments = None
        if q:
            by_channel = q.get("vad_channels")
            segments = by_channel[channel] if by_channel and channel is not None else q.get("vad_segments")
        q_trail = trailing_silence(segments, q["duration_s"]) if q else None
        latency = released_latency_ms(q_trail, a_lead, start)
        paper = paper_latency_ms(q_trail, a_lead, start)
        if latency is None:
            reason = ("no question clip (audio_path)" if q is None else
                      "no speech in the question clip" if q_trail is None else
                      "no speech in the answer clip" if a_lead is None else "no answer_start_time")
            unavailable.append(f"latency_ms: {reason}")
        elif paper is None:
            unavailable.append("latency_paper_ms: an interrupted answer (answer_start_time < 0) is not counted, as "
                               "the paper defines latency")
        return {"question_trailing_silence_s": q_trail, "answer_leading_silence_s": a_lead,
                "latency_onset_ms": onset_latency_ms(a.get("vad_segments")), "latency_ms": latency,
                "latency_paper_ms": paper}

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

    def _models(self, a: dict, q: dict | None, r: dict, turns: dict, unavailable: list[str]) -> dict:
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
            item, why = question_turn(r)
            turn = turns.get(item, {}) if item else {}
            if why or turn.get("error"):
                unavailable.append(f"question emotion: {why or turn['error']}")
            for part, features in (("answer", a), ("question", turn)):
                dims = features.get("emotion") or {}
                out.update({f"{d}_{part}": dims.get(d) for d in AVD})
        if q is None and self.features.dialect:
            unavailable.append("question dialect: no question clip (audio_path)")
        return out


def _note(row: dict, note: str) -> None:
    """Append one "group: reason" note to a row's `unavailable`."""
    row["unavailable"] = "; ".join(filter(None, (row.get("unavailable"), note)))


def _channel(r: dict, speaker: str | None) -> int | None:
    """The question clip's channel of `speaker`: its place in the authors' "spk1|spk2" (None otherwise)."""
    names = dyad(r.get("speakers"))
    return names.index(speaker) if speaker in names else None


def question_turn(r: dict) -> tuple[tuple[str, float] | None, str | None]:
    """(question clip, question start) of a row's question turn, or (None, why it has none)."""
    start, end = r.get("context_end_time"), r.get("question_end_time")
    if not r.get("audio_path"):
        return None, "no question clip (audio_path)"
    if start is None or end is None:
        return None, "no context_end_time/question_end_time (the question turn's bounds)"
    if end - start < MIN_QUESTION_TURN_S:
        return None, (f"the question turn lasts {end - start:.3g} s, under {MIN_QUESTION_TURN_S} s (the authors skip "
                      "it)")
    return (r["audio_path"], float(start)), None


def scoring_job(**settings: Any) -> ScoringJob:
    """The ScoringJob of `sdscore score naturalness` (settings: NaturalnessSettings; checked by the job:
    SettingsError), or with judge="openai" the stance judge's (StanceJudgeSettings; the judge is built
    once and closed, so a usage error stops the run before any row is asked)."""
    settings = {k: v for k, v in settings.items() if v is not None}
    judge = settings.pop("judge", "features")
    if judge == "openai":
        from sdscore.protocols.naturalness.stance_scorer import StanceJudgeScorer

        return judge_job(SPEC, StanceJudgeScorer, settings)
    if judge != "features":
        raise ValueError(f"unknown naturalness judge {judge!r}; expected 'features' or 'openai'")
    jobs = settings.get("jobs")
    if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1):
        raise ValueError(f"jobs must be a whole number >= 1, got {jobs!r}")
    for name in (*MODEL_OPTIONS, TURN_TAKING_OPTION, "cache_dir"):
        if name in settings:
            settings[name] = os.path.abspath(settings[name])
    model_dir = next((settings[name] for name in (*MODEL_OPTIONS, TURN_TAKING_OPTION) if name in settings), None)
    # NaturalnessSettings marks jobs and cache_dir volatile: a resumed run may change them
    return ScoringJob(SPEC, NaturalnessScorer, settings, model_dir=model_dir)
