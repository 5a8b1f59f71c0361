"""One call for every batched acoustic extractor: names in, a polars frame with one row per item out.

Each extractor is a class with ``name``, ``requires`` (extractors whose columns it reads),
``schema`` (its output columns) and ``run(batch, inputs) -> {column: list}`` over loaded items
only; it loads its models in ``__init__`` so one instance serves many batches (the Ray Data
callable-class shape). Items whose audio failed get nulls and their error; an extractor that
raises on a batch is retried item by item, so one bad item never costs the others. An extractor
that refuses some items itself (DNSMOS on samples outside [-1, 1]) returns None in their columns
and their reasons under ``ROW_ERRORS`` (a list with None for the items it scored); those go to
the ``refused`` column, not ``error``: the item's other features stand.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol, runtime_checkable

import numpy as np
import polars as pl
import soxr

from sdscore.audio import AudioBatch
from sdscore.ragged import pack
from sdscore.runtime.compute_budget import thread_pool_size

#: Extractor name -> "module:Class"; modules import lazily (onnxruntime, transformers are heavy).
REGISTRY: dict[str, str] = {
    "vad": "sdscore.features.vad:SileroVad",
    "quality": "sdscore.features.quality:Dnsmos",
    "pitch": "sdscore.features.pitch:YinPitch",
    "pitch_aubio": "sdscore.features.aubio_pitch:AubioYinPitch",
    "praat_pitch": "sdscore.features.praat_pitch:PraatPitch",
    "loudness": "sdscore.features.loudness:Bs1770Loudness",
    "asr": "sdscore.features.asr:make_asr",
    "rate": "sdscore.features.rate:SpeechRate",
    "emotion": "sdscore.features.classifiers:emotion_classifier",
    "accent": "sdscore.features.classifiers:accent_classifier",
    "language": "sdscore.features.language:LanguageId",
}


#: Optional key of an extractor's result: per-item refusal reasons (None = scored).
ROW_ERRORS = "row_errors"


@runtime_checkable
class Extractor(Protocol):
    """A batched feature extractor (see the module docstring for the contract)."""

    name: str
    requires: tuple[str, ...]
    schema: dict[str, pl.DataType]

    def run(self, batch: AudioBatch, inputs: Mapping[str, list]) -> dict[str, list]: ...


def make_extractor(name: str, **options) -> Extractor:
    """Build the registered extractor `name` with its options (models load here, once)."""
    if name not in REGISTRY:
        raise ValueError(
            f"unknown extractor {name!r}; known: {', '.join(sorted(REGISTRY))}"
        )
    module, attr = REGISTRY[name].split(":")
    return getattr(importlib.import_module(module), attr)(**options)


def resolve(
    extractors: Sequence[str | Extractor], options: Mapping[str, Mapping] | None = None
) -> list[Extractor]:
    """Instances for names or instances, dependencies first (``rate`` pulls in ``asr``)."""
    options = dict(options or {})
    given = {e if isinstance(e, str) else e.name: e for e in extractors}
    ordered: dict[str, Extractor] = {}

    def add(name: str, chain: tuple[str, ...]) -> None:
        if name in ordered:
            return
        if name in chain:
            raise ValueError(
                f"extractor dependency cycle: {' -> '.join(chain + (name,))}"
            )
        item = given.get(name, name)
        if isinstance(item, str):
            opts = options.get(name, {})
            if not isinstance(opts, Mapping):
                raise TypeError(
                    f"options for {name!r} must be a dict, got {type(opts).__name__}"
                )
            item = make_extractor(name, **opts)
        elif name in options:
            raise ValueError(
                f"options given for {name!r}, which was passed as a built extractor"
            )
        for dep in item.requires:
            add(dep, chain + (name,))
        ordered[name] = item

    for name in given:
        add(name, ())
    unused = set(options) - set(ordered)
    if unused:
        raise ValueError(
            f"options given for extractors not requested: {', '.join(sorted(unused))}"
        )
    return list(ordered.values())


def extract(
    extractors: Sequence[str | Extractor], batch: AudioBatch, **options
) -> pl.DataFrame:
    """Run extractors over a batch: one row per item, their columns plus ``error`` (str | None: the
    audio or an extractor failed) and ``refused`` (str | None: "extractor: reason" for features an
    extractor declined, e.g. DNSMOS on samples outside [-1, 1]; their columns are null).

    ``options`` are per-extractor dicts, e.g. ``extract(["pitch"], batch, pitch={"fmin": 60})``.
    Columns of dependencies pulled in (``asr`` for ``rate``) are included.
    """
    if not extractors:
        raise ValueError("no extractors requested")
    chain = resolve(extractors, options)
    n = len(batch)
    errors: list[list[str]] = [[e] if e else [] for e in batch.errors]
    refusals: list[list[str]] = [[] for _ in range(n)]
    ok = [i for i in range(n) if batch.errors[i] is None]
    sub = select(batch, ok)
    columns: dict[str, list] = {}
    schema: dict[str, pl.DataType] = {}
    for ex in chain:
        inputs = {c: [columns[c][i] for i in ok] for c in columns}
        values, failed, declined = run_isolated(ex, sub, inputs)
        for j, message in failed.items():
            errors[ok[j]].append(f"{ex.name}: {message}")
        for j, message in declined.items():
            refusals[ok[j]].append(f"{ex.name}: {message}")
        for col, dtype in ex.schema.items():
            full = [None] * n
            for j, i in enumerate(ok):
                full[i] = values[col][j]
            columns[col], schema[col] = full, dtype
    frame = {c: pl.Series(c, columns[c], dtype=schema[c]) for c in columns}
    frame["error"] = pl.Series(
        "error", ["; ".join(e) if e else None for e in errors], dtype=pl.Utf8
    )
    frame["refused"] = pl.Series("refused", ["; ".join(r) if r else None for r in refusals], dtype=pl.Utf8)
    return pl.DataFrame(frame)


def join_messages(*messages: str | None) -> str | None:
    """The distinct non-empty messages joined with "; " in order (None when there are none)."""
    return "; ".join(dict.fromkeys(m for m in messages if m)) or None


def extract_concurrently(chains: Sequence[Sequence[str | Extractor]], batch: AudioBatch) -> pl.DataFrame:
    """``extract`` of independent chains at once, one thread each, as one frame (columns side by
    side; ``error`` and ``refused`` joined per item). For chains that release the GIL or wait on
    worker processes: ONNX models in one, pocketsphinx on a process pool in another. At most
    the compute budget's cores() chains run at once (one core: one after another)."""
    if len(chains) == 1:
        return extract(chains[0], batch)
    threads = thread_pool_size(items=len(chains))
    if threads == 1:
        frames = [extract(chain, batch) for chain in chains]
        return _side_by_side(frames)
    with ThreadPoolExecutor(threads - 1) as pool:
        others = [pool.submit(extract, chain, batch) for chain in chains[1:]]
        frames = [extract(chains[0], batch), *(f.result() for f in others)]
    return _side_by_side(frames)


