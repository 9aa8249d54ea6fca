"""Loading a suite file (YAML or JSON) and checking it against the metric registry."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from ragscore_workers.errors import ConfigError
from ragscore_workers.planning import QUEUE_ORDER, ResolvedSuite, resolve_suite
from ragscore_workers.schemas import Suite
from ragscore_workers.target.jsonpath import parse_path

__all__ = ["QUEUE_ORDER", "ResolvedSuite", "load_suite"]


def _read(path: Path) -> Any:
    if not path.exists():
        raise ConfigError(f"Suite file not found: {path}")
    if not path.is_file():
        raise ConfigError(f"Suite {path} is not a file (give a suite's .yaml or .json)")
    text = path.read_text(encoding="utf-8")
    try:
        return json.loads(text) if path.suffix.lower() == ".json" else yaml.safe_load(text)
    except (yaml.YAMLError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path}: cannot parse the suite: {exc}") from exc


def load_suite(source: str | Path | dict[str, Any] | Suite) -> ResolvedSuite:
    """Load and resolve a suite from a file, a dict or a Suite; ConfigError on any problem."""
    if isinstance(source, Suite):
        data: Any = dict(source)  # validated again: a Suite changed by model_copy(update=...) skipped that
    else:
        data = _read(Path(source)) if isinstance(source, (str, Path)) else source
    if not isinstance(data, dict):
        raise ConfigError("A suite must be a mapping with a 'metrics' list")
    try:
        suite = Suite.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'suite'}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"Invalid suite: {problems}") from exc
    resolved = resolve_suite(suite)
    _check_targets(suite)
    if suite.gates:
        from .gates import check_gate_names

        check_gate_names(suite.gates, resolved.outputs())
    return resolved


def _check_targets(suite: Suite) -> None:
    """Every response path of every target parses (a typo fails before anything is sent)."""
    for target in suite.all_targets:
        for field, path in target.response.model_dump().items():
            if path is not None:
                try:
                    parse_path(path)
                except ValueError as exc:
                    raise ConfigError(f"Invalid suite: target {target.system or ''} response.{field}: {exc}") from exc
