// coordinator_scale_bench: the coordinator of a job of N nodes, simulated in
// one process, negotiating ResNet-50's 161 gradient names step after step.
//
//   coordinator_scale_bench [--nodes=8,64,256,1024] [--steps=20]
//       [--batches=1] [--csv]
//
// One Coordinator (the one kolod runs, daemon/coordinator/coordinator.h)
// and N simulated member nodes of one rank each. Every step, each member
// reports the 161 names in backward order, in --batches Ready messages, as
// a member link does: a name the coordinator gave a cache id as one bit, any
// other in full. The members are called in turn on one thread and their
// sinks queue each message as the gRPC sink does (the shared plan); no
// data moves. Printed per N:
//   - coordinator time per step: the wall time of every OnReady call of the
//     step, including planning and handing the plan to every sink;
//   - bytes per node per step: what one member sends the coordinator (its
//     Ready messages) and what the coordinator sends one member (the plan),
//     serialised;
// for the first step (cold: every name in full) and the median of the later
// steps (warm: the response cache holds every name).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "daemon/coordinator/coordinator.h"
#include "examples/bench/resnet50_shapes.h"
#include "proto/kolo/abi/types.h"

ABSL_FLAG(std::string, nodes, "8,64,256,1024", "Node counts to simulate, comma-separated.");
ABSL_FLAG(int, steps, 20, "Steps per node count (the first is cold).");
ABSL_FLAG(int, batches, 1, "Ready messages each member sends per step.");
ABSL_FLAG(bool, csv, false, "Print CSV rows instead of a table.");

namespace kolo::daemon {
namespace {

// Keeps what the coordinator sends, as the gRPC sink's queue does.
// Thread-safety: thread-safe (one mutex).
class KeepingSink : public MemberSink {
 public:
  using Message = std::shared_ptr<const kolo::v1::CoordinatorMessage>;
  void Send(Message message) override {
    absl::MutexLock l(&mu_);
    queue_.push_back(std::move(message));
  }
  std::vector<Message> Take() {
    absl::MutexLock l(&mu_);
    std::vector<Message> out;
    out.swap(queue_);
    return out;
  }

 private:
  absl::Mutex mu_;
  std::vector<Message> queue_ ABSL_GUARDED_BY(mu_);
};

struct StepFigures {
  double coordinator_us = 0;
  double ready_bytes_per_node = 0;
  double plan_bytes_per_node = 0;
  bool complete = false;  // every name planned exactly once
};

kolo::v1::TensorMeta MetaOf(const bench::GradientTensor& t) {
  kolo::v1::TensorMeta m;
  m.set_name(t.name);
  m.set_kind(static_cast<uint32_t>(CollectiveKind::kAllreduce));
  m.set_dtype(static_cast<uint32_t>(DType::kFloat32));
  m.set_op(static_cast<uint32_t>(ReduceOp::kAverage));
  for (int64_t d : t.shape) m.add_shape(d);
  m.set_prescale(1);
  m.set_postscale(1);
  m.set_bytes(static_cast<uint64_t>(t.num_elements()) * 4);
  return m;
}

class Simulation {
 public:
  explicit Simulation(int nodes)
      : nodes_(nodes),
        coordinator_("job-scale", "token", nodes, CoordinatorOptions{}),
        grads_(bench::BackwardOrder(bench::ResNet50Parameters())) {
    for (const bench::GradientTensor& g : grads_) metas_.push_back(MetaOf(g));
  }

  absl::Status Join() {
    // Node 0 holds rank 0; the others join in order.
    for (int n = 0; n < nodes_; ++n) {
      kolo::v1::Hello h;
      h.set_job_id("job-scale");
      h.set_job_token("token");
      h.set_node("n" + std::to_string(n));
      h.set_size(nodes_);
      h.add_ranks(n);
      sinks_.push_back(std::make_shared<KeepingSink>());
      absl::StatusOr<int> id = coordinator_.AddMember(h, sinks_.back());
      if (!id.ok()) return id.status();
      ids_.push_back(*id);
    }
    for (auto& s : sinks_) s->Take();  // the welcomes
    return absl::OkStatus();
  }

