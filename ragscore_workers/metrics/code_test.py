"""``code_test``: run the row's code in a sandbox and check its exit code and stdout.

The code is the row's ``code`` field, else the first fenced code block of the answer; a row with neither
is unscorable. A ``test`` param (Python asserts, HumanEval's ``check``) runs after the code in the same program.
Limits come from the suite's ``sandbox`` section, overridden by ``timeout_s`` and
``memory_mb``. It is a batch metric because only batch metrics see the suite (``ctx.suite.sandbox``);
the rows of a chunk run one after another, and workers run chunks in parallel.

:func:`run_code_test` is the same check without a row, for the evaluation points' ``code_test`` validator.
"""

from __future__ import annotations

import ast
import re
import secrets
from collections.abc import Collection, Mapping
from dataclasses import replace
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from ..errors import ConfigError, MetricError
from ..sandbox import LANGUAGES, ExecResult, Limits, SandboxError, get_sandbox
from ..sandbox._base import last_line, memory_report
from ..sandbox.docker import DEFAULT_IMAGE
from ..schemas import SANDBOX_MEMORY_MB, SANDBOX_TIMEOUT_S, MetricResult, Queue, Row, SandboxConfig
from ..unicode_text import lone_surrogate_at, surrogate_index
from ._bounded_regex import RegexError, bounded_regex
from .registry import RunContext, register, unset_means

__all__ = [
    "CODE_COLUMNS",
    "DETAIL_CHARS",
    "CodeTestParams",
    "code_and_source",
    "code_column_hint",
    "code_column_note",
    "code_test",
    "extract_code",
    "fenced_code",
    "judge",
    "row_code",
    "run_code_test",
]

#: Columns of code-generation datasets (HumanEval, MBPP, model outputs) that hold code no metric reads: a row without
#: code that gives one is told to give it as ``code``.
CODE_COLUMNS = ("completion", "solution", "generated_code", "canonical_solution")

#: Characters of stdout (its head) and stderr (its tail) kept in a result's details.
DETAIL_CHARS = 2000

# A CommonMark opening fence: ``` or ~~~ (3 or more) and an info string (no backtick after a backtick fence).
# Any indentation: a fence inside a list item is indented by the item's marker width, and more when nested.
_OPENING = re.compile(r"^(?P<indent>[ ]*)(?P<fence>`{3,}(?=[^`\n]*$)|~{3,})[^\n]*$", re.MULTILINE)


