// save() and AsyncSaver: prepare (rank 0 makes the staging directory), write (each rank
// its own shard file, inline or on a background thread), finish (gather the shard records
// on rank 0, which writes meta.json, renames the directory into place, replaces `latest`
// and applies `keep`). save() and AsyncSaver lay out the shard with the same plan_shard()
// and write it with checkpoint/direct_io.hpp (save(): pipelined copy+hash / O_DIRECT
// write; AsyncSaver: a hashed file image built in start(), written by the thread), so they
// write the same bytes.
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <regex>
#include <set>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/direct_io.hpp"
#include "checkpoint/file_io.hpp"
#include "checkpoint/safetensors.hpp"
#include "runtime/error.hpp"
#include "runtime/hash.hpp"
#include "runtime/watchdog.hpp"

namespace lockstep::ckpt {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string step_dir_name(std::int64_t step) {
  check(step >= 0 && step <= 99999999,
        "checkpoint step " + std::to_string(step) + " does not fit in 8 digits");
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%08lld", static_cast<long long>(step));
  return buf;
}

namespace {

// One owner piece to write: geometry plus a pointer to its floats (into the trainer's
// tensors; AsyncSaver copies them into its file image in start()).
struct Pending {
  std::string name;
  Shape global_shape, box_offset, box_shape;
  std::int64_t flat_begin = 0, flat_end = 0;
  const float* data = nullptr;
};

struct Record {
  std::string name;
  Shape global_shape;
  ShardRecord shard;
};

std::string staging_dir(const SaveOptions& opt) {
  return (fs::path(opt.root) / (step_dir_name(opt.step) + ".partial")).string();
}

// Runs f on rank 0 and broadcasts whether it threw; every rank throws if it did.
template <class F>
void on_root(const Communicator& world, const std::string& what, F&& f) {
  std::string err;
  if (world.rank() == 0) {
    try {
      f();
    } catch (const std::exception& e) {
      err = e.what();
      if (err.empty()) err = "unknown error";
    }
  }
  int n = static_cast<int>(err.size());
  MPI_Request req = MPI_REQUEST_NULL;
  check_mpi(MPI_Ibcast(&n, 1, MPI_INT, 0, world.handle(), &req), "MPI_Ibcast", world.handle());
  watchdog::watched_wait(&req, 1, world, "MPI_Bcast");
  if (n == 0) return;
  if (world.rank() == 0) fail(err);
  fail("rank 0 failed to " + what + " (its error is reported on rank 0)");
}

// True on every rank iff `ok` holds on every rank.
bool all_ok(const Communicator& world, bool ok) {
  int mine = ok ? 0 : 1, any = 0;
  MPI_Request req = MPI_REQUEST_NULL;
  check_mpi(MPI_Iallreduce(&mine, &any, 1, MPI_INT, MPI_MAX, world.handle(), &req),
            "MPI_Iallreduce", world.handle());
  watchdog::watched_wait(&req, 1, world, "MPI_Allreduce");
  return any == 0;
}

void prepare(const Communicator& world, const SaveOptions& opt) {
  check(!opt.root.empty(), "checkpoint root is empty",
        "set run.out (checkpoints go to <out>/checkpoints)");
  step_dir_name(opt.step);  // validates the step on every rank
  on_root(world, "prepare the checkpoint directory", [&] {
    make_dirs(opt.root);
    const std::string stage = staging_dir(opt);
    if (path_exists(stage)) remove_tree(stage);
    make_dirs(stage);
    fsync_dir(opt.root);
  });
}

std::vector<Pending> owner_pieces(const std::vector<StatePiece>& pieces) {
  std::vector<Pending> out;
  for (const StatePiece& p : pieces) {
    if (!p.owner || p.size() == 0) continue;
    check_piece(p);
    check(p.data != nullptr, "state piece '" + p.name + "' has no data", "a bug in its producer");
    out.push_back(
        {p.name, p.global_shape, p.box_offset, p.box_shape, p.flat_begin, p.flat_end, p.data});
  }
  return out;
}

std::string shard_file_name(int rank) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "rank_%05d.safetensors", rank);
  return buf;
}

// This rank's shard file: its name, header, the spans to write and the records (hashes
// filled in once the spans are hashed). Empty spans: the rank owns nothing, writes no file.
struct ShardPlan {
  std::string file;
  std::string header;
  std::vector<ByteSpan> spans;
  std::vector<Record> records;
};

