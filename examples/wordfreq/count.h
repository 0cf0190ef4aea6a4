#include <stddef.h>
struct word { char *text; int n; };
size_t count_words(const char *text, struct word **out);
