"""Host-side checks for the sandbox tests (which processes exist, as read from /proc) and programs they share."""

from __future__ import annotations

from pathlib import Path

from ragscore_workers.sandbox.local import DEFAULT_UID_BASE, DEFAULT_UID_SLOTS

#: In the command line of every slot helper (``python3 -I -S -c <_slot_helper.py's text>``).
HELPER_MARK = b"The slot helper:"

#: Starts children (each waits on a pipe, so all live at once) until the program is ``int(stdin)`` processes or a fork
#: is refused; prints how many processes it had at most, itself included, and the error of a refused fork.
FORK_UP_TO = (
    "import os, sys\n"
    "wanted = int(sys.stdin.read())\n"
    "r, w = os.pipe()\n"
    "have, error = 1, ''\n"
    "while have < wanted:\n"
    "    try:\n"
    "        if os.fork() == 0:\n"
    "            os.close(w)\n"
    "            os.read(r, 1)\n"
    "            os._exit(0)\n"
    "    except OSError as exc:\n"
    "        error = f'{type(exc).__name__}: {exc}'\n"
    "        break\n"
    "    have += 1\n"
    "print(have, error)\n"
)


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:  # the process exited while we looked
        return b""


def pids_running(*argv: str) -> list[int]:
    """Host pids whose command line is exactly ``argv``."""
    wanted = b"".join(arg.encode() + b"\0" for arg in argv)
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _read(p / "cmdline") == wanted]


def sandbox_uid_pids(zombies: bool = False, parent: int | None = None) -> list[int]:
    """Host pids running as a uid of the local backend's range (none once every sandbox has ended), but
    the idle slot helpers that start sandboxes (see :func:`slot_helpers`).

    Zombies are left out unless asked for: a sandbox orphaned by a killed worker is reaped by the host's
    init, in its own time. ``parent`` keeps only children of that pid (other processes' sandboxes, e.g.
    of workers still shutting down, are not this test's).
    """
    found = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        fields = dict(
            line.split(":", 1) for line in _read(p / "status").decode(errors="replace").splitlines() if ":" in line
        )
        if "Uid" not in fields or (not zombies and fields.get("State", "").strip().startswith("Z")):
            continue
        if parent is not None and int(fields.get("PPid", "0").strip() or 0) != parent:
            continue
        uid = int(fields["Uid"].split()[0])
        if DEFAULT_UID_BASE <= uid < DEFAULT_UID_BASE + DEFAULT_UID_SLOTS and not is_slot_helper(int(p.name)):
            found.append(int(p.name))
    return found


def status_fields(pid: int) -> dict[str, str]:
    """``/proc/<pid>/status`` as a dict (empty once the process has exited)."""
    text = _read(Path(f"/proc/{pid}/status")).decode(errors="replace")
    return {k: v.strip() for k, v in (line.split(":", 1) for line in text.splitlines() if ":" in line)}


def program_pids(parent: int) -> list[int]:
    """Host pids below ``parent`` running a sandboxed program (``main.py``, the local backend's) or a fork of one,
    zombies left out."""
    return [pid for pid in descendants(parent) if _read(Path(f"/proc/{pid}/cmdline")).endswith(b"main.py\0")
            and not status_fields(pid).get("State", "Z").startswith("Z")]  # fmt: skip


def descendants(pid: int) -> list[int]:
    """Host pids below ``pid`` (children, grandchildren, ...), as the host's /proc shows them now."""
    children: dict[int, list[int]] = {}
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            ppid = status_fields(int(p.name)).get("PPid")
            if ppid:
                children.setdefault(int(ppid), []).append(int(p.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def slot_helpers(worker: int) -> list[int]:
    """The sandbox slot helpers of process ``worker``: its children running ``_slot_helper.py``'s text."""
    return [pid for pid in descendants(worker) if status_fields(pid).get("PPid") == str(worker) and is_slot_helper(pid)]


def is_slot_helper(pid: int) -> bool:
    """Whether ``pid`` runs ``_slot_helper.py``'s text (False once it has exited: a listed pid may be gone)."""
    return HELPER_MARK in _read(Path(f"/proc/{pid}/cmdline"))
