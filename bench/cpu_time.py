"""How quiet the machine was during a measurement: steal time and other processes' CPU time.

The 1-minute load average says how many runnable threads the guest saw; on a virtual machine it
does not show the time the hypervisor gave the guest's vCPUs to someone else (``steal``, the
eighth value of the ``cpu`` line of ``/proc/stat``, proc(5)), which slows both sides of a
comparison unevenly. :func:`sample` reads the machine's CPU times and this process's own;
:func:`quietness` turns two samples into fractions of the vCPU time that passed between them.
Where ``/proc/stat`` is missing (not Linux) both return None and the reports print "-".
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class CpuSample:
    """One reading: ``wall_s`` (time.monotonic, seconds), the machine's ``busy_s`` (user, nice,
    system, irq, softirq over all vCPUs, seconds), ``steal_s`` and ``total_s`` (every column of the
    ``cpu`` line, seconds) and ``own_s`` (this process's user + system time, its threads and its finished child processes,
such as section 3's fresh processes, included)."""

    wall_s: float
    busy_s: float
    steal_s: float
    total_s: float
    own_s: float


def sample() -> CpuSample | None:
    """The CPU times now; None where ``/proc/stat`` cannot be read."""
    try:
        with open("/proc/stat") as f:
            line = f.readline().split()
    except OSError:
        return None
    if not line or line[0] != "cpu" or len(line) < 9:
        return None
    ticks = [int(v) for v in line[1:]]
    # proc(5): user nice system idle iowait irq softirq steal [guest guest_nice, already in user/nice]
    user, nice, system, idle, iowait, irq, softirq, steal = ticks[:8]
    t = os.times()
    return CpuSample(wall_s=time.monotonic(), busy_s=(user + nice + system + irq + softirq) / _CLOCK_TICKS,
                     steal_s=steal / _CLOCK_TICKS,
                     total_s=(user + nice + system + idle + iowait + irq + softirq + steal) / _CLOCK_TICKS,
                     own_s=t.user + t.system + t.children_user + t.children_system)


def quietness(before: CpuSample | None, after: CpuSample | None) -> dict[str, Any] | None:
    """Between two :func:`sample` readings: ``steal`` (the fraction of all vCPU time the hypervisor
    took, 0..1), ``others_busy`` (the fraction of all vCPU time other processes of this guest ran:
    the machine's busy time minus this process's, clamped at 0) and ``wall_s``. None when either
    sample is None or no tick passed between them."""
    if before is None or after is None:
        return None
    total = after.total_s - before.total_s
    if total <= 0:
        return None
    others = (after.busy_s - before.busy_s) - (after.own_s - before.own_s)
    return {"steal": (after.steal_s - before.steal_s) / total, "others_busy": max(others, 0.0) / total,
            "wall_s": after.wall_s - before.wall_s}


def describe(q: dict[str, Any] | None) -> str:
    """``q`` (:func:`quietness`) as "steal 3.1%, others 0.4%", or "-"."""
    if not q:
        return "-"
    return f"steal {100 * q['steal']:.1f}%, others {100 * q['others_busy']:.1f}%"
