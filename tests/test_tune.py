"""Autotuning: ``tune=`` template parameters chosen by timing, per device, dtypes and shape bucket, and
remembered in the cache (tables per library and device)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import FIXTURES, gpus, unique_name

import kernix
from kernix.cli import main
from kernix.frontend.infer import infer_file
from kernix.language.spec import FunctionSpec
from kernix.language.templates import parse_tune
from kernix.runtime import tuning

jax.config.update("jax_enable_x64", True)

SOURCE = FIXTURES / "tune" / "tune_cpu.cpp"


# ---- the annotation word -------------------------------------------------------------------------

def test_tune_names_the_parameters_timing_chooses_and_the_dimensions_that_key_the_choice():
    assert parse_tune("BLOCK") == (("BLOCK",), ())
    assert parse_tune("BLOCK,WARPS@m,n") == (("BLOCK", "WARPS"), ("m", "n"))
    for bad in ("BLOCK,", "BLOCK,BLOCK", "1X", "BLOCK@", "BLOCK@n,n"):
        with pytest.raises(ValueError, match="tune="):
            parse_tune(bad)
    by = {f.name: f for f in infer_file(SOURCE).functions}
    assert by["rowsum_float64_8"].tune == ("BLOCK",) and by["rowsum_float64_8"].tune_dims == ()
    assert by["gather_4"].tune_dims == ("m",)
    again = FunctionSpec.from_json(json.loads(json.dumps(by["gather_4"].to_json())))
    assert again == by["gather_4"] and again.tune_dims == ("m",)
    with pytest.raises(ValueError):
        FunctionSpec.from_json({**by["gather_4"].to_json(), "tune": ["BLOCK); evil("]})


BAD = '''#include "kernix/common.h"
// @BE plain (n)->(n) tune=BLOCK
void plain(const BE::Tensor& x, BE::Tensor& out) {}
// @BE unknown<T: float; BLOCK: 1, 2> (n)->(n) tune=WARPS
template <typename T, int BLOCK> void unknown(const BE::Tensor& x, BE::Tensor& out) {}
// @BE dtyped<T: float, double; BLOCK: 1, 2> (n)->(n) tune=T
template <typename T, int BLOCK> void dtyped(const BE::Tensor& x, BE::Tensor& out) {}
// @BE keyed<BLOCK: 1, 2> (n)->(n) tune=BLOCK@m
template <int BLOCK> void keyed(const BE::Tensor& x, BE::Tensor& out) {}
// @BE effect<BLOCK: 1, 2> (n)->(n) has_side_effect tune=BLOCK
template <int BLOCK> void effect(const BE::Tensor& x, BE::Tensor& out) {}
// @BE twice<BLOCK: 1, 2> (n)->(n) tune=BLOCK tune=BLOCK
template <int BLOCK> void twice(const BE::Tensor& x, BE::Tensor& out) {}
// @BE fwd<BLOCK: 1, 2> (n)->(n) tune=BLOCK
template <int BLOCK> void fwd(const BE::Tensor& x, BE::Tensor& out) {}
// @BE fwd_bwd<BLOCK: 1, 2> (n),(n)->(n) vjp=fwd
template <int BLOCK> void fwd_bwd(const BE::Tensor& x, const BE::Tensor& g, BE::Tensor& dx) {}
'''


def test_a_tune_word_that_cannot_apply_is_refused_at_its_line_naming_the_function_and_parameter(tmp_path):
    from kernix.language.annotation import check_pairs

    path = tmp_path / "bad.cpp"
    path.write_text(BAD)
    result = infer_file(path, use_cache=False)
    errors = {e.line: e for e in result.errors}
    assert sorted(errors) == [2, 4, 6, 8, 10, 12], [e.format() for e in result.errors]  # one error per annotation
    assert all(e.file == str(path) for e in errors.values())
    assert errors[2].function == "plain" and "not a function template" in errors[2].message
    assert (errors[4].function, errors[4].parameter) == ("unknown", "WARPS") and "T, BLOCK" in errors[4].message
    assert (errors[6].function, errors[6].parameter) == ("dtyped", "T") and "dtypes" in errors[6].message
    assert errors[8].function == "keyed" and "'m'" in errors[8].message and "n" in errors[8].message
    assert errors[10].function == "effect" and "side effects" in errors[10].message
    assert "at most once" in errors[12].message
    paired = check_pairs(result.functions)
    assert paired and all(e.line == 17 and "add tune=BLOCK to the annotation of 'fwd_bwd'" in e.message
                          for e in paired)


def test_the_stubs_make_a_tuned_parameter_optional_among_its_values():
    from kernix.runtime.stubs import stub_text

    text = stub_text(infer_file(SOURCE).functions)
    assert re.search(r"def rowsum\(x: ArrayLike, /, \*, BLOCK: Literal\[1, 8, 64\] = \.\.\., out", text)
    assert "@overload\ndef rowsum" not in text  # (one signature: the dtypes choose, then timing)


def test_kernix_inspect_shows_the_tune_word(capsys):
    assert main(["inspect", str(SOURCE)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"rowsum_float32_8 .*\(\.\.\.,n\)->\(\.\.\.\) tune=BLOCK", out)
    assert re.search(r"gather_4 .*\(n\),\(m\)->\(m\) tune=BLOCK@m", out)
    assert main(["inspect", "--json", str(SOURCE)]) == 0
    functions = {f["name"]: f for f in json.loads(capsys.readouterr().out)["files"][0]["functions"]}
    assert functions["gather_1"]["tune"] == ["BLOCK"] and functions["gather_1"]["tune_dims"] == ["m"]


# ---- a module ------------------------------------------------------------------------------------

NAME = unique_name("tuned")


@pytest.fixture(scope="module")
def mod():
    return kernix.load_cpp_file(SOURCE, name=NAME)


def runs(mod) -> int:
    """How many times the fixture's counting kernels have run in this process."""
    return int(mod.runs(out=jax.ShapeDtypeStruct((1,), jnp.int32))[0])


