"""The naturalness results table: one row per answer, the columns `sdscore score naturalness` writes.

Definitions (SPEARBench, corrected by the authors' released code where they differ; see RESEARCH.md):

- subset / split: the manifest's (select-dialogues writes a Seamless Interaction conversation's
  improvised/naturalistic and train/dev/test); `eval --subset/--split` keep only those rows.
- system: the manifest's `system`; null there means the original human answer, written as
  HUMAN_SYSTEM. asker: the question's speaker — with the authors' metadata (speakers "spk1|spk2")
  the speaker whose "name:" tag comes last in transcript_question, as their
  normalize_features_by_answered_speaker.py takes the "answered speaker"; with sdscore's earlier
  metadata (speakers "asker,answerer") the first name. Pitch is speaker-normalised per (system,
  asker). question_key: what pairs the same question across systems (the question clip's path,
  else conversation_id + question text).
- latency_onset_ms: 1000 × the first VAD speech onset in the answer clip (the authors' metric
  code; 0 when the clip has no speech, as theirs returns).
- latency_ms (the authors' newest definition): 1000 × (question trailing silence + answer leading
  silence + max(answer_start_time, 0)); latency_paper_ms (the paper's: "cases of interruption are
  not counted toward the latency"): 1000 × (question trailing silence + answer leading silence +
  answer_start_time) when answer_start_time ≥ 0, null for an interrupted answer. The question's
  trailing silence is measured on the asker's channel of a stereo question clip (the answerer's
  overlapping speech is not the question's), else on the clip. Null when either clip has no speech.
- interrupted: answer_start_time < 0; interrupted_ms: −1000 × answer_start_time when negative, else 0.
- wer_/cer_<engine>: against transcript_answer after the authors' normalisation (the reference's
  "P####:" speaker tags split off and rejoined with spaces, then '.? ' stripped at both ends; the
  hypothesis stripped the same way); wer_clean_/cer_clean_<engine>: lower-cased, speaker tags and
  punctuation removed, whitespace collapsed. Fractions (0.271), not percent.
- mos_dnsmos_ovrl / mos_p808: DNSMOS P.835 OVRL and P.808 (bundled; substitutes for UTMOS, which
  ships in no package); mos_local: a local MOS model folder's score when one is given.
- language / language_prob: ISO 639-1 code ("en") and its probability, or "unknown - too short"
  (answer < 1.0 s) / "unknown - low confidence" (probability < 0.5) as the authors do;
  language_source names what decided it.
- dialect_question / dialect_answer: DIALECT_GROUPS log-probabilities (16 Voxlect classes merged;
  see DIALECT_MERGE); *_label: the argmax group.
- arousal/valence/dominance of question and answer: a local dimensional-emotion model's outputs; the
  question's on the question turn only — the question clip from context_end_time to its end, both
  channels mixed, as the authors' extract_features.py — and null for a question turn under 0.5 s
  (their --min-len-question).
- emotional_naturalness_logit: the emotional-naturalness predictor's "human-like" logit (uncalibrated;
  eval shifts it so 99 % of the human dev answers score > 0) from the question turn's and the
  answer's emotion embeddings and arousal/valence/dominance, the conversation prompt's MiniLM
  embedding and the one-hot relationship (emotional_naturalness.py); emotional_naturalness_model:
  the predictor's name, "RANDOM WEIGHTS ..." for a random-weight one (the demo's).
- f0_*: over the answer's voiced frames (Praat autocorrelation pitch, 75–500 Hz, as the authors);
  answer_duration_s: the answer clip's length; voiced_time_s = voiced frames × the pitch time step;
  voiced_ratio = voiced_time_s / answer_duration_s.
- question_duration_s, question_va_asker / question_va_answerer (the question clip's per-channel VAD
  segments, flat [start, end, ...] seconds, the asker's channel from the "spk1|spk2" dyad), answer_va
  (the answer clip's), answer_offset_s (question_end_time + answer_start_time: where the answer clip
  starts on the question clip's timeline): the two-speaker voice activity the turn-taking scores read
  (dialogue_activity.py); null, with a "turn-taking:" note, for a mono question clip.
- turn_taking_vap: with --turn-taking-model, the VAP evaluators' mean surprisal of the observed future
  voice-activity state over the answer window, nats per 50 Hz frame (turn_taking_vap.py). Eval adds
  turn_taking_ngram, the model-free baseline (turn_taking_ngram.py).
- unavailable: "column group: reason" for every group left null on a scored row, joined by "; ".
- error: why the row could not be scored (its audio, or its manifest row); null when fine.
"""

