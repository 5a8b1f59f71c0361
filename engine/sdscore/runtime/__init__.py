"""Execution of reward models: backends (torch, onnxruntime, TensorRT), ONNX / TensorRT export,
length bucketing, prefetch, device placement, Ray Data execution and resumable sharded output."""