class CodeTestParams(BaseModel):
    """What a passing program does. With neither ``stdout`` nor ``stdout_regex`` only the exit code counts."""

    model_config = ConfigDict(extra="forbid")

    #: Expected stdout; trailing whitespace of each line and trailing blank lines are ignored.
    stdout: str | None = Field(default=None, json_schema_extra=unset_means("not checked"))
    #: A regular expression searched for in stdout (``re.search``; anchor it to match the whole).
    stdout_regex: str | None = Field(default=None, json_schema_extra=unset_means("not checked"))
    #: 0 to 128: both backends report a death by signal N as 128 + N, so a higher code reads as killed.
    exit_code: int = 0
    stdin: str = ""
    #: Override the suite's ``sandbox.timeout_s`` / ``sandbox.memory_mb`` (in an evaluation point: only lower them).
    #: A value outside what the sandbox takes (``SANDBOX_TIMEOUT_S``, ``SANDBOX_MEMORY_MB``) is taken as its nearest
    #: end: these come with the data too (a row's own points), which is capped, never refused.
    timeout_s: float | None = Field(
        default=None, gt=0, allow_inf_nan=False, json_schema_extra=unset_means("the suite's sandbox.timeout_s")
    )
    memory_mb: int | None = Field(default=None, gt=0, json_schema_extra=unset_means("the suite's sandbox.memory_mb"))
    #: Container image (docker backend only; the local backend runs the host's interpreter).
    image: str | None = Field(default=None, json_schema_extra=unset_means(f"{DEFAULT_IMAGE}, on the docker backend"))
    language: str = "python"
    #: Python source run after the code, in the same program (the code, a newline, then the test): asserts, or
    #: HumanEval's ``def check(candidate): ...`` and ``check(add)``. A failed assert fails the program, and so does
    #: one exiting with 0 before the test's end (code calling ``sys.exit()``: see :func:`_test_marker`).
    test: str | None = Field(default=None, json_schema_extra=unset_means("no test"))
    #: ``timeout_s`` / ``memory_mb`` as given, for those taken as the nearest end of their range (said in a note).
    _given: dict[str, int | float] = PrivateAttr(default_factory=dict)

    @field_validator("timeout_s", "memory_mb")
    @classmethod
    def _what_the_sandbox_takes(cls, value: float | None, info: ValidationInfo) -> float | None:
        least, most = SANDBOX_TIMEOUT_S if info.field_name == "timeout_s" else SANDBOX_MEMORY_MB
        return None if value is None else min(max(value, least), most)

    @model_validator(mode="wrap")
    @classmethod
    def _keep_what_was_given(cls, data: Any, handler: ModelWrapValidatorHandler[CodeTestParams]) -> CodeTestParams:
        """Keep a limit taken as its range's nearest end as it was given: a row's point asking for 1000 s ran under
        600, and nothing said so."""
        params = handler(data)
        if isinstance(data, Mapping):
            for name in ("timeout_s", "memory_mb"):
                # the number as given, never converted: row data keeps big ints (memory_mb 10**400), which float()
                # cannot take; a number given as text is taken as pydantic takes it, unsaid
                given = data.get(name)
                if isinstance(given, (int, float)) and not isinstance(given, bool) and given != getattr(params, name):
                    params._given[name] = given
        return params

    def range_notes(self) -> dict[str, str]:
        """``{"timeout_s": "timeout_s 1000 was taken as 600, the most the sandbox takes"}``, each limit taken so."""
        notes = {}
        for name, given in self._given.items():
            taken = getattr(self, name)
            end = "most" if given > taken else "least"
            notes[name] = (
                f"{name} {_limit_text(name, given)} was taken as {_limit_text(name, taken)}, the {end} the "
                "sandbox takes"
            )
        return notes

    @field_validator("language")
    @classmethod
    def _known_language(cls, value: str) -> str:
        if value not in LANGUAGES:
            raise ValueError(f"unsupported language {value!r}; choose from {', '.join(sorted(LANGUAGES))}")
        return value

    @field_validator("stdout", "stdout_regex", "stdin", "test")
    @classmethod
    def _utf8_text(cls, value: str | None) -> str | None:
        if value is not None and (where := lone_surrogate_at(value)) is not None:
            raise ValueError(f"holds a lone surrogate ({where.removeprefix('value: ')}), which UTF-8 cannot hold")
        return value

    @field_validator("test")
    @classmethod
    def _not_blank(cls, value: str | None) -> str | None:
        """A blank test (an MBPP row's empty ``test_list``) would pass any code that runs, untested."""
        if value is not None and not value.strip():
            raise ValueError("test is blank: give the Python source to run after the code, or no test")
        return value

    @field_validator("test")
    @classmethod
    def _runs_something(cls, value: str | None) -> str | None:
        """A test that only defines (HumanEval's ``test`` column without its ``check(<entry_point>)`` call) would
        pass any code that runs, untested, as a blank one would."""
        if value is None or (defined := _only_defines(value)) is None:
            return value
        if not defined:
            raise ValueError(
                "test runs nothing: it holds no assert and no call (only imports, assignments or comments)"
            )
        raise ValueError(
            f"test runs nothing: it only defines {', '.join(defined)}; call what it defines (HumanEval's test is "
            "followed by check(<its entry_point>))"
        )

    @field_validator("exit_code")
    @classmethod
    def _reachable_exit_code(cls, value: int) -> int:
        if not 0 <= value <= 128:
            raise ValueError(
                f"exit_code {value} can never pass: exit codes are 0 to 255 and the sandbox reads one above 128 "
                "(128 + N) as a death by signal N; give 0 to 128"
            )
        return value

    @field_validator("stdout_regex")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                bounded_regex(value)
            except RegexError as exc:
                raise ValueError(f"invalid regular expression: {exc}") from exc
        return value

    @model_validator(mode="after")
    def _one_stdout_check(self) -> CodeTestParams:
        if self.stdout is not None and self.stdout_regex is not None:
            raise ValueError("give stdout or stdout_regex, not both")
        return self

    @model_validator(mode="after")
    def _test_in_python(self) -> CodeTestParams:
        if self.test is not None and self.language != "python":
            raise ValueError(f"test is Python source: only for language python, not {self.language!r}")
        return self

    def program(self, code: str) -> tuple[str, str | None]:
        """What runs, and what it writes to stderr (fd 2) after its ``test`` ran to its end (:func:`_test_marker`),
        or None without a test. The program is ``code``, then (after a newline) the ``test``, whose lines are numbered
        after the code's, then the line writing the marker."""
        if self.test is None:
            return code, None
        marker = _test_marker()
        # an import statement, not __import__(): a name the code defines at module level would be called instead
        return f"{code}\n{self.test}\nimport os as _ragscore_os; _ragscore_os.write(2, {marker.encode()!r})\n", marker


