"""S2S-Arena-style battles drawn from a known Bradley-Terry model with position and length biases.

For a battle of A (first position) against B on a domain, with response lengths L_A and L_B:
P(A wins | decisive) = sigmoid(theta_A + delta_A,domain - theta_B - delta_B,domain
                               + POSITION_BIAS + LENGTH_BIAS * ln(L_A / L_B)).
A battle is a tie with probability TIE_P and "tie (bothbad)" with BOTHBAD_P, independently.
A share of prompts is judged again with the two responses (and lengths) in swapped positions.
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl

from sdscore.corpus.schemas import BATTLES

DOMAINS = ("education", "social companionship", "entertainment", "medical consultation")
#: name -> (strength theta in log-odds, median response length in seconds)
SYSTEMS: dict[str, tuple[float, float]] = {
    "cascade-llm-tts": (0.8, 16.0),
    "realtime-duplex": (0.5, 12.0),
    "speech-token-e2e": (0.1, 11.0),
    "speech-embed-e2e": (0.0, 13.0),
    "mini-omni": (-0.5, 8.0),
    "robotic-baseline": (-0.9, 6.0),
}
#: Per-domain strength offsets (log-odds); systems and domains not listed get 0.
DOMAIN_OFFSETS: dict[str, dict[str, float]] = {
    "cascade-llm-tts": {"education": 0.3, "medical consultation": 0.3, "entertainment": -0.4},
    "realtime-duplex": {"social companionship": 0.3},
    "speech-token-e2e": {"entertainment": 0.3},
}
POSITION_BIAS = 0.25
LENGTH_BIAS = 0.8
LENGTH_SIGMA = 0.3
TIE_P = 0.06
BOTHBAD_P = 0.03
SWAP_SHARE = 0.3
JUDGE = "human"


def _strength(system: str, domain: str) -> float:
    """Log-odds strength of a system on a domain."""
    return SYSTEMS[system][0] + DOMAIN_OFFSETS.get(system, {}).get(domain, 0.0)


def p_first_wins(a: str, b: str, domain: str, length_a: float, length_b: float) -> float:
    """P(the first-position system wins | the battle is decisive) under the generating model."""
    z = _strength(a, domain) - _strength(b, domain) + POSITION_BIAS + LENGTH_BIAS * math.log(length_a / length_b)
    return 1.0 / (1.0 + math.exp(-z))


def effective_strengths() -> dict[str, float]:
    """Strengths an order- and length-blind Bradley-Terry fit should recover (up to a shift).

    theta + the mean domain offset (domains are uniform) + LENGTH_BIAS * E[ln length]; the
    length term makes systems with longer answers look stronger, as in S2S-Arena.
    """
    return {
        s: round(theta + sum(DOMAIN_OFFSETS.get(s, {}).get(d, 0.0) for d in DOMAINS) / len(DOMAINS)
                 + LENGTH_BIAS * math.log(median_length), 4)
        for s, (theta, median_length) in SYSTEMS.items()
    }


def build_battles(rng: np.random.Generator, n_prompts: int) -> tuple[pl.DataFrame, dict]:
    """The BATTLES frame and the model's true parameters."""
    names = list(SYSTEMS)
    rows = []
    for p in range(n_prompts):
        domain = DOMAINS[int(rng.integers(len(DOMAINS)))]
        a, b = (names[int(i)] for i in rng.choice(len(names), 2, replace=False))
        la, lb = (round(SYSTEMS[s][1] * float(np.exp(rng.normal(0.0, LENGTH_SIGMA))), 2) for s in (a, b))
        orders = [(a, b, la, lb)] + ([(b, a, lb, la)] if rng.random() < SWAP_SHARE else [])
        for first, second, l1, l2 in orders:
            u = rng.random()
            if u < TIE_P:
                winner = "tie"
            elif u < TIE_P + BOTHBAD_P:
                winner = "tie (bothbad)"
            else:
                winner = "model_a" if rng.random() < p_first_wins(first, second, domain, l1, l2) else "model_b"
            rows.append({
                "battle_id": f"battle-{len(rows):06d}", "model_a": first, "model_b": second,
                "winner": winner, "domain": domain, "judge": JUDGE, "prompt_id": f"prompt-{p:05d}",
                "length_a": l1, "length_b": l2,
            })
    frame = pl.DataFrame(rows, schema=BATTLES)
    mean_theta = sum(t for t, _ in SYSTEMS.values()) / len(SYSTEMS)
    truth = {
        "effective_theta": effective_strengths(),
        "model": "P(model_a wins | decisive) = sigmoid(theta_a + offset_a[domain] - theta_b - "
                 "offset_b[domain] + position_bias + length_bias * ln(length_a / length_b))",
        "theta": {s: t for s, (t, _) in SYSTEMS.items()},
        "elo": {s: round(1000 + 400 / math.log(10) * (t - mean_theta), 1) for s, (t, _) in SYSTEMS.items()},
        "median_length_s": {s: m for s, (_, m) in SYSTEMS.items()},
        "length_sigma": LENGTH_SIGMA,
        "domain_offsets": DOMAIN_OFFSETS,
        "position_bias": POSITION_BIAS,
        "length_bias": LENGTH_BIAS,
        "tie_p": TIE_P,
        "bothbad_p": BOTHBAD_P,
        "swap_share": SWAP_SHARE,
        "prompts": n_prompts,
    }
    return frame, truth
