// GPT math against an independent reference: this driver runs one forward_backward of
// Lockstep's GPT (model/gpt.hpp) on a small config, writes weights, batch, loss and
// gradients to a temporary directory, and runs tests/reference/gpt_reference.py, which
// rebuilds the model in PyTorch float64 (own Philox for the dropout masks) and compares the
// loss (relative 1e-5) and every gradient (max abs error <= 2e-4 * max|grad|). Cases: dropout
// off / on, bias off / on. /usr/bin/python3 must import torch (launch/lockstep setup installs it).
#include <unistd.h>
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/gpt.hpp"
#include "runtime/random.hpp"
#include "tests/support/test_batch.hpp"

using namespace lockstep;
namespace fs = std::filesystem;

namespace {

void write_raw(const fs::path& p, const void* data, std::size_t bytes) {
  std::ofstream f(p, std::ios::binary);
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  REQUIRE(f.good());
}

bool torch_available() {
  return std::system("/usr/bin/python3 -c 'import torch, numpy' > /dev/null 2>&1") == 0;
}

// Runs one case; returns the script's exit code.
int run_case(const ModelConfig& cfg, const std::string& tag) {
  const KernelCtx ctx = KernelCtx::best(1, 16);
  Gpt model(cfg, nullptr, Determinism::invariant, ctx);
  model.init(1234);
  // Make LayerNorm weights and all biases non-trivial so their use is tested.
  for (std::size_t i = 0; i < model.table().size(); ++i) {
    const ParamSpec& s = model.table()[i];
    if (s.shape.size() == 1) {
      const float mean = s.init == InitKind::ones ? 1.0f : 0.0f;
      fill_normal(77, 1000 + i, 0, model.params()[i].data<float>(), model.params()[i].numel(), mean,
                  0.1f);
    }
  }
  // 3 sequences: seed 42, labels from the LCG's bits 13.., sequence ids 5, 6, 7.
  const std::int64_t mb = 3, T = mb * cfg.context;
  const lockstep::testing::Batch batch =
      lockstep::testing::make_batch(cfg, mb, {.seed = 42, .first_seq_id = 5, .label_shift = 13});
  const std::vector<std::int32_t>& tokens = batch.tokens;
  const std::vector<std::int32_t>& labels = batch.labels;
  const std::vector<std::int64_t>& seq_ids = batch.seq_ids;
  const std::int64_t step = 3;
  const float loss = model.forward_backward(tokens.data(), labels.data(), seq_ids.data(), mb, step,
                                            1.0f / static_cast<float>(T));
  const fs::path dir =
      fs::temp_directory_path() / ("lockstep_gpt_ref_" + std::to_string(getpid()) + "_" + tag);
  fs::create_directories(dir);
  nlohmann::json meta;
  meta["config"] = {{"vocab", cfg.vocab},     {"context", cfg.context}, {"layers", cfg.layers},
                    {"d_model", cfg.d_model}, {"heads", cfg.heads},     {"ffn", cfg.ffn},
                    {"dropout", cfg.dropout}, {"bias", cfg.bias},       {"ln_eps", cfg.ln_eps}};
  meta["mb"] = mb;
  meta["step"] = step;
  meta["seed"] = model.seed();
  meta["seq_ids"] = seq_ids;
  meta["loss_sum"] = static_cast<double>(loss);
  nlohmann::json plist = nlohmann::json::array();
  for (std::size_t i = 0; i < model.table().size(); ++i) {
    const ParamSpec& sp = model.table()[i];
    plist.push_back({{"name", sp.name}, {"shape", sp.shape}});
    const Tensor& p = model.params()[i];
    write_raw(dir / ("param." + sp.name + ".f32"), p.raw(), p.nbytes());
    std::vector<const float*> terms;
    for (const Tensor& g : model.grads()[i]) terms.push_back(g.data<float>());
    std::vector<float> g(static_cast<std::size_t>(p.numel()));
    combine_grad_terms(terms, p.numel(), g.data());
    write_raw(dir / ("grad." + sp.name + ".f32"), g.data(), g.size() * 4);
  }
  meta["params"] = plist;
  std::ofstream(dir / "meta.json") << meta.dump(1);
  write_raw(dir / "tokens.i32", tokens.data(), tokens.size() * 4);
  write_raw(dir / "labels.i32", labels.data(), labels.size() * 4);
  const fs::path script =
      fs::path(LOCKSTEP_SOURCE_DIR) / "tests" / "reference" / "gpt_reference.py";
  const std::string cmd = "/usr/bin/python3 " + script.string() + " " + dir.string();
  const int rc = std::system(cmd.c_str());
  fs::remove_all(dir);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 1;
}

ModelConfig small(float dropout, bool bias) {
  ModelConfig c;
  c.vocab = 256;
  c.context = 32;
  c.layers = 2;
  c.d_model = 64;
  c.heads = 4;
  c.ffn = 128;
  c.dropout = dropout;
  c.bias = bias;
  return c;
}

}  // namespace

TEST_CASE("GPT loss and gradients match an independent PyTorch float64 reference") {
  // launch/lockstep setup installs python3-torch and python3-numpy, so a missing torch is a
  // broken set-up, not a reason to skip the check.
  INFO("/usr/bin/python3 cannot import torch and numpy: run launch/lockstep setup");
  REQUIRE(torch_available());
  struct Case {
    float dropout;
    bool bias;
    const char* tag;
  };
  for (const Case& c : {Case{0.0f, false, "nodrop_nobias"}, Case{0.0f, true, "nodrop_bias"},
                        Case{0.1f, false, "drop_nobias"}, Case{0.1f, true, "drop_bias"}}) {
    INFO("case " << c.tag);
    CHECK(run_case(small(c.dropout, c.bias), c.tag) == 0);
  }
}
