"""kernix as a drop-in for brainevent: its headers, its contract, its names."""

from __future__ import annotations

import subprocess
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import kernix
from kernix.backend import codegen
from kernix.language.spec import FunctionSpec, Param

from helpers import FIXTURES, unique_name

DROPIN = FIXTURES / "dropin"


@pytest.fixture(scope="module")
def own_headers_module():
    return kernix.load_cpp_file(
        DROPIN / "own_headers.cpp", name=unique_name("own_headers"),
        extra_include_paths=[str(DROPIN / "own_include")],
    )


@pytest.fixture(scope="module")
def reference_api_module():
    return kernix.load_cpp_file(DROPIN / "reference_api.cpp", name=unique_name("reference_api"))


def test_a_projects_own_brainevent_header_is_used_and_its_tensor_built(own_headers_module) -> None:
    import jax.numpy as jnp

    mod = own_headers_module
    assert mod.specs["scale_own"] == ("arg", "ret", "attr.factor:float64")
    x = jnp.arange(6, dtype=jnp.float32).reshape(2, 3)
    y = mod.scale_own(x, factor=2.5, out=jax_struct(x.shape, x.dtype))
    np.testing.assert_allclose(np.asarray(y), np.arange(6).reshape(2, 3) * 2.5)


def test_the_dtype_reaches_the_projects_own_numbering(own_headers_module) -> None:
    import jax.numpy as jnp

    out = jax_struct((2,), jnp.int32)
    # The project's enum numbers float32 1, float64 absent from XLA's order, int32 6.
    got = own_headers_module.dtype_code(jnp.zeros((2, 3, 4), jnp.float32), out=out)
    assert list(np.asarray(got)) == [1, 3]
    got = own_headers_module.dtype_code(jnp.zeros((5,), jnp.int32), out=out)
    assert list(np.asarray(got)) == [6, 1]


def test_a_dtype_the_projects_enum_lacks_is_refused_with_a_message(own_headers_module) -> None:
    import jax.numpy as jnp

    with pytest.raises(Exception, match="dtype int8 .*no BE::DType value"):
        np.asarray(own_headers_module.dtype_code(jnp.zeros((2,), jnp.int8), out=jax_struct((2,), jnp.int32)))


def test_the_reference_api_builds_against_kernix_headers_alone(reference_api_module) -> None:
    import jax.numpy as jnp

    mod = reference_api_module
    x = jnp.arange(12, dtype=jnp.float32).reshape(3, 4)
    y = mod.add_rows(x, out=jax_struct((3,), jnp.float32))
    np.testing.assert_allclose(np.asarray(y), np.arange(12).reshape(3, 4).sum(1))
    v = jnp.array([10, 20, 30], jnp.uint8)
    idx = jnp.array([2, 0, 1, 2], jnp.int32)
    np.testing.assert_array_equal(np.asarray(mod.gather(v, idx, out=jax_struct((4,), jnp.uint8))), [30, 10, 20, 30])


def test_block_dispatch_and_checks_fail_as_python_errors(reference_api_module) -> None:
    import jax.numpy as jnp

    mod = reference_api_module
    with pytest.raises(Exception, match="BE_DISPATCH_FLOATING: unsupported dtype int32"):
        np.asarray(mod.add_rows(jnp.zeros((2, 2), jnp.int32), out=jax_struct((2,), jnp.int32)))
    with pytest.raises(Exception, match="expected a matrix, got rank 1"):
        np.asarray(mod.add_rows(jnp.zeros((2,), jnp.float32), out=jax_struct((2,), jnp.float32)))
    with pytest.raises(Exception, match="int32 indices, got int16"):
        np.asarray(mod.gather(jnp.zeros((3,), jnp.float32), jnp.zeros((2,), jnp.int16),
                              out=jax_struct((2,), jnp.float32)))


