// RUN_OUT/restarts.jsonl: one JSON line per failure of a supervised job and per relaunch,
// appended as they happen, so that a run directory tells what befell it:
//   {"event":"failure","time":"2026-...Z","attempt":1,"step":57,"rank":1,"host":"h2",
//    "reason":"killed by signal 9 (Killed)","exit":137,"status":"killed by a signal"}
//   {"event":"relaunch","time":"...","attempt":2,"np":1,"tp":1,"dp":1,
//    "resume_from":"checkpoints/step_00000050","hosts":["h1"],"why":"..."}
// step: the last step in trace.jsonl (what the job had done); resume_from: the checkpoint
// the relaunch continues from (checkpoints/latest). Also those two facts of a run directory.
// Determinism contract: none (a record of events; the trainer never reads it).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lockstep::supervise {

struct FailureRecord {
  int attempt = 0;
  std::int64_t step = 0;
  int rank = -1;  // -1: unknown
  std::string host, reason;
  int exit = 0;
};
struct RelaunchRecord {
  int attempt = 0, np = 1, tp = 1;
  std::string resume_from;  // "" when there is no checkpoint yet (the job starts over)
  std::vector<std::string> hosts;
  std::string why;
};

void append_failure(const std::string& run_out, const FailureRecord& r);
void append_relaunch(const std::string& run_out, const RelaunchRecord& r);

// The step of trace.jsonl's last line (0: no trace yet).
std::int64_t last_trace_step(const std::string& run_out);
// "checkpoints/step_00000040" as checkpoints/latest names it ("" when there is none).
std::string latest_checkpoint(const std::string& run_out);
// Its step (0 when there is none).
std::int64_t checkpoint_step(const std::string& checkpoint);

}  // namespace lockstep::supervise
