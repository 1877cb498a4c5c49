"""Edited code loaded again under the same module name in one process (a notebook).

XLA keeps the first handler of a target name for the life of the process: the
module loaded again calls its new code under the content-versioned name, the
modules loaded before keep theirs, and a ``kernix.ReloadWarning`` says so once
per target.
"""

from __future__ import annotations

import textwrap
import warnings

import numpy as np
import pytest

import jax
import jax.numpy as jnp

import kernix
from kernix.runtime import registry

from helpers import gpus, has_nvcc, unique_name

# K is the edit: 2.0f in the first version, 3.0f in the second.  `bump` has a shape
# signature and a backward kernel (custom_jvp and vjp layers), `plus` is a template
# family (a Dispatcher), `raw` has no signature (a plain ffi_call with out=).
SOURCE = textwrap.dedent(
    """\
    #include "kernix/common.h"
    // @BE bump (...,n)->(...,n)
    void bump(const BE::Tensor& x, BE::Tensor& y) {
      for (int64_t i = 0; i < x.numel(); ++i) y.data_ptr<float>()[i] = K * x.data_ptr<float>()[i];
    }
    // @BE bump_bwd (...,n),(...,n)->(...,n) vjp=bump
    void bump_bwd(const BE::Tensor& x, const BE::Tensor& g, BE::Tensor& dx) {
      for (int64_t i = 0; i < x.numel(); ++i) dx.data_ptr<float>()[i] = K * g.data_ptr<float>()[i];
    }
    // @BE plus<T: float, int32_t> (n)->(n)
    template <typename T>
    void plus(const BE::Tensor& x, BE::Tensor& y) {
      for (int64_t i = 0; i < x.numel(); ++i) y.data_ptr<T>()[i] = x.data_ptr<T>()[i] + T(K);
    }
    // @BE raw
    void raw(const BE::Tensor& x, BE::Tensor& y) {
      for (int64_t i = 0; i < x.numel(); ++i) y.data_ptr<float>()[i] = x.data_ptr<float>()[i] + K;
    }
    """
)


def version(k: str) -> str:
    return SOURCE.replace("K", k)


X = np.arange(1, 4, dtype=np.float32)


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    """The first version, then the edited one, under one module name; the warnings of the second load."""
    cache = tmp_path_factory.mktemp("reload")
    name = unique_name("reload")
    first = kernix.load_cpp_inline(name, version("2.0f"), build_directory=cache)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        second = kernix.load_cpp_inline(name, version("3.0f"), build_directory=cache)
    return first, second, caught, cache


def test_the_first_load_registers_plain_names(loaded):
    first, *_ = loaded
    assert first.targets == {f: f"{first.name}.{f}" for f in first.function_names}
    np.testing.assert_array_equal(jax.ffi.ffi_call(f"{first.name}.raw", jax.ShapeDtypeStruct((3,), jnp.float32))(X),
                                  X + 2)


def test_the_edited_module_calls_its_code_under_versioned_names(loaded):
    first, second, _, _ = loaded
    assert second.digest != first.digest
    assert second.targets == {f: f"{first.name}.{f}@{second.digest[:12]}" for f in second.function_names}
    out = jax.ShapeDtypeStruct((3,), jnp.float32)
    for mod, k in ((second, 3), (first, 2)):  # each module object runs its own code
        np.testing.assert_array_equal(mod.bump(X), k * X)
        np.testing.assert_array_equal(jax.jit(mod.bump)(X), k * X)
        np.testing.assert_array_equal(jax.vmap(mod.bump)(np.stack([X, X])), k * np.stack([X, X]))
        np.testing.assert_array_equal(jax.grad(lambda x, m=mod: m.bump(x).sum())(X), [k] * 3)
        np.testing.assert_array_equal(mod.plus(X), X + k)  # the template family's float instance
        np.testing.assert_array_equal(jax.jit(mod.plus)(jnp.arange(3, dtype=jnp.int32)), [k, k + 1, k + 2])
        np.testing.assert_array_equal(jax.jit(lambda x, m=mod: m.raw(x, out=out))(X), X + k)
    # Through jax.ffi.ffi_call: the plain name runs the first code, the versioned name the new code.
    np.testing.assert_array_equal(jax.ffi.ffi_call(first.targets["raw"], out)(X), X + 2)
    np.testing.assert_array_equal(jax.ffi.ffi_call(second.targets["raw"], out)(X), X + 3)


