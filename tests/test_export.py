"""``kernix.export``: artifacts that call kernix kernels, run again in a new process."""

from __future__ import annotations

import os

import numpy as np
import pytest

import jax
import jax.numpy as jnp

import kernix
from kernix.runtime import registry

from helpers import unique_name
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
