// C++ in ring 0: global constructors and destructors, exceptions thrown
// and caught across frames, iostream, std::thread, std::mutex,
// thread_local, the STL. Prints what it checks; exits 0 when all pass.
#include <atomic>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

int constructed;

struct Global {
	Global() { constructed++; }
	~Global() { std::cout << "global destructor ran" << std::endl; }
} global_object;

thread_local int tls_counter = 100;

int deep(int n)
{
	if (n == 0)
		throw std::runtime_error("thrown 10 frames down");
	return deep(n - 1) + 1;
}

struct Guard {
	int &count;
	explicit Guard(int &c) : count(c) {}
	~Guard() { count++; }
};

int unwound;

void with_guards(int n)
{
	Guard g(unwound);
	if (n == 0)
		throw 42;
	with_guards(n - 1);
}

}  // namespace

int main()
{
	int failures = 0;

	std::cout << "global constructors: " << constructed << std::endl;
	failures += constructed != 1;

	try {
		deep(10);
		failures++;
	} catch (const std::exception &e) {
		std::cout << "caught: " << e.what() << std::endl;
	}
	try {
		with_guards(5);
	} catch (int v) {
		std::cout << "caught int " << v << ", " << unwound << " destructors ran" << std::endl;
		failures += v != 42 || unwound != 6;
	}

	std::mutex m;
	std::map<int, int> seen;
	std::atomic<int> sum{0};
	std::vector<std::thread> threads;
	for (int i = 0; i < 4; i++)
		threads.emplace_back([&, i] {
			tls_counter += i;
			std::lock_guard<std::mutex> lock(m);
			seen[i] = tls_counter;
			sum += tls_counter;
		});
	for (auto &t : threads)
		t.join();
	std::cout << "threads: " << seen.size() << ", thread_local sum " << sum << ", main's "
		  << tls_counter << std::endl;
	failures += seen.size() != 4 || sum != 406 || tls_counter != 100;

	std::ostringstream os;
	auto p = std::make_unique<std::vector<std::string>>(std::vector<std::string>{"ring", "0"});
	for (const auto &s : *p)
		os << s;
	std::cout << "stl: " << os.str() << std::endl;
	failures += os.str() != "ring0";

	std::cout << (failures ? "FAILED" : "all C++ checks passed") << std::endl;
	return failures;
}
