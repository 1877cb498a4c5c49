// kernix/detail/check_driver.cc -- kernix.check's driver: a kernel run outside XLA, on exact buffers.
//
// Not part of the public API.  kernix.check (kernix/checking/sanitized.py) compiles this file once
// per sanitizer, and generates per module a unit defining the table of the functions to run
// (kernix_check_functions, of the type check_driver.h declares); it links them with the user's code
// and its shims, all built under a sanitizer
// (AddressSanitizer and UndefinedBehaviorSanitizer, or ThreadSanitizer).  The driver reads calls
// from one file descriptor and answers on another (the kernel's own stdout stays its own):
//
//   request: u32 op (1: call, 0: exit), u32 function, u8 fill, then per parameter (its kind
//     letter in the table): a tensor ('i' input, 'b' in place, 'o' output, 's' scratch, 'f'/'F'
//     a typed XLA buffer argument/result): u32 dtype-name length, the name, u32 rank, i64 dims,
//     u64 bytes, and for 'i', 'b', 'f' the bytes; a scalar attribute ('a'): u64 bytes, the bytes;
//     an array or string attribute ('r'): u64 count, u64 bytes, the bytes; state ('S'), the
//     thread pool ('T') and the stream ('q'): nothing.
//   reply: u32 status (0: returned, 1: threw), u32 message length, the message, then per
//     tensor parameter u64 bytes and its bytes after the call.
//
// Every tensor is a buffer of exactly its size: a sanitizer sees any access past it.  Under
// AddressSanitizer each is alone in its own stretch of address space (Memory, below), so that even an
// access far from it is told as that tensor's; under ThreadSanitizer it is its own malloc.  Built with
// KERNIX_CHECK_CUDA (for CUDA functions, run under compute-sanitizer), every tensor is its own
// cudaMalloc of exactly its size instead, scratch is left uninitialised (for initcheck), the stream
// is the default one and the driver waits for the device after each call (a failure there is the
// call's error).  Outputs
// and scratch start filled with the request's byte.  Before each call the driver writes the
// buffers' addresses to stderr ("kernix-check: buffer <parameter> <address> <bytes>"), so that a
// sanitizer's report, which names an address, can be told which parameter it concerns.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

#ifdef KERNIX_CHECK_CUDA
#include <cuda_runtime.h>
#endif
#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/asan_interface.h>
#endif

#include "check_driver.h"
#include "shim.h"
#include "xla/ffi/api/c_api.h"


