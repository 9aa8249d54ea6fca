"""What ragscore's Redis users must be allowed (Redis ACL users), and what one lacks of it.

A role (the broker's, the run store's, each in full or for reading alone) lists a command of each kind ragscore
runs on each key and channel it uses. :func:`lacking` queues them inside ``MULTI`` and discards them: nothing runs,
and Redis (6 and later) checks a command's ACL permissions when it is queued, so one it refuses says ``NOPERM`` at
once. A user with the right password and no permission on ragscore's keys failed late, with redis-py's raw
``NoPermissionError``. Only ``NOPERM`` refuses a user: a server that will not queue a command for another reason (a
renamed command, another arity on a Redis-compatible server) cannot tell, and the user is left to the command, as
before the check. A user that may not open ``MULTI`` (one that may only read) is refused by a role that writes
(ragscore's writes and kombu's use ``MULTI``), and left to the command by a reading one."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase

import redis

from .alive import ALIVE_INDEX, ALIVE_PREFIX
from .counts import agree
from .limits import CONTROL_QUEUE, PRIORITY_SEP
from .stopping import STOPPING_INDEX, STOPPING_PREFIX

__all__ = [
    "ASKS_WORKERS",
    "BACKEND",
    "BROKER",
    "BROKER_READS",
    "CONTROL_BROADCAST",
    "CONTROL_REPLIES",
    "STORE",
    "STORE_READS",
    "WORKER_CONTROL",
    "WORKER_STORE",
    "Role",
    "broker_role",
    "lacking",
]

#: A key no run has: the commands name it, and are discarded before they run.
_PROBE = "acl-probe"

#: kombu's keys of the messages delivered and not yet acknowledged, which its Redis transport keeps for the
#: visibility timeout (``unacked``, ``unacked_index``, ``unacked_mutex``): a broker user given every other key
#: docs/settings.md listed (its queues, ``~_kombu.*``, the replies, ``~celery-*``) was refused them and told no
#: narrower rule than ``~* &* +@all``.
_UNACKED = ("unacked*",)


@dataclass(frozen=True, kw_only=True)
class Role:
    """What one Redis user does for ragscore: ``commands`` (a command of each kind, on each key or channel) and
    ``rule``, the ACL rule that allows them (``{user}`` is the user's name); ``writes``: it writes too, in ``MULTI``
    transactions among others, so a user that may not open ``MULTI`` may not do its work; ``narrow``: key patterns
    narrower than ``rule`` (``unacked*``): a user refused only keys they match is told a rule naming those patterns
    (``ACL SETUSER {user} ~unacked*``), not ``rule``."""

    name: str
    commands: tuple[tuple[str, ...], ...]
    rule: str
    writes: bool = False
    narrow: tuple[str, ...] = ()


def broker_role(queues: Iterable[str]) -> Role:
    """The broker's user for ``queues`` (and the control queue, which every run's aggregation uses): kombu's lists,
    bindings, unacked messages and broadcast channel (pidbox). Celery's results are not asked for: they may be in
    another Redis (RAGSCORE_RESULT_BACKEND); a command that sends or serves work checks :data:`BACKEND` too, with
    the broker's user where they are kept with it (``orchestrator.connection.broker_roles``)."""
    return Role(
        name="broker",
        commands=(
            *(c for q in dict.fromkeys([*queues, CONTROL_QUEUE]) for c in (*_queue_commands(q), *_bindings(q))),
            ("HSET", "unacked", _PROBE, "1"),
            ("ZADD", "unacked_index", "0", _PROBE),
            ("SET", "unacked_mutex", _PROBE, "NX"),
            ("PUBLISH", "/{db}.celery.pidbox", _PROBE),
        ),
        rule="ACL SETUSER {user} ~* &* +@all",
        writes=True,
        narrow=_UNACKED,
    )


def _queue_commands(queue: str) -> tuple[tuple[str, ...], ...]:
    """What kombu (send, receive, its size) and status (depth, what is ahead of a run) run on one queue's lists: its
    own and its priority lists (a user allowed ``~cpu`` alone failed on ``cpu\\x06\\x163``)."""
    priority = f"{queue}{PRIORITY_SEP}9"
    return (("LPUSH", queue, _PROBE), ("BRPOP", queue, "1"), ("LLEN", priority), *_queue_reads(queue))


def _bindings(exchange: str) -> tuple[tuple[str, ...], ...]:
    """What kombu writes of the binding of a queue to its exchange of the same name, as a worker declares it: its
    table (``_kombu.binding.cpu``) and the set that keeps that table from kombu's sweep
    (``_kombu.binding_permanent.cpu``)."""
    return (("SADD", f"_kombu.binding.{exchange}", _PROBE), ("SADD", f"_kombu.binding_permanent.{exchange}", _PROBE))


