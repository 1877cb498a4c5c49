"""Forward mode through tangent kernels (``jvp=``): a kernel of two inputs and two outputs with an
attribute, a template whose tangent kernel is paired per instantiation, and reverse over reverse
through a backward kernel's own backward kernel.  (Every transformation of elementwise kernels with
each combination of derivative kernels, on one device, several and GPUs: tests/test_transforms.py.)"""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

import jax
import jax.numpy as jnp

import kernix

from helpers import unique_name

SRC = textwrap.dedent(
    """\
    #include <cmath>
    #include "kernix/common.h"

    // (r, theta) -> (x, y), scaled.
    // @BE polar (...,n),(...,n)->(...,n),(...,n)
    void polar(const BE::Tensor& r, const BE::Tensor& theta, BE::Tensor& x, BE::Tensor& y, float scale) {
      const float *a = r.data_ptr<float>(), *t = theta.data_ptr<float>();
      for (int64_t i = 0; i < r.numel(); ++i) {
        x.data_ptr<float>()[i] = scale * a[i] * std::cos(t[i]);
        y.data_ptr<float>()[i] = scale * a[i] * std::sin(t[i]);
      }
    }
    // @BE polar_jvp (...,n),(...,n),(...,n),(...,n)->(...,n),(...,n) jvp=polar
    void polar_jvp(const BE::Tensor& r, const BE::Tensor& theta, const BE::Tensor& dr, const BE::Tensor& dtheta,
                   BE::Tensor& dx, BE::Tensor& dy, float scale) {
      const float *a = r.data_ptr<float>(), *t = theta.data_ptr<float>();
      const float *da = dr.data_ptr<float>(), *dt = dtheta.data_ptr<float>();
      for (int64_t i = 0; i < r.numel(); ++i) {
        dx.data_ptr<float>()[i] = scale * (da[i] * std::cos(t[i]) - a[i] * std::sin(t[i]) * dt[i]);
        dy.data_ptr<float>()[i] = scale * (da[i] * std::sin(t[i]) + a[i] * std::cos(t[i]) * dt[i]);
      }
    }
    // @BE polar_bwd (...,n),(...,n),(...,n),(...,n)->(...,n),(...,n) vjp=polar
    void polar_bwd(const BE::Tensor& r, const BE::Tensor& theta, const BE::Tensor& gx, const BE::Tensor& gy,
                   BE::Tensor& dr, BE::Tensor& dtheta, float scale) {
      const float *a = r.data_ptr<float>(), *t = theta.data_ptr<float>();
      const float *u = gx.data_ptr<float>(), *v = gy.data_ptr<float>();
      for (int64_t i = 0; i < r.numel(); ++i) {
        dr.data_ptr<float>()[i] = scale * (u[i] * std::cos(t[i]) + v[i] * std::sin(t[i]));
        dtheta.data_ptr<float>()[i] = scale * a[i] * (v[i] * std::cos(t[i]) - u[i] * std::sin(t[i]));
      }
    }

    // x ** P, for P = 2 and 3; its tangent kernel is a template of the same arguments.
    // @BE power<P: 2, 3> (...,n)->(...,n)
    template <int P>
    void power(const BE::Tensor& x, BE::Tensor& y) {
      const float* a = x.data_ptr<float>();
      for (int64_t i = 0; i < x.numel(); ++i) y.data_ptr<float>()[i] = std::pow(a[i], P);
    }
    // @BE power_jvp<P: 2, 3> (...,n),(...,n)->(...,n) jvp=power
    template <int P>
    void power_jvp(const BE::Tensor& x, const BE::Tensor& dx, BE::Tensor& dy) {
      const float *a = x.data_ptr<float>(), *d = dx.data_ptr<float>();
      for (int64_t i = 0; i < x.numel(); ++i) dy.data_ptr<float>()[i] = P * std::pow(a[i], P - 1) * d[i];
    }

    // x[idx]: an integer input, whose tangent the tangent kernel gets as zeros.
    // @BE take (n),(k):int32->(k)
    void take(const BE::Tensor& x, const BE::Tensor& idx, BE::Tensor& y) {
      const int32_t* k = idx.data_ptr<int32_t>();
      for (int64_t i = 0; i < idx.numel(); ++i) y.data_ptr<float>()[i] = x.data_ptr<float>()[k[i]];
    }
    // @BE take_jvp (n),(k):int32,(n),(k):int32->(k) jvp=take
    void take_jvp(const BE::Tensor& x, const BE::Tensor& idx, const BE::Tensor& dx, const BE::Tensor& didx,
                  BE::Tensor& dy) {
      for (int64_t i = 0; i < idx.numel(); ++i) {
        const int32_t k = idx.data_ptr<int32_t>()[i];
        BE_CHECK(didx.data_ptr<int32_t>()[i] == 0) << "the tangent of an integer input is zero";
        dy.data_ptr<float>()[i] = dx.data_ptr<float>()[k];
      }
    }

    // x ** 3, with a backward kernel that has a backward kernel (grad of grad).
    // @BE cube (...,n)->(...,n)
    void cube(const BE::Tensor& x, BE::Tensor& y) {
      const float* a = x.data_ptr<float>();
      for (int64_t i = 0; i < x.numel(); ++i) y.data_ptr<float>()[i] = a[i] * a[i] * a[i];
    }
    // @BE cube_bwd (...,n),(...,n)->(...,n) vjp=cube
    void cube_bwd(const BE::Tensor& x, const BE::Tensor& g, BE::Tensor& dx) {
      const float *a = x.data_ptr<float>(), *b = g.data_ptr<float>();
      for (int64_t i = 0; i < x.numel(); ++i) dx.data_ptr<float>()[i] = 3 * a[i] * a[i] * b[i];
    }
    // @BE cube_bwd_bwd (...,n),(...,n),(...,n)->(...,n),(...,n) vjp=cube_bwd
    void cube_bwd_bwd(const BE::Tensor& x, const BE::Tensor& g, const BE::Tensor& c, BE::Tensor& dx,
                      BE::Tensor& dg) {
      const float *a = x.data_ptr<float>(), *b = g.data_ptr<float>(), *w = c.data_ptr<float>();
      for (int64_t i = 0; i < x.numel(); ++i) {
        dx.data_ptr<float>()[i] = 6 * a[i] * b[i] * w[i];
        dg.data_ptr<float>()[i] = 3 * a[i] * a[i] * w[i];
      }
    }
    """
)


