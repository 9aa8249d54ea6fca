"""The metric registry: name -> queue, params model, function, outputs.

Two kinds of metric function, one rule for choosing:

* ``per_row``: a pure function ``fn(row, params) -> MetricResult | dict[str, MetricResult]`` (most
  deterministic metrics).
* ``batch``: ``fn(rows, params, ctx) -> list[MetricResult | dict[str, MetricResult]]`` for metrics that need
  a resource shared across a chunk (a model, an LLM client, a sandbox); ``ctx`` is a :class:`RunContext`.

A function returns one ``MetricResult`` (output named like the metric) or a dict of outputs (e.g.
``recall_at_k`` -> ``recall_at_1``, ``recall_at_5``, ``mrr``); ``outputs(params)`` lists those names.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from celery.exceptions import SoftTimeLimitExceeded
from pydantic import AliasChoices, AliasPath, BaseModel, ConfigDict, ValidationError
from pydantic_core import ErrorDetails

from ..counts import close_names, did_you_mean, noun_names, place
from ..errors import ConfigError, Problem, UnknownMetricError, raise_problems
from ..schemas import UNSET, MetricResult, MetricSpec, Queue, Row, Suite, unset_means
from ._params import booleans_read_as_numbers

log = logging.getLogger(__name__)

__all__ = [
    "UNSET",
    "MetricDef",
    "NoParams",
    "PlannedCall",
    "RunContext",
    "all_metrics",
    "get_metric",
    "higher_is_better",
    "parse_spec",
    "register",
    "resolve",
    "unset_means",
]

MetricOutput = MetricResult | dict[str, MetricResult]

#: Metric outputs where a lower score is better (the share of hallucinated sentences); for every other, higher.
LOWER_IS_BETTER = frozenset({"answer_hallucination"})


#: Row fields a system may lack by design, with why: a metric that needs one leaves a row without it unscorable
#: (``no contexts``), and a dataset no row of which has it is warned of once, before the run; its scoring no item
#: of such a run is no failure (``ResolvedSuite.scoreless``, ``gates.incomplete``): it does not apply to the system.
OPTIONAL_FIELDS = {"contexts": "a system that retrieves nothing, an LLM alone, has none"}
#: ``recall_at_k``'s reason for a row that a target returning no contexts nor doc ids answered without retrieved ids
#: (``Row.answered_alone``: an LLM alone's, which retrieves nothing by design).
NO_RETRIEVED_IDS = "no retrieved_doc_ids"
#: ``citation``'s and ``evidence_overlap``'s reason for such a row without ``evidence_sentences``, or for one without
#: contexts whose retrieval found nothing (``Row.sourceless``): it retrieved no document whose sentences it could name.
NO_EVIDENCE = "no evidence_sentences"
#: The reasons a metric gives a row that lacks a field a system may lack by design (``no contexts``,
#: :data:`NO_RETRIEVED_IDS` and :data:`NO_EVIDENCE`): the gates and ``ragscore compare`` do not fail an output every
#: item of which is unscorable so (nor ``combined`` of such an input, which gives its reason).
BY_DESIGN_REASONS = frozenset({*(f"no {field}" for field in OPTIONAL_FIELDS), NO_RETRIEVED_IDS, NO_EVIDENCE})


def higher_is_better(output: str) -> bool:
    """True unless the output's score counts something bad; gates, compare and reports read it."""
    return output not in LOWER_IS_BETTER


class NoParams(BaseModel):
    """Params model of a metric that takes none."""

    model_config = ConfigDict(extra="forbid")


@dataclass(frozen=True)
class RunContext:
    """What a batch metric may use beyond its rows: the suite's resource sections and the run id."""

    run_id: str
    suite: Suite
    #: Redis client of the run store, for caches (``None`` in pure in-process use).
    redis: Any = None
    #: ``scored(row, outputs)``: the worker's hook, told that ``row``'s ``outputs`` are scored (held in memory, written
    #: with the chunk's other results): the run's progress counts them before the chunk's write. None: nobody listens.
    scored: Callable[[Row, list[str]], None] | None = None
    #: The outputs of the batch metric being run (:func:`~ragscore_workers.scoring.score_rows` sets them).
    outputs: tuple[str, ...] = ()
    #: When (``time.monotonic()``) the task's soft time limit comes (:func:`~ragscore_workers.limits.soft_deadline`):
    #: judge calls end by it in any pool. None: no bound (in-process use).
    deadline: float | None = None

    def row_scored(self, row: Row) -> None:
        """A batch metric whose rows end one by one (a slow judge's) says it has finished ``row``: progress moves per
        row, not per chunk. Never raises: progress is not worth a row's score."""
        if self.scored is None or not self.outputs:
            return
        try:
            self.scored(row, list(self.outputs))
        except SoftTimeLimitExceeded:  # an Exception, raised wherever the main thread is: the task's time is up
            raise
        except Exception as exc:  # a Redis blip: the chunk's write counts the row all the same
            log.debug("progress of %s not counted before its chunk's write: %s", row.key, exc)


