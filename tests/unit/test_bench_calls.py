"""The benchmarks call ragscore's own functions with keywords those functions still take.

No test runs a benchmark (they take minutes), so a renamed or removed parameter broke one unseen: bench/cpu.py called
``run(..., concurrency=...)`` for a week after ``run`` dropped it. Each call in bench/ of a function it imports from
``orchestrator`` or ``ragscore_workers`` is checked against that function's signature (nothing is run)."""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
OURS = ("orchestrator", "ragscore_workers")


def _imported(tree: ast.Module) -> dict[str, Any]:
    """The names a bench module imports from our packages (at its top or in a function), each to its object."""
    names: dict[str, Any] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in OURS:
            module = importlib.import_module(node.module)
            for alias in node.names:
                if hasattr(module, alias.name):
                    names[alias.asname or alias.name] = getattr(module, alias.name)
    return names


def _bad_keywords(path: Path) -> list[str]:
    """``line: name(keyword=)`` for each call of an imported function with a keyword its signature lacks."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    imported, bad = _imported(tree), []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in imported):
            continue
        func = imported[node.func.id]
        if not callable(func) or inspect.ismodule(func):
            continue
        try:
            params = inspect.signature(func).parameters
        except (TypeError, ValueError):  # a builtin without a signature
            continue
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            continue
        bad += [f"{node.lineno}: {node.func.id}({kw.arg}=)" for kw in node.keywords if kw.arg and kw.arg not in params]
    return bad


@pytest.mark.parametrize("path", sorted(BENCH.glob("*.py")), ids=lambda p: p.name)
def test_each_benchmark_calls_our_functions_with_keywords_they_take(path: Path) -> None:
    assert _bad_keywords(path) == []


def test_a_keyword_our_function_does_not_take_is_found(tmp_path: Path) -> None:
    """The check itself: the call bench/cpu.py made is named."""
    script = tmp_path / "bench_like.py"
    script.write_text('from orchestrator.runner import run\nrun("d", None, "o", concurrency={"cpu": 2})\n')
    assert _bad_keywords(script) == ["2: run(concurrency=)"]
