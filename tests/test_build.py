"""The compiler driver, the cache key and the loaders' options (CPU, plus CUDA compile-only)."""

from __future__ import annotations

import ctypes
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import jax
import jax.numpy as jnp

import kernix
from kernix.backend import toolchain
from kernix.backend.flags import BuildConfig, compile_flags

from helpers import FIXTURES, ROOT, has_nvcc, unique_name

ADD_ONE = """
#include "kernix/common.h"
// @BE add_one (...)->(...)
void add_one(const BE::Tensor x, BE::Tensor out) {
  for (int64_t i = 0; i < x.numel(); ++i) out.data_ptr<float>()[i] = x.data_ptr<float>()[i] + 1.0f;
}
"""


def test_compile_error_names_the_users_line(tmp_path):
    src = tmp_path / "broken.cpp"
    src.write_text(
        '#include "kernix/common.h"\n'
        "// @BE f\n"
        "void f(const BE::Tensor x, BE::Tensor out) {\n"
        "  int y = x.numel()\n"  # line 4: missing semicolon
        "  out.data_ptr<float>()[0] = y;\n"
        "}\n"
    )
    with pytest.raises(kernix.CompilationError) as info:
        kernix.load_cpp_file(src, name=unique_name("broken"), build_directory=tmp_path / "cache")
    message = str(info.value)
    assert f"{src}:4:" in message or f"{src}:5:" in message, message
    assert "error" in message
    assert info.value.output and info.value.command


@pytest.mark.installed
def test_inline_module_options_and_explicit_spec(tmp_path):
    name = unique_name("inline")
    mod = kernix.load_cpp_inline(
        name, [ADD_ONE], functions={"add_one": ["arg", "ret"]}, build_directory=tmp_path,
        optimization_level=0, extra_cflags=["-DUNUSED_FLAG=1"], ninja_workers=1,
    )
    np.testing.assert_array_equal(mod.add_one(jnp.zeros(3, jnp.float32)), [1, 1, 1])
    shim = (tmp_path / "build" / name / "build.ninja").read_text()
    assert "-O0" in shim and "-DUNUSED_FLAG=1" in shim


def test_explicit_spec_that_disagrees_is_rejected(tmp_path):
    with pytest.raises(kernix.KernixError, match="disagrees with its C\\+\\+ signature"):
        kernix.load_cpp_inline(
            unique_name("bad_spec"), ADD_ONE, functions={"add_one": ["arg", "arg", "ret"]}, build_directory=tmp_path
        )


def test_functions_list_selects_and_unannotated_names_work(tmp_path):
    src = ADD_ONE + textwrap.dedent(
        """
        void plain(const BE::Tensor x, BE::Tensor out, float k) {
          for (int64_t i = 0; i < x.numel(); ++i) out.data_ptr<float>()[i] = k;
        }
        """
    )
    mod = kernix.load_cpp_inline(unique_name("subset"), src, functions=["plain"], build_directory=tmp_path)
    assert list(mod.functions) == ["plain"]
    np.testing.assert_array_equal(mod.plain(jnp.zeros(2, jnp.float32), k=4.0, out=jax.ShapeDtypeStruct((2,), jnp.float32)), [4, 4])


def test_auto_register_false(tmp_path):
    name = unique_name("manual")
    mod = kernix.load_cpp_inline(name, ADD_ONE, auto_register=False, build_directory=tmp_path)
    assert f"{name}.add_one" not in kernix.list_registered_targets()
    with pytest.raises(kernix.RegistrationError, match="register"):
        mod.add_one(jnp.zeros(1, jnp.float32))
    prefix = unique_name("chosen")
    assert kernix.register_ffi_target(mod, target_prefix=prefix) == [f"{prefix}.add_one"]
    assert kernix.list_registered_targets()[f"{prefix}.add_one"] == "cpu"
    np.testing.assert_array_equal(mod.add_one(jnp.zeros(1, jnp.float32)), [1])
    assert mod.register() == [f"{prefix}.add_one"]  # again: a no-op