#: Tests longer than this are not parsed for :func:`_only_defines` (the worker parses data the row's author wrote).
_PARSED_CHARS = 200_000


def _only_defines(test: str) -> list[str] | None:
    """The names ``test`` defines when it runs nothing as it runs: its top-level statements (and its classes' bodies,
    which run at once) are definitions without decorators, imports, ``pass``, bare constants (a docstring) and
    assignments, with no call in what they evaluate (a default value, a base class, HumanEval's ``METADATA = {...}``),
    else None. A test that does not parse here (newer syntax than the worker's Python, or too long to parse) is None:
    it is run, never refused."""
    if len(test) > _PARSED_CHARS:
        return None
    try:
        body = ast.parse(test).body
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    todo = list(body)
    while todo:
        node = todo.pop()
        evaluated: list[ast.AST] = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node.decorator_list:  # a decorator may call what it decorates
                return None
            if isinstance(node, ast.ClassDef):
                evaluated += [*node.bases, *node.keywords]
                todo += node.body
            else:
                evaluated += [*node.args.defaults, *(d for d in node.args.kw_defaults if d is not None)]
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            evaluated.append(node)
        elif not isinstance(node, (ast.Import, ast.ImportFrom, ast.Pass)) and not (
            isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        ):
            return None
        if any(isinstance(n, (ast.Call, ast.Await)) for part in evaluated for n in ast.walk(part)):
            return None
    return [node.name for node in body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]


def _limit_text(name: str, value: float) -> str:
    """A limit as a note says it: seconds as ``:g`` (``0.5``, ``600``), MiB as :func:`_mib` does."""
    return f"{value:g}" if name == "timeout_s" else _mib(value)


def _mib(value: float) -> str:
    """MiB as a whole number (``1,048,576``; ``:g`` read ``1.04858e+06``); one too long to read (``memory_mb``
    10**400, from row data) by its length."""
    text = f"{int(value):,}"
    return text if len(text) <= 25 else f"(a {len(str(int(value)))}-digit number)"


def extract_code(row: Row) -> str | None:
    """The row's ``code``, else the body of the answer's first fenced code block, else None."""
    return code_and_source(row)[0]


def row_code(row: Row) -> str | None:
    """The row's ``code``, or None where it has none or a blank one (a fenced code block is taken instead)."""
    return row.code if row.code and row.code.strip() else None


def code_and_source(row: Row) -> tuple[str | None, str]:
    """:func:`extract_code`'s code for ``row``, and how a message names it (``the row's code``)."""
    if (code := row_code(row)) is not None:
        return code, "the row's code"
    return fenced_code(row.answer or ""), "the first fenced code block of the answer"


def code_column_hint(row: Row) -> str:
    """For a row without code: ``" (the row's `completion` field is not read: ...)"``, naming the first of
    :data:`CODE_COLUMNS` the row gives as text (kept as an extra column), else ``""``."""
    extra = row.model_extra or {}
    return code_column_note({name for name, value in extra.items() if isinstance(value, str) and value.strip()})


def code_column_note(columns: Collection[str]) -> str:
    """``" (the row's `completion` field is not read: ...)"`` for the first of :data:`CODE_COLUMNS` among
    ``columns``, else ``""``: said of a row after the run, and of the dataset's columns before it."""
    for name in CODE_COLUMNS:
        if name in columns:
            return (f" (the row's `{name}` field is not read: give the program as `code`, renaming the column in "
                    "the dataset)")  # fmt: skip
    return ""


