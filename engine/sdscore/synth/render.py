"""Parallel TTS rendering with a content-addressed cache under `<out>/audio/`.

A rendered clip's path is a hash of the voice settings and the text, so the same sentence in the
same voice is rendered once per corpus and a rebuild into the same folder reuses the files.
Engines run as subprocesses on worker threads; festival utterances are batched per process
because its start-up dominates a single utterance.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TypeVar

import numpy as np

from sdscore.errors import MissingDependencyError, SdscoreError
from sdscore.runtime.compute_budget import cores
from sdscore.synth import clips
from sdscore.synth.voices import Voice

_FESTIVAL_BATCH = 24
_BINARIES = {"flite": "flite", "espeak": "espeak-ng", "festival": "festival"}

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class Utterance:
    """A text to be spoken by a voice."""

    voice: Voice
    text: str

    @cached_property
    def relpath(self) -> str:
        """Where the clip lives, relative to the corpus folder."""
        key = clips.content_key(self.voice.spec(), self.text)
        return f"audio/tts/{self.voice.id}/{key}.wav"


class Renderer:
    """Renders utterances and maps derivation jobs over a thread pool, reporting progress."""

    def __init__(
        self,
        out_dir: Path,
        workers: int | None = None,
        progress: Callable[[str, int, int], None] | None = None,
    ) -> None:
        if workers is not None and workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.out_dir = Path(out_dir)
        self.workers = workers or cores()  # default: the compute budget
        self._progress = progress
        missing = [b for b in _BINARIES.values() if shutil.which(b) is None]
        if missing:
            raise MissingDependencyError(
                f"TTS engines not found on PATH: {', '.join(missing)}; install them with "
                "`apt-get install espeak-ng flite festival festvox-us-slt-hts festvox-kallpc16k`"
            )

    def path(self, relpath: str) -> Path:
        """Absolute path of a corpus-relative path."""
        return self.out_dir / relpath

    def render(self, utterances: Sequence[Utterance], stage: str) -> list[str]:
        """Render every utterance not yet on disk; returns their relative paths in order."""
        todo: dict[str, Utterance] = {}
        for u in utterances:
            if u.relpath not in todo and not self.path(u.relpath).exists():
                todo[u.relpath] = u
        festival = [u for u in todo.values() if u.voice.engine == "festival"]
        singles = [[u] for u in todo.values() if u.voice.engine != "festival"]
        # At least one festival batch per worker; they go first as the longest jobs.
        n_batches = max(min(self.workers, len(festival)), -(-len(festival) // _FESTIVAL_BATCH))
        batches = [festival[i::n_batches] for i in range(n_batches)]
        with tempfile.TemporaryDirectory(prefix="sdscore-tts-") as tmp:
            jobs = [(batch, Path(tmp) / f"job{i}") for i, batch in enumerate(batches + singles)]
            self.map(lambda job: self._render_job(*job), jobs, stage, weights=[len(b) for b, _ in jobs])
        return [u.relpath for u in utterances]

    def derive(self, jobs: Sequence[tuple[str, Callable[[], tuple[np.ndarray, int]]]], stage: str) -> None:
        """Write each (relpath, make) whose file is missing; make() returns (samples, rate)."""
        todo = {p: make for p, make in jobs if not self.path(p).exists()}
        self.map(lambda job: clips.write(self.path(job[0]), *job[1]()), list(todo.items()), stage)

    def map(
        self,
        fn: Callable[[T], R],
        items: Sequence[T],
        stage: str,
        weights: Sequence[int] | None = None,
    ) -> list[R]:
        """Apply fn to items on the worker threads; results in input order."""
        weights = list(weights) if weights is not None else [1] * len(items)
        total, done = sum(weights), 0
        results: list[R] = [None] * len(items)  # type: ignore[list-item]
        self._report(stage, 0, total)
        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            futures = {pool.submit(fn, item): i for i, item in enumerate(items)}
            try:
                for future in as_completed(futures):
                    i = futures[future]
                    results[i] = future.result()
                    done += weights[i]
                    self._report(stage, done, total)
            except BaseException:
                pool.shutdown(cancel_futures=True)
                raise
        return results

    def _report(self, stage: str, done: int, total: int) -> None:
        """Forward progress to the callback, if any."""
        if self._progress is not None:
            self._progress(stage, done, total)

    def _render_job(self, batch: list[Utterance], work: Path) -> None:
        """Render a batch (one engine process), then formant-scale, trim and write each clip."""
        work.mkdir(parents=True)
        raws = [work / f"{i}.wav" for i in range(len(batch))]
        if batch[0].voice.engine == "festival":
            _run_festival(batch, raws, work)
        else:
            _run_single(batch[0], raws[0])
        for u, raw in zip(batch, raws):
            if not raw.exists():
                raise SdscoreError(f"{u.voice.engine} produced no audio for voice {u.voice.id!r}: {u.text!r}")
            sr = u.voice.sample_rate
            x = clips.read(raw, sr)
            if u.voice.formant_scale != 1.0:
                # Reading the samples as if recorded faster scales F0, formants and tempo together.
                x = clips.resample(x, sr * u.voice.formant_scale, sr)
            try:
                x = clips.trim(x, sr)
            except ValueError as exc:
                raise SdscoreError(f"silent render for voice {u.voice.id!r}: {u.text!r}") from exc
            clips.write(self.path(u.relpath), x, sr)


def _engine_args(voice: Voice) -> tuple[float, float]:
    """Engine-side (F0, duration stretch) that give the voice's F0 and rate after formant scaling."""
    f0 = voice.f0_hz / voice.formant_scale if voice.f0_hz is not None else 0.0
    return f0, voice.formant_scale / voice.rate


