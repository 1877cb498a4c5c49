"""kernix.check: a correct kernel passes every check; a kernel wrong in each
way (gradient, batch, buffers, size 1, dtype) fails the check that catches it,
naming the parameter, the largest difference and where."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import jax
import jax.numpy as jnp

import kernix
from kernix.checking.transforms import count_calls

from helpers import FIXTURES, gpus, unique_name

KERNELS = FIXTURES / "checking" / "kernels.cpp"


@pytest.fixture(scope="module")
def kernels_build(tmp_path_factory):
    """The name and the cache of the module of KERNELS: built here, found again by the sharded test's process."""
    return unique_name("checked"), tmp_path_factory.mktemp("c")


@pytest.fixture(scope="module")
def kernels(kernels_build):
    name, cache = kernels_build
    return kernix.load_cpp_file(KERNELS, name=name, build_directory=cache)


@pytest.fixture(scope="module")
def ops(tmp_path_factory):
    return kernix.load_cpp_file(FIXTURES / "ops" / "ops_cpu.cpp", name=unique_name("checked_ops"),
                                build_directory=tmp_path_factory.mktemp("c"))


X = np.random.default_rng(0).uniform(-1, 1, (4,)).astype(np.float32)


def statuses(report):
    return {r.name: r.status for r in report}


def rms_norm_ref(x, w, eps):
    return x / jnp.sqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps) * w


# -- a correct kernel ----------------------------------------------------------------------------

def test_a_correct_kernel_passes_every_check(kernels):
    report = kernix.check(kernels.twice, lambda x: 2 * x, X)
    assert isinstance(report, kernix.CheckReport) and report.ok
    assert list(kernix.checking.CHECKS) == [r.name for r in report]
    assert {n for n, s in statuses(report).items() if s != "passed"} == {"sharded"}
    assert report["sharded"].status == "n/a" and "one CPU device" in report["sharded"].detail
    assert "xla_force_host_platform_device_count=2" in report["sharded"].detail
    assert "one call of" in report["vmap_one_call"].detail
    text = str(report)
    assert "through twice_jvp" in report["jvp"].detail
    assert text.startswith(f"kernix.check of {kernels.twice.target}: 10 passed, 0 failed, 1 not applicable")
    assert all(name in text for name in kernix.checking.CHECKS)


def test_two_inputs_an_attribute_and_a_backward(ops):
    rng = np.random.default_rng(1)
    x, w = rng.uniform(0.5, 1.5, (3, 4)).astype(np.float32), rng.uniform(0.5, 1.5, 4).astype(np.float32)
    report = kernix.check(ops.rms_norm, rms_norm_ref, x, w, eps=1e-3)
    assert statuses(report) == {**dict.fromkeys(kernix.checking.CHECKS, "passed"), "sharded": "n/a", "jvp": "n/a"}
    assert "gradients of x, w" in report["grad"].detail
    assert "jvp=rms_norm" in report["jvp"].detail  # no tangent kernel: the row says what declares one
    # an integer input: float0 cotangent, its gradient not compared (scale_rows takes float64)
    with jax.enable_x64(True):
        report = kernix.check(ops.scale_rows, lambda x, c: x * c[..., None], rng.uniform(-1, 1, (2, 3)),
                              np.array([2, -1], np.int32), examples=3)
    assert report.ok and report["grad"].detail.startswith("gradients of x match")


# -- wrong kernels, each caught -------------------------------------------------------------------

def test_a_wrong_gradient_is_caught(kernels):
    with pytest.raises(kernix.CheckError) as info:
        kernix.check(kernels.cube, lambda x: x ** 3, X)
    report = info.value.report
    assert statuses(report)["eager"] == "passed" and statuses(report)["vmap"] == "passed"
    grad = report["grad"]
    assert grad.failed and grad.parameter == "x" and grad.difference > 0.1 and grad.index is not None
    assert "gradient of input 'x' differs from the reference" in grad.detail
    assert report["finite_differences"].failed and "check_grads" in report["finite_differences"].detail
    assert "the reference passes it: the kernel's gradient is wrong" in report["finite_differences"].detail
    jvp = report["jvp"]
    assert jvp.failed and jvp.parameter == "y" and "forward-mode tangent of output 'y'" in jvp.detail
    message = str(info.value)
    assert message.startswith(f"{kernels.cube.target} is not a correct JAX operation: 4 check(s) failed "
                              "(grad, finite_differences, jvp, drawn)")
    assert "- grad: gradient of input 'x'" in message


