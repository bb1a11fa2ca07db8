/* ISA support, ranking and names. */
#ifndef FLASHCPU_DISPATCH_ISA_H
#define FLASHCPU_DISPATCH_ISA_H

#include "dispatch/cpu_features.h"
#include "flashcpu/flashcpu.h"

/* Whether the features allow isa at all (AUTO and SCALAR: always). */
int fc_isa_supported(const fc_cpu_features *features, flashcpu_isa isa);
/* Whether isa is at or below cap (AUTO: no cap). NEON and the x86 ISAs
 * never meet on one machine; each is "below" the other's cap. */
int fc_isa_within(flashcpu_isa isa, flashcpu_isa cap);
/* The best ISA the features allow within cap. */
flashcpu_isa fc_best_isa(const fc_cpu_features *features, flashcpu_isa cap);
/* FLASHCPU_ISA's value: the ISA, AUTO for NULL/empty, -1 for no ISA. */
int fc_isa_parse(const char *text);

#endif
