"""Per-instance state (``BE::State<T>``): a T made once per compiled instance
of the call (XLA's instantiate stage), passed to every call of that instance,
destroyed with the executable; a failing constructor is an error naming the
function; on the GPU, a cuBLAS handle kept in the state."""

from __future__ import annotations

import gc
import textwrap

import numpy as np
import pytest

import jax
import jax.numpy as jnp

import kernix
from kernix import infer_file

from helpers import first_gpu, infer_cuda_text, unique_name

CPP = textwrap.dedent(
    """\
    #include <atomic>
    #include <optional>
    #include <stdexcept>
    #include "kernix/common.h"

    static std::atomic<int64_t> made{0};
    static std::atomic<int64_t> destroyed{0};

    namespace plans {
    struct Plan {
      int64_t id;
      int64_t uses = 0;
      Plan() : id(++made) {}
      ~Plan() { ++destroyed; }
    };
    }  // namespace plans

    // out = [the instance's id, how often this instance ran] (batched: per call, not per element).
    // @BE use_plan (...,n)->(...,n),(2):int64
    void use_plan(const BE::Tensor& x, BE::Tensor& y, BE::Tensor& info, BE::State<plans::Plan>& plan) {
      plan->uses += 1;
      for (int64_t i = 0; i < x.numel(); ++i) y.data_ptr<float>()[i] = x.data_ptr<float>()[i];
      info.data_ptr<int64_t>()[0] = plan->id;
      info.data_ptr<int64_t>()[1] = plan.get()->uses;
    }

    // @BE counts ()->(2):int64 has_side_effect
    void counts(const BE::Tensor& unused, BE::Tensor& out) {
      out.data_ptr<int64_t>()[0] = made;
      out.data_ptr<int64_t>()[1] = destroyed;
    }

    // A type made with an argument: held in an optional, as the refusal of a state without a
    // default constructor suggests (tests/test_state.py, test_a_state_kernix_cannot_make_...).
    struct Offset {
      explicit Offset(float by) : by(by) {}
      float by;
    };
    // @BE offset_once (n)->(n)
    void offset_once(const BE::Tensor& x, BE::Tensor& y, BE::State<std::optional<Offset>> offset) {
      if (!*offset) offset->emplace(x.data_ptr<float>()[0]);  // the first call's first element, kept
      for (int64_t i = 0; i < x.numel(); ++i) y.data_ptr<float>()[i] = x.data_ptr<float>()[i] + (*offset)->by;
    }

    struct Broken {
      Broken() { throw std::runtime_error("no device for the plan"); }
    };
    // @BE broken (n)->(n)
    void broken(const BE::Tensor& x, BE::Tensor& y, BE::State<Broken> state) {}
    """
)


@pytest.fixture(scope="module")
def mod(tmp_path_factory):
    return kernix.load_cpp_inline(unique_name("state"), CPP, build_directory=tmp_path_factory.mktemp("b"))


def _counts(mod):
    return [int(v) for v in np.asarray(mod.counts(jnp.zeros((), jnp.float32)))]


def test_spec(mod):
    spec = mod.use_plan.spec
    assert spec.arg_spec == ("arg", "ret", "ret", "state")
    assert spec.params[3].canonical_type == "BE::State<plans::Plan>"


def test_one_state_per_instance(mod):
    x = jnp.ones(3, jnp.float32)
    f = jax.jit(mod.use_plan)
    _, first = f(x)
    _, second = f(x)
    _, third = f(x)
    ids = {int(first[0]), int(second[0]), int(third[0])}
    assert len(ids) == 1  # one instance, one state
    assert [int(first[1]), int(second[1]), int(third[1])] == [1, 2, 3]  # kept across calls
    g = jax.jit(lambda x: mod.use_plan(x * 1)[1])  # another executable: a state of its own
    other = g(x)
    assert int(other[0]) not in ids and int(other[1]) == 1
    assert int(g(x)[1]) == 2


def test_two_calls_in_one_program_have_two_states(mod):
    x = jnp.ones(3, jnp.float32)
    a, b = jax.jit(lambda x: (mod.use_plan(x)[1], mod.use_plan(x + 1)[1]))(x)
    assert int(a[0]) != int(b[0]) and int(a[1]) == int(b[1]) == 1


