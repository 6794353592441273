// The per-step state trace (docs/design.md section 5): one JSON line per step in
// `trace.jsonl`, written by global rank 0. Exact scalars are written twice: as a decimal
// with 9 significant digits (enough to round-trip a float) and as a C99 hex float (the
// bits, readable by float.fromhex / strtof). `fp` maps logical, canonical state names
// ("param/<name>", later "grad/...", "adam_m/...", ...) to 64-bit fingerprints and
// `digest` is one hash over all of them and the exact scalars.
// Determinism contract: every field is a function of logical state only, so in invariant
// mode the line is identical on every layout; two runs agree on a step iff their lines for
// that step are byte-identical.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace lockstep {

struct TraceLine {
  std::int64_t step = 0;
  float loss = 0.0f;
  float grad_norm = 0.0f;
  float lr = 0.0f;
  std::int64_t tokens = 0;                                // tokens consumed so far
  std::vector<std::pair<std::string, std::uint64_t>> fp;  // canonical order
  bool skipped = false;  // the non-finite guard skipped the step's update ("skipped": true;
                         // absent otherwise, so traces without skips keep their bytes)

  // XXH3-64 over the step, the bits of the scalars and every (name, fingerprint) pair.
  std::uint64_t digest() const;
  std::string to_json() const;
};

// "0x1.62e43p+1" (C99 %a: exact).
std::string hex_float(float v);
// "5.54517746" (%.9g: round-trips a float).
std::string dec_float(float v);

// Appends lines to a file, flushed after each line. Errors name the file.
class JsonlWriter {
 public:
  // truncate: start a new file; otherwise append (a resumed run).
  JsonlWriter(const std::string& path, bool truncate);
  ~JsonlWriter();
  JsonlWriter(const JsonlWriter&) = delete;
  JsonlWriter& operator=(const JsonlWriter&) = delete;
  void write(const std::string& line);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* f_ = nullptr;
};

}  // namespace lockstep
