"""The ScoringJob of an `--judge openai` run, the same for every protocol's audio-LLM judge."""

from __future__ import annotations

import os
from typing import Any

from sdscore.corpus.schemas import ManifestSpec
from sdscore.llm_judges.client import base_url_from_env
from sdscore.runtime.scorer import ScoringJob

#: caches, parallelism and deadlines do not change what a reply says: a resumed run may differ in them
VOLATILE = ("cache_dir", "concurrency", "timeout_s")


def judge_job(spec: ManifestSpec, scorer: type, settings: dict[str, Any]) -> ScoringJob:
    """ScoringJob (of the protocol's manifest spec) of `scorer` (a judge Scorer with a close()) for `settings`, checked up front: paths
    made absolute (worker processes may start elsewhere), the endpoint filled in from the environment
    (it is part of what produced the verdicts, so the run record keeps it), and the scorer built once
    and closed, so a usage error stops the run before any row is asked."""
    settings = dict(settings)
    for name in ("cache_dir", "prompt_file"):
        if settings.get(name) is not None:
            settings[name] = os.path.abspath(settings[name])
    if settings.get("base_url") is None:
        settings["base_url"] = base_url_from_env()
    scorer(**settings).close()
    return ScoringJob(spec, scorer, settings, volatile=VOLATILE)
