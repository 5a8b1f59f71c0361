"""The consistency protocol's Scorer for an LALM judge (`sdscore score consistency --judge openai`).

It writes the same RESULTS columns as the embedding methods (method "lalm", model the judge's), so
`sdscore eval consistency` puts both kinds of run in one table; threshold and scores stay null.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import polars as pl

from sdscore.audio.checks import DEFAULT_MAX_AUDIO_SECONDS
from sdscore.corpus import CONSISTENCY_INSTANCES
from sdscore.llm_judges.audio_request import DEFAULT_AUDIO_RATE, DEFAULT_MAX_REQUEST_BYTES
from sdscore.llm_judges.client import DEFAULT_TIMEOUT_S, Price, judge_client
from sdscore.protocols.consistency.lalm_judge import LalmConsistencyJudge
from sdscore.protocols.consistency.protocol import RESULTS, candidate_problem, with_manifest_columns

LALM_METHOD = "lalm"


class LalmConsistencyScorer:
    """Settings: model, base_url (or SDSCORE_JUDGE_BASE_URL / OPENAI_BASE_URL), task, reference,
    text_context, per_turn, permutations, seed, prompt_file (LalmConsistencyJudge's); concurrency,
    cache_dir (replies, keyed by request content), timeout_s, prices; audio_rate (Hz the clips are sent
    at), max_request_bytes, max_audio_seconds (longer files fail their rows; 0: no cap)."""

    def __init__(self, model: str, base_url: str | None = None, *, task: str = "auto", reference: bool = True,
                 text_context: bool = False, per_turn: bool = False, permutations: str = "one", seed: int = 0,
                 prompt_file: str | os.PathLike | None = None, concurrency: int = 8,
                 cache_dir: str | os.PathLike | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
                 prices: Mapping[str, Price] | None = None, audio_rate: int = DEFAULT_AUDIO_RATE,
                 max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
                 max_audio_seconds: float = DEFAULT_MAX_AUDIO_SECONDS):
        client = judge_client(model, base_url, concurrency=concurrency, cache_dir=cache_dir, timeout_s=timeout_s,
                              prices=prices, json_mode=False)
        try:
            self.judge = LalmConsistencyJudge(
                client, task, reference=reference, text_context=text_context, per_turn=per_turn,
                permutations=permutations, seed=seed, prompt_file=None if prompt_file is None else str(prompt_file),
                audio_rate=audio_rate, max_request_bytes=max_request_bytes, max_audio_seconds=max_audio_seconds or None,
            )
        except Exception:
            client.close()
            raise
        self.model = model

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
