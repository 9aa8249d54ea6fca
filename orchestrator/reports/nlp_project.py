"""``--format nlp-project``: the document-grounded QA framework's ``{split}_evaluation.json`` and console summary.

The file is ``{system: {"retrieval": ..., "citation": ..., "llm_judge": ...}}`` with exactly the seed's keys
(see tests/data/nlp-project/output/*_evaluation.json), so scripts that read those files keep working:

* ``retrieval`` (from ``recall_at_k``): counts of hits, ``total``, ``per_question`` and ``recall_at_K_pct``;
* ``citation`` (from ``citation``): sums and averages over the questions with gold evidence;
* ``llm_judge`` (from ``rubric_judge``, ``evidence_overlap``, ``combined``): sums and averages over the
  questions the judge scored (answer scores on the 1-5 scale).

A section is written only when the run has its metrics. ``gold_doc_id`` comes from the run's dataset when it
can still be read (the item results do not carry it), else it is ``null``. Memory: the per-question lists
the format asks for, nothing more (the format is for datasets of thousands of questions, not millions).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ragscore_workers.store import RawItem

__all__ = ["console_summary", "evaluation_json", "gold_doc_ids", "left_out", "split_of", "system_of"]

_RECALL = re.compile(r"^recall_at_(\d+)$")
_SPLIT = re.compile(r"^(train|dev|test|val|validation)[_.-]")


def _num(value: float) -> int | float:
    """Whole numbers as ints (the seed wrote ``"recall_at_1": 0``, ``"answer_score_raw": 3``)."""
    return int(value) if float(value).is_integer() else value


class _System:
    """The three sections of one system, filled item by item."""

    def __init__(self) -> None:
        self.items = 0
        self.retrieval: list[dict[str, Any]] = []
        self.ks: set[int] = set()
        self.citation: list[dict[str, Any]] = []
        self.judged: list[dict[str, Any]] = []
        self.has_judge = False
        self.lam: float | None = None

    def add(self, item: RawItem, gold: str | None) -> None:
        self.items += 1
        qid, m = item.meta["id"], item.metrics
        recalls = {int(k.group(1)): r for name, r in m.items() if (k := _RECALL.match(name))}
        scored = {k: r for k, r in recalls.items() if r.get("score") is not None}
        if scored:
            self.ks |= set(scored)
            first = next(iter(scored.values()))
            row = {"question_id": qid, "gold_doc_id": gold, "retrieved_top_1": first["details"].get("retrieved_top_1")}
            self.retrieval.append(row | {f"recall_at_{k}": _num(r["score"]) for k, r in sorted(scored.items())})
        cit = m.get("citation_f1")
        gold_ids, pred_ids = [], []
        if cit is not None and cit.get("score") is not None:
            d = cit["details"]
            gold_ids = sorted([*d.get("matched", []), *d.get("missed", [])])
            pred_ids = sorted([*d.get("matched", []), *d.get("extra", [])])
            self.citation.append({
                "question_id": qid, "gold_doc_id": gold, "gold_sentences": gold_ids, "pred_sentences": pred_ids,
                "precision": m["citation_precision"]["score"], "recall": m["citation_recall"]["score"],
                "f1": cit["score"],
            })  # fmt: skip
        self._judge(qid, m, gold_ids, pred_ids)

    def _judge(self, qid: str, m: Mapping[str, Any], gold_ids: list[str], pred_ids: list[str]) -> None:
        if "rubric_judge" not in m and "rubric_judge_raw" not in m:
            return
        self.has_judge = True
        raw, norm = m.get("rubric_judge_raw") or {}, m.get("rubric_judge") or {}
        if raw.get("score") is None:
            return
        evidence = (m.get("evidence_overlap") or {}).get("score")
        combined = m.get("combined") or {}
        if combined.get("details", {}).get("lambda") is not None:
            self.lam = combined["details"]["lambda"]
        self.judged.append({
            "question_id": qid, "answer_score_raw": _num(raw["score"]), "answer_score_normalized": norm.get("score"),
            "answer_rationale": (norm.get("details") or {}).get("rationale"), "evidence_score": evidence,
            "combined_score": combined.get("score"), "gold_sentences": gold_ids, "pred_sentences": pred_ids,
        })  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.retrieval:
            total = len(self.retrieval)
            ks = sorted(self.ks)
            hits = {k: int(sum(q.get(f"recall_at_{k}", 0) for q in self.retrieval)) for k in ks}
            retrieval: dict[str, Any] = {f"recall_at_{k}": hits[k] for k in ks}
            retrieval |= {"total": total, "per_question": self.retrieval}
            out["retrieval"] = retrieval | {f"recall_at_{k}_pct": hits[k] / total * 100 for k in ks}  # as the seed
        if self.citation:
            n = len(self.citation)
            sums = {key: sum(q[key] for q in self.citation) for key in ("precision", "recall", "f1")}
            out["citation"] = {
                "total_questions": self.items, "questions_with_evidence": n,
                **{f"{key}_sum": value for key, value in sums.items()}, "per_question": self.citation,
                **{f"avg_{key}": value / n for key, value in sums.items()},
            }  # fmt: skip
        if self.has_judge:
            out["llm_judge"] = self._judge_json()
        return out

    def _judge_json(self) -> dict[str, Any]:
        """Sums over the questions each score has; an average divides by that count (an unscorable question,
        e.g. one without evidence sentences, is left out, not counted as 0)."""
        keys = ("answer_score_raw", "evidence_score", "combined_score")
        scored = {key: [q[key] for q in self.judged if q[key] is not None] for key in keys}
        sums = {key: sum(values) for key, values in scored.items()}
        avg = {key: sums[key] / len(values) if values else 0.0 for key, values in scored.items()}
        return {
            "total_questions": self.items, "questions_with_rubrics": len(self.judged),
            "answer_score_sum": _num(sums["answer_score_raw"]), "evidence_score_sum": sums["evidence_score"],
            "combined_score_sum": sums["combined_score"], "lambda_weight": 0.5 if self.lam is None else self.lam,
            "per_question": self.judged,
            "avg_answer_score": avg["answer_score_raw"],
            "avg_evidence_score": avg["evidence_score"],
            "avg_combined_score": avg["combined_score"],
        }  # fmt: skip


def evaluation_json(
    items: Iterable[RawItem], gold: Mapping[str, Any] | None, default_system: str
) -> dict[str, dict[str, Any]]:
    """``{system: sections}`` in the seed's layout; ``gold`` maps item keys to gold document ids; ``default_system``
    keys the items that carry no ``system``."""
    systems: dict[str, _System] = {}
    for item in items:
        name = item.meta.get("system") or default_system
        doc = (gold or {}).get(item.key)
        systems.setdefault(name, _System()).add(item, doc if isinstance(doc, str) or doc is None else str(doc))
    return {name: s.to_json() for name, s in systems.items()}


def left_out(metric_names: Iterable[str]) -> list[str]:
    """Why metrics of the run have no place in the seed's layout (empty when every one has).

    The layout has sections for ``recall_at_K``, ``citation*``, and ``rubric_judge`` (with ``evidence_overlap``
    and ``combined`` inside it); ``evidence_overlap`` without ``rubric_judge`` would be dropped silently.
    """
    names = set(metric_names)
    placed = {n for n in names if _RECALL.match(n) or n.startswith("citation")}
    if names & {"rubric_judge", "rubric_judge_raw"}:
        placed |= {"rubric_judge", "rubric_judge_raw", "evidence_overlap", "combined"}
    notes = []
    if "evidence_overlap" in names - placed:
        notes.append(
            "evidence_overlap is written only inside llm_judge, beside rubric_judge (the NLP project's layout); "
            "this run has no rubric_judge"
        )
    others = sorted(names - placed - {"evidence_overlap"})
    if others:
        notes.append(f"not in this format: {', '.join(others)} (see summary.json or report.md)")
    return notes


def gold_doc_ids(info: Mapping[str, Any]) -> dict[str, Any]:
    """``{item key: gold_doc_id}`` read again from the run's dataset; empty when it cannot be read."""
    from ragscore_workers.errors import RagscoreError
    from ragscore_workers.schemas import Row

    from ..datasets import iter_rows

    dataset = info.get("dataset")
    if not dataset or not Path(dataset).is_file():
        return {}
    try:
        rows = iter_rows(Path(dataset), info.get("format") or None, info.get("format_options") or {})
        return {row.key: row.gold_doc_id for _, row in rows if isinstance(row, Row)}
    except (RagscoreError, OSError):
        return {}


