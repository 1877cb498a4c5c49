// kernix/detail/messages.h -- the texts of failed checks, built out of line.
//
// Not part of the public API.  Every message kernix's C++ side reports is
// formatted by the functions declared here: a tensor read as the wrong type,
// an index out of range, BE_CHECK's and BE_CUDA_CHECK's texts, a handler's
// error.  They are defined once per module, in messages.cc, which kernix
// compiles as a unit of its own beside the handlers; a translation unit of the
// user's sees only these declarations, so it does not compile text
// formatting it rarely runs.
//
// Everything defined out of line is hidden (KERNIX_LOCAL): each module has
// its own copy, and two kernix modules in one process never bind to each
// other's, whatever flags compiled them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

// A function called only on a failure path: kept out of the callers' code.
#define KERNIX_COLD __attribute__((cold, noinline))
// Defined in this module, seen by no other.
#define KERNIX_LOCAL __attribute__((visibility("hidden")))
// Around code that runs only on a failure (messages.cc, frame.h's error
// paths): compiled without optimization, which takes the host compiler a third
// of the time.  Not under nvcc, which compiles no such code of kernix's.
#if defined(__CUDACC__)
#define KERNIX_FAILURE_CODE_BEGIN
#define KERNIX_FAILURE_CODE_END
#elif defined(__clang__)
#define KERNIX_FAILURE_CODE_BEGIN _Pragma("clang optimize off")
#define KERNIX_FAILURE_CODE_END _Pragma("clang optimize on")
#elif defined(__GNUC__)
#define KERNIX_FAILURE_CODE_BEGIN _Pragma("GCC push_options") _Pragma("GCC optimize(\"O0\")")
#define KERNIX_FAILURE_CODE_END _Pragma("GCC pop_options")
#else
#define KERNIX_FAILURE_CODE_BEGIN
#define KERNIX_FAILURE_CODE_END
#endif

namespace kernix {

enum class DType : int32_t;  // detail/dtype.h

namespace detail {

// A message under construction: a stack buffer for the usual short text,
// the heap for a longer one (out of memory, what does not fit is dropped).
// Stream text, numbers, pointers, dtypes (their names) and any string type
// with c_str() (std::string) into it with <<.
class KERNIX_LOCAL Message {
 public:
  Message() noexcept : data_(stack_) { stack_[0] = '\0'; }
  ~Message() {
    if (data_ != stack_) delete[] data_;
  }
  Message(const Message&) = delete;
  Message& operator=(const Message&) = delete;

  const char* c_str() const noexcept { return data_; }

  KERNIX_COLD Message& add(const char* text, size_t len) noexcept;
  KERNIX_COLD Message& add(const char* text) noexcept;
  KERNIX_COLD Message& add_int(long long value) noexcept;           // "-12"
  KERNIX_COLD Message& add_uint(unsigned long long value) noexcept; // "12"
  KERNIX_COLD Message& add_float(double value) noexcept;            // "%.9g"
  KERNIX_COLD Message& add_pointer(const void* value) noexcept;     // "%p"
  KERNIX_COLD Message& add_dtype(DType dtype) noexcept;             // "float32"
  KERNIX_COLD Message& add_numpy_scalar(DType dtype) noexcept;      // "np.float32": what Python passes

  Message& operator<<(const char* s) noexcept { return add(s ? s : "(null)"); }
  Message& operator<<(char c) noexcept { return add(&c, 1); }
  Message& operator<<(bool b) noexcept { return add(b ? "true" : "false"); }
  Message& operator<<(DType t) noexcept { return add_dtype(t); }
  template <typename T>
  Message& operator<<(const T& value) {
    if constexpr (std::is_integral<T>::value && std::is_signed<T>::value) {
      return add_int(static_cast<long long>(value));
    } else if constexpr (std::is_integral<T>::value) {
      return add_uint(static_cast<unsigned long long>(value));
    } else if constexpr (std::is_floating_point<T>::value) {
      return add_float(static_cast<double>(value));
    } else if constexpr (std::is_enum<T>::value) {
      return *this << static_cast<typename std::underlying_type<T>::type>(value);
    } else if constexpr (std::is_pointer<T>::value) {
      return add_pointer(static_cast<const void*>(value));
    } else {
      return add(value.c_str());  // std::string and the like
    }
  }

