// OpenBLAS kernel selection for fast mode. OpenBLAS 0.3.21 (Debian 12) does not recognise
// every AVX-512 CPU (e.g. recent Xeons under KVM) and then falls back to its SSE3
// "Prescott" kernels at about 1/8 of the speed, which would make fast mode — the baseline
// of the determinism tax — artificially slow. OpenBLAS reads OPENBLAS_CORETYPE only when it
// loads, so the fix is to set it and re-exec the program once, before MPI starts.
// Determinism contract: none (only fast mode calls OpenBLAS). A value already set in the
// environment is always respected.
#pragma once

namespace lockstep {

// If this CPU has AVX-512, OPENBLAS_CORETYPE is unset and OpenBLAS chose a non-AVX-512
// core, sets OPENBLAS_CORETYPE=SkylakeX and re-execs /proc/self/exe with argv (once:
// LOCKSTEP_OPENBLAS_PINNED marks the child). Returns normally when nothing needs doing or
// the exec fails.
void pin_openblas_kernels(char** argv);

// The core OpenBLAS chose, lower case (e.g. "skylakex", "prescott").
const char* openblas_core_name();

}  // namespace lockstep
