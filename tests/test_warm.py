"""The warm path: the direct index (request -> entry key without the
toolchain), specs read only when used, and what a warm load imports."""

from __future__ import annotations

import ast
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, strategies as st

import kernix
from kernix.backend import toolchain
from kernix.store import direct
from kernix.store.files import encode_record, read_record
from helpers import FIXTURES, WARM_CUDA_MODULES, WARM_LOAD_MODULES, has_nvcc, unique_name

SOURCE = FIXTURES / "reliability" / "add_one.cpp"


def _load(root: Path, name: str, **options):
    return kernix.load_cpp_file(SOURCE, name=name, build_directory=root, verbose=True, auto_register=False, **options)


def _records(root: Path, name: str) -> list[Path]:
    return sorted((root / "direct" / name).glob("*.rec"))


def test_a_warm_load_goes_through_the_direct_index(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    name = unique_name("direct")
    _load(tmp_path, name)
    err = capfd.readouterr().err
    assert f"{name}: direct miss: no record" in err and f"{name}: cache no entry" in err
    (record,) = _records(tmp_path, name)
    data = read_record(record, tmp_path)
    assert data["format"] == direct.DIRECT_FORMAT and len(data["key"]) == 64
    recorded = [f[0] for f in data["files"]]
    assert str(SOURCE) in recorded and toolchain.host_compiler_path() in recorded
    mod = _load(tmp_path, name)
    assert f"{name}: cache hit ({data['key'][:16]}, direct)" in capfd.readouterr().err
    mod.register()
    assert np.allclose(mod.add_one(np.arange(3, dtype=np.float32)), [1, 2, 3])


def test_another_option_is_another_record(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    name = unique_name("direct_opt")
    _load(tmp_path, name)
    _load(tmp_path, name, optimization_level=1)
    err = capfd.readouterr().err
    assert err.count("direct miss: no record") == 2 and err.count("cache no entry") == 2
    assert len(_records(tmp_path, name)) == 2
    _load(tmp_path, name, optimization_level=1)
    assert "direct)" in capfd.readouterr().err


def test_an_edited_source_misses_the_direct_index(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "ed.cpp"
    src.write_text(SOURCE.read_text())
    name = unique_name("direct_edit")
    load = lambda: kernix.load_cpp_file(src, name=name, build_directory=tmp_path, verbose=True, auto_register=False)  # noqa: E731
    load()
    src.write_text(SOURCE.read_text().replace("+ 1.0f", "+ 2.0f"))
    mod = load()
    err = capfd.readouterr().err
    assert f"direct miss: {src} changed" in err and err.count("cache no entry") == 2
    mod.register()
    assert np.allclose(mod.add_one(np.zeros(2, np.float32)), [2, 2])


def test_a_compiler_installed_on_path_later_is_noticed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """The key names the compiler PATH finds; a g++ put into an earlier PATH
    directory after the record was written must not be skipped by it."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CXX", raising=False)
    toolchain.forget()
    real = toolchain.host_compiler_path()
    name = unique_name("direct_cxx")
    root = tmp_path / "cache"
    _load(root, name)
    _load(root, name)
    assert "direct)" in capfd.readouterr().err
    wrapper = bindir / "g++"
    wrapper.write_text(f'#!/bin/sh\n# a wrapper installed later\nexec "{real}" "$@"\n')
    wrapper.chmod(0o755)
    toolchain.forget()  # as a new process would
    try:
        _load(root, name)
        err = capfd.readouterr().err
        assert f"direct miss: {bindir} changed" in err
        assert "cache no entry" in err  # the new compiler is a new key: built again
        assert len(list((root / "modules" / name).iterdir())) == 2
    finally:
        toolchain.forget()


@pytest.mark.parametrize("damage", ["garbage", "others_can_write", "wrong_key"])
def test_a_bad_record_is_a_miss_not_an_error(tmp_path: Path, capfd: pytest.CaptureFixture[str], damage: str) -> None:
    name = unique_name("direct_bad")
    first = _load(tmp_path, name)
    (record,) = _records(tmp_path, name)
    if damage == "garbage":
        record.write_bytes(b"\x00{not json")
    elif damage == "others_can_write":
        record.chmod(0o666)
    else:
        data = read_record(record, tmp_path)
        data["key"] = "0" * 64  # names no entry: the full look-up takes over
        record.write_bytes(encode_record(data))
    capfd.readouterr()
    again = _load(tmp_path, name)
    err = capfd.readouterr().err
    assert again.digest == first.digest and f"{name}: cache hit" in err
    if damage == "garbage":
        assert "direct miss: unreadable record" in err
    elif damage == "others_can_write":
        assert "direct miss: the record could have been written by another user" in err


def test_force_rebuild_skips_the_index_and_renews_it(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    name = unique_name("direct_force")
    _load(tmp_path, name)
    _load(tmp_path, name, force_rebuild=True)
    err = capfd.readouterr().err
    assert "direct)" not in err and err.count("direct record") == 2


def test_specs_are_read_when_first_used(tmp_path: Path) -> None:
    """A spec record damaged after publishing does not stop the load; using
    the function says the entry is damaged and removes it, so loading again
    rebuilds it."""
    name = unique_name("lazy_specs")
    _load(tmp_path, name)
    (specs,) = (tmp_path / "modules" / name).glob("*/functions.json")
    data = json.loads(specs.read_text())
    data[0]["params"] = "not a parameter list"
    specs.write_text(json.dumps(data))
    mod = _load(tmp_path, name)
    assert mod.function_names == ["add_one"] and mod.targets == {"add_one": f"{name}.add_one"}
    with pytest.raises(kernix.CacheError, match="is damaged .* removed from the cache: load the module again"):
        mod.add_one
    with pytest.raises(kernix.CacheError, match="is damaged"):
        mod.functions
    assert not list((tmp_path / "modules" / name).glob("*/manifest.json"))
    assert _load(tmp_path, name).add_one.spec.name == "add_one"  # rebuilt


def _rewrite_specs(entry: Path, edit) -> None:
    """Edit an entry's functions.json and record its new hash, as a publisher would."""
    specs = entry / "functions.json"
    data = edit(json.loads(specs.read_text()))
    specs.write_text(json.dumps(data))
    manifest = json.loads((entry / "manifest.json").read_text())
    manifest["specs_sha256"] = hashlib.sha256(specs.read_bytes()).hexdigest()
    (entry / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize(
    "edit, why",
    [
        (lambda d: [{**d[0], "params": 7}], "record of function 'add_one' is not a valid spec"),
        (lambda d: [{**d[0], "name": "other"}], "not the handlers'"),
        (lambda d: {"not": "a list"}, "not a list of spec records"),
    ],
)
def test_specs_file_problems_are_named(tmp_path: Path, edit, why: str) -> None:
    name = unique_name("spec_file")
    _load(tmp_path, name)
    (entry,) = (tmp_path / "modules" / name).glob("*/")
    _rewrite_specs(entry, edit)
    mod = _load(tmp_path, name)  # the load itself reads no spec
    with pytest.raises(kernix.CacheError, match=why):
        mod.add_one


def test_a_missing_specs_file_is_damage_the_look_up_finds(tmp_path: Path) -> None:
    """An entry whose functions.json is gone while its manifest is there is
    damaged: the look-up (which keeps the file's bytes) says so and rebuilds
    it, instead of a load that fails at the first call."""
    name = unique_name("spec_file")
    _load(tmp_path, name)
    (entry,) = (tmp_path / "modules" / name).glob("*/")
    (entry / "functions.json").unlink()
    with pytest.warns(RuntimeWarning, match="damaged: cannot read functions.json"):
        mod = _load(tmp_path, name)
    assert mod.add_one.spec.name == "add_one"
    assert (entry / "functions.json").is_file()


@pytest.mark.parametrize("warm", [False, True])
def test_specs_survive_a_cache_clear_while_in_use(tmp_path: Path, warm: bool) -> None:
    """A module built or found, then cleared from the cache before its first
    call (another process ran `kernix cache clear`), still has its specs."""
    name = unique_name("cleared_in_use")
    mod = _load(tmp_path, name)
    if warm:
        mod = _load(tmp_path, name)
    assert kernix.clear_cache(name, root=tmp_path) == 1
    assert not list((tmp_path / "modules" / name).glob("*/functions.json"))
    assert [p.name for p in mod.functions["add_one"].params] == ["x", "out"]


@pytest.mark.installed
def test_a_warm_load_imports_only_what_it_needs(tmp_path: Path) -> None:
    """No toolchain search, flags, spec grammar, inference, libclang, miss path or error class on the warm
    path: a warm load imports the modules of WARM_LOAD_MODULES and no other kernix module."""
    name = unique_name("warm_imports")
    _load(tmp_path, name)
    code = (
        "import sys, json, kernix\n"
        f"m = kernix.load_cpp_file({str(SOURCE)!r}, name={name!r}, build_directory={str(tmp_path)!r})\n"
        "print(json.dumps(sorted(n for n in sys.modules if n == 'kernix' or n.startswith('kernix.'))))\n"
        "m.add_one\n"
        "print(json.dumps('kernix.language.spec' in sys.modules))\n"
    )
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    loaded, spec_after_use = map(json.loads, out.splitlines())
    assert set(loaded) == WARM_LOAD_MODULES and spec_after_use is True


@pytest.fixture(scope="module")
def cuda_built(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """A CUDA module built once for sm_90 (nvcc, no GPU needed): (its name, its cache)."""
    if not has_nvcc():
        pytest.skip("building a CUDA module needs nvcc")
    name, cache = unique_name("warm_cuda_imports"), tmp_path_factory.mktemp("warm-cuda")
    kernix.load_cuda_file(FIXTURES / "seed_vector_add.cu", name=name, compute_capability="sm_90", build_directory=cache,
                          auto_register=False)
    return name, cache


@pytest.mark.installed
@pytest.mark.parametrize("given", ["argument", "environment"])
def test_a_warm_cuda_load_imports_no_compiler_search(cuda_built: tuple[str, Path], given: str) -> None:
    """The GPU architecture enters a CUDA request's fingerprint: finding it on a
    warm load imports no other part of the backend package (the compiler search,
    the flags), nor an error class: only WARM_CUDA_MODULES besides a C++ warm load's."""
    name, cache = cuda_built
    source = FIXTURES / "seed_vector_add.cu"
    env = dict(os.environ, JAX_PLATFORMS="cpu", KERNIX_CUDA_ARCH="sm_90")
    env.pop("KERNIX_CUDA_ARCH_LIST", None)
    option = "compute_capability='sm_90', " if given == "argument" else ""
    code = (
        "import sys, json, kernix\n"
        f"kernix.load_cuda_file({str(source)!r}, name={name!r}, {option}build_directory={str(cache)!r})\n"
        "print(json.dumps(sorted(n for n in sys.modules if n.split('.')[0] in ('kernix', 'clang'))))\n"
    )
    run = [sys.executable, "-c", code]
    subprocess.run(run, capture_output=True, text=True, env=env, check=True)  # finds the entry, records the request
    warm = subprocess.run(run, capture_output=True, text=True, env={**env, "KERNIX_VERBOSE": "1"}, check=True)
    loaded = set(json.loads(warm.stdout))
    assert WARM_LOAD_MODULES <= loaded and loaded - WARM_LOAD_MODULES <= WARM_CUDA_MODULES, sorted(loaded)
    assert f"{name}: cache hit (" in warm.stderr and ", direct)" in warm.stderr


def test_the_index_never_loads_a_library_of_another_source(tmp_path: Path) -> None:
    """Two modules of one name and different inline sources: each load gets its own code."""
    name = unique_name("direct_inline")
    text = SOURCE.read_text()
    a = kernix.load_cpp_inline(name, text, build_directory=tmp_path, auto_register=False)
    b = kernix.load_cpp_inline(name, text.replace("+ 1.0f", "+ 5.0f"), build_directory=tmp_path, auto_register=False)
    again = kernix.load_cpp_inline(name, text, build_directory=tmp_path, auto_register=False)
    assert a.digest != b.digest and again.digest == a.digest


def test_notes_reach_the_kernix_logger(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    name = unique_name("logged")
    with caplog.at_level("DEBUG", logger="kernix"):
        _load(tmp_path, name)
    messages = [r.getMessage() for r in caplog.records if r.name == "kernix"]
    assert f"{name}: direct miss: no record" in messages
    assert any(m.startswith(f"{name}: cache no entry") for m in messages)


# ----------------------------------------------------------- inference set-up


def _setup_notes(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("inference set-up")]


def test_inference_setup_is_remembered_and_follows_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The parse set-up (compiler views, flags) is remembered per options; a
    file appearing in a PATH directory (a compiler installed later) is a miss."""
    from kernix.frontend.infer import infer_file

    bindir = tmp_path / "bin"
    bindir.mkdir()
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    cache = tmp_path / "cache"
    with caplog.at_level("DEBUG", logger="kernix"):
        first = infer_file(SOURCE, cache_dir=cache)
        miss, recorded = _setup_notes(caplog)
        assert miss == "inference set-up: direct miss: no record"
        assert recorded.startswith("inference set-up: direct record")
        caplog.clear()
        assert infer_file(SOURCE, cache_dir=cache) == first
        assert _setup_notes(caplog) == []  # a hit says nothing
        infer_file(SOURCE, cache_dir=cache, defines=["EXTRA=1"])
        assert "inference set-up: direct miss: no record" in _setup_notes(caplog)  # other options
        caplog.clear()
        (bindir / "g++").write_text("#!/bin/sh\nexit 1\n")
        toolchain.forget()
        try:
            infer_file(SOURCE, cache_dir=cache, use_cache=True)
        finally:
            toolchain.forget()
        assert f"inference set-up: direct miss: {bindir} changed" in _setup_notes(caplog)
    assert len(list((cache / "direct" / ".parse").glob("*.rec"))) == 2


def test_the_inference_setup_does_not_depend_on_unrelated_import_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """`python -m kernix` from another directory (another sys.path[0]) reuses
    the set-up; a directory that could shadow libclang's bindings does not."""
    from kernix.frontend.infer import infer_file

    cache = tmp_path / "cache"
    infer_file(SOURCE, cache_dir=cache)
    unrelated, shadowing = tmp_path / "project", tmp_path / "vendored"
    unrelated.mkdir()
    (shadowing / "clang").mkdir(parents=True)
    with caplog.at_level("DEBUG", logger="kernix"):
        monkeypatch.syspath_prepend(str(unrelated))
        infer_file(SOURCE, cache_dir=cache)
        assert _setup_notes(caplog) == []
        monkeypatch.syspath_prepend(str(shadowing))
        infer_file(SOURCE, cache_dir=cache)
        assert _setup_notes(caplog)[0] == "inference set-up: direct miss: no record"


@pytest.mark.installed
def test_a_warm_inspect_imports_no_parser(tmp_path: Path) -> None:
    """`kernix inspect` of a cached file prints the same as the parse did,
    without libclang, the compiler views, the toolchain search or the spec
    classes (together about 20 ms of a warm command)."""
    heavy = ("clang.cindex", "kernix.frontend.clangparse", "kernix.frontend.compiler_view",
             "kernix.backend.toolchain", "kernix.language.spec", "kernix.frontend.infer")
    code = (
        "import sys, io\n"
        "before = set(sys.modules)\n"
        "from kernix.cli import main\n"
        "stdout, sys.stdout = sys.stdout, io.StringIO()\n"
        f"status = main(['inspect', {str(SOURCE)!r}])\n"
        "text, sys.stdout = sys.stdout.getvalue(), stdout\n"
        f"print(repr([status, text, sorted(n for n in {heavy!r} if n in set(sys.modules) - before)]))\n"
    )
    env = {**os.environ, "KERNIX_CACHE_DIR": str(tmp_path)}
    runs = [ast.literal_eval(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                            check=True).stdout) for _ in range(2)]
    (cold_status, cold_out, cold_mods), (warm_status, warm_out, warm_mods) = runs
    assert cold_status == warm_status == 0 and warm_out == cold_out and "add_one" in warm_out
    assert "kernix.frontend.clangparse" in cold_mods  # the first run parsed
    assert warm_mods == []


def _installed_script() -> Path | None:
    """The ``kernix`` command installed beside this interpreter (a Python script), if any."""
    script = Path(sys.executable).with_name("kernix")
    first_line = script.read_bytes().split(b"\n", 1)[0] if script.is_file() else b""
    return script if first_line.startswith(b"#!") and b"python" in first_line else None


SCRIPT = _installed_script()


@pytest.mark.installed
@pytest.mark.parametrize("command", [
    ["-m", "kernix"],
    pytest.param([str(SCRIPT)], marks=pytest.mark.skipif(SCRIPT is None, reason="no kernix command beside Python")),
], ids=["python -m kernix", "kernix"])
def test_the_command_parses_in_worker_processes(tmp_path: Path, command: list[str]) -> None:
    """``kernix inspect -j 2 DIR``: the worker processes start with the
    "spawn" method, which runs the main module again (the ``kernix`` script as
    ``__mp_main__``; ``kernix.__main__`` not at all): neither may run the
    command a second time."""
    sources = tmp_path / "src"
    sources.mkdir()
    for i in range(2):
        (sources / f"k{i}.cpp").write_text(
            f'#include "kernix/common.h"\n// @BE f{i}\nvoid f{i}(const BE::Tensor& x, BE::Tensor& y, int n{i}) {{}}\n'
        )
    env = {**os.environ, "KERNIX_CACHE_DIR": str(tmp_path / "cache")}
    out = subprocess.run([sys.executable, *command, "inspect", "--json", "-j", "2", str(sources)], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "Traceback" not in out.stderr
    total = json.loads(out.stdout)["total"]
    assert total["files"] == 2 and total["functions"] == 2


def test_the_spec_key_covers_the_kernix_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another kernix may infer differently: its results are not reused, even
    with the same remembered parse set-up."""
    from kernix.frontend import speccache as lookup

    key = lookup.look_up(SOURCE, cache_dir=tmp_path).key
    assert lookup.look_up(SOURCE, cache_dir=tmp_path).key == key
    monkeypatch.setattr(lookup, "__version__", "0.0.0-other")
    assert lookup.look_up(SOURCE, cache_dir=tmp_path).key != key


_plain = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=12,
)


@given(_plain)
def test_a_record_reads_back_what_was_written(value: object) -> None:
    from kernix.store.files import RECORD_MAGIC

    data = encode_record(value)
    assert data.startswith(RECORD_MAGIC)
    path = Path(os.environ["KERNIX_CACHE_DIR"]) / "roundtrip.rec"
    path.write_bytes(data)
    assert read_record(path, path.parent) == value


def test_a_damaged_record_or_another_file_is_a_value_error(tmp_path: Path) -> None:
    path = tmp_path / "r.rec"
    for data in (encode_record({"key": "x" * 64})[:-5], b'{"format": 2}', b""):
        path.write_bytes(data)
        with pytest.raises(ValueError):
            read_record(path, tmp_path)


def test_a_record_others_can_write_is_not_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """marshal is not meant for crafted data: the trust check comes before the bytes are read."""
    import builtins

    from kernix.store.files import UntrustedRecord

    path = tmp_path / "r.rec"
    path.write_bytes(encode_record({"key": "x"}))
    path.chmod(0o666)
    opened: list[object] = []
    real_open = builtins.open
    monkeypatch.setattr(builtins, "open", lambda f, *a, **k: opened.append(f) or real_open(f, *a, **k))
    with pytest.raises(UntrustedRecord):
        read_record(path, tmp_path)
    assert opened == []


@given(st.dictionaries(st.text(max_size=3), _plain, min_size=2, max_size=6), st.randoms())
def test_content_keys_do_not_depend_on_dict_order(parts: dict, rnd) -> None:
    from kernix.store.files import content_key

    items = list(parts.items())
    rnd.shuffle(items)
    assert content_key(dict(items)) == content_key(parts)


def test_content_keys_tell_values_apart() -> None:
    from kernix.store.files import content_key

    values = [None, "None", 1, "1", 1.0, True, "", [], {}, [[]], ["a", "b"], ["a,b"], ["ab"], {"a": 1}, {"a": "1"},
              [{"a": 1}], {"a": [1]}, "\udc80", "é", ["x", None], [["x"], None]]
    assert len({content_key(v) for v in values}) == len(values)
    assert content_key(["k"], b"a", b"b") != content_key(["k"], b"ab")
    assert content_key([Path("/a")]) == content_key(["/a"])  # other values count by their str