def _unencodable(code: str, what: str) -> str | None:
    """``"<what> cannot be encoded as UTF-8: it holds a lone surrogate, U+DC80 (line 2, column 8)"``, or None."""
    if (at := surrogate_index(code)) is None:
        return None
    line, column = code.count("\n", 0, at) + 1, at - code.rfind("\n", 0, at)
    return (f"{what} cannot be encoded as UTF-8: it holds a lone surrogate, U+{ord(code[at]):04X} "
            f"(line {line}, column {column})")  # fmt: skip


def fenced_code(text: str) -> str | None:
    """The body of the first fenced code block of ``text`` (CommonMark's rules), or None.

    As CommonMark says, a block closes at a line of at least as many of the same fence characters (indented
    at most 3 spaces more than the opening fence) or at the end of the text, and an opening fence indented
    N spaces (in a list item) has up to N spaces of indentation removed from each line of its body.
    """
    match = _OPENING.search(text)
    if match is None:
        return None
    indent, fence = len(match.group("indent")), match.group("fence")
    body: list[str] = []
    closed = False
    for line in text[match.end() + 1 :].split("\n"):
        stripped = line.lstrip(" ")
        closing = stripped.rstrip(" \t\r")
        if len(line) - len(stripped) <= indent + 3 and closing.startswith(fence) and not closing.strip(fence[0]):
            closed = True
            break
        body.append(line[min(indent, len(line) - len(stripped)) :])
    code = "\n".join(body) + ("\n" if closed and body else "")
    return code if code.strip() else None


def _normalize(text: str) -> str:
    lines = text.replace("\r\n", "\n").split("\n")
    return "\n".join(line.rstrip() for line in lines).rstrip("\n")


def _first_difference(stdout: str, expected: str) -> str:
    """Where a program's output first differs from the expected one (both as :func:`_normalize` leaves them), its
    lines quoted as a failure quotes stderr (:func:`_short`)."""
    got, wanted = _normalize(stdout), _normalize(expected)
    if not got:
        return f'it printed nothing, expected "{_short(wanted)}"'
    if not wanted:  # its first line that is not blank: there is one, as the normalized output is not empty
        printed = next(line for line in got.split("\n") if line)
        return f'it printed "{_short(printed)}", expected nothing'
    got_lines, wanted_lines = got.split("\n"), wanted.split("\n")
    shared = min(len(got_lines), len(wanted_lines))
    at = next((i for i in range(shared) if got_lines[i] != wanted_lines[i]), shared)
    if at == len(wanted_lines):
        most = "1 line" if at == 1 else f"{at} lines"
        return f'line {at + 1} is "{_short(got_lines[at])}", expected no more than {most}'
    if at == len(got_lines):
        return f'line {at + 1} is missing, expected "{_short(wanted_lines[at])}"'
    return f'line {at + 1} is "{_short(got_lines[at])}", expected "{_short(wanted_lines[at])}"'


def _test_marker() -> str:
    """What a program writes to its stderr (fd 2) after its ``test`` ran to its end, fresh for each run: the code,
    which runs first, cannot know it unless it reads its own ``main.py`` (a program written to pass can; one that
    exits by accident cannot pass as tested)."""
    return f"\nragscore: the test ran to its end {secrets.token_hex(16)}\n"


def _without_cut_marker(stderr: str, marker: str) -> str:
    """``stderr`` without the start of ``marker`` it ends with (2 characters or more: one is a bare newline), as the
    output cap cut it."""
    for size in range(len(marker) - 1, 1, -1):
        if stderr.endswith(marker[:size]):
            return stderr[:-size]
    return stderr


#: The errors a program gets reaching for the network the sandbox lacks: a TCP or UDP socket under ``local``
#: (EAFNOSUPPORT), a host name anywhere (the resolver's -2, -3, -5), an address under docker's ``network_mode: none``.
_NO_NETWORK = re.compile(r"\[Errno (?:97|101|-2|-3|-5)\]")


#: A call that starts a process, as a traceback's last frame shows it when the process was refused: ``os.fork()``
#: (multiprocessing's too), subprocess's ``_fork_exec(``, ``os.posix_spawn(``, ``os.forkpty()``. Only the call: a
#: function, file or log line that names forks is no process refused.
_STARTS_A_PROCESS = re.compile(r"\b_?(?:fork|forkpty|fork_exec|posix_spawnp?)\(")