def test_a_batch_dependent_result_is_caught(kernels):
    def center(x):
        return x - x.mean(-1, keepdims=True)

    report = kernix.check(kernels.center, center, X, strict=False)
    assert not report.ok
    assert statuses(report)["eager"] == statuses(report)["jit"] == "passed"  # right for one row
    vmap = report["vmap"]
    assert vmap.failed and vmap.parameter == "y" and "under jax.vmap over its '...' inputs" in vmap.detail
    drawn = report["drawn"]
    assert drawn.failed and "'...'=(" in drawn.detail
    # The shrunk example is small and has a batch; it reproduces the failure.
    (x,) = drawn.example
    assert x.ndim == 2 and x.size <= 4
    assert not np.allclose(kernels.center(x), center(x), atol=1e-5)


@pytest.mark.installed
def test_a_write_past_the_end_of_an_output_is_caught(kernels):
    report = kernix.check(kernels.copy_past, lambda x: x, X, strict=False)
    buffers = report["buffers"]
    assert buffers.failed and buffers.parameter == "y"
    assert "wrote 4 bytes past the end of output 'y' (float32[4], 16 bytes): at byte 16, element 4 of 4 at " \
        in buffers.detail
    line = next(i + 1 for i, text in enumerate(KERNELS.read_text().splitlines()) if "i <= x.numel(); ++i) out[i]" in text)
    assert f"{KERNELS}:{line} (in copy_past)" in buffers.detail and "(on the example: x: float32[4])" in buffers.detail
    # Under XLA the same write would land in memory XLA uses: the other checks do not run it.
    assert [r.name for r in report if r.status != "n/a"] == ["buffers"]
    assert "a sanitizer stopped it (see 'buffers')" in report["eager"].detail


def test_a_kernel_that_writes_into_its_input_is_caught(kernels):
    report = kernix.check(kernels.twice_and_clear, lambda x: 2 * x, X, strict=False)
    for name in ("eager", "jit", "buffers", "drawn"):
        assert report[name].failed, name
        assert report[name].parameter == "x", name
    assert "the kernel changed its input 'x'" in report["eager"].detail
    assert "wrote into input 'x', which it does not declare as an output: element (0,) changed" \
        in report["buffers"].detail
    assert "write results to an output" in report["buffers"].detail


def test_a_kernel_wrong_for_size_one_is_caught_and_shrunk(kernels):
    report = kernix.check(kernels.square, lambda x: x * x, X, strict=False)
    assert [r.name for r in report if r.failed] == ["drawn"]  # the example (n=4) is right
    drawn = report["drawn"]
    assert "on drawn inputs x: float32[1] (n=1" in drawn.detail
    assert drawn.parameter == "y" and drawn.index == (0,)
    (x,) = drawn.example
    assert x.shape == (1,) and kernels.square(x)[0] != x[0] * x[0]


def test_a_bfloat16_backward_wrong_for_size_one_is_caught_on_drawn_inputs(kernels):
    x = X.astype(jnp.bfloat16)
    report = kernix.check(kernels.bf16_twice, lambda x: 2 * x, x, strict=False)
    assert [r.name for r in report if r.failed] == ["drawn"], report  # the example (n=4) is right
    # in bfloat16 the reference's gradient disagrees with finite differences too: they cannot judge it
    assert report["finite_differences"].status == "n/a" and "reference fails" in report["finite_differences"].detail
    drawn = report["drawn"]
    assert "bfloat16[1]" in drawn.detail and drawn.parameter == "x", drawn.detail  # the gradient of x
    (x1,) = drawn.example
    assert x1.shape == (1,)


