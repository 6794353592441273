// libFuzzer target over the two parsers that read untrusted checkpoint files: the
// safetensors header parser (checkpoint/safetensors.hpp) and the meta.json parser
// (checkpoint/meta.hpp), built with ASan + UBSan (tests/fuzz/CMakeLists.txt).
// Input: byte 0 selects the parser (even: safetensors, the rest is a whole file; odd:
// meta.json text). A lockstep::Error is the expected outcome for bad input; anything else
// (a crash, a sanitizer report, another exception type, an accepted input that fails its
// own round trip) is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "checkpoint/meta.hpp"
#include "checkpoint/safetensors.hpp"
#include "runtime/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    if ((data[0] & 1) == 0) {
      const lockstep::ckpt::StHeader h =
          lockstep::ckpt::parse_safetensors(rest, rest.size(), "fuzz");
      // Accepted: every tensor lies inside the file.
      for (const auto& t : h.tensors)
        if (h.data_start + t.end > rest.size()) std::abort();
    } else {
      const lockstep::ckpt::Meta m = lockstep::ckpt::parse_meta(std::string(rest), "fuzz");
      // Accepted: what we would write for it parses again to the same tensors.
      const lockstep::ckpt::Meta again =
          lockstep::ckpt::parse_meta(lockstep::ckpt::meta_json(m).dump(), "fuzz-roundtrip");
      if (again.tensors.size() != m.tensors.size() || again.step != m.step) std::abort();
    }
  } catch (const lockstep::Error&) {
  }
  return 0;
}
