// Where and when, for the lines a job leaves behind (the run lock's holder line, restarts.jsonl,
// the supervisor's host pool): this host's name and the current UTC time in ISO 8601.
// Determinism contract: none (labels only; never part of a trace or a checkpoint's bits).
#pragma once

#include <string>

namespace lockstep {

// gethostname(), or "localhost" when it fails.
std::string host_name();
// "2026-12-02T01:12:09Z".
std::string utc_timestamp();

}  // namespace lockstep
