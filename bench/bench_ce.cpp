// bench_ce: speed of the vocab-parallel cross-entropy (parallel/vocab_parallel.hpp) on one
// process (TP 1) at a microbatch's shape, default GPT-2 small's (1,024 tokens, vocabulary
// 50,304). Prints one JSON object per line:
//   {"bench":"ce","op","isa","threads","T","vocab","block","ms_min","ms_median","trials"}
// op "forward": vocab_parallel_ce_forward (max, exp, sums of exp, loss) over logits restored
// before every trial (outside the timing); op "backward": vocab_parallel_ce_backward over the
// forward's exponentials. Logits are uniform in [-10, 10); labels spread over the vocabulary.
// On a VM whose speed drifts, the minimum is the steadiest figure.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "bench/timing.hpp"
#include "parallel/tp_layers.hpp"
#include "parallel/vocab_parallel.hpp"
#include "runtime/isa.hpp"
#include "runtime/random.hpp"

using namespace lockstep;

int main(int argc, char** argv) {
  CLI::App app{"Vocab-parallel cross-entropy, forward and backward: ms per call"};
  std::int64_t T = 1024, vocab = 50304;
  int threads = 1, block = 64, trials = 7;
  app.add_option("--tokens", T, "tokens per call")->check(CLI::PositiveNumber);
  app.add_option("--vocab", vocab, "vocabulary (logits per token)")->check(CLI::PositiveNumber);
  app.add_option("--threads", threads, "threads")->check(CLI::PositiveNumber);
  app.add_option("--block", block, "reduce block B")->check(CLI::PositiveNumber);
  app.add_option("--trials", trials, "timed trials (min and median reported)")
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  const auto n = static_cast<std::size_t>(T * vocab);
  std::vector<float> logits(n), work(n), max(T), sumexp(T), scratch(2 * T), loss(T);
  fill_uniform(3, 1, 0, logits.data(), static_cast<std::int64_t>(n), -10.0f, 10.0f);
  std::vector<std::int32_t> labels(static_cast<std::size_t>(T));
  for (std::int64_t t = 0; t < T; ++t) labels[t] = static_cast<std::int32_t>((t * 7919) % vocab);
  const KernelCtx ctx = KernelCtx::best(threads, block);
  const TpContext tp(nullptr, Determinism::invariant, ctx);
  auto restore = [&] { std::copy(logits.begin(), logits.end(), work.begin()); };
  auto forward = [&] {
    vocab_parallel_ce_forward(tp, work.data(), labels.data(), T, vocab, max.data(), sumexp.data(),
                              scratch.data(), loss.data());
  };
  auto print = [&](const char* op, bench::Spread t) {
    std::printf(
        "{\"bench\":\"ce\",\"op\":\"%s\",\"isa\":\"%s\",\"threads\":%d,\"T\":%ld,\"vocab\":%ld,"
        "\"block\":%d,\"ms_min\":%.3f,\"ms_median\":%.3f,\"trials\":%d}\n",
        op, isa_name(ctx.isa), threads, static_cast<long>(T), static_cast<long>(vocab), block,
        1e3 * t.min, 1e3 * t.median, trials);
  };
  print("forward", bench::time_trials(trials, 1, forward, restore));
  print("backward", bench::time_trials(
                        trials, 1,
                        [&] {
                          vocab_parallel_ce_backward(tp, work.data(), sumexp.data(), labels.data(),
                                                     T, vocab, 1.0f);
                        },
                        [&] { restore(), forward(); }));
  return 0;
}
