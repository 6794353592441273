// Sharded, crash-safe, verified, reshardable checkpoints of training state (docs/design.md
// section 5; guarantees G2 and G4 of section 1). The state arrives as StatePieces
// (runtime/state_piece.hpp): logical float32 tensors cut into boxes (TP) and flat ranges
// (ZeRO), one owner per element. Save writes each rank's owner pieces into one safetensors
// file per rank (each logical element exactly once in the job), fsyncs it, and rank 0 writes
// meta.json (checkpoint/meta.hpp) into a staging directory that is renamed into place, then
// replaces `latest` atomically. Load reslices from whatever layout saved to whatever layout
// loads, because shards and pieces are both described in logical coordinates.
//
// Layout on disk:  <root>/step_<8 digits>/{meta.json, rank_<5 digits>.safetensors...}
//                  <root>/latest          ("step_<8 digits>\n", the newest complete one)
// A directory step_<8 digits> only ever appears complete (it is step_<8 digits>.partial
// until meta.json is written and fsynced); a save killed half-way leaves a .partial
// directory that the next save removes, and `latest` still names the previous checkpoint.
//
// Determinism contract: save stores bits (never converts); load restores exactly the saved
// bits into every piece, whatever the two layouts, and proves it twice: every byte read is
// checked against the XXH3-64 hashes in meta.json, and the fingerprints (verify/
// fingerprint.hpp) of the loaded owner pieces, summed over the job, must equal meta.json's.
// The shard files' bytes are a pure function of the pieces (the async saver writes the
// same bytes as save()).
#pragma once

#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint/meta.hpp"
#include "runtime/comm.hpp"
#include "runtime/state_piece.hpp"

namespace lockstep::ckpt {

class FileImage;  // checkpoint/direct_io.hpp

struct SaveOptions {
  std::string root;       // <run.out>/checkpoints
  std::int64_t step = 0;  // checkpoint directory: root/step_<8 digits>/
  std::int64_t keep = 0;  // keep the newest N complete checkpoints (0: all)
  int kill_rank = -1;     // fault injection: this world rank _exit(1)s right after writing
                          // and fsyncing its shard file (before meta.json exists)
  bool direct_io = true;  // O_DIRECT shard writes (checkpoint/direct_io.hpp); false: through
                          // the page cache (same bytes; the benchmark's A/B switch)
  // The version of the fingerprints passed to save (meta.json's fingerprint_version).
  FpVersion fingerprint_version = kFpVersionLatest;
};

// "step_00000012".
std::string step_dir_name(std::int64_t step);

// Collective over `world`; returns the checkpoint directory. `fingerprints`: logical name ->
// fingerprint (identical on every rank) for at least every saved tensor; `run`: stored
// verbatim as meta.json["run"].
std::string save(const Communicator& world, const SaveOptions& opt,
                 const std::vector<StatePiece>& pieces,
                 const std::map<std::string, std::uint64_t>& fingerprints,
                 const nlohmann::json& run);

// A save whose owner pieces are copied by start() into an image of the shard file (hashing
// them on the way, on the OpenMP threads) and written by a background thread that only
// issues O_DIRECT writes while training continues; finish() (collective, main thread: the MPI
// gather, meta.json and `latest`) completes it. start() with a save in flight finishes that one
// first. The destructor joins a running writer thread and never throws (a save not
// finished is then simply incomplete on disk, like a killed one).
class AsyncSaver {
 public:
  AsyncSaver();
  ~AsyncSaver();
  AsyncSaver(const AsyncSaver&) = delete;
  AsyncSaver& operator=(const AsyncSaver&) = delete;

  void start(const Communicator& world, const SaveOptions& opt,
             const std::vector<StatePiece>& pieces,
             const std::map<std::string, std::uint64_t>& fingerprints, const nlohmann::json& run);
  std::string finish(const Communicator& world);  // "" when nothing was in flight
  bool in_flight() const;
  // True when no save is in flight or its writer thread is done (finish() will not wait
  // for the disk). Not collective; for callers that want to finish without blocking.
  bool written() const;

  struct Job;  // internal

 private:
  std::unique_ptr<Job> job_;
  std::unique_ptr<FileImage> spare_;  // the last snapshot's image, reused
};

// run.resume -> a checkpoint directory or "" (fresh start). "none"/"" -> "". "auto" -> the
// checkpoint root/latest names, if it is complete (has meta.json), else "". A PATH may be a
// checkpoint directory or a checkpoints root (then its latest); a PATH that does not hold a
// complete checkpoint throws, naming it.
std::string resolve_resume(const std::string& resume, const std::string& root);

// One checkpoint decision per job (collective over `world`): rank 0 resolves run.resume
// (resolve_resume), then broadcasts the step and the XXH3-64 of its meta.json's bytes; every
// rank opens that step's directory itself and checks that it read the same meta.json. A rank
// that finds another file (or none) means the run directory changed under the job (another
// job, or ranks of a killed one, writing it): every rank throws the same error saying so,
// naming the ranks, before any state is loaded. Returns the parsed meta (dir empty: fresh).
Meta agree_resume(const Communicator& world, const std::string& resume, const std::string& root);

// Collective. Fills every piece (owner or not) whose name starts with one of `only` (all
// pieces if `only` is empty) with the checkpoint's values, resliced to the pieces' layout.
// Guarantees, in order:
//  1. Before any destination byte is written, every piece is checked against meta (name
//     present, same global shape: else an error naming the tensor and both shapes) and the
//     header of every shard file it needs is read and validated (file present, key present,
//     F32, sizes and offsets consistent). A failure here leaves every piece untouched.
//  2. Shards are read with pread (straight into the destination where a shard maps onto one
//     contiguous piece range), and every byte range read is checked against its XXH3-64
//     hash (the whole shard's, or its chunk hashes for partial reads).
//  3. The fingerprints of the owner pieces, summed over `world`, must equal meta.json's.
// A failure in 2 or 3 throws an error naming the file and tensor; the pieces' contents are
// then unspecified (partly loaded) and the caller must not train on them (the trainer exits).
void load(const Communicator& world, const std::string& ckpt_dir, const Meta& meta,
          const std::vector<StatePiece>& pieces, const std::vector<std::string>& only = {});

// The non-collective part of load (guarantees 1 and 2) for pieces held by this process;
// used by load(), `lockstep ckpt export` and tests.
void read_pieces(const std::string& ckpt_dir, const Meta& meta,
                 const std::vector<const StatePiece*>& pieces);

// `lockstep ckpt verify`: re-hashes every shard (whole and chunks) and recomputes every
// tensor's fingerprint from the shard data. Returns one line per problem (naming the file
// and tensor); empty when the checkpoint is intact.
struct VerifyStats {
  std::int64_t tensors = 0, shards = 0, files = 0, bytes = 0;
};
std::vector<std::string> verify_checkpoint(const std::string& ckpt_dir, const Meta& meta,
                                           VerifyStats* stats = nullptr);

// `lockstep ckpt export`: one unsharded safetensors file of the tensors whose name starts
// with `prefix`, named without it (every byte hash-checked, every fingerprint checked).
// Returns the number of tensors written.
std::int64_t export_tensors(const std::string& ckpt_dir, const Meta& meta,
                            const std::string& out_file, const std::string& prefix = "param/");

}  // namespace lockstep::ckpt
