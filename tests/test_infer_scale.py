"""Inference is linear in the size of a file and its annotations, and what it
stores follows the functions, not the file's size (kernix/frontend/lexer.py,
language/annotation.py, binding.py, infer.py).  ``bench/bench_infer_scale.py`` measures
the same at full size."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernix import infer_file
from kernix.frontend.lexer import (
    _ANNOTATION,
    SHOWN,
    Annotation,
    NearMiss,
    _block_near_misses,
    _line_near_miss,
    scan,
)
from kernix.frontend import binding
from kernix.frontend.binding import line_starts
from kernix.language.annotation import DOC_LIMIT, SourceLines, leading_comment


def _annotated(n: int) -> str:
    parts = ['#include "kernix/common.h"\n']
    for i in range(n):
        parts.append(f"// Scales x by a{i} into y:\n// y = a{i} * x, elementwise,\n// for any shape.\n"
                     f"// @BE f{i}\nvoid f{i}(const BE::Tensor& x, BE::Tensor& y, float a{i}) {{}}\n")
    return "\n".join(parts)


class _CountedLines(list):
    """A file's lines that count how many of them are read (one by one or in slices)."""

    read = 0

    def __getitem__(self, index):
        got = super().__getitem__(index)
        _CountedLines.read += len(got) if isinstance(index, slice) else 1
        return got


