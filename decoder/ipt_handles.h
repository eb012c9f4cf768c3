// RAII owners for the libipt objects ptkit creates. Move-only, free on destruction.
#ifndef PTKIT_DECODER_IPT_HANDLES_H_
#define PTKIT_DECODER_IPT_HANDLES_H_

#include <intel-pt.h>

#include <memory>

namespace ptkit::decoder {

struct IptDeleter {
  void operator()(pt_block_decoder* d) const { pt_blk_free_decoder(d); }
  void operator()(pt_insn_decoder* d) const { pt_insn_free_decoder(d); }
  void operator()(pt_packet_decoder* d) const { pt_pkt_free_decoder(d); }
  void operator()(pt_encoder* e) const { pt_free_encoder(e); }
  void operator()(pt_image* i) const { pt_image_free(i); }
  void operator()(pt_image_section_cache* c) const { pt_iscache_free(c); }
};

using BlockDecoderPtr = std::unique_ptr<pt_block_decoder, IptDeleter>;
using InsnDecoderPtr = std::unique_ptr<pt_insn_decoder, IptDeleter>;
using PacketDecoderPtr = std::unique_ptr<pt_packet_decoder, IptDeleter>;
using EncoderPtr = std::unique_ptr<pt_encoder, IptDeleter>;
using ImagePtr = std::unique_ptr<pt_image, IptDeleter>;
using IscachePtr = std::unique_ptr<pt_image_section_cache, IptDeleter>;

// The libipt error name for a negative status or a positive pt_error_code ("nomap", ...), or
// the name of a DecodeErrorCode ("loop").
const char* IptErrorName(int code);

}  // namespace ptkit::decoder

#endif  // PTKIT_DECODER_IPT_HANDLES_H_