def _side_by_side(frames: Sequence[pl.DataFrame]) -> pl.DataFrame:
    """Extract frames of the same items as one: columns side by side, error and refused joined."""
    joined = {name: [join_messages(*values) for values in zip(*(f[name].to_list() for f in frames))]
              for name in ("error", "refused")}
    columns = [f.drop("error", "refused") for f in frames]
    return pl.concat(columns, how="horizontal").with_columns(
        pl.Series("error", joined["error"], dtype=pl.Utf8), pl.Series("refused", joined["refused"], dtype=pl.Utf8)
    )


def run_isolated(
    ex: Extractor, batch: AudioBatch, inputs: Mapping[str, list]
) -> tuple[dict[str, list], dict[int, str], dict[int, str]]:
    """Run ex on the batch: (columns, {item: error}, {item: refusal}); if it raises, rerun item by
    item and report the items that fail."""
    try:
        values = ex.run(batch, inputs)
        return checked(ex, values, len(batch)), {}, refused(ex, values, len(batch))
    except Exception as exc:  # noqa: BLE001 - isolated below, re-raised text goes in the row
        if len(batch) <= 1:
            return {c: [None] * len(batch) for c in ex.schema}, {i: str(exc) for i in range(len(batch))}, {}
    values: dict[str, list] = {c: [] for c in ex.schema}
    failed: dict[int, str] = {}
    declined: dict[int, str] = {}
    for i in range(len(batch)):
        try:
            result = ex.run(select(batch, [i]), {c: [v[i]] for c, v in inputs.items()})
            one = checked(ex, result, 1)
            if 0 in (reasons := refused(ex, result, 1)):
                declined[i] = reasons[0]
        except Exception as exc:  # noqa: BLE001 - the message becomes the row's error
            failed[i] = str(exc) or type(exc).__name__
            one = {c: [None] for c in ex.schema}
        for c in ex.schema:
            values[c].append(one[c][0])
    return values, failed, declined


def checked(ex: Extractor, values: Mapping[str, list], n: int) -> dict[str, list]:
    """The extractor's columns, each verified to hold n values."""
    out = {}
    for col in ex.schema:
        if col not in values or len(values[col]) != n:
            got = "missing" if col not in values else f"{len(values[col])} values"
            raise RuntimeError(
                f"extractor {ex.name!r} column {col!r}: expected {n} values, {got}"
            )
        out[col] = list(values[col])
    return out


def refused(ex: Extractor, values: Mapping[str, list], n: int) -> dict[int, str]:
    """{item: reason} from the extractor's optional ROW_ERRORS list (checked to hold n entries)."""
    reasons = values.get(ROW_ERRORS)
    if reasons is None:
        return {}
    if len(reasons) != n:
        raise RuntimeError(
            f"extractor {ex.name!r} {ROW_ERRORS}: expected {n} values, {len(reasons)} values"
        )
    return {i: str(r) for i, r in enumerate(reasons) if r is not None}


def select(batch: AudioBatch, indices: Sequence[int]) -> AudioBatch:
    """A new AudioBatch holding the given items of batch (in that order)."""
    data, offsets = pack([batch[i] for i in indices])
    return AudioBatch(
        data, offsets, [batch.errors[i] for i in indices], batch.sample_rate
    )


def resample(batch: AudioBatch, rate: int) -> AudioBatch:
    """The batch at another sample rate (soxr HQ per item); the same batch when rates match."""
    if batch.sample_rate == rate:
        return batch
    items = [soxr.resample(x, batch.sample_rate, rate) if len(x) else x for x in batch]
    data, offsets = pack([np.asarray(x, dtype=np.float32) for x in items])
    return AudioBatch(data, offsets, list(batch.errors), rate)
