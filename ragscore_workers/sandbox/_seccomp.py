"""A seccomp filter for the local sandbox (``bwrap --seccomp FD``): what namespaces and rlimits leave open.

* ``socket()`` and ``socketpair()`` of any family but AF_UNIX and AF_NETLINK (interface lists of the sandbox's
  own network namespace: ``if_nameindex``) fail with EAFNOSUPPORT (the kernel makes a family's sockets, loading
  its module, before it asks the family for a pair, and TIPC makes one). A network namespace does not isolate
  AF_VSOCK: on a VM a program could reach the hypervisor's vsock services. AF_INET/AF_INET6 reach only the
  sandbox's own loopback, yet TCP buffer memory is one pool for the whole host: an audit's 4 processes pinned
  1.4 GB of it with connections they never read, and past the pool's hard limit every TCP socket of the host
  stalls (the worker's broker connection too).
* ``shmget`` (System V shared memory), ``semget``, ``msgget`` (semaphore arrays, message queues),
  ``memfd_create`` and ``memfd_secret`` fail with EPERM: kernel memory that no rlimit counts once unmapped (an
  audit held 2 GiB of shm segments, ~1 GiB of memfds, 512 MiB of secret memory in one process, 1.9 GB of
  semaphores and 2 GiB in one message queue under ``memory_mb`` 256).
* ``vmsplice`` fails with EPERM: it lends a pipe the program's own pages, and one byte of a transparent huge
  page keeps all 2 MiB of it once unmapped (an audit's one process pinned 6.3 GiB in 30 s under ``memory_mb`` 256;
  the pipe quota allows 16384 pages a run).
* ``io_uring_setup`` fails with EPERM: io_uring's own socket and file operations would bypass this filter.
  ``io_setup`` (Linux AIO) too: its events come from one pool for the whole host (``fs.aio-max-nr``), which an
  audit's one program held whole, so that no other process of the host could set up AIO while it ran.
* ``add_key``, ``request_key`` and ``keyctl`` fail with EPERM: kernel keyrings are not namespaced and the
  session keyring is inherited, so a program could read the keys of the worker's session keyring (an audit read
  one) and link keys of its own into it that outlive the run and reach the next runs; ``request_key`` can also
  make the host's root run ``/sbin/request-key`` (DNS lookups for the ``dns_resolver`` type).
* ``userfaultfd``, ``bpf`` and ``perf_event_open`` fail with EPERM: no program here needs them, and each is kernel
  attack surface that only host sysctls would limit otherwise, and not by default (``userfaultfd`` with
  UFFD_USER_MODE_ONLY is open to every user since Linux 5.11, ``kernel.perf_event_paranoid`` 2 lets one watch
  one's own process, ``kernel.unprivileged_bpf_disabled`` is 0 on some hosts). userfaultfd lets a program stall
  the kernel in the middle of a copy from its memory, the usual way to win a kernel race.
* another syscall ABI (i386 or x32 calls on x86_64) fails with ENOSYS: its numbers are not the ones checked.

Everything else is allowed (the namespaces, rlimits and read-only mounts do the rest). The program is classic
BPF, built here for x86_64 and aarch64; elsewhere :func:`sandbox_filter` is None and no filter is installed.
"""

from __future__ import annotations

import errno
import platform
import socket
import struct

__all__ = ["ALLOWED_FAMILIES", "AUDIT_ARCH", "FAMILY_CHECKED", "REFUSED", "sandbox_filter"]

# BPF opcodes (linux/filter.h) and seccomp return values (linux/seccomp.h).
_LD_W_ABS, _JEQ_K, _JGE_K, _RET_K = 0x20, 0x15, 0x35, 0x06
_ALLOW, _ERRNO = 0x7FFF0000, 0x00050000
# struct seccomp_data: nr at 0, arch at 4, args[0] at 16 (its low 32 bits on a little-endian host).
_NR, _ARCH, _ARG0 = 0, 4, 16
#: Syscalls of the x32 ABI carry this bit in their number on x86_64.
_X32_BIT = 0x40000000

#: machine -> its AUDIT_ARCH (linux/audit.h); the syscall numbers below are (x86_64, aarch64), in this order.
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
#: Syscalls whose first argument is a socket family.
FAMILY_CHECKED = {"socket": (41, 198), "socketpair": (53, 199)}
#: Syscalls refused with EPERM.
REFUSED = {
    "shmget": (29, 194),
    "semget": (64, 190),
    "msgget": (68, 186),
    "memfd_create": (319, 279),
    "memfd_secret": (447, 447),
    "vmsplice": (278, 75),
    "io_uring_setup": (425, 425),
    "io_setup": (206, 0),
    "add_key": (248, 217),
    "request_key": (249, 218),
    "keyctl": (250, 219),
    "userfaultfd": (323, 282),
    "bpf": (321, 280),
    "perf_event_open": (298, 241),
}
#: Socket families a program may open (multiprocessing and asyncio need AF_UNIX).
ALLOWED_FAMILIES = (int(socket.AF_UNIX), int(socket.AF_NETLINK))

# One instruction: (opcode, k, label if true, label if false); a label is where a jump goes (None: next).
_Insn = tuple[int, int, "str | None", "str | None"]


def _assemble(program: list[_Insn | str]) -> bytes:
    """Labels (plain strings) mark positions; jumps to them (forward only) become BPF's offsets from the next
    instruction."""
    at: dict[str, int] = {}
    insns: list[_Insn] = []
    for item in program:
        if isinstance(item, str):
            at[item] = len(insns)
        else:
            insns.append(item)

    def offset(pc: int, label: str | None) -> int:
        return 0 if label is None else at[label] - pc - 1

    return b"".join(
        struct.pack("=HBBI", code, offset(pc, jt), offset(pc, jf), k) for pc, (code, k, jt, jf) in enumerate(insns)
    )


def sandbox_filter(machine: str | None = None) -> bytes | None:
    """The compiled filter for ``machine`` (default: this host's), or None where it is not built."""
    machine = machine or platform.machine()
    if machine not in AUDIT_ARCH:
        return None
    column = list(AUDIT_ARCH).index(machine)
    program: list[_Insn | str] = [
        (_LD_W_ABS, _ARCH, None, None),
        (_JEQ_K, AUDIT_ARCH[machine], None, "enosys"),
        (_LD_W_ABS, _NR, None, None),
        (_JGE_K, _X32_BIT, "enosys", None),
        *((_JEQ_K, nrs[column], "family", None) for nrs in FAMILY_CHECKED.values()),
        *((_JEQ_K, nrs[column], "eperm", None) for nrs in REFUSED.values()),
        (_RET_K, _ALLOW, None, None),
        "family",
        (_LD_W_ABS, _ARG0, None, None),
        *((_JEQ_K, family, "family allowed", None) for family in ALLOWED_FAMILIES),
        (_RET_K, _ERRNO | errno.EAFNOSUPPORT, None, None),
        "family allowed",  # BPF jumps only forward: its own allow
        (_RET_K, _ALLOW, None, None),
        "eperm",
        (_RET_K, _ERRNO | errno.EPERM, None, None),
        "enosys",
        (_RET_K, _ERRNO | errno.ENOSYS, None, None),
    ]
    return _assemble(program)