def test_many_doc_comments_split_the_file_once_and_read_each_line_a_few_times(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Linear: inferring 1,000 annotated functions, each under its own doc comment, splits the
    file into lines once and reads each line a bounded number of times; was: each function's doc
    comment looked up in the whole text (3,000 annotations took 25x the time of 300).
    ``bench/bench_infer_scale.py`` times the same at full size."""
    split: list[int] = []
    init = SourceLines.__init__

    def counting_init(self: SourceLines, text: str) -> None:
        split.append(len(text))
        init(self, text)
        self.lines = _CountedLines(self.lines)

    monkeypatch.setattr(SourceLines, "__init__", counting_init)
    monkeypatch.setattr(_CountedLines, "read", 0)
    path = tmp_path / "many.cpp"
    path.write_text(_annotated(1000))
    result = infer_file(path, use_cache=False)
    assert not result.errors, [str(e) for e in result.errors][:3]
    assert [f.doc for f in result.functions[:2]] == [
        "Scales x by a0 into y:\ny = a0 * x, elementwise,\nfor any shape.",
        "Scales x by a1 into y:\ny = a1 * x, elementwise,\nfor any shape."]
    assert len(result.functions) == 1000
    assert sum(split) <= path.stat().st_size, f"split {sum(split):,} characters of a {path.stat().st_size:,}-byte file"
    lines = path.read_text().count("\n") + 1  # (the search upwards reads windows of 16 lines: ~3.5 reads a line)
    assert _CountedLines.read <= 8 * lines, f"read {_CountedLines.read:,} lines of a {lines:,}-line file"


def _entry_size(root: Path, src: Path) -> int:
    infer_file(src, cache_dir=root)
    return sum(p.stat().st_size for p in (root / "specs").rglob("*.rec"))


def test_what_is_stored_does_not_grow_with_the_comments(tmp_path: Path) -> None:
    """A 3 MB comment directly above a function, another between its annotation
    and its declaration, and a near-miss annotation a megabyte long: the stored
    specs stay the size of the same functions' without them."""
    line = "// " + "lorem ipsum dolor sit amet " * 3 + "\n"
    huge = line * (3_000_000 // len(line))
    plain = ('#include "kernix/common.h"\n// Scales.\n// @BE f\n'
             "void f(const BE::Tensor& x, BE::Tensor& y, float a) {}\n"
             "// @BE g\nvoid g(const BE::Tensor& x, BE::Tensor& y) {}\n")
    padded = ('#include "kernix/common.h"\n// Scales.\n' + huge + "// @BE f\n" + huge
              + "void f(const BE::Tensor& x, BE::Tensor& y, float a) {}\n"
              + "// @Be h" + " x" * 500_000 + "\n"
              + "// @BE g\nvoid g(const BE::Tensor& x, BE::Tensor& y) {}\n")
    (tmp_path / "plain.cpp").write_text(plain)
    (tmp_path / "padded.cpp").write_text(padded)
    small = _entry_size(tmp_path / "c1", tmp_path / "plain.cpp")
    large = _entry_size(tmp_path / "c2", tmp_path / "padded.cpp")
    assert large < small + 2 * DOC_LIMIT + 4 * SHOWN + 2000, (small, large)

    r = infer_file(tmp_path / "padded.cpp", use_cache=False)
    assert [s.name for s in r.functions] == ["f", "g"]
    doc = r.functions[0].doc
    assert doc.startswith("Scales.\nlorem ipsum") and doc.endswith("\n[...]") and len(doc) <= DOC_LIMIT + 6
    (warning,) = r.warnings
    assert warning.line == 3 + 2 * huge.count("\n") + 2 and len(warning.message) < 3 * SHOWN + 400


def test_a_long_doc_comment_keeps_its_beginning() -> None:
    text = "// first\n" + "// more\n" * 5000 + "// @BE f\nvoid f();\n"
    lines = SourceLines(text)
    doc = leading_comment(lines, 5002, 5003)
    assert doc.startswith("first\nmore\n") and doc.endswith("more\n[...]") and len(doc) <= DOC_LIMIT + 6
    assert leading_comment(text, 5002, 5003) == doc
    assert leading_comment("// a\n// b\n// @BE f\nvoid f();\n", 3, 4, limit=2) == "a\n[...]"


def test_stacked_annotations_under_one_long_comment_find_its_start_once() -> None:
    """Each annotation of a stack under a long comment gets the same doc, the
    comment's start remembered between them."""
    stack = "".join(f"// @BE f{i}\n" for i in range(2000))
    text = "int x;\n// doc\n" + "// more\n" * 20_000 + stack + "void f();\n"
    lines = SourceLines(text)
    first = 2 + 20_000 + 1
    docs = {leading_comment(lines, first + i, first + 2000) for i in range(2000)}
    assert len(docs) == 1 and next(iter(docs)).startswith("doc\nmore")


def _bytes_checked_between(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[int, list]:
    """(how many bytes between annotations and declarations were checked, the errors) of inferring ``path``."""
    checked = [0]
    check = binding._between_is_specifiers

    def counting(text: bytes) -> bool:
        checked[0] += len(text)
        return check(text)

    monkeypatch.setattr(binding, "_between_is_specifiers", counting)
    result = infer_file(path, use_cache=False)
    return checked[0], result.errors


def test_stacked_annotations_are_refused_checking_each_byte_above_the_function_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Was: each of n annotations stacked above one function checked all the text down to it
    (n^2/2 lines: 10,000 took 27 s to refuse); now each is checked as far as the one below."""
    n = 2000
    path = tmp_path / "stacked.cpp"
    path.write_text('#include "kernix/common.h"\n' + "".join(f"// @BE g{i}\n" for i in range(n)) + "void f(const BE::Tensor& x, BE::Tensor& y) {}\n")
    checked, errors = _bytes_checked_between(path, monkeypatch)
    assert checked <= path.stat().st_size
    assert len(errors) == n and all(e.function == f"g{i}" and e.line == i + 2 for i, e in enumerate(errors))
    assert all("bound to function 'f'" in str(e) for e in errors)


def test_a_statement_in_a_stack_of_annotations_unbinds_every_annotation_above_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "stacked.cpp"
    path.write_text('#include "kernix/common.h"\n// @BE a\n// @BE b\nint n; /* é */ // @BE c\n// @BE d\n'
                    "[[maybe_unused]] // @BE f\n/* between */ static\nvoid f(const BE::Tensor& x, BE::Tensor& y) {}\n")
    _, errors = _bytes_checked_between(path, monkeypatch)
    said = {e.function: str(e) for e in errors}
    assert set(said) == {"a", "b", "c", "d"}  # f is exported
    assert "bound to nothing" in said["a"] and "bound to nothing" in said["b"]
    assert "bound to function 'f'" in said["c"] and "bound to function 'f'" in said["d"]


def test_line_starts_follow_clangs_line_breaks() -> None:
    for raw in [b"", b"a", b"a\n", b"a\nb", b"a\r\nb\rc\n", b"\n\n", b"x\r", b"\r\n"]:
        expected = [0] + [m.end() for m in re.finditer(rb"\r\n|\r|\n", raw)]
        assert line_starts(raw) == expected, raw


# ------------------------------------------------------------------ the lexer, against a plain one

# One token per match, the first branch that matches winning: the lexer as it
# was written before runs of uninteresting tokens were matched at once.
_REFERENCE = re.compile(
    r"""
      (?P<raw>(?:u8|[uUL])?R"(?P<delim>[^()\\\s"]{0,16})\((?:.|\n)*?\)(?P=delim)")
    | (?P<ident>[A-Za-z_$][\w$]*)
    | (?P<number>\.?\d(?:[eEpP][+-]|'(?=\w)|[\w.])*)
    | (?P<string>"(?:\\(?:.|\n)|[^"\\\n])*")
    | (?P<char>'(?:\\(?:.|\n)|[^'\\\n])*')
    | (?P<block>/\*(?:.|\n)*?(?:\*/|\Z))
    | (?P<line>//(?:\\\r?\n|[^\n])*)
    | (?P<other>.|\n)
    """,
    re.VERBOSE,
)


def _reference_scan(text: str) -> tuple[list[Annotation], list[NearMiss]]:
    """:func:`scan` with the one-token-at-a-time lexer (each comment read as scan reads it)."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    found: list[Annotation] = []
    missed: list[NearMiss] = []
    line, line_start = 1, 0
    for m in _REFERENCE.finditer(text):
        chunk, kind = m.group(), m.lastgroup
        column = m.start() - line_start + 1
        if kind in ("line", "block") and re.search(r"@[Bb][Ee]", chunk):
            if kind == "block":
                missed += _block_near_misses(chunk, line, column)
            elif _ANNOTATION.match(chunk) is None:
                near = _line_near_miss(chunk, line, column)
                if near is not None:
                    missed.append(near)
        if kind == "line" and "@BE" in chunk:
            am = _ANNOTATION.match(chunk)
            if am is not None:
                words = re.sub(r"\\\n", " ", am.group("rest")).split()
                found.append(Annotation(words[0] if words else "", tuple(words[1:]), line, column,
                                        line + chunk.count("\n")))
        if "\n" in chunk:
            line += chunk.count("\n")
            line_start = m.start() + chunk.rfind("\n") + 1
    return found, missed


_PIECES = [
    "// @BE f\n", "// @BE g arg ret\n", "// @Be h\n", "/* @BE k */", "/// @BE m\n", "// plain\n", "/* plain */",
    "// @BE c \\\n continued\n", '"// @BE s"', "'/'", "'\\''", "R\"x(// @BE raw)x\"", "u8R\"(/* @BE )\"",
    "1'000", "0x1'F", "a.b", ".5e+3", "x/y", "/*@BE*/", "@BE", "\n", "\r\n", " ", "\t", "void f();", "int", "é",
    '"unterminated', "'", "/", "*", "R", "u8", "\\", "// tail", "/* open", "#if 0\n", "// @BE q\r\n",
]


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=40))
def test_the_lexer_finds_what_a_token_at_a_time_lexer_finds(pieces: list[str]) -> None:
    text = "".join(pieces)
    assert scan(text) == _reference_scan(text)
    assert scan(text, near_misses=False)[0] == _reference_scan(text)[0]
