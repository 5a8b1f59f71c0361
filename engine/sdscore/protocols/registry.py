"""The protocol registry, the only protocol table: a protocol's name → its manifest spec, scoring
job, CLI options, evaluation, report view and demo stage.

`sdscore score`, `eval`, `report`, the demo and the synthetic corpus iterate these entries; a new
protocol is its own package plus one line here (or one `register(entry)` call). Entries name their
modules as text and import them on use, so building the CLI parser loads no model code.
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
    """One protocol, self-described. package: its package; it provides `evaluate_files(results,
    out_json, *, plot, seed)`, and, when the protocol has a scoring pass, `scoring_job(**settings)`
    and an `options` module with `add_score_options(parser)` and `score_settings(args)` (and, when the
    protocol has options of how its manifests are read, `read_options(args)`)."""

    name: str
    help: str
    package: str
    scores: bool
    plot_help: str = ""
    many_results: bool = False  # eval takes several results files (one per judge)
    #: "module:attribute" of the protocol's ManifestSpec, its package's spec.py (handed down to corpus/
    #: and the runtime; sdscore.read_manifest(path, name) finds it here)
    spec: str = ""
    #: what `eval NAME` reads (its RESULTS arguments), for its --help
    results_help: str = "results files"
    plot_folder: bool = False  # eval --plot is a folder of figures (else one PNG file)
    eval_seeded: bool = False  # the metrics resample (eval --seed is the bootstrap's)
    #: module with add_eval_options(parser) and eval_settings(args): `eval NAME`'s own options
    eval_options: str = ""
    #: top-level keys of every METRICS.json `eval NAME` writes (the report refuses other metrics)
    metrics_keys: tuple[str, ...] = ()
    #: the report view module (build(context), clip_paths(row); optional read_results, NO_AUDIO, MERGE_MANIFESTS)
    report_view: str = ""
    #: the demo stage module (run(stage_context)), None: the demo shows no stage for this protocol
    demo_stage: str | None = None

    def _attr(self, module: str, name: str) -> Callable[..., Any]:
        return getattr(importlib.import_module(f"{self.package}{module}"), name)

    def manifest_spec(self):
        """The protocol's ManifestSpec (imports polars: only when reading or scoring)."""
        module, _, attribute = self.spec.partition(":")
        return getattr(importlib.import_module(module), attribute)

    def report_view_module(self):
        return importlib.import_module(self.report_view or f"{self.package}.report_view")

    def demo_stage_module(self):
        return None if self.demo_stage is None else importlib.import_module(self.demo_stage)

    def eval_options_module(self):
        return importlib.import_module(self.eval_options) if self.eval_options else None

    def options(self):
        """The module holding add_score_options(parser) and score_settings(args)."""
        return importlib.import_module(f"{self.package}.options")

    def read_options(self, args) -> dict[str, Any]:
        """The manifest reader's keywords from a parsed `score` command line (the options module's
        read_options(args); {} when it has none): the runtime passes them to load_table and records them."""
        reader = getattr(self.options(), "read_options", None)
        return {} if reader is None else reader(args)

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
                      scores=True, plot_help="violin/box plot PNG of the rewards per subset",
                      spec="sdscore.protocols.reward.spec:SPEC", metrics_keys=("n", "subsets", "overall_micro"),
                      results_help="the results of `sdscore score reward` (or another tool's file with chosen_reward "
                                   "and rejected_reward columns; pair_id, subset, category, source optional): one file",
                      demo_stage="sdscore.protocols.reward.demo_stage"),
        ProtocolEntry("judge", "TRACE judging of response pairs", "sdscore.protocols.judge", scores=True,
                      plot_help="folder of confusion-matrix PNGs, one per judge", many_results=True,
                      spec="sdscore.protocols.judge.spec:SPEC", metrics_keys=("judges", "n_items"), plot_folder=True,
                      eval_seeded=True,
                      results_help="the results of `sdscore score judge`, one file per judge (a judge is named by its "
                                   "file's stem; item_id and overall_pred columns, the gold labels beside them)",
                      demo_stage="sdscore.protocols.judge.demo_stage"),
        ProtocolEntry("consistency", "SpeakerSleuth speaker consistency", "sdscore.protocols.consistency",
                      scores=True, plot_help="threshold-sweep PNG", many_results=True,
                      spec="sdscore.protocols.consistency.spec:SPEC",
                      metrics_keys=("detection", "localization", "discrimination"),
                      results_help="the results of `sdscore score consistency` (a task column; instance_id, "
                                   "turn_scores, flagged, choice ...): one or more files, each evaluated on its own",
                      demo_stage="sdscore.protocols.consistency.demo_stage"),
        ProtocolEntry("naturalness", "SPEARBench naturalness of answers (timing, intelligibility, prosody)",
                      "sdscore.protocols.naturalness", scores=True,
                      plot_help="folder for the dialect-profile, AVD-scatter and pitch figures", many_results=True,
                      spec="sdscore.protocols.naturalness.spec:SPEC", metrics_keys=("systems",), plot_folder=True,
                      eval_options="sdscore.protocols.naturalness.eval_options",
                      results_help="the results of `sdscore score naturalness`: one or more files (e.g. one per "
                                   "system), evaluated together; a system column names each row's system",
                      demo_stage="sdscore.protocols.naturalness.demo_stage"),
        ProtocolEntry("arena", "S2S-Arena ratings from a battles manifest, and an audio-LLM judge of its battles",
                      "sdscore.protocols.arena", scores=True,
                      spec="sdscore.protocols.arena.spec:SPEC", metrics_keys=("n_battles", "bradley_terry"),
                      eval_seeded=True,
                      eval_options="sdscore.protocols.arena.eval_options",
                      results_help="a battles manifest (battle_id, model_a, model_b, winner, optional judge) or the "
                                   "results of `sdscore score arena --judge openai`: one file",
                      demo_stage="sdscore.protocols.arena.demo_stage"),
    )
}


def register(entry: ProtocolEntry) -> ProtocolEntry:
    """Add a protocol (a package outside this table, e.g. a plugin or a test's): every command, the
    report and the demo then know it. A name already registered is refused."""
    if entry.name in PROTOCOLS:
        raise ValueError(f"protocol {entry.name!r} is already registered")
    if not entry.spec:
        raise ValueError(f"protocol {entry.name!r}: its entry names no manifest spec ('module:attribute')")
    PROTOCOLS[entry.name] = entry
    return entry


def unregister(name: str) -> None:
    """Remove a protocol that `register` added (tests restore the table with it)."""
    protocol(name)
    del PROTOCOLS[name]


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
    read_options: dict[str, Any] | None = None,
    **settings: Any,
) -> RunSummary:
    """Score a manifest with protocol `name` (settings: its Scorer's; read_options: the manifest
    reader's, e.g. lhotse_group_by) on the runtime; see score_manifest."""
    from sdscore.runtime.run import score_manifest

    job = protocol(name).scoring_job(**settings)
    return score_manifest(job, manifest, out, executor=executor, workers=workers, ray_address=ray_address,
                          resume=resume, window_rows=window_rows, executor_options=executor_options,
                          progress=progress, read_options=read_options)
