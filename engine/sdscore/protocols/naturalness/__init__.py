"""naturalness (SPEARBench): how an answer is timed, how intelligible and natural it sounds — dialogue
selection → score → evaluate.

`NaturalnessScorer` (scorer.py) is the Scorer of `sdscore score naturalness`; results.py defines
its columns; evaluation.py computes Table III per system from them.
"""

from sdscore.lazy_exports import lazy_exports

# imported on first use, so reading the protocol's CLI options loads no model code
__getattr__, __dir__, _ = lazy_exports(__name__, {
    ".results": ("HUMAN_SYSTEM", "RESULTS"),
    ".scorer": ("NaturalnessScorer", "scoring_job"),
})


def evaluate_files(results, out_json, *, plot=None, seed: int = 0, **options) -> dict:
    """`sdscore eval naturalness` (the registry's uniform signature; options: eval_options.py's, as
    evaluate.evaluate_files takes them)."""
    from sdscore.protocols.naturalness.evaluate import evaluate_files as run

    return run(results, out_json, plot=plot, seed=seed, **options)


def format_table(metrics: dict) -> str:
    """Table III of `evaluate_files`' metrics as plain text."""
    from sdscore.protocols.naturalness.evaluate import format_table as table

    return table(metrics)


__all__ = ["HUMAN_SYSTEM", "RESULTS", "NaturalnessScorer", "evaluate_files", "format_table", "scoring_job"]