ShardPlan plan_shard(int rank, const std::vector<Pending>& todo) {
  ShardPlan plan;
  std::vector<StTensor> tensors;
  std::set<std::string> keys;
  plan.file = shard_file_name(rank);
  for (const Pending& p : todo) {
    std::string key = p.name;
    for (int k = 1; keys.count(key); ++k) key = p.name + "#" + std::to_string(k);
    keys.insert(key);
    const std::uint64_t bytes = static_cast<std::uint64_t>(p.flat_end - p.flat_begin) * 4;
    const bool whole_box = p.flat_begin == 0 && p.flat_end == shape_numel(p.box_shape);
    tensors.push_back({key, DType::f32, whole_box ? p.box_shape : Shape{p.flat_end - p.flat_begin},
                       p.data, bytes});
    plan.spans.push_back({p.data, bytes});
    Record r;
    r.name = p.name;
    r.global_shape = p.global_shape;
    r.shard.file = plan.file;
    r.shard.key = key;
    r.shard.box_offset = p.box_offset;
    r.shard.box_shape = p.box_shape;
    r.shard.flat_begin = p.flat_begin;
    r.shard.flat_end = p.flat_end;
    plan.records.push_back(std::move(r));
  }
  if (!tensors.empty()) plan.header = safetensors_header(tensors);
  return plan;
}

void set_hashes(ShardPlan& plan, std::vector<SpanHash>&& hashes) {
  check(hashes.size() == plan.records.size(), "checkpoint shard hashes are missing",
        "a bug in the shard writer");
  for (std::size_t i = 0; i < hashes.size(); ++i) {
    plan.records[i].shard.hash = hashes[i].whole;
    plan.records[i].shard.chunks = std::move(hashes[i].chunks);
  }
}

void maybe_kill(int rank, int kill_rank) {
  if (rank != kill_rank) return;
  std::fprintf(stderr, "lockstep: fault injection: rank %d exits after writing its shard\n", rank);
  std::fflush(stderr);
  ::_exit(1);
}

// Writes this rank's shard file (if it owns anything: header, then the pieces in order,
// hashed while staged, O_DIRECT where the filesystem allows) and returns its records.
// Touches no MPI.
std::vector<Record> write_shards(const std::string& stage, int rank, const SaveOptions& opt,
                                 const std::vector<Pending>& todo) {
  ShardPlan plan = plan_shard(rank, todo);
  if (!plan.spans.empty())
    set_hashes(plan, write_pipelined((fs::path(stage) / plan.file).string(), plan.header,
                                     plan.spans, kChunkBytes, opt.direct_io));
  maybe_kill(rank, opt.kill_rank);
  return std::move(plan.records);
}

json records_json(const std::vector<Record>& records) {
  json a = json::array();
  for (const Record& r : records) {
    json chunks = json::array();
    for (std::uint64_t c : r.shard.chunks) chunks.push_back(hex64(c));
    a.push_back({{"name", r.name},
                 {"shape", r.global_shape},
                 {"shard",
                  {{"file", r.shard.file},
                   {"key", r.shard.key},
                   {"box_offset", r.shard.box_offset},
                   {"box_shape", r.shard.box_shape},
                   {"flat_range", {r.shard.flat_begin, r.shard.flat_end}},
                   {"xxh3", hex64(r.shard.hash)},
                   {"chunks", chunks}}}});
  }
  return a;
}

std::vector<std::string> gather_text(const Communicator& world, const std::string& mine) {
  const int n = static_cast<int>(mine.size());
  std::vector<int> sizes(world.rank() == 0 ? world.size() : 0);
  MPI_Request req = MPI_REQUEST_NULL;
  check_mpi(MPI_Igather(&n, 1, MPI_INT, sizes.data(), 1, MPI_INT, 0, world.handle(), &req),
            "MPI_Igather", world.handle());
  watchdog::watched_wait(&req, 1, world, "MPI_Gather");
  std::vector<int> displs(sizes.size(), 0);
  std::string all;
  if (world.rank() == 0) {
    long long total = 0;
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      displs[i] = static_cast<int>(total);
      total += sizes[i];
    }
    check(total < (1LL << 31), "checkpoint shard records exceed 2 GiB");
    all.resize(static_cast<std::size_t>(total));
  }
  check_mpi(MPI_Igatherv(mine.data(), n, MPI_CHAR, all.data(), sizes.data(), displs.data(),
                         MPI_CHAR, 0, world.handle(), &req),
            "MPI_Igatherv", world.handle());
  watchdog::watched_wait(&req, 1, world, "MPI_Gatherv");
  std::vector<std::string> out;
  for (std::size_t i = 0; i < sizes.size(); ++i)
    out.push_back(
        all.substr(static_cast<std::size_t>(displs[i]), static_cast<std::size_t>(sizes[i])));
  return out;
}

