// Multi-rank tests of checkpoint save/load (checkpoint/checkpoint.hpp): synthetic state
// pieces for 1-D and 2-D tensors (TP split on dim 0 and on dim 1, ZeRO-style flat segments
// with a short last segment, replicated pieces with one owner) are saved from every layout
// the ranks can form and loaded into every other one; the loaded bits must equal the
// source bits. Also: resolve_resume ignores incomplete checkpoints, `latest` moves only to
// complete ones, keep=N deletes the right directories, AsyncSaver writes the same bytes as
// save() (from a snapshot taken at start()), and refusals happen before any byte is read.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/file_io.hpp"
#include "runtime/collectives.hpp"
#include "runtime/comm.hpp"
#include "runtime/error.hpp"
#include "tests/support/synthetic_state.hpp"
#include "tests/support/test_data.hpp"
#include "verify/fingerprint.hpp"

using namespace lockstep;
using lockstep::testing::bits;
namespace fs = std::filesystem;

namespace {

using Spec = testing::SyntheticSpec;

const std::vector<Spec> kSpecs = {
    {"param/w", {8, 12}, 0},  {"param/v", {12, 8}, 1},  {"param/b", {13}, -1},
    {"adam_m/w", {8, 12}, 0}, {"adam_m/v", {12, 8}, 1}, {"adam_m/b", {13}, -1},
    {"adam_v/e", {20}, 0},    {"param/s", {3, 5}, -1},
};

struct Layout {
  int tp = 1;
  bool zero = false;
  std::string str() const { return "tp" + std::to_string(tp) + (zero ? "+zero" : ""); }
};

std::vector<Layout> layouts(int np) {
  std::vector<Layout> out;
  for (int tp : {1, 2, 4})
    if (np % tp == 0)
      for (bool z : {false, true}) out.push_back({tp, z});
  return out;
}

float value(const std::string& name, std::int64_t i, std::uint64_t salt) {
  std::uint64_t x =
      fingerprint_key(name) ^ (static_cast<std::uint64_t>(i) * 0x9e3779b97f4a7c15ull) ^ salt;
  x = fingerprint_finalize(x);
  float f;
  std::uint32_t b = static_cast<std::uint32_t>(x);
  b = (b & 0x807fffffu) | ((100u + static_cast<std::uint32_t>((x >> 32) % 50)) << 23);  // finite
  std::memcpy(&f, &b, 4);
  return f;
}

// This rank's pieces of every spec under layout L (storage in `store`).
using State = testing::SyntheticState;

// Every element starts as NaN, so a load that misses an element is seen.
State make_state(const Communicator& world, const Layout& L) {
  return testing::make_synthetic_state(world.rank(), world.size(), kSpecs, L.tp, L.zero,
                                       std::nanf(""));
}

void fill(State& st, std::uint64_t salt) {
  for (StatePiece& p : st.pieces)
    for_each_run(p, [&](std::int64_t logical, std::int64_t local, std::int64_t len) {
      for (std::int64_t k = 0; k < len; ++k) p.data[local + k] = value(p.name, logical + k, salt);
    });
}

// Elements whose bits differ from value(name, logical, salt).
std::int64_t mismatches(const State& st, std::uint64_t salt, const std::string& prefix = "") {
  std::int64_t bad = 0;
  for (const StatePiece& p : st.pieces) {
    if (p.name.rfind(prefix, 0) != 0) continue;
    for_each_run(p, [&](std::int64_t logical, std::int64_t local, std::int64_t len) {
      for (std::int64_t k = 0; k < len; ++k)
        bad += bits(p.data[local + k]) != bits(value(p.name, logical + k, salt));
    });
  }
  return bad;
}

std::map<std::string, std::uint64_t> fingerprints(std::uint64_t salt) {
  std::map<std::string, std::uint64_t> fps;
  for (const Spec& s : kSpecs) {
    std::vector<float> all(static_cast<std::size_t>(shape_numel(s.shape)));
    for (std::size_t i = 0; i < all.size(); ++i)
      all[i] = value(s.name, static_cast<std::int64_t>(i), salt);
    fps[s.name] = fingerprint_range(s.name, all);
  }
  return fps;
}

// A fresh directory on every rank (rank 0 picks the name).
std::string temp_root(const Communicator& world, const std::string& tag) {
  long long pid = getpid();
  check_mpi(MPI_Bcast(&pid, 1, MPI_LONG_LONG, 0, world.handle()), "MPI_Bcast", world.handle());
  const std::string root =
      (fs::temp_directory_path() / ("lockstep_test_ckpt_" + std::to_string(pid) + "_" +
                                    std::to_string(world.size()) + "_" + tag))
          .string();
  if (world.rank() == 0) {
    fs::remove_all(root);
    fs::create_directories(root);
  }
  world.barrier();
  return root;
}

void cleanup(const Communicator& world, const std::string& root) {
  world.barrier();
  if (world.rank() == 0) fs::remove_all(root);
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

bool all_true(const Communicator& world, bool ok) {
  return allreduce_u64(world, ok ? 0 : 1, IntOp::max) == 0;
}

}  // namespace

TEST_CASE("save from every layout, load into every other: bits equal the source") {
  const Communicator world = Communicator::world();
  const std::string root = temp_root(world, "reshard");
  const auto fps = fingerprints(7);
  const auto ls = layouts(world.size());
  std::int64_t step = 0;
  for (const Layout& from : ls) {
    State src = make_state(world, from);
    fill(src, 7);
    ckpt::SaveOptions opt;
    opt.root = root;
    opt.step = ++step;
    const std::string dir = ckpt::save(world, opt, src.pieces, fps, {{"layout", from.str()}});
    CHECK(dir == (fs::path(root) / ckpt::step_dir_name(step)).string());
    const ckpt::Meta meta = ckpt::read_meta(dir);
    CHECK(meta.step == step);
    CHECK(meta.run["layout"] == from.str());
    CHECK(meta.tensors.size() == kSpecs.size());
    for (const Layout& to : ls) {
      INFO("save " << from.str() << " -> load " << to.str() << " at np " << world.size());
      State dst = make_state(world, to);
      CHECK(mismatches(dst, 7) > 0);  // starts as NaN: the check below can fail
      ckpt::load(world, dir, meta, dst.pieces);
      CHECK(mismatches(dst, 7) == 0);
    }
  }
  cleanup(world, root);
}

TEST_CASE("only={param/} loads parameters and leaves the optimizer pieces untouched") {
  const Communicator world = Communicator::world();
  const std::string root = temp_root(world, "only");
  const auto ls = layouts(world.size());
  State src = make_state(world, ls.front());
  fill(src, 3);
  const std::string dir = ckpt::save(world, {root, 1, 0, -1}, src.pieces, fingerprints(3), {});
  State dst = make_state(world, ls.back());
  fill(dst, 4);
  ckpt::load(world, dir, ckpt::read_meta(dir), dst.pieces, {"param/"});
  CHECK(mismatches(dst, 3, "param/") == 0);
  CHECK(mismatches(dst, 4, "adam_") == 0);
  cleanup(world, root);
}

TEST_CASE("a corrupted shard byte or a forged fingerprint is caught on load") {
  const Communicator world = Communicator::world();
  const std::string root = temp_root(world, "corrupt");
  const auto ls = layouts(world.size());
  State src = make_state(world, ls.back());
  fill(src, 5);
  auto fps = fingerprints(5);
  fps["param/v"] ^= 1;  // a wrong fingerprint in meta.json
  const std::string dir = ckpt::save(world, {root, 1, 0, -1}, src.pieces, fps, {});
  const ckpt::Meta meta = ckpt::read_meta(dir);
  State dst = make_state(world, ls.front());
  std::string msg;
  try {
    ckpt::load(world, dir, meta, dst.pieces);
  } catch (const Error& e) {
    msg = e.what();
  }
  CHECK(msg.find("fingerprint of tensor 'param/v'") != std::string::npos);
  cleanup(world, root);
}

TEST_CASE("refusals (missing tensor, other shape) come before any byte is read") {
  const Communicator world = Communicator::world();
  const std::string root = temp_root(world, "refuse");
  const auto ls = layouts(world.size());
  State src = make_state(world, ls.front());
  fill(src, 1);
  const std::string dir = ckpt::save(world, {root, 1, 0, -1}, src.pieces, fingerprints(1), {});
  const ckpt::Meta meta = ckpt::read_meta(dir);
  for (int variant : {0, 1}) {
    State dst = make_state(world, ls.back());
    fill(dst, 9);
    const std::vector<std::vector<float>> before = dst.store;
    StatePiece& last = dst.pieces.back();  // param/s [3, 5]
    if (variant == 0) {
      last.name = "param/missing";
    } else {
      last.global_shape = {5, 3};
      last.box_shape = {5, 3};
    }
    std::string msg;
    try {
      ckpt::read_pieces(dir, meta, [&] {
        std::vector<const StatePiece*> v;
        for (const StatePiece& p : dst.pieces) v.push_back(&p);
        return v;
      }());
    } catch (const Error& e) {
      msg = e.what();
    }
    INFO(msg);
    if (variant == 0) CHECK(msg.find("'param/missing' is not in checkpoint") != std::string::npos);
    if (variant == 1)
      CHECK(msg.find("'param/s' has shape [5, 3] here but [3, 5]") != std::string::npos);
    bool untouched = true;
    for (std::size_t i = 0; i < before.size(); ++i)
      untouched = untouched && std::memcmp(before[i].data(), dst.store[i].data(),
                                           before[i].size() * sizeof(float)) == 0;
    CHECK(untouched);
  }
  cleanup(world, root);
}

TEST_CASE("latest moves atomically; incomplete checkpoints are never resumed; keep=N") {
  const Communicator world = Communicator::world();
  const std::string root = temp_root(world, "latest");
  const auto ls = layouts(world.size());
  State st = make_state(world, ls.back());
  CHECK(ckpt::resolve_resume("auto", root) == "");  // no latest yet: fresh start
  for (std::int64_t step = 1; step <= 4; ++step) {
    fill(st, static_cast<std::uint64_t>(step));
    ckpt::save(world, {root, step, 2, -1}, st.pieces,
               fingerprints(static_cast<std::uint64_t>(step)), {{"step", step}});
    const std::string expect = (fs::path(root) / ckpt::step_dir_name(step)).string();
    CHECK(ckpt::resolve_resume("auto", root) == expect);
    CHECK(ckpt::resolve_resume(root, root) == expect);
    CHECK(ckpt::resolve_resume(expect, "/nonexistent") == expect);
    CHECK(ckpt::resolve_resume("none", root) == "");
  }
  world.barrier();
  // keep=2: only the two newest remain; no temp files.
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(root)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"latest", "step_00000003", "step_00000004"});
  CHECK(slurp((fs::path(root) / "latest").string()) == "step_00000004\n");
  world.barrier();  // every rank has listed the directory

  // A save killed half-way leaves step_5.partial without meta.json: latest still names 4.
  if (world.rank() == 0) {
    fs::create_directories(fs::path(root) / "step_00000005.partial");
    std::ofstream(fs::path(root) / "step_00000005.partial" / "rank_00000.safetensors") << "x";
  }
  world.barrier();
  CHECK(ckpt::resolve_resume("auto", root) == (fs::path(root) / "step_00000004").string());
  // A latest naming a directory without meta.json (damaged by hand) is not resumed by auto,
  // and an explicit PATH without a complete checkpoint is an error naming it.
  world.barrier();
  if (world.rank() == 0) {
    fs::create_directories(fs::path(root) / "step_00000006");
    std::ofstream(fs::path(root) / "latest") << "step_00000006\n";
  }
  world.barrier();
  CHECK(ckpt::resolve_resume("auto", root) == "");
  const std::string bad = (fs::path(root) / "step_00000006").string();
  CHECK_THROWS_WITH(ckpt::resolve_resume(bad, root), Catch::Contains(bad));
  CHECK_THROWS_WITH(ckpt::resolve_resume(root, root), Catch::Contains("not a complete checkpoint"));
  world.barrier();
  if (world.rank() == 0) fs::remove_all(fs::path(root) / "step_00000006");
  world.barrier();
  // The previous checkpoint is still loadable, and the next save removes the stale .partial.
  fill(st, 7);
  ckpt::save(world, {root, 7, 0, -1}, st.pieces, fingerprints(7), {});
  CHECK(!fs::exists(fs::path(root) / "step_00000005.partial"));
  CHECK(ckpt::resolve_resume("auto", root) == (fs::path(root) / "step_00000007").string());
  const std::string d4 = (fs::path(root) / "step_00000004").string();
  State back = make_state(world, ls.front());
  ckpt::load(world, d4, ckpt::read_meta(d4), back.pieces);
  CHECK(mismatches(back, 4) == 0);
  // Saving the same step again replaces it completely.
  fill(st, 8);
  ckpt::save(world, {root, 7, 0, -1}, st.pieces, fingerprints(8), {});
  const std::string d7 = (fs::path(root) / "step_00000007").string();
  ckpt::load(world, d7, ckpt::read_meta(d7), back.pieces);
  CHECK(mismatches(back, 8) == 0);
  CHECK(!fs::exists(d7 + ".replaced"));
  cleanup(world, root);
}

