"""`traceview memory` against the `xprof` command line itself, as a user would check it.

`xprof get_memory_profile` (peak_memory_usage_gib and its stack/heap split, in
GiB rounded to 0.01) and `xprof get_peak_allocations` (total_hbm_mib and the
top buffers per module) on a log dir holding the same trace.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from traceview.cli import main

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "traces"
XPROF = shutil.which("xprof") or str(Path(sys.executable).parent / "xprof")
GiB, MiB = 2**30, 2**20
TRACES = {  # what the issue names: MI300X GEMM, TPU v6e, MI355X
    "mi300x_gemm": "AMD-AGI-TraceLens/jax08_gemm/tw003.xplane.pb",
    "tpu_v6e": "openxla-xprof/tpu_inference_2.xplane.pb",
    "mi355x": "AMD-AGI-TraceLens/te_fused_attn/934987a2fc2f.xplane.pb",
}


def _xprof(tool: str, run: str, logdir: Path, *flags: str) -> dict:
    done = subprocess.run([XPROF, tool, f"--session_id={run}", f"--logdir={logdir}", *flags],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


@pytest.mark.parametrize("run", list(TRACES))
def test_memory_matches_the_xprof_cli(run, tmp_path, capsys):
    trace = SHARED / TRACES[run]
    if not trace.exists():
        pytest.skip(f"{trace} not available")
    if not Path(XPROF).exists():
        pytest.skip("the xprof command is not installed")
    folder = tmp_path / "logdir" / "plugins" / "profile" / run
    folder.mkdir(parents=True)
    shutil.copy(trace, folder / trace.name)
    assert main(["memory", str(folder / trace.name), "--format", "json"]) == 0
    ours = json.loads(capsys.readouterr().out)

    profile = _xprof("get_memory_profile", run, tmp_path / "logdir")
    # The CLI reports the allocator with the highest peak, in GiB rounded to 2 decimals.
    top = max(ours["memories"], key=lambda m: m["peak_bytes"])
    slack = lambda theirs: max(0.01 * theirs, 0.005)  # noqa: E731  1%, or the CLI's own rounding
    assert abs(top["peak_bytes"] / GiB - profile["peak_memory_usage_gib"]) <= slack(profile["peak_memory_usage_gib"])
    details = profile["peak_usage_details"]
    assert abs(top["stack_bytes"] / GiB - details["stack_reservation_gib"]) <= slack(details["stack_reservation_gib"])
    assert abs(top["heap_bytes"] / GiB - details["heap_allocation_gib"]) <= slack(details["heap_allocation_gib"])
    assert abs(top["capacity_bytes"] / GiB - profile["memory_capacity_gib"]) <= slack(profile["memory_capacity_gib"])

    allocations = _xprof("get_peak_allocations", run, tmp_path / "logdir", "--limit=0", "--min_size_mib=0",
                         "--aggregate_instructions=False")
    mine = {f"{m['name']}({m['program_id']})": m for m in ours["modules"]}
    compared_buffers = 0
    assert set(mine) == {m["module_name"] for m in allocations["modules"]}
    for theirs in allocations["modules"]:
        m = mine[theirs["module_name"]]
        total = theirs["total_hbm_mib"]
        assert abs(m["peak_bytes"] / MiB - total) <= 0.01 * total, (m["name"], m["peak_bytes"] / MiB, total)
        assert abs(m["total_allocation_bytes"] / MiB - total) <= 0.01 * total
        # the largest buffers are the same instructions (XProf's small-buffer row aside)
        named = [b for b in theirs["top_buffers"] if not b["instruction"].startswith("small")]
        biggest = named[0]["size_mib"] if named else 0
        if biggest >= 1:
            ours_top = {b["instruction"] for b in m["buffers"] if abs(b["size_bytes"] / MiB - biggest) < 1e-6}
            assert named[0]["instruction"] in ours_top, (m["name"], named[0], m["buffers"][:3])
            compared_buffers += 1
    assert compared_buffers > 0  # every one of these traces has a module with a buffer of 1 MiB or more
