#include "shapes.h"

#include <sstream>

namespace {

struct Circle : Shape {
	double r;
	explicit Circle(double r_) : r(r_) {}
	double area() const override { return 3.0 * r * r; }
	std::string name() const override { return "circle"; }
};

struct Rect : Shape {
	double w, h;
	Rect(double w_, double h_) : w(w_), h(h_) {}
	double area() const override { return w * h; }
	std::string name() const override { return "rect"; }
};

}  // namespace

std::unique_ptr<Shape> make_shape(const std::string &spec)
{
	std::istringstream in(spec);
	std::string kind;
	double a = 0, b = 0;

	in >> kind >> a;
	if (kind == "circle")
		return std::make_unique<Circle>(a);
	if (kind == "rect" && in >> b)
		return std::make_unique<Rect>(a, b);
	throw BadShape("cannot make '" + spec + "'");
}