def test_one_warning_names_every_versioned_name(loaded):
    first, second, caught, _ = loaded
    reloads = [w for w in caught if issubclass(w.category, kernix.ReloadWarning)]
    assert len(reloads) == 1, [str(w.message) for w in caught]
    message = str(reloads[0].message)
    for f in first.function_names:
        assert f"'{first.targets[f]}' -> '{second.targets[f]}'" in message
    assert "jax.ffi.ffi_call" in message and "module.targets" in message
    assert reloads[0].filename == __file__  # attributed to the load, not to kernix
    assert issubclass(kernix.ReloadWarning, UserWarning) and issubclass(kernix.ReloadWarning, kernix.KernixError)


def test_a_jit_retraced_with_the_new_callable_runs_the_new_code(loaded):
    first, second, _, _ = loaded
    current = {"module": first}
    f = jax.jit(lambda x: current["module"].bump(x))
    np.testing.assert_array_equal(f(X), 2 * X)
    current["module"] = second
    f.clear_cache()  # (a cached trace is JAX's to keep; a new one must see the new callable)
    np.testing.assert_array_equal(f(X), 3 * X)
    np.testing.assert_array_equal(f(np.ones((2, 3), np.float32)), np.full((2, 3), 3.0))
    assert f"{first.name}.bump@{second.digest[:12]}" in f.lower(X).as_text()
    current["module"] = first
    f.clear_cache()
    np.testing.assert_array_equal(f(X), 2 * X)


def test_the_same_code_again_is_a_noop_without_a_warning(loaded):
    first, second, _, cache = loaded
    with warnings.catch_warnings():
        warnings.simplefilter("error", kernix.ReloadWarning)
        again = kernix.load_cpp_inline(first.name, version("3.0f"), build_directory=cache)
        back = kernix.load_cpp_inline(first.name, version("2.0f"), build_directory=cache)  # the edit undone
    assert again is not second and again.targets == second.targets
    assert back.targets == first.targets  # the first code: its plain names
    np.testing.assert_array_equal(again.bump(X), 3 * X)
    np.testing.assert_array_equal(back.bump(X), 2 * X)


def test_a_later_version_of_a_target_gets_its_own_name_without_another_warning(loaded):
    """Said once per target: a third library under the same targets (registered here
    from the first library's file under made-up digests, which kernix takes as given)."""
    first, *_ = loaded
    prefix = unique_name("versions")
    symbols = {f"{prefix}.bump": first.handlers["bump"]}
    assert registry.register_targets("cpu", first.path, "a" * 64, symbols) == {f"{prefix}.bump": f"{prefix}.bump"}
    with pytest.warns(kernix.ReloadWarning, match=f"'{prefix}.bump' -> '{prefix}.bump@bbbbbbbbbbbb'"):
        assert registry.register_targets("cpu", first.path, "b" * 64, symbols) == {
            f"{prefix}.bump": f"{prefix}.bump@bbbbbbbbbbbb"}
    with warnings.catch_warnings():
        warnings.simplefilter("error", kernix.ReloadWarning)
        assert registry.register_targets("cpu", first.path, "c" * 64, symbols) == {
            f"{prefix}.bump": f"{prefix}.bump@cccccccccccc"}
    assert registry.loaded_code(f"{prefix}.bump") == {"cpu": {
        "a" * 64: f"{prefix}.bump", "b" * 64: f"{prefix}.bump@bbbbbbbbbbbb", "c" * 64: f"{prefix}.bump@cccccccccccc"}}


