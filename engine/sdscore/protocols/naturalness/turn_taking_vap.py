"""Turn-taking naturalness by VAP (voice activity projection) evaluators from a local folder.

``--turn-taking-model DIR``: DIR in the authors' released checkpoint layout
(ErikEkstedt/VoiceActivityProjection, example/checkpoints/): ``VAP_state_dict.pt``, a state dict
of their VAP class (or ``VAPModule_state_dict.pt``, the same keys under ``model.``). Every ``*.pt``
state dict in DIR is one evaluator (VAPModule_state_dict.pt is skipped beside VAP_state_dict.pt:
the same model); the score is their average, as SPEARBench averages its evaluators.

Per answer (``turn_taking_vap``, nats per frame): the reconstructed dialogue — the question clip's
two channels (asker, answerer) with the answer clip in the answerer's place from answer_offset_s, as
dialogue_activity.py builds the voice activity — goes through each model as one 16 kHz stereo
waveform; at every 50 Hz frame of the answer window the model's log-probability of the observed
future voice-activity state (the next 2 s of both speakers' VAD in VAP's 4 bins each; silence past
the dialogue's end) is taken, negated and averaged over the window, then over the evaluators; the
models see the dialogue from CONTEXT_S (15 s) before the answer window, as the authors' chunked
extraction gives each frame 15 s of context (VAP was trained on 20-s windows). Lower
is more typical of the dialogues the models were trained on. Each dialogue runs alone (its two
channels together), so a batch of rows scores exactly as the rows one by one.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from sdscore.errors import ModelError
from sdscore.protocols.naturalness.dialogue_activity import dialogue_frames

SAMPLE_RATE = 16000
RELEASED = "VAP_state_dict.pt"
RELEASED_MODULE = "VAPModule_state_dict.pt"
#: seconds of dialogue before the answer window the models see (the authors' step_extraction: 20-s
#: chunks, 5-s steps, so each scored frame has 15 s of context)
CONTEXT_S = 15.0


def evaluator_files(folder: str | Path) -> list[Path]:
    """The state-dict files of a model folder (ModelError naming it when it has none)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ModelError(f"{folder}: no such turn-taking model folder")
    files = sorted(p for p in folder.glob("*.pt") if p.is_file())
    if any(p.name == RELEASED for p in files):
        files = [p for p in files if p.name != RELEASED_MODULE]
    if not files:
        raise ModelError(f"{folder}: no VAP state dict (*.pt, e.g. the authors' {RELEASED}) in the turn-taking "
                         "model folder")
    return files


def dialogue_waveform(question: np.ndarray, answer: np.ndarray, answer_offset_s: float) -> np.ndarray:
    """(2, N) float32: the question clip's channels (asker, answerer) with the answerer's channel
    silenced from the answer's start and the answer added there; the timeline starts at the answer
    when it would start before the question clip (as dialogue_frames)."""
    origin = min(0.0, answer_offset_s)
    shift = int(round(-origin * SAMPLE_RATE))
    start = int(round((answer_offset_s - origin) * SAMPLE_RATE))
    cut = int(round(answer_offset_s * SAMPLE_RATE))  # on the question clip's own timeline
    n = max(question.shape[1] + shift, start + len(answer))
    out = np.zeros((2, n), dtype=np.float32)
    out[0, shift:shift + question.shape[1]] = question[0]
    before = question[1, :max(0, cut)]
    out[1, shift:shift + len(before)] = before
    out[1, start:start + len(answer)] += answer
    return out


class VapEvaluators:
    """The VAP models of one folder; ``surprisal`` averages them."""

    def __init__(self, folder: str | Path):
        from sdscore.models.vap import load_state_dict_file

        self.files = evaluator_files(folder)
        self.models = [load_state_dict_file(path) for path in self.files]

    def surprisal(self, waveform: np.ndarray, asker: np.ndarray, answerer: np.ndarray, window: tuple[int, int]) -> float:
        """Mean over the models of the mean -ln P(observed future state) over the window's frames (50 Hz;
        asker/answerer: bool activity tracks of the same dialogue at 50 Hz); the models see the dialogue
        from CONTEXT_S before the window (all of it when shorter)."""
        import torch

        from sdscore.models.vap import FRAME_HZ, HORIZON, future_labels

        first = max(0, window[0] - int(round(CONTEXT_S * FRAME_HZ)))  # their 15-s context before the frames
        asker, answerer = asker[first:], answerer[first:]
        window = (window[0] - first, window[1] - first)
        va = torch.zeros(len(asker) + HORIZON + 1, 2)
        va[: len(asker), 0] = torch.from_numpy(np.asarray(asker, dtype=np.float32))
        va[: len(answerer), 1] = torch.from_numpy(np.asarray(answerer, dtype=np.float32))
        labels = future_labels(va)[: len(asker)]
        samples = waveform[:, first * SAMPLE_RATE // FRAME_HZ:]
        audio = torch.from_numpy(np.ascontiguousarray(samples, dtype=np.float32)).unsqueeze(0)
        values = []
        with torch.inference_mode():
            for model in self.models:
                logp = model(audio)[0].log_softmax(dim=-1)
                end = min(window[1], logp.shape[0], len(labels))
                if end <= window[0]:
                    raise ValueError("the answer window holds no frame of the model's output")
                frames = torch.arange(window[0], end)
                values.append(float(-logp[frames, labels[frames]].mean()))
        return float(np.mean(values))


def vap_surprisal(evaluators: VapEvaluators, question: np.ndarray, answer: np.ndarray, row: dict) -> float:
    """One answer's turn_taking_vap from its audio (question: (2, N) asker, answerer; answer: mono) and its
    results row's activity columns."""
    from sdscore.models.vap import FRAME_HZ

    built = dialogue_frames(row["question_va_asker"], row["question_va_answerer"], row["answer_va"],
                            question_duration_s=row["question_duration_s"], answer_offset_s=row["answer_offset_s"],
                            answer_duration_s=row["answer_duration_s"], fps=FRAME_HZ)
    waveform = dialogue_waveform(question, answer, row["answer_offset_s"])
    return evaluators.surprisal(waveform, built.asker, built.answerer, built.window)
