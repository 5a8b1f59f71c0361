"""The values the reward protocol's settings may take, light enough for `sdscore --help`."""

#: what runs the reward model: torch (auto), or an export written by `sdscore export` under MODEL/export/
BACKENDS = ("auto", "torch", "onnxruntime", "tensorrt")
#: the orders the audio-LLM judge asks each pair in: both (chosen first, then rejected first), or one
#: order drawn per pair from (seed, pair_id)
ORDERS = ("both", "shown")
