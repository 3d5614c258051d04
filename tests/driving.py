"""Driving a generator the way ``llm_bridge.loop.interleave`` does, with other work between its steps."""

from __future__ import annotations

import time


def drive_pausing(steps, pause: float) -> tuple[list, object]:
    """Run generator ``steps`` to its end, sleeping ``pause`` seconds at every yield (the driver running other work):
    (what it yielded, what it returned)."""
    yielded = []
    while True:
        try:
            yielded.append(next(steps))
        except StopIteration as stop:
            return yielded, stop.value
        time.sleep(pause)