void apply_keep(const std::string& root, std::int64_t keep, const std::string& newest) {
  static const std::regex complete_re("step_[0-9]{8}");
  static const std::regex stale_re("step_[0-9]{8}\\.(partial|replaced)");
  std::vector<std::string> complete;
  for (const auto& e : fs::directory_iterator(root)) {
    const std::string n = e.path().filename().string();
    if (std::regex_match(n, stale_re) && n != fs::path(newest).filename().string() + ".partial")
      remove_tree(e.path().string());
    else if (std::regex_match(n, complete_re) && path_exists((e.path() / "meta.json").string()))
      complete.push_back(n);
  }
  if (keep <= 0) return;
  std::sort(complete.begin(), complete.end());
  const std::string newest_name = fs::path(newest).filename().string();
  for (std::size_t i = 0; i + static_cast<std::size_t>(keep) < complete.size(); ++i)
    if (complete[i] != newest_name) remove_tree((fs::path(root) / complete[i]).string());
}

// Rank 0: meta.json into the staging directory, rename into place, latest, keep.
void commit(const SaveOptions& opt, const std::vector<std::string>& texts,
            const std::map<std::string, std::uint64_t>& fingerprints, const json& run) {
  const std::string stage = staging_dir(opt);
  const std::string final_dir = (fs::path(opt.root) / step_dir_name(opt.step)).string();
  json tensors = json::object();
  for (const std::string& t : texts)
    for (const json& rec : json::parse(t)) {
      const std::string name = rec["name"].get<std::string>();
      if (!tensors.contains(name)) {
        auto fp = fingerprints.find(name);
        check(fp != fingerprints.end(), "no fingerprint was given for tensor '" + name + "'",
              "the trainer must pass a fingerprint for every saved tensor");
        tensors[name] = {{"shape", rec["shape"]},
                         {"dtype", "F32"},
                         {"fingerprint", hex64(fp->second)},
                         {"shards", json::array()}};
      }
      check(tensors[name]["shape"] == rec["shape"],
            "tensor '" + name + "' is saved with different global shapes by different ranks",
            "a bug in the producer of the state pieces");
      tensors[name]["shards"].push_back(rec["shard"]);
    }
  const json j = {{"format", kFormatName},
                  {"format_version", kFormatVersion},
                  {"fingerprint_version", static_cast<int>(opt.fingerprint_version)},
                  {"step", opt.step},
                  {"chunk_bytes", kChunkBytes},
                  {"run", run},
                  {"tensors", tensors}};
  const std::string text = j.dump(1) + "\n";
  // Validates coverage (every logical element saved exactly once: the owner flags) and
  // everything else a load will check, before the checkpoint can become visible.
  parse_meta(text, (fs::path(stage) / "meta.json").string());
  fsync_dir(stage);  // the shard files' directory entries
  {
    File f((fs::path(stage) / "meta.json").string(), "w");
    f.write_all(text.data(), text.size());
    f.sync();
    f.close();
  }
  fsync_dir(stage);
  if (path_exists(final_dir)) {
    const std::string old = final_dir + ".replaced";
    if (path_exists(old)) remove_tree(old);
    rename_path(final_dir, old);
    rename_path(stage, final_dir);
    fsync_dir(opt.root);
    remove_tree(old);
  } else {
    rename_path(stage, final_dir);
  }
  fsync_dir(opt.root);
  replace_file_atomic((fs::path(opt.root) / "latest").string(), step_dir_name(opt.step) + "\n");
  apply_keep(opt.root, opt.keep, final_dir);
}

std::string finish_save(const Communicator& world, const SaveOptions& opt,
                        const std::vector<Record>& records, bool wrote_ok,
                        const std::map<std::string, std::uint64_t>& fingerprints, const json& run) {
  if (!all_ok(world, wrote_ok))
    fail("checkpoint step " + std::to_string(opt.step) + ": a rank failed to write its shard file",
         "see that rank's error; the previous checkpoint (latest) is untouched");
  const std::vector<std::string> texts = gather_text(world, records_json(records).dump());
  on_root(world, "commit the checkpoint", [&] { commit(opt, texts, fingerprints, run); });
  return (fs::path(opt.root) / step_dir_name(opt.step)).string();
}

}  // namespace

