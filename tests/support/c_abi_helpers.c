/* Out-of-range enum values are fine in C but undefined behaviour in C++
 * (beyond the enumeration's range), and UBSan says so. The tests that pass
 * unknown dtype and status values to the library do it through here, as a
 * C caller would. */
#include "c_abi_helpers.h"

const char *fctest_dtype_name_of(int value) {
  return flashcpu_dtype_name((flashcpu_dtype)value);
}

size_t fctest_dtype_size_of(int value) {
  return flashcpu_dtype_size((flashcpu_dtype)value);
}

const char *fctest_status_name_of(int value) {
  return flashcpu_status_name((flashcpu_status)value);
}

void fctest_set_dtype(flashcpu_tensor *tensor, int value) {
  tensor->dtype = (flashcpu_dtype)value;
}