@dataclass(frozen=True)
class PlannedCall:
    """One provider call a metric would make for a row (``ragscore run --dry-run`` counts them and looks
    them up in the reply cache): the chat messages, the reply cap, and the template version of the cache key."""

    messages: list[dict[str, str]]
    max_tokens: int
    template_version: str


#: ``plan_calls(rows, params, suite)``: the calls a metric would make for these rows (first attempts only).
CallPlanner = Callable[[list[Row], Any, Suite], list[PlannedCall]]


@dataclass(frozen=True)
class MetricDef:
    """One registered metric."""

    name: str
    queue: Queue
    fn: Callable[..., Any]
    params_model: type[BaseModel] = NoParams
    kind: Literal["per_row", "batch", "derived"] = "per_row"
    outputs_fn: Callable[[Any], list[str]] | None = None
    description: str = ""
    #: Names of other metric outputs a derived metric reads.
    inputs: tuple[str, ...] = field(default_factory=tuple)
    #: Per-row queue choice for metrics whose rows need different workers (``checks``: a row with a
    #: code_test point goes to the code queue); ``queue`` is then the default for rows that need nothing else.
    route: Callable[[Row, Any], Queue] | None = None
    #: For metrics that call a paid provider (the judges): the calls they would make, without making them.
    plan_calls: CallPlanner | None = None
    #: Row fields whose absence the metric scores (the seed's "no contexts" is 0), instead of marking the row
    #: unscorable: a dataset in which no row has one is warned of before the run (a column named otherwise).
    scores_without: tuple[str, ...] = ()
    #: Row fields without which the metric cannot score a row (it is unscorable, ``no reference``): a dataset in
    #: which no row has one is warned of before the run, and by ``--dry-run``.
    needs: tuple[str, ...] = ()
    #: Row fields of which the metric needs one (code_test: ``code``, else a fenced code block in ``answer``): a row
    #: with none of them is unscorable, and a dataset in which no row has any is warned of as for ``needs``.
    needs_one_of: tuple[str, ...] = ()
    #: Every row field the metric reads (those of the row properties it reads too: ``sourceless`` reads ``contexts``
    #: and ``retrieved_doc_ids``; :data:`~ragscore_workers.schemas.CONTEXTS_WITHOUT_TEXT` for contexts whose text it
    #: does not read); :func:`register` adds ``needs``, ``needs_one_of`` and ``scores_without``. Its task messages
    #: carry only these, with those every message carries (:data:`~ragscore_workers.schemas.MESSAGE_FIELDS`).
    #: None: the whole row (a plug-in that declares nothing).
    reads: tuple[str, ...] | None = None

    @property
    def requirements(self) -> tuple[tuple[str, ...], ...]:
        """What a row must have to be scored: each field of ``needs`` alone, and ``needs_one_of`` as one group (a
        row has a group when it has one of its fields)."""
        return tuple((field,) for field in self.needs) + ((self.needs_one_of,) if self.needs_one_of else ())

    def queue_for(self, row: Row, params: BaseModel) -> Queue:
        """The queue that scores this metric for this row."""
        return self.route(row, params) if self.route else self.queue

    @property
    def possible_queues(self) -> tuple[Queue, ...]:
        """Every queue this metric may be routed to (workers to start for it)."""
        return ROUTABLE_QUEUES if self.route else (self.queue,)

    @property
    def queue_label(self) -> str:
        """The queue as users read it: ``embed``, or ``cpu/embed/judge/code by row`` for a routed metric."""
        return f"{'/'.join(q.value for q in self.possible_queues)} by row" if self.route else self.queue.value

    def parse_params(self, params: dict[str, Any]) -> BaseModel:
        """Validate params; raise ConfigError naming the metric and the bad field (a boolean where a number is meant
        too: pydantic's lax mode reads ``true`` as 1). A name the model lacks is refused
        as by ``extra="forbid"`` unless the model says what to do with extras: a plug-in's plain ``BaseModel`` ignored a
        typo."""
        unknown = _unknown_params(self.params_model, params)
        problems = [self._unknown_param(key) for key in unknown]
        faulty: list[tuple[Any, ...]] = [(key,) for key in unknown]  # each problem's place in the params, where known

        def noted(loc: tuple[Any, ...], raw: Any) -> str:
            faulty.append(loc)
            return place(loc, raw)

        try:
            parsed = self.params_model.model_validate(params)
            problems += booleans_read_as_numbers(params, parsed, noted)
        except ValidationError as exc:
            problems += [self._problem(e, params) for e in exc.errors()]
            faulty += [e["loc"] for e in exc.errors()]
        except Exception as exc:  # a plug-in's validator raising TypeError, which pydantic does not wrap
            problems.append(f"params: {type(exc).__name__}: {exc}")
        if problems:
            raise self._bad_params("; ".join(problems), _key_of(faulty[0]) if faulty else ())
        return parsed

    def _bad_params(self, problem: str, key: tuple[Any, ...] = ()) -> ConfigError:
        """``Bad params for metric 'recall_at_k': k: ...``; said after its place (``metrics item 2 (recall_at_k)``),
        which names the metric, ``Bad params: k: ...``; its ``loc`` the param's ``key`` in the metric's entry
        (``("params", "k")``), or the entry itself."""
        return ConfigError(f"Bad params for metric {self.name!r}: {problem}", placed=f"Bad params: {problem}",
                           loc=("params", *key) if key else ())  # fmt: skip

    def _problem(self, error: ErrorDetails, params: dict[str, Any]) -> str:
        """One of pydantic's errors as ``field: message`` (``k item 2: ...``, counted from 1); an unknown param's
        with :meth:`_unknown_param`'s hint."""
        if error["type"] == "extra_forbidden" and len(error["loc"]) == 1:
            return self._unknown_param(str(error["loc"][0]))
        where = place(error["loc"], params) or "params"
        if (wanted := _NOT_A.get(error["type"])) is not None and _scalar(error["input"]):
            return f"{where}: {_shown(error['input'])} is not {wanted}"
        message = error["msg"].removeprefix("Value error, ")  # pydantic's word for a validator's ValueError
        # a message that says its place itself, more closely (``points item 1 (a): type: ...``), is not placed again
        return message if message.startswith(f"{where} ") else f"{where}: {message}"

    def _unknown_param(self, key: str) -> str:
        """``kk: Extra inputs are not permitted (did you mean 'k'? its params: k)``."""
        names = sorted(_param_names(self.params_model))
        close = close_names(key, names)
        hint = f"{did_you_mean(close)} " if close else ""
        known = f"its params: {', '.join(names)}" if names else "it takes no params"
        return f"{key}: Extra inputs are not permitted ({hint}{known})"

    def outputs(self, params: BaseModel) -> list[str]:
        """The output names this metric writes with these params (ConfigError when a plug-in's ``outputs`` fails)."""
        if self.outputs_fn is None:
            return [self.name]
        try:
            return self.outputs_fn(params)
        except Exception as exc:
            raise self._bad_params(f"its outputs cannot be named for them ({type(exc).__name__}: {exc})") from None