def split_of(info: Mapping[str, Any], fallback: str = "eval") -> str:
    """The split a dataset file names (``dev_final_jsonl.txt`` -> ``dev``), else ``fallback``."""
    name = Path(str(info.get("dataset") or "")).name
    match = _SPLIT.match(name)
    return match.group(1) if match else fallback


def system_of(info: Mapping[str, Any]) -> str:
    """The key of items without a ``system``: the predictions file's name less its split and ``_output``, as the
    framework names its systems (``dev_simple_output.json`` -> ``simple``), else the dataset file's stem."""
    predictions = (info.get("format_options") or {}).get("predictions")
    if predictions:
        return _SPLIT.sub("", Path(str(predictions)).stem).removesuffix("_output") or Path(str(predictions)).stem
    return Path(str(info.get("dataset") or "")).stem or "dataset"


def _pct(hits: int, total: int) -> str:
    return f"{hits}/{total} = {100.0 * hits / total:.2f}%" if total else "0/0"


def console_summary(evaluation: Mapping[str, Mapping[str, Any]], split: str) -> str:
    """The text the framework's evaluation scripts print, one block per system."""
    lines: list[str] = []
    for system, sections in evaluation.items():
        lines += ["=" * 60, f"{system} on {split}", "=" * 60]
        if "retrieval" in sections:
            r = sections["retrieval"]
            lines.append("Retrieval:")
            ks = sorted(int(k.group(1)) for key in r if (k := re.match(r"^recall_at_(\d+)$", key)))
            lines += [f"  Recall@{k}: {_pct(r[f'recall_at_{k}'], r['total'])}" for k in ks]
        if "citation" in sections:
            c = sections["citation"]
            lines.append(f"Citation ({c['questions_with_evidence']}/{c['total_questions']} questions with evidence):")
            lines += [f"  Precision: {c['avg_precision']:.3f}", f"  Recall: {c['avg_recall']:.3f}",
                      f"  F1: {c['avg_f1']:.3f}"]  # fmt: skip
        if "llm_judge" in sections:
            j = sections["llm_judge"]
            lines.append(
                f"LLM judge ({j['questions_with_rubrics']}/{j['total_questions']} questions with rubrics, "
                f"lambda = {j['lambda_weight']}):"
            )
            lines += [
                f"  Answer score: {j['avg_answer_score']:.2f}/5",
                f"  Evidence score: {j['avg_evidence_score']:.3f}",
                f"  Combined score: {j['avg_combined_score']:.3f}",
            ]
        lines.append("")
    return "\n".join(lines)
