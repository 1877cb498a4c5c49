"""XLA's intra-op thread pool (``BE::ThreadPool``): parallel_for covers the
range exactly once, runs on several threads where XLA has them, passes an
exception on, and finishes when the pool's threads are busy; a CUDA function
gets a pool of no threads."""

from __future__ import annotations

import os
import textwrap

import numpy as np
import pytest

import jax
import jax.numpy as jnp

import kernix

from helpers import infer_cuda_text, unique_name

CPP = textwrap.dedent(
    """\
    #include <atomic>
    #include <mutex>
    #include <set>
    #include <stdexcept>
    #include <thread>
    #include "kernix/common.h"
    #include "kernix/threads.h"

    // y = 2 x, in ranges of at least `grain`; hits[i] counts how often index i ran.
    // info: the pool's size, the number of distinct threads that ran ranges.
    // @BE twice (n)->(n),(n):int32,(2):int64
    void twice(const BE::Tensor& x, BE::Tensor& y, BE::Tensor& hits, BE::Tensor& info, int64_t grain,
               BE::ThreadPool pool) {
      const float* in = x.data_ptr<float>();
      float* out = y.data_ptr<float>();
      int32_t* h = hits.data_ptr<int32_t>();
      std::mutex m;
      std::set<std::thread::id> threads;
      for (int64_t i = 0; i < x.numel(); ++i) h[i] = 0;
      pool.parallel_for(x.numel(), grain, [&](int64_t begin, int64_t end) {
        {
          std::lock_guard<std::mutex> lock(m);
          threads.insert(std::this_thread::get_id());
        }
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        for (int64_t i = begin; i < end; ++i) {
          out[i] = 2 * in[i];
          ++h[i];
        }
      });
      info.data_ptr<int64_t>()[0] = pool.num_threads();
      info.data_ptr<int64_t>()[1] = static_cast<int64_t>(threads.size());
    }

    // Every pool thread busy with an outer range that runs an inner loop: it finishes.
    // @BE nested (n)->(n)
    void nested(const BE::Tensor& x, BE::Tensor& y, BE::ThreadPool pool) {
      const int64_t n = x.numel();
      float* out = y.data_ptr<float>();
      pool.parallel_for(n, 1, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          std::atomic<int64_t> sum{0};
          pool.parallel_for(100, 1, [&](int64_t b, int64_t e) { sum += e - b; });
          out[i] = static_cast<float>(sum.load());
        }
      });
    }

    // A pool of no threads (BE::ThreadPool{}) runs the loop on the calling thread, in one range.
    // @BE serial (n)->(n)
    void serial(const BE::Tensor& x, BE::Tensor& y) {
      BE::ThreadPool none;
      int calls = 0;
      none.parallel_for(x.numel(), 1, [&](int64_t begin, int64_t end) {
        ++calls;
        for (int64_t i = begin; i < end; ++i) y.data_ptr<float>()[i] = static_cast<float>(end - begin);
      });
      BE_CHECK(calls == (x.numel() > 0 ? 1 : 0)) << calls << " calls";
    }

    // @BE fails (n)->(n)
    void fails(const BE::Tensor& x, BE::Tensor& y, const BE::ThreadPool& pool) {
      pool.parallel_for(x.numel(), 1, [&](int64_t begin, int64_t end) {
        if (begin <= 3 && 3 < end) throw std::runtime_error("index 3 is bad");
      });
    }
    """
)


@pytest.fixture(scope="module")
def mod(tmp_path_factory):
    return kernix.load_cpp_inline(unique_name("threads"), CPP, build_directory=tmp_path_factory.mktemp("b"))


def test_spec(mod):
    assert mod.twice.spec.arg_spec == ("arg", "ret", "ret", "ret", "attr.grain:int64", "threads")
    assert mod.fails.spec.arg_spec == ("arg", "ret", "threads")


@pytest.mark.parametrize("n, grain", [(1, 1), (7, 1), (1000, 1), (1000, 64), (1000, 5000), (0, 1)])
def test_every_index_once(mod, n, grain):
    x = jnp.arange(n, dtype=jnp.float32)
    for fn in (mod.twice, jax.jit(mod.twice, static_argnames="grain")):
        y, hits, info = fn(x, grain=grain)
        np.testing.assert_array_equal(y, 2 * np.arange(n))
        np.testing.assert_array_equal(hits, np.ones(n))
        assert int(info[0]) >= 1  # XLA's CPU client has a pool


def test_several_threads_run(mod):
    _, _, info = mod.twice(jnp.ones(4000, jnp.float32), grain=1)
    threads, used = int(info[0]), int(info[1])
    assert threads >= 1
    if threads >= 2 and (os.cpu_count() or 1) >= 2:
        assert used >= 2, f"a pool of {threads} threads ran every range on one thread"


def test_an_exception_reaches_the_caller(mod):
    with pytest.raises(Exception, match="kernix: fails: index 3 is bad"):
        jax.block_until_ready(mod.fails(jnp.ones(100, jnp.float32)))


def test_vmap(mod):
    x = jnp.ones((3, 50), jnp.float32)
    y, hits, _ = jax.vmap(lambda r: mod.twice(r, grain=4))(x)
    np.testing.assert_array_equal(y, np.full((3, 50), 2.0))
    np.testing.assert_array_equal(hits, np.ones((3, 50)))


def test_nested_loops_finish(mod):
    np.testing.assert_array_equal(mod.nested(jnp.ones(64, jnp.float32)), np.full(64, 100.0))


def test_no_pool_runs_on_the_caller(mod):
    np.testing.assert_array_equal(mod.serial(jnp.ones(9, jnp.float32)), np.full(9, 9.0))


CUDA = textwrap.dedent(
    """\
    #include "kernix/common.h"
    #include "kernix/threads.h"
    // @BE host_loop (n)->(n)
    void host_loop(const BE::Tensor& x, BE::Tensor& y, BE::ThreadPool pool, cudaStream_t s) {
      BE_CHECK(pool.num_threads() == 0) << "a CUDA function gets a pool of no threads";
      cudaMemcpyAsync(y.data_ptr(), x.data_ptr(), x.nbytes(), cudaMemcpyDeviceToDevice, s);
    }
    """
)


def test_cuda_source_infers(tmp_path):
    result = infer_cuda_text(tmp_path, "threads.cu", CUDA)
    assert result.errors == () and result.functions[0].arg_spec == ("arg", "ret", "threads", "stream")


def test_export(mod):
    exp = kernix.export(jax.jit(lambda x: mod.twice(x, grain=8)[0]), jax.ShapeDtypeStruct((100,), jnp.float32))
    again = kernix.deserialize(exp.serialize())
    np.testing.assert_array_equal(again.call(jnp.arange(100, dtype=jnp.float32)), 2 * np.arange(100))
