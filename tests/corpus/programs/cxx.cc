// C++: templates (a class template and function templates instantiated for two types), a
// virtual call, and an exception thrown two frames deep and caught in main.
#include <stdexcept>

template <typename T>
class Accumulator {
 public:
  __attribute__((noinline)) void Add(T value) { total_ += value; }
  T total() const { return total_; }

 private:
  T total_{};
};

template <typename T>
__attribute__((noinline)) T SumTo(int n) {
  Accumulator<T> acc;
  for (int i = 1; i <= n; ++i) acc.Add(static_cast<T>(i));
  return acc.total();
}

struct Shape {
  virtual ~Shape() = default;
  virtual int Area() const = 0;
};
struct Square : Shape {
  explicit Square(int s) : side(s) {}
  __attribute__((noinline)) int Area() const override { return side * side; }
  int side;
};

__attribute__((noinline)) int Check(int value) {
  if (value > 100) throw std::runtime_error("too big");
  return value;
}
__attribute__((noinline)) int Validate(int value) { return Check(value) + 1; }

int main(int argc, char**) {
  Square square(argc + 2);
  const Shape& shape = square;
  int result = SumTo<int>(5) + static_cast<int>(SumTo<double>(4)) + shape.Area();
  try {
    result += Validate(result * 10);
  } catch (const std::runtime_error&) {
    result += 1000;
  }
  return result == 15 + 10 + 9 + 1000 ? 0 : 1;
}