def test_a_correct_kernel_passes_on_inputs_far_from_zero_whatever_the_seed(kernels):
    for seed in (None, 2):  # (2 drew a row where a tolerance without the inputs' rounding failed it)
        assert kernix.check(kernels.centered, lambda x: x - x.mean(-1, keepdims=True), X, seed=seed,
                            checks=["drawn"]).ok


def test_a_variance_that_cancels_far_from_zero_is_caught_whatever_the_seed(kernels):
    def ref(x):
        return (x - x.mean(-1, keepdims=True)) / jnp.sqrt(x.var(-1, keepdims=True) + 1e-5)

    for seed in (None, 1):
        report = kernix.check(kernels.naive_standardize, ref, X, strict=False, seed=seed, checks=["eager", "drawn"])
        assert report["eager"].passed and report["drawn"].failed, report  # right near zero, as the example is
        assert "far from zero" in report["drawn"].detail


def test_an_epsilon_written_into_the_kernel_is_caught_by_drawing_it_large(kernels):
    def ref(x, eps):
        return x / jnp.maximum(jnp.sqrt(jnp.sum(x * x, -1, keepdims=True)), eps)

    report = kernix.check(kernels.eps_written_in, ref, X, eps=1e-6, strict=False, checks=["eager", "drawn"])
    assert report["eager"].passed and report["drawn"].failed, report
    assert "eps=100.0" in report["drawn"].detail


def test_an_output_element_left_unwritten_is_caught(kernels):
    report = kernix.check(kernels.half_copy, lambda x: x, X, strict=False)
    buffers = report["buffers"]
    assert buffers.failed and buffers.parameter == "y"
    assert "leaves 2 of the 4 elements of output 'y' unwritten (or reads them before writing them): (2,), (3,);" \
        in buffers.detail


def test_a_kernel_that_raises_is_a_failed_check(ops):
    report = kernix.check(ops.head, lambda x, k: x[:k], np.arange(6, dtype=np.float32), k=7, strict=False,
                          checks=["eager", "buffers"])
    assert report["eager"].failed and "check failed: k <= x.numel(): k=7 > n=6" in report["eager"].detail
    assert report["buffers"].failed and "raised on exact buffers" in report["buffers"].detail
    assert "k=7 > n=6" in report["buffers"].detail


def test_a_dtype_the_kernel_does_not_take_is_caught(kernels):
    report = kernix.check(kernels.twice, lambda x: 2 * x, X, dtypes=["float32", "float16"], strict=False)
    assert [r.name for r in report if r.failed] == ["drawn"]
    assert "float16" in report["drawn"].detail and "raised" in report["drawn"].detail


# -- options -------------------------------------------------------------------------------------

def test_tolerances_per_dtype_and_overrides(kernels):
    def almost(x):
        return 2 * x * (1 + 1e-4)

    report = kernix.check(kernels.twice, almost, X, strict=False, checks=["eager"])
    assert report["eager"].failed and "rtol=2e-05, atol=1e-06" in report["eager"].detail
    assert kernix.check(kernels.twice, almost, X, rtol=1e-3, checks=["eager", "jit", "vmap"]).ok
    assert kernix.check(kernels.twice, almost, X, rtol={"float32": 1e-3}, checks=["eager"]).ok
    assert not kernix.check(kernels.twice, almost, X, rtol={"float64": 1e-3}, checks=["eager"], strict=False).ok