TEST_CASE("AsyncSaver writes the same bytes as save(), from a snapshot taken at start()") {
  const Communicator world = Communicator::world();
  const std::string root_sync = temp_root(world, "sync");
  const std::string root_async = temp_root(world, "async");
  for (const Layout& L : layouts(world.size())) {
    State st = make_state(world, L);
    fill(st, 11);
    const nlohmann::json run = {{"layout", L.str()}, {"lr", 0.5}};
    const std::string d_sync =
        ckpt::save(world, {root_sync, 3, 0, -1}, st.pieces, fingerprints(11), run);
    ckpt::AsyncSaver saver;
    CHECK(!saver.in_flight());
    CHECK(saver.finish(world) == "");
    saver.start(world, {root_async, 3, 0, -1}, st.pieces, fingerprints(11), run);
    CHECK(saver.in_flight());
    fill(st, 12);  // training goes on: the snapshot must not see this
    const std::string d_async = saver.finish(world);
    CHECK(!saver.in_flight());
    bool same = true;
    if (world.rank() == 0) {
      std::vector<std::string> a, b;
      for (const auto& e : fs::directory_iterator(d_sync))
        a.push_back(e.path().filename().string());
      for (const auto& e : fs::directory_iterator(d_async))
        b.push_back(e.path().filename().string());
      std::sort(a.begin(), a.end());
      std::sort(b.begin(), b.end());
      same = a == b && !a.empty();
      for (const std::string& f : a)
        same = same &&
               slurp((fs::path(d_sync) / f).string()) == slurp((fs::path(d_async) / f).string());
    }
    CHECK(all_true(world, same));
    // start() while one is in flight finishes the first one.
    saver.start(world, {root_async, 4, 0, -1}, st.pieces, fingerprints(12), run);
    saver.start(world, {root_async, 5, 0, -1}, st.pieces, fingerprints(12), run);
    CHECK(fs::exists(fs::path(root_async) / "step_00000004" / "meta.json"));
    saver.finish(world);
    State back = make_state(world, L);
    const std::string d5 = (fs::path(root_async) / "step_00000005").string();
    ckpt::load(world, d5, ckpt::read_meta(d5), back.pieces);
    CHECK(mismatches(back, 12) == 0);
  }
  cleanup(world, root_sync);
  cleanup(world, root_async);
}