 private:
  KERNIX_COLD bool grow(size_t need) noexcept;

  char stack_[512];
  char* data_;
  size_t size_ = 0;
  size_t cap_ = sizeof(stack_);
};

// ---- BE_CHECK ----------------------------------------------------------------

// Collects the message of a failed BE_CHECK: "file:line: check failed: cond",
// then ": " and what was streamed, if anything.
class KERNIX_LOCAL CheckMessage {
 public:
  CheckMessage(const char* file, int line, const char* condition) noexcept;
  template <typename T>
  CheckMessage& operator<<(const T& value) {
    if (!has_text_) {
      message_.add(": ", 2);
      has_text_ = true;
    }
    message_ << value;
    return *this;
  }
  const char* c_str() const noexcept { return message_.c_str(); }

 private:
  Message message_;
  bool has_text_ = false;
};

// `Raise() & message` throws BE::CheckError; `&` binds looser than `<<`, so
// the whole streamed message is built first.
struct KERNIX_LOCAL Raise {
  [[noreturn]] void operator&(const CheckMessage& message) const;
};

// ---- what the API's checks report (each throws BE::Error) --------------------

// What a Tensor tells a message about itself.
struct TensorFacts {
  DType dtype;
  int64_t ndim;
  const int64_t* dims;
  const char* name;  // the parameter's name, or nullptr
};

// data_ptr<T>() of a tensor whose dtype T does not view.  `pretty` is
// pretty_type<T>()'s text, `size` sizeof(T) (0 if unknown), `own` the dtype T views.
[[noreturn]] KERNIX_COLD KERNIX_LOCAL void wrong_element_type(const TensorFacts& t, const char* pretty, size_t size,
                                                              DType own);
// reinterpret_ptr<T>() of a tensor whose elements are not sizeof(T) bytes.
[[noreturn]] KERNIX_COLD KERNIX_LOCAL void wrong_element_size(const TensorFacts& t, const char* pretty, size_t size);
// TensorOf<T> built from a buffer of another dtype.
[[noreturn]] KERNIX_COLD KERNIX_LOCAL void wrong_tensor_dtype(const TensorFacts& t, const char* pretty, DType own);
// Tensor::shape(i) (stride(i), size(i)) of a dimension the tensor lacks.
[[noreturn]] KERNIX_COLD KERNIX_LOCAL void dimension_out_of_range(int64_t i, int64_t ndim);
// Tensor::numel_checked_int() of more elements than an int holds.
[[noreturn]] KERNIX_COLD KERNIX_LOCAL void too_many_elements(int64_t n);
// Span::operator[] past the end.
[[noreturn]] KERNIX_COLD KERNIX_LOCAL void span_index_out_of_range(size_t i, size_t size);
// Scratch::data_ptr<T>(offset, count) outside the scratch memory, or misaligned.
[[noreturn]] KERNIX_COLD KERNIX_LOCAL void scratch_does_not_fit(int64_t count, size_t size, int64_t offset,
                                                                int64_t nbytes, const char* name, size_t align);
// BE_DISPATCH_*: a dtype outside the macro's set.
[[noreturn]] KERNIX_COLD KERNIX_LOCAL void unsupported_dtype(const char* operation, DType dtype);
// BE_CUDA_CHECK: a CUDA call that returned an error (throws BE::CudaError).
[[noreturn]] KERNIX_COLD KERNIX_LOCAL void cuda_call_failed(const char* file, int line, const char* call,
                                                            const char* error_name, const char* error_text);

}  // namespace detail
}  // namespace kernix
