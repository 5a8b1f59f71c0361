"""The consistency protocol's Scorer for an LALM judge (`sdscore score consistency --judge openai`).

It writes the same RESULTS columns as the embedding methods (method "lalm", model the judge's), so
`sdscore eval consistency` puts both kinds of run in one table; threshold and scores stay null.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from sdscore.corpus import CONSISTENCY_INSTANCES
from sdscore.llm_judges.client import judge_client
from sdscore.protocols.consistency.lalm_judge import LalmConsistencyJudge
from sdscore.protocols.consistency.protocol import RESULTS, candidate_problem, with_manifest_columns
from sdscore.protocols.consistency.settings import LalmConsistencySettings
from sdscore.runtime.settings import build

LALM_METHOD = "lalm"


class LalmConsistencyScorer:
    """Settings: LalmConsistencySettings (task, reference, text_context, per_turn, permutations, seed, and the
    endpoint, cache, parallelism, deadline and audio limits of AudioJudgeConfig)."""

    settings_class = LalmConsistencySettings

    def __init__(self, *args: Any, **settings: Any):
        """Positional settings fill model, base_url; see LalmConsistencySettings (checked: SettingsError)."""
        s = build(LalmConsistencySettings, *args, **settings)
        client = judge_client(s.model, s.base_url, concurrency=s.concurrency, cache_dir=s.cache_dir,
                              timeout_s=s.timeout_s, prices=s.prices, json_mode=False)
        try:
            self.judge = LalmConsistencyJudge(
                client, s.task, reference=s.reference, text_context=s.text_context, per_turn=s.per_turn,
                permutations=s.permutations, seed=s.seed,
                prompt_file=None if s.prompt_file is None else str(s.prompt_file), audio_rate=s.audio_rate,
                max_request_bytes=s.max_request_bytes, max_audio_seconds=s.max_audio_seconds or None,
            )
        except Exception:
            client.close()
            raise
        self.model = s.model

    def __call__(self, rows: pl.DataFrame) -> pl.DataFrame:
        frame = with_manifest_columns(rows)
        records = frame.select(*CONSISTENCY_INSTANCES.names(), "error").to_dicts()
        for record in records:
            if record["error"] is None and record["task"] == "discrimination":
                record["error"] = candidate_problem(record["candidate_scenarios"] or [], record["candidate_relevances"])
        judged = self.judge.score(records)
        out = []
        for row, result in zip(records, judged):
            out.append({
                "task": row["task"], "instance_id": row["instance_id"], "dataset": row["dataset"],
                "scenario": row["scenario"], "method": LALM_METHOD, "threshold": None, "true_turns": row["true_turns"],
                "model": self.model, "candidate_labels": row["candidate_scenarios"],
                "candidate_relevances": row["candidate_relevances"], **result,
            })
        return pl.DataFrame(out, schema=RESULTS)

    def close(self) -> None:
        self.judge.client.close()
