"""Entry point: build the whole synthetic corpus (audio, five manifests, the 10-turn consistency set,
corpus.json) from a seed.

Same seed and size give byte-identical files: every random draw comes from a per-protocol
numpy Generator spawned from the seed, the TTS engines are deterministic, file names are
content hashes and rows are written in a fixed order.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
import soundfile as sf

from sdscore.atomic_write import write_json
from sdscore.corpus import TURN, validate_manifest, write_manifest
from sdscore.manifests import manifest_spec
from sdscore.synth import clips, similarity
from sdscore.synth.battles import build_battles
from sdscore.synth.consistency_instances import DATASET_10TURN, N_TURNS_10TURN, build_consistency
from sdscore.synth.conversations import CONVERSATIONS_TABLE, build_conversations
from sdscore.synth.judge_items import build_judge_items
from sdscore.synth.naturalness_items import (
    HUMAN_START_RANGE,
    LATENCY_RANGE,
    MODEL_START_RANGE,
    build_naturalness,
)
from sdscore.synth.render import Renderer, Utterance
from sdscore.synth.reward_pairs import build_reward_pairs, reward_dialogues
from sdscore.synth.texts import CALIBRATION_SENTENCE
from sdscore.synth.voices import VOICES


@dataclass(frozen=True)
class SizeSpec:
    """How many units of each protocol a corpus size holds."""

    modality_pairs: int
    colloquial_pairs: int
    consistency_speakers: int
    judge_items: int
    naturalness_items: int
    battle_prompts: int
    conversations: int = 4
    consistency_speakers_10turn: int = 2  # speakers of the 10-turn consistency set


SIZES: dict[str, SizeSpec] = {
    "tiny": SizeSpec(6, 4, 3, 6, 6, 200, conversations=3, consistency_speakers_10turn=2),
    "small": SizeSpec(48, 24, 16, 40, 40, 2500, conversations=4, consistency_speakers_10turn=8),
    "medium": SizeSpec(160, 80, 48, 120, 120, 10000, conversations=8, consistency_speakers_10turn=24),
}

#: Bump when what a seed and size produce changes (draws, layout, semantics of a column), so that a
#: corpus folder from an older version is rebuilt rather than reused (renders are still reused).
#: 2: naturalness items answered by two systems, answer_start_time as SPEARBench defines it;
#: conversations.parquet. 3: consistency_10turn.parquet.
CORPUS_VERSION = 3

MANIFESTS = {
    "reward": "reward_pairs.parquet",
    "consistency": "consistency.parquet",
    "judge": "judge_items.parquet",
    "naturalness": "naturalness.parquet",
    "arena": "battles.parquet",
}

#: SpeakerSleuth's extended set: the same instances with ten turns per speaker, its own manifest
#: (the main consistency.parquet keeps five turns per speaker)
CONSISTENCY_10TURN_TABLE = "consistency_10turn.parquet"

NOTES = {
    "reward_pairs.parquet": (
        "SDiaReward preference pairs; the chosen episode is always the preferred one. "
        "criterion=modality: chosen and rejected share the dialogue text; chosen is voiced by natural "
        "TTS voices, rejected re-voices the final assistant turn or all turns with a robotic voice of the "
        "same gender (subset synthetic-natural-vs-robotic) or degrades them (subset synthetic-degraded); "
        "category = '<robotic-voice|degradation>/<final-turn|all-turns>'. criterion=colloquialness "
        "(subset colloquial, category = domain): chosen = spoken-style text, rejected = written-style "
        "text of the same dialogue, with the same voice per role."
    ),
    "consistency.parquet": (
        "SpeakerSleuth instances. detection rows: S1 all five turns in the target voice (true_turns "
        "empty); S2 turn true_turns[0] re-voiced by an opposite-gender voice; S3 the same turn re-voiced "
        "by the most similar same-gender voice of another speaker (truth.consistency.similar_voice). "
        "discrimination rows: the four unmasked turns, masked_turn, and the S1/S2/S3 versions of the "
        "masked turn in shuffled order (candidate_scenarios); the correct candidate is S1, the true "
        "ranking S1 > S3 > S2. reference_path: a longer passage in the target voice."
    ),
    CONSISTENCY_10TURN_TABLE: (
        f"SpeakerSleuth's 10-turn set (dataset {DATASET_10TURN}): as consistency.parquet with ten turns per "
        "target speaker (discrimination rows: nine unmasked turns); its own speakers and draws."
    ),
    "judge_items.parquet": (
        "TRACE/SpeakBench pairs. Per response, content is good iff the answer text is correct, voice "
        "quality iff it is a natural voice without degradation, paralinguistics iff it is spoken in the "
        "requested style (slow/fast/high/low). Dimension label: '1'/'2' if only that response is good, "
        "else both_good/both_bad; overall = speakbench fusion (C and P both_bad -> both_bad; else the "
        "first decisive of C, P, VQ; else both_good iff C is both_good)."
    ),
    "naturalness.parquet": (
        "SPEARBench items; every question answered by two systems (human: natural voice, gaps incl. "
        "interruptions; halfduplex-robot: robotic voice, never before the question ends), sharing the "
        "question file. audio_path: context (answerer) + pause + question (asker), 16 kHz, "
        "ending where the question's speech ends (question_end_time). "
        "answer_audio_path: the answer with a known leading silence = latency "
        "(truth.naturalness.answer_latency_s). answer_start_time: where the answer file starts relative "
        "to the question's end (negative = interruption), so its speech starts answer_start_time + "
        "latency s after the question's (truth.naturalness.speech_gap_s). dialogue_path: 16 kHz stereo, "
        "channel 0 asker, channel 1 answerer. Times are speech bounds at -35 dB re peak, 10 ms frames."
    ),
    "battles.parquet": (
        "S2S-Arena battles with winners drawn from a known Bradley-Terry model with domain offsets, "
        "a position bias towards model_a and a length bias (truth.arena). Prompts judged twice share "
        "prompt_id with swapped positions and lengths. No audio."
    ),
    "audio/tts/": (
        "TTS renders, one folder per voice, named by a hash of voice settings and text; trimmed so "
        "speech starts and ends 50 ms from the edges; -1 dBFS peak; 16-bit PCM at the engine's rate."
    ),
    "audio/degraded/": "Degraded copies of renders, one folder per degradation (see synth/degrade.py).",
    "audio/naturalness/": "Question, answer and two-channel dialogue files of the naturalness items.",
    CONVERSATIONS_TABLE: (
        "Timed segments of two-speaker conversations, the input of `sdscore corpus select-dialogues`: one row "
        "per utterance (conversation_id, speaker, start, end in s, text, audio_path = the speaker's channel "
        "file, channel null). Cases: short silences inside turns, listener backchannels (< 0.5 s), "
        "overlapping turns, a short answer then a long silence that splits the turn, opening questions "
        "without context. truth.conversations.dialogues: the valid SPEARBench dialogues of the script."
    ),
    "audio/conversations/": "One 16 kHz mono channel file per speaker per conversation (conversations.parquet).",
}


def build_corpus(
    out_dir: str | os.PathLike,
    *,
    seed: int = 0,
    size: str = "small",
    workers: int | None = None,
    progress: Callable[[str, int, int], None] | None = None,
    reward_split: str | None = None,
) -> dict:
    """Build the synthetic corpus under out_dir and return its summary (also in corpus.json).

    Files already in out_dir with the same content key are reused (a render cache). progress, if
    given, is called as progress(stage, done, total) while each stage runs. reward_split "train" or
    "heldout" draws the reward pairs from that part of the dialogue bank only (held out: every 5th
    dialogue), so a reward model can be scored on dialogues it was not trained on; None uses all.
    """
    if size not in SIZES:
        raise ValueError(f"unknown corpus size {size!r}; expected one of {sorted(SIZES)}")
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    spec = SIZES[size]
    reward_dialogues(reward_split)  # refuse an unknown split before rendering anything
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    renderer = Renderer(out, workers, progress)
    rng = {name: np.random.default_rng(s) for name, s in zip(MANIFESTS, np.random.SeedSequence(seed).spawn(5))}

    similar = voice_similarity(renderer)
    frames, truth = {}, {}
    frames["reward"], truth["reward"] = build_reward_pairs(
        renderer, rng["reward"], spec.modality_pairs, spec.colloquial_pairs, reward_split
    )
    frames["consistency"], truth["consistency"] = build_consistency(
        renderer, rng["consistency"], spec.consistency_speakers, similar
    )
    frames["judge"], truth["judge"] = build_judge_items(renderer, rng["judge"], spec.judge_items)
    frames["naturalness"], truth["naturalness"] = build_naturalness(
        renderer, rng["naturalness"], spec.naturalness_items
    )
    truth["naturalness"].update({"human_start_range_s": list(HUMAN_START_RANGE), "model_start_range_s": list(MODEL_START_RANGE),
                                 "latency_range_s": list(LATENCY_RANGE)})
    frames["arena"], truth["arena"] = build_battles(rng["arena"], spec.battle_prompts)
    # its own child seed (after the manifests' five), so adding it left their draws unchanged
    conversation_rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(len(MANIFESTS) + 1)[-1])
    segments, truth["conversations"] = build_conversations(renderer, conversation_rng, spec.conversations)
    write_manifest(segments, out / CONVERSATIONS_TABLE)
    # the 10-turn set draws from the next child seed, so the manifests above are unchanged by it
    extended_rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(len(MANIFESTS) + 2)[-1])
    extended, truth["consistency_10turn"] = build_consistency(
        renderer, extended_rng, spec.consistency_speakers_10turn, similar, n_turns=N_TURNS_10TURN,
        dataset=DATASET_10TURN, id_prefix="consistency-10turn")
    write_manifest(validate_manifest(extended, manifest_spec("consistency"), CONSISTENCY_10TURN_TABLE),
                   out / CONSISTENCY_10TURN_TABLE)

    for i, (name, filename) in enumerate(MANIFESTS.items()):
        write_manifest(validate_manifest(frames[name], manifest_spec(name), filename), out / filename)
        if progress is not None:
            progress("manifests", i + 1, len(MANIFESTS))
    audio = sorted(audio_paths(frames) | audio_paths({"consistency": extended}))
    seconds = sum(sf.info(str(out / p)).duration for p in audio)
    summary = {
        "generator": "sdscore.synth",
        "cache_version": clips.CACHE_VERSION,
        "corpus_version": CORPUS_VERSION,
        "seed": seed,
        "size": size,
        "counts": {**{MANIFESTS[name]: frames[name].height for name in MANIFESTS},
                   CONSISTENCY_10TURN_TABLE: extended.height},
        "audio_files": len(audio),
        "total_audio_seconds": round(seconds, 3),
        "voices": {v.id: {**v.spec(), "sample_rate": v.sample_rate} for v in VOICES},
        "voices_used": sorted({p.split("/")[2] for p in audio if p.startswith("audio/tts/")}),
        "files": NOTES,
        "truth": truth,
    }
    write_json(out / "corpus.json", summary)
    return summary


def voice_similarity(renderer: Renderer) -> dict[str, tuple[str, float]]:
    """Every voice reads the calibration sentence; per voice, its most similar other speaker."""
    paths = renderer.render([Utterance(v, CALIBRATION_SENTENCE) for v in VOICES], "voices: calibration")
    clips_16k = [
        clips.resample(clips.read(renderer.path(p), v.sample_rate), v.sample_rate, similarity.SAMPLE_RATE)
        for v, p in zip(VOICES, paths)
    ]
    features = np.stack([similarity.mfcc_stats(x) for x in clips_16k])
    return similarity.most_similar(VOICES, features)


def audio_paths(frames: dict[str, pl.DataFrame]) -> set[str]:
    """Every audio path the manifests reference (relative to the corpus folder)."""
    paths: set[str] = set()
    for protocol, frame in frames.items():
        for name, dtype in frame.schema.items():
            column = frame[name]
            if dtype == pl.List(TURN):
                column = column.explode().struct.field("audio_path")
            elif name not in manifest_spec(protocol).audio_columns:
                continue
            elif dtype == pl.List(pl.String):
                column = column.explode()
            paths.update(column.drop_nulls())
    return paths
