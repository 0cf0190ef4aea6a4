#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "config.h"
#include "count.h"

static int by_count(const void *a, const void *b)
{
	const struct word *x = a, *y = b;

	return x->n != y->n ? y->n - x->n : strcmp(x->text, y->text);
}

int main(int argc, char **argv)
{
	size_t len = 1;
	char *text = calloc(1, 1);

	for (int i = 1; i < argc; i++) {
		len += strlen(argv[i]) + 1;
		text = realloc(text, len);
		strcat(strcat(text, argv[i]), " ");
	}
	struct word *w;
	size_t n = count_words(text, &w);
	qsort(w, n, sizeof(*w), by_count);
	double entropy = 0, total = 0;
	for (size_t i = 0; i < n; i++)
		total += w[i].n;
	for (size_t i = 0; i < n; i++) {
		printf("%3d %s\n", w[i].n, w[i].text);
		entropy -= w[i].n / total * log2(w[i].n / total);
	}
#ifdef HAVE_SYS_EPOLL_H
	printf("configured: sys/epoll.h found\n");
#endif
	printf("%zu distinct words, entropy %.3f bits\n", n, entropy);
	return 0;
}
