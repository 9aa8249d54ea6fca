"""Loading a suite file (YAML or JSON) and checking it against the metric registry."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, get_args

import yaml
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from ragscore_workers.counts import close_names, did_you_mean, place
from ragscore_workers.errors import ConfigError, Problem, raise_problems
from ragscore_workers.metrics._params import booleans_read_as_numbers
from ragscore_workers.planning import QUEUE_ORDER, ResolvedSuite, resolve_suite
from ragscore_workers.schemas import JudgeParams, Queue, Suite, TargetConfig
from ragscore_workers.target.jsonpath import check_path
from ragscore_workers.target.template import keyless_field, placed_placeholders

from .datasets.loaders import files_named_like, json_slip
from .suite_lines import NO_LINES, SuiteLines

if TYPE_CHECKING:
    from ragscore_workers.metrics.registry import MetricDef

__all__ = [
    "BUDGET_OPTIONS", "QUEUE_ORDER", "ResolvedSuite", "judge_budget", "load_suite", "with_judge_limits",
    "with_judge_params", "without_caches",
]  # fmt: skip

T = TypeVar("T")


def _read(path: Path) -> tuple[Any, SuiteLines]:
    """The suite file at ``path`` as written, and where each of its keys and items is."""
    if not path.exists():
        raise ConfigError(f"Suite file not found: {path}{files_named_like(path) or _what_a_suite_is(path)}")
    if not path.is_file():
        raise ConfigError(f"Suite {path} is not a file (give a suite's .yaml or .json)")
    text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text) if path.suffix.lower() == ".json" else _yaml(text, path)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
                          f"{f' ({said})' if (said := json_slip(exc)) else ''}") from exc  # fmt: skip
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: cannot parse the suite: {exc}") from exc
    return data, SuiteLines.of(path, text, data)


def _what_a_suite_is(path: Path) -> str:
    """For a bare name given as the suite (``evaluate(rows, "exact_match")``: a metric's name, most likely), what a
    suite is; nothing for a file's name."""
    if path.suffix or path.parent != Path("."):
        return ""
    return f" (a suite is a .yaml or .json file, or from Python a dict such as {{'metrics': [{str(path)!r}]}})"


def _yaml(text: str, path: Path) -> Any:
    """``yaml.safe_load`` of the text, its errors naming the file (not ``<unicode string>``), the line shown."""
    loader = yaml.SafeLoader(text)
    loader.name = str(path)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def _non_finite(value: Any, loc: tuple[Any, ...] = ()) -> tuple[Any, ...] | None:
    """Where the suite holds an infinite or NaN number (``("sandbox", "timeout_s")``), or None: YAML's ``.inf`` and
    JSON's ``1e309`` passed every ``gt=0`` and became ``null`` in the run store, which then could not read the suite."""
    if isinstance(value, float) and not math.isfinite(value):
        return loc
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        if (found := _non_finite(item, (*loc, key))) is not None:
            return found
    return None


def _problem(error: ErrorDetails, data: Any, lines: SuiteLines) -> str:
    """One of pydantic's errors as ``where: message``, where in ``data`` (the suite as written) as users count
    (``metrics item 1 (exact_match)``), after its line in the file (``lines``); an unknown key with the known ones most
    like it (``judge.rmp: Extra inputs are not permitted (did you mean 'rpm'?)``)."""
    where = lines.said(place(error["loc"], data), _written_at(error)) or "suite"
    if error["type"] == "extra_forbidden" and (model := _model_at(Suite, error["loc"][:-1])) is not None:
        if close := close_names(str(error["loc"][-1]), model.model_fields):
            return f"{where}: {error['msg']} ({did_you_mean(close)})"
    if error["loc"] == ("metrics",) and error["type"] == "list_type" and isinstance(error["input"], str):
        return f"{where}: {error['msg']} (metrics: [{error['input']}])"  # YAML's `metrics: exact_match`
    return f"{where}: {error['msg']}"


#: The errors refusing a section or item as a whole for one of its keys, which their ctx's ``key`` names.
_KEYED = ("flat_params", "misspelt_key", "secret_in_suite")


def _written_at(error: ErrorDetails) -> tuple[Any, ...]:
    """Where in the suite ``error`` is written: its loc, or for a metric item's unknown key (``{name: m, k: [1]}``,
    refused by the item as a whole) or a key written into the judge section (``api_kye: gsk_...``, refused by the
    section) that key's, so that its line is the key's, not the item's or the section's."""
    key = error.get("ctx", {}).get("key") if error["type"] in _KEYED else None
    return error["loc"] if key is None else (*error["loc"], key)


def _model_at(model: type[BaseModel], loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    """The model of the suite's section at ``loc`` (``("targets", 0, "request")``), or None for a plain value."""
    for step in loc:
        if isinstance(step, int):  # an entry of a list: the list's field named the model already
            continue
        field = model.model_fields.get(step)
        found = _model_in(field.annotation) if field is not None else None
        if found is None:
            return None
        model = found
    return model


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds (``TargetConfig`` of ``list[TargetConfig]`` or ``TargetConfig | None``), or None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return next((m for arg in get_args(annotation) if (m := _model_in(arg)) is not None), None)


def load_suite(
    source: str | Path | dict[str, Any] | Suite, judge_limits: dict[str, int] | None = None
) -> ResolvedSuite:
    """Load and resolve a suite from a file, a dict or a Suite; ConfigError on any problem. ``judge_limits``
    (``--rpm`` ...) replace the judge's own before it is validated, so a check across them (``pace: even`` needs an
    ``rpm``) sees the limits the run will have. The problems of one stage are said together (a lone one as it is, an
    unknown metric an UnknownMetricError; several a SuiteProblems, one a line): the schema's (every section's), then
    the metrics' and the targets' (each metric's, then those across them), then the budgets' and the gates'. A stage
    that fails stops there: the next needs what it checks (the metrics are resolved from a valid suite)."""
    lines = NO_LINES
    if isinstance(source, Suite):
        data: Any = dict(source)  # validated again: a Suite changed by model_copy(update=...) skipped that
    elif isinstance(source, (str, Path)):
        data, lines = _read(Path(source))
    else:
        data = source
    if not isinstance(data, dict):
        raise ConfigError("A suite must be a mapping with a 'metrics' list")
    if judge_limits:
        data = _with_limits(data, judge_limits)  # validated below (a limit < 1 refused)
    # warnings=False: a section model_copy(update=...) set as a dict (with_judge_limits) is dumped as it is, unwarned
    written = source.model_dump(warnings=False) if isinstance(source, Suite) else data
    if (where := _non_finite(written)) is not None:
        said = lines.place(where, written) or "suite"
        raise ConfigError(f"Invalid suite: {said}: a number must be finite (not .inf or NaN): the run keeps its "
                          "suite as JSON, which cannot hold it")  # fmt: skip
    try:
        suite = Suite.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(_problem(e, data, lines) for e in exc.errors())
        # from None: pydantic's own text shows each refused value (input_value=...), a credential among them, in
        # every traceback of this error (evaluate() in a notebook or a script); the problems are all said here.
        raise ConfigError(f"Invalid suite: {problems}") from None
    resolved = _resolved(suite, data, judge_limits, lines)
    shared = _share_prices(resolved) or _share_budgets(resolved)
    return resolved if shared is None else shared


def _resolved(
    suite: Suite, data: dict[str, Any], judge_limits: dict[str, int] | None, lines: SuiteLines
) -> ResolvedSuite:
    """The suite's metrics resolved; its booleans read as numbers, its metrics' problems, ``--rpm`` ... without a
    judge metric and its targets' response paths said together (:func:`raise_problems`), each after its line in the
    file (``lines``) where it has one."""
    problems: list[Problem] = []
    # a boolean read as a number (judge rpm: true ran at 1 request a minute); metric params are checked as resolved
    if booleans := booleans_read_as_numbers(data, suite, lines.place):
        problems.append(("", ConfigError(f"Invalid suite: {'; '.join(booleans)}")))
    resolved = _checked(problems, resolve_suite, suite)
    if resolved is not None and judge_limits and not any(m.queue == Queue.JUDGE for m, _ in resolved.metrics):
        problems.append(
            ("", ConfigError("--rpm, --tpm, --rpd and --tpd limit the judge; the suite has no judge metrics"))
        )
    problems += _target_problems(suite)
    if resolved is not None:
        problems += _resolved_problems(resolved, lines)
    raise_problems(lines.placed(problems))
    assert resolved is not None  # no problem: resolve_suite returned
    return resolved


def _resolved_problems(resolved: ResolvedSuite, lines: SuiteLines) -> list[Problem]:
    """The problems of resolved metrics with the suite: a model given two prices, a budget two values, ``max_cost``
    without a price, gates on outputs the suite does not write (each named after its line in the file)."""
    problems = _price_problems(resolved) + _budget_problems(resolved)
    _checked(problems, _check_cost_budgets, resolved)
    if resolved.suite.gates:
        from .gates import check_gate_names, named_by_place

        named = [
            (lines.said(name, ("gates", i)), gate)
            for i, (name, gate) in enumerate(named_by_place(resolved.suite.gates))
        ]
        _checked(problems, check_gate_names, named, resolved.outputs())
    return problems


def _checked(problems: list[Problem], check: Callable[..., T], *args: Any) -> T | None:
    """``check(*args)``, its ConfigError added to ``problems`` (then None) so that the others are said with it (a lone
    one named by its place, :attr:`ConfigError.where`)."""
    try:
        return check(*args)
    except ConfigError as exc:
        problems.append((exc.where, exc))
        return None


#: The judge params that are the run's budgets, counted over every judge call, each with the command line's option that
#: sets it (its Python name: :data:`.caller._PYTHON_NAMES`).
BUDGET_OPTIONS = {"max_cost": "max-cost", "max_tokens_total": "max-tokens"}


def judge_budget(*, max_cost: float | None, max_tokens: int | None) -> dict[str, Any]:
    """The judge params a budget sets (``--max-cost`` / ``--max-tokens``, or resume()'s), only the ones given."""
    given = dict(zip(BUDGET_OPTIONS, (max_cost, max_tokens), strict=True))
    return {name: value for name, value in given.items() if value is not None}


def with_judge_params(resolved: ResolvedSuite, **params: Any) -> ResolvedSuite:
    """The suite with ``params`` (``cache``, ``max_cost``, ``max_tokens_total``) set on every judge-queue metric
    (``--no-cache``, ``--max-cost``, ``--max-tokens``); unchanged when ``params`` is empty."""
    if not params:
        return resolved
    judged = {m.name for m, _ in resolved.metrics if m.queue == Queue.JUDGE}
    if not judged:
        raise ConfigError("--no-cache, --max-cost and --max-tokens apply to judge metrics; the suite has none")
    specs = [
        spec.model_copy(update={"params": {**spec.params, **params}}) if spec.name in judged else spec
        for spec in resolved.suite.metrics
    ]
    return load_suite(resolved.suite.model_copy(update={"metrics": specs}))


def with_judge_limits(resolved: ResolvedSuite, **limits: int) -> ResolvedSuite:
    """The suite with the judge's rate limits ``limits`` (``rpm``, ``tpm``, ``rpd``, ``tpd``: ``--rpm`` ...) in
    place of its own; unchanged when ``limits`` is empty. ConfigError when no metric judges."""
    return load_suite(resolved.suite, judge_limits=limits) if limits else resolved


def _with_limits(data: dict[str, Any], limits: dict[str, int]) -> dict[str, Any]:
    """The suite ``data`` with the judge section's rate limits ``limits`` in place of its own (a model's fields or a
    mapping as written, none for none). A section that is neither (``judge: openai``) is left as written, for
    validation to refuse: replaced by ``limits`` it would judge with the default provider, unsaid."""
    section = data.get("judge")
    if isinstance(section, BaseModel):
        section = section.model_dump()
    elif section is None:
        section = {}
    elif not isinstance(section, dict):
        return data
    return {**data, "judge": section | limits}


def without_caches(resolved: ResolvedSuite) -> ResolvedSuite:
    """``--no-cache``: the suite with every cache it uses turned off: judge replies, target replies and the Redis
    cache of embedding vectors. ConfigError when it uses none of them."""
    suite = resolved.suite
    update: dict[str, Any] = {}
    if suite.target is not None:
        update["target"] = suite.target.model_copy(update={"cache": False})
    elif suite.targets:
        update["targets"] = [t.model_copy(update={"cache": False}) for t in suite.targets]
    if any(m.queue is Queue.EMBED or m.name == "checks" for m, _ in resolved.metrics):  # checks: embedding points
        update["embedding"] = suite.embedding.model_copy(update={"cache": False})
    judged = any(m.queue is Queue.JUDGE for m, _ in resolved.metrics)
    if not update and not judged:
        raise ConfigError("--no-cache applies to judge metrics, targets and embedding metrics; the suite has none")
    resolved = load_suite(suite.model_copy(update=update)) if update else resolved
    return with_judge_params(resolved, cache=False) if judged else resolved


def _judged(resolved: ResolvedSuite) -> list[tuple[MetricDef, JudgeParams]]:
    """The suite's judge metrics and their params."""
    return [(m, p) for m, p in resolved.metrics if isinstance(p, JudgeParams)]


def _params_at(resolved: ResolvedSuite, metric: str, *keys: str) -> tuple[Any, ...]:
    """Where a param of the suite's ``metric`` is (``("metrics", 2, "params", "max_cost")``): a resolved suite lists
    each metric once."""
    return ("metrics", [spec.name for spec in resolved.suite.metrics].index(metric), "params", *keys)


def _price_problems(resolved: ResolvedSuite) -> list[Problem]:
    """A problem for every model that two judge metrics price differently (a price is the provider's), at the second
    price, naming the first."""
    problems: list[Problem] = []
    first: dict[str, tuple[tuple[float, ...], str]] = {}
    for mdef, params in _judged(resolved):
        for model, price in params.prices.items():
            said, by = first.setdefault(model, (tuple(price), mdef.name))
            if said != tuple(price):
                problems.append(("", ConfigError(f"Invalid suite: judge metrics give model {model!r} two prices, "
                                                 f"{list(said)} ({by}) and {list(price)} ({mdef.name}): a price is "
                                                 "the provider's; give the same one in each",
                                                 loc=_params_at(resolved, mdef.name, "prices", model),
                                                 first=_params_at(resolved, by, "prices", model))))  # fmt: skip
    return problems


def _share_prices(resolved: ResolvedSuite) -> ResolvedSuite | None:
    """A price is the provider's, not a metric's: the suite with every judge metric given every price any of
    them names (so ``max_cost`` counts every call, whichever metric makes it); None when nothing changes. Two
    prices of one model are refused before (:func:`_price_problems`)."""
    judged = _judged(resolved)
    merged = {model: tuple(price) for _, params in judged for model, price in params.prices.items()}
    lacking = {m.name for m, p in judged if {k: tuple(v) for k, v in p.prices.items()} != merged}
    if not merged or not lacking:
        return None
    prices = {model: list(price) for model, price in merged.items()}
    specs = [
        spec.model_copy(update={"params": {**spec.params, "prices": prices}}) if spec.name in lacking else spec
        for spec in resolved.suite.metrics
    ]
    return load_suite(resolved.suite.model_copy(update={"metrics": specs}))


def _budget_problems(resolved: ResolvedSuite) -> list[Problem]:
    """A problem for every budget two judge metrics give different values, at the first value unlike the first one's,
    naming that."""
    problems: list[Problem] = []
    for name in BUDGET_OPTIONS:
        given = [(m.name, getattr(p, name)) for m, p in _judged(resolved) if getattr(p, name) is not None]
        if other := next((metric for metric, value in given if value != given[0][1]), None):
            said = ", ".join(f"{value:g} ({metric})" for metric, value in sorted(given))
            problems.append(("", ConfigError(f"Invalid suite: judge metrics give {name} different values, {said}: a "
                                             "budget is the run's, counted over every judge call; give one value (or "
                                             "--max-cost / --max-tokens)", loc=_params_at(resolved, other, name),
                                             first=_params_at(resolved, given[0][0], name))))  # fmt: skip
    return problems


def _share_budgets(resolved: ResolvedSuite) -> ResolvedSuite | None:
    """A budget (``max_cost``, ``max_tokens_total``) is the run's, counted over every judge call: the suite with a
    budget one judge metric gives set on all of them (else the others would judge on past it); None when nothing
    changes. Two values of one budget are refused before (:func:`_budget_problems`)."""
    judged = _judged(resolved)
    shared: dict[str, Any] = {}
    for name in BUDGET_OPTIONS:
        given = [getattr(p, name) for _, p in judged if getattr(p, name) is not None]
        if given and len(given) < len(judged):
            shared[name] = given[0]
    return with_judge_params(resolved, **shared) if shared else None


def _check_cost_budgets(resolved: ResolvedSuite) -> None:
    """``max_cost`` (``--max-cost``) when no judge metric has a price for the judge's model: every call would
    count as free and the budget could never stop anything, so it is refused."""
    model = resolved.suite.judge.model
    budgeted = [m.name for m, p in resolved.metrics if getattr(p, "max_cost", None) is not None]
    priced = [m.name for m, p in resolved.metrics if model in (getattr(p, "prices", None) or {})]
    if budgeted and not priced:
        named = sorted({name for _, p in resolved.metrics for name in (getattr(p, "prices", None) or {})})
        close = close_names(model, named)[:1]
        # a price table that names other models (a typo, or the model before the suite's judge changed)
        others = (f" (the prices given name {', '.join(map(repr, named))}, not the judge's model"
                  f"{f'; did you mean {model!r} for {close[0]!r}?' if close else ''})") if named else ""  # fmt: skip
        raise ConfigError(
            f"max_cost (--max-cost) needs a price for the judge model {model!r}{others}: give the judge metrics the "
            f"param 'prices' ({{{model!r}: [input, output] per million tokens}}); without it every call costs 0 and "
            "the budget never stops anything. --max-tokens caps usage without prices.",
            loc=_params_at(resolved, budgeted[0], "max_cost"),
        )


def _target_problems(suite: Suite) -> list[Problem]:
    """A problem for every response path of every target that does not parse or that no reply can fill its field
    through (:func:`check_path`: a typo fails before anything is sent), and for every request placeholder no row can
    fill (:func:`_request_problems`), at its key."""
    problems: list[Problem] = []
    places: list[tuple[Any, ...]] = (
        [("target",)] if suite.target is not None else [("targets", i) for i in range(len(suite.targets))]
    )
    for section, target in zip(places, suite.all_targets, strict=True):
        problems += _request_problems(section, target)
        for field, path in target.response.model_dump().items():
            if path is not None:
                try:
                    check_path(path, lists=field != "answer")  # the answer is one text; the other fields lists
                except ValueError as exc:
                    said = f"Invalid suite: {_named(target)} response.{field}: {exc}"
                    problems.append(("", ConfigError(said, loc=(*section, "response", field))))
    return problems


def _request_problems(section: tuple[Any, ...], target: TargetConfig) -> list[Problem]:
    """A problem for every placeholder of ``target``'s request that reads a key of a row field holding none in every
    row (``{contexts.text}``: contexts is a list, and a placeholder names no element of one), which would fail every
    question, at its key, with the placeholder to write."""
    problems: list[Problem] = []
    for loc, name in placed_placeholders(target.request):
        if (holds := keyless_field(name)) is not None:
            field, _, rest = name.partition(".")
            why = " (a placeholder names no element of a list)" if "list" in holds else ""
            where = f"{_named(target)} {place(('request', *loc))}"
            said = (f"Invalid suite: {where}: {{{name}}} reads {rest!r} of the row's {field!r}, which is {holds} in "
                    f"every row{why}: write {{{field}}} to send it whole")  # fmt: skip
            problems.append(("", ConfigError(said, loc=(*section, "request", *loc))))
    return problems


def _named(target: TargetConfig) -> str:
    """``target NAME`` (``target`` for one without a system name), as the suite's problems name it."""
    return f"target {target.system}" if target.system else "target"