def test_load_cpp_dir_builds_each_file(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for i in range(2):
        (src / f"k{i}.cpp").write_text(ADD_ONE.replace("add_one", f"add_{i}").replace("1.0f", f"{i + 1}.0f"))
    (src / "notes.txt").write_text("not a source")
    mod = kernix.load_cpp_dir(src, name=unique_name("dir"), build_directory=tmp_path / "cache")
    assert list(mod.functions) == ["add_0", "add_1"]
    x = jnp.zeros(2, jnp.float32)
    np.testing.assert_array_equal(mod.add_0(x), [1, 1])
    np.testing.assert_array_equal(mod.add_1(x), [2, 2])
    assert len(list((tmp_path / "cache" / "build" / mod.name).glob("shim_*.o"))) == 2


CHECKED = """
#include "kernix/common.h"
// @BE NAME
void NAME(const BE::Tensor& x, kernix::Tensor& out) {
  BE_CHECK(x.numel() < LIMIT) << "NAME takes fewer than " << LIMIT << " elements, not " << x.numel();
  for (int64_t i = 0; i < x.numel(); ++i) out.data_ptr<float>()[i] = x.data_ptr<float>()[i] + LIMIT;
}
"""


def _checked(name: str, limit: int) -> str:
    return CHECKED.replace("NAME", name).replace("LIMIT", str(limit))


@pytest.mark.installed
def test_messages_are_compiled_once_per_module_and_stay_inside_it(tmp_path):
    """The text of failed checks is built out of line, in code each module compiles once (with its
    first handler unit) and keeps hidden: a module of two sources links, and two modules loaded in
    one process each report their own messages."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.cpp").write_text(_checked("small", 3))
    (src / "b.cpp").write_text(_checked("large", 100))
    two = kernix.load_cpp_dir(src, name=unique_name("two_units"), build_directory=tmp_path / "c1")
    other = kernix.load_cpp_inline(unique_name("other"), _checked("other", 5), build_directory=tmp_path / "c2")
    x, out = jnp.zeros(4, jnp.float32), jax.ShapeDtypeStruct((4,), jnp.float32)
    np.testing.assert_array_equal(two.large(x, out=out), [100] * 4)
    np.testing.assert_array_equal(other.other(x, out=out), [5] * 4)
    with pytest.raises(Exception, match=r"kernix: small: .*a\.cpp:5: check failed: x\.numel\(\) < 3: "
                                        r"small takes fewer than 3 elements, not 4"):
        jax.block_until_ready(two.small(x, out=out))
    with pytest.raises(Exception, match=r"check failed: x\.numel\(\) < 5: other takes fewer than 5 elements, not 6"):
        jax.block_until_ready(other.other(jnp.zeros(6, jnp.float32), out=jax.ShapeDtypeStruct((6,), jnp.float32)))
    with pytest.raises(Exception, match=r"BE::Tensor::data_ptr<float>\(\): parameter 'x' is int32 \(shape \[4\]\)"):
        jax.block_until_ready(two.large(jnp.zeros(4, jnp.int32), out=out))
    for mod, cache in ((two, "c1"), (other, "c2")):
        build = tmp_path / cache / "build" / mod.name
        units = sorted(build.glob("*.c*"))  # the shim, handler and messages units: one includes messages.cc
        assert ["messages.cc" in u.read_text() for u in units].count(True) == 1
        if shutil.which("nm"):
            # (the symbols another module can bind to: gold lists a hidden TLS variable in the dynamic
            # symbol table too, as a local symbol, which the dynamic linker never binds to)
            exported = subprocess.run(["nm", "-D", "-C", "--defined-only", "--extern-only", str(mod.path)],
                                      capture_output=True, text=True, check=True).stdout
            assert "kernix::" not in exported  # hidden: one module never binds to another's copy
            assert "kernix_handler_" in exported


def test_functions_names_unannotated_functions_across_a_directory(tmp_path):
    """functions= finds an unannotated function in whichever source declares it (was: only in a
    single-file module); a name no file declares, or several do, is a clear error."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.cpp").write_text(ADD_ONE)  # annotated
    (src / "b.cpp").write_text(
        '#include "kernix/common.h"\n'
        "void fill(const BE::Tensor x, BE::Tensor out, float k) {\n"
        "  for (int64_t i = 0; i < out.numel(); ++i) out.data_ptr<float>()[i] = k;\n}\n"
    )
    cache = tmp_path / "cache"
    mod = kernix.load_cpp_dir(src, name=unique_name("dirfn"), build_directory=cache, functions=["fill", "add_one"])
    assert list(mod.functions) == ["add_one", "fill"]
    assert list(mod.specs["fill"]) == ["arg", "ret", "attr.k:float32"]
    x = jnp.zeros(2, jnp.float32)
    np.testing.assert_array_equal(mod.fill(x, k=3.0, out=jax.ShapeDtypeStruct(x.shape, x.dtype)), [3, 3])
    np.testing.assert_array_equal(mod.add_one(x), [1, 1])
    mod = kernix.load_cpp_dir(src, name=unique_name("dirfn"), build_directory=cache,
                              functions={"fill": ["arg", "ret", "attr.k"]})
    assert list(mod.functions) == ["fill"]
    with pytest.raises(kernix.KernixError, match=r"functions names \['nope'\], but no source file of the module "
                       r"declares them; the files: .*a\.cpp, .*b\.cpp"):
        kernix.load_cpp_dir(src, name=unique_name("dirfn"), build_directory=cache, functions=["nope"])
    (src / "a.cpp").write_text(ADD_ONE + "void fill(const BE::Tensor x, BE::Tensor out, float k);\n")
    with pytest.raises(kernix.KernixError, match=r"'fill', which several source files declare \(.*a\.cpp:\d+, "
                       r".*b\.cpp:2\): mark the one to export with `// @BE fill`"):
        kernix.load_cpp_dir(src, name=unique_name("dirfn"), build_directory=cache, functions=["fill"])