TEST_CASE("one checkpoint decision per job: rank 0 resolves, every rank checks its meta.json") {
  const Communicator world = Communicator::world();
  const std::string root = temp_root(world, "agree");
  State st = make_state(world, layouts(world.size()).back());
  CHECK(ckpt::agree_resume(world, "auto", root).dir.empty());  // nothing saved: fresh start
  for (std::int64_t step = 1; step <= 2; ++step) {
    fill(st, static_cast<std::uint64_t>(step));
    ckpt::save(world, {root, step, 0, -1}, st.pieces,
               fingerprints(static_cast<std::uint64_t>(step)), {{"step", step}});
  }
  const std::string two = (fs::path(root) / "step_00000002").string();
  for (const std::string& resume : {std::string("auto"), root, two}) {
    const ckpt::Meta m = ckpt::agree_resume(world, resume, root);
    CHECK((m.step == 2 && m.dir == two));
  }
  CHECK(ckpt::agree_resume(world, "none", root).dir.empty());
  if (world.size() > 1) {
    // The other ranks look into a copy whose meta.json differs (another job wrote it): every
    // rank refuses with the same error, naming the step and the first rank that differs.
    const std::string copy = root + "_copy_" + std::to_string(world.rank());
    if (world.rank() != 0) {
      fs::remove_all(copy);
      fs::copy(root, copy, fs::copy_options::recursive);
      std::ofstream(fs::path(copy) / "step_00000002" / "meta.json", std::ios::app) << " ";
    }
    world.barrier();
    const std::string mine = world.rank() == 0 ? root : copy;
    CHECK_THROWS_WITH(ckpt::agree_resume(world, "auto", mine),
                      Catch::Contains("changed under the job") && Catch::Contains("step 2") &&
                          Catch::Contains("the first rank 1"));
    world.barrier();
    if (world.rank() != 0) fs::remove_all(copy);
  }
  cleanup(world, root);
}
