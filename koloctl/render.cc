#include "koloctl/render.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "koloctl/format.h"

namespace kolo::koloctl {
namespace {

using Align = Table::Align;

int AttachedRanks(const kolo::v1::JobInfo& job) {
  return static_cast<int>(std::count_if(job.ranks().begin(), job.ranks().end(),
                                        [](const auto& r) { return r.attached(); }));
}

std::string StateText(const kolo::v1::JobInfo& job) {
  return job.state().empty() ? "unknown" : job.state();
}

std::string Or(const std::string& value, const std::string& fallback) {
  return value.empty() ? fallback : value;
}

}  // namespace

std::string RenderStatus(const kolo::v1::GetStatusResponse& response) {
  const kolo::v1::NodeInfo& node = response.node();
  std::string out = absl::StrFormat(
      "kolod %s on %s (pid %d), up %s%s\n", Or(node.version(), "?"), Or(node.hostname(), "?"),
      node.pid(), FormatDuration(node.uptime_s()), node.draining() ? ", DRAINING" : "");
  Table facts({{"", Align::kLeft}, {"", Align::kLeft}});
  facts.AddRow({"socket", Or(node.socket_path(), "-")});
  facts.AddRow({"status address", Or(node.status_address(), "-")});
  facts.AddRow({"metrics port", node.metrics_port() > 0 ? absl::StrCat(node.metrics_port()) : "-"});
  facts.AddRow({"sessions", absl::StrCat(node.sessions())});
  facts.AddRow({"worker threads", absl::StrCat(node.worker_threads())});
  facts.AddRow({"fusion threshold", FormatBytes(node.fusion_threshold_bytes())});
  facts.AddRow({"log level", Or(node.log_level(), "-")});
  facts.AddRow({"stall warning",
                node.stall_warning_s() > 0 ? FormatDuration(node.stall_warning_s()) : "off"});
  facts.AddRow({"stall timeout",
                node.stall_timeout_s() > 0 ? FormatDuration(node.stall_timeout_s()) : "off"});
  facts.AddRow({"devices", node.devices().empty() ? "-" : absl::StrJoin(node.devices(), "; ")});
  out += facts.Render(2, /*header=*/false);
  if (!node.config().empty()) {
    out += "  config\n";
    // Sorted so that the output is stable (a proto map has no order).
    std::map<std::string, std::string> config(node.config().begin(), node.config().end());
    for (const auto& [key, value] : config) absl::StrAppend(&out, "    ", key, "=", value, "\n");
  }
  if (response.jobs().empty()) {
    out += "jobs: none\n";
    return out;
  }
  absl::StrAppend(&out, "jobs: ", response.jobs_size(), "\n");
  Table jobs({{"", Align::kLeft},
              {"", Align::kLeft},
              {"", Align::kLeft},
              {"", Align::kLeft},
              {"", Align::kLeft},
              {"", Align::kLeft}});
  for (const auto& job : response.jobs()) {
    jobs.AddRow({job.job_id(), StateText(job),
                 job.epoch() > 0 ? absl::StrCat("size ", job.size(), ", epoch ", job.epoch())
                                 : absl::StrCat("size ", job.size()),
                 absl::StrCat(AttachedRanks(job), "/", job.size(), " attached"),
                 absl::StrCat(job.pending_size(), " pending"),
                 job.error().empty() ? "" : absl::StrCat("error: ", job.error())});
  }
  out += jobs.Render(2, /*header=*/false);
  return out;
}

std::string RenderJobs(const kolo::v1::GetStatusResponse& response) {
  if (response.jobs().empty()) return "no jobs\n";
  Table table({{"JOB", Align::kLeft},
               {"SIZE", Align::kRight},
               {"STATE", Align::kLeft},
               {"ATTACHED", Align::kRight},
               {"RESPONSES", Align::kRight},
               {"BYTES", Align::kRight},
               {"THROUGHPUT", Align::kRight},
               {"PENDING", Align::kRight}});
  for (const auto& job : response.jobs()) {
    table.AddRow({job.job_id(), absl::StrCat(job.size()), StateText(job),
                  absl::StrCat(AttachedRanks(job), "/", job.size()), absl::StrCat(job.responses()),
                  FormatBytes(job.bytes_reduced()), FormatRate(job.bytes_per_s()),
                  absl::StrCat(job.pending_size())});
  }
  return table.Render();
}

std::string RenderJob(const kolo::v1::JobDetail& detail) {
  const kolo::v1::JobInfo& job = detail.job();
  std::string out =
      absl::StrFormat("job %s: %s, size %d, %d/%d attached, up %s\n", job.job_id(), StateText(job),
                      job.size(), AttachedRanks(job), job.size(), FormatDuration(job.uptime_s()));
  absl::StrAppend(&out, "  responses ", job.responses(), ", fused tensors ", job.fused_tensors(),
                  ", reduced ", FormatBytes(job.bytes_reduced()), ", ",
                  FormatRate(job.bytes_per_s()), "\n");
  if (job.data_plane_negotiation() > 0) {
    absl::StrAppend(
        &out, "  negotiation messages over the data plane: ", job.data_plane_negotiation(), "\n");
  }
  if (!job.error().empty()) absl::StrAppend(&out, "  error: ", job.error(), "\n");

  if (job.epoch() > 0) {
    absl::StrAppend(&out, "\nepochs (elastic; now epoch ", job.epoch(), "):\n");
    Table epochs({{"EPOCH", Align::kRight},
                  {"AT", Align::kRight},
                  {"SIZE", Align::kRight},
                  {"JOINED", Align::kLeft},
                  {"LEFT", Align::kRight},
                  {"WHY", Align::kLeft}});
    for (const auto& e : job.epochs()) {
      epochs.AddRow({absl::StrCat(e.epoch()), absl::StrFormat("+%.3fs", e.at_s()),
                     absl::StrCat(e.size()), Or(CompressRanks(e.joined()), "-"),
                     absl::StrCat(e.left()), e.reason()});
    }
    out += epochs.Render(2);
  }

  out += "\nranks:\n";
  if (job.ranks().empty()) {
    out += "  none\n";
  } else {
    Table ranks({{"RANK", Align::kRight},
                 {"PID", Align::kRight},
                 {"ATTACHED", Align::kLeft},
                 {"SUBMITTED", Align::kRight},
                 {"COMPLETED", Align::kRight},
                 {"LAST SUBMIT", Align::kRight},
                 {"LAST COMPLETE", Align::kRight},
                 {"SESSION", Align::kLeft}});
    for (const auto& r : job.ranks()) {
      ranks.AddRow({absl::StrCat(r.rank()), r.pid() > 0 ? absl::StrCat(r.pid()) : "-",
                    r.attached() ? "yes" : "no", absl::StrCat(r.submitted()),
                    absl::StrCat(r.completed()), FormatDuration(r.last_submit_age_s()),
                    FormatDuration(r.last_complete_age_s()), Or(r.session_id(), "-")});
    }
    out += ranks.Render(2);
  }

  out += "\npending tensors:\n";
  if (job.pending().empty()) {
    out += "  none\n";
  } else {
    Table pending({{"NAME", Align::kLeft},
                   {"COLLECTIVE", Align::kLeft},
                   {"WAITING", Align::kRight},
                   {"SUBMITTED", Align::kLeft},
                   {"MISSING", Align::kLeft}});
    for (const auto& p : job.pending()) {
      pending.AddRow({p.name(), p.collective(), FormatDuration(p.waiting_s()),
                      CompressRanks(p.submitted_ranks()), CompressRanks(p.missing_ranks())});
    }
    out += pending.Render(2);
  }

  if (!detail.stalls().empty()) {
    out += "\nstalls:\n";
    for (const auto& s : detail.stalls()) absl::StrAppend(&out, "  ", StallLine(s), "\n");
  }

  out += "\nrecent collectives (newest last):\n";
  if (detail.recent().empty()) {
    out += "  none\n";
  } else {
    Table recent({{"SEQ", Align::kRight},
                  {"COLLECTIVE", Align::kLeft},
                  {"NAME", Align::kLeft},
                  {"DTYPE", Align::kLeft},
                  {"OP", Align::kLeft},
                  {"BYTES", Align::kRight},
                  {"PHASE", Align::kLeft},
                  {"QUEUED AT", Align::kRight},
                  {"READY AFTER", Align::kRight},
                  {"EXECUTE", Align::kRight},
                  {"FUSED", Align::kRight},
                  {"ERROR", Align::kLeft}});
    for (const auto& c : detail.recent()) {
      recent.AddRow({absl::StrCat(c.sequence()), c.collective(), c.name(), Or(c.dtype(), "-"),
                     Or(c.op(), "-"), FormatBytes(c.bytes()), c.phase(),
                     FormatDuration(c.queued_at_s()), FormatDuration(c.ready_after_s()),
                     FormatDuration(c.execute_s()), absl::StrCat(c.fused_with()), c.error()});
    }
    out += recent.Render(2);
  }

  if (!detail.errors().empty()) {
    out += "\nerrors (newest last):\n";
    for (const auto& e : detail.errors()) absl::StrAppend(&out, "  ", e, "\n");
  }
  return out;
}

std::string StallLine(const kolo::v1::Stall& stall) {
  if (!stall.message().empty()) return stall.message();
  if (stall.kind() == "executing") {
    return absl::StrFormat("%s \"%s\" executing for %s", stall.collective(), stall.name(),
                           FormatDuration(stall.waiting_s()));
  }
  return absl::StrFormat("%s \"%s\" waiting %s for ranks %s (submitted: %s)", stall.collective(),
                         stall.name(), FormatDuration(stall.waiting_s()),
                         CompressRanks(stall.missing_ranks()),
                         CompressRanks(stall.submitted_ranks()));
}

std::string RenderStalls(const kolo::v1::ListStallsResponse& response) {
  if (response.stalls().empty()) return "no stalls\n";
  std::string out;
  for (const auto& s : response.stalls())
    absl::StrAppend(&out, s.job_id(), ": ", StallLine(s), "\n");
  out += "\n";
  Table table({{"JOB", Align::kLeft},
               {"NAME", Align::kLeft},
               {"COLLECTIVE", Align::kLeft},
               {"KIND", Align::kLeft},
               {"WAITING", Align::kRight},
               {"SUBMITTED", Align::kLeft},
               {"MISSING", Align::kLeft}});
  for (const auto& s : response.stalls()) {
    table.AddRow({s.job_id(), s.name(), s.collective(), Or(s.kind(), "-"),
                  FormatDuration(s.waiting_s()), CompressRanks(s.submitted_ranks()),
                  CompressRanks(s.missing_ranks())});
  }
  out += table.Render();
  return out;
}

}  // namespace kolo::koloctl