def _quoted_stderr(last: str, stderr: str, limits: Limits | None, backend: str) -> str:
    """The failure's quote of the last line of stderr, saying when it reads as the sandbox's missing network, its
    file-size limit (EFBIG: Python ignores SIGXFSZ, so the write fails instead) or its process limit (a refused
    thread: or, on the ``local`` backend, its address-space limit)."""
    note = ""
    if _NO_NETWORK.search(last):
        note = "; the sandbox has no network"
    elif "[Errno 27]" in last:
        most = "" if limits is None else f", at most {_mib(limits.file_mb)} MiB"
        note = f"; a file grew past the sandbox's file-size limit{most}"
    elif _refused_a_process(stderr):
        note = f"; it hit the sandbox's process limit{_processes(limits)}"
    elif last.startswith("RuntimeError: can't start new thread"):
        note = f"; a thread is refused past the sandbox's process limit{_processes(limits)}"
        if backend == "local":  # its stack may not fit the address space either; docker's memory cgroup refuses none
            note += " or its memory limit" + ("" if limits is None else f" ({_mib(limits.memory_mb)} MiB)")
    return f' (its stderr ends "{_short(last)}"{note})'


def _processes(limits: Limits | None) -> str:
    """``" (16 processes and threads at once)"``: the process limit as a note says it, or ``""`` unknown."""
    return "" if limits is None else f" ({limits.processes} processes and threads at once)"


def _refused_a_process(stderr: str) -> bool:
    """Did the process limit (RLIMIT_NPROC, docker's pids limit) refuse the program a process: does the tail of its
    stderr hold a traceback ending in EAGAIN (``BlockingIOError: [Errno 11]``) from a fork or spawn its last frame
    calls (a non-blocking socket's EAGAIN is no process refused)? Any traceback of the tail, not only the last line:
    a fork bomb's processes write theirs at once, and the sandbox ends when its first process does."""
    lines = [line for line in stderr[-2000:].splitlines() if line.strip()]
    return any(
        line.startswith("BlockingIOError: [Errno 11]") and _STARTS_A_PROCESS.search(_last_frame_source(lines[:at]))
        for at, line in enumerate(lines)
    )


def _last_frame_source(lines: list[str]) -> str:
    """The source a traceback's last frame shows, where ``lines`` end in one: its indented lines (with their carets)
    after its ``File "...", line N`` line, not the ``File`` line (its function's name) nor an unindented line above."""
    source: list[str] = []
    for line in reversed(lines):
        if not line.startswith(" ") or line.lstrip().startswith('File "'):
            break
        source.append(line)
    return "\n".join(source)


def _short(line: str) -> str:
    """A line of the program's stderr as a failure quotes it: its first 100 characters."""
    return line if len(line) <= 100 else line[:99] + "…"


def _why_limit(limit: str, name: str, asked: Mapping[str, float]) -> str:
    """``limit``, and when a row's point asked for more, that it ran under the suite's."""
    if name in asked:
        return f"{limit}: the suite's sandbox.{name}, which a row's points may lower, never raise"
    return limit