def test_annotations_in_an_included_header_are_named_with_the_fix(tmp_path):
    """Was: "no function to export" alone, though the user had annotated, in a header."""
    (tmp_path / "ops.hpp").write_text(
        '#pragma once\n#include "kernix/common.h"\n// @BE seven\n'
        "inline void seven(const BE::Tensor x, BE::Tensor out) { out.data_ptr<float>()[0] = 7.0f; }\n"
    )
    src = tmp_path / "k.cpp"
    src.write_text('#include "ops.hpp"\n')
    with pytest.raises(kernix.KernixError, match=r"no function to export in .*k\.cpp.*The annotations in included "
                       r"headers \(" + re.escape(str(tmp_path / "ops.hpp")) + r":3 \(seven\)\) are not read.*"
                       r"as the header declares it \(in its namespace\), with `// @BE seven` on the line before"):
        kernix.load_cpp_file(src, name=unique_name("hdr"), build_directory=tmp_path / "cache")
    src.write_text('#include "ops.hpp"\n// @BE seven\nvoid seven(const BE::Tensor x, BE::Tensor out);\n')
    mod = kernix.load_cpp_file(src, name=unique_name("hdr"), build_directory=tmp_path / "cache")
    np.testing.assert_array_equal(mod.seven(jnp.zeros(1, jnp.float32), out=jax.ShapeDtypeStruct((1,), jnp.float32)), [7])