from __future__ import annotations

import polars as pl

HUMAN_SYSTEM = "human"
ASR_ENGINES = ("pocketsphinx", "whisper")
F0_FEATURES = ("f0_min", "f0_p10", "f0_p25", "f0_median", "f0_p75", "f0_p90", "f0_max", "f0_mean", "f0_std")
#: The seven features whose spread across answers is the pitch variation (Table III).
PITCH_VARIATION_FEATURES = ("f0_min", "f0_p10", "f0_p25", "f0_median", "f0_p75", "f0_p90", "f0_max")
#: Voxlect-English's 16 classes → SPEARBench's 11 groups (British Isles merged; Others dropped).
DIALECT_MERGE = {
    "East Asia": "East Asia", "English": "British Isles", "Germanic": "Germanic", "Irish": "British Isles",
    "North America": "North America", "Northern Irish": "British Isles", "Oceania": "Oceania",
    "Welsh": "British Isles", "Romance": "Romance", "Scottish": "British Isles", "Semitic": "Semitic",
    "Slavic": "Slavic", "South African": "South African", "Southeast Asia": "Southeast Asia",
    "South Asia": "South Asia", "Others": None,
}
DIALECT_GROUPS = ("British Isles", "East Asia", "Germanic", "North America", "Oceania", "Romance", "Semitic",
                  "Slavic", "South African", "South Asia", "Southeast Asia")
AVD = ("arousal", "valence", "dominance")


def question_key(row: dict) -> str | None:
    """What pairs one question across systems: its clip's path, else conversation + question text."""
    if row.get("audio_path"):
        return row["audio_path"]
    if row.get("conversation_id") is None and row.get("transcript_question") is None:
        return None
    return f"{row.get('conversation_id')}|{row.get('transcript_question')}"


def _asr_columns() -> dict[str, pl.DataType]:
    out: dict[str, pl.DataType] = {}
    for engine in ASR_ENGINES:
        out[f"transcript_{engine}"] = pl.String
        for metric in ("wer", "cer", "wer_clean", "cer_clean"):
            out[f"{metric}_{engine}"] = pl.Float64
    return out


RESULTS = pl.Schema({
    "item_id": pl.String,
    "conversation_id": pl.String,
    "subset": pl.String,
    "split": pl.String,
    "system": pl.String,
    "asker": pl.String,
    "question_key": pl.String,
    "answer_start_time": pl.Float64,
    "question_trailing_silence_s": pl.Float64,
    "answer_leading_silence_s": pl.Float64,
    "latency_onset_ms": pl.Float64,
    "latency_ms": pl.Float64,
    "latency_paper_ms": pl.Float64,
    "interrupted": pl.Boolean,
    "interrupted_ms": pl.Float64,
    "reference_text": pl.String,
    **_asr_columns(),
    "mos_dnsmos_ovrl": pl.Float64,
    "mos_p808": pl.Float64,
    "mos_local": pl.Float64,
    "language": pl.String,
    "language_prob": pl.Float64,
    "language_source": pl.String,
    "dialect_question": pl.List(pl.Float64),
    "dialect_answer": pl.List(pl.Float64),
    "dialect_question_label": pl.String,
    "dialect_answer_label": pl.String,
    **{f"{dim}_{part}": pl.Float64 for part in ("question", "answer") for dim in AVD},
    "emotional_naturalness_logit": pl.Float64,
    "emotional_naturalness_model": pl.String,
    **{name: pl.Float64 for name in F0_FEATURES},
    "answer_duration_s": pl.Float64,
    "voiced_time_s": pl.Float64,
    "voiced_ratio": pl.Float64,
    # the reconstructed dialogue's voice activity (dialogue_activity.py) and its VAP surprisal
    "question_duration_s": pl.Float64,
    "question_va_asker": pl.List(pl.Float64),
    "question_va_answerer": pl.List(pl.Float64),
    "answer_va": pl.List(pl.Float64),
    "answer_offset_s": pl.Float64,
    "turn_taking_vap": pl.Float64,
    "unavailable": pl.String,
    "error": pl.String,
})
