// The storm's judge on hand-made records: each defect it exists to catch is caught, and the
// crash window it must accept is accepted.
#include "storm_analysis.h"

#include <gtest/gtest.h>

namespace idempotency::testing {
namespace {

EffectRecord effect(const std::string& key, std::int64_t fence, const std::string& sender,
                    std::int64_t arrived, std::int64_t answered, bool accepted = true) {
  return {.key = key,
          .fence = fence,
          .sender = sender,
          .arrived_ns = arrived,
          .answered_ns = answered,
          .accepted = accepted};
}

TEST(StormAnalysis, OneEffectPerMessageIsClean) {
  const auto v = judge_storm(
      {"a", "b"}, {effect("a", 1, "p0.i1", 10, 20), effect("b", 1, "p1.i1", 15, 25)}, {});
  EXPECT_EQ(v.effects, 2);
  EXPECT_EQ(v.duplicates, 0);
  EXPECT_EQ(v.lost, 0);
  EXPECT_EQ(v.overlaps, 0);
  EXPECT_TRUE(v.problems.empty());
}

TEST(StormAnalysis, AMessageWithoutAnAcceptedEffectIsLost) {
  const auto v = judge_storm(
      {"a", "b"}, {effect("a", 1, "p0.i1", 10, 20), effect("b", 1, "p0.i1", 30, 40, false)}, {});
  EXPECT_EQ(v.lost, 1);
  EXPECT_EQ(v.refused, 1);
}

TEST(StormAnalysis, ARepeatAfterAKillInTheWindowIsExplained) {
  const auto v =
      judge_storm({"a"}, {effect("a", 1, "p0.i1", 10, 20), effect("a", 2, "p1.i1", 100, 110)},
                  {{.incarnation = "p0.i1", .sent_ns = 30, .reaped_ns = 35}});
  EXPECT_EQ(v.duplicates, 1);
  EXPECT_EQ(v.explained_after_answer, 1);
  EXPECT_EQ(v.unexplained, 0);
}

TEST(StormAnalysis, ARepeatWhoseProcessDiedWhileItsCallWasAtTheSinkIsExplainedMidCall) {
  const auto v =
      judge_storm({"a"}, {effect("a", 1, "p0.i1", 10, 20), effect("a", 2, "p1.i1", 100, 110)},
                  {{.incarnation = "p0.i1", .sent_ns = 15, .reaped_ns = 18}});
  EXPECT_EQ(v.explained_mid_call, 1);
  EXPECT_EQ(v.unexplained, 0);
}

TEST(StormAnalysis, ARepeatWithoutAKillOrWithTheKillAfterItIsUnexplained) {
  const auto unkilled =
      judge_storm({"a"}, {effect("a", 1, "p0.i1", 10, 20), effect("a", 2, "p1.i1", 100, 110)}, {});
  EXPECT_EQ(unkilled.unexplained, 1);
  const auto killed_later =
      judge_storm({"a"}, {effect("a", 1, "p0.i1", 10, 20), effect("a", 2, "p1.i1", 100, 110)},
                  {{.incarnation = "p0.i1", .sent_ns = 200, .reaped_ns = 210}});
  EXPECT_EQ(killed_later.unexplained, 1);
  const auto other_killed =
      judge_storm({"a"}, {effect("a", 1, "p0.i1", 10, 20), effect("a", 2, "p1.i1", 100, 110)},
                  {{.incarnation = "p0.i2", .sent_ns = 30, .reaped_ns = 35}});
  EXPECT_EQ(other_killed.unexplained, 1) << "a later incarnation of the slot is another process";
}

TEST(StormAnalysis, CallsForOneKeyAtTheSinkAtOnceOverlap) {
  const auto v = judge_storm(
      {"a"}, {effect("a", 2, "p1.i1", 15, 40), effect("a", 1, "p0.i1", 10, 30, false)}, {});
  EXPECT_EQ(v.overlaps, 1);
}

TEST(StormAnalysis, AnAcceptedFenceNotAboveThePreviousIsAViolation) {
  const auto v =
      judge_storm({"a"}, {effect("a", 2, "p0.i1", 10, 20), effect("a", 2, "p1.i1", 100, 110)},
                  {{.incarnation = "p0.i1", .sent_ns = 30, .reaped_ns = 35}});
  EXPECT_EQ(v.fence_order_violations, 1);
}

TEST(StormAnalysis, TheSinksRecordIsReadBack) {
  const auto e = parse_effects(
      R"({"key":"a","fence":3,"sender":"p2.i4","arrived_ns":5,"answered_ns":9,"accepted":false})"
      "\n");
  ASSERT_EQ(e.size(), 1U);
  EXPECT_EQ(e[0].key, "a");
  EXPECT_EQ(e[0].fence, 3);
  EXPECT_EQ(e[0].sender, "p2.i4");
  EXPECT_EQ(e[0].arrived_ns, 5);
  EXPECT_EQ(e[0].answered_ns, 9);
  EXPECT_FALSE(e[0].accepted);
}

}  // namespace
}  // namespace idempotency::testing
