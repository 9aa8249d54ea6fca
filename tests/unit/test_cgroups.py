"""A cgroup CPU quota sizes pools as the cores a process may run on do: the kernel's files in their layout under a
test's directory (``root``), read as on a host."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ragscore_workers.cgroups import cpu_limit, own_cgroup
from ragscore_workers.limits import usable_cpus

CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _files(root: Path, files: dict[str, str | bytes]) -> Path:
    """``root`` holding ``files`` (path under root: content), as the kernel lays them out."""
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return root


def test_a_pods_cpu_limit_caps_the_cores_it_may_use(tmp_path: Path) -> None:
    """A Kubernetes pod with ``limits.cpu: 2`` on a 64-core node ran a process per core of the node, throttled to 2
    CPUs: cgroup v2's ``cpu.max`` of the container (the root of the cgroup mount it sees) was never read."""
    root = _files(tmp_path, {"proc/self/cgroup": "0::/\n", "sys/fs/cgroup/cpu.max": "200000 100000\n"})
    assert cpu_limit(root) == 2
    assert usable_cpus(root) == min(CORES, 2)
    (root / "sys/fs/cgroup/cpu.max").write_text("50000 100000\n")  # half a CPU: one process, never none
    assert (cpu_limit(root), usable_cpus(root)) == (1, 1)
    (root / "sys/fs/cgroup/cpu.max").write_text("150000 100000\n")  # 1.5 CPUs: rounded up
    assert cpu_limit(root) == 2
    (root / "sys/fs/cgroup/cpu.max").write_text("max 100000\n")  # no quota: the cores it may run on
    assert (cpu_limit(root), usable_cpus(root)) == (None, CORES)


def test_the_tightest_quota_of_its_own_cgroup_and_those_above_it_holds(tmp_path: Path) -> None:
    """A host's systemd service (``CPUQuota``) or slice: /proc/self/cgroup names the cgroup, nested in the mount."""
    service = "sys/fs/cgroup/system.slice/ragscore.service"
    root = _files(tmp_path, {"proc/self/cgroup": "0::/system.slice/ragscore.service\n",
                             f"{service}/cpu.max": "300000 100000\n",
                             "sys/fs/cgroup/system.slice/cpu.max": "max 100000\n"})  # fmt: skip
    assert cpu_limit(root) == 3
    (root / "sys/fs/cgroup/system.slice/cpu.max").write_text("100000 100000\n")  # the slice's is tighter
    assert cpu_limit(root) == 1
    (root / "proc/self/cgroup").write_text("0::/../..\n")  # outside this namespace's view: the mount's root alone
    assert own_cgroup("", root / "proc/self/cgroup") is None and cpu_limit(root) is None


def test_a_cgroup_v1_quota_caps_the_cores_too(tmp_path: Path) -> None:
    """cgroup v1's ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` (``-1``: no quota), in the container's mount root
    where /proc/self/cgroup names a path of the host's view (``/docker/abc``) or in the process's own cgroup."""
    cpu, own = "sys/fs/cgroup/cpu", "4:cpu,cpuacct:/docker/abc\n1:name=systemd:/docker/abc\n0::/\n"
    root = _files(tmp_path, {"proc/self/cgroup": own, f"{cpu}/cpu.cfs_quota_us": "400000\n",
                             f"{cpu}/cpu.cfs_period_us": "100000\n"})  # fmt: skip
    assert own_cgroup("cpu", root / "proc/self/cgroup") == Path("docker/abc")
    assert cpu_limit(root) == 4
    (root / cpu / "cpu.cfs_quota_us").write_text("-1\n")
    assert cpu_limit(root) is None
    _files(root, {f"{cpu}/docker/abc/cpu.cfs_quota_us": "100000\n", f"{cpu}/docker/abc/cpu.cfs_period_us": "100000\n"})
    assert cpu_limit(root) == 1


@pytest.mark.parametrize(
    "files",
    [{}, {"proc/self/cgroup": "garbage\n0::/\n", "sys/fs/cgroup/cpu.max": "two CPUs\n"},
     {"proc/self/cgroup": "0::/\n", "sys/fs/cgroup/cpu.max": "0 100000\n"},
     {"proc/self/cgroup": b"\xff\xfe0::/\n", "sys/fs/cgroup/cpu.max": "100000 0\n"}],
)  # fmt: skip
def test_no_cgroups_or_unreadable_files_leave_the_cores_as_they_are(
    tmp_path: Path, files: dict[str, str | bytes]
) -> None:
    """No cgroups (macOS), or files not in the kernel's format: no quota known, never an error at a worker's start."""
    _files(tmp_path, files)
    assert (cpu_limit(tmp_path), usable_cpus(tmp_path)) == (None, CORES)


def test_this_hosts_own_cgroup_files_are_read_without_error() -> None:
    """The real /proc and /sys (no test files): at least one core, never more than it may run on."""
    limit = cpu_limit()
    assert limit is None or limit >= 1, limit
    assert usable_cpus() == min(CORES, limit or CORES)
