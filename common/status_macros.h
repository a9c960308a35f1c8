// KOLO_RETURN_IF_ERROR and KOLO_ASSIGN_OR_RETURN: early returns for
// absl::Status and absl::StatusOr.
#pragma once

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define KOLO_STATUS_CONCAT_INNER_(a, b) a##b
#define KOLO_STATUS_CONCAT_(a, b) KOLO_STATUS_CONCAT_INNER_(a, b)

#define KOLO_RETURN_IF_ERROR(expr)               \
  do {                                           \
    ::absl::Status kolo_status_ = (expr);        \
    if (!kolo_status_.ok()) return kolo_status_; \
  } while (0)

#define KOLO_ASSIGN_OR_RETURN(lhs, expr) \
  KOLO_ASSIGN_OR_RETURN_IMPL_(KOLO_STATUS_CONCAT_(kolo_statusor_, __LINE__), lhs, expr)

#define KOLO_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return std::move(tmp).status();    \
  lhs = std::move(tmp).value()