namespace {

int in_fd = 0, out_fd = 1;

bool read_all(void* data, size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t got = read(in_fd, p, n);
    if (got <= 0) return false;
    p += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

void write_all(const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t put = write(out_fd, p, n);
    if (put <= 0) std::_Exit(3);
    p += put;
    n -= static_cast<size_t>(put);
  }
}

template <typename T>
T take() {
  T value{};
  if (!read_all(&value, sizeof value)) std::_Exit(0);
  return value;
}

int32_t dtype_code(const std::string& name) {
#define KERNIX_CHECK_CODE_(CODE, NAME, TEXT) \
  if (name == TEXT) return CODE;
  KERNIX_DTYPE_ROWS(KERNIX_CHECK_CODE_)
#undef KERNIX_CHECK_CODE_
  return 0;
}

// XLA's intra-op pool of four threads, played by a thread started for each task.  The user's code is
// built with KERNIX_CHECK_FIXED_SHARES, so parallel_for gives each thread a fixed share of its ranges and
// waits for them all: a race between two threads' ranges is then one ThreadSanitizer sees whatever the
// machine's load, and a task is never queued behind a busy thread (a parallel_for inside another's range
// cannot wait for itself).
struct Pool {
  static void schedule(void*, void (*task)(void*), void* data) { std::thread(task, data).detach(); }
  static constexpr int64_t size = 4;
};

// One parameter's storage for a call.
struct Slot {
  char kind = 0;
  void* data = nullptr;
  size_t bytes = 0;
  std::vector<int64_t> dims;
  std::vector<char> host;  // a tensor's bytes, read or to be written
  kernix::TensorView view{};
  kernix::ArrayView array{};
};

// A typed XLA buffer parameter (xla::ffi::Buffer<T, R>, Result<...>): the generated decoder builds
// it from the XLA_FFI_Buffer describing the view, as XLA's handler would.
void* typed_buffer(void* (*decode)(void*), const kernix::TensorView& v, XLA_FFI_Buffer* b) {
  std::memset(static_cast<void*>(b), 0, sizeof *b);
  b->struct_size = XLA_FFI_Buffer_STRUCT_SIZE;
  b->dtype = static_cast<XLA_FFI_DataType>(v.xla_dtype);
  b->data = v.data;
  b->rank = v.ndim;
  b->dims = const_cast<int64_t*>(v.dims);
  return decode(b);
}

// Where a tensor lives: host memory, or (KERNIX_CHECK_CUDA) device memory staged through `host`.
struct Memory {
#ifdef KERNIX_CHECK_CUDA
  static void* allocate(size_t n) {
    void* p = nullptr;
    return cudaMalloc(&p, n) == cudaSuccess ? p : nullptr;
  }
  static void put(void* d, const std::vector<char>& h) { cudaMemcpy(d, h.data(), h.size(), cudaMemcpyHostToDevice); }
  static void fill(void* d, int v, size_t n, char kind) {
    if (kind != 's') cudaMemset(d, v, n);
  }
  static void get(std::vector<char>& h, const void* d) { cudaMemcpy(h.data(), d, h.size(), cudaMemcpyDeviceToHost); }
  static void release(void* d, size_t) { cudaFree(d); }
  static const char* finish() {
    const cudaError_t e = cudaDeviceSynchronize();
    return e == cudaSuccess ? nullptr : cudaGetErrorString(e);
  }
#elif defined(__SANITIZE_ADDRESS__)
  // Under AddressSanitizer each tensor ends its own pages, between two stretches of kFar inaccessible
  // bytes; it starts 64-byte aligned, as XLA's buffers do, and the bytes of its pages around it are
  // poisoned.  An access just past either end is reported, and one up to kFar away faults, where a heap
  // block's neighbours would take it unseen (kernix/checking/sanitized.py reads the address: _FAR).
  static constexpr size_t kFar = size_t{1} << 30;
  static size_t padded(size_t n) { return (n + 63) & ~size_t{63}; }
  static size_t pages(size_t n) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    return (padded(n) + page - 1) / page * page;
  }
  static void* allocate(size_t n) {
    void* base = mmap(nullptr, kFar + pages(n) + kFar, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) return nullptr;
    char* first = static_cast<char*>(base) + kFar;
    if (mprotect(first, pages(n), PROT_READ | PROT_WRITE) != 0) {
      munmap(base, kFar + pages(n) + kFar);
      return nullptr;
    }
    char* data = first + pages(n) - padded(n);
    ASAN_POISON_MEMORY_REGION(first, static_cast<size_t>(data - first));
    ASAN_POISON_MEMORY_REGION(data + n, padded(n) - n);
    return data;
  }
  static void release(void* d, size_t n) {
    if (d == nullptr) return;  // (its allocation failed)
    char* first = static_cast<char*>(d) + padded(n) - pages(n);
    ASAN_UNPOISON_MEMORY_REGION(first, pages(n));  // (the shadow outlives the mapping)
    munmap(first - kFar, kFar + pages(n) + kFar);
  }
#else
  static void* allocate(size_t n) { return std::malloc(n); }
  static void release(void* d, size_t) { std::free(d); }
#endif
#ifndef KERNIX_CHECK_CUDA
  static void put(void* d, const std::vector<char>& h) {
    if (!h.empty()) std::memcpy(d, h.data(), h.size());
  }
  static void fill(void* d, int v, size_t n, char) { std::memset(d, v, n); }
  static void get(std::vector<char>& h, const void* d) {
    if (!h.empty()) std::memcpy(h.data(), d, h.size());
  }
  static const char* finish() { return nullptr; }
#endif
};

bool is_tensor(char kind) { return kind == 'i' || kind == 'b' || kind == 'o' || kind == 's' || kind == 'f' || kind == 'F'; }

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 3) {
    in_fd = std::atoi(argv[1]);
    out_fd = std::atoi(argv[2]);
  }
