// The op names of the GPT model (private to model/gpt*.cpp): the ids the forward and backward
// record under (op trace, debug.perturb; model/gpt.hpp's header comment lists the names), in
// record order, which of them debug.perturb can act on, and which are present for a config.
// Determinism contract (docs/design.md section 2): names are run-independent (a function of
// the config and the op's place only, never of TP rank, microbatch or thread), so two runs'
// traces compare op by op; this file holds no arithmetic.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lockstep::gpt_detail {

// Ops outside the layers, by id.
enum GlobalOp : int {
  kEmbedFwd,
  kFinalLnFwd,
  kHeadFwd,
  kLossFwd,
  kLossSumFwd,
  kLossBwd,
  kHeadWgrad,
  kHeadDgrad,
  kFinalLnBwd,
  kFinalLnWgrad,
  kFinalLnBgrad,
  kPosWgrad,
  kEmbedWgrad,
  kGlobalOps
};
// Ops of one layer, forward then backward, each in record order.
enum LayerOp : int {
  kLn1Fwd,
  kQFwd,
  kKFwd,
  kVFwd,
  kScoresFwd,
  kSoftmaxFwd,
  kAttnDropFwd,
  kPvFwd,
  kProjFwd,
  kAttnResFwd,
  kLn2Fwd,
  kFc1Fwd,
  kGeluFwd,
  kFc2Fwd,
  kMlpResFwd,  // forward
  kFc2Wgrad,
  kFc2Bgrad,
  kFc2Dgrad,
  kGeluBwd,
  kFc1Wgrad,
  kFc1Bgrad,
  kFc1Dgrad,
  kLn2Bwd,
  kLn2Wgrad,
  kLn2Bgrad,
  kProjWgrad,
  kProjBgrad,
  kProjDgrad,
  kDvBwd,
  kDqBwd,
  kDkBwd,
  kQWgrad,
  kQBgrad,
  kKWgrad,
  kKBgrad,
  kVWgrad,
  kVBgrad,
  kQDgrad,
  kKDgrad,
  kVDgrad,
  kLn1Bwd,
  kLn1Wgrad,
  kLn1Bgrad,
  kLayerOps
};
constexpr int kFirstLayerBwdOp = kFc2Wgrad;

// The op id of a global op: the op itself; of layer l's op: after the global ops, kLayerOps
// per layer.
inline int op_id(std::int64_t layer, int op) {
  return kGlobalOps + static_cast<int>(layer) * kLayerOps + op;
}
// The name of every op id of a model with `layers` layers (op_id order, not record order).
std::vector<std::string> op_id_names(std::int64_t layers);

}  // namespace lockstep::gpt_detail
