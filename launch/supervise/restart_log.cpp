#include "launch/supervise/restart_log.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "launch/train/host_time.hpp"
#include "runtime/error.hpp"

namespace lockstep::supervise {
namespace {

void append(const std::string& run_out, const nlohmann::json& j) {
  const std::string path = run_out + "/restarts.jsonl";
  std::FILE* f = std::fopen(path.c_str(), "a");
  check(f != nullptr, "cannot open '" + path + "': " + std::strerror(errno),
        "check that run.out is writable");
  const std::string line = j.dump() + "\n";
  const bool ok = std::fwrite(line.data(), 1, line.size(), f) == line.size();
  const bool closed = std::fclose(f) == 0;
  check(ok && closed, "cannot write '" + path + "': " + std::strerror(errno),
        "check the disk of run.out");
}

}  // namespace

void append_failure(const std::string& run_out, const FailureRecord& r) {
  append(run_out, {{"event", "failure"},
                   {"time", utc_timestamp()},
                   {"attempt", r.attempt},
                   {"step", r.step},
                   {"rank", r.rank},
                   {"host", r.host},
                   {"reason", r.reason},
                   {"exit", r.exit}});
}

void append_relaunch(const std::string& run_out, const RelaunchRecord& r) {
  append(run_out, {{"event", "relaunch"},
                   {"time", utc_timestamp()},
                   {"attempt", r.attempt},
                   {"np", r.np},
                   {"tp", r.tp},
                   {"dp", r.np / r.tp},
                   {"resume_from", r.resume_from},
                   {"hosts", r.hosts},
                   {"why", r.why}});
}

std::int64_t last_trace_step(const std::string& run_out) {
  std::ifstream in(run_out + "/trace.jsonl");
  std::string line, last;
  while (std::getline(in, line))
    if (!line.empty()) last = line;
  const auto j = nlohmann::json::parse(last, nullptr, false);
  if (j.is_discarded() || !j.contains("step") || !j["step"].is_number_integer()) return 0;
  return j["step"].get<std::int64_t>();
}

std::string latest_checkpoint(const std::string& run_out) {
  std::ifstream in(run_out + "/checkpoints/latest");
  std::string name;
  if (!std::getline(in, name) || name.empty()) return "";
  return "checkpoints/" + name;
}

std::int64_t checkpoint_step(const std::string& checkpoint) {
  const auto at = checkpoint.rfind("step_");
  return at == std::string::npos ? 0 : std::atoll(checkpoint.c_str() + at + 5);
}

}  // namespace lockstep::supervise
