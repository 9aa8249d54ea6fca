"""ragscore's orchestrator: load, plan, submit, follow and report evaluation runs."""

from .api import Evaluation, evaluate, resume

__all__ = ["Evaluation", "evaluate", "resume"]