def _stopped_by(result: ExecResult, limits: Limits | None, asked: Mapping[str, float]) -> str:
    """Why the sandbox stopped the program, with the limit it hit ("timeout" alone did not say after how long, nor
    that a row's point asking for a longer one ran under the suite's).

    ``memory`` is the program's own word when it ended saying so (its last line of stderr, :func:`memory_report`): an
    allocation refused under RLIMIT_AS reads so, and so does ``raise MemoryError``. That is said as its report, with
    the limit it ran under, not as the limit hit; only a kill (the docker backend's memory cgroup) hit the limit."""
    stopped = result.stopped_by
    said = f"stopped by the sandbox: {stopped}"
    if stopped == "memory" and result.signal is None and (report := memory_report(result.stderr)) is not None:
        report = _short(report)
        limit = (
            ""
            if limits is None
            else "; " + _why_limit(f"memory limit {_mib(limits.memory_mb)} MiB", "memory_mb", asked)
        )
        return f'reported out of memory (its stderr ends "{report}"; exit code {result.exit_code}{limit})'
    if stopped in ("cpu_limit", "file_limit"):
        what = ("SIGXCPU: a process used up its CPU-time limit" if stopped == "cpu_limit"
                else "SIGXFSZ: a file grew past its file-size limit")  # fmt: skip
        if limits is not None:  # "at most": the program may have lowered it itself
            what += f", at most {limits.cpu_s} s" if stopped == "cpu_limit" else f", at most {_mib(limits.file_mb)} MiB"
        return f"{said} (signal {result.signal}, {what})" if result.signal is not None else f"{said} ({what})"
    if stopped == "killed" and result.signal is not None:
        return f"{said} (signal {result.signal})"
    if stopped in ("process_limit", "init_stopped"):
        return f"{said} ({_still_running(stopped, limits, asked)})"
    if limits is None or stopped not in ("timeout", "memory", "output_limit"):
        return said
    if stopped == "output_limit":
        mib, rest = divmod(limits.output_bytes, 2**20)
        most = f"{_mib(mib)} MiB" if not rest else f"{limits.output_bytes:,} bytes"
        return f"{said} (more than {most} of stdout and stderr)"
    if stopped == "timeout":
        return f"{said} ({_why_limit(f'its {limits.timeout_s:g} s limit', 'timeout_s', asked)})"
    killed = f"killed at its {_mib(limits.memory_mb)} MiB limit" + (
        f", signal {result.signal}" if result.signal else ""
    )
    return f"{said} ({_why_limit(killed, 'memory_mb', asked)})"


def _still_running(stopped: str, limits: Limits | None, asked: Mapping[str, float]) -> str:
    """Why a program the wall clock stopped was still running: at the process limit (a fork bomb), or hiding its end by
    stopping the sandbox's pid-1 (ptrace)."""
    clock = "its time limit" if limits is None else _why_limit(f"its {limits.timeout_s:g} s limit", "timeout_s", asked)
    if stopped == "process_limit":
        most = "" if limits is None else f" {limits.processes}"
        return f"process limit{most} reached: its processes and threads were all in use when {clock} ran out"
    return f"it stopped the sandbox's pid 1 (ptrace), which hid its end, and ran until {clock}"


def judge(
    result: ExecResult,
    params: CodeTestParams,
    limits: Limits | None = None,
    *,
    asked: Mapping[str, float] | None = None,
    marker: str | None = None,
) -> tuple[bool, dict[str, Any]]:
    """Did the run pass? Returns ``(passed, details)``; ``details["failures"]`` says why not.

    ``limits``: what the program ran under, named in a failure the sandbox stopped; ``asked``: the limits a row's point
    asked for above those (``{"timeout_s": 600}``; the program ran under the suite's), said after the limit they
    name; ``marker``: what the program (:meth:`CodeTestParams.program`) writes to stderr after its test, required
    when it exits with 0 (code that exited first passed untested) and taken out of the stderr kept, as is what the
    output cap left of it."""
    failures: list[str] = []
    head, found, tail = result.stderr.rpartition(marker) if marker else ("", "", result.stderr)
    stderr = head + tail
    if marker and not found and result.truncated:  # the output cap cut the line: what it left of it ends stderr
        stderr = _without_cut_marker(stderr, marker)
    if result.stopped_by is not None:
        failures.append(_stopped_by(result, limits, asked or {}))
    elif result.exit_code != params.exit_code:
        failure = f"exit code {result.exit_code}, expected {params.exit_code}"
        if (last := last_line(stderr)) is not None:
            failure += _quoted_stderr(last, stderr, limits, result.backend)
        failures.append(failure)
    elif marker and not found and result.exit_code == 0:
        failures.append("the test did not run to its end: the program exited first (exit code 0)")
    if params.stdout is not None and _normalize(result.stdout) != _normalize(params.stdout):
        failures.append(f"stdout differs from the expected output: {_first_difference(result.stdout, params.stdout)}")
    if params.stdout_regex is not None:
        try:
            if not bounded_regex(params.stdout_regex).search(result.stdout):
                failures.append("stdout does not match stdout_regex")
        except ValueError as exc:  # the output makes the pattern backtrack past its time bound: no match found
            failures.append(f"stdout does not match stdout_regex: {exc}")
    details = {
        "exit_code": result.exit_code,
        "stopped_by": result.stopped_by,
        "signal": result.signal,
        "duration_s": result.duration_s,
        "stdout": result.stdout[:DETAIL_CHARS],
        "stderr": stderr[-DETAIL_CHARS:],
        "output_truncated": result.truncated or len(result.stdout) > DETAIL_CHARS or len(stderr) > DETAIL_CHARS,
        "backend": result.backend,
        "failures": failures,
    }
    return not failures, details