def test_functions_across_sources_name_the_annotations_of_an_included_header(tmp_path):
    """Was: "no source file of the module declares them" alone, though the function
    was annotated, in a header one of the sources includes (a single source said so)."""
    src = tmp_path / "src"
    src.mkdir()
    (tmp_path / "ops.hpp").write_text(
        '#pragma once\n#include "kernix/common.h"\n// @BE seven\n'
        "inline void seven(const BE::Tensor x, BE::Tensor out) { out.data_ptr<float>()[0] = 7.0f; }\n"
    )
    (src / "a.cpp").write_text(ADD_ONE)
    (src / "b.cpp").write_text('#include "../ops.hpp"\n')
    with pytest.raises(kernix.KernixError, match=r"functions names \['seven'\], but no source file of the module "
                       r"declares them; the files: .*a\.cpp, .*b\.cpp\. The annotations in included headers \("
                       + re.escape(str(tmp_path / "ops.hpp")) + r":3 \(seven\)\) are not read.*"
                       r"as the header declares it \(in its namespace\), with `// @BE seven` on the line before"):
        kernix.load_cpp_dir(src, name=unique_name("dirhdr"), build_directory=tmp_path / "cache", functions=["seven"])
    (src / "b.cpp").write_text('#include "../ops.hpp"\nvoid seven(const BE::Tensor x, BE::Tensor out);\n')
    mod = kernix.load_cpp_dir(src, name=unique_name("dirhdr"), build_directory=tmp_path / "cache",
                              functions=["seven", "add_one"])
    np.testing.assert_array_equal(mod.seven(jnp.zeros(1, jnp.float32), out=jax.ShapeDtypeStruct((1,), jnp.float32)), [7])


def test_options_are_validated(tmp_path):
    with pytest.raises(TypeError, match="unexpected option"):
        kernix.load_cpp_file(FIXTURES / "build" / "cpu_ops.cpp", extra_cuda_cflags=["-x"])
    with pytest.raises(ValueError, match="optimization_level"):
        kernix.load_cpp_inline(unique_name("opt"), ADD_ONE, optimization_level=7, build_directory=tmp_path)


def test_flags_follow_the_reference():
    cuda = compile_flags(BuildConfig("cuda", optimization_level=2, use_fast_math=True, arch="sm_90",
                                     extra_cflags=("-lineinfo",), extra_ldflags=("-lm",))) if has_nvcc() else None
    cpu = compile_flags(BuildConfig("cpu", optimization_level=1, use_fast_math=True))
    assert "-O1" in cpu["user"] and "-O1" in cpu["handlers"] and "-ffast-math" in cpu["user"]
    assert cpu["handlers"][cpu["handlers"].index("-isystem") + 1] == toolchain.jax_ffi_include_dir()
    if cuda is not None:
        user = cuda["user"]
        assert "-O2" in user and "-Xptxas=-O2" in user and "--use_fast_math" in user and "-lineinfo" in user
        assert "--generate-code=arch=compute_90,code=[compute_90,sm_90]" in user
        assert f"-ccbin={toolchain.find_host_compiler().path}" in user  # one host compiler for all objects
        assert "-l:libcudart_static.a" in cuda["link"] and cuda["link"][-1] == "-lm"


@pytest.mark.installed
@pytest.mark.skipif(not has_nvcc(), reason="nvcc not installed")
def test_cuda_module_compiles_without_a_gpu(tmp_path):
    """CUDA modules build with an explicit architecture; their handlers are exported."""
    mod = kernix.load_cuda_file(
        FIXTURES / "build" / "cuda_ops.cu", name=unique_name("cuda_ops"), compute_capability="sm_80",
        auto_register=False, build_directory=tmp_path, use_fast_math=True,
    )
    assert mod.platform == "cuda"
    lib = ctypes.CDLL(str(mod.path))
    for fn, symbol in mod.handlers.items():
        assert getattr(lib, symbol) is not None, fn
    assert set(mod.functions) == {"vector_add", "scale_by", "half_scale", "typed_axpy"}
    assert mod.specs["scale_by"] == ("arg", "ret", "attr.scale_factor:float32", "stream")
    cuobjdump = Path(toolchain.find_nvcc().path).with_name("cuobjdump")
    if not cuobjdump.is_file() and toolchain.find_cuda_home():
        cuobjdump = toolchain.find_cuda_home() / "bin" / "cuobjdump"
    if cuobjdump.is_file():
        listing = subprocess.run([str(cuobjdump), "--list-elf", str(mod.path)], capture_output=True, text=True)
        assert "sm_80" in listing.stdout, listing


