// The MPI suites' main: MPI around GoogleTest, and a watchdog that turns a
// test which does not end (a rank waiting on a collective another rank
// skipped) into a failure that names the test, instead of a stuck run.
// Run under mpirun with any number of ranks; every rank runs every test.
#include <mpi.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <gtest/gtest.h>

namespace {

// Seconds one test may take on any rank (the slowest takes a few):
// FLASHCPU_MPI_TEST_SECONDS, else 60.
unsigned test_seconds = 60;
char running_test[256] = "(between tests)";

void OnAlarm(int) {
  char line[400];
  const int length =
      snprintf(line, sizeof line,
               "flashcpu MPI tests: %s did not end within %u s on this rank "
               "(a hang): failing\n",
               running_test, test_seconds);
  if (length > 0) (void)!write(2, line, static_cast<size_t>(length));
  _exit(3);
}

class Watchdog : public testing::EmptyTestEventListener {
  void OnTestStart(const testing::TestInfo &info) override {
    snprintf(running_test, sizeof running_test, "%s.%s", info.test_suite_name(),
             info.name());
    alarm(test_seconds);
  }
  void OnTestEnd(const testing::TestInfo &) override { alarm(0); }
};

// Failures of a rank other than 0, which has no result printer.
class FailurePrinter : public testing::EmptyTestEventListener {
public:
  explicit FailurePrinter(int rank) : rank_(rank) {}

private:
  void OnTestPartResult(const testing::TestPartResult &result) override {
    if (!result.failed()) return;
    fprintf(stderr, "rank %d, %s: %s:%d: %s\n", rank_, running_test,
            result.file_name() ? result.file_name() : "?", result.line_number(),
            result.summary());
  }
  int rank_;
};

} // namespace

int main(int argc, char **argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (const char *seconds = getenv("FLASHCPU_MPI_TEST_SECONDS"))
    test_seconds = static_cast<unsigned>(strtoul(seconds, nullptr, 10));
  signal(SIGALRM, OnAlarm);
  testing::UnitTest::GetInstance()->listeners().Append(new Watchdog);
  // Rank 0 prints the run; the others print only their failures.
  if (rank != 0) {
    testing::TestEventListeners &listeners =
        testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(rank));
  }
  const int failed = RUN_ALL_TESTS();
  int any_failed = 0;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (any_failed && rank == 0)
    fprintf(stderr, "flashcpu MPI tests: a test failed on some rank\n");
  MPI_Finalize();
  return any_failed ? 1 : 0;
}
