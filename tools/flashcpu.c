/* The flashcpu command-line tool: `flashcpu info` describes the machine and
 * what the library will use on it; `flashcpu run` times and checks
 * attention on model-shaped workloads; `flashcpu tune` measures the decode
 * kernel thresholds and writes a tune file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "common/cpu_info.h"
#include "common/quiet_openmp.h"

static void print_help(FILE *stream) {
  fprintf(stream,
          "usage: flashcpu <command> [options]\n"
          "\n"
          "Exact attention (FlashAttention) on multicore CPUs, version %s.\n"
          "\n"
          "commands:\n"
          "  info    the CPU, its ISA features, cores and caches, and the\n"
          "          plan a default context makes on it\n"
          "  run     time attention on a model-shaped workload, check it\n"
          "          against a float64 oracle, report %% of the machine's\n"
          "          ceiling\n"
          "  tune    measure which decode kernel wins where on this machine\n"
          "          and write the thresholds as a tune file\n"
          "\n"
          "`flashcpu <command> --help` describes a command's options.\n",
          flashcpu_version_string());
}

static void print_info_help(FILE *stream) {
  fprintf(stream,
          "usage: flashcpu info [--brief]\n"
          "\n"
          "Prints the library version, the CPU model, the ISA features the\n"
          "CPU and OS support, cores and hardware threads, cache sizes, and\n"
          "the plan a default context makes: the hwloc topology it sees, its\n"
          "teams (threads, cores, shared cache, scratch, NUMA node) and its\n"
          "kernel table with the ISA chosen. OMP_NUM_THREADS, FLASHCPU_ISA\n"
          "and FLASHCPU_LAUNCH shape that default context as they would any.\n"
          "\n"
          "  --brief     only the machine summary and the default's size\n"
          "  -h, --help  this help\n");
}

/* " L1d 48 KiB x2" after a comma when something was printed before. */
static void print_cache(const char *name, toolkit_cache_level level,
                        bool *printed) {
  if (level.count == 0) return;
  char size[32];
  toolkit_format_bytes(level.bytes, size, sizeof size);
  printf("%s %s %s x%d", *printed ? "," : "", name, size, level.count);
  *printed = true;
}

static int print_context(bool with_plan) {
  flashcpu_context *ctx = NULL;
  flashcpu_status status = flashcpu_context_create(NULL, &ctx);
  if (status != FLASHCPU_OK) {
    fprintf(stderr, "flashcpu info: flashcpu_context_create failed: %s: %s\n",
            flashcpu_status_name(status), flashcpu_last_error(NULL));
    return CLI_EXIT_FAILURE;
  }
  const int threads = flashcpu_context_num_threads(ctx);
  const int teams = flashcpu_context_num_teams(ctx);
  printf("default    %d thread%s in %d team%s, %s kernels\n", threads,
         threads == 1 ? "" : "s", teams, teams == 1 ? "" : "s",
         flashcpu_isa_name(flashcpu_context_isa(ctx)));
  if (with_plan) {
    size_t length = flashcpu_context_describe(ctx, NULL, 0);
    char *plan = malloc(length + 1);
    if (plan) {
      flashcpu_context_describe(ctx, plan, length + 1);
      printf("\n%s%s", plan, length && plan[length - 1] == '\n' ? "" : "\n");
      free(plan);
    }
  }
  flashcpu_context_destroy(ctx);
  return CLI_EXIT_OK;
}

int cli_info(int argc, char **argv) {
  bool with_plan = true;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      print_info_help(stdout);
      return CLI_EXIT_OK;
    }
    if (strcmp(argv[i], "--brief") == 0) {
      with_plan = false;
      continue;
    }
    fprintf(stderr,
            "flashcpu info: unknown option '%s'\n(see flashcpu info --help)\n",
            argv[i]);
    return CLI_EXIT_USAGE;
  }
  toolkit_cpu_info info;
  if (toolkit_cpu_info_query(&info) != 0)
    fprintf(stderr, "flashcpu info: hwloc could not load the topology\n");
  char features[256], memory[32];
  flashcpu_cpu_features(features, sizeof features);
  toolkit_format_bytes(info.memory_bytes, memory, sizeof memory);
  printf("flashcpu   %s\n", flashcpu_version_string());
  printf("cpu        %s\n", info.model);
  printf("isa        %s\n", features);
  printf("cores      %d cores, %d hardware threads, %d package%s, %d NUMA "
         "node%s\n",
         info.cores, info.pus, info.packages, info.packages == 1 ? "" : "s",
         info.numa_nodes, info.numa_nodes == 1 ? "" : "s");
  printf("caches    ");
  bool printed = false;
  print_cache("L1d", info.l1d, &printed);
  print_cache("L2", info.l2, &printed);
  print_cache("L3", info.l3, &printed);
  printf("%s\nmemory     %s\n", printed ? "" : " unknown", memory);
  return print_context(with_plan);
}

int main(int argc, char **argv) {
  toolkit_quiet_openmp();
  if (argc < 2) {
    print_help(stderr);
    return CLI_EXIT_USAGE;
  }
  const char *command = argv[1];
  if (strcmp(command, "-h") == 0 || strcmp(command, "--help") == 0 ||
      strcmp(command, "help") == 0) {
    print_help(stdout);
    return CLI_EXIT_OK;
  }
  if (strcmp(command, "--version") == 0) {
    printf("flashcpu %s\n", flashcpu_version_string());
    return CLI_EXIT_OK;
  }
  if (strcmp(command, "info") == 0) return cli_info(argc - 1, argv + 1);
  if (strcmp(command, "tune") == 0) return cli_tune(argc - 1, argv + 1);
  if (strcmp(command, "run") == 0) {
    run_options options;
    int status = cli_parse_run_options(argc - 1, argv + 1, &options);
    if (status >= 0) return status;
    return cli_run(&options);
  }
  fprintf(stderr,
          "flashcpu: unknown command '%s' (commands: info, run, tune; see "
          "flashcpu --help)\n",
          command);
  return CLI_EXIT_USAGE;
}
