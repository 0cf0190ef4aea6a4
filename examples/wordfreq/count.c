#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include "count.h"

size_t count_words(const char *text, struct word **out)
{
	size_t n = 0, cap = 16;
	struct word *w = malloc(cap * sizeof(*w));

	while (*text) {
		while (*text && !isalpha((unsigned char)*text))
			text++;
		const char *start = text;
		while (isalpha((unsigned char)*text))
			text++;
		if (text == start)
			continue;
		char *s = strndup(start, text - start);
		for (char *p = s; *p; p++)
			*p = tolower((unsigned char)*p);
		size_t i;
		for (i = 0; i < n && strcmp(w[i].text, s); i++)
			;
		if (i < n) {
			w[i].n++;
			free(s);
			continue;
		}
		if (n == cap)
			w = realloc(w, (cap *= 2) * sizeof(*w));
		w[n++] = (struct word){ s, 1 };
	}
	*out = w;
	return n;
}