def _queue_reads(queue: str) -> tuple[tuple[str, ...], ...]:
    """What status reads of one queue's list (its depth, what is ahead of a run)."""
    return (("LLEN", queue), ("LRANGE", queue, "0", "0"))


#: The broker's user of a command that may send work to the control queue (cancel: a cancelled run's aggregation):
#: what every run needs of it, whatever its metrics' queues (a user limited to the queues its cluster serves is not
#: refused for the others). run, submit and resume check the queues of their run's suite too, `ragscore worker` its
#: own (:func:`broker_role`).
BROKER = broker_role(())

#: The broker's user of a command that only reads its queues (status RUN): the control queue's list and kombu's
#: unacked messages.
BROKER_READS = Role(
    name="broker",
    commands=(
        *_queue_reads(CONTROL_QUEUE),
        ("HGET", "unacked", _PROBE),
        ("ZSCORE", "unacked_index", _PROBE),
    ),
    rule=BROKER.rule,
    narrow=_UNACKED,
)

#: The broker's user of a command that asks the workers (Celery's remote control: ``ragscore worker`` pings them;
#: run, submit, cancel and status ask which queues they serve and what they hold): the reply lists,
#: ``OID.reply.celery.pidbox`` (a fresh OID each process, so the probe's own name stands for them), that the command
#: reads and its workers push their replies to, and their exchange's binding: its table
#: (``_kombu.binding.reply.celery.pidbox``: the command adds its reply list there by a Lua script, a worker replying
#: reads it) and the deadlines of the bindings that expire (``_kombu.binding_deadlines``: a reply list goes once its
#: command is gone). A user allowed ragscore's queues and kombu's keys alone, or kombu's bindings of its queues alone
#: (``~_kombu.binding.cpu``), passed the check, then the command died on its first question with redis-py's raw
#: NoPermissionError.
CONTROL_REPLIES = Role(
    name="broker (Celery's remote control replies, *.reply.celery.pidbox)",
    commands=(
        *_queue_commands(f"{_PROBE}.reply.celery.pidbox"),
        ("SMEMBERS", "_kombu.binding.reply.celery.pidbox"),
        ("EVAL", "return 1", "2", "_kombu.binding.reply.celery.pidbox", "_kombu.binding_deadlines"),
        ("ZADD", "_kombu.binding_deadlines", "0", _PROBE),
    ),
    rule="ACL SETUSER {user} ~*.reply.celery.pidbox* ~_kombu.binding_deadlines",
    writes=True,
)

#: The broker's user of `ragscore worker`'s workers, and of a command that asks them (:data:`ASKS_WORKERS`), beside
#: their queues (:func:`broker_role`) and :data:`CONTROL_REPLIES`: the binding of each worker's own remote control
#: queue to the broadcast exchange (``_kombu.binding.celery.pidbox``, added with its deadline in
#: ``_kombu.binding_deadlines`` by a Lua script as the worker starts), and the set kombu's sweep of overdue bindings
#: reads for it (``_kombu.binding_permanent.celery.pidbox``: refused, the sweep fails). A user allowed its queues'
#: bindings and :data:`CONTROL_REPLIES`'s rule passed the check, then every worker died as it started with redis-py's
#: raw NoPermissionError, five times, and the command gave up.
WORKER_CONTROL = Role(
    name="broker (Celery's remote control of its workers, _kombu.binding.celery.pidbox)",
    commands=(
        ("EVAL", "return 1", "2", "_kombu.binding.celery.pidbox", "_kombu.binding_deadlines"),
        ("EXISTS", "_kombu.binding_permanent.celery.pidbox"),
    ),
    rule="ACL SETUSER {user} ~_kombu.binding.celery.pidbox ~_kombu.binding_permanent.celery.pidbox "
    "~_kombu.binding_deadlines",
    writes=True,
)

#: The broker's user of a command that asks the workers (run, submit, resume, cancel; `ragscore worker` pings them):
#: their replies, and the broadcasts' binding (:data:`WORKER_CONTROL`'s keys), which kombu's sweep of overdue
#: bindings reads in every channel that consumes a list that expires, an ask's reply list included: once no worker had
#: refreshed that binding for an hour (every worker stopped), each ask by a user without those keys logged kombu's
#: warning with a traceback (its sweep refused).
ASKS_WORKERS = (CONTROL_REPLIES, WORKER_CONTROL)

#: The broker's user of a command that asks the workers, beside :data:`CONTROL_REPLIES`: the broadcast channel its
#: questions go out on (``/DB.celery.pidbox``). A user with every key and no channel (Redis 7's default for a new
#: user) was refused there, and told no rule. Apart from the replies' role: a rule naming both would add a key
#: pattern that Redis refuses for a user with ``~*``.
CONTROL_BROADCAST = Role(
    name="broker (Celery's remote control broadcasts, *.celery.pidbox)",
    commands=(("PUBLISH", "/{db}.celery.pidbox", _PROBE),),
    rule="ACL SETUSER {user} &*.celery.pidbox",
)