def entries(mod) -> dict:
    """The entries of the module's table in the cache, on this CPU."""
    tables = [t for t in kernix.cache_info()["tuning"] if t["digest"] == mod.digest and t["device"].startswith("cpu")]
    return tables[0]["entries"] if tables else {}


def lowered(f, *args) -> str:
    return jax.jit(f).lower(*args).as_text()


def test_a_call_that_leaves_block_out_runs_the_fastest_variant_of_its_key(mod):
    x = jnp.asarray(np.random.default_rng(0).uniform(size=(8, 3000)), jnp.float32)
    before = runs(mod)
    y = mod.rowsum(x)
    np.testing.assert_allclose(y, np.asarray(x).sum(-1), rtol=1e-4)
    assert runs(mod) - before > 3  # every variant ran, several times
    entry = entries(mod)["rowsum_float32_BLOCK float32[8,4096]"]
    assert set(entry["us"]) == {"rowsum_float32_1", "rowsum_float32_8", "rowsum_float32_64"}
    assert entry["choice"] == min(entry["us"], key=entry["us"].get)
    before = runs(mod)
    mod.rowsum(x[:, :2100])  # the same bucket: no timing
    assert runs(mod) - before == 1


def test_under_jit_the_program_calls_the_chosen_instantiation_and_export_records_it(mod):
    x = jnp.ones((4, 1000), jnp.float64)
    text = lowered(mod.rowsum, x)
    choice = entries(mod)["rowsum_float64_BLOCK float64[4,1024]"]["choice"]
    assert re.findall(r"custom_call @([\w.]+)", text) == [f"{NAME}.{choice}"]
    exported = kernix.export(jax.jit(mod.rowsum), x)
    assert re.findall(r"custom_call @\"?([\w.]+)@", exported.mlir_module()) == [f"{NAME}.{choice}"]
    np.testing.assert_allclose(kernix.deserialize(exported.serialize())(x), 1000.0)
    np.testing.assert_allclose(jax.jit(mod.rowsum)(x), 1000.0)


