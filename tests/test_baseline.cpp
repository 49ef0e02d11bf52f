// Statistics and the baseline comparison: planted slowdowns are found, noise is not.
#include "reports_test_util.h"

#include "kan/io/text.h"
#include "kan/results/baseline.h"
#include "kan/results/statistics.h"

#include <sstream>
#include <string>
#include <vector>

namespace {

using namespace kan::results;

TEST(Statistics, QuantilesInterpolateLikeNumpy) {
  EXPECT_DOUBLE_EQ(quantile({3, 1, 2}, 0.5), 2);
  EXPECT_DOUBLE_EQ(quantile({1, 2, 3, 4}, 0.5), 2.5);
  EXPECT_DOUBLE_EQ(quantile({1, 2, 3, 4}, 0.25), 1.75);
  EXPECT_DOUBLE_EQ(quantile({1, 2, 3, 4}, 0.75), 3.25);
  EXPECT_DOUBLE_EQ(quantile({7}, 0.75), 7);
  EXPECT_THROW(quantile({}, 0.5), std::invalid_argument);
  const auto s = summarize({0.5, 0.52, 0.49, 0.51, 0.55});
  ASSERT_TRUE(s);
  EXPECT_DOUBLE_EQ(s->median, 0.51);
  EXPECT_NEAR(s->iqr, 0.52 - 0.50, 1e-15);
  EXPECT_DOUBLE_EQ(s->min, 0.49);
  EXPECT_DOUBLE_EQ(s->max, 0.55);
  EXPECT_FALSE(summarize({}));
}

TEST(Statistics, MannWhitneyExactMatchesScipy) {
  // scipy.stats.mannwhitneyu(a, b, alternative="two-sided", method="exact")
  auto t = mann_whitney_u({1, 2, 3}, {4, 5, 6});
  EXPECT_TRUE(t.exact);
  EXPECT_DOUBLE_EQ(t.u, 0);
  EXPECT_NEAR(t.p_value, 0.1, 1e-12);
  EXPECT_NEAR(t.min_p_value, 0.1, 1e-12);
  t = mann_whitney_u({1, 2, 3, 4, 5}, {6, 7, 8, 9, 10});
  EXPECT_NEAR(t.p_value, 2.0 / 252, 1e-12);
  t = mann_whitney_u({1, 4, 7}, {2, 3, 5, 6});
  EXPECT_DOUBLE_EQ(t.u, 6); // ranks 1, 4, 7 -> 12 - 6
  EXPECT_NEAR(t.p_value, 1.0, 1e-12);
  t = mann_whitney_u({6, 7, 8, 9, 10}, {1, 2, 3, 4, 5});
  EXPECT_DOUBLE_EQ(t.u, 25);
  EXPECT_NEAR(t.p_value, 2.0 / 252, 1e-12);
}

TEST(Statistics, MannWhitneyWithTiesUsesTheNormalApproximation) {
  // By hand, as scipy's method="asymptotic" computes it: U = 22.5 - 21 = 1.5, mean 18, tie sum
  // 6 + 60 + 6 + 6, variance 36/12 * (13 - 78/132) = 37.227, z = (16.5 - 0.5) / 6.1014,
  // p = erfc(z / sqrt 2) = 0.008733.
  const auto t = mann_whitney_u({1, 2, 2, 3, 3, 3}, {3, 4, 4, 5, 5, 6});
  EXPECT_FALSE(t.exact);
  EXPECT_DOUBLE_EQ(t.u, 1.5);
  EXPECT_NEAR(t.p_value, 0.008733, 1e-5);
  EXPECT_DOUBLE_EQ(mann_whitney_u({1, 1}, {1, 1}).p_value, 1);
  EXPECT_THROW(mann_whitney_u({}, {1}), std::invalid_argument);
}

TEST(Baseline, PlantedSlowdownIsFlaggedSlower) {
  const auto old_run = test::synthetic_run(1, 1.0, 2.0, 10);
  const auto new_run = test::synthetic_run(2, 1.3, 2.0, 10); // toy 30% slower, deep unchanged
  const auto diff = compare_with_baseline(old_run, new_run);
  ASSERT_EQ(diff.changes.size(), 2u);
  const auto& toy = diff.changes[0];
  EXPECT_EQ(toy.name, "toy");
  EXPECT_EQ(toy.verdict, Verdict::kSlower) << toy.note;
  EXPECT_NEAR(*toy.ratio, 1.3, 0.05);
  EXPECT_LT(*toy.p_value, 0.001);
  EXPECT_EQ(diff.changes[1].verdict, Verdict::kSame) << diff.changes[1].note;
  EXPECT_TRUE(diff.warnings.empty());
  ASSERT_EQ(diff.regressions(10).size(), 1u);
  EXPECT_EQ(diff.regressions(10)[0].name, "toy");
  EXPECT_TRUE(diff.regressions(40).empty());
  // The other way round it is faster.
  EXPECT_EQ(compare_with_baseline(new_run, old_run).changes[0].verdict, Verdict::kFaster);
}

TEST(Baseline, SameDistributionIsSame) {
  for (uint32_t seed = 0; seed < 20; ++seed) {
    const auto diff = compare_with_baseline(test::synthetic_run(100 + seed, 1.0, 2.0, 10),
                                            test::synthetic_run(200 + seed, 1.0, 2.0, 10));
    for (const auto& c : diff.changes)
      EXPECT_EQ(c.verdict, Verdict::kSame) << "seed " << seed << " " << c.name << ": " << c.note;
    EXPECT_TRUE(diff.regressions().empty());
  }
}

TEST(Baseline, SmallChangeBelowTheThresholdIsSame) {
  // 3% slower with 0.1% noise: significant, but not relevant at 5%.
  auto old_run = test::synthetic_run(1, 1.0, 2.0, 10);
  auto new_run = old_run;
  for (auto& t : new_run.cases[0].epoch_seconds)
    t *= 1.03;
  *new_run.cases[0].median_epoch_seconds *= 1.03;
  const auto diff = compare_with_baseline(old_run, new_run);
  EXPECT_EQ(diff.changes[0].verdict, Verdict::kSame);
  EXPECT_NE(diff.changes[0].note.find("change below 5%"), std::string::npos)
      << diff.changes[0].note;
  BaselineOptions strict;
  strict.min_change = 0.01;
  EXPECT_EQ(compare_with_baseline(old_run, new_run, strict).changes[0].verdict, Verdict::kSlower);
}

TEST(Baseline, FewRepetitionsFallBackToRanges) {
  const auto diff = compare_with_baseline(test::synthetic_run(1, 1.0, 2.0, 3),
                                          test::synthetic_run(2, 1.3, 2.0, 3));
  EXPECT_EQ(diff.changes[0].verdict, Verdict::kSlower) << diff.changes[0].note;
  EXPECT_NE(diff.changes[0].note.find("too few repetitions"), std::string::npos);
  EXPECT_EQ(diff.changes[1].verdict, Verdict::kSame) << diff.changes[1].note;
  const auto single = compare_with_baseline(test::synthetic_run(1, 1.0, 2.0, 1),
                                            test::synthetic_run(2, 1.3, 2.0, 1));
  EXPECT_EQ(single.changes[0].verdict, Verdict::kSlower);
  EXPECT_NE(single.changes[0].note.find("no noise estimate"), std::string::npos);
}

TEST(Baseline, UnmeasuredCasesAreNotComparable) {
  auto old_run = test::sample_results();
  auto new_run = test::sample_results();
  new_run.cases.erase(new_run.cases.begin()); // toy/cpu only in the baseline
  new_run.comparisons.clear();
  CaseResult extra = new_run.cases[1];
  extra.name = "million";
  new_run.cases.push_back(extra);
  const auto diff = compare_with_baseline(old_run, new_run);
  ASSERT_EQ(diff.changes.size(), 5u);
  // wide/cuda is skipped on both sides; million only here; toy/cpu only there.
  EXPECT_EQ(diff.changes[2].target, "cuda");
  EXPECT_EQ(diff.changes[2].verdict, Verdict::kUnavailable);
  EXPECT_NE(diff.changes[2].note.find("skipped"), std::string::npos) << diff.changes[2].note;
  EXPECT_EQ(diff.changes[3].note, "not in the baseline");
  EXPECT_EQ(diff.changes[4].note, "only in the baseline");
  EXPECT_EQ(diff.count(Verdict::kUnavailable), 3u);
}

TEST(Baseline, DifferentMachinesAndDevicesWarn) {
  auto old_run = test::synthetic_run(1, 1.0, 2.0, 5);
  auto new_run = test::synthetic_run(2, 1.0, 2.0, 5);
  new_run.environment.hostname = "laptop";
  new_run.environment.cuda_devices[0].name = "NVIDIA A100";
  new_run.cases[1].device = "cuda:1";
  const auto diff = compare_with_baseline(old_run, new_run);
  const auto all = [&] {
    std::string text;
    for (const auto& w : diff.warnings)
      text += w + "\n";
    return text;
  }();
  EXPECT_NE(all.find("different machine: baseline \"gpu-box\", this run \"laptop\""),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("different GPUs"), std::string::npos) << all;
  EXPECT_NE(all.find("case deep target cpu ran on different devices: baseline cpu, this run "
                     "cuda:1"),
            std::string::npos)
      << all;
  const auto table = format_baseline_table(diff);
  EXPECT_EQ(table.rfind("warning: different machine", 0), 0u) << table;
}

// A name or target label of any length is printed in full once; the columns keep their width,
// so the table grows with its input, not with rows x the longest name.
TEST(Baseline, LongNamesAndLabelsDoNotWidenTheTable) {
  const auto split = [](const std::string& text) {
    std::vector<std::string> lines;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);)
      lines.push_back(line);
    return lines;
  };
  const auto normal = split(format_baseline_table(compare_with_baseline(
      test::synthetic_run(1, 1.0, 2.0, 5), test::synthetic_run(2, 1.0, 2.0, 5))));
  ASSERT_EQ(normal.size(), 4u);
  const std::string huge(100000, 'n');
  for (const bool in_target : {false, true}) {
    SCOPED_TRACE(in_target ? "target" : "name");
    auto old_run = test::synthetic_run(1, 1.0, 2.0, 5);
    auto new_run = test::synthetic_run(2, 1.0, 2.0, 5);
    for (auto* run : {&old_run, &new_run})
      (in_target ? run->cases[1].target : run->cases[1].name) = huge;
    const auto table = format_baseline_table(compare_with_baseline(old_run, new_run));
    EXPECT_LT(table.size(), 2 * huge.size());
    const auto lines = split(table);
    ASSERT_EQ(lines.size(), 5u) << table.substr(0, 1000);
    // The header and the other rows are as without the long cell.
    EXPECT_EQ(lines[0], normal[0]);
    EXPECT_EQ(lines[1], normal[1]);
    EXPECT_EQ(lines[4], normal[3]);
    // The long cell in full, and the rest of its row on the next line, in its columns.
    const size_t next_column = normal[0].find(in_target ? "dtype" : "target");
    EXPECT_EQ(lines[2].substr(lines[2].size() - huge.size()), huge);
    EXPECT_EQ(lines[3].find_first_not_of(' '), next_column) << lines[3];
    const auto deep = normal[2].substr(next_column);
    EXPECT_EQ(lines[3].substr(next_column), deep);
  }
  // A name one longer than the column's cap still moves the row on: never two cells touching.
  auto old_run = test::synthetic_run(1, 1.0, 2.0, 5);
  auto new_run = test::synthetic_run(2, 1.0, 2.0, 5);
  for (auto* run : {&old_run, &new_run})
    run->cases[1].name = std::string(41, 'x');
  const auto lines = split(format_baseline_table(compare_with_baseline(old_run, new_run)));
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(lines[2], std::string(41, 'x'));
}

TEST(Baseline, TableHasOneLinePerCase) {
  const auto diff = compare_with_baseline(test::synthetic_run(1, 1.0, 2.0, 10),
                                          test::synthetic_run(2, 1.3, 2.0, 10));
  const auto table = format_baseline_table(diff);
  EXPECT_NE(table.find("case"), std::string::npos);
  EXPECT_NE(table.find("slower"), std::string::npos) << table;
  EXPECT_NE(table.find("1 slower, 0 faster, 1 same, 0 not comparable"), std::string::npos) << table;
  EXPECT_EQ(std::count(table.begin(), table.end(), '\n'), 4) << table;
  EXPECT_EQ(kan::io::format_seconds(0.512), "512 ms");
  EXPECT_EQ(kan::io::format_seconds(1.234), "1.23 s");
  EXPECT_EQ(kan::io::format_seconds(85.1e-6), "85.1 us");
}

} // namespace
