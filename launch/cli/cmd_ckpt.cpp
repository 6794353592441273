// `lockstep ckpt inspect|verify|export DIR`: the checkpoint tools of docs/design.md section 6.
// DIR is a checkpoint directory or a checkpoints root (then the checkpoint its `latest`
// names). No MPI: they read files only.
// Determinism contract: verify recomputes hashes and fingerprints from the shard bytes (a
// pure function of the files); export writes the bits it read (checked against both).
#include <cstdio>
#include <memory>
#include <string>

#include "checkpoint/checkpoint.hpp"
#include "launch/cli/commands.hpp"
#include "runtime/error.hpp"
#include "runtime/hash.hpp"

namespace lockstep::cli {
namespace {

struct CkptOptions {
  std::string dir;
  std::string out;
};

std::string resolve_dir(const std::string& dir) {
  const std::string d = ckpt::resolve_resume(dir, "");
  check(!d.empty(), "'" + dir + "' is not a checkpoint", "pass a checkpoint directory or root");
  return d;
}

std::string summary(const nlohmann::json& v) {
  std::string s = v.dump();
  if (s.size() > 110) s = s.substr(0, 107) + "...";
  return s;
}

int inspect(const CkptOptions& o) {
  const std::string dir = resolve_dir(o.dir);
  const ckpt::Meta m = ckpt::read_meta(dir);
  std::printf("checkpoint %s\n", dir.c_str());
  std::printf("  format        : %s v%d (fingerprints v%d)\n", ckpt::kFormatName, m.format_version,
              static_cast<int>(m.fingerprint_version));
  std::printf("  step          : %lld\n", static_cast<long long>(m.step));
  std::printf("  tensors       : %zu (%.1f MB)\n", m.tensors.size(),
              static_cast<double>(m.total_bytes()) / 1e6);
  if (m.run.is_object())
    for (auto it = m.run.begin(); it != m.run.end(); ++it)
      std::printf("  %-14s: %s\n", it.key().c_str(), summary(it.value()).c_str());
  std::printf("\n%-40s %-18s %6s %12s  %s\n", "tensor", "global shape", "shards", "bytes",
              "fingerprint");
  for (const auto& [name, t] : m.tensors)
    std::printf("%-40s %-18s %6zu %12lld  %s\n", name.c_str(), shape_str(t.global_shape).c_str(),
                t.shards.size(), static_cast<long long>(shape_numel(t.global_shape) * 4),
                hex64(t.fingerprint).c_str());
  return 0;
}

int verify(const CkptOptions& o) {
  const std::string dir = resolve_dir(o.dir);
  const ckpt::Meta m = ckpt::read_meta(dir);
  ckpt::VerifyStats st;
  const std::vector<std::string> problems = ckpt::verify_checkpoint(dir, m, &st);
  for (const std::string& p : problems) std::fprintf(stderr, "lockstep: BAD: %s\n", p.c_str());
  if (!problems.empty()) {
    std::fprintf(stderr, "lockstep: checkpoint %s FAILED verification: %zu problem(s)\n",
                 dir.c_str(), problems.size());
    return 1;
  }
  std::printf(
      "OK %s: %lld tensors, %lld shards in %lld files, %lld bytes re-hashed, "
      "every fingerprint recomputed\n",
      dir.c_str(), static_cast<long long>(st.tensors), static_cast<long long>(st.shards),
      static_cast<long long>(st.files), static_cast<long long>(st.bytes));
  return 0;
}

int export_file(const CkptOptions& o) {
  const std::string dir = resolve_dir(o.dir);
  const ckpt::Meta m = ckpt::read_meta(dir);
  const std::int64_t n = ckpt::export_tensors(dir, m, o.out, "param/");
  std::printf("exported %lld tensors (param/* without the prefix) of %s to %s\n",
              static_cast<long long>(n), dir.c_str(), o.out.c_str());
  return 0;
}

}  // namespace

Runner add_ckpt(CLI::App& app) {
  auto o = std::make_shared<CkptOptions>();
  auto* cmd = app.add_subcommand("ckpt", "inspect, verify or export a checkpoint");
  cmd->require_subcommand(1);
  auto* ins = cmd->add_subcommand("inspect", "run info and a table of the tensors");
  ins->add_option("DIR", o->dir, "checkpoint directory or checkpoints root")->required();
  auto* ver = cmd->add_subcommand("verify", "re-hash every shard and recompute every fingerprint");
  ver->add_option("DIR", o->dir, "checkpoint directory or checkpoints root")->required();
  auto* exp = cmd->add_subcommand("export", "one unsharded safetensors file of the weights");
  exp->add_option("DIR", o->dir, "checkpoint directory or checkpoints root")->required();
  exp->add_option("--out", o->out, "output .safetensors file")->required();
  return [o, ins, ver, exp](int, char**) {
    try {
      if (ins->parsed()) return inspect(*o);
      if (ver->parsed()) return verify(*o);
      if (exp->parsed()) return export_file(*o);
    } catch (const Error& e) {
      std::fprintf(stderr, "lockstep: error: %s\n", e.what());
      return 1;
    }
    return 2;
  };
}

}  // namespace lockstep::cli