def test_several_parameters_are_tuned_together_and_a_keyword_leaves_the_others_to_timing(mod):
    x = jnp.ones(20, jnp.float32)
    np.testing.assert_array_equal(mod.pair(x), 2.0)
    np.testing.assert_array_equal(mod.pair(x, BLOCK=2), 2.0)
    table = entries(mod)
    assert set(table["pair_BLOCK_WARPS float32[32]"]["us"]) == {"pair_1_1", "pair_1_2", "pair_2_1", "pair_2_2"}
    assert set(table["pair_2_WARPS float32[32]"]["us"]) == {"pair_2_1", "pair_2_2"}
    assert re.findall(r"custom_call @([\w.]+)", lowered(lambda v: mod.pair(v, BLOCK=1, WARPS=2), x)) == [
        f"{NAME}.pair_1_2"]


def test_an_explicit_block_keyword_always_wins_and_kernix_tune_0_takes_the_first_listed_value(mod, monkeypatch):
    x = jnp.ones((2, 77), jnp.float32)
    assert re.findall(r"custom_call @([\w.]+)", lowered(lambda v: mod.rowsum(v, BLOCK=8), x)) == [
        f"{NAME}.rowsum_float32_8"]
    monkeypatch.setenv("KERNIX_TUNE", "0")
    before = runs(mod)
    np.testing.assert_allclose(mod.rowsum(x), 77.0)
    assert runs(mod) - before == 1
    assert re.findall(r"custom_call @([\w.]+)", lowered(mod.rowsum, x)) == [f"{NAME}.rowsum_float32_1"]
    assert "rowsum_float32_BLOCK float32[2,128]" not in entries(mod)


def test_a_variant_whose_results_disagree_is_left_out_with_a_warning_naming_it(mod):
    with pytest.warns(kernix.TuningWarning, match="shifted_3's results disagree"):
        y = mod.shifted(jnp.zeros(100, jnp.float32))
    np.testing.assert_array_equal(y, 1.0)
    assert set(entries(mod)["shifted_BLOCK float32[128]"]["us"]) == {"shifted_1", "shifted_2"}


def test_a_variant_that_fails_is_left_out_with_a_warning_naming_it(mod):
    with pytest.warns(kernix.TuningWarning, match="picky_4 failed as it was timed.*refuses every input"):
        np.testing.assert_array_equal(mod.picky(jnp.arange(3.0, dtype=jnp.float32)), [0.0, 1.0, 2.0])
    assert entries(mod)["picky_BLOCK float32[4]"]["choice"] == "picky_1"


def test_variants_that_disagree_without_a_majority_are_refused(mod):
    with pytest.raises(kernix.CallError, match="split_1; split_2.*no majority|no majority.*split_1; split_2"):
        mod.split(jnp.ones(10, jnp.float32))
    np.testing.assert_array_equal(mod.split(jnp.ones(3, jnp.float32), BLOCK=2), 2.0)


def test_an_in_place_kernel_is_timed_on_a_copy_so_the_callers_array_is_unchanged(mod):
    x = jnp.zeros(50, jnp.float32)
    before = runs(mod)
    y = mod.bump(x)
    assert runs(mod) - before > 2
    np.testing.assert_array_equal(x, 0.0)
    np.testing.assert_array_equal(y, 1.0)