@pytest.fixture(scope="module")
def mod(tmp_path_factory):
    return kernix.load_cpp_inline(unique_name("forward_mode"), SRC, build_directory=tmp_path_factory.mktemp("cache"))


def polar_jax(r, theta, scale):
    return scale * r * jnp.cos(theta), scale * r * jnp.sin(theta)


@pytest.fixture(scope="module")
def points():
    rng = np.random.default_rng(0)
    cpu = jax.devices("cpu")[0]  # the module is a CPU build, and a module fixture runs outside each test's CPU default
    return (jax.device_put(rng.uniform(0.5, 2.0, (3, 4)).astype(np.float32), cpu),
            jax.device_put(rng.uniform(-3.0, 3.0, (3, 4)).astype(np.float32), cpu))


def test_jvp_of_two_inputs_two_outputs_and_an_attribute_is_the_references(mod, points):
    r, theta = points
    tangents = (jnp.ones_like(r), 0.5 * theta)
    f = lambda r, theta: mod.polar(r, theta, scale=1.5)  # noqa: E731
    primals, outs = jax.jvp(f, points, tangents)
    want_primals, want = jax.jvp(lambda r, t: polar_jax(r, t, 1.5), points, tangents)
    for got, expected in zip((*primals, *outs), (*want_primals, *want)):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    # under jit, and under jax.vmap (one call of the tangent kernel for the batch)
    jitted = jax.jit(lambda p, t: jax.jvp(f, p, t)[1])(points, tangents)
    np.testing.assert_allclose(jitted[1], want[1], rtol=1e-5, atol=1e-6)
    batched = jax.vmap(lambda r, t, dr, dt: jax.jvp(f, (r, t), (dr, dt))[1])
    np.testing.assert_allclose(batched(*points, *tangents)[0], want[0], rtol=1e-5, atol=1e-6)
    hlo = jax.jit(batched).lower(*points, *tangents).as_text()
    assert hlo.count(f"{mod.name}.polar_jvp") == 1 and "while" not in hlo