def test_half_attribute_on_uint16_reaches_the_function_as_bits() -> None:
    import jax.numpy as jnp

    mod = kernix.load_cpp_file(DROPIN / "reference_api.cpp", name=unique_name("half_bits"),
                               functions={"half_bits": "arg ret attr.bits:float16"})
    got = mod.half_bits(jnp.zeros((1,), jnp.float32), bits=1.5, out=jax_struct((1,), jnp.int32))
    assert int(np.asarray(got)[0]) == int(np.float16(1.5).view(np.uint16))


def test_module_offers_the_reference_attributes(reference_api_module) -> None:
    mod = reference_api_module
    assert mod.function_names == ["add_rows", "gather", "half_bits"]
    assert mod.content_hash == "sha256:" + mod.digest[:16]
    assert mod.get_handler("gather") is not None
    with pytest.raises(KeyError, match="exports: add_rows, gather, half_bits"):
        mod.get_handler("nope")


@pytest.mark.parametrize(
    "alias, target",
    [("BrainEventError", "KernixError"), ("KernelError", "KernixError"),
     ("KernelCompilationError", "CompilationError"), ("NvccNotFoundError", "ToolchainError"),
     ("KernelRegistrationError", "RegistrationError")],
)
def test_reference_exception_names_catch_kernix_errors(alias: str, target: str) -> None:
    assert getattr(kernix.errors, alias) is getattr(kernix, target)
    with pytest.raises(getattr(kernix.errors, alias)):
        raise getattr(kernix, target)("x")


def test_shim_names_the_users_tensor_and_handler_only_the_view() -> None:
    spec = FunctionSpec("f", "f", (
        Param("x", "arg", "const BE::Tensor", "BE::Tensor", "tensor"),
        Param("y", "arg", "BE::Tensor", "BE::Tensor", "tensor"),
        Param("z", "ret", "BE::Tensor &", "BE::Tensor", "tensor"),
    ))
    fn = codegen.ExportedFunction(0, spec)
    shim = codegen.shim_unit("/src/f.cpp", [fn])
    handler = codegen.handler_unit([fn], "cpu", False)
    assert "tensor_from<::BE::Tensor>" in shim
    assert "static_cast<const ::BE::Tensor&>(kernix_t0)" in shim  # declared const: passed const
    assert "static_cast<const ::BE::Tensor&>(kernix_t1)" not in shim  # explicit arg on a non-const
    assert "BE::" not in handler and "kernix::TensorView" in handler
    # kernix's own headers are included by absolute path: never shadowed by a user's.
    assert f'#include "{kernix.paths.include_dir()}/kernix/detail/shim.h"' in shim


def jax_struct(shape, dtype):
    import jax

    return jax.ShapeDtypeStruct(shape, dtype)


def test_linker_options_as_the_reference_writes_them_reach_the_linker(tmp_path: Path) -> None:
    """`extra_ldflags=[lib, "-rpath=DIR"]` (how the reference's users link a vendor library)."""
    lib_dir = tmp_path / "vendor"
    lib_dir.mkdir()
    lib_src = lib_dir / "vendor.cpp"
    lib_src.write_text('extern "C" float vendor_scale() { return 3.0f; }\n')
    lib = lib_dir / "libvendor.so"
    subprocess.run(["g++", "-shared", "-fPIC", str(lib_src), "-o", str(lib)], check=True)
    src = (
        '#include "kernix/common.h"\nextern "C" float vendor_scale();\n// @BE vendor_fill\n'
        "void vendor_fill(const BE::Tensor x, BE::Tensor out) {\n"
        "  for (int64_t i = 0; i < out.numel(); ++i) out.data_ptr<float>()[i] = vendor_scale() * x.data_ptr<float>()[i];\n"
        "}\n"
    )
    mod = kernix.load_cpp_inline(unique_name("vendor"), src, extra_ldflags=[str(lib), f"-rpath={lib_dir}"],
                                 build_directory=tmp_path / "cache")
    assert np.asarray(mod.vendor_fill(jnp.ones(3, jnp.float32), out=jax.ShapeDtypeStruct((3,), jnp.float32))).tolist() == [3.0, 3.0, 3.0]