def test_sizes_and_values_constrain_drawn_inputs(ops):
    x = np.arange(6, dtype=np.float32)
    report = kernix.check(ops.head, lambda x, k: x[:k], x, k=3, strict=False, checks=["drawn"])
    assert report["drawn"].failed and "k=3 > n=1" in report["drawn"].detail
    assert kernix.check(ops.head, lambda x, k: x[:k], x, k=3, sizes={"n": [3, 4, 7]}, checks=["drawn"]).ok
    seen = []

    def ramp(shape, dtype, rng, dims):
        seen.append(dims["n"])
        return np.arange(np.prod(shape), dtype=dtype).reshape(shape)

    assert kernix.check(ops.head, lambda x, k: x[:k], x, k=3, sizes={"n": 5}, values={"x": ramp}, examples=3,
                        checks=["drawn"]).ok
    assert seen and set(seen) == {5}
    with pytest.raises(kernix.CallError, match=r"sizes= names 'm', which the signature \(n\)->\(k\) does not draw"):
        kernix.check(ops.head, lambda x, k: x[:k], x, k=3, sizes={"m": 2}, checks=["drawn"])
    with pytest.raises(kernix.CallError, match=r"values= names 'y', which head\(\) does not take.*its inputs: x"):
        kernix.check(ops.head, lambda x, k: x[:k], x, k=3, values={"y": ramp}, checks=["drawn"])
    with pytest.raises(kernix.CallError, match=r"dtypes= holds 'float33', which is not a dtype"):
        kernix.check(ops.head, lambda x, k: x[:k], x, k=3, dtypes=["float33"], checks=["drawn"])


def test_without_a_shape_signature(kernels):
    report = kernix.check(kernels.add_one, lambda x: x + 1, X)
    assert report.ok
    assert report["drawn"].status == "n/a" and "no shape signature" in report["drawn"].detail
    assert report["vmap_one_call"].status == "n/a" and report["grad"].status == "n/a"
    assert report["buffers"].passed and report["export"].passed


def test_misuse_is_a_call_error(kernels):
    with pytest.raises(kernix.CallError, match="checks a kernel function"):
        kernix.check(lambda x: x, lambda x: x, X)
    with pytest.raises(kernix.CallError, match="unknown check.*'nope'"):
        kernix.check(kernels.twice, lambda x: 2 * x, X, checks=["nope"])
    with pytest.raises(kernix.CallError, match="the reference returns 2 array"):
        kernix.check(kernels.twice, lambda x: (x, x), X)
    with pytest.raises(kernix.CallError, match="the reference raised on the example"):
        kernix.check(kernels.twice, lambda x: x @ x.T @ jnp.ones(3), X)
    with pytest.raises(kernix.CallError, match=r"takes 1 input array"):
        kernix.check(kernels.twice, lambda x, y: x, X, X)


def test_a_reference_that_takes_no_drawn_input_says_so(kernels):
    def picky(x):
        if x.shape != (6,):  # a size never drawn
            raise ValueError("only the example's shape")
        return 2 * x

    report = kernix.check(kernels.twice, picky, np.ones(6, np.float32), strict=False, checks=["drawn"], examples=3)
    assert report["drawn"].failed and "the reference raised on every drawn input" in report["drawn"].detail


def test_check_error_is_an_assertion_error():
    assert issubclass(kernix.CheckError, AssertionError) and issubclass(kernix.CheckError, kernix.KernixError)


def test_without_hypothesis_the_error_says_how_to_install_it(kernels, monkeypatch):
    monkeypatch.setitem(sys.modules, "hypothesis", None)
    with pytest.raises(kernix.KernixError, match=r'pip install "kernix\[check\]"'):
        kernix.check(kernels.twice, lambda x: 2 * x, X)
    report = kernix.check(kernels.twice, lambda x: 2 * x, X, examples=0)
    assert report.ok and report["drawn"].status == "n/a"


def test_count_calls_sees_a_loop(kernels):
    f = jax.vmap(lambda x: kernels.add_one(x, out=jax.ShapeDtypeStruct(x.shape, x.dtype)))
    text = jax.jit(f).lower(np.ones((3, 4), np.float32)).compile().as_text()
    assert count_calls(text, kernels.add_one.target) == (1, True)


def test_typed_ffi_buffers_run_on_exact_buffers():
    m = kernix.load_cpp_inline(unique_name("typed_check"), r"""
    #include "kernix/common.h"
    #include "xla/ffi/api/ffi.h"
    // @BE scaled (...,n)->(...,n)
    void scaled(xla::ffi::Buffer<xla::ffi::DataType::F32> x, xla::ffi::ResultBuffer<xla::ffi::DataType::F32> out,
                float s) {
      for (size_t i = 0; i < x.element_count(); ++i) out->typed_data()[i] = s * x.typed_data()[i];
    }
    """)
    report = kernix.check(m.scaled, lambda x, s: s * x, X, s=1.5, examples=3)
    assert report.ok and report["buffers"].passed


