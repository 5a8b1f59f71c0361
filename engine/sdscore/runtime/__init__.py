"""Generic execution for every protocol: a protocol's Scorer (a callable class in Ray Data's shape)
runs over a manifest streamed in windows, on an executor (local, processes, ray), into sharded,
resumable output with provenance. It imports no protocol, model or feature module; the reward
model's backends and export live in runtime/reward/."""