def run_code_test(
    code: str,
    params: CodeTestParams | Mapping[str, Any],
    sandbox_config: SandboxConfig | None = None,
    *,
    from_data: bool = False,
    what: str = "the code",
) -> tuple[bool, dict[str, Any]]:
    """Run ``code`` in the configured sandbox and check it: ``(passed, details)``.

    ``from_data``: the params come with the data (a row's evaluation points), which the code's author may
    write: they can lower the suite's ``sandbox`` limits but never raise them, nor choose the container image.
    Raises :class:`ConfigError` for bad params, :class:`MetricError` for code that cannot be written as UTF-8 (a
    lone surrogate; ``what`` names the code there, as ``"the row's code"``) and :class:`SandboxError` when the
    sandbox itself fails; a failing program is ``(False, details)``.
    """
    if (unencodable := _unencodable(code, what)) is not None:
        raise MetricError(unencodable)
    if not isinstance(params, CodeTestParams):
        try:
            params = CodeTestParams.model_validate(dict(params))
        except ValidationError as exc:
            raise ConfigError(f"Bad code_test params: {exc.errors()[0]['msg']}") from exc
    program, marker = params.program(code)
    config = sandbox_config or SandboxConfig()
    if from_data and params.image is not None:
        raise ConfigError("an evaluation point may not choose the container image (only the suite's code_test may)")
    timeout_s, memory_mb = params.timeout_s or config.timeout_s, params.memory_mb or config.memory_mb
    asked: dict[str, float] = {}
    if from_data:
        wanted = {"timeout_s": params.timeout_s, "memory_mb": params.memory_mb}
        timeout_s, memory_mb = min(timeout_s, config.timeout_s), min(memory_mb, config.memory_mb)
        applied = {"timeout_s": timeout_s, "memory_mb": memory_mb}
        asked = {k: v for k, v in wanted.items() if v is not None and v > applied[k]}
    limits = Limits(timeout_s=timeout_s, memory_mb=memory_mb)
    # the line the test's end writes is ragscore's: the program's own output may still fill the cap
    run_under = limits if marker is None else replace(limits, output_bytes=limits.output_bytes + len(marker))
    sandbox = get_sandbox(config.backend)
    result = sandbox.run(program, language=params.language, stdin=params.stdin, limits=run_under, image=params.image)
    passed, details = judge(result, params, limits, asked=asked, marker=marker)
    # a limit outside the sandbox's range, when the program ran under the end it was taken as (not the suite's lower)
    ran_under = {"timeout_s": timeout_s, "memory_mb": memory_mb}
    notes = [note for name, note in params.range_notes().items() if ran_under[name] == getattr(params, name)]
    if notes:
        details["notes"] = notes
    return passed, details


@register("code_test", Queue.CODE, params=CodeTestParams, kind="batch", needs_one_of=("code", "answer"))
def code_test(rows: list[Row], params: CodeTestParams, ctx: RunContext) -> list[MetricResult]:
    """1.0 when the code (the row's code field, else the answer's first fenced code block) exits with the expected
    code and prints the expected output, else 0.0."""
    results = []
    for row in rows:
        code, what = code_and_source(row)
        if code is None:
            reason = "no code: no `code` field and no fenced code block in the answer" + code_column_hint(row)
            results.append(MetricResult.unscorable(reason))
            continue
        try:
            passed, details = run_code_test(code, params, ctx.suite.sandbox, what=what)
        except (SandboxError, ConfigError, MetricError) as exc:  # not the program failing: this item's error
            results.append(MetricResult.failed(f"{type(exc).__name__}: {exc}"))
            continue
        results.append(MetricResult(score=1.0 if passed else 0.0, passed=passed, details=details))
    return results