def test_jacfwd_agrees_with_jacrev(mod, points):
    """The tangent kernel (jacfwd) and the backward kernel (jacrev) give the same Jacobian: each mode
    uses its own kernel, as the compiled programs show."""
    f = jax.jit(lambda r, theta: mod.polar(r, theta, scale=0.75))
    forward = jax.jacfwd(f, argnums=(0, 1))(*points)
    reverse = jax.jacrev(f, argnums=(0, 1))(*points)
    for a, b in zip(jax.tree.leaves(forward), jax.tree.leaves(reverse)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    want = jax.jacfwd(lambda r, t: polar_jax(r, t, 0.75), argnums=(0, 1))(*points)
    np.testing.assert_allclose(forward[1][0], want[1][0], rtol=1e-5, atol=1e-6)
    fwd_hlo = jax.jit(jax.jacfwd(f)).lower(*points).as_text()
    rev_hlo = jax.jit(jax.jacrev(f)).lower(*points).as_text()
    assert f"{mod.name}.polar_jvp" in fwd_hlo and f"{mod.name}.polar_bwd" not in fwd_hlo
    assert f"{mod.name}.polar_bwd" in rev_hlo and f"{mod.name}.polar_jvp" not in rev_hlo


def test_linearize_gives_the_jvp(mod, points):
    r, theta = points
    _, push = jax.linearize(lambda t: mod.polar(r, t, scale=2.0), theta)
    dx, dy = push(jnp.ones_like(theta))
    np.testing.assert_allclose(dx, -2.0 * r * jnp.sin(theta), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dy, 2.0 * r * jnp.cos(theta), rtol=1e-5, atol=1e-6)


def test_an_integer_input_gets_a_zero_tangent(mod):
    x = jnp.asarray([10.0, 20.0, 30.0], jnp.float32)
    idx = jnp.asarray([2, 0, 2], jnp.int32)
    _, tangent = jax.jvp(lambda v: mod.take(v, idx), (x,), (jnp.asarray([1.0, 2.0, 3.0], jnp.float32),))
    np.testing.assert_array_equal(tangent, [3.0, 1.0, 3.0])
    np.testing.assert_array_equal(jax.jit(jax.jacfwd(mod.take))(x, idx), np.eye(3, dtype=np.float32)[[2, 0, 2]])


def test_a_forward_mode_program_exports_and_runs_from_its_serialized_form(mod, points):
    f = jax.jit(lambda r, t: jax.jvp(lambda a, b: mod.polar(a, b, scale=1.0), (r, t), (r, t))[1])
    restored = kernix.deserialize(kernix.export(f, *points).serialize())
    for got, want in zip(restored.call(*points), f(*points)):
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_a_template_is_paired_with_its_tangent_template_per_instantiation(mod):
    assert mod.tangent_name("power_2") == "power_jvp_2" and mod.tangent_name("power_3") == "power_jvp_3"
    assert [m.name for m in mod.power.members] == ["power_2", "power_3"]  # tangent kernels are no members
    x = jnp.asarray([[0.5, 1.0, 2.0]], jnp.float32)
    for p in (2, 3):
        _, tangent = jax.jvp(lambda v: mod.power(v, P=p), (x,), (jnp.ones_like(x),))  # noqa: B023
        np.testing.assert_allclose(tangent, p * np.asarray(x) ** (p - 1), rtol=1e-6)
    with pytest.raises(kernix.CallError, match=r"power_3\(\) cannot be differentiated in reverse mode.*"
                                               r"`// @BE power_bwd<\.\.\.> vjp=power`"):
        jax.grad(lambda v: mod.power(v, P=3).sum())(x)


def test_reverse_over_reverse_through_the_backward_kernels_backward_kernel(mod):
    x = jnp.asarray([[0.5, 1.0, 2.0]], jnp.float32)
    loss = lambda v: mod.cube(v).sum()  # noqa: E731
    second = jax.grad(lambda v: jax.grad(loss)(v).sum())(x)
    np.testing.assert_allclose(second, 6 * np.asarray(x), rtol=1e-6)
    np.testing.assert_allclose(jax.jit(jax.jacrev(jax.grad(loss)))(x)[0, :, 0, :], np.diag(6 * np.asarray(x[0])),
                               rtol=1e-6)
    # forward over reverse needs a tangent kernel of cube (eagerly, for cube's own tangents) and of cube_bwd
    with pytest.raises(kernix.CallError, match=r"cube\(\) cannot be differentiated in forward mode.*"
                                               r"`// @BE cube_jvp jvp=cube`"):
        jax.hessian(loss)(x)