#: The run store's user of a command that writes it (run, submit, resume, cancel, results; the run list of status
#: keeps the runs' index only where its user may write): its keys (``ragscore:``: runs, caches, rate limits), Lua
#: scripts over them, and scans.
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
    writes=True,
)

#: The run store's user of a worker: :data:`STORE`'s, and the keys a worker keeps saying it runs and that it is
#: stopping (``ragscore:alive:*``, ``ragscore:stopping:*`` and their index sets, :mod:`.kept`). A user allowed the
#: runs' keys alone (``~ragscore:run* ~ragscore:runs``) passed the check; each worker then logged one warning, and a
#: judge worker too busy to answer the ask was called unserved, a stopping one's items held by a worker that is gone.
WORKER_STORE = Role(
    name=STORE.name,
    commands=(
        *STORE.commands,
        ("SET", f"{ALIVE_PREFIX}{_PROBE}", "{{}}", "EX", "1"),
        ("SADD", ALIVE_INDEX, _PROBE),
        ("SET", f"{STOPPING_PREFIX}{_PROBE}", "{{}}", "EX", "1"),
        ("SADD", STOPPING_INDEX, _PROBE),
    ),
    rule=STORE.rule,
    writes=True,
)

#: The run store's user of a command that only reads it (status RUN, report): a user that may only read works there.
STORE_READS = Role(
    name="run store",
    commands=(("HGET", f"ragscore:run:{_PROBE}:meta", "state"), ("SCAN", "0", "MATCH", "ragscore:run:*:meta")),
    rule=STORE.rule,
)


#: Celery's result backend's user (the broker's where RAGSCORE_RESULT_BACKEND is unset): the chord counters a run's send
#: sets (``celery-taskset-meta-``: DEL, SET), and the task results (SETEX, PUBLISH on their channel) and chord joins
#: (a Lua script) its workers write (``celery-task-meta-``).
BACKEND = Role(
    name="result backend (Celery's chord counters and task results)",
    commands=(
        ("DEL", f"celery-taskset-meta-{_PROBE}.c"),
        ("SET", f"celery-taskset-meta-{_PROBE}.s", "1", "EX", "1"),
        ("SETEX", f"celery-task-meta-{_PROBE}", "1", "x"),
        ("PUBLISH", f"celery-task-meta-{_PROBE}", "x"),
        ("EVAL", "return 1", "1", f"celery-taskset-meta-{_PROBE}.j"),
    ),
    rule="ACL SETUSER {user} ~celery-* &* +@all",
    writes=True,
)


def lacking(client: redis.Redis, roles: tuple[Role, ...]) -> str:
    """Why ``client``'s user may not do the work of ``roles`` (the commands it may not run, Redis's first refusal,
    every ACL rule it needs), or "" where it may, or where the server cannot tell. It pings too (its errors raised as
    ``client.ping()``'s), in the send that opens MULTI: one round trip more than a ping. The commands are queued
    inside MULTI, then discarded: none runs; a connection left inside MULTI (an error on the way) is closed."""
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
    names = list(dict.fromkeys(_shown(c) for _, c, _ in refused))  # MULTI refused: once, for every role that writes
    listed = ", ".join(names[:_LISTED]) + (f" and {len(names) - _LISTED} more" if len(names) > _LISTED else "")
    return f"its ACL user {user!r} may not run {listed} ({refused[0][2]}): {_every_rule_needed(refused, user)}"


#: What Redis's NOPERM says of a command a user may not run on any key (not of a key or channel it may not use).
_COMMAND_REFUSED = "permissions to run the"


def _every_rule_needed(refused: list[tuple[Role, tuple[str, ...], str]], user: str) -> str:
    """Each ACL rule ``user`` lacks for the ``refused`` commands (each with its role and Redis's refusal), once, with
    the roles it is for: a user fixing its ACL is told every rule at once, not the first refusal's alone. A part of a
    role (the broker's remote control replies, of the broker's) refused its commands where that role is too is not
    named apart: that role's rule grants them (a user that may only read was told "the broker needs those commands,
    e.g. ... ~* &* +@all; ... the broker (...) and the broker (...) need those commands, e.g. ... +@all")."""
    refused_keys: dict[Role, list[str]] = {}  # per role, the keys (first arguments) of its commands refused for them
    for role, command, error in refused:
        if _COMMAND_REFUSED not in error:
            refused_keys.setdefault(role, []).append(command[1])
    without_commands = {role.name for role, _, error in refused if _COMMAND_REFUSED in error}  # a part: "NAME (...)"
    roles_by_need: dict[tuple[bool, str], list[str]] = {}
    for role, _, error in refused:
        if _COMMAND_REFUSED in error and any(role.name.startswith(f"{name} (") for name in without_commands):
            continue
        names = roles_by_need.setdefault(_needed(role, error, user, refused_keys.get(role, [])), [])
        if role.name not in names:
            names.append(role.name)
    return "; ".join(_need_text(names, keys, rule) for (keys, rule), names in roles_by_need.items())