def test_export_after_a_reload_names_each_modules_code(loaded):
    pytest.importorskip("flatbuffers", reason="jax.export serialization needs flatbuffers")
    first, second, _, _ = loaded
    spec = jax.ShapeDtypeStruct((3,), jnp.float32)
    for mod, k in ((second, 3), (first, 2)):
        exp = kernix.export(jax.jit(lambda x, m=mod: m.bump(x) + 1), spec)
        assert kernix.runtime.export.kernix_targets(exp) == (f"{first.name}.bump@{mod.digest[:12]}",)
        restored = kernix.deserialize(exp.serialize())
        restored.check("cpu")
        np.testing.assert_array_equal(restored(X), k * X + 1)


def test_an_artifact_name_finds_the_edited_code_under_its_versioned_name(loaded):
    """What deserialize checks: a name an artifact calls (here in the two-platform form,
    as one exported for the CPU and CUDA names it) that names the edited module's
    library is registered for it, though the plain target runs the first code."""
    first, second, _, _ = loaded
    name = f"{first.name}.raw@cpu:{second.digest[:12]},cuda:{'0' * 12}"
    assert name not in kernix.list_registered_targets()
    assert kernix.runtime.export._problem(name, ("cpu", "cuda"), "cpu") is None
    out = jax.ShapeDtypeStruct((3,), jnp.float32)
    np.testing.assert_array_equal(jax.ffi.ffi_call(name, out)(X), X + 3)
    stale = f"{first.name}.raw@{'f' * 12}"  # a library that is not loaded: refused, naming the loaded ones
    problem = kernix.runtime.export._problem(stale, ("cpu",), "cpu")
    assert "is loaded with other code for CPU" in problem
    assert first.digest[:12] in problem and second.digest[:12] in problem


def test_compiling_a_reloaded_kernel_for_another_platform_says_what_works(loaded):
    _, second, _, cache = loaded
    prefix = f"{second.name}_v2"
    with pytest.raises(kernix.CallError, match=r"cannot be compiled for CUDA GPUs.*both with a target prefix new "
                                               rf"to this process, e.g. target_prefix='{prefix}'"):
        kernix.export(jax.jit(second.bump), jax.ShapeDtypeStruct((3,), jnp.float32), platforms=["cuda"])
    # The fix's first half: the same code under a new prefix has plain names (a CUDA build could join it).
    with warnings.catch_warnings():
        warnings.simplefilter("error", kernix.ReloadWarning)
        fresh = kernix.load_cpp_inline(second.name, version("3.0f"), build_directory=cache, target_prefix=prefix)
    assert fresh.targets["bump"] == f"{prefix}.bump" and registry.platforms_of(f"{prefix}.bump") == ["cpu"]


CUDA = textwrap.dedent(
    """\
    #include "kernix/common.h"
    __global__ void bump_k(const float* x, float* y, int64_t n) {
      int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
      if (i < n) y[i] = K * x[i];
    }
    // @BE bump (...,n)->(...,n)
    void bump(const BE::Tensor& x, BE::Tensor& y, cudaStream_t s) {
      bump_k<<<(int)((x.numel() + 255) / 256), 256, 0, s>>>(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
    }
    """
)


@pytest.mark.gpu
def test_cuda_module_edited_and_loaded_again(tmp_path):
    if not gpus():
        pytest.skip("needs an NVIDIA GPU to run the CUDA kernels")
    if not has_nvcc():
        pytest.skip("needs nvcc to build the CUDA module")
    name = unique_name("reload_cuda")
    first = kernix.load_cuda_inline(name, CUDA.replace("K", "2.0f"), build_directory=tmp_path)
    with pytest.warns(kernix.ReloadWarning, match=rf"'{name}.bump' \(CUDA\) is already registered"):
        second = kernix.load_cuda_inline(name, CUDA.replace("K", "3.0f"), build_directory=tmp_path)
    assert second.targets == {"bump": f"{name}.bump@{second.digest[:12]}"}
    x = jax.device_put(X, gpus()[0])
    for mod, k in ((second, 3), (first, 2)):
        np.testing.assert_array_equal(mod.bump(x), k * X)
        np.testing.assert_array_equal(jax.jit(mod.bump)(x), k * X)