def test_index_inputs_made_up_to_time_a_traced_call_are_zeros_so_a_gathering_kernel_stays_in_bounds(mod):
    x = jnp.arange(5.0, dtype=jnp.float32)
    idx = jnp.array([4, 0, 2], jnp.int32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no variant failed on the made-up indices
        np.testing.assert_array_equal(jax.jit(mod.gather)(x, idx), [4.0, 0.0, 2.0])
    assert "gather_BLOCK float32,int32 m=4" in entries(mod)  # keyed by m alone (tune=BLOCK@m)
    inputs = [tuning.synthesized((3,), jnp.int32, jax.devices("cpu")[0]),
              tuning.synthesized((3,), jnp.float32, jax.devices("cpu")[0])]
    np.testing.assert_array_equal(inputs[0], 0)
    assert np.all(np.abs(np.asarray(inputs[1])) < 1) and np.unique(np.asarray(inputs[1])).size == 3


def test_timing_in_one_program_runs_every_call_unmerged(mod):
    # (how a GPU is timed, run on the CPU: many calls of one program, none merged with another)
    x = jnp.ones((2, 8), jnp.float32)
    call = jax.ffi.ffi_call(mod.targets["rowsum_float32_8"], jax.ShapeDtypeStruct((2,), jnp.float32),
                            has_side_effect=True)
    assert 0 < tuning.seconds_per_call(call, [x], in_one_program=True) < 1
    repeat = tuning._looped(call, [x])
    before = runs(mod)
    assert 0 < repeat() < 1
    n = runs(mod) - before - 2  # a repeat: a run of one call, and one of 1 + n, n the trip count (8, 16, ...)
    assert n >= 8 and n & (n - 1) == 0


def test_tune_times_the_callers_own_inputs_and_replaces_the_remembered_choice(mod):
    x = jnp.arange(9.0, dtype=jnp.float32)
    idx = jnp.array([8, 1, 7, 2, 6], jnp.int32)
    mod.gather(x, idx)
    was = entries(mod)["gather_BLOCK float32,int32 m=8"]
    choice = mod.gather.tune(x, idx)
    now = entries(mod)["gather_BLOCK float32,int32 m=8"]
    assert choice in ("gather_1", "gather_4") and now["choice"] == choice and now["us"] != was["us"]  # timed again
    with pytest.raises(kernix.CallError, match="no tune= parameter"):
        mod.gather.tune(x, idx, BLOCK=4)


def test_under_vmap_the_batch_joins_the_key(mod):
    x = jnp.ones((6, 5, 40), jnp.float32)
    np.testing.assert_allclose(jax.vmap(mod.rowsum)(x), 40.0)
    np.testing.assert_allclose(jax.jit(jax.vmap(mod.rowsum))(x[:3]), 40.0)
    assert {"rowsum_float32_BLOCK float32[8,8,64]", "rowsum_float32_BLOCK float32[4,8,64]"} <= set(entries(mod))
    assert "rowsum_float32_BLOCK float32[8,64]" not in entries(mod)  # (JAX traces the unbatched call too)


def test_grad_tunes_the_backward_template_on_its_own(mod):
    x = jnp.ones((3, 33), jnp.float32)
    before = runs(mod)
    value, g = jax.jit(jax.value_and_grad(lambda v: mod.scale(v, factor=3.0).sum()))(x)
    np.testing.assert_allclose(value, 297.0)
    np.testing.assert_allclose(g, 3.0)
    assert runs(mod) - before > 2  # the backward variants were timed
    table = entries(mod)
    assert {"scale_float32_BLOCK float32[4,64]", "scale_bwd_float32_BLOCK float32[4,64],float32[4,64]"} <= set(table)
    text = lowered(jax.grad(lambda v: mod.scale(v, factor=3.0).sum()), x)
    assert f"{NAME}.{table['scale_bwd_float32_BLOCK float32[4,64],float32[4,64]']['choice']}" in text


# ---- remembered across processes ------------------------------------------------------------------

CALL = textwrap.dedent("""
    import sys, jax, jax.numpy as jnp, kernix
    mod = kernix.load_cpp_file(sys.argv[1], name=sys.argv[2])
    rows, n = map(int, sys.argv[3].split("x"))
    print(mod.rowsum(jnp.ones((rows, n), jnp.float32))[0])
    print(int(mod.runs(out=jax.ShapeDtypeStruct((1,), jnp.int32))[0]))
""")


def test_a_fresh_process_reuses_the_remembered_choice_without_timing(mod):
    mod.rowsum(jnp.ones((16, 500), jnp.float32))
    out = subprocess.run([sys.executable, "-c", CALL, str(SOURCE), NAME, "16x500"], capture_output=True, text=True,
                         check=True, env={**os.environ, "JAX_PLATFORMS": "cpu"}).stdout.split()
    assert out == ["500.0", "1"]  # one run: no timing


def test_an_edited_kernel_or_another_device_tunes_again(mod, tmp_path, monkeypatch):
    x = jnp.ones((16, 600), jnp.float32)
    mod.rowsum(x)
    before = runs(mod)
    mod.rowsum(x)
    assert runs(mod) - before == 1
    monkeypatch.setattr(tuning, "device_identity", lambda device: "cpu: another model")
    mod.rowsum(x)
    assert runs(mod) - before > 3
    monkeypatch.undo()
    small = SOURCE.read_text().split("// Scales x")[0]  # (the counter and rowsum: a quick build)
    first = kernix.load_cpp_inline(unique_name("small"), small, build_directory=str(tmp_path))
    edited = kernix.load_cpp_inline(unique_name("small"), small.replace("BLOCK: 1, 8, 64", "BLOCK: 1, 8, 32"),
                                    build_directory=str(tmp_path))
    assert edited.digest != first.digest
    first.rowsum(x)
    before = runs(edited)
    edited.rowsum(x)
    assert runs(edited) - before > 3


def test_processes_tuning_at_once_leave_one_table_holding_every_choice(mod):
    shapes = ["3x70000", "5x70000", "7x70000"]
    procs = [subprocess.Popen([sys.executable, "-c", CALL, str(SOURCE), NAME, s], stdout=subprocess.PIPE,
                              env={**os.environ, "JAX_PLATFORMS": "cpu"}) for s in shapes]
    assert all(p.wait(timeout=120) == 0 for p in procs)
    table = entries(mod)
    assert {f"rowsum_float32_BLOCK float32[{r},131072]" for r in (4, 8)} <= set(table)
    for p in procs:
        p.stdout.close()


def test_kernix_cache_info_shows_the_tables(mod, capsys):
    mod.rowsum(jnp.ones((1, 10), jnp.float32))
    assert main(["cache", "info"]) == 0
    out = capsys.readouterr().out
    assert re.search(rf"tuned: {NAME} \(library {mod.digest[:12]}\) on cpu: ", out)
    assert re.search(r"rowsum_float32_BLOCK float32\[1,16\] -> rowsum_float32_(1|8|64) \(rowsum_float32_1 [\d.]+ us",
                     out)


SHARDED = textwrap.dedent("""
    import sys, jax, jax.numpy as jnp, numpy as np, kernix
    from jax.sharding import NamedSharding, PartitionSpec as P
    mod = kernix.load_cpp_file(sys.argv[1], name=sys.argv[2])
    mesh = jax.make_mesh((2,), ("d",))
    x = jax.device_put(jnp.ones((8, 300), jnp.float32), NamedSharding(mesh, P("d")))
    print(np.asarray(jax.jit(jax.shard_map(mod.rowsum, mesh=mesh, in_specs=P("d"), out_specs=P("d")))(x))[0])
    y = jax.device_put(jnp.ones((12, 100), jnp.float32), NamedSharding(mesh, P("d")))
    print(np.asarray(jax.jit(mod.rowsum)(y))[0])
""")


def test_per_shard_shapes_key_the_choice_under_sharding(mod):
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    out = subprocess.run([sys.executable, "-c", SHARDED, str(SOURCE), NAME], capture_output=True, text=True,
                         env=env, check=True).stdout.splitlines()
    assert out[:2] == ["300.0", "100.0"]
    keys = set(entries(mod))
    # shard_map: each device's 4 rows; automatic partitioning: each device's 6 rows, never the global 12
    assert {"rowsum_float32_BLOCK float32[4,512]", "rowsum_float32_BLOCK float32[8,128]"} <= keys
    assert not {"rowsum_float32_BLOCK float32[8,512]", "rowsum_float32_BLOCK float32[16,128]"} & keys


def test_kernix_tune_tunes_ahead_of_time_and_a_prebuilt_module_ships_its_tables(tmp_path, capsys, monkeypatch):
    directory = tmp_path / "prebuilt"
    name = unique_name("shipped")
    assert main(["build", str(SOURCE), "-o", str(directory), "--name", name]) == 0
    assert main(["tune", str(directory), "--shapes", "float32[16,900]", "--shapes", "float32[3],int32[2]",
                 "--function", "rowsum", "--function", "gather"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"rowsum float32\[16,900\] -> rowsum_float32_(1|8|64)", out)
    assert re.search(r"gather float32\[3\],int32\[2\] -> gather_(1|4)", out)
    shipped = json.loads((directory / "kernix-tuning.json").read_text())["tables"]
    assert "rowsum_float32_BLOCK float32[16,1024]" in shipped[0]["entries"]
    script = textwrap.dedent("""
        import sys, jax, jax.numpy as jnp, kernix
        mod = kernix.load_prebuilt(sys.argv[1])
        total = mod.rowsum(jnp.ones((16, 900), jnp.float32))[0]
        print(total, int(mod.runs(out=jax.ShapeDtypeStruct((1,), jnp.int32))[0]))
    """)
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "KERNIX_CACHE_DIR": str(tmp_path / "empty-cache")}
    out = subprocess.run([sys.executable, "-c", script, str(directory)], capture_output=True, text=True, env=env,
                         check=True).stdout.split()
    assert out == ["900.0", "1"]  # the shipped choice, in a process with an empty cache: no timing
    shipped_mod = kernix.load_prebuilt(directory)
    monkeypatch.setattr(tuning, "device_identity", lambda device: "cpu: a machine the wheel has no table for")
    before = runs(shipped_mod)
    np.testing.assert_allclose(shipped_mod.rowsum(jnp.ones((16, 900), jnp.float32)), 900.0)
    assert runs(shipped_mod) - before > 3
    assert main(["tune", str(directory), "--shapes", "float32[4]", "--function", "nothing"]) == 1
    assert main(["tune", str(directory), "--shapes", "float32(4)"]) == 2
    assert main(["tune", str(tmp_path / "missing.cpp"), "--shapes", "float32[4]"]) == 2  # as kernix build says it
    shutil.rmtree(directory)


# ---- on a GPU ------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.skipif(not gpus(), reason="needs an NVIDIA GPU")
def test_on_a_gpu_the_kernels_are_timed_in_one_program_and_the_choice_is_per_gpu():
    gpu = gpus()[0]
    cuda = kernix.load_cuda_file(FIXTURES / "tune" / "tune_cuda.cu", name=unique_name("tuned_cuda"))

    def launches() -> int:
        return int(cuda.launches(out=jax.ShapeDtypeStruct((1,), jnp.int32))[0])

    x = jax.device_put(jnp.asarray(np.random.default_rng(1).uniform(size=(512, 20000)), jnp.float32), gpu)
    before = launches()
    np.testing.assert_allclose(cuda.rowsum(x), np.asarray(x).sum(-1), rtol=1e-4)
    ran = launches() - before
    assert ran > 60  # each variant: many calls in each of its programs (merged, it would be 9 a variant)
    tables = [t for t in kernix.cache_info()["tuning"] if t["digest"] == cuda.digest]
    assert len(tables) == 1 and tables[0]["device"].startswith("gpu: ")
    assert f"compute capability {gpu.compute_capability}" in tables[0]["device"]
    entry = tables[0]["entries"]["rowsum_float32_THREADS float32[512,32768]"]
    assert set(entry["us"]) == {"rowsum_float32_32", "rowsum_float32_256", "rowsum_float32_1024"}
    assert entry["choice"] == min(entry["us"], key=entry["us"].get)
    hlo = jax.jit(cuda.rowsum).lower(x).as_text()
    assert re.findall(r"custom_call @([\w.]+)", hlo) == [cuda.targets[entry["choice"]]]
    before = launches()
    cuda.rowsum(x[:300])  # the same bucket: no timing
    assert launches() - before == 1
    assert kernix.cache_info()["tuning"] and jax.jit(jax.vmap(cuda.rowsum))(jnp.stack([x, x])).shape == (2, 512)