  StepFigures Step(int batches) {
    StepFigures f;
    // Every member's Ready messages for this step, built beforehand (a
    // member builds them, not the coordinator).
    const size_t n = metas_.size();
    std::vector<std::vector<kolo::v1::Ready>> ready(nodes_);
    double ready_bytes = 0;
    for (int node = 0; node < nodes_; ++node) {
      for (int b = 0; b < batches; ++b) {
        kolo::v1::Ready r;
        std::string bits;
        for (size_t i = n * b / batches; i < n * (b + 1) / batches; ++i) {
          auto c = cache_ids_.find(metas_[i].name());
          if (c == cache_ids_.end()) {
            *r.add_tensors() = metas_[i];
            continue;
          }
          const uint32_t id = c->second;
          if (bits.size() <= id / 8) bits.resize(id / 8 + 1, '\0');
          bits[id / 8] = static_cast<char>(bits[id / 8] | (1 << (id % 8)));
        }
        r.set_cached_bits(bits);
        ready_bytes += static_cast<double>(r.ByteSizeLong());
        ready[node].push_back(std::move(r));
      }
    }
    const auto start = std::chrono::steady_clock::now();
    for (int b = 0; b < batches; ++b) {
      for (int node = 0; node < nodes_; ++node) coordinator_.OnReady(ids_[node], ready[node][b]);
    }
    f.coordinator_us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
    f.ready_bytes_per_node = ready_bytes / nodes_;
    // What each member received; every member gets the same plans.
    double plan_bytes = 0;
    size_t planned = 0;
    for (int node = 0; node < nodes_; ++node) {
      for (const KeepingSink::Message& message : sinks_[node]->Take()) {
        const kolo::v1::CoordinatorMessage& m = *message;
        plan_bytes += static_cast<double>(m.ByteSizeLong());
        if (node != 0 || !m.has_plan()) continue;
        for (const auto& a : m.plan().new_cache_ids()) cache_ids_[a.name()] = a.cache_id();
        for (const auto& r : m.plan().responses()) {
          if (r.error_code() == 0) planned += static_cast<size_t>(r.members_size());
        }
      }
    }
    f.plan_bytes_per_node = plan_bytes / nodes_;
    f.complete = planned == n;
    return f;
  }

 private:
  const int nodes_;
  Coordinator coordinator_;
  std::vector<bench::GradientTensor> grads_;
  std::vector<kolo::v1::TensorMeta> metas_;
  std::vector<std::shared_ptr<KeepingSink>> sinks_;
  std::vector<int> ids_;
  absl::flat_hash_map<std::string, uint32_t> cache_ids_;  // as every member learns them
};

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Simulates one coordinator and N member nodes negotiating ResNet-50's gradients; "
      "prints coordinator time and bytes per node per step, cold and warm.");
  absl::ParseCommandLine(argc, argv);
  // As kolod runs (daemon/main.cc): no lock-order graph.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  const int steps = std::max(2, absl::GetFlag(FLAGS_steps));
  const int batches = std::max(1, absl::GetFlag(FLAGS_batches));
  const bool csv = absl::GetFlag(FLAGS_csv);
  std::vector<int> counts;
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_nodes), ',')) {
    int v = 0;
    if (!absl::SimpleAtoi(s, &v) || v < 1 || v > 100000) {
      std::fprintf(stderr, "coordinator_scale_bench: bad --nodes entry '%s'\n",
                   std::string(s).c_str());
      return 2;
    }
    counts.push_back(v);
  }
  std::printf(
      "# coordinator negotiation, ResNet-50 (%d names per step), %d Ready message(s) "
      "per member per step, %d steps (step 1 cold, the rest warm: median)\n",
      bench::kResNet50Tensors, batches, steps);
  if (csv) {
    std::printf(
        "nodes,cold_us,warm_us,cold_ready_bytes_per_node,warm_ready_bytes_per_node,"
        "cold_plan_bytes_per_node,warm_plan_bytes_per_node,warm_coordinator_bytes_per_step\n");
  } else {
    std::printf("%7s %12s %12s %14s %14s %14s %14s %16s\n", "nodes", "cold(us)", "warm(us)",
                "cold_in(B/n)", "warm_in(B/n)", "cold_out(B/n)", "warm_out(B/n)", "warm_total(B)");
  }
  int failures = 0;
  for (int nodes : counts) {
    Simulation sim(nodes);
    if (absl::Status s = sim.Join(); !s.ok()) {
      std::fprintf(stderr, "coordinator_scale_bench: %d nodes: %s\n", nodes, s.ToString().c_str());
      return 1;
    }
    std::vector<StepFigures> f;
    for (int i = 0; i < steps; ++i) {
      f.push_back(sim.Step(batches));
      if (!f.back().complete) {
        std::fprintf(stderr, "coordinator_scale_bench: %d nodes, step %d: not every name planned\n",
                     nodes, i + 1);
        ++failures;
      }
    }
    std::vector<double> warm_us, warm_in, warm_out;
    for (int i = 1; i < steps; ++i) {
      warm_us.push_back(f[i].coordinator_us);
      warm_in.push_back(f[i].ready_bytes_per_node);
      warm_out.push_back(f[i].plan_bytes_per_node);
    }
    const double total = (Median(warm_in) + Median(warm_out)) * nodes;
    std::printf(csv ? "%d,%.1f,%.1f,%.0f,%.0f,%.0f,%.0f,%.0f\n"
                    : "%7d %12.1f %12.1f %14.0f %14.0f %14.0f %14.0f %16.0f\n",
                nodes, f[0].coordinator_us, Median(warm_us), f[0].ready_bytes_per_node,
                Median(warm_in), f[0].plan_bytes_per_node, Median(warm_out), total);
    std::fflush(stdout);
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace kolo::daemon

int main(int argc, char** argv) { return kolo::daemon::Main(argc, argv); }
