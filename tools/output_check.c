/* Tolerance of a checked row, in units of max|v| over the keys it sees
 * (the output is a convex combination of those V rows, so |out| <= max|v|):
 *
 *   tol = max|v| * (u_out + 4 * u32 * (3 * D + 2 * softcap + 2 * sqrt(n) + 8))
 *
 * - u_out: unit roundoff of the output dtype (f32 2^-24, f16 2^-11,
 *   bf16 2^-8): the final rounding of a value of magnitude <= max|v|. The
 *   inputs cost nothing: the oracle reads the same stored values exactly.
 * - the float32 term: a score is a dot product of D terms of magnitude
 *   <= 1 scaled by 1/sqrt(D); its rounding error, with the usual sqrt(n)
 *   growth of rounding errors that are not correlated (Higham & Mary), is
 *   about D * u32 in absolute terms, which is a relative error of the same
 *   size in its softmax weight (x log2(e) for exp2), and a weight error e
 *   moves the output by at most 2 * e * max|v|. Softcap's tanhf adds a few
 *   ulps of the cap to the score. Summing n visible keys' weights and
 *   weighted V rows adds about sqrt(n) * u32 each. The factor 4 and the +8
 *   (exp2f and the final division) are margin.
 * A wrong mask, GQA mapping or rescale gives errors of order max|v| / n or
 * more, far above this bound for every dtype. */
#include "output_check.h"

#include <math.h>
#include <stdlib.h>

#include "oracle.h"

static double unit_roundoff(flashcpu_dtype dtype) {
  switch (dtype) {
  case FLASHCPU_DTYPE_F16:
    return ldexp(1.0, -11);
  case FLASHCPU_DTYPE_BF16:
    return ldexp(1.0, -8);
  default:
    return ldexp(1.0, -24);
  }
}

static uint64_t next_random(uint64_t *state) {
  *state = *state * 6364136223846793005ull + 1442695040888963407ull;
  return *state >> 33;
}

/* A quantized V is read as the oracle reads it: dequantized with scales. */
static double max_abs_visible_v(const flashcpu_tensor *v,
                                const flashcpu_kv_scales *scales,
                                int64_t kv_head, int64_t begin, int64_t end) {
  double largest = 0.0;
  for (int64_t j = begin; j < end; j++)
    for (int64_t d = 0; d < v->dims[3]; d++) {
      double value = fabs(
          scales ? flashcpu_oracle_load_quantized(v, scales, 0, j, kv_head, d)
                 : flashcpu_oracle_load(v, 0, j, kv_head, d));
      if (value > largest) largest = value;
    }
  return largest;
}

/* Serve checks the chunk on every other sample: among 33 requests a
 * uniform draw would seldom pick it. */
static int64_t sample_request(const toolkit_workload *workload, int sample,
                              uint64_t *state) {
  const int64_t requests = workload->num_requests;
  if (workload->spec.phase == TOOLKIT_PHASE_SERVE && sample % 2 == 1)
    return requests - 1;
  const int64_t choices =
      workload->spec.phase == TOOLKIT_PHASE_SERVE ? requests - 1 : requests;
  return (int64_t)(next_random(state) % (uint64_t)choices);
}

output_check_result output_check_rows(const toolkit_workload *workload,
                                      int layer, int rows, uint64_t seed) {
  output_check_result result = {0, 0.0, 0.0, 0.0, true};
  const toolkit_workload_spec *spec = &workload->spec;
  const toolkit_preset *preset = spec->preset;
  const int64_t D = preset->head_dim;
  const int64_t group = preset->q_heads / preset->kv_heads;
  double *expected = malloc((size_t)D * sizeof(double));
  if (!expected) {
    result.passed = false;
    return result;
  }
  const double u32 = ldexp(1.0, -24), u_out = unit_roundoff(spec->out_dtype);
  uint64_t state = seed;
  /* The request viewed last: paged requests are copied out of their pages
   * for the oracle, once per request in a row. */
  toolkit_request_view view;
  int64_t viewed = -1;
  for (int sample = 0; sample < rows; sample++) {
    const int64_t r = sample_request(workload, sample, &state);
    const int64_t h =
        (int64_t)(next_random(&state) % (uint64_t)preset->q_heads);
    const toolkit_workload_spec request =
        toolkit_workload_request_spec(workload, r);
    const int64_t i = (int64_t)(next_random(&state) % (uint64_t)request.q_rows);
    if (r != viewed) {
      if (viewed >= 0) toolkit_request_view_free(&view);
      viewed = -1;
      if (toolkit_workload_request_view(workload, layer, r, &view) != 0) {
        result.passed = false;
        break;
      }
      viewed = r;
    }
    int64_t begin, end;
    toolkit_visible_keys(&request, i, &begin, &end);
    double lse;
    flashcpu_oracle_row(&view.q, &view.k, &view.v, &view.params, 0, h, i,
                        expected, &lse);
    const double visible = (double)(end - begin);
    const double tolerance =
        max_abs_visible_v(&view.v, view.params.v_scales, h / group, begin,
                          end) *
        (u_out + 4.0 * u32 *
                     (3.0 * (double)D + 2.0 * spec->softcap +
                      2.0 * sqrt(visible) + 8.0));
    for (int64_t d = 0; d < D; d++) {
      double got = flashcpu_oracle_load(&view.out, 0, i, h, d);
      double error = fabs(got - expected[d]);
      if (isnan(got) != isnan(expected[d]))
        error = INFINITY;
      else if (isnan(got))
        error = 0.0; /* both NaN: agreed */
      double ratio =
          tolerance > 0.0 ? error / tolerance : (error > 0.0 ? INFINITY : 0.0);
      if (ratio > result.worst_ratio) result.worst_ratio = ratio;
      if (error > result.max_error || (result.rows_checked == 0 && d == 0)) {
        result.max_error = error;
        result.max_tolerance = tolerance;
      }
      if (!(error <= tolerance)) result.passed = false;
    }
    result.rows_checked++;
  }
  if (viewed >= 0) toolkit_request_view_free(&view);
  free(expected);
  return result;
}
