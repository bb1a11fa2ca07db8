/* The loops around the prefill micro-kernels that do not depend on the ISA:
 * the plan, where a tile is and what it weighs, the team scratch and its
 * carving, and the launch. Portable C, compiled once (prefill_driver.c);
 * an ISA's kernel passes its register-block shape in at run time, as BLIS
 * passes MR/NR to its loops.
 *
 * A tile is (batch, kv head, block of query rows) and covers every query
 * head of the GQA group; a slot is one (query row, query head) of a tile. */
#ifndef FLASHCPU_KERNELS_PREFILL_PREFILL_DRIVER_H
#define FLASHCPU_KERNELS_PREFILL_PREFILL_DRIVER_H

#include <stdbool.h>
#include <stdint.h>

#include "common/problem.h"
#include "flashcpu/flashcpu.h"
#include "kernels/kernel_env.h"
#include "kernels/kernel_plan.h"
#include "kernels/kernel_support.h"
#include "runtime/launch.h"

/* Keys per KV block of the register-blocked kernels: a multiple of every
 * ISA's keys per S micro-tile (12 and 6). A build may set another value to
 * measure it (-DFC_PREFILL_KV_BLOCK=48). */
#ifndef FC_PREFILL_KV_BLOCK
#define FC_PREFILL_KV_BLOCK 96
#endif

/* ---- any prefill kernel: tiles, their order, the launch ---------------- */

typedef struct fc_prefill_plan {
  int64_t rows_per_tile, tiles_per_head, tile_count;
  /* Ragged batches: batch b's tiles start at tile_starts[b] (set by the
   * plan, in the problem's tile_starts); NULL: tiles_per_head for every
   * batch. */
  const int64_t *tile_starts;
  int64_t slots_per_tile; /* rows_per_tile x group */
  float q_factor;         /* applied to Q on load */
  bool scores_final;      /* no softcap or additive mask: Q carries log2(e) */
} fc_prefill_plan;

/* Tiles of about target_slots slots (at least one row, at most q_len). */
fc_prefill_plan fc_prefill_plan_for(const fc_problem *p, int64_t target_slots);

typedef struct fc_prefill_tile {
  int64_t b, kv_head, row_begin, row_end;
} fc_prefill_tile;

/* Where tile index `tile` points: tiles run over (batch, kv head, rows). */
fc_prefill_tile fc_prefill_locate(const fc_problem *p,
                                  const fc_prefill_plan *plan, int64_t tile);

/* ---- register-blocked kernels: slots in vector lanes -------------------- */

/* What an ISA's kernel tells the driver about its blocking. */
typedef struct fc_prefill_shape {
  int64_t slots;    /* query slots per register block (lanes x vectors) */
  int64_t kv_block; /* keys per KV block */
  /* head_dim and v_head_dim rounded up to this in Q^T, O^T and the K/V
   * staging (tile units take whole 32-element rows); 1: as they are. */
  int64_t dim_align;
  int64_t tile_slots; /* slots per tile (0: FC_PREFILL_TILE_SLOTS): the
                         K/V staging is amortised over them */
} fc_prefill_shape;

/* The plan of a kernel's tiles for `teams` teams: its own tile size, or a
 * smaller one that balances them better (prefill_tile_size.c). */
fc_prefill_plan fc_prefill_plan_tiles(const fc_problem *p,
                                      const fc_prefill_shape *shape, int teams);

/* n rounded up to a multiple of align. */
static inline int64_t fc_prefill_padded(int64_t n, int64_t align) {
  return (n + align - 1) / align * align;
}

enum {
  FC_PREFILL_TILE_SLOTS = 192, /* slots per tile: K/V staging amortised over
                                  this many rows x heads */
  FC_PREFILL_FLAG_STRIDE = 16  /* ints between per-rank flags (own line) */
};

/* A prefill kernel's arguments; the portable kernel uses the first five. */
typedef struct fc_prefill_args {
  const fc_problem *p;
  const fc_row_to_f32_fn *row_to_f32;
  fc_dequant_row_fn dequant_row;
  fc_prefill_plan plan;
  fc_tile_kernel tile; /* run on every tile */
  fc_prefill_shape shape;
  int64_t blocks_per_tile; /* register blocks of shape.slots per tile */
  bool stage_v; /* convert V blocks into scratch (K always is: panels) */
} fc_prefill_args;

/* A thread's view of its team's scratch for one tile. */
typedef struct fc_prefill_scratch {
  /* Shared by the team: the KV block and each rank's flag. */
  float *k_stage; /* [kv_block][D] K panels */
  float *v_stage; /* [kv_block][Dv] */
  int *flags;     /* [team size][FC_PREFILL_FLAG_STRIDE] */
  /* This thread's. */
  float *qt;       /* [my blocks][D][slots] */
  float *ot;       /* [my blocks][Dv][slots] */
  float *m, *l;    /* [my blocks][slots] */
  float *st;       /* [kv_block][slots] scores, then weights */
  float *hidden;   /* [kv_block][slots] scores kept for the careful PV */
  uint16_t *pairs; /* [kv_block / 2][slots][2] bf16 weights, for kernels
                      whose P V takes bf16 pairs */
  float *alpha, *begin, *end; /* [slots] */
  float *row;                 /* [max(D, Dv)] one row in transit */
  int32_t *mask_offsets;      /* [slots] */
  float *q_largest; /* [my blocks] the largest |Q| of each register block
                       (kernels that skip saturation where scores are
                       bounded) */
} fc_prefill_scratch;

fc_prefill_scratch fc_prefill_carve(const fc_prefill_args *a,
                                    const fc_team_view *team);

/* Plans a prefill kernel from its arguments (size bytes, which become the
 * plan's state): tiles per the args' plan, a ragged batch's tile starts
 * (in p->tile_starts, which it must have), the team scratch
 * (scratch(args, team size)); the bind runs args->tile on every tile,
 * heaviest first where masks make tiles uneven. */
flashcpu_status fc_prefill_plan_args(const fc_kernel_env *env,
                                     fc_kernel_plan *plan, const void *args,
                                     size_t size, fc_scratch_bytes_fn scratch);

/* Plans a register-blocked kernel of this shape whose tiles `tile` runs
 * (given an fc_prefill_args). */
flashcpu_status fc_prefill_plan_kernel(const fc_kernel_env *env,
                                       const fc_problem *p,
                                       const fc_prefill_shape *shape,
                                       fc_tile_kernel tile,
                                       fc_kernel_plan *plan);

/* The slot's row and head; false for padding slots past the tile. Inline:
 * the mask loops call it per slot. */
static inline bool fc_prefill_slot(const fc_problem *p, int64_t row_begin,
                                   int64_t row_end, int64_t kv_head,
                                   int64_t slot, int64_t *row, int64_t *head) {
  *row = row_begin + slot / p->group;
  *head = kv_head * p->group + slot % p->group;
  return *row < row_end;
}

#endif