#ifdef KERNIX_CHECK_CUDA
  kernix::ThreadPoolView pool_view{nullptr, 0, nullptr};  // CUDA functions: a pool of no threads
#else
  Pool pool;
  kernix::ThreadPoolView pool_view{&pool, Pool::size, &Pool::schedule};
#endif
  std::vector<void*> states(static_cast<size_t>(kernix_check_function_count), nullptr);
  void* no_stream = nullptr;
  for (;;) {
    const uint32_t op = take<uint32_t>();
    if (op != 1) return 0;
    const uint32_t index = take<uint32_t>();
    const uint8_t fill = take<uint8_t>();
    if (index >= static_cast<uint32_t>(kernix_check_function_count)) return 4;
    const kernix::check::Function& f = kernix_check_functions[index];
    const size_t n = std::strlen(f.kinds);
    std::vector<Slot> slots(n);
    std::vector<void*> params(n, nullptr);
    std::vector<XLA_FFI_Buffer> typed(n);
    for (size_t k = 0; k < n; ++k) {
      Slot& s = slots[k];
      s.kind = f.kinds[k];
      if (is_tensor(s.kind)) {
        std::string name(take<uint32_t>(), '\0');
        if (!read_all(&name[0], name.size())) return 0;
        s.dims.resize(take<uint32_t>());
        for (int64_t& d : s.dims) d = take<int64_t>();
        s.bytes = take<uint64_t>();
        s.data = Memory::allocate(s.bytes);
        s.host.resize(s.bytes);
        if (s.kind == 'i' || s.kind == 'b' || s.kind == 'f') {
          if (s.bytes && !read_all(s.host.data(), s.bytes)) return 0;
          Memory::put(s.data, s.host);
        } else {
          Memory::fill(s.data, fill, s.bytes, s.kind);
        }
        s.view = kernix::TensorView{s.data, dtype_code(name), static_cast<int64_t>(s.dims.size()), s.dims.data()};
        params[k] = &s.view;
        if (s.kind == 'f' || s.kind == 'F') params[k] = typed_buffer(f.decode[k], s.view, &typed[k]);
      } else if (s.kind == 'a') {
        s.bytes = take<uint64_t>();
        s.data = std::malloc(s.bytes);
        if (!read_all(s.data, s.bytes)) return 0;
        params[k] = s.data;
      } else if (s.kind == 'r') {
        const int64_t count = static_cast<int64_t>(take<uint64_t>());
        s.bytes = take<uint64_t>();
        s.data = std::malloc(s.bytes);
        if (!read_all(s.data, s.bytes)) return 0;
        s.array = kernix::ArrayView{s.data, count};
        params[k] = &s.array;
      } else if (s.kind == 'S') {
        if (states[index] == nullptr) states[index] = f.new_state();
        params[k] = states[index];
      } else if (s.kind == 'T') {
        params[k] = &pool_view;
      } else {
        params[k] = &no_stream;
      }
    }
    std::fprintf(stderr, "kernix-check: call %s\n", f.name);
    for (size_t k = 0; k < n; ++k) {
      if (slots[k].data != nullptr)
        std::fprintf(stderr, "kernix-check: buffer %zu %p %zu\n", k, slots[k].data, slots[k].bytes);
    }
    std::fflush(stderr);
    int code = 0;
    const char* message = kernix::detail::run_shim(f.shim, params.data(), &code);
    if (message == nullptr) message = Memory::finish();
    const uint32_t status = message ? 1 : 0;
    const uint32_t length = message ? static_cast<uint32_t>(std::strlen(message)) : 0;
    write_all(&status, sizeof status);
    write_all(&length, sizeof length);
    if (length) write_all(message, length);
    for (Slot& s : slots) {
      if (is_tensor(s.kind)) {
        const uint64_t bytes = s.bytes;
        write_all(&bytes, sizeof bytes);
        Memory::get(s.host, s.data);
        if (bytes) write_all(s.host.data(), bytes);
        Memory::release(s.data, s.bytes);
      } else {
        std::free(s.data);
      }
    }
  }
}
