"""A file's opening ``#include`` lines are precompiled with the CUDA prelude for
speed (kernix/frontend/pch.py), and the prelude never changes what the file
means: a header without include guards infers and builds as nvcc and g++
compile it (read once), and one included twice fails as it does for them."""

from __future__ import annotations

import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import gpus, has_nvcc, unique_name

import kernix
from kernix import infer_file
from kernix.frontend.pch import leading, without_leading

needs_nvcc = pytest.mark.skipif(not has_nvcc(), reason="needs nvcc and the CUDA headers")

UNGUARDED = textwrap.dedent(
    """\
    // No include guard and no #pragma once: read twice, every definition is redefined.
    struct Pair { int a; int b; };
    inline float twice(float x) { return 2 * x; }
    using scale_t = float;
    """
)


def _source(language: str) -> str:
    stream = ", cudaStream_t stream" if language == "cuda" else ""
    return textwrap.dedent(
        f"""\
        #include "unguarded.h"
        #include "kernix/common.h"

        // @BE twice_all (...)->(...)
        void twice_all(const BE::Tensor& x, BE::Tensor& y, scale_t extra{stream}) {{
          Pair p{{1, 2}};
          (void)p;
        }}
        """
    )


def _write(tmp_path: Path, language: str, text: str | None = None) -> Path:
    (tmp_path / "unguarded.h").write_text(UNGUARDED)
    src = tmp_path / ("k.cu" if language == "cuda" else "k.cpp")
    src.write_text(_source(language) if text is None else text)
    return src


@pytest.mark.parametrize("language", [pytest.param("cuda", marks=needs_nvcc), "cpp"])
def test_a_header_without_guards_included_first_infers(tmp_path: Path, language: str) -> None:
    """Was (.cu): the header was read in the precompiled prelude and again in the file:
    "redefinition of 'Pair'", which nvcc never reports."""
    src = _write(tmp_path, language)
    for use_cache in (False, True):
        result = infer_file(src, use_cache=use_cache)
        assert result.errors == (), [str(e) for e in result.errors]
        (spec,) = result.functions
        assert spec.arg_spec[:3] == ("arg", "ret", "attr.extra:float32")
        assert str(tmp_path / "unguarded.h") in result.dependencies


@pytest.mark.parametrize("language", [pytest.param("cuda", marks=needs_nvcc), "cpp"])
def test_a_header_included_twice_fails_as_the_compiler_fails(tmp_path: Path, language: str) -> None:
    """Read once by the prelude does not hide a second #include the compiler also rejects."""
    text = _source(language).replace('#include "kernix/common.h"\n',
                                     '#include "kernix/common.h"\n#include "unguarded.h"\n')
    src = _write(tmp_path, language, text)
    errors = infer_file(src, use_cache=False).errors
    assert any("redefinition of 'Pair'" in e.message for e in errors), [str(e) for e in errors]


@needs_nvcc
def test_cuda_build_of_a_header_without_guards(tmp_path: Path) -> None:
    src = _write(tmp_path, "cuda")
    mod = kernix.load_cuda_file(src, name=unique_name("unguarded_cu"), compute_capability="sm_80",
                                auto_register=False, build_directory=tmp_path / "cache")
    assert list(mod.functions) == ["twice_all"]


def test_cpp_build_and_call_of_a_header_without_guards(tmp_path: Path) -> None:
    text = textwrap.dedent(
        """\
        #include "unguarded.h"
        #include "kernix/common.h"

        // @BE twice_all (...)->(...)
        void twice_all(const BE::Tensor& x, BE::Tensor& y, scale_t extra) {
          for (int64_t i = 0; i < x.numel(); ++i) y.data_ptr<float>()[i] = twice(x.data_ptr<float>()[i]) + extra;
        }
        """
    )
    src = _write(tmp_path, "cpp", text)
    mod = kernix.load_cpp_file(src, name=unique_name("unguarded_cpp"), build_directory=tmp_path / "cache")
    x = jnp.arange(3, dtype=jnp.float32)
    np.testing.assert_array_equal(jax.block_until_ready(mod.twice_all(x, extra=1.0)), 2 * np.arange(3) + 1)


