"""arena (S2S-Arena): ratings, biases and judge agreement from a battles manifest, and an audio-LLM judge.

evaluate.py: `eval arena` (Elo, Bradley–Terry with CIs, position and length bias, per-judge
ratings, judge–human agreement); scorer.py: `score arena --judge openai`, a speech-model judge
run on the battles' audio in both orders (options.py, judge_prompt.py + prompts/);
judge_battles.py: its results read back as battles; answer_lengths.py: answer durations from audio.
"""

from sdscore.lazy_exports import lazy_exports

# imported on first use, so reading the protocol's CLI options loads no model code
__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    ".evaluate": ("evaluate_arena", "evaluate_files", "run_eval"),
    ".scorer": ("ArenaAudioJudgeScorer", "scoring_job"),
})