SHARDED = textwrap.dedent(
    """
    import sys
    import numpy as np
    import jax, jax.numpy as jnp
    import kernix
    assert jax.device_count() == 2, jax.devices()
    m = kernix.load_cpp_file(sys.argv[1], name=sys.argv[3], build_directory=sys.argv[2])  # built by the test: a hit
    x = np.random.default_rng(0).uniform(-1, 1, (3, 4)).astype(np.float32)
    report = kernix.check(m.twice, lambda x: 2 * x, x, checks=["sharded", "vmap_one_call", "export"])
    assert report.ok and "over 2 devices: each device runs the kernel on its shard" in report["sharded"].detail, report
    report = kernix.check(m.center, lambda x: x - x.mean(-1, keepdims=True), x[0], checks=["sharded"], strict=False)
    assert report["sharded"].failed and "differs from one device's result" in report["sharded"].detail, report
    print("OK")
    """
)


def test_sharded_over_two_cpu_devices(tmp_path, kernels_build, kernels):
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu")
    script = tmp_path / "sharded.py"
    script.write_text(SHARDED)
    name, cache = kernels_build
    proc = subprocess.run([sys.executable, str(script), str(KERNELS), str(cache), name], env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-5000:]


# -- on the GPU -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cuda_kernels():
    return kernix.load_cuda_file(FIXTURES / "checking" / "kernels_cuda.cu", name=unique_name("checked_cuda"))


@pytest.mark.gpu
@pytest.mark.skipif(not gpus(), reason="needs an NVIDIA GPU")
def test_cuda_kernels_are_checked_on_the_gpu(cuda_kernels):
    x = np.random.default_rng(0).uniform(-1, 1, (5, 300)).astype(np.float32)
    report = kernix.check(cuda_kernels.triple, lambda x: 3 * x, x)
    assert report.ok, report
    assert report["buffers"].passed and report["vmap_one_call"].passed and report["grad"].passed
    assert "compute-sanitizer memcheck, initcheck and racecheck" in report["buffers"].detail, report
    report = kernix.check(cuda_kernels.copy_unguarded, lambda x: x, x, strict=False)
    assert report["buffers"].failed and "bytes past the end of output 'y' (float32[5,300]" in report["buffers"].detail, \
        report
    assert "kernels_cuda.cu:" in report["buffers"].detail and report["eager"].status == "n/a"
    # a read inlined from a CUDA header is told at the user's line, not the header's
    report = kernix.check(cuda_kernels.copy_shifted, lambda x: x, x, strict=False, checks=["buffers"])
    line = next(i + 1 for i, text in enumerate((FIXTURES / "checking" / "kernels_cuda.cu").read_text().splitlines())
                if text.endswith("// BUG-LDG"))
    assert "past the end of input 'x'" in report["buffers"].detail, report
    assert f"kernels_cuda.cu:{line}" in report["buffers"].detail, report
    report = kernix.check(cuda_kernels.double_and_clear, lambda x: 2 * x, x, strict=False)
    assert report["buffers"].failed and "wrote into input 'x'" in report["buffers"].detail, report
    assert report["eager"].failed and report["eager"].parameter == "x", report
    # threads of a block racing on shared memory: racecheck
    report = kernix.check(cuda_kernels.reverse_racy, lambda x: x, x, strict=False, checks=["buffers"])
    buffers = report["buffers"]
    assert buffers.failed and "racecheck" in buffers.detail and "race" in buffers.detail.lower(), report
    assert "kernels_cuda.cu:" in buffers.detail, report


