/* The degree-6 polynomial for 2^f, f in [-0.5, 0.5], that every ISA's
 * vector exp2 evaluates (Horner, highest degree first): one set of numbers,
 * so the ISAs agree to the ulp budget their tests check. */
#ifndef FLASHCPU_SIMD_EXP2_POLY_H
#define FLASHCPU_SIMD_EXP2_POLY_H

#define FC_EXP2_C6 1.535336188319500e-4f
#define FC_EXP2_C5 1.339887440266574e-3f
#define FC_EXP2_C4 9.618437357674640e-3f
#define FC_EXP2_C3 5.550332471162809e-2f
#define FC_EXP2_C2 2.402264791363012e-1f
#define FC_EXP2_C1 6.931472028550421e-1f
#define FC_EXP2_C0 1.0f

/* 2^f on [0, 1] to 1.5e-7 relative (mean 5e-9), exactly 1 at f = 0 and
 * 2 at f = 1, by 1 + f (C1 + f (C2 + f (C3 + f (C4 + f C5)))) (a relative
 * minimax fit with both ends pinned, coefficients rounded to f32): for
 * weights that are rounded to bf16 next. Their unrounded sum makes the
 * log-sum-exp, which must stay within a few f32 ulps of the naive code's:
 * degree 4 (2.9e-6) missed that by 1e-6. */
#define FC_EXP2_BF16_C5 1.879318617e-3f
#define FC_EXP2_BF16_C4 8.990994655e-3f
#define FC_EXP2_BF16_C3 5.581867695e-2f
#define FC_EXP2_BF16_C2 2.401593179e-1f
#define FC_EXP2_BF16_C1 6.931517124e-1f

#endif
