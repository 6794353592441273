#include "verify/op_trace.hpp"

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "runtime/error.hpp"
#include "runtime/hash.hpp"

namespace lockstep {

StepRange StepRange::parse(const std::string& text, const std::string& what) {
  StepRange r;
  if (text.empty()) return r;
  long long a = 0, b = 0;
  char tail = 0;
  check(std::sscanf(text.c_str(), "%lld-%lld%c", &a, &b, &tail) == 2 && a >= 1 && a <= b,
        what + " = '" + text + "' is not a step range A-B with 1 <= A <= B",
        "e.g. --set verify.ops=5-5 traces the ops of step 5");
  r.first = a;
  r.last = b;
  return r;
}

std::string StepRange::text() const {
  return empty() ? "" : std::to_string(first) + "-" + std::to_string(last);
}

std::string op_trace_file_name(int rank) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "rank_%05d.jsonl", rank);
  return buf;
}

OpTrace::OpTrace(OpTraceConfig cfg) : cfg_(std::move(cfg)) {}

OpTrace::~OpTrace() = default;

void OpTrace::begin_step(std::int64_t step) {
  step_ = step;
  occurrence_.clear();
  recording_ = cfg_.steps.contains(step);
  if (recording_ && !out_) {
    std::error_code ec;
    std::filesystem::create_directories(cfg_.dir, ec);
    check(!ec, "cannot create the op trace directory '" + cfg_.dir + "': " + ec.message(),
          "set run.out to a writable path");
    out_ = std::make_unique<JsonlWriter>(cfg_.dir + "/" + op_trace_file_name(cfg_.rank), true);
  }
}

void OpTrace::end_step() {
  recording_ = false;  // JsonlWriter flushes every line
}

void OpTrace::record(std::string_view op, std::span<const std::span<const float>> inputs,
                     std::span<const float> output) {
  if (!recording_) return;
  nlohmann::ordered_json j;
  j["step"] = step_;
  j["op"] = op;
  j["occ"] = occurrence_[std::string(op)]++;
  nlohmann::ordered_json in = nlohmann::ordered_json::array();
  for (const auto& s : inputs) in.push_back(hex64(xxh3_64(s.data(), s.size_bytes())));
  j["in"] = in;
  j["out"] = hex64(xxh3_64(output.data(), output.size_bytes()));
  j["n"] = output.size();
  out_->write(j.dump());
  ++records_;
}

}  // namespace lockstep