def _run(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)


WARM_PROBE = textwrap.dedent(
    """
    import subprocess, sys, builtins
    import jax, jax.numpy as jnp
    sys.modules["clang"] = None          # any import of libclang fails
    sys.modules["clang.cindex"] = None
    def no_process(*a, **k):
        raise AssertionError(f"warm load started a process: {a[0] if a else k}")
    subprocess.Popen = no_process        # covers run(), check_output(), ninja, compilers
    import kernix
    mod = kernix.load_cpp_file(PATH, name="warm_probe")
    print(float(mod.add_one(jnp.zeros(1, jnp.float32))[0]))
    """
)


@pytest.mark.installed
def test_warm_load_in_a_new_process_runs_no_compiler(tmp_path):
    src = tmp_path / "warm.cpp"
    src.write_text(ADD_ONE)
    env = {**os.environ, "KERNIX_CACHE_DIR": str(tmp_path / "cache")}
    cold = _run(f"import kernix; kernix.load_cpp_file({str(src)!r}, name='warm_probe')", env)
    assert cold.returncode == 0, cold.stderr
    warm = _run(WARM_PROBE.replace("PATH", repr(str(src))), env)
    assert warm.returncode == 0, warm.stderr
    assert warm.stdout.strip() == "1.0"


def test_edited_header_causes_rebuild(tmp_path):
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "value.h").write_text("#define KERNIX_TEST_VALUE 1.0f\n")
    src = tmp_path / "uses_header.cpp"
    src.write_text(ADD_ONE.replace('#include "kernix/common.h"', '#include "kernix/common.h"\n#include "value.h"')
                   .replace("+ 1.0f", "+ KERNIX_TEST_VALUE"))
    env = {**os.environ, "KERNIX_CACHE_DIR": str(tmp_path / "cache")}
    code = (
        "import jax.numpy as jnp, kernix\n"
        f"m = kernix.load_cpp_file({str(src)!r}, name='hdr', extra_include_paths=[{str(inc)!r}])\n"
        "print(float(m.add_one(jnp.zeros(1, jnp.float32))[0]), m.path)\n"
    )
    first = _run(code, env)
    assert first.returncode == 0, first.stderr
    (inc / "value.h").write_text("#define KERNIX_TEST_VALUE 5.0f\n")
    second = _run(code, env)
    assert second.returncode == 0, second.stderr
    v1, so1 = first.stdout.split()
    v2, so2 = second.stdout.split()
    assert (v1, v2) == ("1.0", "5.0")
    assert so1 != so2
    manifest = json.loads((Path(so2).parent / "manifest.json").read_text())
    assert str(inc / "value.h") in [d[0] for d in manifest["dependencies"]]


def test_editing_a_kernel_body_does_not_recompile_handlers(tmp_path):
    name = unique_name("edit")
    cache = tmp_path / "cache"
    kernix.load_cpp_inline(name, ADD_ONE, build_directory=cache, auto_register=False)
    handlers_o = cache / "build" / name / "handlers_0.o"
    shim_o = cache / "build" / name / "shim_0.o"
    before = (handlers_o.stat().st_mtime_ns, shim_o.stat().st_mtime_ns)
    mod = kernix.load_cpp_inline(name, ADD_ONE.replace("1.0f", "2.0f"), build_directory=cache, auto_register=False)
    after = (handlers_o.stat().st_mtime_ns, shim_o.stat().st_mtime_ns)
    assert after[0] == before[0], "handlers were recompiled"
    assert after[1] != before[1], "the edited unit was not recompiled"
    mod.register(unique_name("edited"))
    np.testing.assert_array_equal(mod.add_one(jnp.zeros(1, jnp.float32)), [2])


