"""``kernix.export``: artifacts that call kernix kernels, run again in a new process."""

from __future__ import annotations

import os

import numpy as np
import pytest

import jax
import jax.numpy as jnp

import kernix
from kernix.runtime import registry

from helpers import gpus, unique_name
from test_prebuilt import no_compiler_env, run_python, write_source

pytest.importorskip("flatbuffers", reason="jax.export serialization needs flatbuffers")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Two builds of one module name with different code (OFFSET=1 and OFFSET=5)."""
    base = tmp_path_factory.mktemp("export")
    src = write_source(base / "src")
    one = kernix.build_module(src, base / "one", name="exops", defines=["OFFSET=1"])
    five = kernix.build_module(src, base / "five", name="exops", defines=["OFFSET=5"])
    return one, five


def _export(directory, tmp_path):
    mod = kernix.load_prebuilt(directory)
    fn = jax.jit(lambda x: mod.scale(x, factor=2.0) * 10)
    exp = kernix.export(fn, jax.ShapeDtypeStruct((3,), jnp.float32))
    path = tmp_path / "fn.jax"
    path.write_bytes(exp.serialize())
    return mod, exp, path


def test_export_uses_versioned_targets(built, tmp_path):
    one, _ = built
    mod, exp, _ = _export(one.directory, tmp_path)
    versioned = f"exops.scale@{one.library_sha256[:12]}"
    assert registry.versioned_target("exops.scale") == versioned
    assert versioned in kernix.list_registered_targets()
    assert kernix.runtime.export.kernix_targets(exp) == (versioned,)
    np.testing.assert_allclose(exp.call(jnp.arange(3, dtype=jnp.float32)), [10, 30, 50])
    # the seed path keeps working: plain target names, called directly
    np.testing.assert_allclose(mod.scale(jnp.ones(3, jnp.float32), factor=1.0), [2, 2, 2])


def test_round_trip_in_a_new_process_without_compiler(built, tmp_path):
    one, _ = built
    _, _, path = _export(one.directory, tmp_path)
    proc = run_python(
        f"""
        import jax.numpy as jnp, kernix
        kernix.load_prebuilt({str(one.directory)!r})
        fn = kernix.deserialize(open({str(path)!r}, "rb").read())
        print(list(map(float, fn(jnp.arange(3, dtype=jnp.float32)))))
        import jax
        print(list(map(float, jax.jit(fn)(jnp.arange(3, dtype=jnp.float32)))))  # the artifact is hashable
        """,
        no_compiler_env(tmp_path),
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["[10.0,", "30.0,", "50.0]"] * 2


def test_other_code_under_the_same_name_is_refused(built, tmp_path):
    one, five = built
    _, _, path = _export(one.directory, tmp_path)
    proc = run_python(
        f"""
        import jax.numpy as jnp, kernix
        kernix.load_prebuilt({str(five.directory)!r})  # same module name, other code
        fn = kernix.deserialize(open({str(path)!r}, "rb").read())
        try:
            fn(jnp.arange(3, dtype=jnp.float32))
        except kernix.KernixError as exc:
            print("refused:", exc)
        """,
        no_compiler_env(tmp_path),
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("refused:")
    assert "'exops.scale' is loaded with other code" in proc.stdout
    assert five.library_sha256[:12] in proc.stdout and one.library_sha256[:12] in proc.stdout


def test_nothing_loaded_is_refused_with_what_to_load(built, tmp_path):
    one, _ = built
    _, _, path = _export(one.directory, tmp_path)
    proc = run_python(
        f"""
        import jax.numpy as jnp, kernix
        fn = kernix.deserialize(open({str(path)!r}, "rb").read())
        try:
            fn(jnp.arange(3, dtype=jnp.float32))
        except kernix.KernixError as exc:
            print("refused:", exc)
        """,
        no_compiler_env(tmp_path),
    )
    assert "no loaded module provides 'exops.scale'" in proc.stdout, proc.stderr
    assert "load_prebuilt" in proc.stdout


def test_jit_module_round_trip(tmp_path):
    """A JIT-loaded module exports too; the new process loads it again (a cache hit)."""
    src = write_source(tmp_path / "src")
    name = unique_name("jitexp")
    cache = tmp_path / "cache"
    mod = kernix.load_cpp_file(src, name=name, extra_cflags=["-DOFFSET=0"], build_directory=cache)
    exp = kernix.export(jax.vmap(lambda x: mod.scale(x, factor=3.0)), jax.ShapeDtypeStruct((2, 2), jnp.float32))
    path = tmp_path / "vmapped.jax"
    path.write_bytes(exp.serialize())
    env = dict(os.environ, JAX_PLATFORMS="cpu")  # the kernix under test, installed or not
    proc = run_python(
        f"""
        import jax.numpy as jnp, kernix
        kernix.load_cpp_file({str(src)!r}, name={name!r}, extra_cflags=["-DOFFSET=0"],
                             build_directory={str(cache)!r})
        fn = kernix.deserialize(open({str(path)!r}, "rb").read())
        print(fn(jnp.ones((2, 2), jnp.float32)).tolist())
        """,
        env,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[[3.0, 3.0], [3.0, 3.0]]"


# -- one artifact for the CPU and CUDA: each platform's library is recorded and checked -----------

@pytest.fixture(scope="module")
def both(tmp_path_factory):
    """A C++ build of `scale` (x * factor), prebuilt, and the loader call of a CUDA build
    of it under the same module name (load_prebuilt wants a GPU for a CUDA module; the
    JIT loader builds and registers one without)."""
    from helpers import has_nvcc
    from test_prebuilt import CUDA_SCALE

    if not has_nvcc():
        pytest.skip("needs nvcc to build the CUDA module (it runs no kernel without a GPU)")
    base = tmp_path_factory.mktemp("both")
    cpp = kernix.build_module(write_source(base / "cpp"), base / "cpp_build", name="mpops", defines=["OFFSET=0"])
    arch = "sm_" + gpus()[0].compute_capability.replace(".", "") if gpus() else "sm_90"
    src = write_source(base / "cuda", CUDA_SCALE, "scale.cu")
    load_cuda = (f"kernix.load_cuda_file({str(src)!r}, name='mpops', compute_capability={arch!r}, "
                 f"build_directory={str(base / 'cuda_cache')!r})")
    cuda = eval(load_cuda)
    return cpp, cuda, load_cuda


def _export_both(both, tmp_path):
    cpp, cuda, _ = both
    cpp_mod = kernix.load_prebuilt(cpp.directory)
    assert cpp_mod.targets == cuda.targets == {"scale": "mpops.scale"}
    fn = jax.jit(lambda x: cpp_mod.scale(x, factor=2.0) * 10)
    exp = kernix.export(fn, jax.ShapeDtypeStruct((3,), jnp.float32), platforms=["cpu", "cuda"])
    path = tmp_path / "both.jax"
    path.write_bytes(exp.serialize())
    return exp, path


def test_export_for_two_platforms_names_each_library(both, tmp_path):
    cpp, cuda, _ = both
    exp, _ = _export_both(both, tmp_path)
    assert tuple(exp.platforms) == ("cpu", "cuda")
    name = f"mpops.scale@cpu:{cpp.library_sha256[:12]},cuda:{cuda.digest[:12]}"
    assert kernix.runtime.export.kernix_targets(exp) == (name,)
    with jax.default_device(jax.devices("cpu")[0]):
        np.testing.assert_allclose(exp.call(jnp.arange(3, dtype=jnp.float32)), [0, 20, 40])
    # By default, the platforms on which every kernel the function calls has a handler: both here.
    mod = kernix.load_prebuilt(cpp.directory)
    default = kernix.export(jax.jit(lambda x: mod.scale(x, factor=2.0)), jax.ShapeDtypeStruct((3,), jnp.float32))
    assert tuple(default.platforms) == ("cpu", "cuda")
    assert kernix.runtime.export.kernix_targets(default) == (name,)


_ONE_PLATFORM = """
import jax, jax.numpy as jnp, kernix
{load}
fn = kernix.deserialize(open({path!r}, "rb").read())
for platform in ("cpu", "cuda"):
    try:
        fn.check(platform)
        print(platform, "ok")
    except kernix.KernixError as exc:
        print(platform, "refused:", exc)
