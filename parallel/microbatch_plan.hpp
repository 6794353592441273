// How a DP rank's sequences of one step are cut into microbatches (one forward and backward
// pass each) and which leaves of the rank's gradient tree each one covers (docs/design.md
// section 2, "weight gradients").
// Determinism contract: every microbatch is a node of the rank's tree, so merging their
// gradients in order with a TreeCombiner gives the rank's subtree of the global batch's tree:
//  * halving: the tree is the halving tree over the rank's sequences; the microbatches are its
//    largest nodes of at most `microbatch` sequences, left to right (a microbatch size that is
//    not a node, 2 of 6 sequences say, becomes the nodes 2, 1, 2, 1; never more passes than
//    microbatch 1). Any microbatch size keeps the bits.
//  * pow2 (contract v1): equal microbatches of `microbatch` sequences are the leaves of a
//    binary counter, as before the halving contract; the layout keeps the bits only when each
//    is a power-of-two number of token blocks (launch/train/validate.hpp).
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/reduce_tree.hpp"

namespace lockstep {

struct Microbatch {
  std::int64_t first, count;  // this rank's sequences [first, first + count)
  std::int64_t width;         // leaves of the rank's tree it covers
};

struct MicrobatchPlan {
  TreeShape tree;
  std::int64_t leaves;  // leaves of the rank's tree
  std::vector<Microbatch> passes;
};

// The plan for `sequences` per rank and a microbatch of at most `microbatch` sequences. Throws
// lockstep::Error if microbatch < 1 or > sequences, or (pow2) does not divide sequences.
MicrobatchPlan plan_microbatches(TreeShape tree, std::int64_t sequences, std::int64_t microbatch);

}  // namespace lockstep
