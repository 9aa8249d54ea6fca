"""This process's cgroups, read from the kernel's files: which cgroup it is in (``/proc/self/cgroup``) and the CPU
quota set on it (``/sys/fs/cgroup``). A file missing or unreadable (no cgroups, as on macOS) tells nothing, never an
error: these are read as a worker starts."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

__all__ = ["PROC_CGROUP", "cpu_limit", "own_cgroup"]

#: Which cgroup this process is in, one line per hierarchy: ``0::/PATH`` (cgroup v2), ``4:cpu,cpuacct:/PATH`` (v1).
PROC_CGROUP = Path("/proc/self/cgroup")


def own_cgroup(controller: str, proc_cgroup: Path = PROC_CGROUP) -> PurePosixPath | None:
    """This process's cgroup below the mount of the hierarchy with ``controller`` (``""``: cgroup v2's), as
    ``proc_cgroup`` lists it (``.``: the mount's root); None where it lists none, or one outside this namespace's
    view (``/../..``), which is not under the mount."""
    for line in _read(proc_cgroup).splitlines():
        fields = line.split(":", 2)  # hierarchy id, controllers, path; a line not a cgroup's is skipped
        if len(fields) == 3 and controller in fields[1].split(","):
            path = PurePosixPath(fields[2].lstrip("/"))
            return None if ".." in path.parts else path
    return None


def cpu_limit(root: Path = Path("/")) -> int | None:
    """The CPUs a cgroup CPU quota leaves this process, rounded up (``150000 100000``: 2), or None where none is set:
    the tightest of cgroup v2's ``cpu.max`` and of v1's ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``, each in this
    process's own cgroup and every one above it (a Kubernetes ``limits.cpu`` or ``docker run --cpus``: the
    container's; systemd's ``CPUQuota``: a service's or a slice's). joblib's loky counts them so too
    (``_cpu_count_cgroup``, which reads each mount's root only); Python's ``os.process_cpu_count()`` does not.
    ``root``: where ``/proc`` and ``/sys`` are (a test's directory holding files in their layout)."""
    proc_cgroup, mount = root / PROC_CGROUP.relative_to("/"), root / "sys/fs/cgroup"
    v2 = [_cpus(*_read(group / "cpu.max").split()) for group in _lineage(mount, own_cgroup("", proc_cgroup))]
    v1 = [_cpus(_read(group / "cpu.cfs_quota_us").strip(), _read(group / "cpu.cfs_period_us").strip())
          for group in _lineage(mount / "cpu", own_cgroup("cpu", proc_cgroup))]  # fmt: skip
    return min((cpus for cpus in v2 + v1 if cpus is not None), default=None)


def _lineage(mount: Path, own: PurePosixPath | None) -> list[Path]:
    """The directories of cgroup ``own`` and of each above it, up to ``mount``'s root (that alone for None: a
    container's cgroup is the root of the mount it sees)."""
    own = own or PurePosixPath()
    return [mount / group for group in (own, *own.parents)]


def _cpus(*fields: str) -> int | None:
    """The CPUs of a quota and its period (µs), rounded up; None for no quota (v2's ``max``, v1's ``-1``) or for
    fields that are not two positive integers."""
    if len(fields) != 2 or not all(field.isdigit() for field in fields):
        return None
    quota, period = map(int, fields)
    return -(-quota // period) if quota and period else None


def _read(path: Path) -> str:
    """The text of a kernel file; empty where it is missing or unreadable."""
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return ""
