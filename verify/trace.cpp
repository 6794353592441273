#include "verify/trace.hpp"

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "runtime/error.hpp"
#include "runtime/hash.hpp"

namespace lockstep {

std::string hex_float(float v) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%a", static_cast<double>(v));
  return buf;
}

std::string dec_float(float v) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));
  return buf;
}

std::uint64_t TraceLine::digest() const {
  std::string bytes;
  auto put = [&](const void* p, std::size_t n) { bytes.append(static_cast<const char*>(p), n); };
  put(&step, sizeof step);
  put(&loss, sizeof loss);
  put(&grad_norm, sizeof grad_norm);
  put(&lr, sizeof lr);
  put(&tokens, sizeof tokens);
  for (const auto& [name, v] : fp) {
    bytes += name;
    bytes.push_back('\0');
    put(&v, sizeof v);
  }
  if (skipped) bytes += "skipped";
  return xxh3_64(bytes.data(), bytes.size());
}

std::string TraceLine::to_json() const {
  // nlohmann::ordered_json keeps insertion order, so the line's bytes are canonical.
  nlohmann::ordered_json j;
  j["step"] = step;
  j["loss"] = dec_float(loss);
  j["loss_hex"] = hex_float(loss);
  j["grad_norm"] = dec_float(grad_norm);
  j["grad_norm_hex"] = hex_float(grad_norm);
  j["lr"] = dec_float(lr);
  j["lr_hex"] = hex_float(lr);
  j["tokens"] = tokens;
  nlohmann::ordered_json f = nlohmann::ordered_json::object();
  for (const auto& [name, v] : fp) f[name] = hex64(v);
  j["fp"] = f;
  if (skipped) j["skipped"] = true;
  j["digest"] = hex64(digest());
  return j.dump();
}

JsonlWriter::JsonlWriter(const std::string& path, bool truncate) : path_(path) {
  f_ = std::fopen(path.c_str(), truncate ? "w" : "a");
  check(f_ != nullptr, "cannot open '" + path + "' for writing: " + std::strerror(errno),
        "check that run.out is a writable directory");
}

JsonlWriter::~JsonlWriter() {
  if (f_) std::fclose(f_);
}

void JsonlWriter::write(const std::string& line) {
  const bool ok = std::fwrite(line.data(), 1, line.size(), f_) == line.size() &&
                  std::fputc('\n', f_) != EOF && std::fflush(f_) == 0;
  check(ok, "cannot write to '" + path_ + "': " + std::strerror(errno),
        "check free disk space and permissions of run.out");
}

}  // namespace lockstep
