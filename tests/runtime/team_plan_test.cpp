// The team planner on synthetic and XML topologies: membership, sizes,
// pinning fallback (synthetic topologies report no binding support).
#include <gtest/gtest.h>

#include <cstdio>
#include <set>
#include <string>
#include <vector>

extern "C" {
#include "runtime/team_plan.h"
#include "runtime/topology.h"
}

namespace {

struct Planned {
  fc_topology topology{};
  fc_team_plan plan{};
  bool loaded = false, planned = false;
  ~Planned() {
    if (planned) fc_team_plan_free(&plan);
    if (loaded) fc_topology_free(&topology);
  }
};

// Loads `synthetic` (restricted to `cpuset` when given) and plans `threads`
// threads (0: one per allowed core) at `level`.
void Plan(Planned &p, const char *synthetic, int threads,
          flashcpu_team_level level, int max_team = 0,
          const char *cpuset = nullptr, const char *xml = nullptr) {
  fc_topology_source source{synthetic, xml, cpuset};
  char error[256] = "";
  ASSERT_EQ(fc_topology_load(&source, &p.topology, error, sizeof error), 0)
      << error;
  p.loaded = true;
  if (threads == 0) threads = p.topology.core_count;
  ASSERT_EQ(fc_team_plan_build(&p.topology, threads, level, max_team, &p.plan,
                               error, sizeof error),
            0)
      << error;
  p.planned = true;
}

// Every thread appears once, teams are contiguous and ranks run 0..size-1.
void ExpectConsistent(const fc_team_plan &plan) {
  int expected_first = 0;
  for (int t = 0; t < plan.team_count; t++) {
    const fc_team_info &team = plan.teams[t];
    EXPECT_EQ(team.first_thread, expected_first);
    EXPECT_GE(team.size, 1);
    for (int r = 0; r < team.size; r++) {
      const fc_thread_place &place = plan.threads[team.first_thread + r];
      EXPECT_EQ(place.team, t);
      EXPECT_EQ(place.rank, r);
    }
    EXPECT_GE(team.scratch_bytes, FC_MIN_TEAM_SCRATCH);
    expected_first += team.size;
  }
  EXPECT_EQ(expected_first, plan.thread_count);
}

std::vector<int> TeamSizes(const fc_team_plan &plan) {
  std::vector<int> sizes;
  for (int t = 0; t < plan.team_count; t++) sizes.push_back(plan.teams[t].size);
  return sizes;
}

const char *kTwoPackages = "pack:2 numa:2 l3:1 core:8 pu:2";

TEST(TeamPlan, TwoPackagesTwoNumaL3Teams) {
  Planned p;
  Plan(p, kTwoPackages, 0, FLASHCPU_TEAM_L3);
  EXPECT_EQ(p.topology.core_count, 32); // cores, not hyperthreads
  EXPECT_FALSE(p.topology.can_bind_threads);
  EXPECT_FALSE(p.plan.pinned); // synthetic: no binding, threads unpinned
  ExpectConsistent(p.plan);
  EXPECT_EQ(TeamSizes(p.plan), std::vector<int>(4, 8));
  // Each team's cores lie under one L3 and its NUMA node is that L3's.
  for (int t = 0; t < p.plan.team_count; t++) {
    const fc_team_info &team = p.plan.teams[t];
    EXPECT_EQ(team.domain->type, HWLOC_OBJ_L3CACHE);
    EXPECT_EQ(team.numa_os_index, t);
    for (int r = 0; r < team.size; r++) {
      const fc_core &core =
          p.topology.cores[p.plan.threads[team.first_thread + r].core];
      EXPECT_TRUE(
          hwloc_bitmap_isincluded(core.object->cpuset, team.domain->cpuset));
    }
  }
}

TEST(TeamPlan, NumaLevelMatchesNodes) {
  Planned p;
  Plan(p, kTwoPackages, 0, FLASHCPU_TEAM_NUMA);
  ExpectConsistent(p.plan);
  EXPECT_EQ(TeamSizes(p.plan), std::vector<int>(4, 8));
  for (int t = 0; t < p.plan.team_count; t++)
    EXPECT_EQ(p.plan.teams[t].domain->type, HWLOC_OBJ_NUMANODE);
}

TEST(TeamPlan, CoreLevelAndHyperthreadsShareTheirCore) {
  Planned p;
  Plan(p, kTwoPackages, 64, FLASHCPU_TEAM_CORE);
  ExpectConsistent(p.plan);
  EXPECT_EQ(TeamSizes(p.plan), std::vector<int>(32, 2));
  std::set<int> pus;
  for (int t = 0; t < p.plan.team_count; t++) {
    const fc_team_info &team = p.plan.teams[t];
    const fc_thread_place &a = p.plan.threads[team.first_thread];
    const fc_thread_place &b = p.plan.threads[team.first_thread + 1];
    EXPECT_EQ(a.core, b.core);
    EXPECT_NE(a.pu_os_index, b.pu_os_index);
    pus.insert(a.pu_os_index);
    pus.insert(b.pu_os_index);
  }
  EXPECT_EQ(pus.size(), 64u); // every hyperthread used once
}

TEST(TeamPlan, FirstThreadsTakeOnePuPerCore) {
  Planned p;
  Plan(p, kTwoPackages, 32, FLASHCPU_TEAM_CORE);
  std::set<int> cores;
  for (int i = 0; i < p.plan.thread_count; i++)
    cores.insert(p.plan.threads[i].core);
  EXPECT_EQ(cores.size(), 32u);
}

TEST(TeamPlan, SingleCore) {
  Planned p;
  Plan(p, "core:1 pu:1", 0, FLASHCPU_TEAM_AUTO);
  ExpectConsistent(p.plan);
  EXPECT_EQ(p.plan.thread_count, 1);
  EXPECT_EQ(p.plan.team_count, 1);
  EXPECT_EQ(p.plan.level, FLASHCPU_TEAM_CORE);
  Planned over;
  Plan(over, "core:1 pu:1", 3, FLASHCPU_TEAM_L3);
  ExpectConsistent(over.plan);
  EXPECT_EQ(TeamSizes(over.plan), std::vector<int>{3});
}

TEST(TeamPlan, SixtyFourCoresL3PerEight) {
  Planned p;
  Plan(p, "pack:1 l3:8 core:8 pu:1", 0, FLASHCPU_TEAM_L3);
  ExpectConsistent(p.plan);
  EXPECT_EQ(TeamSizes(p.plan), std::vector<int>(8, 8));
  // A shared L3's share for a team of all its cores is the whole cache.
  EXPECT_EQ(p.plan.teams[0].cache_bytes, (size_t)16 << 20);

  Planned capped;
  Plan(capped, "pack:1 l3:8 core:8 pu:1", 0, FLASHCPU_TEAM_L3, 4);
  ExpectConsistent(capped.plan);
  EXPECT_EQ(TeamSizes(capped.plan), std::vector<int>(16, 4));
  EXPECT_EQ(capped.plan.teams[0].cache_bytes, (size_t)8 << 20);

  Planned automatic; // private L2s (none here): auto gives core teams
  Plan(automatic, "pack:1 l3:8 core:8 pu:1", 0, FLASHCPU_TEAM_AUTO);
  EXPECT_EQ(automatic.plan.level, FLASHCPU_TEAM_CORE);
  EXPECT_EQ(automatic.plan.team_count, 64);
}

TEST(TeamPlan, AutoPicksSharedL2) {
  Planned p;
  Plan(p, "pack:1 l3:2 l2:4 core:2 pu:1", 0, FLASHCPU_TEAM_AUTO);
  EXPECT_EQ(p.plan.level, FLASHCPU_TEAM_L2);
  ExpectConsistent(p.plan);
  EXPECT_EQ(TeamSizes(p.plan), std::vector<int>(8, 2));
}

TEST(TeamPlan, AsymmetricCpuset) {
  // PUs 0-5 are cores 0-2 (L3 #0); PUs 16,17 are core 8 (L3 #1).
  Planned p;
  Plan(p, kTwoPackages, 0, FLASHCPU_TEAM_L3, 0, "0-5,16-17");
  EXPECT_EQ(p.topology.core_count, 4);
  ExpectConsistent(p.plan);
  EXPECT_EQ(TeamSizes(p.plan), (std::vector<int>{3, 1}));
  for (int i = 0; i < p.plan.thread_count; i++) {
    int pu = p.plan.threads[i].pu_os_index;
    EXPECT_TRUE((pu >= 0 && pu <= 5) || pu == 16 || pu == 17) << pu;
  }
}

TEST(TeamPlan, XmlTopologyRoundTrip) {
  // Export a synthetic topology to XML and plan on the XML: same teams.
  hwloc_topology_t synthetic;
  ASSERT_EQ(hwloc_topology_init(&synthetic), 0);
  ASSERT_EQ(hwloc_topology_set_synthetic(synthetic, kTwoPackages), 0);
  ASSERT_EQ(hwloc_topology_load(synthetic), 0);
  std::string path = ::testing::TempDir() + "flashcpu_topology.xml";
  ASSERT_EQ(hwloc_topology_export_xml(synthetic, path.c_str(), 0), 0);
  hwloc_topology_destroy(synthetic);

  Planned p;
  Plan(p, nullptr, 0, FLASHCPU_TEAM_L3, 0, nullptr, path.c_str());
  std::remove(path.c_str());
  EXPECT_FALSE(p.plan.pinned);
  ExpectConsistent(p.plan);
  EXPECT_EQ(TeamSizes(p.plan), std::vector<int>(4, 8));
}

TEST(TeamPlan, BadSourcesFailWithMessage) {
  fc_topology topology;
  char error[256] = "";
  fc_topology_source bad_synthetic{"pack:banana", nullptr, nullptr};
  EXPECT_NE(fc_topology_load(&bad_synthetic, &topology, error, sizeof error),
            0);
  EXPECT_NE(std::string(error).find("synthetic"), std::string::npos) << error;
  fc_topology_source no_cpu{"core:2 pu:1", nullptr, "40-41"};
  EXPECT_NE(fc_topology_load(&no_cpu, &topology, error, sizeof error), 0);
  EXPECT_NE(std::string(error).find("no CPU"), std::string::npos) << error;
}

TEST(TeamPlan, ThisMachinePinsWhereSupported) {
  Planned p;
  Plan(p, nullptr, 0, FLASHCPU_TEAM_AUTO);
  ExpectConsistent(p.plan);
  EXPECT_EQ(p.plan.pinned, p.topology.can_bind_threads);
  EXPECT_GE(p.topology.core_count, 1);
}

} // namespace
