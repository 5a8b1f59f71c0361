"""The reward model's own execution: the in-process batched RewardScorer (bucketing, prefetch,
device placement) and its exported backends (ONNX export, onnxruntime and TensorRT sessions)."""
