"""Side effects (``has_side_effect`` in the annotation): a call runs exactly
once per call under jax.jit even when its results are unused, identical calls
are never merged; a kernel without it is dropped when unused (the
difference); under jax.vmap and kernix.export."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

import jax
import jax.numpy as jnp

import kernix

from helpers import unique_name

CPP = textwrap.dedent(
    """\
    #include <atomic>
    #include <cstring>
    #include "kernix/common.h"

    static std::atomic<int64_t> effect_runs{0};
    static std::atomic<int64_t> pure_runs{0};

    // Records that it ran (a log, a counter on the device, a file written...).
    // @BE record (...,n)->(...,n) has_side_effect
    void record(const BE::Tensor& x, BE::Tensor& y) {
      ++effect_runs;
      std::memcpy(y.data_ptr(), x.data_ptr(), x.nbytes());
    }

    // The same without the annotation: XLA may drop it or merge it.
    // @BE pure (...,n)->(...,n)
    void pure(const BE::Tensor& x, BE::Tensor& y) {
      ++pure_runs;
      std::memcpy(y.data_ptr(), x.data_ptr(), x.nbytes());
    }

    // No shape signature.
    // @BE record_plain has_side_effect
    void record_plain(const BE::Tensor& x, BE::Tensor& y) { ++effect_runs; }

    // @BE runs ()->(2):int64 has_side_effect
    void runs(const BE::Tensor& unused, BE::Tensor& out) {
      out.data_ptr<int64_t>()[0] = effect_runs;
      out.data_ptr<int64_t>()[1] = pure_runs;
    }
    """
)


@pytest.fixture(scope="module")
def mod(tmp_path_factory):
    return kernix.load_cpp_inline(unique_name("effects"), CPP, build_directory=tmp_path_factory.mktemp("b"))


def _runs(mod):
    return [int(v) for v in np.asarray(mod.runs(jnp.zeros((), jnp.float32)))]


def _delta(mod, fn, *args):
    before = _runs(mod)
    jax.block_until_ready(fn(*args))
    after = _runs(mod)
    return after[0] - before[0], after[1] - before[1]


def test_spec(mod):
    assert mod.record.spec.has_side_effect and not mod.pure.spec.has_side_effect
    assert mod.record.spec.to_json()["has_side_effect"] is True
    assert "has_side_effect" not in mod.pure.spec.to_json()
    assert "Has side effects" in mod.record.__doc__


def test_unused_results_still_run(mod):
    x = jnp.ones(3, jnp.float32)

    @jax.jit
    def unused(x):
        mod.record(x)
        mod.pure(x)
        mod.record_plain(x, out=jax.ShapeDtypeStruct((3,), jnp.float32))
        return x + 1

    assert _delta(mod, unused, x) == (2, 0)  # the pure kernel, unused, never ran
    assert _delta(mod, unused, x) == (2, 0)  # every call of the compiled function


def test_identical_calls_are_not_merged(mod):
    x = jnp.ones(3, jnp.float32)
    both = jax.jit(lambda x: mod.record(x) + mod.record(x))
    assert _delta(mod, both, x) == (2, 0)
    pure = jax.jit(lambda x: mod.pure(x) + mod.pure(x))
    assert _delta(mod, pure, x)[1] == 1  # XLA merged the two pure calls: the difference the annotation makes


def test_eager_vmap_and_export(mod):
    x = jnp.ones((4, 3), jnp.float32)
    assert _delta(mod, mod.record, x) == (1, 0)
    assert _delta(mod, jax.vmap(mod.record), x) == (1, 0)  # one call over the batch
    assert _delta(mod, jax.jit(jax.vmap(lambda r: (mod.record(r), r)[1])), x) == (1, 0)
    exp = kernix.export(jax.jit(lambda x: (mod.record(x), x * 2)[1]), jax.ShapeDtypeStruct((4, 3), jnp.float32))
    again = kernix.deserialize(exp.serialize())
    assert _delta(mod, again.call, x) == (1, 0)


def test_grad_refuses_as_for_any_kernel(mod):
    with pytest.raises(kernix.CallError, match=r"record\(\) cannot be differentiated"):
        jax.grad(lambda x: jnp.sum(mod.record(x)))(jnp.ones(3, jnp.float32))


def test_inspect_shows_it(tmp_path):
    import contextlib
    import io
    import json

    from kernix.cli import main

    path = tmp_path / "effects.cpp"
    path.write_text(CPP)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["inspect", "--json", str(path)]) == 0
    data = json.loads(out.getvalue())
    functions = {f["name"]: f for f in data["files"][0]["functions"]}
    assert functions["record"]["has_side_effect"] is True and functions["pure"]["has_side_effect"] is False
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["inspect", str(path)]) == 0
    assert "(...,n)->(...,n) has_side_effect" in out.getvalue()
