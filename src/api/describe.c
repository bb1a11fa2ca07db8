#include "api/describe.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "api/context_internal.h"

/* snprintf into a buffer that may run out; `needed` keeps the full length. */
typedef struct text {
  char *buffer;
  size_t size, needed;
} text;

static void append(text *out, const char *format, ...)
    __attribute__((format(printf, 2, 3)));
static void append(text *out, const char *format, ...) {
  va_list args;
  va_start(args, format);
  size_t room = out->needed < out->size ? out->size - out->needed : 0;
  int n =
      vsnprintf(room ? out->buffer + out->needed : NULL, room, format, args);
  va_end(args);
  if (n > 0) out->needed += (size_t)n;
}

static const char *kib_or_mib(size_t bytes, char *scratch, size_t size) {
  if (bytes >= (size_t)1 << 20 && bytes % ((size_t)1 << 20) == 0)
    snprintf(scratch, size, "%zu MiB", bytes >> 20);
  else
    snprintf(scratch, size, "%zu KiB", bytes >> 10);
  return scratch;
}

static void describe_topology(const flashcpu_context *ctx, text *out) {
  const fc_topology *topology = &ctx->runtime.topology;
  hwloc_topology_t hw = topology->hw;
  hwloc_obj_t root = hwloc_get_root_obj(hw);
  const char *model = NULL;
  hwloc_obj_t package = hwloc_get_obj_by_type(hw, HWLOC_OBJ_PACKAGE, 0);
  if (package) model = hwloc_obj_get_info_by_name(package, "CPUModel");
  if (!model) model = hwloc_obj_get_info_by_name(root, "CPUModel");
  append(out, "cpu: %s\n", model ? model : "(model unknown)");
  append(out,
         "topology: %d packages, %d NUMA nodes, %d L3, %d L2, %d cores, %d PUs;"
         " allowed: %d cores (%d PUs)\n",
         hwloc_get_nbobjs_by_type(hw, HWLOC_OBJ_PACKAGE),
         hwloc_get_nbobjs_by_type(hw, HWLOC_OBJ_NUMANODE),
         hwloc_get_nbobjs_by_type(hw, HWLOC_OBJ_L3CACHE),
         hwloc_get_nbobjs_by_type(hw, HWLOC_OBJ_L2CACHE),
         hwloc_get_nbobjs_by_type(hw, HWLOC_OBJ_CORE),
         hwloc_get_nbobjs_by_type(hw, HWLOC_OBJ_PU), topology->core_count,
         hwloc_bitmap_weight(topology->allowed));
  append(out, "binding: threads %s, memory %s\n",
         topology->can_bind_threads ? "pinned" : "unpinned (not supported)",
         topology->can_bind_memory ? "bound to the team's NUMA node"
                                   : "not bound (not supported)");
}

static void describe_teams(const flashcpu_context *ctx, text *out) {
  const fc_runtime *runtime = &ctx->runtime;
  const fc_team_plan *plan = &runtime->plan;
  char size_text[32];
  append(out, "teams: %d threads in %d teams, level %s; threads from %s\n",
         plan->thread_count, plan->team_count, fc_team_level_name(plan->level),
         runtime->mode == FC_LAUNCH_HOST   ? "the host's OpenMP runtime"
         : runtime->mode == FC_LAUNCH_POOL ? "flashcpu's pool"
                                           : "an OpenMP region per call");
  for (int t = 0; t < plan->team_count; t++) {
    const fc_team_info *team = &plan->teams[t];
    append(out, "  team %d: %d thread%s; cores", t, team->size,
           team->size == 1 ? "" : "s");
    for (int i = 0; i < team->size; i++) {
      const fc_thread_place *place = &plan->threads[team->first_thread + i];
      append(out, " %u/PU%d",
             runtime->topology.cores[place->core].object->logical_index,
             place->pu_os_index);
    }
    append(out, "; shares %s #%u", hwloc_obj_type_string(team->domain->type),
           team->domain->logical_index);
    append(out, "; cache share %s",
           kib_or_mib(team->cache_bytes, size_text, sizeof size_text));
    append(out, "; scratch %s",
           kib_or_mib(runtime->teams[t].scratch_bytes, size_text,
                      sizeof size_text));
    if (team->numa_os_index >= 0)
      append(out, " on NUMA node %d%s", team->numa_os_index,
             runtime->teams[t].scratch_numa_bound ? " (bound)" : "");
    append(out, "\n");
  }
}

static void describe_kernels(const flashcpu_context *ctx, text *out) {
  char features[256], settings[512];
  fc_cpu_features_describe(fc_cpu_features_get(), features, sizeof features);
  append(out, "isa features: %s\n", *features ? features : "(none)");
  append(out, "isa chosen: %s\n", flashcpu_isa_name(ctx->table.isa));
  append(out, "kernels, in the order the choice tries them:\n");
  for (size_t i = 0; i < ctx->table.candidate_count; i++) {
    const fc_attention_kernel *k = ctx->table.candidates[i];
    char blocking[48] = "";
    if (k->family == FC_FAMILY_PREFILL)
      snprintf(blocking, sizeof blocking, " (tile slots %lld)",
               (long long)fc_kernel_tile_slots(k, &ctx->table.settings));
    append(out, "  %s: %s%s%s%s\n", fc_kernel_family_name(k->family), k->name,
           blocking,
           k->status == FC_ROW_FORCED_ONLY ? " (by the kernel setting only)"
                                           : "",
           ctx->table.forced == k ? " (forced)" : "");
  }
  if (ctx->table.forced)
    append(out, "  every call: %s (forced)\n", ctx->table.forced->name);
  append(out, "  merge: %s\n", ctx->table.merge_name);
  fc_settings_describe(&ctx->settings, settings, sizeof settings);
  append(out, "settings: %s\n", settings);
  for (int d = 0; d < 3; d++)
    append(out, "  %s row load: %s\n", flashcpu_dtype_name((flashcpu_dtype)d),
           ctx->table.row_to_f32_names[d]);
  append(out, "  quantized K/V rows: %s\n", ctx->table.dequant_row_name);
}

size_t flashcpu_context_describe(const flashcpu_context *ctx, char *buffer,
                                 size_t size) {
  text out = {buffer, buffer ? size : 0, 0};
  if (out.size) buffer[0] = '\0';
  if (!ctx) return 0;
  append(&out, "flashcpu %s\n", flashcpu_version_string());
  describe_topology(ctx, &out);
  describe_teams(ctx, &out);
  describe_kernels(ctx, &out);
  return out.needed;
}

void fc_describe_to_stderr(const flashcpu_context *ctx) {
  size_t needed = flashcpu_context_describe(ctx, NULL, 0);
  char *buffer = malloc(needed + 1);
  if (!buffer) return;
  flashcpu_context_describe(ctx, buffer, needed + 1);
  fprintf(stderr, "[flashcpu] %s", buffer);
  free(buffer);
}
