"""Send a body a byte at a time: a reply that trickles in, each read well within a client's read timeout."""

from __future__ import annotations

import time
from typing import BinaryIO


def write_slowly(wfile: BinaryIO, data: bytes, over_s: float) -> bool:
    """Write ``data`` over ``over_s`` seconds; False when the client gave up first."""
    try:
        for i in range(len(data)):
            wfile.write(data[i : i + 1])
            wfile.flush()
            time.sleep(over_s / len(data))
    except (BrokenPipeError, ConnectionResetError):
        return False
    return True