def test_destroyed_with_the_executable(mod):
    x = jnp.ones(2, jnp.float32)
    f = jax.jit(lambda x: mod.use_plan(x - 1)[1])
    f(x)
    made, destroyed = _counts(mod)
    assert made > destroyed
    del f
    jax.clear_caches()
    gc.collect()
    made_after, destroyed_after = _counts(mod)
    assert destroyed_after > destroyed  # the executable's states went with it
    assert made_after - destroyed_after <= 1 + made_after - made  # (the counts call itself may hold one)


def test_vmap_and_export(mod):
    x = jnp.ones((4, 3), jnp.float32)
    f = jax.jit(jax.vmap(lambda r: mod.use_plan(r)[0]))
    np.testing.assert_array_equal(f(x), np.ones((4, 3)))
    exp = kernix.export(jax.jit(lambda x: mod.use_plan(x)[1]), jax.ShapeDtypeStruct((3,), jnp.float32))
    again = kernix.deserialize(exp.serialize())
    first, second = again.call(jnp.ones(3, jnp.float32)), again.call(jnp.ones(3, jnp.float32))
    assert int(first[0]) == int(second[0]) and int(second[1]) == int(first[1]) + 1


def test_a_failing_constructor_names_the_function(mod):
    with pytest.raises(Exception, match=r"kernix: broken: creating its state: no device for the plan"):
        jax.block_until_ready(mod.broken(jnp.ones(2, jnp.float32)))


def test_rejected(tmp_path):
    path = tmp_path / "rejected.cpp"
    path.write_text(textwrap.dedent(
        """\
        #include "kernix/common.h"
        // @BE scalar_state (n)->(n)
        void scalar_state(const BE::Tensor& x, BE::Tensor& y, BE::State<int> s) {}
        struct A {};
        // @BE two_states (n)->(n)
        void two_states(const BE::Tensor& x, BE::Tensor& y, BE::State<A> a, BE::State<A> b) {}
        """))
    result = infer_file(str(path))
    messages = {e.function: e.message for e in result.errors}
    assert "BE::State<T> takes a class or struct T, the state itself" in messages["scalar_state"]
    assert "takes more than one state parameter ('a', 'b'); take one" in messages["two_states"]


def test_a_state_made_empty_and_filled_at_the_first_call_works(mod):
    """What the refusal below suggests for a T made with arguments: BE::State<std::optional<T>>."""
    f = jax.jit(mod.offset_once)
    np.testing.assert_array_equal(f(jnp.full(2, 5.0, jnp.float32)), [10.0, 10.0])
    np.testing.assert_array_equal(f(jnp.full(2, 1.0, jnp.float32)), [6.0, 6.0])  # made once: still 5


UNMAKEABLE = """\
#include "kernix/common.h"
struct NoDefault { explicit NoDefault(int n) : n(n) {} int n; };
class PrivateDestructor { ~PrivateDestructor() {} };
struct Abstract { virtual void f() = 0; };
struct Incomplete;
struct HoldsNoDefault { NoDefault inner; };
template <typename T> struct Holder { explicit Holder(T v) : v(v) {} T v; };
struct Fine { int n = 3; };
// @BE no_default (n)->(n)
void no_default(const BE::Tensor& x, BE::Tensor& y, BE::State<NoDefault> nd) {}
// @BE private_destructor (n)->(n)
void private_destructor(const BE::Tensor& x, BE::Tensor& y, BE::State<PrivateDestructor>& pd) {}
// @BE abstract (n)->(n)
void abstract(const BE::Tensor& x, BE::Tensor& y, BE::State<Abstract> ab) {}
// @BE incomplete (n)->(n)
void incomplete(const BE::Tensor& x, BE::Tensor& y, BE::State<Incomplete> inc) {}
// @BE member (n)->(n)
void member(const BE::Tensor& x, BE::Tensor& y,
            const BE::State<HoldsNoDefault>& held) {}
// @BE templated<T: float> (n)->(n)
template <typename T>
void templated(const BE::Tensor& x, BE::Tensor& y, BE::State<Holder<T>> h) {}
// @BE fine (n)->(n)
void fine(const BE::Tensor& x, BE::Tensor& y, BE::State<Fine> ok) {}
"""


