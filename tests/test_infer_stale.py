"""Nothing stale: inference follows every header it read, the precompiled CUDA
prelude's included (kernix/frontend/pch.py, versions.py, speccache.py).

The hard case is a header rewritten with the same size and its modification
time set back: clang's own check of a PCH (size and mtime) accepts it, so
only the recorded content tells the change.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from kernix import infer_file
from kernix.backend import toolchain
from kernix.frontend import clangparse

needs_cuda = pytest.mark.skipif(
    toolchain.nvcc_path_or_none() is None or not toolchain.cuda_include_dirs(),
    reason="needs nvcc and the CUDA headers (the precompiled prelude is built for CUDA sources only)",
)

FLOAT = "#pragma once\ntypedef float real_t;\n"
INT = "#pragma once\ntypedef int   real_t;\n"  # the same size
assert len(FLOAT) == len(INT)

SOURCE = """\
#include "real.h"
#include "kernix/common.h"

// @BE scale
void scale(const BE::Tensor& x, BE::Tensor& y, real_t factor) {}
"""


def _sources(tmp_path: Path, ext: str) -> tuple[Path, Path]:
    header = tmp_path / "real.h"
    header.write_text(FLOAT)
    src = tmp_path / f"scale.{ext}"
    src.write_text(SOURCE)
    return header, src


def _rewrite_same_stat(header: Path, text: str) -> None:
    """Rewrite ``header`` with ``text`` (same size), its modification time set back."""
    st = header.stat()
    assert len(text.encode()) == st.st_size
    header.write_text(text)
    os.utime(header, ns=(st.st_atime_ns, st.st_mtime_ns))
    now = header.stat()
    assert (now.st_size, now.st_mtime_ns) == (st.st_size, st.st_mtime_ns)


def _factor(src: Path, **kw: Any) -> str:
    r = infer_file(src, **kw)
    assert not r.errors, [str(e) for e in r.errors]
    (spec,) = r.functions
    return spec.arg_spec[-1]


@needs_cuda
@pytest.mark.parametrize("use_cache", [True, False], ids=["spec-cache", "no-spec-cache"])
def test_precompiled_prelude_follows_a_header_rewritten_with_same_size_and_mtime(
        tmp_path: Path, use_cache: bool) -> None:
    """The header is one the .cu file opens with, so it is inside the precompiled prelude."""
    header, src = _sources(tmp_path, "cu")
    assert _factor(src, use_cache=use_cache) == "attr.factor:float32"
    _rewrite_same_stat(header, INT)
    assert _factor(src, use_cache=use_cache) == "attr.factor:int32"
    assert _factor(src, use_cache=use_cache) == "attr.factor:int32"  # (and what was stored then is the new type)
    _rewrite_same_stat(header, FLOAT)
    assert _factor(src, use_cache=use_cache) == "attr.factor:float32"


@needs_cuda
def test_a_rebuilt_prelude_replaces_the_old_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each rebuild leaves one PCH for the prelude, not one more each time."""
    root = tmp_path / "cache"
    header, src = _sources(tmp_path, "cu")
    monkeypatch.setenv("KERNIX_CACHE_DIR", str(root))
    _factor(src, use_cache=False)
    first = sorted((root / "toolchain").glob("prelude-*.pch"))
    assert len(first) == 1
    _rewrite_same_stat(header, INT)
    assert _factor(src, use_cache=False) == "attr.factor:int32"
    second = sorted((root / "toolchain").glob("prelude-*.pch"))
    assert len(second) == 1 and second != first


class _RewriteAfterParse:
    """An index whose ``nth`` parse rewrites a header right after clang read it,
    as an editor saving the file during inference would."""

    def __init__(self, real: Any, header: Path, text: str, nth: int = 1) -> None:
        self.real, self.header, self.text, self.left = real, header, text, nth

    def parse(self, *args: Any, **kwargs: Any) -> Any:
        tu = self.real.parse(*args, **kwargs)
        self.left -= 1
        if self.left == 0:
            _rewrite_same_stat(self.header, self.text)
        return tu


@pytest.mark.parametrize("ext", [
    "cpp",
    pytest.param("cu", marks=needs_cuda),  # the first parse is the prelude's precompilation
])
def test_a_header_saved_during_the_parse_is_not_recorded_as_current(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ext: str) -> None:
    header, src = _sources(tmp_path, ext)
    real = clangparse._index()
    with monkeypatch.context() as m:
        m.setattr(clangparse, "_index", lambda: _RewriteAfterParse(real, header, INT))
        r = infer_file(src)  # whichever it saw, it must not be stored as the header's current content
    assert not r.errors, [str(e) for e in r.errors]
    assert _factor(src) == "attr.factor:int32"
    assert _factor(src, use_cache=False) == "attr.factor:int32"


def test_the_parse_reads_the_bytes_the_cache_is_keyed_by(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The source changed between the look-up (which read it for the key) and the
    parse: the result stored under the key is the one of the bytes read."""
    from kernix.frontend import infer

    _, src = _sources(tmp_path, "cpp")
    real_parse = infer.parse
    edited = []

    def parse_after_an_edit(path: str, *args: Any, **kwargs: Any) -> Any:
        if not edited:
            src.write_text(SOURCE.replace("real_t factor", "double factor"))
            edited.append(True)
        return real_parse(path, *args, **kwargs)

    src.write_text(SOURCE)
    with monkeypatch.context() as m:
        m.setattr(infer, "parse", parse_after_an_edit)
        assert _factor(src) == "attr.factor:float32"  # the bytes read first
    assert _factor(src) == "attr.factor:float64"  # the file now
    src.write_text(SOURCE)
    assert _factor(src) == "attr.factor:float32"  # the first result, stored under its own bytes


def test_a_recently_modified_header_is_recorded_for_a_content_check(tmp_path: Path) -> None:
    """A header changed moments before it was recorded could change again within the
    same timestamp tick, size unchanged: its recorded stat forces a content check."""
    from kernix.frontend.versions import read_versions

    header, src = _sources(tmp_path, "cpp")
    tu = clangparse.parse(str(src), clangparse.ParseOptions("cpp"))
    versions = {v[0]: v for v in read_versions(tu, skip=[str(src)])}
    recorded = versions[str(header)]
    assert recorded[4] == 0  # ctime_ns: never equal to a real one
    assert recorded[5] != ""  # the content is what is compared
