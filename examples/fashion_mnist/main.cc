// fashion_mnist: data-parallel training of a small MLP on Fashion-MNIST over
// Kolo. Run one process per rank (kolorun sets the KOLO_* environment);
// without a KOLO_* environment it is a job of one rank that still attaches to
// the node's kolod.
//
// Rank 0 prints one line per epoch (mean train loss over all ranks, accuracy
// on the whole test set, global images/s); every rank prints its weight
// checksum at the end, which must be the same on all ranks.
#include <cstdio>
#include <memory>

#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "common/status_macros.h"
#include "examples/fashion_mnist/idx_reader.h"
#include "examples/fashion_mnist/kolo_averager.h"
#include "examples/fashion_mnist/run_config.h"
#include "kolo/kolo.h"

namespace kolo::fashion_mnist {
namespace {

absl::Status Main() {
  KOLO_ASSIGN_OR_RETURN(const RunConfig config, RunConfigFromFlags());
  // Data is loaded and validated before attaching, so a bad --data fails
  // fast and without a daemon.
  KOLO_ASSIGN_OR_RETURN(const FashionMnist data,
                        LoadFashionMnist(config.data_dir, config.limit_train));
  KOLO_ASSIGN_OR_RETURN(const ClientOptions options, ClientOptions::FromEnv());
  KOLO_ASSIGN_OR_RETURN(std::unique_ptr<Client> client, Client::Connect(options));
  KoloAverager averager(client.get());
  return RunTraining(config, data, averager, stdout);
}

}  // namespace
}  // namespace kolo::fashion_mnist

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const absl::Status status = kolo::fashion_mnist::Main();
  if (!status.ok()) {
    std::fprintf(stderr, "fashion_mnist: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