def test_a_state_kernix_cannot_make_is_refused_at_its_parameter(tmp_path):
    """Was: inference passed a BE::State<T> whose T kernix's generated code cannot make (`new T()`) or
    delete, and the build failed inside kernix's shim.h with a g++ error naming neither function nor
    parameter. Each is an error at the parameter, naming T and what a state needs."""
    path = tmp_path / "unmakeable.cpp"
    path.write_text(UNMAKEABLE)
    lines = UNMAKEABLE.splitlines()
    result = infer_file(str(path), use_cache=False)
    assert [f.name for f in result.functions] == ["fine"]
    found = {e.function: e for e in result.errors}
    expected = {"no_default": ("nd", "NoDefault"), "private_destructor": ("pd", "PrivateDestructor"),
                "abstract": ("ab", "Abstract"), "incomplete": ("inc", "Incomplete"),
                "member": ("held", "HoldsNoDefault"), "templated_float32": ("h", "Holder<float>")}
    assert set(found) == set(expected), [e.format() for e in result.errors]
    for function, (parameter, state) in expected.items():
        e = found[function]
        assert e.file == str(path) and e.parameter == parameter
        written = state.replace("float", "T")  # (the template's parameter as its source spells it)
        assert f"BE::State<{written}>" in lines[e.line - 1] and parameter in lines[e.line - 1]  # the parameter's line
        assert f"`{state}`" in e.message and "default constructor" in e.message and "std::optional" in e.message
    assert "T = float" in found["templated_float32"].message  # which instantiation


CUDA = textwrap.dedent(
    """\
    #include <cublas_v2.h>
    #include "kernix/common.h"

    // The cuBLAS handle, made once per instance, not per call.
    struct Blas {
      cublasHandle_t handle = nullptr;
      Blas() { BE_CHECK(cublasCreate(&handle) == CUBLAS_STATUS_SUCCESS) << "cublasCreate failed"; }
      ~Blas() { cublasDestroy(handle); }
    };

    __global__ void store(int64_t* to, int64_t value) { *to = value; }

    // y = a * x + y (cuBLAS saxpy, in place); handle: the handle's address, as bits.
    // @BE saxpy (n),(n)->(n),(1):int64
    void saxpy(const BE::Tensor& x, BE::InOut& y, BE::Tensor& handle, float a, BE::State<Blas>& blas,
               cudaStream_t s) {
      BE_CHECK(cublasSetStream(blas->handle, s) == CUBLAS_STATUS_SUCCESS) << "cublasSetStream failed";
      BE_CHECK(cublasSaxpy(blas->handle, static_cast<int>(x.numel()), &a, x.data_ptr<float>(), 1,
                           y.data_ptr<float>(), 1) == CUBLAS_STATUS_SUCCESS) << "cublasSaxpy failed";
      store<<<1, 1, 0, s>>>(handle.data_ptr<int64_t>(), reinterpret_cast<int64_t>(blas->handle));
      BE_CHECK_KERNEL_LAUNCH();
    }
    """
)


def test_cuda_source_infers(tmp_path):
    result = infer_cuda_text(tmp_path, "blas.cu", CUDA)
    if result.errors and "cublas_v2.h" in str(result.errors[0]):
        pytest.skip("this CUDA install has no cuBLAS headers")
    assert result.errors == () and result.functions[0].arg_spec == (
        "arg", "inout", "ret", "attr.a:float32", "state", "stream")


@pytest.mark.gpu
@pytest.mark.skipif(first_gpu() is None, reason="needs an NVIDIA GPU")
def test_cuda_state_keeps_a_cublas_handle():
    try:
        mod = kernix.load_cuda_inline(unique_name("state_cuda"), CUDA, extra_ldflags=["-lcublas"])
    except kernix.KernixError as exc:
        if "cublas" in str(exc).lower():
            pytest.skip(f"this CUDA install has no cuBLAS to build against: {str(exc)[:300]}")
        raise
    gpu = first_gpu()
    x = jax.device_put(jnp.arange(1000, dtype=jnp.float32), gpu)
    f = jax.jit(lambda x, y: mod.saxpy(x, y, a=2.0), donate_argnums=1)
    y = jax.device_put(jnp.ones(1000, jnp.float32), gpu)
    handles = set()
    for k in range(3):
        y, handle = f(x, y)
        handles.add(int(handle[0]))
        np.testing.assert_allclose(np.asarray(y), 1 + 2 * (k + 1) * np.arange(1000), rtol=1e-6)
    assert len(handles) == 1 and 0 not in handles  # one handle, made once, used by every call
    other = jax.jit(lambda x, y: mod.saxpy(x, y + 0, a=1.0))(x, y)[1]
    assert int(other[0]) not in handles  # another executable, another handle
