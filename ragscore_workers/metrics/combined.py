"""``combined`` (document-grounded QA framework): c = λ·rubric_judge + (1-λ)·evidence_overlap.

A derived metric: computed per item during aggregation from the stored outputs of the same suite's
``rubric_judge`` and ``evidence_overlap``. Either input unscorable or failed -> ``combined`` unscorable
with the reason (the seed framework averaged only questions with both scores), an input's own where it lacks a field by
design (``BY_DESIGN_REASONS``: an LLM alone's ``no evidence_sentences``) and no other input failed; an input the run
stopped (the judge's breaker or budget, a cancel) makes ``combined`` stopped too, so the summary counts it as such. An
input of weight 0 (λ = 0 or 1) is not needed: ``combined`` with λ = 1 is the judge's score wherever it has one.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, StrictFloat

from ..schemas import MetricResult, Queue
from .registry import BY_DESIGN_REASONS, register

INPUTS = ("rubric_judge", "evidence_overlap")


class CombinedParams(BaseModel):
    """``lambda``: weight of the judge score, a number in [0, 1] (default 0.5; ``true`` or ``"0.5"`` is refused)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    lambda_: StrictFloat = Field(default=0.5, ge=0.0, le=1.0, alias="lambda")


@register("combined", Queue.DERIVED, params=CombinedParams, kind="derived", inputs=INPUTS)
def combined(outputs: dict[str, MetricResult], params: CombinedParams) -> MetricResult:
    """λ·rubric_judge + (1-λ)·evidence_overlap."""
    lam = params.lambda_
    weights = {"rubric_judge": lam, "evidence_overlap": 1 - lam}
    lacking: MetricResult | None = None  # the first input unscorable by design, said only where no other failed
    for name in INPUTS:
        if weights[name] == 0:
            continue
        result = outputs.get(name)
        if result is None or result.score is None:
            why = "missing" if result is None else (result.error or result.details.get("reason", "unscorable"))
            if result is not None and result.details.get("stopped"):
                return MetricResult.stopped(f"{name} has no score ({why})")
            if why not in BY_DESIGN_REASONS:
                return MetricResult.unscorable(f"{name} has no score ({why})")
            lacking = lacking or MetricResult.unscorable(why, input=name)  # as its input, by design: no gate fails it
    if lacking is not None:
        return lacking
    scores = {name: outputs[name].score for name in INPUTS if weights[name] != 0}
    total = sum(weights[name] * score for name, score in scores.items() if score is not None)
    return MetricResult(score=total, details={"lambda": lam, **scores})
