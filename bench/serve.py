"""Reward inside RL loops: the micro-batcher and `sdscore serve` vs scoring one request at a time.

(a) in process — N episodes requested one at a time, the way verl's and OpenRLHF's reward calls
    arrive. ours: every request submitted to a RewardBatcher by C concurrent callers (threads,
    like a rollout worker pool), each waiting for its own score. peer: the same requests as
    `scorer.score([episode])` one after another (what a reward function does without a batcher).
    A third column is the bound: `scorer.score(all N)` in one call — nothing per-request can beat
    it; the gap is what micro-batching leaves on the table.
(b) over HTTP on 127.0.0.1 — the same episodes as JSON with base64 WAV audio, sent by a bounded
    asyncio client (1, 8, 32, 128 concurrent connections, each sending its share of the requests
    in turn; no more than `--requests` in all and a time cap). ours: `sdscore serve`'s app (uvicorn,
    the batcher under it). peer: the server speech-RL recipes write (OpenRLHF's serve_rm shape):
    FastAPI, `async def` endpoint, decode the same JSON with the same code, then
    `scorer.score([episode])` per request. Both servers run as their own process with the same
    model and settings; the client runs in this one. Reported: requests/s, p50 and p99 latency,
    and the mean batch size ours formed.

The model is the shipped compact demo reward model (--model compact), or with --model omni-3b a
random bf16 thinker of Qwen2.5-Omni-3B's shape with a 460-token system prompt
(bench/reward_realistic.py), built from one seed in each process; on the CPU unless --device says cuda. Speech:
seeded flite/espeak-ng TTS clips (1–3 s questions and answers). Rounds are interleaved (ours, peer,
ours, ...); medians of 3 rounds (1 with --quick).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path

import numpy as np
from fastapi import (  # module level: FastAPI resolves the endpoint's annotations by name
    FastAPI,
    Request,
)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Row, parser, render_tts, report  # noqa: E402


def _episode_specs(paths: list[str], n: int, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    data = [base64.b64encode(Path(p).read_bytes()).decode() for p in paths]
    specs = []
    for i in range(n):
        q, a = rng.choice(len(paths), 2, replace=False)
        specs.append({"id": f"ep{i}", "turns": [
            {"role": "user", "text": "could you answer my question?", "audio": {"base64": data[q]}},
            {"role": "assistant", "text": f"here is answer {i}", "audio": {"base64": data[a]}}]})
    return specs


#: --device: where the reward model runs, here and in the servers this run starts
_DEVICE = "cpu"
#: --model: compact (the shipped demo model), omni-3b (a random bf16 thinker of Qwen2.5-Omni-3B's
#: shape, built in each process from the same seed: bench/reward_realistic.py) or omni-tiny (the
#: same code on the tiny test sizes, fp32: the CPU rehearsal of the omni-3b path)
_MODEL = "compact"
MODELS = ("compact", "omni-3b", "omni-tiny")


def _scorer():
    from sdscore.runtime.reward.episode_scorer import RewardScorer

    if _MODEL == "compact":
        from sdscore.models.pretrained import default_model_dir

        return RewardScorer.from_pretrained(default_model_dir(), device=_DEVICE)
    import torch

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
    from common import WORDS
    from reward_realistic import SYSTEM_PROMPT, bpe_tokenizer, omni_model
    from tiny_reward_models import OMNI_3B_SIZES, TINY_SIZES, build_tiny_sdiareward

    from sdscore.models.loading import load_reward_model

    with tempfile.TemporaryDirectory(prefix="sdscore-bench-serve-") as tmp:
        ckpt, base = build_tiny_sdiareward(Path(tmp) / "ckpt", Path(tmp) / "base")
        template_from = load_reward_model(ckpt, base=base)
    tokenizer = bpe_tokenizer([SYSTEM_PROMPT, " ".join(WORDS)] * 4)
    sizes, dtype = (OMNI_3B_SIZES, torch.bfloat16) if _MODEL == "omni-3b" else (TINY_SIZES, torch.float32)
    return RewardScorer(omni_model(sizes, tokenizer, template_from, _DEVICE, dtype), device=_DEVICE)


# ---- (a) in process --------------------------------------------------------------------------

def bench_in_process(specs: list[dict], rounds: int, callers: int) -> tuple[list[Row], dict]:
    from sdscore.rl.batcher import RewardBatcher
    from sdscore.rl.episode_specs import episode_from_spec

    scorer = _scorer()
    episodes = [episode_from_spec(s, 16000, s["id"]) for s in specs]
    batcher = RewardBatcher(scorer, max_batch=64, max_wait_ms=5)
    scorer.score(episodes[:8])  # warm-up

    def ours() -> list[float]:
        with ThreadPoolExecutor(callers) as pool:
            return list(pool.map(batcher.score, episodes))

    def peer() -> list[float]:
        return [float(scorer.score([e])[0]) for e in episodes]

    def bound() -> list[float]:
        return scorer.score(episodes).tolist()

    times: dict[str, list[float]] = {"ours": [], "peer": [], "bound": []}
    results = {}
    for _ in range(rounds):
        for name, fn in (("ours", ours), ("peer", peer), ("bound", bound)):
            t0 = time.perf_counter()
            results[name] = fn()
            times[name].append(time.perf_counter() - t0)
    batcher.close()
    diff = max(float(np.max(np.abs(np.array(results["ours"]) - np.array(results[k])))) for k in ("peer", "bound"))
    med = {k: len(episodes) / statistics.median(v) for k, v in times.items()}
    rows = [Row(f"(a) {callers} callers, one episode each: batcher vs scorer.score per call", "episodes/s",
                med["ours"], med["peer"]),
            Row("(a) batcher vs one scorer.score over all (the bound)", "episodes/s", med["ours"], med["bound"])]
    return rows, {"max_abs_diff": diff, "mean_batch": float(np.mean(batcher.stats.batch_sizes))}


# ---- (b) over HTTP ---------------------------------------------------------------------------

def _peer_app():
    """The per-request reward server speech-RL recipes write (OpenRLHF serve_rm's shape)."""
    from sdscore.rl.episode_specs import episode_from_spec

    scorer = _scorer()
    app = FastAPI()

    @app.post("/score")
    async def score(request: Request):  # noqa: ANN202 - recipe style: blocking model call in the loop
        body = await request.json()
        episodes = [episode_from_spec(s, 16000, f"episodes[{i}]") for i, s in enumerate(body["episodes"])]
        rewards, _, errors, _ = scorer.score_detailed(episodes)
        return {"scores": rewards.tolist(), "errors": errors}

    @app.get("/healthz")
    async def healthz():
        return {"status": "ok"}

    return app


def _serve(kind: str, port: int) -> None:
    import uvicorn

    if kind == "ours":
        from sdscore.rl.batcher import RewardBatcher
        from sdscore.rl.server import serve

        # as `sdscore serve` runs it: the model on the main thread, HTTP on another
        serve(RewardBatcher(_scorer(), max_batch=64, max_wait_ms=5, worker="caller"), port=port, log_level="warning")
        return
    uvicorn.run(_peer_app(), host="127.0.0.1", port=port, log_level="warning", access_log=False)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, kind: str):
        import httpx

        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--serve", kind,
                                      "--port", str(self.port), "--device", _DEVICE, "--model", _MODEL])
        deadline = time.time() + 180
        while time.time() < deadline:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                time.sleep(0.2)
        self.stop()
        raise SystemExit(f"the {kind} server did not start")

    def metrics(self) -> str:
        import httpx

        return httpx.get(f"{self.url}/metrics", timeout=10).text

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


