// fashion_mnist_local: the fashion_mnist example as a job of one rank with no
// daemon, for checking the model and measuring its single-process speed.
// Same flags and output as fashion_mnist.
#include <cstdio>

#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "common/status_macros.h"
#include "examples/fashion_mnist/idx_reader.h"
#include "examples/fashion_mnist/local_averager.h"
#include "examples/fashion_mnist/run_config.h"

namespace kolo::fashion_mnist {
namespace {

absl::Status Main() {
  KOLO_ASSIGN_OR_RETURN(const RunConfig config, RunConfigFromFlags());
  KOLO_ASSIGN_OR_RETURN(const FashionMnist data,
                        LoadFashionMnist(config.data_dir, config.limit_train));
  LocalAverager averager;
  return RunTraining(config, data, averager, stdout);
}

}  // namespace
}  // namespace kolo::fashion_mnist

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const absl::Status status = kolo::fashion_mnist::Main();
  if (!status.ok()) {
    std::fprintf(stderr, "fashion_mnist_local: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