def _run(cmd: list[str], what: str, stdin: str | None = None) -> None:
    """Run an engine; a non-zero exit raises SdscoreError with its stderr."""
    proc = subprocess.run(cmd, input=stdin, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SdscoreError(f"{what} failed (exit {proc.returncode}): {proc.stderr.strip()[:500]}")


def _run_single(u: Utterance, raw: Path) -> None:
    """One flite or espeak-ng process renders one utterance."""
    v = u.voice
    f0, stretch = _engine_args(v)
    if v.engine == "flite":
        cmd = ["flite", "-voice", v.model, "--setf", f"duration_stretch={stretch:.4f}"]
        if f0:
            cmd += ["--setf", f"int_f0_target_mean={f0:.2f}"]
        _run(cmd + ["-t", u.text, "-o", str(raw)], f"flite voice {v.id!r}")
    else:
        cmd = ["espeak-ng", "-v", v.model, "-s", str(round(175 * v.rate / v.formant_scale))]
        if v.espeak_pitch is not None:
            cmd += ["-p", str(v.espeak_pitch)]
        _run(cmd + ["-w", str(raw), "--stdin"], f"espeak-ng voice {v.id!r}", stdin=u.text)


def _scheme_string(text: str) -> str:
    """A Scheme string literal for festival scripts."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _run_festival(batch: list[Utterance], raws: list[Path], work: Path) -> None:
    """One festival process renders the whole batch from a generated Scheme script."""
    lines, current = [], None
    for u, raw in zip(batch, raws):
        if u.voice.model != current:
            current = u.voice.model
            lines.append(f"(voice_{current})")
        stretch = _engine_args(u.voice)[1]
        lines.append(f"(Parameter.set 'Duration_Stretch {stretch:.4f})")
        lines.append(f"(utt.save.wave (SynthText {_scheme_string(u.text)}) {_scheme_string(str(raw))} 'riff)")
    script = work / "batch.scm"
    script.write_text("\n".join(lines) + "\n")
    _run(["festival", "-b", str(script)], f"festival ({len(batch)} utterances)")