#: pydantic's error types of a param given a value of another kind -> what was wanted, said with the value given
#: (``threshold: 'high' is not a number``, not "Input should be a valid number", which shows nothing of it).
_NOT_A = {
    "float_parsing": "a number",
    "float_type": "a number",
    "int_parsing": "a whole number",
    "int_type": "a whole number",
    "int_from_float": "a whole number",
    "bool_parsing": "true or false",
    "bool_type": "true or false",
}
#: How many characters of a refused value :func:`_shown` shows.
SHOWN_CHARS = 40


def _scalar(value: object) -> bool:
    """Whether a refused value is one :func:`_shown` shows: a string or a number (a boolean is said by pydantic's own
    message, or by :func:`booleans_read_as_numbers`, as YAML writes it: ``true``)."""
    return isinstance(value, (str, int, float)) and not isinstance(value, bool)


def _shown(value: str | int | float) -> str:
    """A refused param's value as Python writes it, a long string cut short (``'a long…'``)."""
    said = repr(value)
    return said if len(said) <= SHOWN_CHARS else f"{said[: SHOWN_CHARS - 1]}…"


def _unknown_params(model: type[BaseModel], params: dict[str, Any]) -> list[str]:
    """Keys of ``params`` that name no field of ``model`` as pydantic reads it: a field's name only when it has no
    alias or the model validates by name (``max_words`` of a field aliased ``maxWords`` is ignored, not set), an
    alias unless the model turns aliases off. None when the model says what it does with other keys (``extra`` set:
    "forbid" refuses them itself) or reads its input itself (a before or wrap model validator may rename a key)."""
    config = model.model_config
    validators = model.__pydantic_decorators__.model_validators.values()
    if config.get("extra") is not None or any(v.info.mode in ("before", "wrap") for v in validators):
        return []
    names = _param_names(model)
    return [str(key) for key in params if key not in names]


