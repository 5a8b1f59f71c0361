"""The ScoringJob of `sdscore score consistency`: an embedding method, or an LALM judge (judge="openai")."""

from __future__ import annotations

import os
from typing import Any

from sdscore.llm_judges.scoring_jobs import judge_job
from sdscore.protocols.consistency.protocol import ConsistencyScorer, check_method
from sdscore.protocols.consistency.spec import SPEC
from sdscore.runtime.scorer import ScoringJob

JUDGES = ("embedding", "openai")


def scoring_job(**settings: Any) -> ScoringJob:
    """The job for ConsistencyScorer's settings, or with judge="openai" LalmConsistencyScorer's; checked up
    front (an LALM judge is built once and closed, so a usage error stops the run before any scoring)."""
    settings = {k: v for k, v in settings.items() if v is not None}
    judge = settings.pop("judge", "embedding")
    if judge not in JUDGES:
        raise ValueError(f"unknown consistency judge {judge!r}; expected one of {list(JUDGES)}")
    if judge == "openai":
        from sdscore.protocols.consistency.lalm_scorer import LalmConsistencyScorer

        return judge_job(SPEC, LalmConsistencyScorer, settings)
    for name in ("model_dir", "cache_dir"):
        if name in settings:
            settings[name] = os.path.abspath(settings[name])
    # the threshold in force goes into the run record, so --resume never mixes two defaults
    settings["threshold"] = check_method(settings.get("method", "pairwise"), settings.get("threshold"),
                                         settings.get("embedder", "ge2e"))
    return ScoringJob(SPEC, ConsistencyScorer, settings, volatile=("cache_dir",),
                      model_dir=settings.get("model_dir"))