std::string save(const Communicator& world, const SaveOptions& opt,
                 const std::vector<StatePiece>& pieces,
                 const std::map<std::string, std::uint64_t>& fingerprints, const json& run) {
  prepare(world, opt);
  const std::vector<Pending> todo = owner_pieces(pieces);
  std::vector<Record> records;
  std::string err;
  try {
    records = write_shards(staging_dir(opt), world.rank(), opt, todo);
  } catch (const std::exception& e) {
    err = e.what();
  }
  if (!err.empty()) {
    all_ok(world, false);
    fail(err);
  }
  return finish_save(world, opt, records, true, fingerprints, run);
}

// ---- AsyncSaver ------------------------------------------------------------------------

struct AsyncSaver::Job {
  SaveOptions opt;
  std::map<std::string, std::uint64_t> fingerprints;
  json run;
  std::unique_ptr<FileImage> image;  // the shard file, hashed (null: this rank owns nothing)
  std::string file;                  // its path in the staging directory
  std::vector<Record> records;
  std::string error;
  std::string note;  // a non-fatal remark from the writer (reported by finish)
  std::atomic<bool> written{false};
  std::thread writer;
};

AsyncSaver::AsyncSaver() = default;

AsyncSaver::~AsyncSaver() {
  if (job_ && job_->writer.joinable()) job_->writer.join();
}

bool AsyncSaver::in_flight() const {
  return job_ != nullptr;
}

bool AsyncSaver::written() const {
  return !job_ || job_->written.load(std::memory_order_acquire);
}

void AsyncSaver::start(const Communicator& world, const SaveOptions& opt,
                       const std::vector<StatePiece>& pieces,
                       const std::map<std::string, std::uint64_t>& fingerprints, const json& run) {
  if (job_) finish(world);
  prepare(world, opt);
  auto job = std::make_unique<Job>();
  job->opt = opt;
  job->fingerprints = fingerprints;
  job->run = run;
  // The snapshot is the shard file's image: the pieces are copied into it and hashed in the
  // same pass over memory (the copy reads them anyway), on this rank's OpenMP threads. The
  // previous save's image is reused when large enough (every save of a run: no allocation
  // and no page faults on the training thread). The writer thread then only issues
  // O_DIRECT writes: no hashing and no page-cache copies competing with training.
  ShardPlan plan = plan_shard(world.rank(), owner_pieces(pieces));
  if (!plan.spans.empty()) {
    job->image = spare_ ? std::move(spare_) : std::make_unique<FileImage>();
    set_hashes(plan, job->image->build(plan.header, plan.spans, kChunkBytes));
    job->file = (fs::path(staging_dir(opt)) / plan.file).string();
  }
  job->records = std::move(plan.records);
  Job* j = job.get();
  const int rank = world.rank();
  j->writer = std::thread([j, rank] {
    // The writer yields the cores to training: lowest CPU priority for this thread only
    // (Linux's setpriority on a thread id). If refused, it writes at normal priority; only
    // the overlap with training is affected, never the bytes.
    if (setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), 19) != 0)
      j->note = std::string("writer thread kept normal priority: ") + std::strerror(errno);
    try {
      if (j->image) j->image->write(j->file, j->opt.direct_io);
      maybe_kill(rank, j->opt.kill_rank);
    } catch (const std::exception& e) {
      j->error = e.what();
      if (j->error.empty()) j->error = "unknown error";
    }
    j->written.store(true, std::memory_order_release);
  });
  job_ = std::move(job);
}

std::string AsyncSaver::finish(const Communicator& world) {
  if (!job_) return "";
  std::unique_ptr<Job> job = std::move(job_);
  job->writer.join();
  if (job->image) spare_ = std::move(job->image);
  if (!job->note.empty() && world.rank() == 0)
    std::fprintf(stderr, "lockstep: async checkpoint: %s\n", job->note.c_str());
  if (!job->error.empty()) {
    all_ok(world, false);
    fail(job->error);
  }
  return finish_save(world, job->opt, job->records, true, job->fingerprints, job->run);
}

}  // namespace lockstep::ckpt