def test_a_generated_unit_rewritten_loses_its_object_and_an_unchanged_one_keeps_it(tmp_path):
    """ninja compares modification times: a unit rewritten within its object's clock tick would look up to
    date, so the object of every rewritten unit is deleted with it."""
    from kernix.backend import ninja

    name, src = unique_name("regenerated"), tmp_path / "add_one.cpp"
    src.write_text(ADD_ONE)
    kernix.load_cpp_file(src, name=name, build_directory=tmp_path / "cache", auto_register=False)
    build = tmp_path / "cache" / "build" / name
    objects = {o: (build / o).stat().st_mtime_ns for o in ("shim_0.o", "handlers_0.o", "messages.o")}
    units = ninja.previous_units(build, [src])
    assert units is not None and [fn.spec.name for _, fns in units for fn in fns] == ["add_one"]
    ninja.generate(build, units, BuildConfig("cpu"))  # the same code: every object kept
    assert {o: (build / o).stat().st_mtime_ns for o in objects} == objects
    renamed = [(s, [ninja.codegen.ExportedFunction(fn.index, dataclasses.replace(fn.spec, name="add_two"))
                    for fn in fns]) for s, fns in units]
    ninja.generate(build, renamed, BuildConfig("cpu"))
    assert [o for o in objects if (build / o).exists()] == ["messages.o"]
    assert ninja.previous_units(build, [src, src]) is None  # recorded for one source, not two
    (build / ninja.UNITS_RECORD).write_text("[[[0, {}]]]")
    assert ninja.previous_units(build, [src]) is None  # what does not read back is no record


def test_force_rebuild_recompiles(tmp_path):
    name = unique_name("force")
    first = kernix.load_cpp_inline(name, ADD_ONE, build_directory=tmp_path)
    shim_o = tmp_path / "build" / name / "shim_0.o"
    stamp = shim_o.stat().st_mtime_ns
    again = kernix.load_cpp_inline(name, ADD_ONE, build_directory=tmp_path, force_rebuild=True)
    assert shim_o.stat().st_mtime_ns != stamp
    np.testing.assert_array_equal(again.add_one(jnp.zeros(1, jnp.float32)), [1])
    assert first.digest == again.digest  # deterministic build: re-registration is a no-op


def test_cuda_file_given_to_the_cpp_loader_is_a_clear_error():
    with pytest.raises(kernix.KernixError, match="load_cuda_file"):
        kernix.load_cpp_file(FIXTURES / "build" / "cuda_ops.cu")


def test_verbose_prints_every_command(tmp_path, capfd):
    kernix.load_cpp_inline(unique_name("loud"), ADD_ONE, build_directory=tmp_path, verbose=True, auto_register=False)
    err = capfd.readouterr().err
    assert "ninja" in err and "-c shim_0.cpp" in err and "-c handlers_0.cpp" in err and "-shared" in err


@pytest.mark.skipif(not has_nvcc(), reason="nvcc not installed")
def test_load_cuda_dir_compiles_each_file(tmp_path):
    src = tmp_path / "kernels"
    src.mkdir()
    for i in range(2):
        (src / f"k{i}.cu").write_text(
            '#include <cuda_runtime.h>\n#include "kernix/common.h"\n'
            f"__global__ void kernel_{i}(float* o) {{ o[threadIdx.x] = {i}; }}\n"
            f"// @BE fill_{i}\n"
            f"void fill_{i}(const BE::Tensor x, BE::Tensor out, cudaStream_t s) {{\n"
            f"  kernel_{i}<<<1, 32, 0, s>>>(out.data_ptr<float>());\n}}\n"
        )
    mod = kernix.load_cuda_dir(src, compute_capability="sm_90", auto_register=False, build_directory=tmp_path / "c")
    assert mod.name == "kernels" and list(mod.functions) == ["fill_0", "fill_1"]
    lib = ctypes.CDLL(str(mod.path))
    assert all(getattr(lib, symbol) for symbol in mod.handlers.values())
    assert len(list((tmp_path / "c" / "build" / "kernels").glob("shim_*.o"))) == 2
