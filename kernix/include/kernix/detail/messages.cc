// kernix/detail/messages.cc -- the out-of-line half of kernix/detail/messages.h.
//
// Not part of the public API.  kernix compiles this file once per module, as
// a unit of its own (compiled by the host compiler), and links it with the
// user's translation units, which see only the declarations.  Everything here
// is hidden (KERNIX_LOCAL on the declarations): a module's copy serves that
// module alone.
#include <cstdio>
#include <cstring>
#include <new>

// Relative to this file: a user's header named kernix/... cannot shadow it.
#include "../common.h"

// These functions run only on a failure (the headers above keep the command
// line's level, so no inline function of theirs is built slower).
KERNIX_FAILURE_CODE_BEGIN

namespace kernix {

Error::Error(const char* message) noexcept { std::snprintf(text_, sizeof text_, "%s", message ? message : ""); }

namespace detail {

// ---- Message -------------------------------------------------------------------

bool Message::grow(size_t need) noexcept {
  size_t cap = cap_ * 2 > need ? cap_ * 2 : need;
  char* bigger = new (std::nothrow) char[cap];
  if (bigger == nullptr) return false;
  std::memcpy(bigger, data_, size_ + 1);
  if (data_ != stack_) delete[] data_;
  data_ = bigger;
  cap_ = cap;
  return true;
}

Message& Message::add(const char* text, size_t len) noexcept {
  if (size_ + len + 1 > cap_ && !grow(size_ + len + 1)) {
    len = cap_ - 1 - size_;  // out of memory: keep what fits
  }
  std::memcpy(data_ + size_, text, len);
  size_ += len;
  data_[size_] = '\0';
  return *this;
}

Message& Message::add(const char* text) noexcept { return add(text, std::strlen(text)); }

Message& Message::add_int(long long value) noexcept {
  char digits[32];
  int n = std::snprintf(digits, sizeof digits, "%lld", value);
  return add(digits, static_cast<size_t>(n));
}

Message& Message::add_uint(unsigned long long value) noexcept {
  char digits[32];
  int n = std::snprintf(digits, sizeof digits, "%llu", value);
  return add(digits, static_cast<size_t>(n));
}

Message& Message::add_float(double value) noexcept {
  char text[64];
  std::snprintf(text, sizeof text, "%.9g", value);
  return add(text);
}

Message& Message::add_pointer(const void* value) noexcept {
  char text[64];
  std::snprintf(text, sizeof text, "%p", value);
  return add(text);
}

Message& Message::add_dtype(DType dtype) noexcept { return add(::kernix::dtype_name(dtype)); }

Message& Message::add_numpy_scalar(DType dtype) noexcept {
  if (dtype == DType::Bool) return add("np.bool_");
  const char* name = ::kernix::dtype_name(dtype);  // NumPy's own name, or ml_dtypes' (bfloat16, float8_*)
  bool numpy = dtype != DType::BFloat16 && std::strncmp(name, "float8", 6) != 0;
  return add(numpy ? "np." : "ml_dtypes.").add(name);
}

// ---- BE_CHECK ------------------------------------------------------------------

CheckMessage::CheckMessage(const char* file, int line, const char* condition) noexcept {
  message_ << file << ":" << line << ": check failed: " << condition;
}

void Raise::operator&(const CheckMessage& message) const { throw CheckError(message.c_str()); }

// ---- the API's checks ----------------------------------------------------------

namespace {

// Appends the type named by pretty_type's text ("... [with T = const float]"),
// with kernix's namespace under its documented name, BE.
void append_type(Message& m, const char* pretty) {
  const char* s = std::strstr(pretty, "T = ");
  if (s == nullptr) {
    m << "T";
    return;
  }
  static const char kOwn[] = "kernix::";
  const size_t own = sizeof(kOwn) - 1;
  char name[256];
  size_t n = 0;
  int depth = 0;
  for (s += 4; *s != '\0' && n + 1 < sizeof name; ++s) {
    char c = *s;
    if (depth == 0 && (c == ']' || c == ';')) break;
    if (c == '<' || c == '(' || c == '[') ++depth;
    if (c == '>' || c == ')' || c == ']') --depth;
    const char before = n > 0 ? name[n - 1] : ' ';
    const bool starts_name = !(before == ':' || before == '_' || (before >= '0' && before <= '9') ||
                               (before >= 'A' && before <= 'Z') || (before >= 'a' && before <= 'z'));
    if (starts_name && std::strncmp(s, kOwn, own) == 0 && n + 4 < sizeof name) {
      std::memcpy(name + n, "BE::", 4);
      n += 4;
      s += own - 1;
      continue;
    }
    name[n++] = c;
  }
  name[n] = '\0';
  m << static_cast<const char*>(name);
}

// The C++ type that views one element of `t`, for messages, or nullptr.
const char* element_type_name(DType t) {
  switch (t) {
    case DType::Bool: return "bool";
    case DType::Int8: return "int8_t";
    case DType::Int16: return "int16_t";
    case DType::Int32: return "int32_t";
    case DType::Int64: return "int64_t";
    case DType::UInt8: return "uint8_t";
    case DType::UInt16: return "uint16_t";
    case DType::UInt32: return "uint32_t";
    case DType::UInt64: return "uint64_t";
    case DType::Float16: return "__half";
    case DType::BFloat16: return "__nv_bfloat16";
    case DType::Float32: return "float";
    case DType::Float64: return "double";
    case DType::Complex64: return "std::complex<float>";
    case DType::Complex128: return "std::complex<double>";
    case DType::Float8E4M3FN: return "__nv_fp8_e4m3";
    case DType::Float8E5M2: return "__nv_fp8_e5m2";
    default: return nullptr;
  }
}

// "parameter 'x' is int32 (shape [3, 4])".
void describe(Message& m, const TensorFacts& t) {
  if (t.name != nullptr && *t.name != '\0') {
    m << "parameter '" << t.name << "'";
  } else {
    m << "the tensor";
  }
  m << " is " << t.dtype << " (shape [";
  for (int64_t d = 0; d < t.ndim; ++d) m << (d ? ", " : "") << t.dims[d];
  m << "])";
}

// "Give 'x' dtype float32" (or "Give the tensor ...").
void give_dtype(Message& m, const TensorFacts& t, DType want) {
  m << "Give ";
  if (t.name != nullptr && *t.name != '\0') {
    m << "'" << t.name << "'";
  } else {
    m << "the tensor";
  }
  m << " dtype " << want;
}

}  // namespace

void wrong_element_type(const TensorFacts& t, const char* pretty, size_t size, DType own) {
  Message m;
  m << "BE::Tensor::data_ptr<";
  append_type(m, pretty);
  m << ">(): ";
  describe(m, t);
  m << ", but ";
  append_type(m, pretty);
  if (own != DType::Invalid) {
    m << " views " << own << " elements";
  } else {
    m << " is the C++ type of no dtype";
  }
  size_t have = dtype_size(t.dtype);
  if (size != 0 && have != 0 && size != have) {
    m << " (" << static_cast<int64_t>(size) << " bytes, not " << static_cast<int64_t>(have)
      << (size > have ? ": reading numel() of them would run past the buffer)" : ")");
  }
  m << ". ";
  if (own != DType::Invalid) {
    give_dtype(m, t, own);
    m << ", or read";
  } else {
    m << "Read";
  }
  if (const char* type = element_type_name(t.dtype)) {
    m << " it as data_ptr<" << type << ">()";
    if (t.dtype == DType::Float16 || t.dtype == DType::BFloat16) m << ", or its bits as data_ptr<uint16_t>()";
    m << " (or dispatch on its dtype, BE_DISPATCH_*)";
  } else {
    m << " it after dispatching on its dtype (BE_DISPATCH_*)";
  }
  if (size != 0 && size == have) {
    m << "; reinterpret_ptr<";
    append_type(m, pretty);
    m << ">() views its bytes as ";
    append_type(m, pretty);
    m << " on purpose";
  }
  throw Error(m.c_str());
}

void wrong_element_size(const TensorFacts& t, const char* pretty, size_t size) {
  Message m;
  m << "BE::Tensor::reinterpret_ptr<";
  append_type(m, pretty);
  m << ">(): ";
  describe(m, t);
  size_t have = dtype_size(t.dtype);
  if (have == 0) {
    m << ", elements of less than a byte";
  } else {
    m << ", elements of " << static_cast<int64_t>(have) << " bytes";
  }
  m << ", but ";
  append_type(m, pretty);
  m << " is " << static_cast<int64_t>(size) << " bytes: reinterpret_ptr<T>() views elements as a type of "
    << "their own size only. Cast data_ptr() yourself to view the buffer's bytes otherwise";
  throw Error(m.c_str());
}

void wrong_tensor_dtype(const TensorFacts& t, const char* pretty, DType own) {
  Message m;
  m << "BE::TensorOf<";
  append_type(m, pretty);
  m << ">: ";
  describe(m, t);
  m << ", not " << own << ". ";
  give_dtype(m, t, own);
  throw Error(m.c_str());
}

void dimension_out_of_range(int64_t i, int64_t ndim) {
  Message m;
  m << "BE::Tensor: dimension " << i << " is out of range for a tensor of rank " << ndim;
  throw Error(m.c_str());
}

void too_many_elements(int64_t n) {
  Message m;
  m << "BE::Tensor::numel_checked_int: " << n << " elements do not fit in an int";
  throw Error(m.c_str());
}

void span_index_out_of_range(size_t i, size_t size) {
  Message m;
  m << "BE::Span: index " << static_cast<uint64_t>(i) << " is out of range for " << static_cast<uint64_t>(size)
    << " elements";
  throw Error(m.c_str());
}

void scratch_does_not_fit(int64_t count, size_t size, int64_t offset, int64_t nbytes, const char* name,
                          size_t align) {
  Message m;
  m << "BE::Scratch::data_ptr: " << count << " elements of " << static_cast<uint64_t>(size) << " bytes at offset "
    << offset << " do not fit the " << nbytes << " bytes of scratch '" << (name ? name : "")
    << "' (or are not aligned to " << static_cast<uint64_t>(align) << ")";
  throw Error(m.c_str());
}

void unsupported_dtype(const char* operation, DType dtype) {
  Message m;
  m << operation << ": unsupported dtype " << dtype;
  throw Error(m.c_str());
}

void cuda_call_failed(const char* file, int line, const char* call, const char* error_name,
                      const char* error_text) {
  Message m;
  m << file << ":" << line << ": " << call << " returned " << error_name << " (" << error_text << ")";
  throw CudaError(m.c_str());
}

}  // namespace detail
}  // namespace kernix

KERNIX_FAILURE_CODE_END
