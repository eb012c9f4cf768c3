// Little-endian encoding helpers for the container format. Internal to ptkit_common.
#ifndef PTKIT_SRC_BYTES_H_
#define PTKIT_SRC_BYTES_H_

#include <bit>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
#include <vector>

namespace ptkit::internal {

static_assert(std::endian::native == std::endian::little,
              "the container is little-endian and ptkit reads it in place");

template <typename T>
void Store(uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}
template <typename T>
T Load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// Appends fixed-width integers and byte strings to a vector.
class ByteWriter {
 public:
  // Fills `reuse` (its capacity is kept: recycled buffers avoid page faults on hot paths).
  explicit ByteWriter(size_t reserve, std::vector<uint8_t> reuse = {}) : out_(std::move(reuse)) {
    out_.clear();
    out_.reserve(reserve);
  }
  template <typename T>
  void Put(T v) {
    size_t at = out_.size();
    out_.resize(at + sizeof(T));
    Store<T>(out_.data() + at, v);
  }
  void PutBytes(std::span<const uint8_t> b) { out_.insert(out_.end(), b.begin(), b.end()); }
  void PutBytes(std::string_view s) { out_.insert(out_.end(), s.begin(), s.end()); }
  std::vector<uint8_t> Take() { return std::move(out_); }

 private:
  std::vector<uint8_t> out_;
};

// Reads fixed-width integers and byte strings from a span; every read is bounds-checked and
// a failed read makes ok() false (and returns zeros / empty spans) from then on.
class ByteReader {
 public:
  explicit ByteReader(std::span<const uint8_t> in) : in_(in) {}
  template <typename T>
  T Get() {
    if (!ok_ || in_.size() - pos_ < sizeof(T)) {
      ok_ = false;
      return T{};
    }
    T v = Load<T>(in_.data() + pos_);
    pos_ += sizeof(T);
    return v;
  }
  std::span<const uint8_t> GetBytes(uint64_t n) {
    if (!ok_ || in_.size() - pos_ < n) {
      ok_ = false;
      return {};
    }
    auto s = in_.subspan(pos_, n);
    pos_ += n;
    return s;
  }
  std::span<const uint8_t> Rest() { return GetBytes(in_.size() - pos_); }
  size_t remaining() const { return in_.size() - pos_; }
  bool ok() const { return ok_; }

 private:
  std::span<const uint8_t> in_;
  size_t pos_ = 0;
  bool ok_ = true;
};

}  // namespace ptkit::internal

#endif  // PTKIT_SRC_BYTES_H_
