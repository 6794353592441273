#include "checkpoint/safetensors.hpp"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "checkpoint/file_io.hpp"
#include "runtime/error.hpp"

namespace lockstep::ckpt {
namespace {

using json = nlohmann::json;

constexpr std::uint64_t kMaxDim = std::uint64_t{1} << 48;

std::uint64_t read_le64(const char* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

std::string bad(const std::string& file, const std::string& tensor, const std::string& what) {
  return "safetensors file '" + file + "'" + (tensor.empty() ? "" : ", tensor '" + tensor + "'") +
         ": " + what;
}

std::uint64_t as_u64(const json& v, const std::string& file, const std::string& tensor,
                     const char* field) {
  check(
      v.is_number_unsigned() || (v.is_number_integer() && v.get<std::int64_t>() >= 0),
      bad(file, tensor, std::string(field) + " holds " + v.dump() + ", not a non-negative integer"),
      "the file is damaged or was not written by a safetensors writer");
  return v.get<std::uint64_t>();
}

}  // namespace

const StEntry* StHeader::find(std::string_view name) const {
  for (const StEntry& e : tensors)
    if (e.name == name) return &e;
  return nullptr;
}

StHeader parse_safetensors(std::string_view prefix, std::uint64_t file_size,
                           const std::string& file) {
  const std::string hint = "the file is damaged or was not written by a safetensors writer";
  check(file_size >= 8 && prefix.size() >= 8,
        bad(file, "",
            "file of " + std::to_string(file_size) +
                " bytes is too short for the 8-byte header length"),
        hint);
  StHeader h;
  h.file_size = file_size;
  h.header_len = read_le64(prefix.data());
  check(h.header_len <= file_size - 8,
        bad(file, "",
            "header length " + std::to_string(h.header_len) + " is larger than the file (" +
                std::to_string(file_size) + " bytes)"),
        "the file is truncated or its first 8 bytes are damaged");
  check(h.header_len <= kMaxHeaderBytes,
        bad(file, "", "header length " + std::to_string(h.header_len) + " exceeds the limit"),
        hint);
  check(prefix.size() >= 8 + h.header_len,
        bad(file, "", "fewer header bytes than the header length says"), hint);
  h.data_start = 8 + h.header_len;
  json j;
  try {
    j = json::parse(prefix.substr(8, h.header_len));
  } catch (const json::exception& e) {
    fail(bad(file, "", std::string("header is not valid JSON: ") + e.what()), hint);
  }
  check(j.is_object(), bad(file, "", "header is not a JSON object"), hint);
  const std::uint64_t data_bytes = file_size - h.data_start;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      check(v.is_object(), bad(file, "", "__metadata__ is not an object"), hint);
      continue;
    }
    check(v.is_object(), bad(file, name, "entry is not an object"), hint);
    check(v.contains("dtype") && v["dtype"].is_string(), bad(file, name, "missing dtype"), hint);
    check(v.contains("shape") && v["shape"].is_array(), bad(file, name, "missing shape"), hint);
    check(
        v.contains("data_offsets") && v["data_offsets"].is_array() && v["data_offsets"].size() == 2,
        bad(file, name, "missing data_offsets [begin, end]"), hint);
    StEntry e;
    e.name = name;
    const std::string dt = v["dtype"].get<std::string>();
    check(dt == "F32" || dt == "I32" || dt == "U16", bad(file, name, "unknown dtype '" + dt + "'"),
          "Lockstep checkpoints hold F32 (and I32/U16) tensors only");
    e.dtype = parse_dtype(dt);
    check(v["shape"].size() <= 8, bad(file, name, "more than 8 dimensions"), hint);
    std::uint64_t numel = 1;
    for (const json& d : v["shape"]) {
      const std::uint64_t n = as_u64(d, file, name, "shape");
      check(n <= kMaxDim, bad(file, name, "dimension " + std::to_string(n) + " is implausible"),
            hint);
      check(n == 0 || numel <= kMaxDim / n,
            bad(file, name, "shape " + v["shape"].dump() + " has too many elements"), hint);
      numel *= n;
      e.shape.push_back(static_cast<std::int64_t>(n));
    }
    e.begin = as_u64(v["data_offsets"][0], file, name, "data_offsets");
    e.end = as_u64(v["data_offsets"][1], file, name, "data_offsets");
    check(e.begin <= e.end,
          bad(file, name,
              "data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                  "] end before they begin"),
          hint);
    check(e.end <= data_bytes,
          bad(file, name,
              "data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                  "] are out of bounds: the data section has " + std::to_string(data_bytes) +
                  " bytes"),
          "the file is truncated or its header is damaged");
    check(e.bytes() == numel * dtype_size(e.dtype),
          bad(file, name,
              "shape " + shape_str(e.shape) + " of " + dt + " needs " +
                  std::to_string(numel * dtype_size(e.dtype)) + " bytes but data_offsets span " +
                  std::to_string(e.bytes())),
          hint);
    h.tensors.push_back(std::move(e));
  }
  std::sort(h.tensors.begin(), h.tensors.end(), [](const StEntry& a, const StEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  for (std::size_t i = 1; i < h.tensors.size(); ++i) {
    const StEntry& a = h.tensors[i - 1];
    const StEntry& b = h.tensors[i];
    check(a.end <= b.begin || a.bytes() == 0 || b.bytes() == 0,
          bad(file, b.name,
              "data_offsets [" + std::to_string(b.begin) + ", " + std::to_string(b.end) +
                  "] overlap those of tensor '" + a.name + "' [" + std::to_string(a.begin) + ", " +
                  std::to_string(a.end) + "]"),
          hint);
  }
  return h;
}

StHeader read_safetensors_header(const std::string& path) {
  File f(path, "r");
  const std::uint64_t size = f.size();
  char len_bytes[8] = {};
  check(size >= 8,
        bad(path, "",
            "file of " + std::to_string(size) + " bytes is too short for the 8-byte header length"),
        "the file is truncated");
  f.pread_all(len_bytes, 8, 0);
  const std::uint64_t n = read_le64(len_bytes);
  if (n > size - 8 || n > kMaxHeaderBytes) return parse_safetensors({len_bytes, 8}, size, path);
  std::string prefix(8 + n, '\0');
  f.pread_all(prefix.data(), prefix.size(), 0);
  return parse_safetensors(prefix, size, path);
}

std::string safetensors_header(const std::vector<StTensor>& tensors) {
  // nlohmann's default object is sorted by key; the offsets follow the given order.
  json j = json::object();
  std::uint64_t off = 0;
  for (const StTensor& t : tensors) {
    check(t.bytes == static_cast<std::uint64_t>(shape_numel(t.shape)) * dtype_size(t.dtype),
          "safetensors tensor '" + t.name + "': " + std::to_string(t.bytes) +
              " bytes do not match shape " + shape_str(t.shape),
          "a bug in the caller");
    check(!j.contains(t.name), "safetensors tensor '" + t.name + "' appears twice");
    j[t.name] = {
        {"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {off, off + t.bytes}}};
    off += t.bytes;
  }
  std::string text = j.dump();
  while ((8 + text.size()) % 8 != 0) text.push_back(' ');
  std::string out(8, '\0');
  const std::uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + text;
}

void write_safetensors(const std::string& path, const std::vector<StTensor>& tensors) {
  const std::string header = safetensors_header(tensors);
  File f(path, "w");
  f.write_all(header.data(), header.size());
  for (const StTensor& t : tensors) f.write_all(t.data, t.bytes);
  f.sync();
  f.close();
}

}  // namespace lockstep::ckpt
