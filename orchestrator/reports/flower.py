"""``ragscore flower``: Flower (the Celery dashboard) for our Celery app, behind HTTP basic auth.

Credentials come from the environment only: ``FLOWER_BASIC_AUTH=user:password`` (several pairs separated by
commas), the variable Flower itself reads and that docker-compose.yml and deploy/k8s/flower.yaml already
set. Without it Flower is not started, unless ``--no-auth`` asks for an unauthenticated dashboard, which
then listens on 127.0.0.1 only. See docs/monitoring.md.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence

from ragscore_workers.errors import ConfigError

from ..loopback import LOOPBACK_HOSTS

__all__ = ["AUTH_ENV", "DEFAULT_MAX_TASKS", "flower_argv", "flower_env", "flower_location"]

AUTH_ENV = "FLOWER_BASIC_AUTH"
#: Tasks Flower keeps in memory (its own default is 100,000); older ones are dropped from its task list.
DEFAULT_MAX_TASKS = 100_000


def flower_env(environ: Mapping[str, str], broker_url: str, no_auth: bool) -> dict[str, str]:
    """The environment Flower runs with; raises ConfigError when no credentials are set."""
    auth = environ.get(AUTH_ENV, "")
    if not no_auth:
        pairs = [p for p in auth.split(",") if p]
        if not pairs or any(":" not in p or not p.split(":", 1)[0] or not p.split(":", 1)[1] for p in pairs):
            raise ConfigError(
                f"ragscore flower needs basic auth: set {AUTH_ENV}=user:password (or pass --no-auth to serve an "
                "unauthenticated dashboard on 127.0.0.1 only)"
            )
    env = {**environ, "RAGSCORE_BROKER_URL": broker_url}
    if no_auth:
        env.pop(AUTH_ENV, None)
        env["FLOWER_UNAUTHENTICATED_API"] = "true"
    return env


#: Flower options that would put a secret on the command line (seen by ``ps``) or bypass ragscore's own.
_SECRET_OPTIONS = {"basic_auth": "set FLOWER_BASIC_AUTH=user:password", "broker": "use --broker or RAGSCORE_BROKER_URL",
                   "broker_api": "use --broker or RAGSCORE_BROKER_URL",
                   # ragscore's own options: given again after them, Flower takes the last (0.0.0.0 under --no-auth)
                   "address": "use ragscore flower --address", "port": "use ragscore flower --port",
                   "max_tasks": "use ragscore flower --max-tasks"}  # fmt: skip


def flower_argv(port: int, address: str, max_tasks: int, no_auth: bool, extra: Sequence[str] = ()) -> list[str]:
    """``python -m celery -A ragscore_workers.app flower ...``; the broker URL and the credentials travel in
    the environment (``RAGSCORE_BROKER_URL``, ``FLOWER_BASIC_AUTH``), never on the command line. ``extra``:
    further Flower options, passed on as written (``--persistent=True``)."""
    if no_auth and address not in LOOPBACK_HOSTS:
        raise ConfigError("--no-auth serves on 127.0.0.1 only; drop --address or set FLOWER_BASIC_AUTH")
    for arg in extra:
        name = _option(arg)[0]
        if not arg.startswith("--"):
            raise ConfigError(f"unexpected argument {arg!r}: Flower options are written --name=value")
        if name in _SECRET_OPTIONS:
            raise ConfigError(f"--{name} is not passed to Flower: {_SECRET_OPTIONS[name]}")
    return [
        sys.executable, "-m", "celery", "-A", "ragscore_workers.app", "flower",
        f"--port={port}", f"--address={address}", f"--max_tasks={max_tasks}", *extra,
    ]  # fmt: skip


def flower_location(port: int, address: str, extra: Sequence[str] = ()) -> str:
    """Where Flower serves, as the options passed on to it move it: ``http://127.0.0.1:5555``, ``https://...``
    with ``--certfile``, under ``--url_prefix``, or on a ``--unix_socket`` in place of the address and port."""
    options = dict(_option(arg) for arg in extra)
    prefix = options.get("url_prefix", "").strip("/")
    if socket := options.get("unix_socket"):
        return f"unix socket {socket}" + (f", under /{prefix}" if prefix else "")
    scheme = "https" if options.get("certfile") else "http"
    return f"{scheme}://{address}:{port}" + (f"/{prefix}" if prefix else "")


def _option(arg: str) -> tuple[str, str]:
    """A Flower option's name, as Flower reads it (``url_prefix`` from ``--url-prefix``), and its value."""
    name, _, value = arg.lstrip("-").partition("=")
    return name.replace("-", "_"), value


def exec_flower(argv: list[str], env: dict[str, str]) -> None:
    """Replace this process with Flower (signals and exit codes are Flower's own)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvpe(argv[0], argv, env)
