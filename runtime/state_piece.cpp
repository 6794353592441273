#include "runtime/state_piece.hpp"

#include "runtime/error.hpp"

namespace lockstep {

StatePiece piece_of(std::string name, Tensor& local, bool owner) {
  const ShardDesc& s = local.shard();
  check(local.dtype() == DType::f32, "state tensor '" + name + "' is not float32",
        "state pieces describe float32 training state only");
  check(local.is_contiguous(), "state tensor '" + name + "' is not contiguous",
        "pass the owning parameter tensor, not a strided view");
  StatePiece p;
  p.name = std::move(name);
  p.global_shape = s.global_shape;
  p.box_offset = s.global_offset;
  p.box_shape = local.shape();
  p.flat_begin = 0;
  p.flat_end = local.numel();
  p.data = local.data<float>();
  p.owner = owner;
  check_piece(p);
  return p;
}

void check_piece(const StatePiece& p) {
  const std::size_t r = p.global_shape.size();
  bool ok = p.box_offset.size() == r && p.box_shape.size() == r;
  for (std::size_t d = 0; ok && d < r; ++d)
    ok = p.box_offset[d] >= 0 && p.box_shape[d] >= 0 &&
         p.box_offset[d] + p.box_shape[d] <= p.global_shape[d];
  check(ok,
        "state piece '" + p.name + "': box at " + shape_str(p.box_offset) + " of shape " +
            shape_str(p.box_shape) + " does not fit in the logical shape " +
            shape_str(p.global_shape),
        "the shard descriptor of this tensor is wrong (a bug in its producer)");
  check(p.flat_begin >= 0 && p.flat_begin <= p.flat_end && p.flat_end <= shape_numel(p.box_shape),
        "state piece '" + p.name + "': range [" + std::to_string(p.flat_begin) + ", " +
            std::to_string(p.flat_end) + ") is outside its box of " +
            std::to_string(shape_numel(p.box_shape)) + " elements",
        "the ZeRO segment of this tensor is wrong (a bug in its producer)");
}

}  // namespace lockstep
