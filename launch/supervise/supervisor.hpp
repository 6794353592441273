// `lockstep run` after its options are parsed: plans the job (launch_plan.hpp), starts it as
// a child (job_process.hpp) with its output sorted (job_output.hpp: progress to stdout, the
// failing rank's line once to stderr, Open MPI's output to RUN_OUT/launcher.log), forwards
// SIGTERM/SIGINT to its ranks (preemption: they save and stop; never restarted), and with
// --max-restarts N relaunches a job that ended with a restartable status
// (launch/train/exit_status.hpp) from the newest complete checkpoint (run.resume=auto),
// after the run directory's lock (launch/train/run_lock.hpp) is free, on the same layout or
// with --elastic MIN:MAX on the largest layout the answering hosts hold that keeps G4
// (elastic.hpp). RUN_OUT/restarts.jsonl records each failure and relaunch (restart_log.hpp).
// Returns the job's exit status (the last attempt's): 0 finished, 4 preempted, ...
// Determinism contract: a relaunch continues the uninterrupted trajectory bit for bit
// whenever it runs (G2 on the same layout, G4 on another: elastic.hpp picks only those);
// nothing here touches what the job computes.
#pragma once

#include "launch/supervise/launch_plan.hpp"

namespace lockstep::supervise {

int supervise(const RunRequest& request);

}  // namespace lockstep::supervise