@pytest.mark.gpu
@pytest.mark.skipif(not gpus(), reason="needs an NVIDIA GPU")
def test_a_cuda_write_before_an_output_names_the_output_also_where_another_buffer_is_nearer(cuda_kernels):
    """cudaMalloc put x's 16 bytes 512 bytes below y's (an H200): compute-sanitizer names the nearest allocation,
    x, for a write far enough before y (y[-100]), or beyond x (y[-200]); the output is named beside it."""
    x = np.random.default_rng(0).uniform(-1, 1, (4,)).astype(np.float32)
    for back in (1, 20, 100, 200):
        report = kernix.check(cuda_kernels.copy_then_before, lambda x, back: x, x, back=back, strict=False,
                              checks=["buffers"])
        detail = report["buffers"].detail
        assert report["buffers"].failed and "before the start of output 'y'" in detail, report
        assert f"{4 * back} byte(s) before" in detail and "kernels_cuda.cu:" in detail, report
        assert back > 1 or "input 'x'" not in detail, report  # one element before y: no doubt


@pytest.mark.gpu
@pytest.mark.skipif(len(gpus()) < 2, reason="needs 2 GPUs")
def test_cuda_kernel_sharded_over_two_gpus(cuda_kernels):
    x = np.random.default_rng(0).uniform(-1, 1, (4, 8)).astype(np.float32)
    report = kernix.check(cuda_kernels.triple, lambda x: 3 * x, x, checks=["sharded"])
    assert report["sharded"].passed and "each device runs the kernel on its shard" in report["sharded"].detail


# -- inputs that find bugs by default ----------------------------------------------------------

def test_an_attribute_kept_from_the_first_call_is_caught_by_drawn_attributes(kernels):
    report = kernix.check(kernels.scale_cached, lambda x, a: a * x, X, a=1.5, strict=False)
    assert [r.name for r in report if r.failed] == ["drawn"], report
    assert "a=" in report["drawn"].detail and "a=1.5" not in report["drawn"].detail.split("on drawn inputs")[1]


def test_listed_attribute_values_are_drawn(kernels):
    report = kernix.check(kernels.scale_cached, lambda x, a: a * x, X, a=1.5, strict=False,
                          drawing=kernix.Drawing(attrs={"a": [-4.0]}, examples=20))
    assert report["drawn"].failed and "a=-4.0" in report["drawn"].detail


def test_a_string_attribute_not_drawn_is_named_and_listed_values_catch_the_kernel_ignoring_it(kernels):
    def ref(x, mode):
        return (2 if mode == "double" else 0.5) * x

    report = kernix.check(kernels.scale_by_mode, ref, X, mode="double", strict=False)
    assert report["drawn"].passed and "'mode'" in report["drawn"].detail and "Drawing(attrs=" in report["drawn"].detail
    listed = kernix.check(kernels.scale_by_mode, ref, X, mode="double", strict=False, checks=["drawn"],
                          drawing=kernix.Drawing(attrs={"mode": ["half"]}))
    assert listed["drawn"].failed and "mode='half'" in listed["drawn"].detail


def test_large_values_find_an_overflow_the_example_does_not_show(kernels):
    x = np.random.default_rng(0).uniform(-1, 1, (2, 5)).astype(np.float32)
    report = kernix.check(kernels.softmax_naive, lambda x: jax.nn.softmax(x, axis=-1), x, strict=False,
                          examples=20)
    assert [r.name for r in report if r.failed] == ["drawn"], report
    assert "large values" in report["drawn"].detail


def test_a_correct_softmax_over_special_values_has_no_false_alarm(kernels):
    x = np.random.default_rng(0).uniform(-1, 1, (2, 5)).astype(np.float32)
    assert kernix.check(kernels.softmax_stable, lambda x: jax.nn.softmax(x, axis=-1), x, examples=20).ok


def test_a_family_is_checked_as_one_operation_naming_each_member(kernels):
    report = kernix.check(kernels.halve, lambda x: x / 2, X, strict=False, examples=3)
    assert "halve_float32" in report.function and "halve_float64" in report.function
    assert report["eager"].failed and report["eager"].detail.startswith("halve_float64: output 'y' differs"), report
    assert "halve_float32" not in report["eager"].detail  # float32 is right
    assert report["jit"].failed and report["buffers"].passed and "halve_float32, halve_float64" in \
        report["buffers"].detail