# ---------------------------------------------------------------- the opening's reader


def test_blanking_keeps_every_position(tmp_path: Path) -> None:
    (tmp_path / "a.h").write_text("")
    raw = b'// c\r\n#include <x.h>  // why\n  #  include "a.h"\nint f();\n'
    found = leading(raw, [str(tmp_path)])
    assert [i.line for i in found] == ["#include <x.h>", f'#include "{tmp_path / "a.h"}"']
    blank = without_leading(raw, found)
    assert len(blank) == len(raw) and blank.count(b"\n") == raw.count(b"\n")
    assert blank.splitlines()[1].strip() == b"" and blank.splitlines()[2].strip() == b""
    assert blank.endswith(b"\nint f();\n") and blank.startswith(b"// c\r\n")


@pytest.mark.parametrize(
    "raw, expected",
    [
        # A line comment continued by a backslash swallows the next line: nothing after it is taken.
        (b"// note \\\n#include <a.h>\n#include <b.h>\n", []),
        (b"#include <a.h>\n// note \\  \n#include <b.h>\n", ["#include <a.h>"]),
        # A block comment opened after the header name would be cut in two by blanking.
        (b"#include <a.h>\n#include <b.h> /* spans\n lines */\n", ["#include <a.h>"]),
        (b"#include <a.h> \\\n#include <b.h>\n", []),
        (b"#pragma once \\\n#include <a.h>\n", []),
        (b"#pragma once\n/* c\n */ #include <a.h>\n#define X\n#include <b.h>\n", ["#include <a.h>"]),
        (b"#include MACRO\n#include <a.h>\n", []),
    ],
)
def test_only_directives_beyond_doubt_are_taken(raw: bytes, expected: list[str]) -> None:
    assert [i.line for i in leading(raw, None)] == expected


@pytest.mark.gpu
@pytest.mark.skipif(not gpus(), reason="needs an NVIDIA GPU")
def test_cuda_call_of_a_header_without_guards(tmp_path: Path) -> None:
    text = textwrap.dedent(
        """\
        #include "unguarded.h"
        #include "kernix/common.h"

        __global__ void twice_kernel(const float* x, float* y, int64_t n, scale_t extra) {
          int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
          if (i < n) y[i] = 2 * x[i] + extra;
        }

        // @BE twice_all (...)->(...)
        void twice_all(const BE::Tensor& x, BE::Tensor& y, scale_t extra, cudaStream_t stream) {
          int64_t n = x.numel();
          twice_kernel<<<(n + 255) / 256, 256, 0, stream>>>(x.data_ptr<float>(), y.data_ptr<float>(), n, extra);
        }
        """
    )
    src = _write(tmp_path, "cuda", text)
    mod = kernix.load_cuda_file(src, name=unique_name("unguarded_gpu"))
    x = jnp.arange(5, dtype=jnp.float32, device=gpus()[0])
    np.testing.assert_array_equal(jax.block_until_ready(mod.twice_all(x, extra=1.0)), 2 * np.arange(5) + 1)


@pytest.mark.parametrize("language", [pytest.param("cuda", marks=needs_nvcc), "cpp"])
def test_a_header_forced_by_the_flags_is_seen_by_inference(tmp_path: Path, language: str) -> None:
    """Was (.cu): ``-include unguarded.h`` in the flags left a stray argument in the precompiled
    prelude's command line: "libclang could not parse this file"."""
    src = _write(tmp_path, language, _source(language).replace('#include "unguarded.h"\n', ""))
    for use_cache in (False, True):
        result = infer_file(src, flags=["-include", str(tmp_path / "unguarded.h")], use_cache=use_cache)
        assert result.errors == (), [str(e) for e in result.errors]
        (spec,) = result.functions
        assert spec.arg_spec[:3] == ("arg", "ret", "attr.extra:float32")
