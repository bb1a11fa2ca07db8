// The same checks compiled as C++: the public header must work from the
// C++ inference engines flashcpu is written for (extern "C", no C-only
// constructs in the header).
#include "consumer.c"
