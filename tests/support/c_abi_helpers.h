/* See c_abi_helpers.c: unknown enum values, passed the way C callers can. */
#ifndef FLASHCPU_TESTS_C_ABI_HELPERS_H
#define FLASHCPU_TESTS_C_ABI_HELPERS_H

#include <stddef.h>

#include "flashcpu/flashcpu.h"

#ifdef __cplusplus
extern "C" {
#endif

const char *fctest_dtype_name_of(int value);
size_t fctest_dtype_size_of(int value);
const char *fctest_status_name_of(int value);
void fctest_set_dtype(flashcpu_tensor *tensor, int value);

#ifdef __cplusplus
}
#endif

#endif
