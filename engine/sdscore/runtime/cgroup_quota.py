"""The CPU quota of this process's cgroup: the cores a container or a systemd slice lets it use.

A container with `--cpus 2` (Docker, Kubernetes CPU limits, systemd's CPUQuota=) still sees every
core of the node in its CPU affinity; what limits it is the CFS bandwidth quota of its cgroup:
`quota` microseconds of CPU time per `period`. Threads beyond quota/period cores only get
throttled. `quota_cores()` is ceil(quota / period) of the tightest quota on the process's cgroup
and its ancestors, read from

- cgroup v2: `<root>/<path>/cpu.max`, "QUOTA PERIOD" or "max PERIOD" (no limit);
- cgroup v1: `<root>/<cpu controller>/<path>/cpu.cfs_quota_us` (-1: no limit) and `cpu.cfs_period_us`;

where `<path>` is the process's cgroup in /proc/self/cgroup. The folders are looked up from the
process's cgroup up to the hierarchy's root, and missing ones skipped: inside a container the
hierarchy mounted at /sys/fs/cgroup is often the container's own cgroup, which /proc/self/cgroup
names by its path on the host. No quota, no cgroup file system (not Linux): None. A quota file
that cannot be read or parsed is ignored with a warning naming it; it never stops a run.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path

#: where the cgroup hierarchies are mounted
CGROUP_ROOT = Path("/sys/fs/cgroup")
#: the process's cgroup in each hierarchy: "ID:CONTROLLERS:PATH" lines
MEMBERSHIP = Path("/proc/self/cgroup")


class QuotaFileError(ValueError):
    """A cgroup CPU quota file holds something other than the kernel's format."""


def _ignored(path: Path, problem: str) -> None:
    warnings.warn(f"sdscore: ignoring the CPU quota in {path}: {problem}", RuntimeWarning, stacklevel=3)


def _read(path: Path) -> str | None:
    """The file's text; None when it is absent. Other OS errors propagate."""
    try:
        return path.read_text(encoding="ascii")
    except (FileNotFoundError, NotADirectoryError):
        return None


def _whole(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise QuotaFileError(f"{what} {text!r} is not a whole number") from None


def _limit(quota: int, period: int) -> int | None:
    """ceil(quota / period) cores, at least 1; None for a negative quota (v1's -1: no limit)."""
    if period <= 0:
        raise QuotaFileError(f"the period {period} is not positive")
    if quota < 0:
        return None
    if quota == 0:
        raise QuotaFileError("the quota is 0")
    return max(1, math.ceil(quota / period))


def parse_cpu_max(text: str) -> int | None:
    """Cores of a v2 cpu.max ("QUOTA PERIOD", "max PERIOD" or "max"); None for no limit."""
    fields = text.split()
    if not fields or len(fields) > 2:
        raise QuotaFileError(f"expected 'QUOTA PERIOD', got {text.strip()!r}")
    if fields[0] == "max":
        if len(fields) == 2:
            _whole(fields[1], "the period")
        return None
    if len(fields) != 2:
        raise QuotaFileError(f"expected 'QUOTA PERIOD', got {text.strip()!r}")
    quota = _whole(fields[0], "the quota")
    if quota < 0:
        raise QuotaFileError(f"the quota {quota} is negative")
    return _limit(quota, _whole(fields[1], "the period"))


def _v1_limit(folder: Path) -> int | None:
    quota_text = _read(folder / "cpu.cfs_quota_us")
    if quota_text is None:
        return None
    quota = _whole(quota_text.strip(), "the quota")
    if quota < 0:
        return None
    period_text = _read(folder / "cpu.cfs_period_us")
    if period_text is None:
        raise QuotaFileError(f"a quota of {quota} but no {folder / 'cpu.cfs_period_us'}")
    return _limit(quota, _whole(period_text.strip(), "the period"))


def _v2_limit(folder: Path) -> int | None:
    text = _read(folder / "cpu.max")
    return None if text is None else parse_cpu_max(text)


def _up_from(mount: Path, path: str) -> list[Path]:
    """mount/path and each folder above it, up to mount itself."""
    parts = [p for p in path.split("/") if p and p not in (".", "..")]
    return [mount.joinpath(*parts[:i]) for i in range(len(parts), -1, -1)]


def _hierarchies(root: Path, membership: Path) -> list[tuple[str, Path, str]]:
    """(version, mount, cgroup path) of each hierarchy with the cpu controller this process is in."""
    text = _read(membership)
    if text is None:
        return []
    found = []
    for line in text.splitlines():
        fields = line.split(":", 2)
        if len(fields) != 3:
            continue
        number, controllers, path = fields
        if number == "0" and controllers == "":
            found.append(("v2", root, path))
        elif "cpu" in controllers.split(","):
            for mount in (root / controllers, root / "cpu"):
                if mount.is_dir():
                    found.append(("v1", mount, path))
                    break
    return found


def quota_cores(root: Path | str = CGROUP_ROOT, membership: Path | str = MEMBERSHIP) -> int | None:
    """The cores the tightest CPU quota on this process's cgroup or its ancestors allows
    (ceil(quota / period), at least 1); None when there is no quota or none can be read."""
    limits = []
    try:
        hierarchies = _hierarchies(Path(root), Path(membership))
    except (OSError, UnicodeDecodeError) as problem:
        warnings.warn(f"sdscore: no CPU quota read: cannot read {membership} ({problem})", RuntimeWarning, stacklevel=2)
        return None
    for version, mount, path in hierarchies:
        read = _v2_limit if version == "v2" else _v1_limit
        for folder in _up_from(mount, path):
            try:
                limit = read(folder)
            except (QuotaFileError, OSError, UnicodeDecodeError) as problem:
                _ignored(folder / ("cpu.max" if version == "v2" else "cpu.cfs_quota_us"), str(problem))
                continue
            if limit is not None:
                limits.append(limit)
    return min(limits) if limits else None
