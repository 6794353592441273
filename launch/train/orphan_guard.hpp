// Ranks die with their launcher. `mpirun` starts each local rank in its own process group,
// so `kill -9` of mpirun alone used to leave the ranks running (and writing checkpoints) for
// seconds, racing a relaunched job. die_with_launcher() asks the kernel to SIGKILL this rank
// the moment its parent (mpirun, Open MPI's orted on other hosts, or the supervisor of
// `lockstep run`) dies (prctl PR_SET_PDEATHSIG). A rank whose launcher died even before that
// cannot get past MPI_Init (the launcher was its PMIx server).
// Only for processes a launcher started (mpirun's variables set, or LOCKSTEP_DIE_WITH_PARENT=1,
// which `lockstep run` sets for a rank it starts itself); a `lockstep train` started by hand
// (e.g. under nohup) keeps living when its shell goes.
// Determinism contract: none (decides only whether a process may keep running).
#pragma once

namespace lockstep {

void die_with_launcher();

}  // namespace lockstep
