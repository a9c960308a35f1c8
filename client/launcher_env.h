// A job's rank, size and local values from the launcher that started it,
// for ranks without KOLO_RANK: OpenMPI's mpirun (OMPI_COMM_WORLD_*), Slurm's
// srun (SLURM_*) and torchrun, or a Kubeflow PyTorchJob (RANK, WORLD_SIZE,
// LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_*).
//
// The job id comes from what every rank of the job shares:
//   mpirun   "ompi-<OMPI_MCA_ess_base_jobid>"
//   srun     "slurm-<SLURM_JOB_ID>.<SLURM_STEP_ID or 0>"
//   torchrun "torch-<TORCHELASTIC_RUN_ID>.<TORCHELASTIC_RESTART_COUNT or 0>"
//            when the run id is set and not "none" (torchrun's default),
//            else "torch-<MASTER_ADDR>:<MASTER_PORT>".
// A torchrun job across nodes (WORLD_SIZE > LOCAL_WORLD_SIZE) gets as its
// coordinator the kolod on MASTER_ADDR's host at its Peer port,
// KOLO_PEER_PORT or 7371; KOLO_COORDINATOR, read after this, wins.
//
// Thread-safety: reads the process environment; call before threads that
// change it.
#pragma once

#include "absl/status/statusor.h"
#include "kolo/kolo.h"

namespace kolo {

// kolod's default Peer port (kolod --peer_address).
inline constexpr int kDefaultPeerPort = 7371;

// The launcher whose variables were read.
enum class Launcher { kNone, kOpenMpi, kSlurm, kTorchrun };

// Fills `o` from a launcher's variables when KOLO_RANK is not set. Returns
// the launcher read (kNone: none, or KOLO_RANK is set); INVALID_ARGUMENT
// naming the variable for a value that is not a number.
absl::StatusOr<Launcher> ApplyLauncherEnvironment(ClientOptions* o);

}  // namespace kolo
