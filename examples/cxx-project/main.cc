// Virtual calls, RTTI and an exception type thrown in one translation
// unit and caught in another, across the image's unwind tables.
#include <algorithm>
#include <iostream>
#include <typeinfo>
#include <vector>

#include "shapes.h"

int main(int argc, char **argv)
{
	std::vector<std::unique_ptr<Shape>> shapes;
	int bad = 0;

	for (int i = 1; i < argc; i++) {
		try {
			shapes.push_back(make_shape(argv[i]));
		} catch (const BadShape &e) {
			std::cout << "refused: " << e.what() << " (" << (typeid(e) == typeid(BadShape)) << ")\n";
			bad++;
		}
	}
	std::sort(shapes.begin(), shapes.end(),
		  [](const auto &x, const auto &y) { return x->area() < y->area(); });
	for (const auto &s : shapes)
		std::cout << s->name() << " " << s->area() << "\n";
	return bad;
}