async def _post_loop(host: str, port: int, bodies: list[bytes], queue: list[int], deadline: float,
                     latencies: list[float]) -> int:
    """One keep-alive HTTP/1.1 connection posting bodies from the shared queue; returns failures.

    A minimal client on asyncio streams: a Python HTTP client library would cost more CPU than the
    servers it measures (httpx's pool alone took a core at 128 connections), and the client shares
    the machine with them."""
    reader, writer = await asyncio.open_connection(host, port)
    failures = 0
    try:
        while queue and time.perf_counter() < deadline:
            body = bodies[queue.pop()]
            head = (f"POST /score HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(body)}\r\n\r\n").encode()
            t0 = time.perf_counter()
            writer.write(head + body)
            await writer.drain()
            status = await reader.readline()
            length = 0
            while (line := await reader.readline()) not in (b"\r\n", b""):
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            await reader.readexactly(length)
            latencies.append(time.perf_counter() - t0)
            failures += not status.startswith(b"HTTP/1.1 200")
    finally:
        writer.close()
    return failures


async def _load(url: str, bodies: list[bytes], clients: int, time_cap: float) -> dict:
    host, port = url.removeprefix("http://").split(":")
    latencies: list[float] = []
    queue = list(range(len(bodies)))
    start = time.perf_counter()
    failures = await asyncio.gather(*(_post_loop(host, int(port), bodies, queue, start + time_cap, latencies)
                                      for _ in range(clients)))
    seconds = time.perf_counter() - start
    lat = np.array(latencies) * 1000
    return {"rps": len(latencies) / seconds, "p50": float(np.percentile(lat, 50)),
            "p99": float(np.percentile(lat, 99)), "failures": sum(failures), "done": len(latencies)}


