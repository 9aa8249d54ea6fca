"""What the ``test_faults_*`` files share. They kill and hang Redis and workers. Only their tests whose assertions are
timed (how soon a run gets over it: "ends soon", "within N s", ETAs, a rate of asks, a hang timed against a read
timeout) are marked serial; the others assert what happens, whenever it does, and run in the parallel pass."""

from __future__ import annotations

#: The suite of their runs: cpu metrics only, 25 rows a chunk.
SUITE = {"metrics": ["exact_match", {"name": "recall_at_k", "params": {"k": [1, 5]}}], "chunk_size": {"cpu": 25}}