def _key_of(loc: tuple[Any, ...]) -> tuple[Any, ...]:
    """``loc`` up to its last key (``("k",)`` of ``("k", 0)``): a bad param is pointed at by its key, not its value."""
    last = max((i for i, step in enumerate(loc) if isinstance(step, str)), default=-1)
    return loc[: last + 1]


def _param_names(model: type[BaseModel]) -> set[str]:
    """The keys ``model`` reads params from (see :func:`_unknown_params`)."""
    config = model.model_config
    by_name = bool(config.get("validate_by_name") or config.get("populate_by_name"))
    by_alias = config.get("validate_by_alias", True) is not False
    names: set[str] = set()
    for name, info in model.model_fields.items():
        aliases = (info.alias, info.validation_alias)
        if by_name or all(alias is None for alias in aliases):
            names.add(name)
        for alias in aliases if by_alias else ():
            for choice in alias.choices if isinstance(alias, AliasChoices) else [alias]:
                if isinstance(choice, str):
                    names.add(choice)
                elif isinstance(choice, AliasPath) and isinstance(choice.path[0], str):  # its first key is a param
                    names.add(choice.path[0])
    return names


_REGISTRY: dict[str, MetricDef] = {}
#: Queues a routed metric may be sent to.
ROUTABLE_QUEUES = (Queue.CPU, Queue.EMBED, Queue.JUDGE, Queue.CODE)


