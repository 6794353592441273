// The op name table of the GPT model: gpt.hpp's op_names() and check_perturb_op(), and the
// names by op id that Gpt::set_observer hands to the observer (model/gpt_op_names.hpp).
// Determinism contract (docs/design.md section 2): op_names(cfg) lists every op in the order
// one microbatch's forward and backward record them, from the config alone (every TP rank,
// microbatch and run gets the same list); no arithmetic.
#include <algorithm>
#include <string>
#include <vector>

#include "model/gpt.hpp"
#include "model/gpt_op_names.hpp"
#include "runtime/error.hpp"

namespace lockstep {

using namespace gpt_detail;

namespace {
constexpr const char* kGlobalOpName[kGlobalOps] = {
    "embed.lookup.fwd", "final_ln.fwd",    "head.fwd",          "loss.fwd",     "loss.sum.fwd",
    "loss.bwd",         "head.wgrad",      "head.dgrad",        "final_ln.bwd", "final_ln.wgrad",
    "final_ln.bgrad",   "pos_embed.wgrad", "embed.lookup.wgrad"};
constexpr const char* kLayerOpName[kLayerOps] = {
    "ln1.fwd",          "attn.q.fwd",       "attn.k.fwd",      "attn.v.fwd",    "attn.scores.fwd",
    "attn.softmax.fwd", "attn.dropout.fwd", "attn.pv.fwd",     "attn.proj.fwd", "attn.residual.fwd",
    "ln2.fwd",          "mlp.fc1.fwd",      "mlp.gelu.fwd",    "mlp.fc2.fwd",   "mlp.residual.fwd",
    "mlp.fc2.wgrad",    "mlp.fc2.bgrad",    "mlp.fc2.dgrad",   "mlp.gelu.bwd",  "mlp.fc1.wgrad",
    "mlp.fc1.bgrad",    "mlp.fc1.dgrad",    "ln2.bwd",         "ln2.wgrad",     "ln2.bgrad",
    "attn.proj.wgrad",  "attn.proj.bgrad",  "attn.proj.dgrad", "attn.dv.bwd",   "attn.dq.bwd",
    "attn.dk.bwd",      "attn.q.wgrad",     "attn.q.bgrad",    "attn.k.wgrad",  "attn.k.bgrad",
    "attn.v.wgrad",     "attn.v.bgrad",     "attn.q.dgrad",    "attn.k.dgrad",  "attn.v.dgrad",
    "ln1.bwd",          "ln1.wgrad",        "ln1.bgrad"};

bool global_perturbable(int op) {
  return op == kHeadFwd || op == kHeadWgrad || op == kHeadDgrad;
}
bool layer_perturbable(int op) {
  switch (op) {
    case kQFwd:
    case kKFwd:
    case kVFwd:
    case kScoresFwd:
    case kPvFwd:
    case kProjFwd:
    case kFc1Fwd:
    case kFc2Fwd:
    case kFc2Wgrad:
    case kFc2Dgrad:
    case kFc1Wgrad:
    case kFc1Dgrad:
    case kProjWgrad:
    case kProjDgrad:
    case kQWgrad:
    case kKWgrad:
    case kVWgrad:
    case kQDgrad:
    case kKDgrad:
    case kVDgrad:
      return true;
    default:
      return false;
  }
}
// Whether a layer op is recorded with this config (linear bias grads need biases, the
// attention-probability dropout needs dropout > 0).
bool layer_op_present(const ModelConfig& cfg, int op) {
  switch (op) {
    case kFc2Bgrad:
    case kFc1Bgrad:
    case kProjBgrad:
    case kQBgrad:
    case kKBgrad:
    case kVBgrad:
      return cfg.bias;
    case kAttnDropFwd:
      return cfg.dropout > 0.0f;
    default:
      return true;
  }
}
std::string layer_op_name(std::int64_t l, int op) {
  return "layers." + std::to_string(l) + "." + kLayerOpName[op];
}
}  // namespace

std::vector<std::string> gpt_detail::op_id_names(std::int64_t layers) {
  std::vector<std::string> out(static_cast<std::size_t>(op_id(layers, 0)));
  for (int op = 0; op < kGlobalOps; ++op) out[op] = kGlobalOpName[op];
  for (std::int64_t l = 0; l < layers; ++l)
    for (int op = 0; op < kLayerOps; ++op) out[op_id(l, op)] = layer_op_name(l, op);
  return out;
}

std::vector<OpName> op_names(const ModelConfig& cfg) {
  std::vector<OpName> out;
  auto global = [&](int op) { out.push_back({kGlobalOpName[op], global_perturbable(op)}); };
  auto layer = [&](std::int64_t l, int op) {
    if (layer_op_present(cfg, op)) out.push_back({layer_op_name(l, op), layer_perturbable(op)});
  };
  global(kEmbedFwd);
  for (std::int64_t l = 0; l < cfg.layers; ++l)
    for (int op = 0; op < kFirstLayerBwdOp; ++op) layer(l, op);
  for (int op = kFinalLnFwd; op <= kFinalLnBgrad; ++op) global(op);
  for (std::int64_t l = cfg.layers - 1; l >= 0; --l)
    for (int op = kFirstLayerBwdOp; op < kLayerOps; ++op) layer(l, op);
  global(kPosWgrad);
  global(kEmbedWgrad);
  out.push_back({"dp.reduce", true});
  return out;
}

void check_perturb_op(const ModelConfig& cfg, const std::string& name) {
  std::string nearest;
  std::size_t best = std::string::npos;
  for (const OpName& op : op_names(cfg)) {
    if (op.name == name) {
      check(op.perturbable,
            "debug.perturb = '" + name + "': this op has no reduction order to change",
            "perturb a GEMM op (.fwd/.wgrad/.dgrad of a linear layer or head, attn.scores.fwd, "
            "attn.pv.fwd) or dp.reduce; `lockstep verify ops CONFIG` lists them");
      return;
    }
    if (!op.perturbable) continue;
    // Edit distance (names are short).
    std::vector<std::size_t> row(op.name.size() + 1);
    for (std::size_t j = 0; j < row.size(); ++j) row[j] = j;
    for (std::size_t i = 1; i <= name.size(); ++i) {
      std::size_t diag = row[0];
      row[0] = i;
      for (std::size_t j = 1; j <= op.name.size(); ++j) {
        const std::size_t up = row[j];
        row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (name[i - 1] != op.name[j - 1])});
        diag = up;
      }
    }
    if (row.back() < best) best = row.back(), nearest = op.name;
  }
  fail("debug.perturb = '" + name + "' is not an op of this model",
       "did you mean '" + nearest + "'? `lockstep verify ops CONFIG` lists every op name");
}

}  // namespace lockstep
