"""The protocol registry: a protocol's name → its manifest spec, scoring job, CLI options and evaluation.

`sdscore score` and `sdscore eval` are generic over these entries; a new protocol is its own
package plus one line here. Entries name their modules as text and import them on use, so building
the CLI parser loads no model code.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the runtime (torch, polars) is imported when a protocol scores, not to build the CLI
    from sdscore.progress import Progress
    from sdscore.runtime.run import RunSummary


@dataclass(frozen=True)
class ProtocolEntry:
    """One protocol. package: its package; it provides `evaluate_files(results, out_json, *, plot,
    seed)`, and, when the protocol has a scoring pass, `scoring_job(**settings)` and an `options`
    module with `add_score_options(parser)` and `score_settings(args)`."""

    name: str
    help: str
    package: str
    scores: bool
    plot_help: str = ""
    many_results: bool = False  # eval takes several results files (one per judge)

    def _attr(self, module: str, name: str) -> Callable[..., Any]:
        return getattr(importlib.import_module(f"{self.package}{module}"), name)

    def options(self):
        """The module holding add_score_options(parser) and score_settings(args)."""
        return importlib.import_module(f"{self.package}.options")

    def scoring_job(self, **settings: Any):
        if not self.scores:
            raise ValueError(f"protocol {self.name!r} has no scoring pass (its manifest is evaluated as it is)")
        return self._attr("", "scoring_job")(**settings)

    def evaluate_files(self, results: list[Path], out_json: str | os.PathLike, *, plot=None, seed: int = 0,
                       **options: Any) -> dict:
        """options: the protocol's own evaluation choices (arena: judge, pool_judges)."""
        if not self.many_results and len(results) > 1:
            raise ValueError(f"eval {self.name} takes one results file, got {len(results)}")
        return self._attr("", "evaluate_files")(results, out_json, plot=plot, seed=seed, **options)

    def format_table(self, metrics: dict) -> str | None:
        """The paper's table of `metrics` as plain text, when the package provides `format_table`."""
        fn = getattr(importlib.import_module(self.package), "format_table", None)
        return None if fn is None else fn(metrics)


PROTOCOLS: dict[str, ProtocolEntry] = {
    entry.name: entry
    for entry in (
        ProtocolEntry("reward", "SDiaReward reward-model scoring of preference pairs", "sdscore.protocols.reward",
                      scores=True, plot_help="violin/box plot PNG of the rewards per subset"),
        ProtocolEntry("judge", "TRACE judging of response pairs", "sdscore.protocols.judge", scores=True,
                      plot_help="folder of confusion-matrix PNGs, one per judge", many_results=True),
        ProtocolEntry("consistency", "SpeakerSleuth speaker consistency", "sdscore.protocols.consistency",
                      scores=True, plot_help="threshold-sweep PNG", many_results=True),
        ProtocolEntry("naturalness", "SPEARBench naturalness of answers (timing, intelligibility, prosody)",
                      "sdscore.protocols.naturalness", scores=True,
                      plot_help="folder for the dialect-profile, AVD-scatter and pitch figures", many_results=True),
        ProtocolEntry("arena", "S2S-Arena ratings from a battles manifest, and an audio-LLM judge of its battles",
                      "sdscore.protocols.arena", scores=True),
    )
}


def protocol(name: str) -> ProtocolEntry:
    """The registry entry of `name` (ValueError naming the known protocols otherwise)."""
    if name not in PROTOCOLS:
        raise ValueError(f"unknown protocol {name!r}; expected one of {', '.join(PROTOCOLS)}")
    return PROTOCOLS[name]


def score(
    name: str,
    manifest: str | os.PathLike,
    out: str | os.PathLike,
    *,
    executor: str | None = None,
    workers: int = 1,
    ray_address: str | None = None,
    resume: bool = False,
    window_rows: int | None = None,
    executor_options: dict | None = None,
    progress: Progress | None = None,
    **settings: Any,
) -> RunSummary:
    """Score a manifest with protocol `name` (settings: its Scorer's) on the runtime; see score_manifest."""
    from sdscore.runtime.run import score_manifest

    job = protocol(name).scoring_job(**settings)
    return score_manifest(job, manifest, out, executor=executor, workers=workers, ray_address=ray_address,
                          resume=resume, window_rows=window_rows, executor_options=executor_options,
                          progress=progress)
