// kernix/threads.h -- BE::ThreadPool: XLA's intra-op thread pool, for C++ functions.
//
// A C++ function that takes a `BE::ThreadPool` parameter (by value or
// reference) gets the thread pool XLA runs its CPU computations on, and runs
// loops on it with parallel_for:
//
//   #include "kernix/common.h"
//   #include "kernix/threads.h"
//
//   // @BE scale (n)->(n)
//   void scale(const BE::Tensor& x, BE::Tensor& y, float a, BE::ThreadPool pool) {
//     const float* in = x.data_ptr<float>();
//     float* out = y.data_ptr<float>();
//     pool.parallel_for(x.numel(), [&](int64_t begin, int64_t end) {
//       for (int64_t i = begin; i < end; ++i) out[i] = a * in[i];
//     });
//   }
//
// The parameter is no argument of the Python call.  In a CUDA function it is a
// pool of no threads: parallel_for runs the loop on the calling thread.
//
// Separate from common.h because it needs <atomic>, <mutex> and
// <condition_variable>, which a source that does not use it should not pay for.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>

#include "common.h"

namespace kernix {

class ThreadPool {
 public:
  // A pool of no threads: parallel_for runs on the calling thread.
  ThreadPool() = default;
  // kernix's generated code builds the pool from XLA's.
  explicit ThreadPool(const ::kernix::ThreadPoolView& view) noexcept : view_(view) {}

  // The number of threads of XLA's pool (0 when there is none).
  int64_t num_threads() const noexcept { return view_.pool != nullptr ? view_.num_threads : 0; }

  // Calls f(begin, end) for consecutive ranges that cover [0, n), each of at
  // least `grain` indices (but the last), on the pool's threads and on this
  // one, and returns when every call has returned.  The ranges run in any
  // order and at the same time: f must only write what its range owns.  An
  // exception f throws is rethrown here (the first one; ranges not yet started
  // are then skipped).  This thread runs every range no pool thread has taken,
  // so the loop finishes even when every pool thread is busy.
  template <typename F>
  void parallel_for(int64_t n, int64_t grain, F&& f) const {
    if (n <= 0) return;
    grain = std::max<int64_t>(grain, 1);
    const int64_t most = (n + grain - 1) / grain;  // ranges of `grain` indices
    const int64_t threads = num_threads();
    if (threads <= 1 || most <= 1 || view_.schedule == nullptr) {
      f(int64_t{0}, n);
      return;
    }
    // Four ranges per thread, for balance, and none smaller than grain.
    const int64_t ranges = std::min<int64_t>(most, 4 * (threads + 1));
    auto shared = std::make_shared<Loop<std::remove_reference_t<F>>>(&f, n, ranges);
    const int64_t helpers = std::min<int64_t>(threads, ranges - 1);
    shared->threads = helpers + 1;
    for (int64_t t = 0; t < helpers; ++t) {
      // Each task holds the loop's state: one that starts after the loop is
      // over finds no range and touches nothing of this call.
      auto* task = new Task<std::remove_reference_t<F>>{shared, t + 1};
      view_.schedule(view_.pool, &run_task<std::remove_reference_t<F>>, task);
    }
    shared->work(0);
    shared->wait();
    if (shared->error) std::rethrow_exception(shared->error);
  }

  // parallel_for with ranges of at least n / (4 * threads) indices.
  template <typename F>
  void parallel_for(int64_t n, F&& f) const {
    const int64_t parts = 4 * (num_threads() + 1);
    parallel_for(n, (n + parts - 1) / parts, std::forward<F>(f));
  }

 private:
  template <typename F>
  struct Loop {
    Loop(F* f, int64_t n, int64_t ranges) : f(f), n(n), ranges(ranges) {}
    F* f;
    const int64_t n;
    const int64_t ranges;
    int64_t threads = 1;  // the calling thread and the tasks scheduled for the loop
    std::atomic<int64_t> next{0};
    std::atomic<int64_t> done{0};
    std::atomic<bool> failed{false};
    std::exception_ptr error;
    std::mutex mutex;
    std::condition_variable finished;

    // Runs ranges until none is left for thread `self` (0 is the calling
    // thread), then counts them done at once, so that no two threads' ranges
    // are ordered by the count.  A thread takes whichever range is next; under
    // kernix.check (KERNIX_CHECK_FIXED_SHARES) it runs the ranges self,
    // self + threads, ..., whatever the machine's load, so that the ranges of
    // every thread run, and ThreadSanitizer sees a race between two of them.
    void work(int64_t self) noexcept {
      int64_t count = 0;
      for (int64_t r; (r = take(self, count)) < ranges; ++count) {
        if (!failed.load()) {
          try {
            (*f)(r * n / ranges, (r + 1) * n / ranges);
          } catch (...) {
            std::lock_guard<std::mutex> lock(mutex);
            if (!error) error = std::current_exception();
            failed.store(true);
          }
        }
      }
      if (count > 0 && done.fetch_add(count) + count == ranges) {
        std::lock_guard<std::mutex> lock(mutex);
        finished.notify_all();
      }
    }
    int64_t take(int64_t self, int64_t taken) noexcept {
#ifdef KERNIX_CHECK_FIXED_SHARES
      return self + taken * threads;
#else
      (void)self, (void)taken;
      return next.fetch_add(1);
#endif
    }
    // Waits until every range is done.
    void wait() {
      std::unique_lock<std::mutex> lock(mutex);
      finished.wait(lock, [this] { return done.load() == ranges; });
    }
  };

  template <typename F>
  struct Task {
    std::shared_ptr<Loop<F>> loop;
    int64_t self;
  };

  template <typename F>
  static void run_task(void* data) {
    std::unique_ptr<Task<F>> task(static_cast<Task<F>*>(data));
    task->loop->work(task->self);
  }

  ::kernix::ThreadPoolView view_{nullptr, 0, nullptr};
};

}  // namespace kernix
