"""The one error tree's public surface: ``ragscore_workers.errors.__all__``."""

from __future__ import annotations

import inspect

from ragscore_workers import errors


def test_every_error_and_warning_the_tree_defines_is_public() -> None:
    """``StillLoadingError`` (the embedded Redis still reading its runs back, which ``ragscore run`` catches),
    ``RunLostError`` and ``EvictionWarning`` were defined in the tree but left out of ``__all__``: a star import
    and a type checker's re-export rules did not see them."""
    defined = {name for name, value in vars(errors).items()
               if inspect.isclass(value) and issubclass(value, (errors.RagscoreError, Warning))
               and value.__module__ == errors.__name__}  # fmt: skip
    assert defined - set(errors.__all__) == set()
    assert {"StillLoadingError", "RunLostError", "EvictionWarning"} <= defined


def test_several_problems_with_an_unknown_metric_among_them_are_said_of_the_subject_given() -> None:
    """A missing dataset said with a suite's unknown metric read "Invalid suite: 2 problems", as if the dataset were
    the suite's: the subject given (``input``) was dropped where a metric was unknown."""
    missing = errors.ConfigError("Dataset not found: d.jsonl")
    unknown = errors.UnknownMetricError("exact_matc", ["exact_match"], ["exact_match"])
    try:
        errors.raise_problems([("", missing), ("", unknown)], subject="input")
    except errors.UnknownMetricError as exc:
        assert str(exc).startswith("Invalid input: 2 problems:\n  Dataset not found: d.jsonl\n"), str(exc)
    else:
        raise AssertionError("raise_problems raised nothing")
