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

#endif