def register(
    name: str,
    queue: Queue,
    *,
    params: type[BaseModel] = NoParams,
    kind: Literal["per_row", "batch", "derived"] = "per_row",
    outputs: Callable[[Any], list[str]] | None = None,
    inputs: Sequence[str] = (),
    route: Callable[[Row, Any], Queue] | None = None,
    plan_calls: CallPlanner | None = None,
    scores_without: Sequence[str] = (),
    needs: Sequence[str] = (),
    needs_one_of: Sequence[str] = (),
    reads: Sequence[str] | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: register ``fn`` as metric ``name`` on ``queue``."""

    def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
        known = _REGISTRY.get(name)
        if known is not None and _where(known.fn) != _where(fn):  # the same function again is a reload
            raise ConfigError(f"metric {name!r} is registered twice: by {_where(known.fn)} and by {_where(fn)}")
        summary = (fn.__doc__ or "").strip().split("\n\n")[0]  # the docstring's first paragraph
        _REGISTRY[name] = MetricDef(
            name=name,
            queue=queue,
            fn=fn,
            params_model=params,
            kind=kind,
            outputs_fn=outputs,
            description=" ".join(summary.split()),
            inputs=tuple(inputs),
            route=route,
            plan_calls=plan_calls,
            scores_without=tuple(scores_without),
            needs=tuple(needs),
            needs_one_of=tuple(needs_one_of),
            reads=None if reads is None else tuple(dict.fromkeys((*needs, *needs_one_of, *scores_without, *reads))),
        )
        return fn

    return decorator


def _where(fn: Callable[..., Any]) -> str:
    """``module.function`` of a metric function: a module imported again (a notebook's reload, a plug-in retried
    after its import failed half-way) registers the same names, which is no clash."""
    return f"{fn.__module__}.{fn.__qualname__}"


def all_metrics() -> dict[str, MetricDef]:
    """Every registered metric, after loading the built-in families and plug-ins."""
    from . import load_all

    load_all()
    return dict(_REGISTRY)


def get_metric(name: str, known: dict[str, MetricDef] | None = None) -> MetricDef:
    """Look a metric up by name among ``known`` (:func:`all_metrics`, loaded here where None: a suite's many entries
    read one load); unknown names raise with close matches."""
    known = all_metrics() if known is None else known
    if name not in known:
        owners = [metric for metric, mdef in sorted(known.items()) if name in _default_outputs(mdef)]
        raise UnknownMetricError(name, close_names(name, known), sorted(known), owners)
    return known[name]


def _default_outputs(mdef: MetricDef) -> list[str]:
    """The outputs of a metric under its default params (none where its params have no defaults, or where a
    plug-in's ``outputs`` fails for them: an unknown name is said as unknown, not as that plug-in's problem)."""
    try:
        return mdef.outputs(mdef.params_model())
    except (ValueError, ConfigError):  # pydantic's ValidationError: a param without a default; outputs that fail
        return []


def resolve(suite: Suite) -> list[tuple[MetricDef, BaseModel]]:
    """Check every metric of a suite exists and its params are valid; return them parsed. Every metric's problem is
    said at once (:func:`~ragscore_workers.errors.raise_problems`: a lone one as it is), then the checks across the
    metrics (outputs written twice, a derived metric's inputs), which need them all."""
    names = [spec.name for spec in suite.metrics]
    firsts = _first_entries(names)
    known = all_metrics()  # once: each load reads the settings (RAGSCORE_PLUGINS) anew
    problems: list[Problem] = []
    written: list[tuple[MetricDef, BaseModel, list[str]]] = []
    for index, spec in enumerate(suite.metrics):
        try:
            mdef = get_metric(spec.name, known)
            params = mdef.parse_params(spec.params)
            written.append((mdef, params, mdef.outputs(params)))
        except ConfigError as exc:
            exc.loc = ("metrics", index, *exc.loc)
            # an unknown name listed again is said unknown once (and listed twice, below)
            if not (isinstance(exc, UnknownMetricError) and firsts[spec.name] < index):
                problems.append((place(("metrics", index), {"metrics": names}), exc))
    problems += _listed_twice(names, firsts)
    raise_problems(problems)
    raise_problems(_across_metrics([(mdef, outputs) for mdef, _, outputs in written]))
    return [(mdef, params) for mdef, params, _ in written]


def _first_entries(names: list[str]) -> dict[str, int]:
    """Each metric name of the suite -> the index of its first entry."""
    firsts: dict[str, int] = {}
    for index, name in enumerate(names):
        firsts.setdefault(name, index)
    return firsts


def _listed_twice(names: list[str], firsts: dict[str, int]) -> list[Problem]:
    """A problem for every entry of a metric the suite listed before (the second, the third ...), at that entry,
    naming the first (``firsts``: :func:`_first_entries` of ``names``), in the suite's order."""
    return [(place(("metrics", again), {"metrics": names}), ConfigError(
                f"Metric listed twice in the suite: {name}: list each metric once", loc=("metrics", again),
                first=("metrics", firsts[name])))
            for again, name in enumerate(names) if firsts[name] < again]  # fmt: skip


def _across_metrics(written: list[tuple[MetricDef, list[str]]]) -> list[Problem]:
    """The problems of a suite's metrics taken together (each metric and its outputs, in the suite's order): an output
    a metric writes that an earlier one writes too (at the later one, naming the first writer; one problem for each
    such pair, naming the outputs they share), a derived metric whose inputs no metric writes, a suite of derived
    metrics alone."""
    problems: list[Problem] = []
    writers: dict[str, int] = {}  # each output's first writer
    clashes: dict[tuple[int, int], list[str]] = {}  # (the first writer, a later one): the outputs both write
    for index, (_, outputs) in enumerate(written):
        for output in outputs:
            if (first := writers.setdefault(output, index)) != index:
                clashes.setdefault((first, index), []).append(output)
    for (first, again), outputs in sorted(clashes.items(), key=lambda clash: clash[0][::-1]):
        names = f"{written[first][0].name} and {written[again][0].name}"
        clash = (f"Two metrics of the suite write the same {noun_names(outputs, 'output')} (by {names}): one "
                 "would overwrite the other's scores; drop one, or rename the plug-in metric")  # fmt: skip
        problems.append((_metric_place(written, again), ConfigError(clash, loc=("metrics", again),
                                                                     first=("metrics", first))))  # fmt: skip
    produced = {o for mdef, outputs in written if mdef.kind != "derived" for o in outputs}
    for index, (mdef, _) in enumerate(written):
        missing = [i for i in mdef.inputs if i not in produced]
        if mdef.kind == "derived" and missing:
            needs = f"Derived metric {mdef.name!r} needs {', '.join(missing)} in the same suite."
            problems.append((_metric_place(written, index), ConfigError(needs, loc=("metrics", index))))
    if not problems and all(mdef.kind == "derived" for mdef, _ in written):  # said by a derived metric's inputs first
        problems.append(
            ("", ConfigError("The suite has only derived metrics; add the metrics they are computed from."))
        )
    return problems


def _metric_place(written: list[tuple[MetricDef, list[str]]], index: int) -> str:
    """``metrics item 2 (mrr)``: the place of the suite's metric ``index``."""
    return place(("metrics", index), {"metrics": [mdef.name for mdef, _ in written]})


def parse_spec(spec: MetricSpec) -> tuple[MetricDef, BaseModel]:
    """Registry lookup + params parse for one spec carried in a task message."""
    mdef = get_metric(spec.name)
    return mdef, mdef.parse_params(spec.params)
