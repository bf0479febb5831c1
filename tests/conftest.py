"""Shared fixtures. Several engineers add fixtures here: add, do not overwrite."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest

# The real traces and HLO dumps live beside the repository (../shared/traces),
# never inside it.
SHARED_TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
REPO_ROOT = Path(__file__).resolve().parents[1]

# The parsed-table cache (traceview/cache/tables.py) of this test session lives
# in a folder of its own, never in the user's ~/.cache; subprocesses inherit it.
_TEST_CACHE = tempfile.mkdtemp(prefix="traceview-test-cache-")
os.environ["TRACEVIEW_CACHE_DIR"] = _TEST_CACHE
atexit.register(shutil.rmtree, _TEST_CACHE, ignore_errors=True)
# The finished-output cache (traceview/cache/results.py) is off: tests run the same command on the same
# file many times, some with internals patched to fail; tests/integration/test_result_cache.py turns it on.
os.environ["TRACEVIEW_NO_RESULT_CACHE"] = "1"


@pytest.fixture(scope="session")
def shared_traces() -> Path:
    """Folder of real traces (../shared/traces); skips the test when it is absent."""
    if not SHARED_TRACES.is_dir():
        pytest.skip(f"real traces not available: {SHARED_TRACES} does not exist")
    return SHARED_TRACES


@pytest.fixture(scope="session")
def sample_traces() -> Path:
    """The project's own captured samples (sample_traces/); skips when not captured yet."""
    folder = REPO_ROOT / "sample_traces"
    if not any(folder.glob("*/plugins/profile/*/*.xplane.pb")):
        pytest.skip(f"no sample traces captured in {folder} (run sample_traces/capture.py)")
    return folder


@pytest.fixture(scope="session")
def serving(sample_traces) -> Path:
    """The serving sample (a KV-cache decoder: prefill and decode programs); committed, so never skipped."""
    return sample_traces / "serving"


# --- HLO dumps made by XLA itself (parsers/hlo_*: text vs proto vs as_text) ---

_HLO_DUMP_SCRIPT = r'''
import sys
from pathlib import Path
import numpy as np
import jax, jax.numpy as jnp
from jax.sharding import Mesh, PartitionSpec as P

out = Path(sys.argv[1])
from jax.sharding import NamedSharding
mesh = Mesh(np.array(jax.devices()[:4]).reshape(2, 2), ("a", "b"))
mesh8 = Mesh(np.array(jax.devices()[:8]).reshape(2, 4), ("a", "b"))

def ops(x, w, idx, k):
    y = jnp.tanh(x @ w)
    y = jnp.einsum("bij,bjk->bik", y[:, :16].reshape(4, 16, 16), y[:, :16].reshape(4, 16, 16))
    z = jax.lax.conv_general_dilated(y.reshape(64, 16)[None, None], jnp.ones((2, 1, 3, 3)), (2, 2),
                                     ((1, 2), (0, 1)), rhs_dilation=(2, 1))
    def body(c, _):
        return c * 2.0 + 1.0, None
    s, _ = jax.lax.scan(body, x, None, length=5)
    c = jax.lax.cond(k > 0, lambda a: a * 2, lambda a: a + 1, x)
    return (z.sum() + x[idx].sum() + jnp.zeros((64,)).at[idx].add(1.0).sum() + jnp.sort(x, axis=1)[1:3].sum()
            + jnp.pad(x, ((1, 2), (0, 3))).sum() + jax.lax.dynamic_slice(x, (k, 0), (4, 8)).sum()
            + jax.lax.reduce_window(x, 0.0, jax.lax.add, (2, 2), (2, 2), "VALID").sum() + s.sum() + c.sum()
            + jnp.cumsum(x, axis=0).sum() + jax.lax.top_k(x, 3)[0].sum() + jnp.fft.fft(x[:, :8]).real.sum()
            + x[::2, 1:5].sum())

def collectives(x):
    def inner(b):
        return (jax.lax.psum(b, "a").sum() + jax.lax.all_gather(b, "b").sum()
                + jax.lax.psum_scatter(b, "b", tiled=True).sum()
                + jax.lax.ppermute(b, "a", [(0, 1), (1, 0)]).sum()
                + jax.lax.all_to_all(b, "b", 0, 0, tiled=True).sum())
    return jax.shard_map(inner, mesh=mesh, in_specs=P("a", "b"), out_specs=P(), check_vma=False)(x)

def gspmd(x):  # the partitioner writes iota and mesh replica groups
    return (x @ x.T).sum(axis=1)

args = (jnp.ones((64, 128)), jnp.ones((128, 256)), jnp.array([1, 5, 7]), 3)
sharded = jax.device_put(jnp.ones((16, 32)), NamedSharding(mesh8, P("a", "b")))
for name, fn, a in (("ops", jax.jit(ops), args), ("collectives", jax.jit(collectives), (jnp.ones((16, 16)),)),
                    ("gspmd", jax.jit(gspmd, out_shardings=NamedSharding(mesh8, P())), (sharded,))):
    compiled = fn.lower(*a).compile()
    (out / f"{name}.as_text.txt").write_text(compiled.as_text())
    compiled(*a)
'''


@pytest.fixture(scope="session")
def jax_hlo_dump(tmp_path_factory) -> Path:
    """A real XLA dump folder (text and proto, both stages) of two small JAX programs on CPU.

    Made in a subprocess because XLA_FLAGS=--xla_dump_to only works before jax
    starts. Holds ``dump/`` and ``<name>.as_text.txt`` (``compiled.as_text()``).
    """
    import os
    import subprocess
    import sys

    pytest.importorskip("jax")
    root = tmp_path_factory.mktemp("xla_dump")
    env = dict(os.environ)
    env["XLA_FLAGS"] = (f"--xla_dump_to={root / 'dump'} --xla_dump_hlo_as_text --xla_dump_hlo_as_proto "
                        "--xla_force_host_platform_device_count=8")
    env["JAX_PLATFORMS"] = "cpu"
    proc = subprocess.run([sys.executable, "-c", _HLO_DUMP_SCRIPT, str(root)], env=env,
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        pytest.fail(f"making the XLA dump failed:\n{proc.stderr[-3000:]}")
    return root
