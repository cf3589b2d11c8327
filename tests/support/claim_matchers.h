// Small helpers that unpack claim results in tests with a clear failure message.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <variant>

#include "idempotency/backend.h"

namespace idempotency::testing {

/// outcome_name() names the alternative a claim returned, for failure messages.
inline std::string outcome_name(const ClaimResult& r) {
  if (std::holds_alternative<Won>(r)) return "Won";
  if (std::holds_alternative<AlreadyDone>(r)) return "AlreadyDone";
  return "HeldByOther";
}

/// won() returns the claim of a `Won` result or fails the test.
inline Claim won(const ClaimResult& r) {
  if (const auto* w = std::get_if<Won>(&r)) return w->claim;
  ADD_FAILURE() << "expected Won, got " << outcome_name(r);
  return Claim{};
}

/// done() returns an `AlreadyDone` result or fails the test.
inline AlreadyDone done(const ClaimResult& r) {
  if (const auto* d = std::get_if<AlreadyDone>(&r)) return *d;
  ADD_FAILURE() << "expected AlreadyDone, got " << outcome_name(r);
  return AlreadyDone{};
}

/// held() returns a `HeldByOther` result or fails the test.
inline HeldByOther held(const ClaimResult& r) {
  if (const auto* h = std::get_if<HeldByOther>(&r)) return *h;
  ADD_FAILURE() << "expected HeldByOther, got " << outcome_name(r);
  return HeldByOther{};
}

}  // namespace idempotency::testing