def _need_text(names: list[str], keys: bool, rule: str) -> str:
    """``the broker needs its keys and channels, e.g. RULE`` (``keys``), or ``... needs those commands, e.g. RULE``,
    of the roles ``names``."""
    n = len(names)
    what = f"{agree(n, 'its', 'their')} keys and channels" if keys else "those commands"
    return f"the {' and the '.join(names)} {agree(n, 'needs', 'need')} {what}, e.g. {rule}"


def _needed(role: Role, error: str, user: str, keys: list[str]) -> tuple[bool, str]:
    """What ``user`` lacks of ``role`` by one of Redis's refusals, ``error`` (its keys and channels: True; else its
    commands, where it may not run one at all: a user that may only read, MULTI), and an ACL rule that allows it:
    where every key of ``role`` refused (``keys``) matches one of its ``narrow`` patterns, the rule naming those. A
    role's rule that grants keys alone (:data:`CONTROL_REPLIES`: its user runs the broker's commands already) is no
    answer to a refused command: ``+@all`` is."""
    rule = role.rule.format(user=user)
    if _COMMAND_REFUSED not in error:
        patterns = [next((p for p in role.narrow if fnmatchcase(key, p)), "") for key in keys]
        return True, (f"ACL SETUSER {user} " + " ".join(f"~{p}" for p in dict.fromkeys(patterns))
                      if patterns and "" not in patterns else rule)  # fmt: skip
    if "+@all" not in rule:
        rule = f"ACL SETUSER {user} +@all"
    return False, rule


#: Refused commands an error names before it says how many more.
_LISTED = 6


def _queued_and_discarded(
    conn: redis.connection.AbstractConnection, commands: list[tuple[Role, tuple[str, ...]]]
) -> list[tuple[Role, tuple[str, ...], str]]:
    """The ``commands`` (each with its role) that Redis refuses to queue on ``conn`` inside MULTI for want of
    permission (NOPERM), and why. Where MULTI does not open the commands are never sent (they would run): MULTI
    itself is the refused command where Redis refused it for want of permission and a role writes, else there is
    none. PING goes first, in MULTI's send: its error is raised."""
    clean = False  # conn outside MULTI with no reply left unread: it may go back to its pool
    try:
        conn.send_packed_command(conn.pack_commands([("PING",), ("MULTI",)]))
        pong, multi = _reply(conn), _reply(conn)
        if isinstance(pong, redis.ResponseError):
            raise pong
        if isinstance(multi, redis.ResponseError):
            clean = True
            return _multi_refused(commands, multi)
        conn.send_packed_command(conn.pack_commands([c for _, c in commands] + [("DISCARD",)]))
        replies = [_reply(conn) for _ in commands]
        clean = not isinstance(_reply(conn), redis.ResponseError)
        return [(role, c, str(r)) for (role, c), r in zip(commands, replies, strict=True)
                if isinstance(r, redis.exceptions.NoPermissionError)]  # fmt: skip
    finally:
        if not clean:
            conn.disconnect()


def _multi_refused(
    commands: list[tuple[Role, tuple[str, ...]]], error: redis.ResponseError
) -> list[tuple[Role, tuple[str, ...], str]]:
    """MULTI as the refused command of each role of ``commands`` that writes, where Redis refused MULTI for want of
    permission (``error``): every rule the user lacks is named, as for commands refused inside MULTI; none where no
    role writes (a user that may only read does the reading roles' work) or MULTI failed otherwise."""
    if not isinstance(error, redis.exceptions.NoPermissionError):
        return []
    return [(role, ("MULTI",), str(error)) for role in dict.fromkeys(r for r, _ in commands) if role.writes]


def _reply(conn: redis.connection.AbstractConnection) -> object:
    """``conn``'s next reply, an error reply returned rather than raised (the replies after it are read too)."""
    try:
        return conn.read_response()
    except redis.ResponseError as exc:
        return exc


def _shown(command: tuple[str, ...]) -> str:
    """A refused command as an error names it: its name and its key or channel."""
    shown = command[0] if command[0] in ("EVAL", "SCAN") else " ".join(command[:2])
    return shown.encode("unicode_escape").decode()  # a priority list's separator as redis-cli shows it
