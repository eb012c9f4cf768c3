#include "ptkit/aux_sample.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "ptkit/status.h"

namespace ptkit::perf {
namespace {

// Reads the sample body field by field; a field past the end fails, naming it.
class BodyReader {
 public:
  explicit BodyReader(std::span<const uint8_t> body) : body_(body) {}
  template <typename T>
  absl::Status Get(T& v, const char* field) {
    if (body_.size() - pos_ < sizeof(T)) return Short(field);
    std::memcpy(&v, body_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return absl::OkStatus();
  }
  absl::StatusOr<std::span<const uint8_t>> Bytes(uint64_t n, const char* field) {
    if (body_.size() - pos_ < n) return Short(field);
    std::span<const uint8_t> s = body_.subspan(pos_, n);
    pos_ += n;
    return s;
  }

 private:
  absl::Status Short(const char* field) const {
    return absl::DataLossError(absl::StrCat("perf sample record of ", body_.size() + kHeaderSize,
                                            " bytes too short for its ", field, " field"));
  }
  std::span<const uint8_t> body_;
  size_t pos_ = 0;
};

}  // namespace

absl::StatusOr<Sample> ParseSample(const RecordView& r, uint64_t t) {
  if (r.type != PERF_RECORD_SAMPLE) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected a perf sample record, got ", RecordTypeName(r.type)));
  }
  if (uint64_t unknown = t & ~kAuxSampleKnownBits; unknown != 0) {
    return absl::UnimplementedError(
        absl::StrCat("sample_type bits 0x", absl::Hex(unknown), " are not supported"));
  }
  Sample s;
  BodyReader b(r.body());
  uint32_t res = 0;
  if (t & PERF_SAMPLE_IDENTIFIER) PTKIT_RETURN_IF_ERROR(b.Get(s.id, "identifier"));
  if (t & PERF_SAMPLE_IP) PTKIT_RETURN_IF_ERROR(b.Get(s.ip, "ip"));
  if (t & PERF_SAMPLE_TID) {
    PTKIT_RETURN_IF_ERROR(b.Get(s.pid, "pid"));
    PTKIT_RETURN_IF_ERROR(b.Get(s.tid, "tid"));
  }
  if (t & PERF_SAMPLE_TIME) PTKIT_RETURN_IF_ERROR(b.Get(s.time, "time"));
  if (t & PERF_SAMPLE_ADDR) PTKIT_RETURN_IF_ERROR(b.Get(s.addr, "addr"));
  if (t & PERF_SAMPLE_ID) PTKIT_RETURN_IF_ERROR(b.Get(s.id, "id"));
  if (t & PERF_SAMPLE_STREAM_ID) PTKIT_RETURN_IF_ERROR(b.Get(s.stream_id, "stream_id"));
  if (t & PERF_SAMPLE_CPU) {
    PTKIT_RETURN_IF_ERROR(b.Get(s.cpu, "cpu"));
    PTKIT_RETURN_IF_ERROR(b.Get(res, "res"));
  }
  if (t & PERF_SAMPLE_PERIOD) PTKIT_RETURN_IF_ERROR(b.Get(s.period, "period"));
  if (t & PERF_SAMPLE_CALLCHAIN) {
    uint64_t nr = 0;
    PTKIT_RETURN_IF_ERROR(b.Get(nr, "callchain nr"));
    if (nr > r.bytes.size() / 8) {
      return absl::DataLossError(absl::StrCat("perf sample record: callchain of ", nr,
                                              " entries in a record of ", r.bytes.size(),
                                              " bytes"));
    }
    s.callchain.resize(nr);
    for (uint64_t& ip : s.callchain) PTKIT_RETURN_IF_ERROR(b.Get(ip, "callchain"));
  }
  if (t & PERF_SAMPLE_AUX) {
    uint64_t size = 0;
    PTKIT_RETURN_IF_ERROR(b.Get(size, "aux size"));
    PTKIT_ASSIGN_OR_RETURN(s.aux, b.Bytes(size, "aux data"));
  }
  return s;
}

std::vector<uint8_t> EncodeSample(const Sample& s, uint64_t t) {
  RecordBuilder b(PERF_RECORD_SAMPLE, PERF_RECORD_MISC_USER);
  if (t & PERF_SAMPLE_IDENTIFIER) b.U64(s.id);
  if (t & PERF_SAMPLE_IP) b.U64(s.ip);
  if (t & PERF_SAMPLE_TID) b.U32(s.pid).U32(s.tid);
  if (t & PERF_SAMPLE_TIME) b.U64(s.time);
  if (t & PERF_SAMPLE_ADDR) b.U64(s.addr);
  if (t & PERF_SAMPLE_ID) b.U64(s.id);
  if (t & PERF_SAMPLE_STREAM_ID) b.U64(s.stream_id);
  if (t & PERF_SAMPLE_CPU) b.U32(s.cpu).U32(0);
  if (t & PERF_SAMPLE_PERIOD) b.U64(s.period);
  if (t & PERF_SAMPLE_CALLCHAIN) {
    b.U64(s.callchain.size());
    for (uint64_t ip : s.callchain) b.U64(ip);
  }
  if (t & PERF_SAMPLE_AUX) {
    const uint64_t padded = (s.aux.size() + 7) & ~uint64_t{7};
    b.U64(padded).Bytes(s.aux);
    static constexpr uint8_t kZeros[8] = {};
    b.Bytes(std::span<const uint8_t>(kZeros, padded - s.aux.size()));
  }
  return b.Finish();
}

}  // namespace ptkit::perf
