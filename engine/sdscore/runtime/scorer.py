"""The Scorer contract every protocol implements, in the shape Ray Data uses for batch inference.

A Scorer is a callable class: ``__init__(**settings)`` loads models and caches once;
``__call__(rows)`` takes a batch of manifest rows as a polars DataFrame (validated, with an
``error`` column set on rows the manifest reader could not accept) and returns exactly one result
row per input row, in order, with an ``error`` column (null when fine). A row whose input is bad
gets its error and null results; the other rows of the batch are scored. An optional ``close()``
releases what ``__init__`` opened. The runtime checks each batch's results with `check_results`.
A Scorer that scores a batch in several steps may take a ``progress`` keyword in ``__call__``
(``progress(stage, done, total)``, sdscore.progress) and call it after each step: the runtime then
counts rows done before the batch's results are back (runtime/row_progress.py).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import polars as pl

from sdscore.corpus.schemas import ManifestSpec
from sdscore.corpus.validate import ERROR_COLUMN
from sdscore.errors import SdscoreError
from sdscore.runtime.settings import Options, build, build_mode, plain, run_record

@runtime_checkable
class Scorer(Protocol):
    """One result row per manifest row, in order, with an `error` column (see the module doc)."""

    def __call__(self, rows: pl.DataFrame) -> pl.DataFrame: ...


@dataclass(frozen=True)
class ScoringJob:
    """What a run scores: the manifest spec, the Scorer class and its settings.

    protocol: the ManifestSpec rows are read and validated with (sdscore.corpus), which the
    protocol hands down (its package's spec.SPEC);
    scorer: the Scorer class (pickled by reference into worker processes and Ray actors);
    settings: its keyword arguments — all of them change scores unless named in `volatile`
    (caches, concurrency), and a resumed run must have the same ones; a Scorer whose settings are
    declared as a dataclass (its `settings_class`, see runtime/settings.py; or an Options, one class per
    value of a mode setting) is checked and recorded from that class (its volatile settings added to
    `volatile`, the mode recorded beside them);
    model_dir: the folder whose weights are hashed into the run record (None: no model files).
    """

    protocol: ManifestSpec
    scorer: type
    settings: Mapping[str, Any] = field(default_factory=dict)
    volatile: tuple[str, ...] = ()
    model_dir: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.protocol, ManifestSpec):
            raise TypeError(f"ScoringJob.protocol must be a ManifestSpec (a protocol package's spec.SPEC), "
                            f"not {self.protocol!r}")
        if self._declared_settings() is not None:  # checked by building them
            return
        try:
            inspect.signature(self.scorer).bind(**dict(self.settings))
        except TypeError as error:
            raise ValueError(f"{self.scorer_name}: bad settings ({error})") from None

    @property
    def settings_class(self) -> type | None:
        """The Scorer's settings dataclass, when it declares one (runtime/settings.py); for a Scorer with one
        class per value of its mode setting, this job's mode's."""
        declared = self._declared_settings()
        return None if declared is None else type(declared[1])

    def _declared_settings(self) -> tuple[dict[str, Any], Any] | None:
        """({its mode setting: this job's mode}, or {}; the settings object) of a Scorer that declares its
        settings_class — a dataclass, or an Options with one class per value of its mode setting (e.g.
        judge="rule" | "openai"), whose mode is then recorded beside the settings; None otherwise."""
        declared = getattr(self.scorer, "settings_class", None)
        if declared is None:
            return None
        if isinstance(declared, Options):
            given = dict(self.settings)
            mode = given.pop(declared.mode, declared.mode_default)
            return {declared.mode: mode}, build_mode(declared, mode, given)
        return {}, build(declared, **dict(self.settings))

    def create(self) -> Scorer:
        """A new Scorer with this job's settings (its models load here)."""
        return self.scorer(**dict(self.settings))

    @property
    def scorer_name(self) -> str:
        return f"{self.scorer.__module__}:{self.scorer.__qualname__}"

    def score_settings(self) -> dict[str, Any]:
        """The settings that change scores, defaults filled in (the resume check compares these)."""
        declared = self._declared_settings()
        if declared is not None:
            mode, settings = declared
            record = dict(sorted({**mode, **run_record(settings)}.items()))
            return {k: v for k, v in record.items() if k not in self.volatile}
        bound = inspect.signature(self.scorer).bind(**dict(self.settings))
        bound.apply_defaults()
        return {k: plain(v) for k, v in sorted(bound.arguments.items()) if k not in self.volatile}


def check_results(rows: pl.DataFrame, results: Any, scorer: str, first_row: int) -> pl.DataFrame:
    """The Scorer's results for rows, or an SdscoreError naming the scorer and the rows it broke on."""
    span = f"rows {first_row + 1}..{first_row + rows.height}"
    if not isinstance(results, pl.DataFrame):
        raise SdscoreError(f"{scorer} returned {type(results).__name__} for {span}, not a polars DataFrame")
    if results.height != rows.height:
        raise SdscoreError(f"{scorer} returned {results.height} result rows for {rows.height} input rows ({span})")
    if ERROR_COLUMN not in results.columns:
        raise SdscoreError(f"{scorer} returned no {ERROR_COLUMN!r} column for {span}")
    return results
