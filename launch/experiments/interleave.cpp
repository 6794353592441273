#include "launch/experiments/interleave.hpp"

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "launch/train/modes.hpp"
#include "launch/train/state_trace.hpp"
#include "launch/train/trainer.hpp"
#include "runtime/error.hpp"
#include "verify/trace.hpp"

namespace lockstep::experiments {
namespace {

using Clock = std::chrono::steady_clock;

class Interleaver : public StepDriver {
 public:
  Interleaver(const config::Config& base, Context& mpi)
      : base_(base), mpi_(mpi), modes_(base.debug.interleave.modes) {}

  // The other modes' jobs, on the run's resolved thread count.
  void start(const TrainJob& job, const std::string& resumed_from) override {
    check(resumed_from.empty(),
          "debug.interleave times fresh runs, and run.resume found " + resumed_from,
          "set run.resume=none or use a new run.out");
    for (std::size_t i = 1; i < modes_.size(); ++i) {
      config::Config c = config::with_run_mode(base_, modes_[i]);
      c.run.threads = job.cfg().run.threads;
      c.run.out = job.cfg().run.out + "/interleave-" + modes_[i];
      c.ckpt.save = false;
      c.debug.bitflip = {};  // fault injection stays with the run itself
      others_.push_back(std::make_unique<TrainJob>(c, mpi_));
    }
    root_ = mpi_.world().rank() == 0;
    out_ = job.cfg().run.out;
  }

  std::string banner() const override {
    return "interleave: " + base_.debug.interleave.text() +
           ", one step of each in turn on its own state; trace and metrics are " + modes_[0] +
           "'s, every mode's step times in tax_steps.jsonl";
  }

  StepTiming step(TrainJob& job, std::int64_t step) override {
    StepTiming t;
    ms_.assign(modes_.size(), 0.0);
    for (std::size_t k = 0; k < ms_.size(); ++k) {
      const std::size_t i = (k + static_cast<std::size_t>(step)) % ms_.size();
      const auto t0 = Clock::now();
      const double cpu0 = process_cpu_seconds();
      if (i == 0) {
        t.result = job.run_step(step);
        t.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
        t.cpu_seconds = process_cpu_seconds() - cpu0;
        ms_[0] = t.seconds * 1e3;
      } else {
        others_[i - 1]->run_step(step);
        ms_[i] = std::chrono::duration<double>(Clock::now() - t0).count() * 1e3;
      }
    }
    for (const double ms : ms_) t.loop_seconds += ms / 1e3;
    return t;
  }

  void finish_step(std::int64_t step, const StepTiming&) override {
    if (!root_) return;
    if (!steps_) steps_ = std::make_unique<JsonlWriter>(out_ + "/tax_steps.jsonl", true);
    nlohmann::ordered_json j;
    j["step"] = step;
    j["first"] = modes_[static_cast<std::size_t>(step) % modes_.size()];
    for (std::size_t i = 0; i < modes_.size(); ++i) j["ms"][modes_[i]] = ms_[i];
    steps_->write(j.dump());
  }

 private:
  config::Config base_;  // the config before any mode's overrides
  Context& mpi_;
  std::vector<std::string> modes_;
  std::vector<std::unique_ptr<TrainJob>> others_;  // modes_[1..]
  std::vector<double> ms_;                         // the last step's time per mode
  bool root_ = false;
  std::string out_;
  std::unique_ptr<JsonlWriter> steps_;
};

}  // namespace

int train_interleaved(const config::Config& cfg, Context& mpi) {
  Interleaver driver(cfg, mpi);
  return train(config::with_run_mode(cfg, cfg.debug.interleave.modes.at(0)), mpi, driver);
}

}  // namespace lockstep::experiments
