/* The constants of the log2-domain softmax, defined once. */
#ifndef FLASHCPU_COMMON_MATH_CONSTANTS_H
#define FLASHCPU_COMMON_MATH_CONSTANTS_H

#define FC_LOG2E_F 1.44269504088896340736f /* log2(e): ln -> log2 domain */
#define FC_LN2_F 0.69314718055994530942f   /* ln(2): log2 -> ln domain */

#endif