def _batches(metrics: str) -> tuple[float, float]:
    values = {}
    for line in metrics.splitlines():
        if line.startswith("sdscore_batch_size_sum") or line.startswith("sdscore_batch_size_count"):
            name, value = line.split()
            values[name] = float(value)
    return values.get("sdscore_batch_size_sum", 0.0), values.get("sdscore_batch_size_count", 0.0)


def bench_http(specs: list[dict], rounds: int, levels: list[int], time_cap: float) -> tuple[list[Row], list[str]]:
    bodies = [json.dumps({"episodes": [s]}).encode() for s in specs]
    servers = {"ours": Server("ours"), "peer": Server("peer")}
    results: dict[tuple[str, int], list[dict]] = {}
    batch_means: dict[int, list[float]] = {}
    try:
        for url in (s.url for s in servers.values()):  # warm both
            asyncio.run(_load(url, bodies[:8], 2, 60))
        for _ in range(rounds):
            for level in levels:
                for name, server in servers.items():
                    before = _batches(server.metrics()) if name == "ours" else None
                    results.setdefault((name, level), []).append(asyncio.run(_load(server.url, bodies, level,
                                                                                   time_cap)))
                    if before is not None:
                        after = _batches(server.metrics())
                        n = after[1] - before[1]
                        batch_means.setdefault(level, []).append((after[0] - before[0]) / n if n else 0.0)
    finally:
        for server in servers.values():
            server.stop()
    rows, lines = [], []
    for level in levels:
        med = {name: {k: statistics.median(r[k] for r in results[(name, level)]) for k in ("rps", "p50", "p99")}
               for name in servers}
        failures = sum(r["failures"] for name in servers for r in results[(name, level)])
        rows.append(Row(f"(b) HTTP, {level} concurrent clients: sdscore serve vs per-request server",
                        "requests/s", med["ours"]["rps"], med["peer"]["rps"]))
        lines.append(f"  {level:>3} clients: p50/p99 ms ours {med['ours']['p50']:.0f}/{med['ours']['p99']:.0f}, "
                     f"peer {med['peer']['p50']:.0f}/{med['peer']['p99']:.0f}; mean batch "
                     f"{statistics.median(batch_means[level]):.1f}; failed requests {failures}")
    return rows, lines


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--serve", choices=["ours", "peer"], help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--requests", type=int, default=None, help="episodes / requests per measurement (default 256)")
    p.add_argument("--device", default="cpu", help="where the reward model runs: cpu (default), cuda or cuda:N")
    p.add_argument("--model", choices=MODELS, default="compact",
                   help="compact (default), omni-3b (Qwen2.5-Omni-3B-shaped random bf16 thinker, a GPU's work) or "
                        "omni-tiny (the same path on tiny sizes)")
    args = p.parse_args()
    global _DEVICE, _MODEL
    _DEVICE, _MODEL = args.device, args.model
    if args.serve:
        _serve(args.serve, args.port)
        return
    n = args.requests or (96 if args.quick else 256)
    rounds = args.repeats or (1 if args.quick else 3)
    levels = [1, 32] if args.quick else [1, 8, 32, 128]
    with tempfile.TemporaryDirectory() as tmp:
        paths = render_tts(Path(tmp), 24, (4, 14), 4, "clip")
        specs = _episode_specs(paths, n)
    rows, info = bench_in_process(specs, rounds, callers=64)
    http_rows, lines = bench_http(specs, rounds, levels, time_cap=60 if args.quick else 300)
    if args.model != "compact":  # the rows name the model (the compact rows keep their earlier names)
        for row in rows + http_rows:
            row.name = f"{args.model}: {row.name}"
    model = {"compact": "compact demo model", "omni-3b": "Qwen2.5-Omni-3B-shaped random model (bf16)",
             "omni-tiny": "tiny Qwen2.5-Omni-layout model"}[args.model]
    report(f"reward serving: {n} two-turn spoken episodes, {model}, {args.device} ({os.cpu_count()} cores), "
           f"median of {rounds} interleaved round(s)", rows + http_rows, False,
           peers="(a) scorer.score([episode]) one request at a time in this process (the pools listed above); "
                 "(b) a FastAPI server scoring per request, in its own process with default pools")
    print(f"  (a) max |batched - per-call| score difference {info['max_abs_diff']:.2e}; "
          f"mean batch {info['mean_batch']:.1f}")
    for line in lines:
        print(line)
    if args.json:
        print(json.dumps({"rows": [{**asdict(r), "ratio": round(r.ratio, 4)} for r in rows + http_rows]}))


if __name__ == "__main__":
    main()