try:
    print("call", fn(jnp.arange(3, dtype=jnp.float32)).tolist())
except kernix.KernixError as exc:
    print("call refused:", exc)
"""


def _run_one_platform(load: str, path, platforms: str | None = None):
    """Run _ONE_PLATFORM in a new process (with ``JAX_PLATFORMS=platforms``, or every
    platform JAX finds: a GPU where there is one); its output lines."""
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    if platforms:
        env["JAX_PLATFORMS"] = platforms
    proc = run_python(_ONE_PLATFORM.format(load=load, path=str(path)), env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def test_a_process_with_only_the_cuda_build_accepts_it_for_cuda(both, tmp_path):
    """Was: one library's hash stood for both platforms, and a process that loaded only
    the CUDA build refused the artifact as other code."""
    cpp, cuda, load_cuda = both
    _, path = _export_both(both, tmp_path)
    lines = _run_one_platform(load_cuda, path)
    assert "cuda ok" in lines, lines
    assert not any("other code" in line for line in lines), lines
    cpu_line = next(line for line in lines if line.startswith("cpu "))
    assert "no loaded module provides 'mpops.scale' for CPU" in cpu_line and cpp.library_sha256[:12] in cpu_line
    if not gpus():  # the call runs on the CPU here, where only the CUDA build is loaded: refused, not XLA's error
        assert any(line.startswith("call refused: ") and "for CPU" in line for line in lines), lines
    else:
        assert "call [0.0, 20.0, 40.0]" in lines, lines


def test_a_process_with_only_the_cpp_build_runs_it_on_the_cpu(both, tmp_path):
    cpp, cuda, _ = both
    _, path = _export_both(both, tmp_path)
    lines = _run_one_platform(f"kernix.load_prebuilt({str(cpp.directory)!r})", path, "cpu")
    assert "cpu ok" in lines and "call [0.0, 20.0, 40.0]" in lines, lines
    assert any(line.startswith("cuda refused:") and cuda.digest[:12] in line for line in lines), lines


def test_other_code_for_one_platform_is_refused(both, tmp_path):
    _, path = _export_both(both, tmp_path)
    other = kernix.build_module(write_source(tmp_path / "other"), tmp_path / "other_build", name="mpops",
                                defines=["OFFSET=7"])
    lines = _run_one_platform(f"kernix.load_prebuilt({str(other.directory)!r})", path, "cpu")
    assert any("is loaded with other code for CPU" in line for line in lines), lines
    assert any(line.startswith("call refused") for line in lines), lines


def test_exporting_a_kernel_for_a_platform_it_has_no_build_for_is_refused(built):
    one, _ = built
    mod = kernix.load_prebuilt(one.directory)
    with pytest.raises(kernix.CallError, match=r"scale\(\) of module 'exops' cannot be compiled for CUDA GPUs: "
                                               r"the module was built for the CPU.*platforms=\['cpu'\]"):
        kernix.export(jax.jit(lambda x: mod.scale(x, factor=2.0)), jax.ShapeDtypeStruct((3,), jnp.float32),
                      platforms=["cuda"])


ADD_ONE = """#include "kernix/common.h"
// @BE add_one (...)->(...)
void add_one(const BE::Tensor& x, BE::Tensor& y) {
  for (int64_t i = 0; i < x.numel(); ++i) y.data_ptr<float>()[i] = x.data_ptr<float>()[i] + 1;
}
"""


def test_a_module_named_with_a_dash_exports_and_runs_again(tmp_path):
    """Was: the artifact of a module named 'my-ops' (a valid load) was refused
    as calling no loaded module (the versioned name was read as 'ops...')."""
    name = unique_name("my-ops")
    mod = kernix.load_cpp_inline(name, ADD_ONE, build_directory=tmp_path)
    x = jnp.ones(3, jnp.float32)
    artifact = kernix.deserialize(kernix.export(jax.jit(mod.add_one), x).serialize())
    assert [t.partition("@")[0] for t in artifact.targets] == [f"{name}.add_one"]
    np.testing.assert_array_equal(artifact.call(x), [2, 2, 2])


def test_an_artifact_calling_a_kernix_target_by_its_plain_name_is_refused(tmp_path):
    """Was: an artifact made by raw jax.export, calling "<prefix>.add_one",
    was accepted and ran whatever code has that name now."""
    name = unique_name("plain")
    mod = kernix.load_cpp_inline(name, ADD_ONE, build_directory=tmp_path)
    target = f"{name}.add_one"

    def raw(x):
        return jax.ffi.ffi_call(target, jax.ShapeDtypeStruct(x.shape, x.dtype))(x)

    x = jnp.ones(3, jnp.float32)
    exported = jax.export.export(jax.jit(raw), disabled_checks=[
        jax.export.DisabledSafetyCheck.custom_call(target)])(x)
    with pytest.raises(kernix.KernixError, match=rf"calls the kernix target\(s\) '{target}' by plain name.*"
                                                 r"kernix\.export"):
        kernix.deserialize(exported.serialize())
    # The same function exported by kernix runs.
    np.testing.assert_array_equal(kernix.deserialize(kernix.export(jax.jit(mod.add_one), x).serialize()).call(x),
                                  [2, 2, 2])
