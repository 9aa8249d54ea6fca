"""What ragscore's Redis users must be allowed (Redis ACL users), and what one lacks of it.

A role (the broker's, the run store's) lists a command of each kind ragscore runs on each key and channel it
uses. :func:`lacking` queues them inside ``MULTI`` and discards them: nothing runs, and Redis (6 and later) checks
a command's ACL permissions when it is queued, so one it refuses says ``NOPERM`` at once. A user with the right
password and no permission on ragscore's keys failed late, with redis-py's raw ``NoPermissionError``."""

from __future__ import annotations

from dataclasses import dataclass

import redis

from .limits import CONTROL_QUEUE
from .schemas import Queue

__all__ = ["BROKER", "STORE", "Role", "lacking"]

#: A key no run has: the commands name it, and are discarded before they run.
_PROBE = "acl-probe"


@dataclass(frozen=True, kw_only=True)
class Role:
    """What one Redis user does for ragscore: ``commands`` (a command of each kind, on each key or channel) and
    ``rule``, the ACL rule that allows them (``{user}`` is the user's name)."""

    name: str
    commands: tuple[tuple[str, ...], ...]
    rule: str


def _queue_commands(queue: str) -> tuple[tuple[str, ...], ...]:
    """What kombu (send, receive) and status (depth, what is ahead of a run) run on one queue's list."""
    return (("LPUSH", queue, _PROBE), ("BRPOP", queue, "1"), ("LLEN", queue), ("LRANGE", queue, "0", "0"))


_QUEUES = (*(q.value for q in Queue if q is not Queue.DERIVED), CONTROL_QUEUE)

#: The broker's user: kombu's queues, bindings, unacked messages and broadcast channel (pidbox), and Celery's
#: results where the result backend is the broker's Redis (its default).
BROKER = Role(
    name="broker",
    commands=(
        *(c for q in _QUEUES for c in _queue_commands(q)),
        ("SADD", f"_kombu.binding.{CONTROL_QUEUE}", _PROBE),
        ("HSET", "unacked", _PROBE, "1"),
        ("ZADD", "unacked_index", "0", _PROBE),
        ("SET", "unacked_mutex", _PROBE, "NX"),
        ("SET", f"celery-task-meta-{_PROBE}", "1"),
        ("PUBLISH", "/{db}.celery.pidbox", _PROBE),
    ),
    rule="ACL SETUSER {user} ~* &* +@all",
)

#: The run store's user: its keys (``ragscore:``: runs, caches, rate limits), Lua scripts over them, and scans.
STORE = Role(
    name="run store",
    commands=(
        ("HSET", f"ragscore:run:{_PROBE}:meta", "state", "x"),
        ("HGET", f"ragscore:run:{_PROBE}:meta", "state"),
        ("ZADD", "ragscore:runs", "0", _PROBE),
        ("EVAL", "return 1", "1", f"ragscore:run:{_PROBE}:meta"),
        ("SCAN", "0", "MATCH", "ragscore:run:*:meta"),
    ),
    rule="ACL SETUSER {user} ~ragscore:* &* +@all",
)


def lacking(client: redis.Redis, roles: tuple[Role, ...]) -> str:
    """Why ``client``'s user may not do the work of ``roles`` (the commands it may not run, Redis's first refusal,
    the ACL rule it needs), or "" where it may. Each command is queued inside MULTI, then discarded: none runs."""
    db = client.connection_pool.connection_kwargs.get("db", 0)
    commands = [(role, tuple(a.format(db=db) for a in c)) for role in roles for c in role.commands]
    conn = client.connection_pool.get_connection()
    try:
        refused = _queued_and_discarded(conn, commands)
    finally:
        client.connection_pool.release(conn)
    if not refused:
        return ""
    user = client.connection_pool.connection_kwargs.get("username") or "default"
    names = [_shown(c) for _, c, _ in refused]
    listed = ", ".join(names[:_LISTED]) + (f" and {len(names) - _LISTED} more" if len(names) > _LISTED else "")
    role = refused[0][0]
    return (f"its ACL user {user!r} may not run {listed} ({refused[0][2]}): the {role.name} needs its keys and "
            f"channels, e.g. {role.rule.format(user=user)}")  # fmt: skip


#: Refused commands an error names before it says how many more.
_LISTED = 6


def _queued_and_discarded(
    conn: redis.connection.AbstractConnection, commands: list[tuple[Role, tuple[str, ...]]]
) -> list[tuple[Role, tuple[str, ...], str]]:
    """The ``commands`` (each with its role) that Redis refuses to queue on ``conn`` inside MULTI, and why."""
    conn.send_command("MULTI")
    try:
        conn.read_response()
    except redis.ResponseError as exc:  # never send the commands, which would then run
        return [(commands[0][0], ("MULTI",), str(exc))]
    conn.send_packed_command(conn.pack_commands([c for _, c in commands] + [("DISCARD",)]))
    refused = []
    for role, command in [*commands, (commands[0][0], ("DISCARD",))]:
        try:
            conn.read_response()
        except redis.ResponseError as exc:
            refused.append((role, command, str(exc)))
    if refused and refused[-1][1] == ("DISCARD",):  # still inside MULTI: never reused
        conn.disconnect()
    return refused


def _shown(command: tuple[str, ...]) -> str:
    """A refused command as an error names it: its name and its key or channel."""
    return command[0] if command[0] in ("EVAL", "SCAN", "MULTI", "DISCARD") else " ".join(command[:2])
